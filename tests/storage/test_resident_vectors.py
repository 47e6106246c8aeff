"""LanceDBVectorStore's in-memory exact search: the same rankings as LanceDB's flat
scan, and a copy that follows the table version (checked, never trusted)."""

from __future__ import annotations

import asyncio
import itertools
import os
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from evals.hybrid.exact import lance_exact
from groundkit.errors import RetrievalError
from groundkit.storage.lancedb import (
    DEFAULT_MEMORY_MAX_BYTES,
    MAX_QUERY_ROWS,
    LanceDBVectorStore,
)
from groundkit.storage.protocols import VectorHit, score_to_cosine
from groundkit.testing.conformance.vectors import DIM, basis, random_rows, unit, upsert

os.environ.setdefault("LANCEDB_LOG", "error")

# Two rankings may order rows differently only where their true cosines differ by
# less than float32 rounding of a DIM-wide dot product.
_ROUNDING = 1e-6


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[LanceDBVectorStore]:
    s = await LanceDBVectorStore.open(tmp_path, "c", DIM)
    try:
        yield s
    finally:
        await s.close()


def _ids(hits: list[VectorHit]) -> list[str]:
    return [h.chunk_id for h in hits]


class _Truth(NamedTuple):
    distance: float  # 1 - cosine, in float64
    direction: tuple[float, ...]  # equal for rows that are multiples of each other


def _truth(
    rows: dict[str, npt.NDArray[np.float64]], query: npt.NDArray[np.float64]
) -> dict[str, _Truth]:
    q = query / np.linalg.norm(query)
    return {
        c: _Truth(float(1.0 - (v / np.linalg.norm(v)) @ q), tuple(v / np.abs(v).max()))
        for c, v in rows.items()
    }


def _check_exact(ranking: list[str], truth: dict[str, _Truth], top_k: int) -> None:
    """``ranking`` is the exact top ``top_k`` of ``truth``, up to rounding; rows of
    the same direction (equal in every computation) follow chunk id order."""
    assert len(ranking) == min(top_k, len(truth))
    for a, b in itertools.pairwise(ranking):
        assert truth[a].distance <= truth[b].distance + _ROUNDING
        if truth[a].direction == truth[b].direction:
            assert a < b
    left_out = [t.distance for c, t in truth.items() if c not in set(ranking)]
    if ranking and left_out:
        assert min(left_out) >= truth[ranking[-1]].distance - _ROUNDING


def _separated(truth: dict[str, _Truth], top_k: int) -> bool:
    """Whether every two of the best ``top_k + 1`` rows differ by more than rounding,
    or point the same way: then rounding cannot order them differently."""
    near = sorted(truth.values())[: top_k + 1]
    return all(
        b.distance - a.distance > _ROUNDING or a.direction == b.direction
        for a, b in itertools.pairwise(near)
    )


@settings(max_examples=25, deadline=None)
@given(
    grid=st.lists(
        st.lists(st.integers(-2, 2), min_size=DIM, max_size=DIM).filter(any),
        min_size=1,
        max_size=30,
    ),
    owners=st.lists(st.integers(0, 4), min_size=30, max_size=30),
    query=st.lists(st.integers(-2, 2), min_size=DIM, max_size=DIM).filter(any),
    top_k=st.integers(1, 35),
    restrict=st.none() | st.sets(st.integers(0, 5), max_size=4),
)
def test_in_memory_ranks_as_lancedb_flat_scan(
    grid: list[list[int]],
    owners: list[int],
    query: list[int],
    top_k: int,
    restrict: set[int] | None,
) -> None:
    # Small integer vectors: many exact ties (repeated rows) and near ties.
    docs: dict[str, list[tuple[str, list[int]]]] = {}
    for i, row in enumerate(grid):
        docs.setdefault(f"d{owners[i]}", []).append((f"c{(i * 7) % 31:02d}-{i}", row))
    wanted = None if restrict is None else {f"d{i}" for i in restrict}

    async def compare() -> None:
        with tempfile.TemporaryDirectory() as tmp:
            s = await LanceDBVectorStore.open(tmp, "c", DIM)
            try:
                await s.upsert_documents(
                    [(d, [c for c, _ in rows], [v for _, v in rows]) for d, rows in docs.items()]
                )
                memory = await s.query(query, top_k, document_ids=wanted)
                if wanted != set():  # nothing to search otherwise
                    assert s._memory is not None and s._memory.matrix is not None
                flat = await lance_exact(s, query, top_k, wanted)
            finally:
                await s.close()
        rows = {
            c: np.asarray(v, dtype=np.float64)
            for d, found in docs.items()
            if wanted is None or d in wanted
            for c, v in found
        }
        truth = _truth(rows, np.asarray(query, dtype=np.float64))
        _check_exact(_ids(memory), truth, top_k)
        _check_exact(_ids(flat), truth, top_k)
        # Unless rounding could decide between two of the candidates, the two paths
        # agree row for row.
        if _separated(truth, top_k):
            assert _ids(memory) == _ids(flat)
        for m, f in zip(memory, flat, strict=True):
            assert m.document_id in (wanted or docs)
            assert abs(m.score - f.score) <= _ROUNDING or m.chunk_id != f.chunk_id

    asyncio.run(compare())


async def test_same_hits_as_the_flat_scan_on_random_vectors(store: LanceDBVectorStore) -> None:
    vectors = random_rows(500, seed=3)
    for d in range(10):
        ids = [f"{d}-{i:03d}" for i in range(50)]
        await upsert(store, f"doc{d}", ids, vectors[d * 50 : (d + 1) * 50])
    for seed in range(5):
        query = random_rows(1, seed=100 + seed)[0]
        for top_k, wanted in ((10, None), (100, None), (7, {"doc3", "doc8"})):
            memory = await store.query(query, top_k, document_ids=wanted)
            flat = await lance_exact(store, query, top_k, wanted)
            assert _ids(memory) == _ids(flat)
            assert [h.document_id for h in memory] == [h.document_id for h in flat]
            assert np.allclose([h.score for h in memory], [h.score for h in flat], atol=1e-6)


async def test_rows_a_rounding_error_apart_tie_and_go_by_chunk_id(tmp_path: Path) -> None:
    """A unit vector's product with itself can round above 1 in float32: such a row must
    not outrank one that ties with it in score, on any path."""
    v = [0.8534376621246338, -0.5181697010993958, 1.49830162525177, -0.7798393368721008]
    v += [0.3865019977092743, -0.22728300094604492, -0.7540218234062195, 0.5876750349998474]
    v += [-0.1549825668334961, 0.6032105684280396, -0.047291506081819534]
    v += [-1.0858162641525269, -0.10206924378871918]
    w = [*v[:11], -1.0858161449432373, v[12]]  # one component a float32 step away
    s = await LanceDBVectorStore.open(tmp_path, "c", len(v))
    try:
        await s.upsert_documents([("d1", ["a"], [w]), ("d2", ["b"], [v])])
        query = np.asarray(v, dtype=np.float32)
        found = [
            await s.query(query, 2),
            await s.query(query, 2, document_ids={"d1", "d2"}),
            await s.query(query, 2, exact=True),
        ]
        assert s._memory is not None and s._memory.matrix is not None
        s.memory_max_bytes = 0
        found.append(await s.query(query, 2, exact=True))  # LanceDB's flat scan
    finally:
        await s.close()
    for hits in found:
        assert [(h.chunk_id, h.score) for h in hits] == [("a", 1.0), ("b", 1.0)]


@pytest.mark.parametrize("held", [True, False])
async def test_top_k_is_bounded_on_both_paths(tmp_path: Path, held: bool) -> None:
    s = await LanceDBVectorStore.open(tmp_path, "c", DIM)
    try:
        await upsert(s, "d1", ["a", "b"], np.stack([basis(0), basis(1)]))
        if not held:
            s.memory_max_bytes = 0
        assert len(await s.query(basis(0), MAX_QUERY_ROWS)) == 2
        one: Any = np.int64(1)  # a numpy integer, as array code hands one over
        assert len(await s.query(basis(0), one)) == 1
        with pytest.raises(RetrievalError, match="more than the 100,000 rows"):
            await s.query(basis(0), MAX_QUERY_ROWS + 1, document_ids=["d1"])
    finally:
        await s.close()


async def test_the_copy_follows_the_table_version(store: LanceDBVectorStore) -> None:
    assert store.memory_max_bytes == DEFAULT_MEMORY_MAX_BYTES
    await upsert(store, "d1", ["a", "b"], np.stack([basis(0), basis(1)]))
    assert _ids(await store.query(basis(2), 5)) == ["a", "b"]
    first = store._memory
    assert first is not None and first.version == int(await store.table.version())
    # No write: the same copy answers.
    await store.query(basis(1), 1)
    assert store._memory is first
    # A write between searches is seen by the next search.
    await upsert(store, "d2", ["c"], np.stack([unit(0.1, 0.0, 1.0)]))
    assert _ids(await store.query(basis(2), 1)) == ["c"]
    second = store._memory
    assert second is not first and second is not None
    assert second.version == int(await store.table.version()) > first.version
    await store.delete_documents(["d2"])
    assert _ids(await store.query(basis(2), 5)) == ["a", "b"]


async def test_another_handles_write_is_seen_after_refresh(
    store: LanceDBVectorStore, tmp_path: Path
) -> None:
    await upsert(store, "d1", ["a"], np.stack([basis(0)]))
    assert _ids(await store.query(basis(1), 5)) == ["a"]
    other = await LanceDBVectorStore.open(tmp_path, "c", DIM)
    try:
        await upsert(other, "d2", ["b"], np.stack([basis(1)]))
    finally:
        await other.close()
    # Until refreshed the handle reads its own version, in memory as LanceDB would.
    assert _ids(await store.query(basis(1), 5)) == ["a"]
    await store.refresh()
    assert _ids(await store.query(basis(1), 5)) == ["b", "a"]


async def test_a_write_replaces_rows_another_handle_wrote_since(
    store: LanceDBVectorStore, tmp_path: Path
) -> None:
    """This handle has not seen the other's rows of d2 and d3; replacing d2 and deleting
    d3 from here must still leave d2 one row each and d3 none."""
    await upsert(store, "d1", ["a"], np.stack([basis(0)]))
    assert _ids(await store.query(basis(1), 5)) == ["a"]
    other = await LanceDBVectorStore.open(tmp_path, "c", DIM)
    try:
        await upsert(other, "d2", ["b"], np.stack([basis(1)]))
        await upsert(other, "d3", ["c"], np.stack([basis(2)]))
    finally:
        await other.close()
    await upsert(store, "d2", ["b"], np.stack([basis(3)]))
    assert await store.delete_documents(["d3"]) == 1
    for exact in (False, True):
        hits = await store.query(basis(3), 5, exact=exact)
        assert sorted((h.chunk_id, h.document_id) for h in hits) == [("a", "d1"), ("b", "d2")]
    assert await store.count() == 2


@pytest.mark.parametrize("damage", ["stale version", "short ids", "writeable matrix", "width"])
async def test_stale_or_corrupt_copy_is_read_again(store: LanceDBVectorStore, damage: str) -> None:
    vectors = random_rows(40, seed=5)
    await upsert(store, "d1", [f"c{i:02d}" for i in range(40)], vectors)
    query = random_rows(1, seed=6)[0]
    expected = await lance_exact(store, query, 10)
    assert _ids(await store.query(query, 10)) == _ids(expected)
    held = store._memory
    assert held is not None and held.matrix is not None
    if damage == "stale version":
        held.version -= 1
    elif damage == "short ids":
        held.chunk_ids = held.chunk_ids[:-1]
    elif damage == "writeable matrix":
        held.matrix = np.zeros_like(held.matrix)  # a fresh array is writeable
    else:
        held.matrix = np.zeros((40, DIM + 1), dtype=np.float32)
        held.matrix.flags.writeable = False
    assert _ids(await store.query(query, 10)) == _ids(expected)
    assert store._memory is not held
    assert store._memory is not None and store._memory.intact(DIM)


async def test_a_table_above_the_limit_is_searched_by_lancedb(store: LanceDBVectorStore) -> None:
    vectors = random_rows(30, seed=8)
    await upsert(store, "d1", [f"c{i:02d}" for i in range(30)], vectors)
    query = random_rows(1, seed=9)[0]
    in_memory = _ids(await store.query(query, 10))
    store.memory_max_bytes = 29 * DIM * 4
    assert _ids(await store.query(query, 10)) == in_memory
    held = store._memory
    assert held is not None and held.matrix is None and held.rows == 30
    store.memory_max_bytes = 0
    assert _ids(await store.query(query, 10)) == in_memory


async def test_erasure_drops_the_copy(store: LanceDBVectorStore) -> None:
    await upsert(store, "d1", ["a"], np.stack([basis(0)]))
    await upsert(store, "d2", ["b"], np.stack([basis(1)]))
    await store.query(basis(0), 2)
    await store.erase_documents(["d2"])
    held = store._memory
    assert held is None or "b" not in held.chunk_ids
    assert _ids(await store.query(basis(1), 2)) == ["a"]


async def _indexed_store(
    tmp_path: Path, seed: int, queries: int
) -> tuple[LanceDBVectorStore, npt.NDArray[np.float32]]:
    """2,000 random 32-d rows in 20 documents, indexed; and ``queries`` more rows."""
    data = np.random.default_rng(seed).standard_normal((2_000 + queries, 32)).astype(np.float32)
    store = await LanceDBVectorStore.open(tmp_path, "ann", 32, ann_threshold=1_000)
    for d in range(20):
        ids = [f"{i:05d}" for i in range(d * 100, (d + 1) * 100)]
        await upsert(store, f"doc{d:02d}", ids, data[d * 100 : (d + 1) * 100])
    assert await store.has_ann_index()
    return store, data[2_000:]


async def test_ann_candidates_rescored_in_memory_as_lancedb_rescores(tmp_path: Path) -> None:
    store, queries = await _indexed_store(tmp_path, seed=31, queries=20)
    try:
        for top_k, wanted in ((10, None), (100, None), (10, {"doc03", "doc11"})):
            for q in queries:
                memory = await store.query(q, top_k, document_ids=wanted)
                held = store._memory
                assert held is not None and held.matrix is not None  # re-scored in memory
                saved, store.memory_max_bytes = store.memory_max_bytes, 0
                try:
                    lance = await store.query(q, top_k, document_ids=wanted)
                finally:
                    store.memory_max_bytes = saved
                assert _ids(memory) == _ids(lance)
                assert np.allclose([h.score for h in memory], [h.score for h in lance], atol=1e-6)
    finally:
        await store.close()


async def test_a_restricted_search_on_the_copy_is_exact_over_the_wanted_rows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store, queries = await _indexed_store(tmp_path, seed=33, queries=8)
    try:
        # A probe this small misses most of the true neighbours on the index's path.
        store.nprobes, store.refine_factor = 1, 1
        documents = [f"doc{d:02d}" for d in range(20)]
        # One and three documents are gathered; fifteen take the whole product.
        restrictions = [documents[4:5], documents[2:5], documents[:15], ["doc07", "absent"]]
        expected = {
            (i, j): await store.query(q, 10, document_ids=wanted, exact=True)
            for i, q in enumerate(queries)
            for j, wanted in enumerate(restrictions)
        }

        async def no_index(*args: object, **kwargs: object) -> None:
            raise AssertionError("a restricted search with the copy asked LanceDB")

        with monkeypatch.context() as patch:
            patch.setattr(store, "_ranked", no_index)
            for (i, j), exact in expected.items():
                hits = await store.query(queries[i], 10, document_ids=restrictions[j])
                assert hits == exact
                assert {h.document_id for h in hits} <= set(restrictions[j])
                assert len(hits) == 10
        # A table the copy cannot hold takes the index's filtered probe, as before.
        store.memory_max_bytes = 0
        store.nprobes, store.refine_factor = None, None
        for (i, j), exact in expected.items():
            hits = await store.query(queries[i], 10, document_ids=restrictions[j])
            assert _ids(hits) == _ids(exact)
    finally:
        await store.close()


async def test_candidates_the_copy_does_not_hold_are_rescored_by_lancedb(tmp_path: Path) -> None:
    store, queries = await _indexed_store(tmp_path, seed=32, queries=10)
    try:
        expected = [_ids(await store.query(q, 10)) for q in queries]
        held = store._memory
        assert held is not None and held.matrix is not None
        # Row ids of another version: no candidate matches, so none is scored here.
        moved = held.row_ids + np.uint64(1 << 40)
        moved.flags.writeable = False
        held.row_ids = moved
        assert held.intact(32)
        assert [_ids(await store.query(q, 10)) for q in queries] == expected
        assert held.rescored(np.asarray([0], dtype=np.uint64), queries[0], 1) is None
    finally:
        await store.close()


@settings(max_examples=200, deadline=None)
@given(
    rows=st.integers(min_value=1, max_value=40),
    distinct=st.integers(min_value=1, max_value=6),
    limit=st.integers(min_value=1, max_value=45),
    seed=st.integers(min_value=0, max_value=2**16),
)
def test_rescoring_keeps_every_row_tied_at_the_cut(
    rows: int, distinct: int, limit: int, seed: int
) -> None:
    # Candidates drawn from a few distinct vectors tie often; the cut to the nearest
    # ``limit`` must still order them by (distance, chunk id), as a full sort does.
    from groundkit.storage.lancedb import _dot_rows, _Resident

    rng = np.random.default_rng(seed)
    shapes = rng.standard_normal((distinct, 8)).astype(np.float32)
    matrix = shapes[rng.integers(0, distinct, rows)].copy()
    chunk_ids = [f"c{i:03d}" for i in rng.permutation(rows)]
    owners = [f"d{i % 3}" for i in range(rows)]
    ids = rng.permutation(np.arange(10, 10 + 3 * rows, 3)).astype(np.uint64)
    held = _Resident(None, 1, rows, (matrix, chunk_ids, owners, ids))
    query = rng.standard_normal(8).astype(np.float32)
    query /= np.linalg.norm(query)  # as the store hands it over
    candidates = rng.choice(ids, size=int(rng.integers(1, rows + 1)), replace=False)
    found = held.rescored(np.asarray(candidates, dtype=np.uint64), query, limit)
    assert found is not None
    assert held.matrix is not None
    # The same product, every row at once, within [0, 2] as the store's distances are.
    every = np.clip(1.0 - _dot_rows(held.matrix, query), 0.0, 2.0)
    row_of = {int(r): i for i, r in enumerate(ids)}
    reference = []
    for r in candidates:
        i = row_of[int(r)]
        reference.append((chunk_ids[i], owners[i], float(every[i])))
    reference.sort(key=lambda row: (row[2], row[0]))
    assert [(c, d) for c, d, _ in found] == [(c, d) for c, d, _ in reference[:limit]]
    assert np.allclose([x for _, _, x in found], [x for _, _, x in reference[:limit]], atol=1e-5)


def test_rescoring_a_damaged_copy_drops_no_finite_row() -> None:
    # A damaged row (NaN distance) ranks last, at distance 2.0 as on LanceDB's path,
    # whether the cut to ``limit`` falls among such rows or not.
    from groundkit.storage.lancedb import _Resident

    matrix = np.random.default_rng(0).standard_normal((20, 8)).astype(np.float32)
    matrix[:15] = np.nan
    ids = np.arange(20, dtype=np.uint64)
    held = _Resident(None, 1, 20, (matrix, [f"c{i:02d}" for i in range(20)], ["d"] * 20, ids))
    query = (np.ones(8, dtype=np.float32) / np.sqrt(8)).astype(np.float32)
    found = held.rescored(ids, query, 8)
    assert found is not None and len(found) == 8
    assert {c for c, _, _ in found[:5]} == {f"c{i:02d}" for i in range(15, 20)}
    assert all(d < 2.0 for _, _, d in found[:5]) and all(d == 2.0 for _, _, d in found[5:])
    assert [c for c, _, _ in found[5:]] == [f"c{i:02d}" for i in range(3)]
    exact = held.ranked(query, 8, None)
    assert exact == found


class _Recorder:
    """The real table, with the names of the calls made on it recorded in order."""

    def __init__(self, table: object) -> None:
        self._inner = table
        self.calls: list[str] = []

    def __getattr__(self, name: str) -> object:
        self.calls.append(name)
        return getattr(self._inner, name)


async def test_the_index_path_sends_its_query_before_reading_the_version(tmp_path: Path) -> None:
    # The copy is checked after LanceDB answers, so the version read (a round trip to
    # LanceDB's runtime) does not hold the query back (adr/0082-ann-copy-checked-after.md).
    store, queries = await _indexed_store(tmp_path, seed=33, queries=3)
    try:
        recorder = _Recorder(store._table)
        store._table = recorder
        await store.query(queries[0], 10)  # reads the copy through the recorder
        assert store._memory is not None and store._memory.table is recorder
        recorder.calls.clear()
        await store.query(queries[1], 10)
        assert recorder.calls[0] == "query"
        assert recorder.calls.index("version") > 0
        store._table = recorder._inner
    finally:
        await store.close()


async def test_a_write_is_seen_by_the_first_search_on_the_index_path(tmp_path: Path) -> None:
    store, queries = await _indexed_store(tmp_path, seed=34, queries=2)
    try:
        query = queries[0]
        before = await store.query(query, 10)
        held = store._memory
        assert held is not None and held.matrix is not None
        # A new row pointing exactly where the query does: the nearest of all.
        await upsert(store, "new", ["zz-new"], np.stack([query]))
        after = await store.query(query, 10)
        assert _ids(after) == ["zz-new", *_ids(before)[:9]]
        assert store._memory is None  # the stale copy was dropped, not trusted
        assert _ids(await store.query(query, 10)) == _ids(after)
        fresh = store._memory
        assert fresh is not None and fresh.version == int(await store.table.version())
        assert "zz-new" in fresh.chunk_ids
        saved, store.memory_max_bytes = store.memory_max_bytes, 0
        try:
            assert _ids(await store.query(query, 10)) == _ids(after)
        finally:
            store.memory_max_bytes = saved
    finally:
        await store.close()


async def test_a_count_above_the_limit_is_read_again_after_a_write(tmp_path: Path) -> None:
    store, queries = await _indexed_store(tmp_path, seed=35, queries=2)
    try:
        store.memory_max_bytes = 1_500 * 32 * 4  # 2,000 rows do not fit; 1,500 would
        expected = await store.query(queries[0], 10)
        held = store._memory
        assert held is not None and held.matrix is None and held.rows == 2_000
        await store.delete_documents([f"doc{d:02d}" for d in range(15, 20)])
        after = await store.query(queries[0], 10)
        assert store._memory is None  # the count is stale: the next search counts again
        assert all(int(h.chunk_id) < 1_500 for h in after)
        assert [h.chunk_id for h in expected if int(h.chunk_id) < 1_500] == [
            h.chunk_id for h in after if h.chunk_id in _ids(expected)
        ]
        saved, store.memory_max_bytes = store.memory_max_bytes, 0
        try:
            assert _ids(await store.query(queries[0], 10)) == _ids(after)
        finally:
            store.memory_max_bytes = saved
        await store.query(queries[1], 10)
        fresh = store._memory
        assert fresh is not None and fresh.matrix is not None and fresh.rows == 1_500
    finally:
        await store.close()


async def test_searches_racing_writes_and_compaction_score_every_hit_by_its_own_vector(
    tmp_path: Path,
) -> None:
    # Each chunk id is written once, with one vector, so a hit's score must be the
    # cosine of the query with that vector: a candidate re-scored on a stale copy's
    # row (compaction gives rows new ids) would show as a score that does not match.
    store, queries = await _indexed_store(tmp_path, seed=36, queries=8)
    rng = np.random.default_rng(37)
    data = np.random.default_rng(36).standard_normal((2_000, 32)).astype(np.float32)
    vector_of = {f"{i:05d}": data[i] / np.linalg.norm(data[i]) for i in range(2_000)}
    units = queries / np.linalg.norm(queries, axis=1, keepdims=True)
    writing = True

    async def writer() -> None:
        nonlocal writing
        try:
            for step in range(9):
                if step % 3 == 2:
                    await store.optimize()
                    continue
                rows = rng.standard_normal((40, 32)).astype(np.float32)
                ids = [f"w{step}-{i:02d}" for i in range(40)]
                units_of = rows / np.linalg.norm(rows, axis=1, keepdims=True)
                vector_of.update(zip(ids, units_of, strict=True))
                await upsert(store, f"new{step}", ids, rows)
                await store.delete_documents([f"doc{step:02d}"])
                await asyncio.sleep(0)
        finally:
            writing = False

    async def reader(offset: int) -> int:
        searches = 0
        while writing or searches < 4:
            q = units[(offset + searches) % len(units)]
            hits = await store.query(q, 20)
            assert len(hits) == 20
            for h in hits:
                expected = float(vector_of[h.chunk_id] @ q)
                assert abs(score_to_cosine(h.score) - expected) < 1e-5, h.chunk_id
            searches += 1
            await asyncio.sleep(0)
        return searches

    try:
        _, searches = await asyncio.gather(writer(), asyncio.gather(*(reader(i) for i in range(3))))
        assert all(n >= 4 for n in searches)
        # With the writes done: the copy is read again and the index's path re-scores
        # on it, giving what LanceDB's own re-scoring gives.
        rescored_in_memory = 0
        for q in units:
            held = store._held()
            rescored_in_memory += held is not None and held.matrix is not None
            fresh = await store.query(q, 20)
            saved, store.memory_max_bytes = store.memory_max_bytes, 0
            try:
                lance = await store.query(q, 20)
            finally:
                store.memory_max_bytes = saved
            assert _ids(fresh) == _ids(lance)
        assert rescored_in_memory >= len(units) - 1
        # Stale copies were dropped on the way: the one held now is the table's version.
        held = store._memory
        assert held is not None and held.version == int(await store.table.version())
    finally:
        await store.close()
