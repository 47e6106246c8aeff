"""A store closed while a read is under way: the read ends in groundkit's own
``StorageError`` saying the store is closed, never the driver's ``ValueError`` or
``ProgrammingError``, and an abandoned iteration leaves nothing for the event loop's
exception handler to report."""

from __future__ import annotations

import asyncio
import contextlib
import gc
from pathlib import Path
from typing import Any

import pytest

from groundkit import Collection, StorageError
from groundkit.storage import SQLiteMetadataStore
from groundkit.testing.conformance.helpers import put


@pytest.fixture
async def reported() -> list[dict[str, Any]]:
    """What reaches the event loop's exception handler (an error nobody awaited)."""
    seen: list[dict[str, Any]] = []
    asyncio.get_running_loop().set_exception_handler(lambda _loop, ctx: seen.append(ctx))
    return seen


async def _settle() -> None:
    gc.collect()
    for _ in range(5):
        await asyncio.sleep(0)  # finalizers of abandoned iterations run here


async def _store(tmp_path: Path) -> SQLiteMetadataStore:
    store = await SQLiteMetadataStore.open(tmp_path / "meta.sqlite3")
    for i in range(4):
        await put(store, f"d{i}.txt", [f"chunk {j} of document {i}" for j in range(3)])
    return store


async def test_an_iteration_the_store_closed_under_raises_storage_error(tmp_path: Path) -> None:
    store = await _store(tmp_path)
    batches = store.iter_chunks(batch_size=1)
    assert len(await anext(batches)) == 1
    await store.close()
    with pytest.raises(StorageError, match="is closed"):
        await anext(batches)


async def test_an_abandoned_iteration_of_a_closed_store_closes_quietly(
    tmp_path: Path, reported: list[dict[str, Any]]
) -> None:
    store = await _store(tmp_path)
    for name in ("iter_chunks", "iter_postings"):
        batches = getattr(store, name)(batch_size=1)
        await anext(batches)
        await store.close()
        await batches.aclose()  # the cursor's close on a closed connection is not an error
        store = await SQLiteMetadataStore.open(tmp_path / "meta.sqlite3")
    await store.close()
    await _settle()
    assert reported == []


async def test_closing_a_collection_during_verify_all(
    tmp_path: Path, reported: list[dict[str, Any]]
) -> None:
    base = tmp_path / "base"
    base.mkdir()
    col = await Collection.open(tmp_path / "index", base_dir=base)
    await col.add_documents([{"id": f"r{i}", "text": f"Marker{i} about tea"} for i in range(20)])
    checking = asyncio.ensure_future(col.verify_all())
    await asyncio.sleep(0)  # verify_all has started reading
    await col.close()
    with pytest.raises(StorageError, match="is closed"):
        await checking
    await _settle()
    assert reported == []


@pytest.mark.parametrize("steps", [1, 2, 3, 5, 8])
async def test_a_cancelled_close_still_closes_the_stores(tmp_path: Path, steps: int) -> None:
    # ``close`` awaits a few things (a merge, the retriever, each store); a cancellation
    # at any of them left the stores open for good, a second close being a no-op.
    base = tmp_path / "base"
    base.mkdir()
    col = await Collection.open(tmp_path / "index", base_dir=base)
    await col.add_documents([{"id": f"r{i}", "text": f"Marker{i} about tea"} for i in range(20)])
    await col.search("tea", 5)
    closing = asyncio.ensure_future(col.close())
    for _ in range(steps):
        await asyncio.sleep(0)
    closing.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await closing
    assert col.closed
    with pytest.raises(StorageError, match="is closed"):
        await col.store.generation()
    await col.close()  # still a no-op
