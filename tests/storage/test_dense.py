"""LanceDBVectorStore: the shared conformance suite plus what is specific to LanceDB."""

from __future__ import annotations

import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest

from groundkit import ConfigurationError, IndexIdentityError, StorageError
from groundkit.storage.lancedb import (
    DEFAULT_NPROBES,
    DEFAULT_REFINE_FACTOR,
    LanceDBVectorStore,
    refine_factor_for,
)
from groundkit.storage.protocols import VectorStoreProtocol
from groundkit.testing.conformance.vectors import (
    DIM,
    VectorStoreConformance,
    basis,
    random_rows,
    unit,
    upsert,
)

os.environ.setdefault("LANCEDB_LOG", "error")


class TestLanceDBConformance(VectorStoreConformance):
    @pytest.fixture
    async def vector_store(self, tmp_path: Path) -> AsyncIterator[LanceDBVectorStore]:
        s = await LanceDBVectorStore.open(tmp_path / "index", "conformance", DIM)
        try:
            yield s
        finally:
            await s.close()


async def test_table_is_created_on_first_upsert_at_the_collection_path(tmp_path: Path) -> None:
    store = await LanceDBVectorStore.open(tmp_path / "idx", "notes", DIM)
    try:
        assert not (tmp_path / "idx" / "notes.lance").exists()
        assert await store.document_ids() == set()
        await upsert(store, "d1", ["a"], np.stack([basis(0)]))
        assert (tmp_path / "idx" / "notes.lance").is_dir()
        assert store.path == (tmp_path / "idx" / "notes.lance").resolve()
        assert sorted(p.name for p in (tmp_path / "idx").iterdir()) == ["notes.lance"]
    finally:
        await store.close()


async def test_reopen_sees_the_data(tmp_path: Path) -> None:
    store = await LanceDBVectorStore.open(tmp_path, "c", DIM)
    await upsert(store, "d1", ["a", "b"], np.stack([basis(0), basis(1)]))
    await upsert(store, "d2", ["c"], np.stack([basis(2)]))
    await store.delete_documents(["d2"])
    before = await store.query(basis(0), 5)
    await store.close()
    await store.close()  # idempotent
    with pytest.raises(StorageError, match="closed"):
        await store.count()

    reopened = await LanceDBVectorStore.open(tmp_path, "c", DIM, create=False)
    try:
        assert await reopened.count() == 2
        assert await reopened.document_ids() == {"d1"}
        assert await reopened.query(basis(0), 5) == before
    finally:
        await reopened.close()


async def test_table_created_by_another_handle_is_adopted(tmp_path: Path) -> None:
    first = await LanceDBVectorStore.open(tmp_path, "c", DIM)
    second = await LanceDBVectorStore.open(tmp_path, "c", DIM)
    try:
        await upsert(first, "d1", ["a"], np.stack([basis(0)]))
        await upsert(second, "d2", ["b"], np.stack([basis(1)]))
        assert await second.document_ids() == {"d1", "d2"}
    finally:
        await first.close()
        await second.close()


async def test_open_without_create_needs_a_table(tmp_path: Path) -> None:
    with pytest.raises(StorageError, match="no vector table"):
        await LanceDBVectorStore.open(tmp_path, "missing", DIM, create=False)


async def test_other_dimension_on_open_is_an_identity_error(tmp_path: Path) -> None:
    store = await LanceDBVectorStore.open(tmp_path, "c", DIM)
    await upsert(store, "d1", ["a"], np.stack([basis(0)]))
    await store.close()
    with pytest.raises(IndexIdentityError, match=f"{DIM}-dimensional"):
        await LanceDBVectorStore.open(tmp_path, "c", DIM * 2)


@pytest.mark.parametrize(
    ("name", "dimensions", "threshold"),
    [("../escape", DIM, 10), ("a b", DIM, 10), ("ok", 0, 10), ("ok", DIM, 0)],
)
async def test_bad_open_arguments(
    tmp_path: Path, name: str, dimensions: int, threshold: int
) -> None:
    with pytest.raises(ConfigurationError):
        await LanceDBVectorStore.open(tmp_path, name, dimensions, ann_threshold=threshold)


async def test_foreign_table_is_a_storage_error(tmp_path: Path) -> None:
    import lancedb
    import pyarrow as pa

    db = await lancedb.connect_async(str(tmp_path))
    table = await db.create_table("foreign", data=pa.table({"x": [1, 2]}))
    table.close()  # type: ignore[no-untyped-call]
    # It opens (BM25 must keep working beside it), says what is wrong, refuses to be
    # used, and recover() moves it aside, untouched, for a new table to take its place.
    store = await LanceDBVectorStore.open(tmp_path, "foreign", DIM)
    try:
        problem = await store.problem()
        assert problem is not None and "not a groundkit vector table" in problem
        for use in (store.count(), store.query(basis(0), 3), store.inventory()):
            with pytest.raises(StorageError, match="not a groundkit vector table"):
                await use
        note = await store.recover()
        assert note is not None and "moved it to foreign.lance.damaged-" in note
        assert await store.problem() is None and await store.count() == 0
        (aside,) = tmp_path.glob("foreign.lance.damaged-*")
        assert any(aside.rglob("*.lance"))
        await upsert(store, "d1", ["a"], np.stack([basis(0)]))
        assert [h.chunk_id for h in await store.query(basis(0), 1)] == ["a"]
        assert await store.recover() is None
    finally:
        await store.close()


async def test_lancedb_failures_become_storage_errors(tmp_path: Path) -> None:
    store = await LanceDBVectorStore.open(tmp_path, "c", DIM)
    try:
        await upsert(store, "d1", ["a"], np.stack([basis(0)]))
        # Pull the data files out from under the open table: LanceDB fails the read.
        for data in (tmp_path / "c.lance" / "data").iterdir():
            data.unlink()
        with pytest.raises(StorageError, match="could not search") as info:
            await store.query(basis(0), 3)
        assert info.value.__cause__ is None
    finally:
        await store.close()


async def test_restriction_survives_a_stale_document_list(tmp_path: Path) -> None:
    # If a write lands between choosing the filter and searching, the hits are
    # re-checked against the restriction; simulate it with a stale cache.
    store = await LanceDBVectorStore.open(tmp_path, "c", DIM)
    try:
        await upsert(store, "d1", ["a"], np.stack([basis(0)]))
        await upsert(store, "d2", ["b"], np.stack([basis(0)]))
        assert await store.document_ids() == {"d1", "d2"}
        cached = store._doc_cache
        assert cached is not None
        store._doc_cache = (cached[0], frozenset({"d1"}))  # d2 "not yet seen"
        hits = await store.query(basis(0), 5, document_ids=["d1"])
        assert [h.chunk_id for h in hits] == ["a"]
    finally:
        await store.close()


async def test_missing_extra_is_a_configuration_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "lancedb", None)
    with pytest.raises(ConfigurationError, match=r"pip install groundkit\[dense\]"):
        await LanceDBVectorStore.open(tmp_path, "c", DIM)


async def test_ann_index_above_threshold_keeps_recall(tmp_path: Path) -> None:
    dim, n_rows, per_doc = 32, 3_000, 50
    rng = np.random.default_rng(11)
    centres = rng.standard_normal((24, dim)).astype(np.float32)
    data = centres[rng.integers(0, 24, n_rows + 40)]
    data += rng.standard_normal(data.shape).astype(np.float32) * np.float32(0.6)
    data /= np.linalg.norm(data, axis=1, keepdims=True)
    rows, queries = data[:n_rows], data[n_rows:]

    store = await LanceDBVectorStore.open(tmp_path, "ann", dim, ann_threshold=2_000)
    try:
        assert isinstance(store, VectorStoreProtocol)
        for d in range(n_rows // per_doc):
            lo = d * per_doc
            ids = [f"{i:05d}" for i in range(lo, lo + per_doc)]
            await upsert(store, f"doc{d:03d}", ids, rows[lo : lo + per_doc])
            assert await store.has_ann_index() == (lo + per_doc >= 2_000)
        assert await store.count() == n_rows
        assert await store.ann_index_type() == "IvfRq"

        truth = np.argsort(-(queries @ rows.T), axis=1, kind="stable")[:, :10]
        found = 0
        for q, want in zip(queries, truth, strict=True):
            hits = await store.query(q, 10)
            assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
            found += len({int(h.chunk_id) for h in hits} & set(want.tolist()))
        assert found / truth.size >= 0.98

        # A narrow restriction still fills top_k from its rows: on the copy in memory,
        # and on the ANN path (a table too large to hold).
        block = rows[7 * per_doc : 8 * per_doc]
        best = np.argsort(-(block @ queries[0]))[:10] + 7 * per_doc
        for memory in (store.memory_max_bytes, 0):
            store.memory_max_bytes = memory
            hits = await store.query(queries[0], 10, document_ids=["doc007"])
            assert len(hits) == 10
            assert {h.document_id for h in hits} == {"doc007"}
            assert {int(h.chunk_id) for h in hits} == set(best.tolist())

        # Any probe count is accepted, filtered or not.
        store.nprobes, store.refine_factor = 64, 1
        assert len(await store.query(queries[0], 10)) == 10
        assert len(await store.query(queries[0], 10, document_ids=["doc007"])) == 10
        # exact=True ignores the index: the true top 10 whatever the probe settings.
        store.nprobes, store.refine_factor = 1, 1
        for q, want in zip(queries, truth, strict=True):
            exact = await store.query(q, 10, exact=True)
            assert [int(h.chunk_id) for h in exact] == want.tolist()
        store.nprobes, store.refine_factor = DEFAULT_NPROBES, DEFAULT_REFINE_FACTOR

        # Rows written after the index are searched too, and survive optimize().
        await upsert(store, "late", ["late"], np.stack([queries[1]]))
        assert (await store.query(queries[1], 1))[0].chunk_id == "late"
        await store.optimize()
        assert (await store.query(queries[1], 1))[0].chunk_id == "late"
        assert await store.count() == n_rows + 1
    finally:
        await store.close()


def test_refine_depth_widens_small_limits_and_doubles_large_ones() -> None:
    # At least 100 candidates are re-scored, and at least twice the limit.
    assert [refine_factor_for(n) for n in (1, 18, 49, 50, 51, 100, 108, 1_000)] == [
        100, 6, 3, 2, 2, 2, 2, 2,
    ]  # fmt: skip
    with pytest.raises(ValueError, match="positive"):
        refine_factor_for(0)


def _spread_rows(n: int, dim: int, seed: int) -> npt.NDArray[np.float32]:
    """Unclustered unit vectors: partitions say little about who is near whom."""
    rows = np.random.default_rng(seed).standard_normal((n, dim)).astype(np.float32)
    unit_rows: npt.NDArray[np.float32] = rows / np.linalg.norm(rows, axis=1, keepdims=True)
    return unit_rows


async def _recall_at_10(
    store: LanceDBVectorStore, rows: npt.NDArray[np.float32], queries: npt.NDArray[np.float32]
) -> float:
    truth = np.argsort(-(queries @ rows.T), axis=1, kind="stable")[:, :10]
    found = 0
    for q, want in zip(queries, truth, strict=True):
        found += len({int(h.chunk_id) for h in await store.query(q, 10)} & set(want.tolist()))
    return found / truth.size


async def test_default_search_probes_every_partition(tmp_path: Path) -> None:
    """However many partitions the index has, the defaults scan them all (ADR 0023)."""
    from lancedb.index import IvfRq

    dim, n_rows = 32, 4_000
    data = _spread_rows(n_rows + 30, dim, seed=21)
    rows, queries = data[:n_rows], data[n_rows:]
    store = await LanceDBVectorStore.open(tmp_path, "c", dim, ann_threshold=1_000)
    try:
        await upsert(store, "d", [f"{i:05d}" for i in range(n_rows)], rows)
        table: Any = store._table
        # Far more partitions than the store's own build would make at this size.
        await table.create_index(
            "vector", config=IvfRq(distance_type="cosine", num_partitions=64, num_bits=4),
            replace=True, name="vector_idx",
        )  # fmt: skip
        assert store.nprobes is None and store.refine_factor is None
        assert await _recall_at_10(store, rows, queries) >= 0.98
        store.nprobes = 4  # a fixed count covers a small share of 64 partitions
        assert await _recall_at_10(store, rows, queries) < 0.8
    finally:
        await store.close()


async def test_optimize_replaces_an_index_of_another_kind(tmp_path: Path) -> None:
    from lancedb.index import IvfSq

    dim, n_rows = 32, 1_500
    rows = _spread_rows(n_rows, dim, seed=22)
    store = await LanceDBVectorStore.open(tmp_path, "c", dim, ann_threshold=100_000)
    try:
        await upsert(store, "d", [f"{i:05d}" for i in range(n_rows)], rows)
        assert await store.ann_index_type() is None  # below the threshold
        table: Any = store._table
        await table.create_index("vector", config=IvfSq(distance_type="cosine"))
        assert await store.ann_index_type() == "IvfSq"  # the kind older groundkit versions built
        await store.optimize()
        assert await store.ann_index_type() == "IvfRq"
        assert (await store.query(rows[7], 1))[0].chunk_id == "00007"
        built = [i.index_uuid for i in await table.list_indices()]
        await store.optimize()  # the current kind is left alone
        assert [i.index_uuid for i in await table.list_indices()] == built
    finally:
        await store.close()


async def _lookup_indexes(store: LanceDBVectorStore) -> dict[str, str]:
    table: Any = store._table
    return {
        i.columns[0]: str(i.index_type)
        for i in await table.list_indices()
        if i.columns[0] != "vector"
    }


async def test_rows_are_found_by_document_inside_and_outside_its_index(
    tmp_path: Path,
) -> None:
    dim, per_doc, docs = 16, 10, 60
    rows = _spread_rows(per_doc * (docs + 20), dim, seed=31)
    store = await LanceDBVectorStore.open(tmp_path, "c", dim, ann_threshold=300)

    def block(d: int) -> npt.NDArray[np.float32]:
        return rows[d * per_doc : (d + 1) * per_doc]

    async def write(d: int) -> None:
        ids = [f"{d:03d}-{i}" for i in range(per_doc)]
        hashes = [f"h{d:03d}-{i}" for i in range(per_doc)]
        await upsert(store, f"doc{d:03d}", ids, block(d), content_hashes=hashes)

    try:
        for d in range(25):
            await write(d)
            assert await _lookup_indexes(store) == (
                {} if (d + 1) * per_doc < 300 else {"document_id": "BTree"}
            )
        # Rows written after the index lie outside it until optimize folds them in;
        # every lookup by document finds them either way (IN and NOT IN alike).
        for d in range(25, docs):
            await write(d)
        for phase in ("written", "optimized"):
            for d in (3, 40):  # one indexed document, one written after
                q = block(d)[0] + 0.1 * block(d)[1]
                hits = await store.query(q, 5, document_ids=[f"doc{d:03d}"])
                best = np.argsort(-(block(d) @ q), kind="stable")[:5]
                assert [h.chunk_id for h in hits] == [f"{d:03d}-{i}" for i in best], phase
                others = [f"doc{e:03d}" for e in range(docs) if e != d]
                assert {h.document_id for h in await store.query(q, 5, document_ids=others)} <= set(
                    others
                )
            found = await store.vectors_by_content(["h004-2", "h050-7", "h999-0"])
            assert sorted(found) == ["h004-2", "h050-7"]
            np.testing.assert_allclose(found["h050-7"], block(50)[7], atol=1e-6)
            if phase == "written":
                await store.optimize()
                table: Any = store._table
                stats = await table.index_stats("document_id_idx")
                assert stats.num_unindexed_rows == 0
        # A rewrite of an indexed document replaces its rows; deletes reach both kinds.
        await write(7)
        assert await store.count() == docs * per_doc
        assert await store.delete_documents(["doc007", "doc055", "doc999"]) == 2 * per_doc
        assert await store.count() == (docs - 2) * per_doc
        assert await store.query(block(55)[0], 3, document_ids=["doc055"]) == []
    finally:
        await store.close()


async def test_optimize_adds_the_document_id_index_a_table_lacks(tmp_path: Path) -> None:
    dim, n_rows = 16, 400
    store = await LanceDBVectorStore.open(tmp_path, "c", dim, ann_threshold=300)
    try:
        await upsert(store, "d", [f"{i:03d}" for i in range(n_rows)], _spread_rows(n_rows, dim, 5))
        table: Any = store._table
        await table.drop_index("document_id_idx")  # as a table indexed by an older groundkit
        assert await _lookup_indexes(store) == {}
        await store.optimize()
        assert await _lookup_indexes(store) == {"document_id": "BTree"}
        assert await store.ann_index_type() == "IvfRq"
    finally:
        await store.close()


async def test_a_commit_race_while_building_the_document_id_index_is_run_again(
    tmp_path: Path,
) -> None:
    dim, n_rows = 16, 400
    store = await LanceDBVectorStore.open(tmp_path, "c", dim, ann_threshold=300)
    try:
        await upsert(store, "d", [f"{i:03d}" for i in range(n_rows)], _spread_rows(n_rows, dim, 6))
        table: Any = store._table
        await table.drop_index("document_id_idx")
        real = table.create_index
        raced: list[str] = []

        async def create_index(column: str, **kwargs: Any) -> Any:
            if column == "document_id" and not raced:
                raced.append(column)  # what Lance raises when another writer committed first
                raise RuntimeError("Retryable commit conflict for version 9: another writer")
            return await real(column, **kwargs)

        table.create_index = create_index
        await store.optimize()
        assert raced == ["document_id"]
        assert await _lookup_indexes(store) == {"document_id": "BTree"}
    finally:
        await store.close()


async def test_scores_are_exact_on_the_ann_path(tmp_path: Path) -> None:
    store = await LanceDBVectorStore.open(tmp_path, "c", DIM, ann_threshold=300)
    try:
        vectors = random_rows(400, seed=12)
        await upsert(store, "d", [f"{i:03d}" for i in range(400)], vectors)
        assert await store.has_ann_index()
        q = random_rows(1, seed=13)[0]
        hits = await store.query(q, 5)
        unit_rows = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
        cos = unit_rows @ (q / np.linalg.norm(q))
        for hit in hits:
            assert hit.score == pytest.approx((1 + cos[int(hit.chunk_id)]) / 2, abs=1e-5)
    finally:
        await store.close()


async def test_table_without_content_hashes_still_works(tmp_path: Path) -> None:
    """A table from before the content_hash column: writes go on, reuse is simply empty."""
    import lancedb
    import pyarrow as pa

    conn = await lancedb.connect_async(str(tmp_path))
    schema = pa.schema(
        [
            pa.field("chunk_id", pa.string(), nullable=False),
            pa.field("document_id", pa.string(), nullable=False),
            pa.field("vector", pa.list_(pa.float32(), DIM), nullable=False),
        ]
    )
    table = await conn.create_table("old", schema=schema)
    table.close()  # type: ignore[no-untyped-call]
    store = await LanceDBVectorStore.open(tmp_path, "old", DIM)
    try:
        await upsert(store, "d1", ["d1#0"], [unit(1.0)], content_hashes=["h"])
        assert await store.count() == 1
        assert await store.vectors_by_content(["h"]) == {}
        hits = await store.query(unit(1.0), 1)
        assert [h.chunk_id for h in hits] == ["d1#0"]
    finally:
        await store.close()


# -- whose table it is (adr/0095-vector-table-owner.md) ---------------------------

OURS, THEIRS = "a" * 32, "b" * 32


async def _owned(root: Path, owner: str | None, **kwargs: Any) -> LanceDBVectorStore:
    return await LanceDBVectorStore.open(root, "kb", DIM, owner=owner, **kwargs)


async def test_a_table_of_another_collection_is_refused_never_used_or_pruned(
    tmp_path: Path,
) -> None:
    """Two collections with one storage root and name: the second is refused at open,
    and one opened before the table existed is refused at its refresh and its writes;
    the first collection's rows stay as they were, never set aside."""
    ours = await _owned(tmp_path, OURS)
    late = await _owned(tmp_path, THEIRS)  # no table yet: nothing to check
    try:
        await upsert(ours, "d1", ["d1#0", "d1#1"], np.stack([basis(0), basis(1)]))
        with pytest.raises(StorageError, match="belongs to another collection"):
            await _owned(tmp_path, THEIRS)
        for write in (
            lambda: upsert(late, "z1", ["z1#0"], np.stack([basis(2)])),
            lambda: late.delete_documents(["d1"]),
            late.refresh,
            late.recover,
            lambda: late.query(basis(0), 3),
        ):
            with pytest.raises(StorageError, match="belongs to another collection"):
                await write()
        assert await late.problem() is not None
        await ours.refresh()
        assert await ours.inventory() == {"d1#0": "d1", "d1#1": "d1"}
        assert [h.chunk_id for h in await ours.query(basis(0), 1)] == ["d1#0"]
        assert not list(tmp_path.glob("kb.lance.damaged-*"))
    finally:
        await late.close()
        await ours.close()


async def test_a_table_taken_over_by_another_collection_stops_the_first_writer(
    tmp_path: Path,
) -> None:
    """A table dropped and created again by another collection while a store has it
    open: its next delete (the orphan sweep's write) is refused, not run on their rows."""
    import lancedb

    ours = await _owned(tmp_path, OURS)
    try:
        await upsert(ours, "d1", ["d1#0"], np.stack([basis(0)]))
        conn = await lancedb.connect_async(str(tmp_path))
        await conn.drop_table("kb")
        conn.close()  # type: ignore[no-untyped-call]
        theirs = await _owned(tmp_path, THEIRS)
        await upsert(theirs, "z1", ["z1#0"], np.stack([basis(1)]))
        await theirs.close()
        with pytest.raises(StorageError, match="belongs to another collection"):
            await ours.delete_documents(["z1"])
        reopened = await _owned(tmp_path, None)
        assert await reopened.inventory() == {"z1#0": "z1"}
        await reopened.close()
    finally:
        await ours.close()


async def test_an_unstamped_table_is_adopted_at_the_first_write(tmp_path: Path) -> None:
    """A table made before stamps (here: by a store opened without an owner) is used as
    it is, stamped with the owner at its first write, and from then on another
    collection is refused; ``reclaim`` takes a stamped table over."""
    bare = await _owned(tmp_path, None)
    await upsert(bare, "d1", ["d1#0"], np.stack([basis(0)]))
    await bare.close()
    # Before the first write nothing is claimed: another owner may still open it.
    for owner in (THEIRS, OURS):
        store = await _owned(tmp_path, owner)
        assert [h.chunk_id for h in await store.query(basis(0), 1)] == ["d1#0"]
        await store.close()
    ours = await _owned(tmp_path, OURS)
    try:
        await upsert(ours, "d2", ["d2#0"], np.stack([basis(1)]))
        assert await ours.count() == 2
    finally:
        await ours.close()
    with pytest.raises(StorageError, match="belongs to another collection"):
        await _owned(tmp_path, THEIRS)
    taken = await _owned(tmp_path, THEIRS, reclaim=True)
    try:
        await taken.delete_documents(["d1"])
        assert await taken.inventory() == {"d2#0": "d2"}
    finally:
        await taken.close()
    with pytest.raises(StorageError, match="belongs to another collection"):
        await _owned(tmp_path, OURS)


async def test_a_table_created_again_is_never_searched_with_the_old_ones_vectors(
    tmp_path: Path,
) -> None:
    """Another process drops the table and creates it again up to the same version
    number: after ``refresh()`` every hit is the new table's (the vectors held in memory
    for the old one are not used with it), as a freshly opened store finds."""
    import lancedb

    dim = 16

    async def fill(store: LanceDBVectorStore, seed: int, tag: str) -> None:
        rng = np.random.default_rng(seed)
        await store.upsert_documents(
            [
                (f"{tag}{i}", [f"{tag}{i}#{j}" for j in range(10)], rng.normal(size=(10, dim)))
                for i in range(10)
            ]
        )

    async def opened() -> LanceDBVectorStore:
        return await LanceDBVectorStore.open(tmp_path, "t", dim, ann_threshold=200)

    writer = await opened()
    await fill(writer, 1, "old")
    await fill(writer, 2, "old-b")
    await writer.close()
    reader = await opened()
    probe = np.random.default_rng(1).normal(size=dim)
    try:
        assert {h.document_id for h in await reader.query(probe, 5)} <= {
            *(f"old{i}" for i in range(10)),
            *(f"old-b{i}" for i in range(10)),
        }
        version = int(await reader.table.version())
        conn = await lancedb.connect_async(str(tmp_path))
        await conn.drop_table("t")
        conn.close()  # type: ignore[no-untyped-call]
        writer = await opened()
        await fill(writer, 3, "new")
        await fill(writer, 4, "new-b")
        assert int(await writer.table.version()) == version
        await writer.close()
        await reader.refresh()
        found = await reader.query(probe, 5)
        fresh = await opened()
        try:
            expected = await fresh.query(probe, 5)
        finally:
            await fresh.close()
        assert [(h.chunk_id, h.score) for h in found] == [(h.chunk_id, h.score) for h in expected]
        assert all(h.document_id.startswith("new") for h in found)
    finally:
        await reader.close()


async def test_an_owner_must_be_a_uid(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="owner"):
        await LanceDBVectorStore.open(tmp_path, "c", DIM, owner="")
