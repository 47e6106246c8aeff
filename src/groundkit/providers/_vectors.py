"""Checks and normalisation shared by the embedders."""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from groundkit.errors import GroundkitError, IngestionError, RetrievalError
from groundkit.utils.text import describe_unencodable


def failure(for_query: bool, message: str) -> GroundkitError:
    """The error class that fits where an embedding was needed.

    Document embeddings are computed during ingest, so a failure there is an
    ``IngestionError``; a query embedding fails a search (``RetrievalError``).
    """
    return RetrievalError(message) if for_query else IngestionError(message)


def checked_rows(
    rows: Any, *, count: int, dimensions: int | None, dtype: type[np.floating[Any]] = np.float64
) -> npt.NDArray[Any]:
    """``rows`` as a finite ``(count, dimensions)`` matrix of ``dtype``.

    Raises ``ValueError`` describing the defect; callers choose the error class.
    """
    try:
        matrix = np.asarray(rows, dtype=dtype)
    except (TypeError, ValueError, OverflowError):  # OverflowError: an int past float range
        raise ValueError("vectors are not a rectangular array of numbers") from None
    if matrix.ndim != 2:
        raise ValueError(f"expected a 2-d array of vectors, got {matrix.ndim} dimension(s)")
    if matrix.shape[0] != count:
        raise ValueError(f"expected {count} vector(s), got {matrix.shape[0]}")
    if dimensions is not None and matrix.shape[1] != dimensions:
        raise ValueError(f"expected {dimensions}-dimensional vectors, got {matrix.shape[1]}")
    if not np.isfinite(matrix).all():
        raise ValueError("vectors contain NaN or infinite values")
    return matrix


def unit_rows(rows: Any, *, count: int, dimensions: int | None) -> npt.NDArray[np.float32]:
    """``checked_rows``, L2-normalised. Normalises in float64 so float32 rounding does
    not leave norms visibly off 1."""
    matrix = checked_rows(rows, count=count, dimensions=dimensions)
    with np.errstate(over="ignore", under="ignore"):
        norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    odd = ~(np.isfinite(norms) & (norms > 0.0))[:, 0]
    if odd.any():
        # Finite components whose squares overflow (1e200) would divide to an
        # all-zero row, ones whose squares underflow to a zero norm: such rows
        # are scaled by their largest component first. Other rows are left as
        # they are, so their float32 values do not move.
        peak = np.abs(matrix[odd]).max(axis=1, keepdims=True)
        if not (peak > 0.0).all():
            raise ValueError("a vector is all zeros and has no direction")
        matrix = matrix.copy()
        matrix[odd] /= peak
        norms[odd] = np.linalg.norm(matrix[odd], axis=1, keepdims=True)
    unit: npt.NDArray[np.float32] = (matrix / norms).astype(np.float32)
    return unit


def check_texts(texts: Any, *, for_query: bool) -> list[str]:
    """``texts`` as a list of strings; a bare string is refused, not split into characters.

    A lone surrogate is refused here, named by position: it has no UTF-8, so
    the JSON body of an HTTP embedder or a tokenizer would fail on it with
    their own exception.
    """
    if isinstance(texts, str | bytes):
        raise failure(for_query, "texts must be a sequence of strings, not a single string")
    out = list(texts)
    for i, text in enumerate(out):
        if not isinstance(text, str):
            raise failure(for_query, f"text {i} is {type(text).__name__}, not str")
        problem = describe_unencodable(text, f"text {i}")
        if problem is not None:
            raise failure(for_query, problem)
    return out


def check_query(text: Any) -> str:
    """``text`` if it is a string UTF-8 can encode; ``RetrievalError`` otherwise."""
    if not isinstance(text, str):
        raise failure(True, f"the query is {type(text).__name__}, not str")
    problem = describe_unencodable(text, "the query")
    if problem is not None:
        raise failure(True, problem)
    return text
