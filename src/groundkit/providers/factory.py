"""Rebuilding an embedder from what a collection recorded about it."""

from __future__ import annotations

from groundkit.contracts import CollectionManifest
from groundkit.providers.protocols import EmbeddingProtocol

__all__ = ["embedder_for_manifest"]


def embedder_for_manifest(manifest: CollectionManifest) -> EmbeddingProtocol | None:
    """The embedder ``manifest`` names, when groundkit can build it from the name alone.

    A sentence-transformers model is found by its recorded name (offline copies
    included, see ``resolve_model``); other providers need an endpoint the
    manifest does not hold, so None.
    """
    if manifest.provider != "sentence-transformers":
        return None
    from groundkit.providers.local import SentenceTransformerEmbedder

    return SentenceTransformerEmbedder(manifest.model_name)
