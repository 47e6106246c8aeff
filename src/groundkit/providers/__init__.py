"""Embedders: local sentence-transformers models and HTTP embedding servers.

Importing this package imports neither torch nor sentence-transformers; the
local embedder loads them on first use.
"""

from __future__ import annotations

from groundkit.providers.http import OllamaEmbedder, OpenAICompatibleEmbedder
from groundkit.providers.identity import ensure_identity, identity_of
from groundkit.providers.local import (
    MINILM_MODEL_NAME,
    SentenceTransformerEmbedder,
    read_dimensions,
    resolve_model,
)
from groundkit.providers.protocols import EmbeddingProtocol

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
