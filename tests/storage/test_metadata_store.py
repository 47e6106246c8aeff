"""SQLiteMetadataStore: the shared conformance suite plus what is specific to SQLite."""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from groundkit import ConfigurationError, SQLiteMetadataStore, StorageError
from groundkit.storage.location import StoreLocation, metadata_path
from groundkit.storage.sqlite import SCHEMA_VERSION
from groundkit.testing.conformance.helpers import put
from groundkit.testing.conformance.metadata import MetadataStoreConformance, check_reopen


class TestSQLiteConformance(MetadataStoreConformance):
    @pytest.fixture
    async def store(self, tmp_path: Path) -> AsyncIterator[SQLiteMetadataStore]:
        s = await SQLiteMetadataStore.open(tmp_path / "conformance.sqlite3")
        try:
            yield s
        finally:
            await s.close()


async def test_persists_across_reopen(tmp_path: Path) -> None:
    path = tmp_path / "nested" / "dir" / "c.sqlite3"
    store = await SQLiteMetadataStore.open(path)
    await check_reopen(store, lambda: SQLiteMetadataStore.open(path, create=False))


async def test_two_connections_share_vocabulary(tmp_path: Path) -> None:
    path = tmp_path / "shared.sqlite3"
    first = await SQLiteMetadataStore.open(path)
    second = await SQLiteMetadataStore.open(path)
    try:
        await put(first, "a.txt", ["alpha"])
        await put(second, "b.txt", ["beta alpha"])
        await put(first, "c.txt", ["beta gamma"])  # first's cache has never seen "beta"
        vocab = await first.vocabulary()
        assert len(set(vocab.values())) == len(vocab) == 3
        async for batch in first.iter_postings():
            assert set(batch.term_ids.tolist()) <= set(vocab.values())
    finally:
        await first.close()
        await second.close()


async def test_open_missing_without_create(tmp_path: Path) -> None:
    with pytest.raises(StorageError, match="ingest"):
        await SQLiteMetadataStore.open(tmp_path / "missing.sqlite3", create=False)
    assert not (tmp_path / "missing.sqlite3").exists()


async def test_schema_version_mismatch_names_the_remedy(tmp_path: Path) -> None:
    path = tmp_path / "old.sqlite3"
    store = await SQLiteMetadataStore.open(path)
    await store.close()
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE state SET schema_version = ?", (SCHEMA_VERSION + 1,))
    conn.close()
    with pytest.raises(StorageError, match="delete the file and ingest again") as info:
        await SQLiteMetadataStore.open(path)
    assert str(SCHEMA_VERSION + 1) in str(info.value)


async def test_empty_state_table_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "blank.sqlite3"
    store = await SQLiteMetadataStore.open(path)
    await store.close()
    with sqlite3.connect(path) as conn:
        conn.execute("DELETE FROM state")
    conn.close()
    with pytest.raises(StorageError, match="schema version"):
        await SQLiteMetadataStore.open(path)


@pytest.mark.parametrize(
    "content", [b"this is not a database, just some text" * 100, b"\x00\x01\x02" * 2000]
)
async def test_garbage_file(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "garbage.sqlite3"
    path.write_bytes(content)
    with pytest.raises(StorageError, match="not a usable groundkit index"):
        await SQLiteMetadataStore.open(path)


@pytest.mark.parametrize("name", ["default", "a", "My_Coll-2", "9" * 64])
async def test_good_collection_names(tmp_path: Path, name: str) -> None:
    store = await StoreLocation.resolve(name, index_dir=tmp_path).open_metadata()
    try:
        assert isinstance(store, SQLiteMetadataStore)
        assert store.path == tmp_path / f"{name}.sqlite3" == metadata_path(tmp_path, name)
        assert store.path.exists()
    finally:
        await store.close()


@pytest.mark.parametrize(
    "name", ["", "../escape", "a/b", "_hidden", "-dash", ".dot", "has space", "x" * 65, "é"]
)
async def test_bad_collection_names(tmp_path: Path, name: str) -> None:
    with pytest.raises(ConfigurationError, match="invalid collection name"):
        await StoreLocation.resolve(name, index_dir=tmp_path / "idx").open_metadata()
    assert not (tmp_path / "idx").exists()
