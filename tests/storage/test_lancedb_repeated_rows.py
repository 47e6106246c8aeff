"""A vector table that holds a chunk's row more than once (two writers of one document,
a retried append): searches still return each chunk once and fill ``top_k``, and the
store names the documents involved so the next ingest writes their rows again."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from groundkit.storage.lancedb import LanceDBVectorStore
from groundkit.testing.conformance.vectors import DIM, random_rows, upsert

os.environ.setdefault("LANCEDB_LOG", "error")


async def _twice(store: LanceDBVectorStore, n_docs: int = 6, per_doc: int = 4) -> np.ndarray:
    """``n_docs`` documents, then every row appended again; returns the vectors."""
    rows = random_rows(n_docs * per_doc, seed=7)
    for d in range(n_docs):
        ids = [f"c{d}-{i}" for i in range(per_doc)]
        await upsert(store, f"d{d}", ids, rows[d * per_doc : (d + 1) * per_doc])
    table = store.table
    await table.add(await table.to_arrow())
    await store.refresh()
    assert await store.count() == 2 * n_docs * per_doc
    return rows


@pytest.mark.parametrize("memory", ["held", "lancedb"])
@pytest.mark.parametrize("exact", [False, True])
async def test_a_chunk_stored_twice_is_returned_once_and_top_k_is_filled(
    tmp_path: Path, memory: str, exact: bool
) -> None:
    store = await LanceDBVectorStore.open(tmp_path, "c", DIM)
    try:
        if memory == "lancedb":
            store.memory_max_bytes = 0  # LanceDB's own flat search, not the copy in memory
        rows = await _twice(store)
        for q in rows[:5]:
            hits = await store.query(q, 10, exact=exact)
            ids = [h.chunk_id for h in hits]
            assert len(ids) == 10 and len(set(ids)) == 10
            assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
            # The same answer as a table holding each row once.
            unit_rows = rows / np.linalg.norm(rows, axis=1, keepdims=True)
            truth = np.argsort(-(unit_rows @ q), kind="stable")[:10]
            assert {f"c{t // 4}-{t % 4}" for t in truth.tolist()} == set(ids)
            restricted = await store.query(q, 6, document_ids=["d1", "d2"], exact=exact)
            ids = [h.chunk_id for h in restricted]
            assert len(ids) == 6 and len(set(ids)) == 6
            assert {h.document_id for h in restricted} <= {"d1", "d2"}
        # Fewer distinct chunks than asked for: every one, once.
        everything = await store.query(rows[0], 100, exact=exact)
        assert len(everything) == 24 == len({h.chunk_id for h in everything})
    finally:
        await store.close()


async def test_the_store_names_the_documents_with_repeated_rows(tmp_path: Path) -> None:
    store = await LanceDBVectorStore.open(tmp_path, "c", DIM)
    try:
        rows = random_rows(6, seed=3)
        await upsert(store, "a", ["a0", "a1"], rows[:2])
        await upsert(store, "b", ["b0", "b1"], rows[2:4])
        assert await store.repeated_documents() == frozenset()
        table = store.table
        await table.add((await table.to_arrow()).filter(_is(await table.to_arrow(), "b")))
        await store.refresh()
        assert await store.repeated_documents() == {"b"}
        assert await store.inventory() == {"a0": "a", "a1": "a", "b0": "b", "b1": "b"}
        # The document's next upsert writes each chunk once again.
        await upsert(store, "b", ["b0", "b1"], rows[2:4])
        assert await store.repeated_documents() == frozenset()
        assert await store.count() == 4
    finally:
        await store.close()


def _is(data: object, document_id: str) -> object:
    import pyarrow.compute as pc

    return pc.equal(data["document_id"], document_id)  # type: ignore[index]
