"""Dense vectors on LanceDB: one table per collection, cosine search, exact or ANN.

The table lives at ``<index_dir>/<collection>.lance`` with three columns,
``chunk_id``, ``document_id`` and ``vector`` (``fixed_size_list<float32>[d]``).
Vectors are L2-normalised on the way in, so the stored copy is exactly what
cosine ranks and any later re-scoring needs no norms. The ``chunk_id`` field's
metadata names whose table it is (the owning collection's uid) and which table it
is (a uid of its own, new at each creation), checked at open, refresh and before
each write, never per search (adr/0095-vector-table-owner.md).

Small tables are searched exhaustively: exact, deterministic, and quick enough
while they are small. A table whose vectors fit in ``memory_max_bytes`` keeps a
float32 copy of them in memory, read once per table version and checked against
the version at every search (``_Resident``; adr/0065-resident-vectors.md):
without an index the exhaustive search runs on it, checked first, as does every
search restricted to some documents, over their rows alone (ADR 0091); with an
index the other searches' candidates are re-scored on it, checked once LanceDB
has answered (adr/0082-ann-copy-checked-after.md). Once a table reaches
``ann_threshold`` rows an IVF_RQ index is built, once (see ``DEFAULT_NPROBES``
for why and how; ADR 0023), with a B-tree index on ``document_id``, which
upserts, deletes and filtered searches look rows up by
(adr/0090-document-id-index.md); rows written afterwards are scanned beside them
until ``optimize()`` folds them in. lancedb and pyarrow are imported
only when a store is opened, so the ``dense`` extra stays optional.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import operator
import random
import re
import uuid
import warnings
from collections.abc import Awaitable, Callable, Collection, Iterable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from functools import partial
from pathlib import Path
from typing import Any, NoReturn, TypeVar

import numpy as np
import numpy.typing as npt

from groundkit.errors import (
    ConfigurationError,
    GroundkitError,
    IndexIdentityError,
    IngestionError,
    RetrievalError,
    StorageError,
)
from groundkit.storage.names import VECTOR_ID_PATTERN, check_collection_name
from groundkit.storage.protocols import (
    VectorErasure,
    VectorHit,
    VectorInventory,
    cosine_to_score,
)

__all__ = [
    "DEFAULT_ANN_THRESHOLD",
    "DEFAULT_MEMORY_MAX_BYTES",
    "DEFAULT_NPROBES",
    "DEFAULT_REFINE_FACTOR",
    "LanceDBVectorStore",
    "refine_factor_for",
    "vector_table_owner",
]

# Flat search at 384 dimensions costs about 1 ms per 1,000 rows here (91 ms p50
# at 100k) against 5-6 ms with the index at recall 1.0, and the index trains in
# seconds at that size; so exactness is kept only while it is cheap.
DEFAULT_ANN_THRESHOLD = 20_000

# A table whose float32 vectors take at most this much memory (1.5 KiB a row at 384
# dimensions: 256 MiB holds about 175,000 rows) keeps a copy of them in memory, read
# once per table version. Without an ANN index it is searched exactly there: a
# matrix-vector product over 10k rows costs a fraction of LanceDB's flat scan of them.
# With the index, the index's candidates are re-scored on it instead of on vectors
# read from the table's files (adr/0065-resident-vectors.md).
DEFAULT_MEMORY_MAX_BYTES = 256 << 20

logger = logging.getLogger("groundkit.storage")
_T = TypeVar("_T")
# Attempts at a write that keeps losing the commit race to other processes.
_COMMIT_ATTEMPTS = 6

_INSTALL_HINT = "dense retrieval needs the 'dense' extra: pip install groundkit[dense]"
_IN_BATCH = 500
# Fetch this many rows beyond top_k so a tie at the cut can be seen and broken
# by chunk_id; the fetch doubles while the tie runs past the end.
_TIE_PAD = 8
# The ANN index is IVF_RQ on cosine: k-means partitions, each vector stored as a
# 4-bit RaBitQ code of its offset from the partition centre (192 bytes at 384
# dimensions). Its distances are approximate, so the best candidates are
# re-scored on the stored float32 vectors: hits carry exact cosines, and recall
# rests on the partitions probed and the candidates re-scored.
#
# Every partition is probed by default. Vectors that cluster weakly (the hashed
# benchmark vectors) need nearly all of them: at 1M rows recall@10 was 0.51 with
# 16% of the partitions, 0.82 with 40% and 0.98 only past about 85%, whatever
# the partition count (123 or 1,000), and HNSW did worse still. A full scan of
# 4-bit codes costs about a third of one of 8-bit IVF_SQ codes, the index this
# replaced (22-28 against 70 ms at 1M here), and keeps recall@10 at 0.998-1.0.
# Probing fewer is faster on embeddings that cluster well: set ``store.nprobes``
# after measuring recall on your own vectors.
DEFAULT_NPROBES: int | None = None
# ``None`` re-scores ``refine_factor_for(limit)`` times the rows asked for.
DEFAULT_REFINE_FACTOR: int | None = None
_RQ_BITS = 4
_ANN_INDEX_TYPE = "IvfRq"  # what list_indices() calls the index built here
# LanceDB caps the probe count at the partition count.
_EVERY_PARTITION = 1 << 30
# Re-score at least this many candidates, and at least twice the rows asked for.
_REFINE_MIN_CANDIDATES = 100
_REFINE_MIN_FACTOR = 2
# The most rows one query returns: far more than a search asks for (MAX_TOP_K), and
# within what LanceDB takes as a limit once the tie padding is added.
MAX_QUERY_ROWS = 100_000
_ANN_INDEX_NAME = "vector_idx"
# Rows are looked up by ``document_id IN (...)`` in every upsert, delete and filtered
# search: a B-tree index, built with the vector index (adr/0090-document-id-index.md).
_LOOKUP_INDEX_NAME = "document_id_idx"
# Versions younger than this survive optimize(): a reader opened earlier may
# still be reading their files.
_KEEP_VERSIONS = timedelta(days=1)
# Whose table it is, in the ``chunk_id`` field's metadata (LanceDB updates a field's
# metadata in place; the schema's own it only sets at creation): the owning
# collection's uid, and a uid of the table itself, new whenever the table is created
# (adr/0095-vector-table-owner.md).
_STAMPED_FIELD = "chunk_id"
_OWNER_KEY = "groundkit:collection"
_TABLE_KEY = "groundkit:table"


def refine_factor_for(limit: int) -> int:
    """The default refine factor for an ANN search of ``limit`` rows.

    4-bit codes misorder close neighbours, so a small ``limit`` is widened to
    ``_REFINE_MIN_CANDIDATES`` re-scored rows; a large one (hybrid asks for 100)
    only doubles, since each re-scored row is a random read of its vector (at 1M
    rows 540 of them cost 10-15 ms more than 216, for recall@100 1.0 against
    0.994).
    """
    if limit < 1:
        raise ValueError(f"limit must be positive, not {limit!r}")
    return max(_REFINE_MIN_FACTOR, -(-_REFINE_MIN_CANDIDATES // limit))


def _import_lancedb() -> tuple[Any, Any]:
    try:
        import lancedb
        import pyarrow
    except ImportError as exc:
        raise ConfigurationError(f"{_INSTALL_HINT} ({exc})") from None
    return lancedb, pyarrow


def _is_commit_conflict(exc: BaseException) -> bool:
    return "commit conflict" in str(exc).lower()


async def _retry_conflicts(operation: Callable[[], Awaitable[_T]]) -> _T:
    """Run a table write again when another process committed first.

    Lance commits optimistically; a write that lost the race is safe to repeat
    (adr/0025-shared-collections.md). Other failures pass through at once.
    """
    for attempt in range(_COMMIT_ATTEMPTS):
        try:
            return await operation()
        except Exception as exc:
            if not _is_commit_conflict(exc) or attempt == _COMMIT_ATTEMPTS - 1:
                raise
            await asyncio.sleep(random.uniform(0.02, 0.1) * 2**attempt)
    raise AssertionError("unreachable")


def _stamp_of(schema: Any) -> tuple[str | None, str | None]:
    """``(owner, table uid)`` as stamped on the table's ``chunk_id`` field (None: not
    stamped; a table made before stamps, or written by a store opened without an owner)."""
    if _STAMPED_FIELD not in schema.names:
        return None, None
    found = schema.field(_STAMPED_FIELD).metadata or {}

    def text(key: str) -> str | None:
        value = found.get(key.encode())
        return value.decode("utf-8", "replace") if value else None

    return text(_OWNER_KEY), text(_TABLE_KEY)


class _ForeignTable(StorageError):
    """The table is stamped with another collection's uid: raised, never recorded as
    damage, so ``recover()`` never moves another collection's table aside."""


async def vector_table_owner(
    index_dir: Path | str, collection: str, storage_options: Mapping[str, str] | None = None
) -> str | None:
    """The collection uid stamped on ``<index_dir>/<collection>.lance`` (None: no table,
    or one not stamped): what a drop checks before removing the table."""
    lancedb, _ = _import_lancedb()
    root = str(index_dir).rstrip("/") if "://" in str(index_dir) else str(index_dir)
    if "://" not in root and not Path(root, f"{collection}.lance").exists():
        return None
    conn = await lancedb.connect_async(root, storage_options=dict(storage_options or {}))
    try:
        if not await _has_table(conn, collection):
            return None
        table = await conn.open_table(collection)
        try:
            return _stamp_of(await table.schema())[0]
        finally:
            table.close()
    finally:
        conn.close()


def _vector_index_kind(indices: Sequence[Any]) -> str | None:
    """LanceDB's name for the kind of the vector index among ``indices``, or ``None``."""
    return next((str(i.index_type) for i in indices if "vector" in i.columns), None)


async def _has_table(conn: Any, name: str) -> bool:
    listed = await conn.list_tables()
    return name in listed.tables


async def _marks_deleted_rows(table: Any) -> bool:
    """Whether the table's current version still holds rows only marked deleted (True
    when LanceDB does not say)."""
    current = int(await table.version())
    for entry in await table.list_versions():
        number = entry["version"] if isinstance(entry, dict) else entry.version
        if int(number) != current:
            continue
        metadata = entry.get("metadata") if isinstance(entry, dict) else entry.metadata
        found = (metadata or {}).get("total_deletion_file_rows")
        return found is None or int(found) > 0
    return True


# What Lance's Rust errors carry besides their reason: the source file of the crate
# that raised (``/root/.cargo/registry/.../utils.rs:26:9``) and a dump of the bytes it
# read, which may be a fragment of stored data (messages name, never quote).
_RUST_SOURCE = re.compile(r",?\s*(?:/|[A-Za-z]:\\)\S*\.rs(?::\d+){0,2}")
_BYTES_DUMP = re.compile(r"""\bbytes: b(?:"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*')""")


def _first_line(exc: BaseException) -> str:
    """The reason in a lancedb/pyarrow error: its first line, without Rust source
    paths or dumped bytes, at most 200 characters."""
    text = str(exc).strip()
    if not text:
        return type(exc).__name__
    line = _BYTES_DUMP.sub("bytes: …", _RUST_SOURCE.sub("", text.splitlines()[0]))
    return line.strip()[:200] or type(exc).__name__


def _storage_error(action: str, where: Path | str, exc: BaseException) -> NoReturn:
    """Re-raise a lancedb/pyarrow failure as ``StorageError``; ours pass through."""
    if isinstance(exc, GroundkitError):
        raise exc
    detail = _first_line(exc)
    raise StorageError(
        f"vector store {str(where)!r}: could not {action}: {detail}. If the table is "
        "damaged, delete it and ingest again with the same embedder"
    ) from None


def _check_ids(
    ids: Iterable[object], error: type[GroundkitError], *, what: str = "document id"
) -> None:
    for doc_id in ids:
        if not isinstance(doc_id, str) or not VECTOR_ID_PATTERN.fullmatch(doc_id):
            raise error(
                f"{what} {doc_id!r} is not allowed in a vector filter: "
                "use letters, digits and '_.:#/-' (1-256 characters)"
            )


def _quote_ids(
    ids: Sequence[str], error: type[GroundkitError], *, what: str = "document id"
) -> str:
    _check_ids(ids, error, what=what)
    return ", ".join(f"'{doc_id}'" for doc_id in ids)


def _checked_top_k(top_k: object) -> int:
    """``top_k`` as an int no larger than ``MAX_QUERY_ROWS``; ``RetrievalError`` otherwise
    (below 1 asks for nothing)."""
    try:
        if isinstance(top_k, bool):
            raise TypeError
        value = operator.index(top_k)  # type: ignore[arg-type]
    except TypeError:
        raise RetrievalError(f"top_k must be an integer, not {type(top_k).__name__}") from None
    if value > MAX_QUERY_ROWS:
        raise RetrievalError(
            f"top_k {value} is more than the {MAX_QUERY_ROWS:,} rows one vector query returns"
        )
    return value


def _checked_ids(document_ids: Collection[str]) -> frozenset[str]:
    """The ids of a restriction, each one allowed in a filter; ``RetrievalError`` otherwise."""
    if isinstance(document_ids, str | bytes):
        raise RetrievalError("document_ids is a collection of document ids, not one string")
    try:
        wanted = frozenset(document_ids)
    except TypeError:
        raise RetrievalError("document_ids must be a collection of strings") from None
    _check_ids(wanted, RetrievalError)  # each one, before any is sorted
    return wanted


def _as_matrix(
    vectors: npt.ArrayLike, rows: int, dimensions: int, error: type[GroundkitError]
) -> npt.NDArray[np.float32]:
    """Finite, non-zero float32 rows of width ``dimensions``, L2-normalised."""
    try:
        array = np.asarray(vectors, dtype=np.float32)
    except (TypeError, ValueError) as exc:
        raise error(f"vectors are not convertible to float32: {exc}") from None
    if array.shape != (rows, dimensions):
        raise error(f"vectors have shape {array.shape}, expected ({rows}, {dimensions})")
    if not np.isfinite(array).all():
        raise error("vectors contain NaN or infinity")
    norms = np.linalg.norm(array.astype(np.float64), axis=1)  # float32 norms can overflow
    if rows and not (norms > 0).all():
        raise error("a zero vector has no direction, so no cosine")
    return np.ascontiguousarray(array / norms[:, None], dtype=np.float32)


def _dot_rows(
    matrix: npt.NDArray[np.float32], vector: npt.NDArray[np.float32]
) -> npt.NDArray[np.float32]:
    """``matrix @ vector`` in numpy's own single-threaded loop, not BLAS: OpenBLAS
    spreads a matrix-vector product over every core, and on a busy 2-core host that
    took 36.9 ms at 10k rows against 1.1 ms here (adr/0065-resident-vectors.md)."""
    product: npt.NDArray[np.float32] = np.einsum("ij,j->i", matrix, vector)
    return product


def _cosine_distances(
    matrix: npt.NDArray[np.float32], vector: npt.NDArray[np.float32]
) -> npt.NDArray[np.float32]:
    """``1 - cos`` per row, within [0, 2]; a row that gives no finite distance (damage
    the store's checks did not see) ranks last at 2.0, as on LanceDB's path.

    In float32 a unit vector's product with itself can come out a hair above 1: clipped,
    such rows tie as their scores (and LanceDB's distances) do, and the chunk id orders
    them, instead of rounding error."""
    distances = 1.0 - _dot_rows(matrix, vector)
    np.clip(distances, 0.0, 2.0, out=distances)
    finite = np.isfinite(distances)
    if not finite.all():
        distances = np.where(finite, distances, np.float32(2.0))
    return distances


# One version's rows as read: vectors, chunk ids, document ids, LanceDB row ids.
_Columns = tuple[npt.NDArray[np.float32], list[str], list[str], npt.NDArray[np.uint64]]


async def _as_ready(value: _T) -> _T:
    return value


async def _deepened(
    top_k: int, fetch: Callable[[int], Awaitable[list[tuple[str, str, float]]]]
) -> list[tuple[str, str, float]]:
    """``fetch(k)``'s rows (sorted by ``(distance, chunk_id)``), asked deeper while rows
    repeating a chunk id leave fewer than ``top_k`` distinct chunks above the cut.

    A table can hold a chunk's row more than once (two writers of one document, a
    retried append); ``reconcile_vectors`` repairs that at the next ingest, and until
    then a search still returns each chunk once and ``top_k`` of them.
    """
    asked = top_k
    while True:
        rows = await fetch(asked)
        if len(rows) < asked or asked >= MAX_QUERY_ROWS:
            return rows  # every row there is
        cut = rows[asked - 1][2]
        distinct = len({c for c, _, dist in rows if dist <= cut})
        if distinct >= top_k:
            return rows
        asked = min(MAX_QUERY_ROWS, asked + max(asked, top_k - distinct))


def _distinct_hits(rows: Iterable[tuple[str, str, float]], top_k: int) -> list[VectorHit]:
    """The first ``top_k`` rows as hits, each chunk id once (its first row: the nearest,
    as rows come sorted by ``(distance, chunk_id)``)."""
    hits: list[VectorHit] = []
    seen: set[str] = set()
    for chunk_id, document_id, distance in rows:
        if chunk_id in seen:
            continue
        seen.add(chunk_id)
        hits.append(
            VectorHit(
                chunk_id=chunk_id, document_id=document_id, score=cosine_to_score(1.0 - distance)
            )
        )
        if len(hits) == top_k:
            break
    return hits


class _Resident:
    """A table version's vectors held in memory, searched exactly by a matrix product.

    Built from one read of every row at ``version`` of the handle ``table``; the
    store uses it only while its handle is that same object at that same version
    and ``intact()`` holds, and reads it afresh otherwise. A table dropped and created
    again is opened with a new handle (its table uid differs), so a copy never outlives
    the table it was read from, whatever the version numbers. ``matrix`` is None when
    the version held more rows than the store keeps in memory (its rows then go to
    LanceDB's own flat search, and the count is not read again until the version
    moves). The arrays are read-only, so nothing mutates them in place.
    """

    __slots__ = (
        "chunk_ids", "doc_codes", "documents", "matrix", "names", "row_ids", "row_order",
        "rows", "table", "version",
    )  # fmt: skip

    def __init__(self, table: Any, version: int, rows: int, data: _Columns | None = None) -> None:
        self.table = table
        self.version = version
        self.rows = rows
        self.matrix: npt.NDArray[np.float32] | None = None
        self.chunk_ids: list[str] = []
        self.documents: dict[str, int] = {}
        self.names: list[str] = []
        self.doc_codes: npt.NDArray[np.int32] = np.zeros(0, dtype=np.int32)
        self.row_order: npt.NDArray[np.intp] = np.zeros(0, dtype=np.intp)
        self.row_ids: npt.NDArray[np.uint64] = np.zeros(0, dtype=np.uint64)
        if data is None:
            return
        matrix, self.chunk_ids, owners, ids = data
        self.names = list(dict.fromkeys(owners))
        self.documents = {d: i for i, d in enumerate(self.names)}
        self.doc_codes = np.fromiter(
            (self.documents[d] for d in owners), dtype=np.int32, count=len(owners)
        )
        # Stored rows are unit vectors already; dividing again keeps cosines exact for
        # any row, in place (no float64 copy of the whole matrix).
        norms = np.sqrt(np.einsum("ij,ij->i", matrix, matrix))
        norms[~(norms > 0)] = 1.0  # never written (the store refuses zero vectors); no NaN
        np.divide(matrix, norms[:, None], out=matrix)
        self.matrix = matrix
        # Row ids (LanceDB's ``_rowid`` at this version), sorted, and each one's row here:
        # what ANN candidates are re-scored by.
        self.row_order = np.argsort(ids, kind="stable")
        self.row_ids = ids[self.row_order]
        for array in (self.matrix, self.doc_codes, self.row_order, self.row_ids):
            array.flags.writeable = False
        self.rows = len(self.chunk_ids)

    def intact(self, dimensions: int) -> bool:
        """Whether the parts still agree with each other and with the table's width."""
        if self.matrix is None:
            return not self.chunk_ids
        return (
            self.matrix.shape == (self.rows, dimensions)
            and self.matrix.dtype == np.float32
            and not self.matrix.flags.writeable
            and len(self.chunk_ids) == self.rows == self.doc_codes.shape[0]
            and self.rows == self.row_ids.shape[0] == self.row_order.shape[0]
            and not any(a.flags.writeable for a in (self.doc_codes, self.row_ids, self.row_order))
            and len(self.names) == len(self.documents)
        )

    def rescored(
        self, row_ids: npt.NDArray[np.uint64], query: npt.NDArray[np.float32], limit: int
    ) -> list[tuple[str, str, float]] | None:
        """ANN candidates (LanceDB row ids of this version) with exact distances: the
        ``limit`` nearest by ``(distance, chunk_id)``. None when a candidate is not in
        this copy, which then does not hold the version searched."""
        assert self.matrix is not None
        if row_ids.shape[0] == 0:
            return []
        if self.rows == 0:
            return None
        at = np.minimum(np.searchsorted(self.row_ids, row_ids), self.rows - 1)
        if not np.array_equal(self.row_ids[at], row_ids):
            return None
        positions = self.row_order[at]
        return self._nearest(_cosine_distances(self.matrix[positions], query), limit, positions)

    def ranked(
        self, query: npt.NDArray[np.float32], top_k: int, wanted: frozenset[str] | None
    ) -> list[tuple[str, str, float]]:
        """The ``top_k`` nearest ``(chunk_id, document_id, distance)`` by ``(distance,
        chunk_id)``, over every row or the rows of the ``wanted`` documents.

        Every row tied with the ``top_k``-th distance is a candidate, so the chunk id
        decides ties exactly as LanceDB's path does after its padded fetch.
        """
        assert self.matrix is not None
        if wanted is None:
            return self._nearest(_cosine_distances(self.matrix, query), top_k, None)
        chosen = np.zeros(len(self.names), dtype=bool)
        chosen[[self.documents[d] for d in wanted if d in self.documents]] = True
        positions = np.flatnonzero(chosen[self.doc_codes])
        # Gathering a row costs about four times its product: gathered only when few.
        if positions.shape[0] * 6 < self.rows:
            distances = _cosine_distances(self.matrix[positions], query)
        else:
            distances = _cosine_distances(self.matrix, query)[positions]
        return self._nearest(distances, top_k, positions)

    def _nearest(
        self,
        distances: npt.NDArray[np.float32],
        limit: int,
        positions: npt.NDArray[np.intp] | None,
    ) -> list[tuple[str, str, float]]:
        """The ``limit`` nearest ``(chunk_id, document_id, distance)`` by ``(distance,
        chunk_id)``; ``distances[i]`` is row ``positions[i]``'s (row ``i``'s when None).
        Only the nearest ``limit`` and every row tied with the last of them are made into
        tuples and sorted: the chunk id decides those ties."""
        if distances.shape[0] == 0:
            return []
        if distances.shape[0] > limit:
            cut = np.partition(distances, limit - 1)[limit - 1]
            near = np.flatnonzero(distances <= cut)
            rows = near if positions is None else positions[near]
            distances = distances[near]
        else:
            rows = np.arange(distances.shape[0]) if positions is None else positions
        names, chunk_ids, codes = self.names, self.chunk_ids, self.doc_codes
        found = [
            (chunk_ids[r], names[codes[r]], float(d))
            for r, d in zip(rows.tolist(), distances.tolist(), strict=True)
        ]
        found.sort(key=lambda row: (row[2], row[0]))
        return found[:limit]


class LanceDBVectorStore:
    """``VectorStoreProtocol`` on a LanceDB table; create with ``await .open(...)``.

    Every lancedb or pyarrow failure surfaces as ``StorageError``. Invalid input
    is refused before LanceDB sees it: ``IngestionError`` on the write side
    (upsert, delete), ``RetrievalError`` on the query side.
    """

    def __init__(
        self,
        conn: Any,
        table: Any,
        *,
        path: Path | str,
        name: str,
        dimensions: int,
        ann_threshold: int,
    ) -> None:
        self._conn = conn
        self._table = table  # None until the first upsert creates it
        self.path = path
        self._name = name
        self._dimensions = dimensions
        self.ann_threshold = ann_threshold
        self._indexed: bool | None = None  # unknown until checked
        # Why the table cannot be used (unopenable, unreadable schema, not ours);
        # None when it can. Set by open() and refresh(), cleared by recover().
        self._damage: str | None = None
        self._doc_cache: tuple[int, frozenset[str]] | None = None
        # (table version, {chunk id: document id}, documents with a chunk stored twice)
        self._inventory_cache: tuple[int, VectorInventory, frozenset[str]] | None = None
        self._storage_options: dict[str, str] = {}
        self._hash_column = True  # settled by _check_schema for an existing table
        # Serialises this handle's writes, so two first upserts cannot both create the table.
        self._write_lock = asyncio.Lock()
        # Search-time ANN knobs; they change latency and recall, not the index.
        # None: every partition, and ``refine_factor_for(limit)``.
        self.nprobes: int | None = DEFAULT_NPROBES
        self.refine_factor: int | None = DEFAULT_REFINE_FACTOR
        # A table whose vectors fit in this many bytes is searched on a copy of them
        # held in memory (0: never); see ``_resident``.
        self.memory_max_bytes: int = DEFAULT_MEMORY_MAX_BYTES
        self._memory: _Resident | None = None
        self._memory_lock = asyncio.Lock()
        # The collection whose table this is (None: not checked, nothing claimed), and
        # whether a table stamped with another uid is taken over (the collection's
        # metadata was rebuilt, and with it its uid); see ``open``.
        self._owner: str | None = None
        self._reclaim = False
        # ``(owner, table uid)`` stamped on the table this handle holds, as last read.
        self._stamp: tuple[str | None, str | None] = (None, None)
        # Why the table found is refused: another collection's (set with no handle held).
        self._foreign: str | None = None

    @property
    def dimensions(self) -> int:
        return self._dimensions

    @property
    def table(self) -> Any:
        """The LanceDB ``AsyncTable`` underneath (None before the first write).

        For tools that measure or inspect the table (the benchmarks under
        ``evals/``). Reads are safe; a write through it bypasses groundkit's
        checks and the bookkeeping that keeps vectors in step with the text.
        """
        return self._table

    @classmethod
    async def open(
        cls,
        index_dir: Path | str,
        collection: str,
        dimensions: int,
        *,
        create: bool = True,
        ann_threshold: int = DEFAULT_ANN_THRESHOLD,
        storage_options: Mapping[str, str] | None = None,
        owner: str | None = None,
        reclaim: bool = False,
    ) -> LanceDBVectorStore:
        """Open ``<index_dir>/<collection>.lance``; it is created on the first upsert.

        Creating lazily means opening never leaves an empty table pinned to a
        dimension nothing was written with. ``create=False`` demands that the
        table exists (``StorageError`` otherwise), which is what a reader wants.
        An existing table of another dimension is an ``IndexIdentityError`` without
        ``owner``; with it (a collection's store, opened once the collection has checked
        its embedder against the identity it recorded) it is damage: ``problem()`` says
        so, searches degrade to BM25, and ``recover()`` sets the table aside.
        ``index_dir`` may be an object-store URI (``s3://bucket/prefix``);
        ``storage_options`` go to LanceDB unchanged and never into a message.

        ``owner`` is the uid of the collection the table belongs to
        (``collection_uid()``): a new table is stamped with it, an unstamped one is
        stamped at this store's first write, and one stamped with another uid is
        refused (``StorageError``) here, at ``refresh()`` and before every write, so
        two collections that share a storage root and a name never use or prune each
        other's vectors. ``reclaim`` takes such a table over instead (the collection's
        metadata was rebuilt, so its uid is new). Without ``owner`` nothing is checked.
        """
        check_collection_name(collection)
        if owner is not None and (not isinstance(owner, str) or not owner):
            raise ConfigurationError(f"owner must be a collection uid, not {owner!r}")
        if isinstance(dimensions, bool) or not isinstance(dimensions, int) or dimensions < 1:
            raise ConfigurationError(f"dimensions must be a positive integer, not {dimensions!r}")
        if ann_threshold < 1:
            raise ConfigurationError(f"ann_threshold must be positive, not {ann_threshold!r}")
        lancedb, _ = _import_lancedb()
        remote = "://" in str(index_dir)
        root = str(index_dir).rstrip("/") if remote else str(Path(index_dir).resolve())
        path: Path | str = (
            f"{root}/{collection}.lance" if remote else Path(root) / f"{collection}.lance"
        )
        try:
            if not remote:
                Path(root).mkdir(parents=True, exist_ok=True)
            conn = await lancedb.connect_async(root, storage_options=dict(storage_options or {}))
            exists = await _has_table(conn, collection)
        except Exception as exc:
            _storage_error("open the table", path, exc)
        if not exists and not create:
            conn.close()
            raise StorageError(f"no vector table at {str(path)!r}; ingest with an embedder first")
        store = cls(
            conn,
            None,
            path=path,
            name=collection,
            dimensions=dimensions,
            ann_threshold=ann_threshold,
        )
        store._storage_options = dict(storage_options or {})
        store._owner, store._reclaim = owner, reclaim
        if exists:
            try:
                await store._adopt()
            except BaseException:
                await store.close()
                raise
        return store

    async def _adopt(self) -> None:
        """Open the existing table. Damage is recorded (``problem()``), not raised, so
        the collection stays usable for BM25 and ``recover()`` can act on it. A table
        of another vector width is damage too when the store is a collection's (``owner``
        given: the collection checked its embedder against its recorded identity); opened
        on its own, it is the caller's mistake and raises ``IndexIdentityError``."""
        try:
            self._table = await self._conn.open_table(self._name)
        except Exception as exc:
            self._damage = f"the vector table cannot be opened ({_first_line(exc)})"
            return
        try:
            await self._check_schema()
        except (IndexIdentityError, _ForeignTable):
            raise
        except StorageError as exc:
            self._damage = str(exc)

    async def _check_schema(self) -> None:
        _, pa = _import_lancedb()
        try:
            schema = await self._table.schema()
        except Exception as exc:
            _storage_error("read the schema", self.path, exc)
        names = set(schema.names)
        if not {"chunk_id", "document_id", "vector"} <= names:
            raise StorageError(
                f"{str(self.path)!r} has columns {sorted(names)}, not a groundkit vector "
                "table: delete it and ingest again"
            )
        # Tables written before content hashes existed still work; they just
        # cannot hand vectors back for reuse.
        self._hash_column = "content_hash" in names
        vector_type = schema.field("vector").type
        if not pa.types.is_fixed_size_list(vector_type) or not pa.types.is_float32(
            vector_type.value_type
        ):
            raise StorageError(
                f"{str(self.path)!r} stores vectors as {vector_type}, not float32 lists: "
                "delete it and ingest again"
            )
        # Whose table it is first: another collection's is refused as such, whatever its width.
        self._check_owner(_stamp_of(schema))
        if vector_type.list_size != self._dimensions:
            width = vector_type.list_size
            if self._owner is None:
                # A store opened on its own: the dimensions asked for are the caller's.
                raise IndexIdentityError(
                    f"the vector table {str(self.path)!r} holds {width}-dimensional vectors, "
                    f"not the {self._dimensions} asked for: open it with {width} dimensions, "
                    "or delete it and ingest again"
                )
            # A collection's store: the collection has checked its embedder against the
            # identity it recorded (``check_embedding``) before opening this one, so a
            # table of another width is damaged derived state, not the embedder's fault.
            raise StorageError(
                f"the vector table holds {width}-dimensional vectors, but this collection "
                f"records {self._dimensions}-dimensional ones (the table was replaced or "
                "rewritten outside groundkit)"
            )

    def _check_owner(self, stamp: tuple[str | None, str | None]) -> None:
        """Take ``stamp`` as the held table's, or refuse the table (and let its handle
        go) when another collection's uid is on it."""
        owner = stamp[0]
        if owner is None or self._owner is None or owner == self._owner or self._reclaim:
            self._stamp = stamp
            return
        self._forget_table()
        self._foreign = (
            f"the vector table at {str(self.path)!r} belongs to another collection "
            f"(uid {owner}, this one is {self._owner}): two collections share this "
            "storage_uri and name. Give each its own storage_uri or name. If that "
            "collection no longer exists (this one's metadata was deleted and made anew), "
            "delete the table, or for a local collection open it with rebuild_damaged "
            "(grk ingest --rebuild), and ingest again"
        )
        raise _ForeignTable(self._foreign)

    def _forget_table(self) -> None:
        """Close the handle and drop everything read through it: the next use opens the
        table afresh (it may be another table now)."""
        table, self._table = self._table, None
        if table is not None:
            table.close()
        self._stamp = (None, None)
        self._doc_cache = None
        self._inventory_cache = None
        self._indexed = None
        self._memory = None

    async def _latest_checked(self) -> Any:
        """The table at its latest version, checked to be the one this handle adopted and
        this collection's, before a write that removes or rewrites rows: a table dropped
        and created again meanwhile is opened afresh (and refused if another collection's),
        and an unstamped one is stamped with the owner. Call under ``_write_lock``."""
        table = self._table
        await table.checkout_latest()
        stamp = _stamp_of(await table.schema())
        if stamp != self._stamp:
            self._forget_table()
            self._table = await self._open_conn().open_table(self._name)
            await self._check_schema()
            table = self._table
        owner, table_uid = self._stamp
        if self._owner is not None and owner != self._owner:
            # A table made before stamps (or taken over): claimed by its first write here.
            claimed = {_OWNER_KEY: self._owner, _TABLE_KEY: table_uid or uuid.uuid4().hex}
            await table.update_field_metadata({"path": _STAMPED_FIELD, "metadata": claimed})
            self._stamp = (self._owner, claimed[_TABLE_KEY])
        return table

    async def _delete_latest(self, where: str) -> Any:
        """Delete ``where`` from the table's latest version, not the handle's.

        A delete marks the rows of the version it reads, and LanceDB commits it over rows
        another handle appended since without a conflict: from an older version those rows
        would outlive it, and an upsert would leave the document's rows twice.
        """
        table = await self._latest_checked()
        return await table.delete(where)

    def _schema(self, stamp: Mapping[str, str] | None = None) -> Any:
        _, pa = _import_lancedb()
        fields = [
            pa.field("chunk_id", pa.string(), nullable=False, metadata=stamp),
            pa.field("document_id", pa.string(), nullable=False),
            pa.field("vector", pa.list_(pa.float32(), self._dimensions), nullable=False),
        ]
        if self._hash_column:
            fields.append(pa.field("content_hash", pa.string(), nullable=True))
        return pa.schema(fields)

    async def close(self) -> None:
        """Release the table handle; idempotent."""
        self._memory = None
        table, self._table = self._table, None
        conn, self._conn = self._conn, None
        if table is not None:
            table.close()
        if conn is not None:
            conn.close()

    def _live_conn(self) -> Any:
        """The connection, for an operation on a usable table (``StorageError`` when the
        store is closed, its table damaged or another collection's)."""
        conn = self._open_conn()
        if self._foreign is not None:
            raise StorageError(self._foreign)
        if self._damage is not None:
            raise StorageError(
                f"vector store {str(self.path)!r}: {self._damage}; ingest again to rebuild it"
            )
        return conn

    def _open_conn(self) -> Any:
        if self._conn is None:
            raise StorageError(f"vector store {str(self.path)!r} is closed")
        return self._conn

    # -- health and repair ----------------------------------------------------

    async def problem(self) -> str | None:
        """The damage recorded at open or refresh, or why the table is refused, if any
        (no I/O)."""
        self._open_conn()
        return self._foreign or self._damage

    async def refresh(self) -> None:
        """Move this handle to the table's latest version (or adopt a table another
        process created); damage found on the way is recorded, not raised.

        A table dropped and created again since (its stamp's table uid differs) is
        opened afresh, so nothing read from the old one (the vectors held in memory,
        a cached mirror) is used with it; one stamped with another collection's uid
        is refused with ``StorageError``. Costs one read of the schema the handle
        already holds."""
        conn = self._open_conn()
        self._doc_cache = None
        self._indexed = None
        async with self._write_lock:
            if self._table is None or self._damage is not None or self._foreign is not None:
                self._forget_table()
                self._damage = self._foreign = None
                try:
                    exists = await _has_table(conn, self._name)
                except Exception as exc:
                    self._damage = f"the vector table cannot be listed ({_first_line(exc)})"
                    return
                if exists:
                    await self._adopt()
                return
            try:
                await self._table.checkout_latest()
                stamp = _stamp_of(await self._table.schema())
            except Exception as exc:
                self._damage = f"the vector table cannot be read ({_first_line(exc)})"
                return
            if stamp != self._stamp:
                self._forget_table()
                await self._adopt()

    async def inventory(self) -> VectorInventory:
        """Every row's ``{chunk_id: document_id}``, read in full (one scan of two columns),
        remembered for the table version it was read at."""
        self._live_conn()
        if self._table is None:
            return {}
        try:
            version = int(await self._table.version())
            if self._inventory_cache is not None and self._inventory_cache[0] == version:
                return self._inventory_cache[1]
            data = await self._table.query().select(["chunk_id", "document_id"]).to_arrow()
        except Exception as exc:
            _storage_error("read the stored ids", self.path, exc)
        chunk_ids = data["chunk_id"].to_pylist()
        owners = data["document_id"].to_pylist()
        found = dict(zip(chunk_ids, owners, strict=True))
        repeated: frozenset[str] = frozenset()
        if len(found) < len(chunk_ids):
            # Some chunk's row is stored more than once: name every document involved.
            seen: set[str] = set()
            twice: set[str] = set()
            for chunk_id in chunk_ids:
                (twice if chunk_id in seen else seen).add(chunk_id)
            repeated = frozenset(d for c, d in zip(chunk_ids, owners, strict=True) if c in twice)
        self._inventory_cache = (version, found, repeated)
        return found

    async def repeated_documents(self) -> frozenset[str]:
        """Documents with a chunk whose row the table holds more than once (two writers
        of one document, a retried append), read with ``inventory()`` at the same version.
        ``reconcile_vectors`` has their rows written again."""
        await self.inventory()
        read = self._inventory_cache
        return frozenset() if self._table is None or read is None else read[2]

    async def recover(self) -> str | None:
        """Make the table readable again (see ``VectorStoreProtocol.recover``).

        In order: a table that cannot be opened (or is not a groundkit table) is
        moved aside; one whose rows cannot all be read is restored to its newest
        older version that can be read in full (Lance keeps recent versions), else
        moved aside; a vector index that cannot answer a query is rebuilt. What was
        moved aside stays on disk, named in the returned note, for inspection.
        """
        conn = self._open_conn()
        await self.refresh()
        if self._damage is not None:
            return await self._set_aside(conn, self._damage)
        if self._table is None:
            if await self._stray_directory():
                return await self._set_aside(conn, "a vector table was left half-created")
            return None
        try:
            await self.inventory()
        except StorageError as exc:
            restored = await self._restore_readable()
            if restored is not None:
                return restored
            return await self._set_aside(conn, f"its rows cannot be read ({exc})")
        return await self._check_index()

    async def _stray_directory(self) -> bool:
        """A local ``<name>.lance`` that LanceDB does not list (a create cut short)."""
        return isinstance(self.path, Path) and await asyncio.to_thread(self.path.exists)

    async def _restore_readable(self) -> str | None:
        """Restore the newest older version whose rows read in full; None if none does."""
        table = self._table
        try:
            current = int(await table.version())
            listed = await table.list_versions()
        except Exception:
            return None
        versions = sorted(
            (int(v["version"] if isinstance(v, dict) else v.version) for v in listed),
            reverse=True,
        )
        for version in versions:
            if version >= current:
                continue
            try:
                await table.checkout(version)
                await table.query().select(["document_id", "chunk_id", "vector"]).to_arrow()
                await table.restore()
                await table.checkout_latest()
            except Exception:
                continue
            self._doc_cache = None
            self._indexed = None
            return (
                f"the vector table's latest rows could not be read; restored it to version "
                f"{version} (rows written since are embedded again)"
            )
        with contextlib.suppress(Exception):  # the caller sets the table aside anyway
            await table.checkout_latest()
        return None

    async def _check_index(self) -> str | None:
        """Rebuild a vector index that cannot answer a query; None when it can."""
        if not await self.has_ann_index():
            return None
        probe = np.zeros(self._dimensions, dtype=np.float32)
        probe[0] = 1.0
        try:
            await self._search(probe, 1, None, exact=False)
        except StorageError:
            pass
        else:
            return None
        try:
            for index in await self._table.list_indices():
                await self._table.drop_index(index.name)
        except Exception as exc:
            _storage_error("drop the damaged vector index", self.path, exc)
        self._indexed = False
        await self._maybe_build_index(upgrade=True)
        return "the vector index could not answer a query; rebuilt it"

    async def _set_aside(self, conn: Any, reason: str) -> str:
        """Take the unusable table out of the way so a new one can be written."""
        self._forget_table()
        self._damage = None
        if isinstance(self.path, Path):
            stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S%f")
            aside = self.path.with_name(f"{self.path.name}.damaged-{stamp}")
            try:
                await asyncio.to_thread(self.path.rename, aside)
            except FileNotFoundError:
                return f"{reason}; it is gone, its vectors are embedded again"
            except OSError as exc:
                raise StorageError(
                    f"vector store {str(self.path)!r}: {reason}, and it cannot be moved aside "
                    f"({exc.strerror or exc}); move or delete it, then ingest again"
                ) from None
            return f"{reason}; moved it to {aside.name} and embedded its vectors again"
        try:
            await conn.drop_table(self._name)
            if await _has_table(conn, self._name):
                # Objects LanceDB does not own (empty "directory" markers some tools
                # write) still make the prefix look like a table: remove the prefix.
                await asyncio.to_thread(self._delete_prefix)
        except Exception as exc:
            raise StorageError(
                f"vector store {str(self.path)!r}: {reason}, and it cannot be dropped "
                f"({_first_line(exc)}); delete it, then ingest again"
            ) from None
        return f"{reason}; dropped it and embedded its vectors again"

    def _delete_prefix(self) -> None:
        from groundkit.storage.snapshots import object_filesystem

        filesystem, root = object_filesystem(str(self.path), self._storage_options)
        filesystem.delete_dir(root)

    # -- writes --------------------------------------------------------------

    async def upsert_documents(
        self,
        items: Sequence[tuple[str, Sequence[str], npt.ArrayLike]],
        *,
        content_hashes: Mapping[str, Sequence[str]] | None = None,
    ) -> None:
        """Replace the rows of several documents: one delete, then one add.

        Between the two commits these documents have no rows, never stale ones;
        a crash there leaves them without vectors, which the Indexer repairs.
        Every item is checked before anything is written.
        """
        conn = self._live_conn()
        doc_ids = [doc for doc, _, _ in items]
        if len(set(doc_ids)) != len(doc_ids):
            raise IngestionError("a document appears twice in one upsert")
        quoted = _quote_ids(doc_ids, IngestionError)
        hashes_of = content_hashes or {}
        if unknown := set(hashes_of) - set(doc_ids):
            raise IngestionError(f"content hashes given for documents not upserted: {unknown}")
        all_ids: list[str] = []
        owners: list[str] = []
        hashes: list[str | None] = []
        matrices: list[npt.NDArray[np.float32]] = []
        for document_id, chunk_ids, vectors in items:
            ids = list(chunk_ids)
            if not all(isinstance(c, str) and c for c in ids):
                raise IngestionError(f"{document_id!r}: chunk ids must be non-empty strings")
            if len(set(ids)) != len(ids):
                raise IngestionError(f"{document_id!r}: chunk ids repeat")
            matrices.append(_as_matrix(vectors, len(ids), self._dimensions, IngestionError))
            given = hashes_of.get(document_id)
            if given is None:
                hashes.extend([None] * len(ids))
            else:
                if len(given) != len(ids) or not all(isinstance(h, str) and h for h in given):
                    raise IngestionError(
                        f"{document_id!r}: one non-empty content hash per chunk is required"
                    )
                hashes.extend(given)
            all_ids.extend(ids)
            owners.extend([document_id] * len(ids))
        if len(set(all_ids)) != len(all_ids):
            raise IngestionError("a chunk id appears under two documents")
        if not items:
            return
        matrix = np.concatenate(matrices) if matrices else np.zeros((0, self._dimensions))
        _, pa = _import_lancedb()
        async with self._write_lock:
            try:
                if self._table is None and await _has_table(conn, self._name):
                    # Another handle created the table after this one opened.
                    self._table = await conn.open_table(self._name)
                    await self._check_schema()
                columns = {
                    "chunk_id": pa.array(all_ids, pa.string()),
                    "document_id": pa.array(owners, pa.string()),
                    "vector": pa.FixedSizeListArray.from_arrays(
                        pa.array(matrix.reshape(-1), pa.float32()), self._dimensions
                    ),
                }
                if self._hash_column:
                    columns["content_hash"] = pa.array(hashes, pa.string())
                data = pa.table(columns, schema=self._schema())
                if self._table is None:
                    if not all_ids:
                        return
                    self._table = await self._create_or_open(conn, columns, data)
                else:
                    where = f"document_id IN ({quoted})"
                    await _retry_conflicts(partial(self._delete_latest, where))
                    table = self._table  # opened afresh if the table was created again
                    if all_ids:
                        await _retry_conflicts(lambda: table.add(data))
            except Exception as exc:
                _storage_error(f"store the vectors of {len(items)} documents", self.path, exc)
            if all_ids:
                await self._maybe_build_index()

    async def _create_or_open(self, conn: Any, columns: Mapping[str, Any], data: Any) -> Any:
        """Create the table with ``data``, stamped (a new table uid, and the owner's); if
        another process created it first, add to it (checked as any adopted table)."""
        _, pa = _import_lancedb()
        stamp = {_TABLE_KEY: uuid.uuid4().hex}
        if self._owner is not None:
            stamp[_OWNER_KEY] = self._owner
        try:
            stamped = pa.table(dict(columns), schema=self._schema(stamp))
            created = await conn.create_table(self._name, data=stamped, exist_ok=False)
        except Exception:
            if not await _has_table(conn, self._name):
                raise
        else:
            self._stamp = (self._owner, stamp[_TABLE_KEY])
            return created
        self._table = await conn.open_table(self._name)
        await self._check_schema()
        table = await self._latest_checked()
        await _retry_conflicts(lambda: table.add(data))
        return table

    async def delete_documents(self, document_ids: Sequence[str]) -> int:
        """Remove the rows of ``document_ids``; returns the number of rows removed.

        Every id is checked before the first delete, so a bad one deletes nothing.
        """
        self._live_conn()
        ids = sorted(set(document_ids))
        batches = [
            _quote_ids(ids[i : i + _IN_BATCH], IngestionError)
            for i in range(0, len(ids), _IN_BATCH)
        ]
        deleted = 0
        async with self._write_lock:
            if self._table is None:
                return 0
            for quoted in batches:
                where = f"document_id IN ({quoted})"
                try:
                    result = await _retry_conflicts(partial(self._delete_latest, where))
                except Exception as exc:
                    _storage_error("delete documents", self.path, exc)
                deleted += int(result.num_deleted_rows)
        return deleted

    async def optimize(self) -> None:
        """Compact small fragments, fold new rows into the ANN index, drop old versions.

        Every upsert adds fragments; call this after an ingest, not per document.
        An index of another kind (IVF_SQ, which older groundkit versions built) is
        rebuilt here, once: about a minute at 1M rows.
        """
        self._live_conn()
        if self._table is None:
            return
        async with self._write_lock:
            try:
                table = await _retry_conflicts(self._latest_checked)
                await _retry_conflicts(lambda: table.optimize(cleanup_older_than=_KEEP_VERSIONS))
            except Exception as exc:
                if not _is_commit_conflict(exc):
                    _storage_error("optimize", self.path, exc)
                # Another process kept compacting meanwhile; the rows are all there.
                logger.info("optimize skipped: other writers kept committing")
            await self._maybe_build_index(upgrade=True)

    async def erase_documents(
        self, document_ids: Sequence[str], *, keep: Collection[str] | None = None
    ) -> VectorErasure:
        """Delete the rows of ``document_ids`` (with ``keep``: of every document not in
        it too), then leave no copy of any deleted row in the table's files.

        Lance only marks a deleted row (a deletion file beside the data file), and its
        compaction rewrites a data file only once a share of it is deleted. So when
        the current version still marks any deleted row, every row is rewritten into
        new files (an update that changes no value: the old files then hold no live
        row), and ``optimize`` runs with no age limit, twice (its index step commits
        one more version), removing every older version and the files only they
        used. A reader of another process still on an older version fails its next
        read and refreshes (adr/0053-erasure.md).
        """
        self._live_conn()
        rows = await self.delete_documents(document_ids)
        if keep is not None:
            wanted = set(keep)
            stray = sorted({d for d in (await self.inventory()).values() if d not in wanted})
            rows += await self.delete_documents(stray)
        async with self._write_lock:
            if self._table is None:
                return VectorErasure(rows=rows)
            versions = removed = 0
            try:
                # Old versions of this table only: never another collection's.
                table = await _retry_conflicts(self._latest_checked)
                if await _marks_deleted_rows(table):
                    await _retry_conflicts(
                        lambda: table.update(updates_sql={"chunk_id": "chunk_id"})
                    )
                for _ in range(2):
                    with warnings.catch_warnings():
                        # LanceDB warns that readers of older versions will fail: erasing
                        # them is the point, and the ADR says what readers do.
                        warnings.simplefilter("ignore", UserWarning)
                        stats = await _retry_conflicts(
                            lambda: table.optimize(cleanup_older_than=timedelta(0))
                        )
                    versions += int(stats.prune.old_versions_removed)
                    removed += int(stats.prune.bytes_removed)
            except Exception as exc:
                _storage_error("erase deleted rows", self.path, exc)
            finally:
                self._doc_cache = None
                self._inventory_cache = None
                self._indexed = None
                self._memory = None  # no copy of an erased row stays in memory
        return VectorErasure(rows=rows, versions=versions, bytes_removed=removed)

    async def _maybe_build_index(self, *, upgrade: bool = False) -> None:
        """Build the indexes once the table is large enough; ``upgrade`` also replaces
        a vector index of another kind and adds the ``document_id`` index to a table
        that lacks it (one indexed by an older groundkit)."""
        indices: list[Any] | None = None
        if upgrade or self._indexed is None:
            indices = await self._indices()
            kind = _vector_index_kind(indices)
            self._indexed = kind is not None
            if kind is not None and (kind == _ANN_INDEX_TYPE or not upgrade):
                if upgrade:
                    await self._build_lookup_index(indices)
                return
        elif self._indexed:
            return
        if not self._indexed and await self.count() < self.ann_threshold:
            return
        try:
            from lancedb.index import IvfRq

            await self._table.create_index(
                "vector",
                config=IvfRq(distance_type="cosine", num_bits=_RQ_BITS),
                replace=True,
                name=_ANN_INDEX_NAME,
            )
        except Exception as exc:
            _storage_error("build the ANN index", self.path, exc)
        self._indexed = True
        await self._build_lookup_index(indices if indices is not None else await self._indices())

    async def _build_lookup_index(self, indices: list[Any]) -> None:
        """The B-tree index on ``document_id``, unless ``indices`` (the table's) has one."""
        if any("document_id" in index.columns for index in indices):
            return
        table = self._table
        try:
            from lancedb.index import BTree

            # Another writer's commit meanwhile (or its own build of the same index,
            # which this one replaces) is a race to try again, not a failure.
            await _retry_conflicts(
                lambda: table.create_index(
                    "document_id", config=BTree(), replace=True, name=_LOOKUP_INDEX_NAME
                )
            )
        except Exception as exc:
            _storage_error("build the document_id index", self.path, exc)

    async def has_ann_index(self) -> bool:
        """Whether the table has a vector index (and queries take the ANN path)."""
        return await self.ann_index_type() is not None

    async def ann_index_type(self) -> str | None:
        """LanceDB's name for the vector index's kind (``"IvfRq"``), or ``None``."""
        self._live_conn()
        if self._table is None:
            return None
        return _vector_index_kind(await self._indices())

    async def _indices(self) -> list[Any]:
        """The table's indexes, as LanceDB lists them."""
        try:
            return list(await self._table.list_indices())
        except Exception as exc:
            _storage_error("list indices", self.path, exc)

    # -- reads ---------------------------------------------------------------

    async def _read_table(self) -> Any:
        """The handle searches read from: the table itself here; a cached store answers
        with a local copy of the same version (``groundkit.storage.vector_cache``)."""
        return self._table

    async def vectors_by_content(
        self, content_hashes: Sequence[str]
    ) -> dict[str, npt.NDArray[np.float32]]:
        """Stored vectors keyed by chunk content hash (one scan per batch of hashes)."""
        self._live_conn()
        wanted = sorted(set(content_hashes))
        batches = [
            _quote_ids(wanted[i : i + _IN_BATCH], IngestionError, what="content hash")
            for i in range(0, len(wanted), _IN_BATCH)
        ]
        found: dict[str, npt.NDArray[np.float32]] = {}
        if self._table is None or not self._hash_column:
            return found
        for quoted in batches:
            try:
                table = await (
                    self._table.query()
                    .where(f"content_hash IN ({quoted})")
                    .select(["content_hash", "vector"])
                    .to_arrow()
                )
            except Exception as exc:
                _storage_error("read stored vectors", self.path, exc)
            if table.num_rows == 0:
                continue
            flat = table["vector"].combine_chunks().flatten().to_numpy(zero_copy_only=False)
            matrix = np.asarray(flat, dtype=np.float32).reshape(-1, self._dimensions)
            for content_hash, row in zip(table["content_hash"].to_pylist(), matrix, strict=True):
                found.setdefault(str(content_hash), row.copy())
        return found

    async def count(self) -> int:
        self._live_conn()
        if self._table is None:
            return 0
        try:
            return int(await self._table.count_rows())
        except Exception as exc:
            _storage_error("count rows", self.path, exc)

    async def document_ids(self) -> set[str]:
        self._live_conn()
        return set(await self._stored_documents())

    async def _stored_documents(self) -> frozenset[str]:
        """Document ids in the table, cached per table version (a scan of one column)."""
        if self._table is None:
            return frozenset()
        try:
            version = int(await self._table.version())
            if self._doc_cache is not None and self._doc_cache[0] == version:
                return self._doc_cache[1]
            reader = await self._read_table()
            column = (await reader.query().select(["document_id"]).to_arrow())["document_id"]
            ids = frozenset(str(v) for v in column.unique().to_pylist())
        except Exception as exc:
            _storage_error("list documents", self.path, exc)
        self._doc_cache = (version, ids)
        return ids

    async def _restriction(self, wanted: frozenset[str]) -> str | None:
        """The shortest filter equal to ``document_id IN wanted`` on the current table.

        ``""`` means no filter is needed, ``None`` that nothing can match.

        A Retriever restricts to every document it knows, which is usually all
        of them: then no filter is needed, and a long ``IN`` list would cost
        more than the search (about 2x at 1,000 documents).
        """
        stored = await self._stored_documents()
        present = wanted & stored
        excluded = stored - wanted
        if not present:
            return None
        if not excluded:
            return ""
        if len(excluded) < len(present) and all(VECTOR_ID_PATTERN.fullmatch(d) for d in excluded):
            return f"document_id NOT IN ({_quote_ids(sorted(excluded), RetrievalError)})"
        return f"document_id IN ({_quote_ids(sorted(present), RetrievalError)})"

    async def query(
        self,
        vector: npt.ArrayLike,
        top_k: int,
        *,
        document_ids: Collection[str] | None = None,
        exact: bool = False,
    ) -> list[VectorHit]:
        """Nearest rows by cosine; see ``VectorStoreProtocol.query``.

        ``exact=True`` scans every stored vector instead of the ANN index: the
        reference to measure the index's recall against on your own vectors. A search
        restricted by ``document_ids`` is exact whenever the vectors are held in memory.

        The document restriction is spelt as a predicate from checked ids only
        (``VECTOR_ID_PATTERN``); no caller text ever reaches LanceDB's SQL.
        """
        self._live_conn()
        try:
            array = np.asarray(vector, dtype=np.float32)
        except (TypeError, ValueError) as exc:
            raise RetrievalError(f"query vector is not convertible to float32: {exc}") from None
        if array.ndim != 1:
            raise RetrievalError(f"a query vector is one row, not shape {array.shape}")
        query = _as_matrix(array.reshape(1, -1), 1, self._dimensions, RetrievalError)[0]
        top_k = _checked_top_k(top_k)
        wanted: frozenset[str] | None = None
        if document_ids is not None:
            wanted = _checked_ids(document_ids)
        if top_k < 1 or self._table is None or wanted == frozenset():
            return []
        if self._indexed is None:
            self._indexed = await self.has_ann_index()
        # A restricted search on vectors in memory is exact over the wanted rows alone:
        # cheaper than the index's filtered probe, and it misses nothing
        # (adr/0091-restricted-searches-exact.md).
        on_index = bool(self._indexed) and not exact and wanted is None
        held = self._held() if on_index else None
        if held is None:
            resident = await self._resident()
            if resident is not None and not on_index:
                in_memory = resident
                return _distinct_hits(
                    await _deepened(top_k, lambda k: _as_ready(in_memory.ranked(query, k, wanted))),
                    top_k,
                )
        else:
            # On the index's path the copy (or count) is checked after LanceDB answers,
            # not before asking, so the query goes out at once (adr/0082).
            resident = held
        restriction = "" if wanted is None else await self._restriction(wanted)
        if restriction is None:
            return []

        async def fetch(k: int) -> list[tuple[str, str, float]]:
            rows = await self._ranked(query, k, restriction, exact=exact, resident=resident)
            if wanted is not None and any(d not in wanted for _, d, _ in rows):
                # A write landed between choosing the filter and searching: spell it out.
                spelled = f"document_id IN ({_quote_ids(sorted(wanted), RetrievalError)})"
                rows = await self._ranked(query, k, spelled, exact=exact, resident=resident)
            return rows

        return _distinct_hits(await _deepened(top_k, fetch), top_k)

    async def _resident(self) -> _Resident | None:
        """The current version's vectors in memory, or None when the table holds more
        fit in ``memory_max_bytes`` (or a write moved it while they were read).

        Checked, never trusted: the handle's version is read and compared with the
        copy's, and the copy's parts with each other; a copy that fails either is
        dropped and read again from the table. Exact searches call this first; the
        index's path checks the copy it holds after the query instead (``_search``).
        """
        if self.memory_max_bytes < 1:
            return None
        table = self._table
        try:
            version = int(await table.version())
        except Exception as exc:
            _storage_error("search", self.path, exc)
        held = self._memory
        if not self._holds(held, table, version):
            async with self._memory_lock:
                held = self._memory
                if not self._holds(held, table, version):
                    held = self._memory = None
                    held = await self._read_resident(table, version)
                    self._memory = held
        if held is None or held.matrix is None:
            return None
        return held

    def _held(self) -> _Resident | None:
        """The copy (or count) held for this handle, whole, whatever its version."""
        held = self._memory
        if held is None or not self._holds(held, self._table, held.version):
            return None
        return held

    def _holds(self, held: _Resident | None, table: Any, version: int) -> bool:
        """Whether ``held`` is this handle's copy of ``version``, whole, and (held or
        only counted) on the side of ``memory_max_bytes`` it was read on."""
        if held is None or held.table is not table or held.version != version:
            return False
        fits = held.rows * self._dimensions * 4 <= self.memory_max_bytes
        return held.intact(self._dimensions) and fits == (held.matrix is not None)

    async def _read_resident(self, table: Any, version: int) -> _Resident | None:
        """Read every row of ``version`` into memory (None if a write moved the
        handle meanwhile); a table too large for ``memory_max_bytes`` is only counted."""
        try:
            rows = int(await table.count_rows())
            if rows * self._dimensions * 4 > self.memory_max_bytes:
                return _Resident(table, version, rows)
            data = await self._read_vectors(rows)
            moved = int(await table.version()) != version
        except Exception as exc:
            _storage_error("search", self.path, exc)
        if data is None or moved or self._table is not table:
            return None
        return _Resident(table, version, rows, data)

    async def _read_vectors(self, rows: int) -> _Columns | None:
        """Every row's ids and vector from the handle searches read, batch by batch
        into one matrix made beforehand (the peak is the matrix and one batch, not a
        second copy); None when the table does not hold ``rows`` rows."""
        reader = await self._read_table()
        query = reader.query().select(["chunk_id", "document_id", "vector"]).with_row_id()
        matrix = np.empty((rows, self._dimensions), dtype=np.float32)
        row_ids = np.empty(rows, dtype=np.uint64)
        chunk_ids: list[str] = []
        owners: list[str] = []
        filled = 0
        async for batch in await query.to_batches():
            n = int(batch.num_rows)
            if filled + n > rows:
                return None
            flat = batch["vector"].flatten().to_numpy(zero_copy_only=False)
            matrix[filled : filled + n] = np.asarray(flat, dtype=np.float32).reshape(n, -1)
            row_ids[filled : filled + n] = batch["_rowid"].to_numpy(zero_copy_only=False)
            chunk_ids.extend(str(c) for c in batch["chunk_id"].to_pylist())
            owners.extend(str(d) for d in batch["document_id"].to_pylist())
            filled += n
        return (matrix, chunk_ids, owners, row_ids) if filled == rows else None

    async def _ranked(
        self,
        query: npt.NDArray[np.float32],
        top_k: int,
        restriction: str,
        *,
        exact: bool,
        resident: _Resident | None = None,
    ) -> list[tuple[str, str, float]]:
        """``(chunk_id, document_id, distance)`` sorted by ``(distance, chunk_id)``."""
        predicate = restriction or None
        limit = top_k + _TIE_PAD
        while True:
            rows = await self._search(query, limit, predicate, exact=exact, resident=resident)
            if len(rows) < limit or rows[-1][2] != rows[top_k - 1][2]:
                break
            limit *= 2  # the tie at the cut runs past what was fetched
        rows.sort(key=lambda row: (row[2], row[0]))
        return rows

    async def _search(
        self,
        vector: npt.NDArray[np.float32],
        limit: int,
        predicate: str | None,
        *,
        exact: bool,
        resident: _Resident | None = None,
    ) -> list[tuple[str, str, float]]:
        """The ``limit`` nearest rows from LanceDB. With the index and ``resident``'s
        vectors, the index's candidates (``refine_factor`` times ``limit``, by their
        codes) come back as row ids only and are re-scored on the vectors in memory:
        what LanceDB's own re-scoring does, without reading each candidate's vector and
        ids from the files. ``resident`` (vectors, or only a count) is checked against
        the handle's version once LanceDB has answered, and dropped when stale.
        """
        held_vectors = resident is not None and resident.matrix is not None
        rescore = held_vectors and bool(self._indexed) and not exact
        try:
            reader = await self._read_table()
            refine = self.refine_factor or refine_factor_for(limit)
            q = (
                reader.query()
                .nearest_to(vector)
                .column("vector")
                .distance_type("cosine")
                .limit(limit * refine if rescore else limit)
            )
            q = (
                q.select(["_distance"]).with_row_id()
                if rescore
                else q.select(["chunk_id", "document_id", "_distance"])
            )
            if predicate is not None:
                q = q.where(predicate)
            if exact:
                q = q.bypass_vector_index()
            elif self._indexed:
                nprobes = self.nprobes or _EVERY_PARTITION
                if not rescore:
                    q = q.refine_factor(refine)
                if predicate is None:
                    q = q.nprobes(nprobes)
                else:
                    # A filter may leave the probed partitions short of the limit;
                    # with no maximum LanceDB keeps probing until it is met.
                    q = q.maximum_nprobes(0).minimum_nprobes(nprobes)
            result = await q.to_arrow()
            # Row ids name rows of one version: the copy's, unless a write has moved the
            # handle since it was read.
            same = resident is None or int(await self._table.version()) == resident.version
        except Exception as exc:
            _storage_error("search", self.path, exc)
        if rescore and same:
            assert resident is not None
            ids = np.asarray(result["_rowid"].to_numpy(), dtype=np.uint64)
            found = resident.rescored(ids, vector, limit)
            if found is not None:
                return found
            same = False  # a candidate the copy lacks: it is not the version searched
        if not same and self._memory is resident:
            self._memory = None  # stale: the next search reads the current version
        if rescore:
            # The copy does not hold these rows: LanceDB re-scores them itself.
            return await self._search(vector, limit, predicate, exact=exact)
        distances = result["_distance"].to_pylist()
        return [
            (str(c), str(d), float(dist) if dist is not None and math.isfinite(dist) else 2.0)
            for c, d, dist in zip(
                result["chunk_id"].to_pylist(),
                result["document_id"].to_pylist(),
                distances,
                strict=True,
            )
        ]
