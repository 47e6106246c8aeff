"""CollectionRegistry: lazy, reused, replaced when stale, never closed under a request."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import groundkit.storage.sqlite as sqlite_module
from groundkit import Collection, CollectionNotFoundError, StorageError
from groundkit.contracts import CollectionManifest
from groundkit.service import CollectionRegistry
from groundkit.storage.sqlite import SQLiteMetadataStore
from tests.service.conftest import Served, ingest
from tests.support import SMALL_CHUNKS, ToyEmbedder, write_tree


def toy_embedders(manifest: CollectionManifest) -> ToyEmbedder:
    return ToyEmbedder(manifest.dimensions, manifest.model_name)


async def test_names_ignore_other_files(served: Served) -> None:
    (served.index / "notes.lance").mkdir(exist_ok=True)
    (served.index / "bad name.sqlite3").write_bytes(b"")
    (served.index / "readme.txt").write_text("x", encoding="utf-8")
    registry = CollectionRegistry(served.index)
    assert await registry.names() == ["default", "notes"]
    assert await CollectionRegistry(served.index / "missing").names() == []


async def test_collections_open_lazily_and_are_reused(served: Served) -> None:
    registry = CollectionRegistry(served.index)
    try:
        async with registry.lease("notes") as first:
            pass
        async with registry.lease("notes") as second:
            assert second is first
        with pytest.raises(StorageError, match="unknown collection 'nope'"):
            async with registry.lease("nope"):
                pass
        with pytest.raises(StorageError, match="unknown collection"):
            async with registry.lease("../default"):
                pass
    finally:
        await registry.close()


@pytest.fixture
def closed(monkeypatch: pytest.MonkeyPatch) -> list[Collection]:
    """Collections closed during the test, in order."""
    seen: list[Collection] = []
    original = Collection.close

    async def recording(self: Collection) -> None:
        seen.append(self)
        await original(self)

    monkeypatch.setattr(Collection, "close", recording)
    return seen


async def test_a_dense_collection_is_kept_and_sees_new_vectors(served: Served) -> None:
    async with Collection.open(
        served.index, "vec", base_dir=served.base, chunking=SMALL_CHUNKS, embedder=ToyEmbedder()
    ) as writer:
        await writer.ingest(served.base / "docs")
        registry = CollectionRegistry(served.index, embedder_for=toy_embedders)
        try:
            async with registry.lease("vec") as before:
                assert before.embedder is not None
                assert (await before.search("wind", 1, mode="dense")).results
            write_tree(served.base, {"docs/new.txt": "A brand new document.\n"})
            await writer.ingest(served.base / "docs")
            async with registry.lease("vec") as after:
                # Kept: its vector handle moves forward on the next search.
                assert after is before
                response = await after.search("A brand new document.", 3, mode="dense")
                assert response.results[0].source == "docs/new.txt"
                assert response.metadata["stale_dropped"] == 0
                assert "degraded" not in response.metadata
        finally:
            await registry.close()


async def test_a_newly_bound_collection_is_replaced_after_its_last_request(
    served: Served, closed: list[Collection]
) -> None:
    registry = CollectionRegistry(served.index, embedder_for=toy_embedders)
    try:
        async with registry.lease("notes") as old:
            assert old.embedder is None
            # Another process binds the collection to an embedder while a request runs.
            async with Collection.open(
                served.index, "notes", chunking=SMALL_CHUNKS, embedder=ToyEmbedder()
            ) as writer:
                await writer.ingest(served.base / "notes")
            closed.remove(writer)
            async with registry.lease("notes") as new:
                assert new is not old and new.embedder is not None
                # The old one still serves the request holding it.
                assert old not in closed
                assert (await old.search("centrifuge", 1)).results
                assert (await new.search("centrifuge", 1, mode="dense")).results
        assert closed == [old]
        async with registry.lease("notes") as again:
            assert again is new
    finally:
        await registry.close()
    assert closed == [old, new]


async def test_a_bm25_collection_is_kept_across_writes(served: Served) -> None:
    registry = CollectionRegistry(served.index)
    try:
        async with registry.lease("default") as before:
            pass
        write_tree(served.base, {"docs/extra.txt": "Extra words about kites.\n"})
        async with Collection.open(served.index, base_dir=served.base) as writer:
            await writer.ingest(served.base / "docs")
        async with registry.lease("default") as after:
            assert after is before  # its Retriever is rebuilt on the next search
            assert (await after.search("kites")).results
    finally:
        await registry.close()


async def test_close_waits_for_running_requests(served: Served, closed: list[Collection]) -> None:
    registry = CollectionRegistry(served.index)
    async with registry.lease("notes") as col:
        await registry.close()
        assert closed == []
        assert (await col.search("centrifuge")).results
    assert closed == [col]
    with pytest.raises(StorageError, match="registry is closed"):
        async with registry.lease("notes"):
            pass


async def test_describe_reads_without_opening_for_search(served: Served, tmp_path: Path) -> None:
    registry = CollectionRegistry(served.index)
    info = await registry.describe("notes")
    assert (info.name, info.documents, info.embedding) == ("notes", 1, None)
    assert registry._entries == {}


async def test_a_damaged_collection_is_described_as_damaged(served: Served) -> None:
    (served.index / "notes.sqlite3").write_bytes(b"not a database " * 1000)
    registry = CollectionRegistry(served.index)
    info = await registry.describe("notes")
    assert info.status == "damaged"
    assert (info.documents, info.chunks, info.generation, info.embedding) == (None,) * 4
    assert info.error is not None and "notes.sqlite3" in info.error and "\n" not in info.error
    healthy = await registry.describe("default")
    assert (healthy.status, healthy.error) == ("ok", None) and healthy.documents == 6
    with pytest.raises(StorageError, match="unknown collection 'recipes'"):
        await registry.describe("recipes")


async def test_a_dropped_and_recreated_collection_is_served_from_its_new_file(
    served: Served, closed: list[Collection]
) -> None:
    registry = CollectionRegistry(served.index)
    try:
        async with registry.lease("notes") as old:
            assert (await old.search("centrifuge", 1)).results
        # Another process drops the collection and makes a new one under the same name.
        await registry.location("notes").drop()
        write_tree(served.base, {"other/kites.md": "Kites fly on windy beaches.\n"})
        await ingest(served.index, served.base, "notes", served.base / "other")
        async with registry.lease("notes") as new:
            assert new is not old
            assert old in closed  # no request held it: closed when it was replaced
            assert not (await new.search("centrifuge", 1)).results
            assert [r.source for r in (await new.search("kites", 1)).results] == ["other/kites.md"]
        # Dropped and not re-created: the server says so, as for any unknown name.
        await registry.location("notes").drop()
        with pytest.raises(StorageError, match="unknown collection 'notes'"):
            async with registry.lease("notes"):
                pass
    finally:
        await registry.close()


async def test_a_shared_collection_dropped_and_recreated_is_served_anew(
    tmp_path: Path, postgres_dsn: str, fresh: str
) -> None:
    storage = tmp_path / "objects"

    def shared(text: str) -> dict[str, str]:
        return {"id": "r1", "text": text}

    async def make(text: str) -> None:
        async with Collection.open(
            None, fresh, base_dir=tmp_path, metadata_url=postgres_dsn, storage_uri=storage
        ) as col:
            await col.add_documents([shared(text)])

    await make("Centrifuge runs are logged.")
    registry = CollectionRegistry(metadata_url=postgres_dsn, storage_uri=storage)
    try:
        async with registry.lease(fresh) as old:
            assert (await old.search("centrifuge", 1)).results
        # Same name, same generation, another collection: only its uid tells them apart.
        await registry.location(fresh).drop()
        await make("Kites fly on windy beaches.")
        async with registry.lease(fresh) as new:
            assert new is not old
            assert not (await new.search("centrifuge", 1)).results
            assert [r.content for r in (await new.search("kites", 1)).results] == [
                "Kites fly on windy beaches."
            ]
        await registry.location(fresh).drop()
        with pytest.raises(StorageError, match="unknown collection"):
            async with registry.lease(fresh):
                pass
    finally:
        await registry.close()


async def test_a_collection_dropped_as_it_is_described_is_left_out(
    served: Served, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Another process drops "notes" while the listing reads it: the read fails like a
    # torn file would, and the collection is then gone, so it is not listed as damaged.
    registry = CollectionRegistry(served.index)
    read_info = registry._read_info

    async def torn(name: str, full: bool) -> Any:
        if name == "notes":
            await registry.location("notes").drop()
            raise StorageError("database disk image is malformed")
        return await read_info(name, full)

    monkeypatch.setattr(registry, "_read_info", torn)
    infos = await registry.describe_each(["default", "notes"])
    assert [(i.name, i.status) for i in infos] == [("default", "ok")]
    with pytest.raises(CollectionNotFoundError, match="unknown collection 'notes'"):
        await registry.describe("notes")


async def test_a_collection_unreadable_for_a_moment_is_read_again(
    served: Served, monkeypatch: pytest.MonkeyPatch
) -> None:
    registry = CollectionRegistry(served.index)
    read_info = registry._read_info
    failures = [StorageError("database disk image is malformed")]

    async def once_torn(name: str, full: bool) -> Any:
        if failures:
            raise failures.pop()
        return await read_info(name, full)

    monkeypatch.setattr(registry, "_read_info", once_torn)
    info = await registry.describe("notes")
    assert (info.status, info.error, info.documents) == ("ok", None, 1)


async def test_a_store_file_removed_as_it_is_opened_is_not_made_again(
    served: Served, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The file is found, then removed (a drop in another process) before SQLite opens
    # it: SQLite must not create it again, empty, in its place.
    path = served.index / "notes.sqlite3"
    found = sqlite_module._existing_file

    def found_then_dropped(at: Path) -> bool:
        there = found(at)
        for suffix in ("", "-wal", "-shm"):
            Path(f"{at}{suffix}").unlink(missing_ok=True)
        return there

    monkeypatch.setattr(sqlite_module, "_existing_file", found_then_dropped)
    with pytest.raises(CollectionNotFoundError, match="removed as it was opened"):
        await SQLiteMetadataStore.open(path, create=False)
    assert not path.exists()
