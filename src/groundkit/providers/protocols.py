"""The seam every embedder fills.

A retriever only needs three facts to tell whether two embedders share one
vector space (``provider``, ``model_name``, ``dimensions``) and two coroutines
that return unit-length float32 rows, so cosine similarity is a dot product.

``typing_extensions`` supplies ``Protocol``: on Python 3.11 the ``typing``
version answers ``isinstance`` by reading every member, which would run the
``dimensions`` property of an embedder that cannot know its size before
loading and raise from inside ``isinstance``. The backport inspects members
statically, as Python 3.12 does.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import numpy.typing as npt
from typing_extensions import Protocol, runtime_checkable

from groundkit.contracts import CollectionManifest

__all__ = ["EmbedderFactory", "EmbeddingProtocol"]


@runtime_checkable
class EmbeddingProtocol(Protocol):
    """Turns text into L2-normalised float32 vectors of one fixed size.

    ``embed_documents`` returns shape ``(len(texts), dimensions)`` (``(0,
    dimensions)`` for no texts, without loading a model or calling a server);
    ``embed_query`` returns shape ``(dimensions,)``. Rows are in input order.
    An implementation whose size is unknown until it has run may raise
    ``ConfigurationError`` from ``dimensions`` and offer ``async load()``.
    """

    @property
    def provider(self) -> str:
        """Who computes the vectors (``"sentence-transformers"``, ``"ollama"``...)."""
        ...

    @property
    def model_name(self) -> str:
        """The canonical model name: the same model from two places is one name."""
        ...

    @property
    def dimensions(self) -> int:
        """Length of every vector this embedder returns."""
        ...

    async def embed_documents(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        """Embed passages for storage, one row per text."""
        ...

    async def embed_query(self, text: str) -> npt.NDArray[np.float32]:
        """Embed one search query."""
        ...


# Builds the embedder a collection's manifest names, or None when it cannot; a
# collection opened without an embedder calls it once, off the event loop.
EmbedderFactory = Callable[[CollectionManifest], EmbeddingProtocol | None]
