"""The lexical side: the analyzer that turns text into terms, and BM25 over those terms.

Pure computation over arrays; storage backends live in ``groundkit.storage``. Each
name here is imported from its module on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from groundkit.utils.lazy import lazy_names as _lazy_names

if TYPE_CHECKING:
    from groundkit.lexical.analyzer import Analyzer
    from groundkit.lexical.bm25 import BM25Index
    from groundkit.lexical.protocols import LexicalIndexProtocol

# The public names each module defines; imported on first use.
__getattr__, __dir__ = _lazy_names(
    __name__,
    globals(),
    {
        "groundkit.lexical.analyzer": ("Analyzer",),
        "groundkit.lexical.bm25": ("BM25Index",),
        "groundkit.lexical.protocols": ("LexicalIndexProtocol",),
    },
)

__all__ = [
    "Analyzer",
    "BM25Index",
    "LexicalIndexProtocol",
]
