"""Whatever an embedder returns, held to the protocol before anything uses it.

An embedder may be application code. Its vectors reach the vector store, fusion and
the evidence of results; a wrong count or width found there surfaces as a numpy or
``zip`` error far from its cause. Every call groundkit makes goes through
``documents`` or ``query``: the embedder's own failure becomes the error of the
stage that needed it (``IngestionError`` at ingest, ``RetrievalError`` in a search),
naming the embedder.
"""

from __future__ import annotations

from collections.abc import Awaitable, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from groundkit.errors import GroundkitError
from groundkit.providers._vectors import checked_rows, failure
from groundkit.providers.protocols import EmbeddingProtocol

__all__ = ["documents", "query"]


def _name(embedder: EmbeddingProtocol) -> str:
    model = getattr(embedder, "model_name", None)
    kind = type(embedder).__name__
    return f"{kind} ({model!r})" if isinstance(model, str) else kind


def _width(embedder: EmbeddingProtocol) -> int | None:
    try:
        width = embedder.dimensions
    except Exception:  # a size learnt on load; the count is still checked
        return None
    return width if isinstance(width, int) and not isinstance(width, bool) else None


async def _called(embedder: EmbeddingProtocol, call: Awaitable[Any], *, for_query: bool) -> Any:
    """What ``call`` returns; the embedder's own exception as the stage's error."""
    try:
        return await call
    except GroundkitError:
        raise
    except Exception as exc:
        raise failure(for_query, f"the embedder {_name(embedder)} failed: {exc}") from exc


async def documents(
    embedder: EmbeddingProtocol,
    texts: Sequence[str],
    *,
    for_query: bool = False,
    width: int | None = None,
) -> npt.NDArray[np.float32]:
    """``embedder.embed_documents(texts)``, checked: one finite row per text, of the
    embedder's width (or ``width``, the vectors they are compared with)."""
    texts = list(texts)
    rows = await _called(embedder, embedder.embed_documents(texts), for_query=for_query)
    try:
        return checked_rows(
            rows,
            count=len(texts),
            dimensions=width if width is not None else _width(embedder),
            dtype=np.float32,
        )
    except ValueError as exc:
        raise failure(
            for_query, f"the embedder {_name(embedder)} returned unusable vectors: {exc}"
        ) from None


async def query(embedder: EmbeddingProtocol, text: str) -> npt.NDArray[np.float32]:
    """``embedder.embed_query(text)``, checked: one finite vector of the embedder's
    width; a failure is a ``RetrievalError``."""
    vector = await _called(embedder, embedder.embed_query(text), for_query=True)
    try:
        flat = np.asarray(vector, dtype=np.float32)
        if flat.ndim != 1:
            raise ValueError(f"expected one vector, got an array of {flat.ndim} dimension(s)")
        checked_rows(flat[None, :], count=1, dimensions=_width(embedder), dtype=np.float32)
        return flat
    except (TypeError, ValueError) as exc:
        raise failure(
            True, f"the embedder {_name(embedder)} returned an unusable query vector: {exc}"
        ) from None
