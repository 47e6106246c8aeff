"""Writers of one process queue for the lexical index's lock without starving its holder."""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from groundkit import Collection
from groundkit.storage import SQLiteMetadataStore
from groundkit.testing.conformance.helpers import document_sources, put


async def test_writers_queued_on_the_index_lock_leave_its_holder_a_thread(
    tmp_path: Path,
) -> None:
    # Each write persists the lexical index under a directory lock. With more writers
    # waiting for it than the loop has worker threads, a wait that took a shared thread
    # left the holder none to finish its write with: every write hung. Two threads and
    # twelve writers make that certain rather than likely.
    loop = asyncio.get_running_loop()
    pool = ThreadPoolExecutor(max_workers=2)
    loop.set_default_executor(pool)
    try:
        async with Collection.open(tmp_path / "idx", base_dir=tmp_path) as first:
            await first.add_documents([{"id": "note-0", "text": "kettle note number 0"}])
        # One collection object per writer, as separate components of an application
        # would open it: their writes are not serialised before they reach the lock.
        cols = [await Collection.open(tmp_path / "idx", base_dir=tmp_path) for _ in range(12)]
        try:
            writes = [
                col.add_documents([{"id": f"note-{i}", "text": f"kettle note number {i}"}])
                for i, col in enumerate(cols, 1)
            ]
            reports = await asyncio.wait_for(asyncio.gather(*writes), 300)
            assert [r.added for r in reports] == [[f"record://note-{i}"] for i in range(1, 13)]
            response = await cols[0].search("kettle", top_k=20)
            assert len(response.results) == 13
        finally:
            for col in cols:
                await col.close()
    finally:
        pool.shutdown(wait=False)


async def test_a_write_waits_for_a_read_of_an_older_snapshot_on_its_connection(
    tmp_path: Path,
) -> None:
    # A coroutine reading documents keeps its statement (and so its snapshot) open between
    # fetches. When another process commits meanwhile, SQLite refuses a write on the
    # reader's connection at once ("database is locked") instead of waiting: the write
    # must be run again once the read has moved on, not fail.
    path = tmp_path / "store.sqlite3"
    store = await SQLiteMetadataStore.open(path)
    other = await SQLiteMetadataStore.open(path)
    try:
        for i in range(200):
            await put(store, f"d{i:03d}.txt", [f"document number {i}"])
        reading = store.iter_documents()
        assert (await anext(reading)).source == "d000.txt"
        await put(other, "elsewhere.txt", ["written by another process"])
        write = asyncio.create_task(put(store, "mine.txt", ["written while reading"]))
        await asyncio.sleep(0.2)  # the write is refused and waits to run again
        rest = [record.source async for record in reading]
        assert len(rest) == 199
        await asyncio.wait_for(write, 60)
        assert "mine.txt" in await document_sources(store)
    finally:
        await store.close()
        await other.close()


async def test_a_writer_that_waited_for_the_lock_starts_its_version_after_the_one_it_waited_on(
    tmp_path: Path,
) -> None:
    # Two writers update one record; the first reaches the store first but waits for the
    # write lock while the second commits. The version the first writes is current from
    # when it holds the lock, so it follows the second's in time: it used to take its
    # moment before waiting, fall before the stored version, and fail the write.
    async with Collection.open(tmp_path / "idx", base_dir=tmp_path) as seed:
        await seed.add_documents([{"id": "x", "text": "kettle version one"}])
    first = await Collection.open(tmp_path / "idx", base_dir=tmp_path)
    second = await Collection.open(tmp_path / "idx", base_dir=tmp_path)
    try:
        waiting, go_on = asyncio.Event(), asyncio.Event()
        begin = first.store._begin_write  # type: ignore[attr-defined]

        async def queued() -> None:
            waiting.set()
            await go_on.wait()  # as if SQLite's lock were held by the other writer
            await begin()

        setattr(first.store, "_begin_write", queued)  # noqa: B010 (a method replaced)
        writing = asyncio.ensure_future(
            first.add_documents([{"id": "x", "text": "kettle version three"}])
        )
        await waiting.wait()
        await asyncio.sleep(0.01)  # the clock moves on
        await second.add_documents([{"id": "x", "text": "kettle version two"}])
        go_on.set()
        assert (await writing).updated == ["record://x"]
        found = (await first.search("kettle", top_k=5)).results
        assert [(r.content, r.citation.version) for r in found] == [("kettle version three", 3)]
    finally:
        await first.close()
        await second.close()


def commits_late(col: Collection) -> tuple[asyncio.Event, asyncio.Event]:
    """Hold ``col``'s store writes (after the ingest has read the store) until the second
    event is set; the first is set once a write is held."""
    read, go_on = asyncio.Event(), asyncio.Event()
    commit = col.store.replace_documents

    async def late(*args: Any, **kwargs: Any) -> frozenset[str]:
        read.set()
        await go_on.wait()  # the other writer commits meanwhile
        return await commit(*args, **kwargs)

    setattr(col.store, "replace_documents", late)  # noqa: B010 (a method replaced)
    return read, go_on


async def test_a_file_another_writer_stored_first_is_reported_unchanged(tmp_path: Path) -> None:
    # Two ingests read the folder before either committed: both take the file for new.
    # The store leaves it as the first stored it, and the second's report says so,
    # instead of counting it added a second time.
    base = tmp_path / "docs"
    base.mkdir()
    (base / "kettle.txt").write_text("The kettle whistles when the water boils.\n")
    (base / "tea.txt").write_text("Green tea wants water below boiling.\n")
    first = await Collection.open(tmp_path / "idx", base_dir=base)
    second = await Collection.open(tmp_path / "idx", base_dir=base)
    try:
        read, go_on = commits_late(second)
        racing = asyncio.ensure_future(second.ingest(base))
        await read.wait()
        (base / "tea.txt").write_text("Green tea wants water at 80 degrees.\n")
        report = await first.ingest(base)
        assert (report.added, report.unchanged) == (["kettle.txt", "tea.txt"], [])
        go_on.set()
        raced = await racing
        # kettle.txt: stored by the first just as the second would have; tea.txt: the
        # second read another text, which it stores as the file's next version.
        assert (raced.added, raced.updated, raced.unchanged) == (["tea.txt"], [], ["kettle.txt"])
        # The last writer's text is stored; the next ingest brings the file's back.
        async with Collection.open(tmp_path / "idx", base_dir=base) as fresh:
            again = await fresh.ingest(base)
            assert (again.updated, again.unchanged) == (["tea.txt"], ["kettle.txt"])
    finally:
        await first.close()
        await second.close()


async def test_a_record_another_writer_stored_first_is_reported_unchanged(tmp_path: Path) -> None:
    first = await Collection.open(tmp_path / "idx", base_dir=tmp_path)
    second = await Collection.open(tmp_path / "idx", base_dir=tmp_path)
    try:
        read, go_on = commits_late(second)
        records = [{"id": "x", "text": "kettle descaling notes"}]
        racing = asyncio.ensure_future(second.add_documents(records))
        await read.wait()
        assert (await first.add_documents(records)).added == ["record://x"]
        go_on.set()
        raced = await racing
        assert (raced.added, raced.unchanged) == ([], ["record://x"])
    finally:
        await first.close()
        await second.close()


async def test_a_document_two_writers_remove_is_reported_removed_once(tmp_path: Path) -> None:
    # A delete looks its documents up before it takes the write lock. Another writer
    # removing one of them in that gap (a delete, or an ingest pruning a vanished file)
    # reported it too: both said they removed it. The second now lists it as missing.
    docs = tmp_path / "docs"
    docs.mkdir()
    for i in range(3):
        (docs / f"f{i}.md").write_text(f"# F{i}\n\nKettle note {i}.\n", encoding="utf-8")
    async with Collection.open(tmp_path / "idx", base_dir=tmp_path) as first:
        await first.ingest(docs)
    async with (
        Collection.open(tmp_path / "idx", base_dir=tmp_path) as slow,
        Collection.open(tmp_path / "idx", base_dir=tmp_path) as quick,
    ):
        looked_up = slow.store.find_documents
        others: list[Any] = []

        async def then_another_writer(**names: Any) -> Any:
            found = await looked_up(**names)
            others.append(await quick.delete(sources=["docs/f0.md"], ids=[found[0].document_id]))
            return found

        slow.store.find_documents = then_another_writer  # type: ignore[method-assign]
        report = await slow.delete(sources=["docs/f0.md", "docs/f1.md"])
        slow.store.find_documents = looked_up  # type: ignore[method-assign]
        assert others[0].deleted == ["docs/f0.md"]
        assert report.deleted == ["docs/f1.md"]
        assert report.missing == ["docs/f0.md"]
        # An ingest that prunes a vanished file another writer removed first.
        (docs / "f2.md").unlink()
        pruned = quick.store.delete_documents

        async def removed_first(sources: Any) -> Any:
            await slow.delete(sources=["docs/f2.md"])
            return await pruned(sources)

        quick.store.delete_documents = removed_first  # type: ignore[method-assign]
        again = await quick.ingest(docs)
        assert again.removed == []  # the delete that came first reported it
        assert again.added == ["docs/f0.md", "docs/f1.md"]  # deleted above, still on disk
        found = {r.source for r in (await quick.search("kettle", top_k=5)).results}
        assert found == {"docs/f0.md", "docs/f1.md"}
