"""Embedders: local sentence-transformers models and HTTP embedding servers.

Importing this package imports neither torch nor sentence-transformers, nor an
HTTP client: each name is imported from its module on first use (a search
that needs only the embedding protocol never loads httpx), and the local
embedder loads torch when it first embeds.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from groundkit.utils.lazy import lazy_names as _lazy_names

if TYPE_CHECKING:
    from groundkit.providers.http import OllamaEmbedder, OpenAICompatibleEmbedder
    from groundkit.providers.identity import ensure_identity, identity_of
    from groundkit.providers.local import (
        MINILM_MODEL_NAME,
        SentenceTransformerEmbedder,
        read_dimensions,
        resolve_model,
    )
    from groundkit.providers.protocols import EmbeddingProtocol

# The public names each module defines; imported on first use.
__getattr__, __dir__ = _lazy_names(
    __name__,
    globals(),
    {
        "groundkit.providers.http": ("OllamaEmbedder", "OpenAICompatibleEmbedder"),
        "groundkit.providers.identity": ("ensure_identity", "identity_of"),
        "groundkit.providers.local": (
            "MINILM_MODEL_NAME",
            "SentenceTransformerEmbedder",
            "read_dimensions",
            "resolve_model",
        ),
        "groundkit.providers.protocols": ("EmbeddingProtocol",),
    },
)

__all__ = [
    "MINILM_MODEL_NAME",
    "EmbeddingProtocol",
    "OllamaEmbedder",
    "OpenAICompatibleEmbedder",
    "SentenceTransformerEmbedder",
    "ensure_identity",
    "identity_of",
    "read_dimensions",
    "resolve_model",
]
