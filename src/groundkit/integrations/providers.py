"""Deprecated home of the provider citation mappers: import them from ``groundkit.verification``.

Kept for one release so existing imports keep working; importing it warns.
"""

from __future__ import annotations

import warnings

from groundkit.verification.providers import (
    chunk_uri,
    from_anthropic_citations,
    from_openai_annotations,
    to_anthropic_documents,
    to_anthropic_search_results,
)

__all__ = [
    "chunk_uri",
    "from_anthropic_citations",
    "from_openai_annotations",
    "to_anthropic_documents",
    "to_anthropic_search_results",
]

warnings.warn(
    "groundkit.integrations.providers moved: import its functions from groundkit.verification; "
    "the old path will be removed in the next release",
    DeprecationWarning,
    stacklevel=2,
)
