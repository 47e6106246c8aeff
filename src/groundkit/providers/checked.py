"""Whatever an embedder returns, held to the protocol before anything uses it.

An embedder may be application code. Its vectors reach the vector store, fusion and
the evidence of results; a wrong count or width found there surfaces as a numpy or
``zip`` error far from its cause. Every call groundkit makes goes through
``documents`` or ``query``: the embedder's own failure becomes the error of the
stage that needed it (``IngestionError`` at ingest, ``RetrievalError`` in a search),
naming the embedder. What they return is a new float32 array, never the embedder's
own buffer (which it may reuse), of real numbers only (no booleans, strings or
complex values), each row a direction (no zero rows; rows too long or short for
float32 are scaled to unit length in float64 first).
"""

from __future__ import annotations

import numbers
from collections.abc import Awaitable, Sequence
from decimal import Decimal
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


# Kinds of array numpy would cast to float without complaint, losing what they mean:
# the imaginary part of a complex number, the text of a number string, a boolean.
_NOT_NUMBERS = {
    "b": "booleans",
    "c": "complex numbers",
    "U": "strings",
    "S": "bytes",
    "M": "datetimes",
    "m": "timedeltas",
    "V": "raw records",
}
# A row whose length is outside this range is rescaled to unit length (in float64)
# before the float32 cast: its direction is valid, but past 2**60 its values or
# their squares leave float32's range, and near 2**-60 they sink into its subnormals
# or to zero. Rows inside it are cast as they are, bit for bit.
_SAFE_NORMS = (2.0**-60, 2.0**60)


def _real(rows: Any) -> Any:
    """``rows`` as a new float64 array the embedder holds no reference to, when they
    are real numbers; ``rows`` as they are when numpy cannot read them as an array
    (``checked_rows`` says why). Other kinds of values are a ``ValueError``."""
    try:
        raw = np.asarray(rows)
    except (TypeError, ValueError, OverflowError):
        return rows
    kind = raw.dtype.kind
    if kind in _NOT_NUMBERS:
        raise ValueError(f"vectors hold {_NOT_NUMBERS[kind]}, not real numbers")
    if kind == "O":
        for value in raw.flat:
            if isinstance(value, bool | np.bool_) or not isinstance(value, numbers.Real | Decimal):
                raise ValueError(f"vectors hold {type(value).__name__} values, not real numbers")
    try:
        # A copy even of a float64 array: an embedder may hand out views of one
        # buffer it reuses, which would rewrite vectors already taken.
        return np.array(raw, dtype=np.float64, copy=True)
    except (TypeError, ValueError, OverflowError):
        raise ValueError("vectors are not a rectangular array of numbers") from None


def _float32(matrix: npt.NDArray[np.float64]) -> npt.NDArray[np.float32]:
    """Finite float64 ``matrix`` as float32, each row keeping its direction.

    A row of zeros has none and is refused; a row too long or too short for float32
    is scaled to unit length first (the vectors are compared by cosine). Rows whose
    length is plainly in range (every row of a normal embedder) are cast at once."""
    plain = np.sqrt(np.einsum("ij,ij->i", matrix, matrix))
    if bool(((plain >= _SAFE_NORMS[0]) & (plain <= _SAFE_NORMS[1])).all()):
        return matrix.astype(np.float32)
    peaks = np.abs(matrix).max(axis=1, initial=0.0)
    zero = np.flatnonzero(peaks == 0.0)
    if zero.size:
        raise ValueError(f"vector {int(zero[0])} is all zeros and has no direction")
    scaled = matrix / peaks[:, None]  # peak 1: neither squares nor sums leave float64
    norms = np.linalg.norm(scaled, axis=1) * peaks
    odd = (norms < _SAFE_NORMS[0]) | (norms > _SAFE_NORMS[1])
    if odd.any():
        matrix[odd] = scaled[odd] / np.linalg.norm(scaled[odd], axis=1, keepdims=True)
    return matrix.astype(np.float32)


def _checked(rows: Any, *, count: int, dimensions: int | None) -> npt.NDArray[np.float32]:
    """``rows`` as a new, finite ``(count, dimensions)`` float32 matrix of directions;
    a ``ValueError`` describing the defect otherwise."""
    matrix = checked_rows(_real(rows), count=count, dimensions=dimensions, dtype=np.float64)
    return _float32(matrix)


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
        return _checked(
            rows,
            count=len(texts),
            dimensions=width if width is not None else _width(embedder),
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
        flat = _real(vector)
        if not isinstance(flat, np.ndarray):
            raise ValueError("the vector is not an array of numbers")
        ndim = flat.ndim
        if ndim != 1:
            raise ValueError(f"expected one vector, got an array of {ndim} dimension(s)")
        row: npt.NDArray[np.float32] = _checked(
            flat[None, :], count=1, dimensions=_width(embedder)
        )[0]
        return row
    except (TypeError, ValueError) as exc:
        raise failure(
            True, f"the embedder {_name(embedder)} returned an unusable query vector: {exc}"
        ) from None
