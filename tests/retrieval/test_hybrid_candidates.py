"""Hybrid search fuses its lexical candidates by id: with rows in memory, or with
only their ids read from the store and the returned rows read after fusion, it
returns the same results."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from groundkit import Collection, RetrievalConfig
from groundkit.retrieval import Retriever
from groundkit.retrieval.search import _Hit
from groundkit.storage import SQLiteMetadataStore
from groundkit.storage.protocols import StoredChunk
from groundkit.testing.conformance.helpers import put
from tests.support import CORPUS, QUERIES, SMALL_CHUNKS, ToyEmbedder, write_tree


class _Counted:
    """A metadata store that counts the row reads a search makes; the store otherwise."""

    def __init__(self, store: Any) -> None:
        self._store = store
        self.ids_by_key = 0
        self.rows_by_key = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    async def current_chunk_ids(self, keys: Sequence[int]) -> Mapping[int, str]:
        self.ids_by_key += 1
        result: Mapping[int, str] = await self._store.current_chunk_ids(keys)
        return result

    async def get_chunks_by_keys(self, keys: Sequence[int]) -> Mapping[int, StoredChunk]:
        self.rows_by_key += 1
        result: Mapping[int, StoredChunk] = await self._store.get_chunks_by_keys(keys)
        return result


@pytest.mark.parametrize("fusion", ["convex", "rrf"])
async def test_hybrid_results_are_the_same_from_rows_or_ids(tmp_path: Path, fusion: str) -> None:
    base = tmp_path / "corpus"
    files = dict(CORPUS)
    files["copies/solar.md"] = files["energy/solar.md"]  # equal scores, ordered by key
    write_tree(base, files)
    embedder = ToyEmbedder()
    async with Collection.open(
        tmp_path / "index", base_dir=base, embedder=embedder, chunking=SMALL_CHUNKS
    ) as col:
        report = await col.ingest(base)
        assert report.added and not report.failed
        assert col.vector_store is not None
        counted = _Counted(col.store)

        async def retriever(config: RetrievalConfig, store: Any) -> Retriever:
            return await Retriever.open(
                store, config, embedder=embedder, vector_store=col.vector_store
            )

        settings: dict[str, Any] = {"hybrid_fusion": fusion, "hybrid_candidates": 12}
        preloaded = await retriever(RetrievalConfig(**settings), col.store)
        by_id = await retriever(RetrievalConfig(preload_max_chunks=0, **settings), counted)
        assert await preloaded.preload() and preloaded._rows is not None
        queries = (*QUERIES, "solar", "the sun", "tea kettle water", "nothing matches zzz")
        for query in queries:
            for k in (1, 3, 10, 30):
                a = await preloaded.search(query, k, mode="hybrid")
                b = await by_id.search(query, k, mode="hybrid")
                assert [r.model_dump(exclude={"evidence"}) for r in a.results] == [
                    r.model_dump(exclude={"evidence"}) for r in b.results
                ]
                assert [r.citation for r in a.results] == [r.citation for r in b.results]
        # Without rows in memory the lexical side read ids alone, never whole rows.
        assert counted.ids_by_key > 0
        assert counted.rows_by_key == 0


async def test_hits_the_index_could_not_order_take_the_row_path(
    store: SQLiteMetadataStore,
) -> None:
    # Equal texts at the same chunk index in documents whose ids share their first
    # 8 bytes agree on every part of the tie key a segment keeps: the index marks
    # them tied and their rows' full keys order them.
    await put(store, "same2.txt", ["solar panels"])
    await put(store, "same1.txt", ["solar panels"])
    await put(store, "other.txt", ["solar wind"])
    keys = {s.source: s.key async for b in store.iter_chunks() for s in b}
    counted = _Counted(store)
    retriever = await Retriever.open(counted, RetrievalConfig(preload_max_chunks=0))
    tied = [
        _Hit(keys["same2.txt"], 2.0, True),
        _Hit(keys["same1.txt"], 2.0, True),
        _Hit(keys["other.txt"], 1.0, False),
    ]
    scored, rows = await retriever._lexical_candidates(tied, 10)
    assert scored == [("doc:same1.txt#0", 2.0), ("doc:same2.txt#0", 2.0), ("doc:other.txt#0", 1.0)]
    assert set(rows) == {c for c, _ in scored}
    assert (counted.rows_by_key, counted.ids_by_key) == (1, 0)
    ordered = [h._replace(tied=False) for h in tied]
    scored, rows = await retriever._lexical_candidates(ordered, 2)
    assert scored == [("doc:same2.txt#0", 2.0), ("doc:same1.txt#0", 2.0)] and rows == {}
    assert (counted.rows_by_key, counted.ids_by_key) == (1, 1)


@contextlib.asynccontextmanager
async def _by_id(tmp_path: Path) -> AsyncIterator[tuple[Collection, Retriever]]:
    """The test corpus ingested, and a hybrid retriever that never holds rows in memory
    (its BM25 candidates take the id path)."""
    base = tmp_path / "corpus"
    write_tree(base, dict(CORPUS))
    embedder = ToyEmbedder()
    async with Collection.open(
        tmp_path / "index", base_dir=base, embedder=embedder, chunking=SMALL_CHUNKS
    ) as col:
        await col.ingest(base)
        assert col.vector_store is not None
        by_id = await Retriever.open(
            col.store,
            RetrievalConfig(preload_max_chunks=0),
            embedder=embedder,
            vector_store=col.vector_store,
        )
        yield col, by_id


async def test_hybrid_drops_candidates_replaced_since_the_index_caught_up(
    tmp_path: Path,
) -> None:
    # Another writer replaces a document after this retriever's index caught up:
    # its old chunks are still in the index but no longer current, so hybrid must not
    # return them, whether the rows come from memory or ids from the store.
    base = tmp_path / "corpus"
    async with _by_id(tmp_path) as (col, by_id):
        assert col.embedder is not None
        before = await by_id.search("solar panels electricity", 5, mode="hybrid")
        assert any(r.source == "energy/solar.md" for r in before.results)
        async with Collection.open(
            tmp_path / "index", base_dir=base, embedder=col.embedder, chunking=SMALL_CHUNKS
        ) as other:
            (base / "energy" / "solar.md").write_text(
                "# Moved\n\nThe panels were sold.\n", encoding="utf-8"
            )
            await other.ingest(base)
        after = await by_id.search("solar panels electricity", 5, mode="hybrid")
        for result in after.results:
            row = await col.store.get_chunk(result.chunk_id)
            assert row is not None and row.current and row.content == result.content


async def test_hybrid_reads_committed_ids_while_a_write_is_in_flight(tmp_path: Path) -> None:
    # A write of this process holds its transaction across awaits; a search meanwhile
    # must rank the committed collection, not the write's uncommitted state.
    async with _by_id(tmp_path) as (col, by_id):
        store = col.store
        assert isinstance(store, SQLiteMetadataStore)
        query = "solar panels electricity"

        def seen(response: Any) -> list[tuple[str, float | None]]:
            return [(r.chunk_id, r.scores.bm25 if r.scores else None) for r in response.results]

        before = seen(await by_id.search(query, 5, mode="hybrid"))
        assert any(bm25 is not None for _, bm25 in before)
        conn = store._conn
        await conn.execute("BEGIN IMMEDIATE")
        try:
            await conn.execute(
                "UPDATE chunks SET valid_to = 1 WHERE document_id IN"
                " (SELECT id FROM documents WHERE source = 'energy/solar.md')"
            )
            during = seen(await by_id.search(query, 5, mode="hybrid"))
        finally:
            await conn.execute("ROLLBACK")
        assert during == before
