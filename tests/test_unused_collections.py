"""A collection created and left unused is removed, but never from under a writer.

The opener that created a collection removes it when it closes with nothing written
(a mistaken first run leaves nothing behind). Another process may have opened it
meanwhile and be about to write: its write must land in the collection or be refused,
never go to removed files.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from groundkit import Collection, StorageError
from groundkit.storage.location import StoreLocation

RECORD = {"id": "r1", "text": "Kettles boil water for tea."}


def _open(root: Path, create: bool = True) -> Any:
    return Collection.open(root / "idx", "notes", base_dir=root, create=create)


async def _found(root: Path) -> int:
    async with _open(root, create=False) as col:
        return len((await col.search("kettles", 5)).results)


async def test_a_collection_another_opener_holds_is_kept_for_its_write(tmp_path: Path) -> None:
    first = await _open(tmp_path)
    second = await _open(tmp_path)  # opens the collection the first one created
    await first.close()  # nothing written by it: it would remove an unused collection
    await second.add_documents([RECORD])
    await second.close()
    assert await _found(tmp_path) == 1


async def test_an_unused_collection_nobody_holds_is_removed(tmp_path: Path) -> None:
    first = await _open(tmp_path)
    await first.close()
    where = StoreLocation.resolve("notes", index_dir=tmp_path / "idx")
    assert not await where.exists()
    assert not (tmp_path / "idx").exists()


async def test_a_write_to_a_collection_removed_under_it_is_refused(tmp_path: Path) -> None:
    async with _open(tmp_path) as col:
        await col.add_documents([{"id": "r0", "text": "Teapots hold tea."}])
    holder = await _open(tmp_path)
    await StoreLocation.resolve("notes", index_dir=tmp_path / "idx").drop()  # `grk drop`
    with pytest.raises(StorageError, match="removed or replaced since this process opened"):
        await holder.add_documents([RECORD])
    await holder.close()


async def test_the_removal_reads_the_generation_under_its_lock(tmp_path: Path) -> None:
    # What the closing opener saw may be stale by the time it removes: the removal
    # itself must find the write and keep the collection.
    async with _open(tmp_path) as col:
        await col.add_documents([RECORD])
    where = StoreLocation.resolve("notes", index_dir=tmp_path / "idx")
    assert not await where.drop_unwritten()
    assert await _found(tmp_path) == 1


async def test_a_shared_collection_written_meanwhile_is_not_dropped(
    tmp_path: Path,
    postgres_dsn: str,
    fresh: str,
) -> None:
    def shared() -> Any:
        return Collection.open(
            None, fresh, base_dir=tmp_path, metadata_url=postgres_dsn, storage_uri=tmp_path / "s"
        )

    first = await shared()
    async with shared() as second:
        await second.add_documents([RECORD])
        await first.close()  # it saw nothing written when it opened
    where = StoreLocation.resolve(fresh, metadata_url=postgres_dsn, storage_uri=tmp_path / "s")
    assert await where.exists()
    assert not await where.drop_unwritten()
    async with shared() as col:
        assert len((await col.search("kettles", 5)).results) == 1


async def test_an_unused_shared_collection_is_dropped_whole(
    tmp_path: Path,
    postgres_dsn: str,
    fresh: str,
) -> None:
    col = await Collection.open(
        None, fresh, base_dir=tmp_path, metadata_url=postgres_dsn, storage_uri=tmp_path / "s"
    )
    await col.close()
    where = StoreLocation.resolve(fresh, metadata_url=postgres_dsn, storage_uri=tmp_path / "s")
    assert not await where.exists()


async def test_a_first_open_cancelled_while_its_file_is_made_leaves_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The file is made in a worker thread, which a cancellation does not stop: the open
    # waits for it, so the removal of the unused collection finds what it made.
    import asyncio
    import threading

    from groundkit.storage import sqlite

    started, finished = threading.Event(), threading.Event()
    create = sqlite._create_file

    def slow_create(path: Path) -> None:
        started.set()
        try:
            threading.Event().wait(0.3)  # a slow disk
            create(path)
        finally:
            finished.set()

    monkeypatch.setattr(sqlite, "_create_file", slow_create)
    index = tmp_path / "made" / "index"
    opening = asyncio.ensure_future(Collection.open(index, base_dir=tmp_path))
    await asyncio.to_thread(started.wait, 30)
    opening.cancel()
    with pytest.raises(asyncio.CancelledError):
        await opening
    assert await asyncio.to_thread(finished.wait, 30)
    assert not (tmp_path / "made").exists()
