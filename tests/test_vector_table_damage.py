"""A vector table damaged in ways counts alone do not show: rows stored twice, a table of
another width. Derived state is checked, never trusted: searches stay correct or degrade
to BM25 with the reason, and the next ingest rebuilds what is wrong."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
from pathlib import Path

import lancedb
import numpy as np
import pyarrow as pa
import pytest

from groundkit import Collection
from groundkit.service import CollectionRegistry
from groundkit.service.server import ListedCollection
from tests.support import ToyEmbedder, write_tree

os.environ.setdefault("LANCEDB_LOG", "error")

DOCS = {
    f"f{i}.md": f"# Doc {i}\n\nalpha beta gamma number {i} delta epsilon word{i}.\n"
    for i in range(5)
}


def _open(
    index: Path, base: Path, dimensions: int = 16
) -> contextlib.AbstractAsyncContextManager[Collection]:
    embedder = ToyEmbedder(dimensions, f"hash-{dimensions}")
    return Collection.open(index, base_dir=base, embedder=embedder)


async def _ingested(tmp_path: Path) -> tuple[Path, Path]:
    base, index = tmp_path / "base", tmp_path / "idx"
    write_tree(base, DOCS)
    async with _open(index, base) as col:
        await col.ingest(base)
    return base, index


async def test_rows_stored_twice_are_searched_once_and_the_next_ingest_repairs_them(
    tmp_path: Path,
) -> None:
    base, index = await _ingested(tmp_path)
    table = lancedb.connect(str(index)).open_table("default")
    table.add(table.to_arrow())  # every row written twice (a retried append)
    assert table.count_rows() == 10
    async with _open(index, base) as col:
        for mode in ("dense", "hybrid"):
            response = await col.search("alpha word4", mode=mode, top_k=5)
            ids = [r.chunk_id for r in response.results]
            assert len(ids) == 5 == len(set(ids)), mode
            assert "degraded" not in response.metadata
        report = await col.ingest(base)
        assert any("repeated" in note for note in report.repairs), report.repairs
        assert col.vector_store is not None
        assert await col.vector_store.count() == 5
        assert len(await col.vector_store.inventory()) == 5
        again = await col.ingest(base)
        assert again.repairs == []


async def test_a_table_of_another_width_degrades_to_bm25_and_the_next_ingest_rebuilds_it(
    tmp_path: Path,
) -> None:
    base, index = await _ingested(tmp_path)
    # The table rewritten 32 wide, keeping its columns' metadata: still this collection's.
    db = lancedb.connect(str(index))
    data = db.open_table("default").to_arrow()
    vectors = pa.FixedSizeListArray.from_arrays(
        pa.array(np.tile(np.eye(32, dtype=np.float32)[0], data.num_rows)), 32
    )
    fields = [data.schema.field(n) for n in ("chunk_id", "document_id", "content_hash")]
    wide = pa.table(
        [data["chunk_id"], data["document_id"], vectors, data["content_hash"]],
        schema=pa.schema([*fields[:2], pa.field("vector", vectors.type, False), fields[2]]),
    )
    db.drop_table("default")
    db.create_table("default", wide)
    async with _open(index, base) as col:  # the embedder the collection records
        assert (await col.search("alpha word1", mode="bm25", top_k=3)).results
        response = await col.search("alpha word1", mode="dense", top_k=3)
        reason = response.metadata.get("degraded", "")
        assert "32-dimensional" in reason and "records 16" in reason, reason
        assert "embedder" not in reason
        report = await col.ingest(base)
        assert any("damaged-" in note for note in report.repairs), report.repairs
        response = await col.search("alpha word1", mode="dense", top_k=3)
        assert response.results and "degraded" not in response.metadata
    assert list(index.glob("default.lance.damaged-*"))


@pytest.mark.parametrize("damage", ["no data files", "no table"])
async def test_the_collections_listing_says_when_the_vectors_cannot_be_used(
    tmp_path: Path, damage: str
) -> None:
    _, index = await _ingested(tmp_path)
    registry = CollectionRegistry(index)
    try:
        (info,) = await registry.describe_each(["default"])
        assert info.status == "ok" and info.vector_problem is None
        table = index / "default.lance"
        if damage == "no data files":
            for data_file in (table / "data").iterdir():
                data_file.unlink()
        else:
            shutil.rmtree(table)
        (info,) = await registry.describe_each(["default"])
    finally:
        await registry.close()
    assert info.status == "ok" and info.chunks == 5  # the text is sound
    assert info.vector_problem, info
    wire = ListedCollection.of(info)
    assert wire.vector_problem == info.vector_problem


async def test_grk_collections_says_the_vectors_are_unusable(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from groundkit.cli import main as grk

    _, index = await _ingested(tmp_path)
    shutil.rmtree(index / "default.lance")
    assert await asyncio.to_thread(grk, ["collections", "--index-dir", str(index)]) == 0
    shown = capsys.readouterr().out
    assert "vectors unusable:" in shown and "rebuilds them" in shown, shown
