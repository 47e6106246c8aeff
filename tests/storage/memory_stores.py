"""Stores written the way a third party would write them: outside groundkit, in memory.

They exist to prove that the conformance suites shipped in ``groundkit.testing``
work for a store groundkit did not write (tests/storage/test_third_party_stores.py).
Only public pieces of groundkit are used: the Protocols' row types, the errors, and
the id rule every vector store must apply (``VECTOR_ID_PATTERN``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Collection, Iterable, Mapping, Sequence

import numpy as np
import numpy.typing as npt

from groundkit.errors import IngestionError, RetrievalError
from groundkit.storage.names import VECTOR_ID_PATTERN, check_snapshot_id
from groundkit.storage.protocols import VectorHit, cosine_to_score


def _check_id(value: object, error: type[Exception]) -> str:
    if not isinstance(value, str) or not VECTOR_ID_PATTERN.fullmatch(value):
        raise error(f"id {value!r} is not allowed")
    return value


def _unit_rows(vectors: npt.ArrayLike, rows: int, width: int, error: type[Exception]) -> np.ndarray:
    try:
        array = np.asarray(vectors, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise error(f"not numbers: {exc}") from None
    if array.shape != (rows, width) or not np.isfinite(array).all():
        raise error(f"expected {rows} finite rows of width {width}, got shape {array.shape}")
    norms = np.linalg.norm(array, axis=1)
    if rows and not (norms > 0).all():
        raise error("a zero vector has no direction")
    return (array / norms[:, None]).astype(np.float32) if rows else array.astype(np.float32)


class MemoryVectorStore:
    """Exact cosine search over rows held in a dict (``VectorStoreProtocol``)."""

    def __init__(self, dimensions: int) -> None:
        self._dimensions = dimensions
        # chunk_id -> (document_id, unit vector, content hash or None)
        self._rows: dict[str, tuple[str, np.ndarray, str | None]] = {}
        self._lock = asyncio.Lock()

    @property
    def dimensions(self) -> int:
        return self._dimensions

    async def upsert_documents(
        self,
        items: Sequence[tuple[str, Sequence[str], npt.ArrayLike]],
        *,
        content_hashes: Mapping[str, Sequence[str]] | None = None,
    ) -> None:
        hashes_of = dict(content_hashes or {})
        documents = [_check_id(doc, IngestionError) for doc, _, _ in items]
        if len(set(documents)) != len(documents) or set(hashes_of) - set(documents):
            raise IngestionError("each document once, hashes only for upserted documents")
        staged: dict[str, tuple[str, np.ndarray, str | None]] = {}
        for document_id, chunk_ids, vectors in items:
            ids = list(chunk_ids)
            if not all(isinstance(c, str) and c for c in ids) or len(set(ids)) != len(ids):
                raise IngestionError(f"{document_id}: chunk ids must be distinct and non-empty")
            matrix = _unit_rows(vectors, len(ids), self._dimensions, IngestionError)
            hashes: list[str | None] = list(hashes_of.get(document_id, [None] * len(ids)))
            if len(hashes) != len(ids) or any(h == "" for h in hashes):
                raise IngestionError(f"{document_id}: one non-empty hash per chunk")
            for chunk_id, row, content_hash in zip(ids, matrix, hashes, strict=True):
                if chunk_id in staged:
                    raise IngestionError(f"chunk {chunk_id!r} under two documents")
                staged[chunk_id] = (document_id, row, content_hash)
        async with self._lock:  # checked in full first: a bad batch changes nothing
            replaced = set(documents)
            self._rows = {c: r for c, r in self._rows.items() if r[0] not in replaced}
            self._rows.update(staged)

    async def vectors_by_content(
        self, content_hashes: Sequence[str]
    ) -> dict[str, npt.NDArray[np.float32]]:
        wanted = {_check_id(h, IngestionError) for h in content_hashes}
        found: dict[str, npt.NDArray[np.float32]] = {}
        for _, row, content_hash in self._rows.values():
            if content_hash in wanted and content_hash not in found:
                found[content_hash] = row.copy()
        return found

    async def delete_documents(self, document_ids: Sequence[str]) -> int:
        gone = {_check_id(d, IngestionError) for d in document_ids}
        async with self._lock:
            before = len(self._rows)
            self._rows = {c: r for c, r in self._rows.items() if r[0] not in gone}
            return before - len(self._rows)

    async def query(
        self,
        vector: npt.ArrayLike,
        top_k: int,
        *,
        document_ids: Collection[str] | None = None,
    ) -> list[VectorHit]:
        try:
            array = np.asarray(vector, dtype=np.float64)
        except (TypeError, ValueError) as exc:
            raise RetrievalError(f"query vector is not numbers: {exc}") from None
        if array.ndim != 1:
            raise RetrievalError("a query vector is one row")
        query = _unit_rows(array[None, :], 1, self._dimensions, RetrievalError)[0]
        if type(top_k) is not int:
            raise RetrievalError("top_k must be an integer")
        allowed = None
        if document_ids is not None:
            if isinstance(document_ids, str):
                raise RetrievalError("document_ids is a collection of ids, not one string")
            allowed = {_check_id(d, RetrievalError) for d in document_ids}
        rows = [
            (chunk_id, document_id, float(np.dot(row, query)))
            for chunk_id, (document_id, row, _) in self._rows.items()
            if allowed is None or document_id in allowed
        ]
        scored = [(c, d, cosine_to_score(cos)) for c, d, cos in rows]
        scored.sort(key=lambda hit: (-hit[2], hit[0]))
        return [VectorHit(c, d, s) for c, d, s in scored[: max(top_k, 0)]]

    async def count(self) -> int:
        return len(self._rows)

    async def document_ids(self) -> set[str]:
        return {document_id for document_id, _, _ in self._rows.values()}

    async def inventory(self) -> dict[str, str]:
        return {chunk_id: document_id for chunk_id, (document_id, _, _) in self._rows.items()}

    async def problem(self) -> str | None:
        return None  # nothing in memory can be damaged behind this object's back

    async def refresh(self) -> None:
        return None  # one process, one handle: always current

    async def recover(self) -> str | None:
        return None

    async def optimize(self) -> None:
        return None

    async def close(self) -> None:
        self._rows = {}


class MemorySnapshots:
    """URL snapshots in a dict (``SnapshotStore``)."""

    def __init__(self, name: str = "memory:snaps") -> None:
        self._name = name
        self._blobs: dict[str, bytes] = {}

    @property
    def location(self) -> str:
        return self._name

    async def read(self, document_id: str) -> bytes:
        key = check_snapshot_id(document_id)
        if key not in self._blobs:
            raise FileNotFoundError(document_id)
        return self._blobs[key]

    async def matches(self, document_id: str, content: str) -> bool:
        try:
            return await self.read(document_id) == content.encode("utf-8")
        except FileNotFoundError:
            return False

    async def write(self, document_id: str, content: str) -> None:
        self._blobs[check_snapshot_id(document_id)] = content.encode("utf-8")

    async def remove_stale(self, keep: Iterable[str]) -> list[str]:
        wanted = set(keep)
        removed = sorted(k for k in self._blobs if k not in wanted)
        for key in removed:
            del self._blobs[key]
        return removed
