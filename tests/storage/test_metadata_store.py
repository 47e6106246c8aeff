"""SQLiteMetadataStore: the shared conformance suite plus what is specific to SQLite."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from groundkit import Collection, ConfigurationError, StorageError
from groundkit.storage import SQLiteMetadataStore
from groundkit.storage.location import StoreLocation, metadata_path
from groundkit.storage.sqlite import SCHEMA_VERSION
from groundkit.testing.conformance.helpers import document_chunks, put
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
    with pytest.raises(StorageError, match="move it away and ingest again") as info:
        await SQLiteMetadataStore.open(path)
    assert str(SCHEMA_VERSION + 1) in str(info.value)


async def test_empty_state_table_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "blank.sqlite3"
    store = await SQLiteMetadataStore.open(path)
    await store.close()
    with sqlite3.connect(path) as conn:
        conn.execute("DELETE FROM state")
    conn.close()
    with pytest.raises(StorageError, match="the collection state row is damaged"):
        await SQLiteMetadataStore.open(path)


@pytest.mark.parametrize(
    "content", [b"this is not a database, just some text" * 100, b"\x00\x01\x02" * 2000]
)
async def test_garbage_file(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "garbage.sqlite3"
    path.write_bytes(content)
    with pytest.raises(StorageError, match="not an SQLite database, so not a groundkit"):
        await SQLiteMetadataStore.open(path)
    assert path.read_bytes() == content  # never touched, let alone initialised


async def test_a_zero_length_file_is_not_an_empty_collection(tmp_path: Path) -> None:
    base = tmp_path / "docs"
    base.mkdir()
    (base / "a.txt").write_text("alpha\n", encoding="utf-8")
    async with Collection.open(tmp_path / "idx", base_dir=base) as col:
        await col.ingest(base)
    path = tmp_path / "idx" / "default.sqlite3"
    for leftover in path.parent.glob("default.sqlite3-*"):
        leftover.unlink()
    path.write_bytes(b"")
    for create in (True, False):
        with pytest.raises(StorageError, match=r"empty \(0 bytes\), not a groundkit collection"):
            await SQLiteMetadataStore.open(path, create=create)
    with pytest.raises(StorageError, match="0 bytes"):
        await Collection.open(tmp_path / "idx", base_dir=base)
    assert path.read_bytes() == b""


async def test_a_foreign_sqlite_database_is_refused_untouched(tmp_path: Path) -> None:
    path = tmp_path / "theirs.sqlite3"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE invoices (id INTEGER PRIMARY KEY, total REAL)")
    conn.close()
    before = path.read_bytes()
    with pytest.raises(StorageError, match="not a groundkit collection"):
        await SQLiteMetadataStore.open(path)
    with sqlite3.connect(path) as conn:
        tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")]
    conn.close()
    assert tables == ["invoices"] and path.read_bytes() == before


async def test_a_new_file_appears_whole(tmp_path: Path) -> None:
    path = tmp_path / "idx" / "new.sqlite3"
    store = await SQLiteMetadataStore.open(path)
    try:
        assert await store.generations() == (0, 0)
    finally:
        await store.close()
    # No temporary file is left behind, and creating twice at once yields one file.
    assert sorted(p.name for p in path.parent.iterdir() if ".tmp" in p.name) == []
    twice = [SQLiteMetadataStore.open(tmp_path / "idx" / "race.sqlite3") for _ in range(4)]
    stores = await asyncio.gather(*twice)
    try:
        await put(stores[0], "a.txt", ["alpha"])
        for other in stores[1:]:
            assert await other.chunk_count() == 1
    finally:
        for opened in stores:
            await opened.close()


_VERSION_1 = """
CREATE TABLE state (id INTEGER PRIMARY KEY CHECK (id = 1), schema_version INTEGER NOT NULL,
    generation INTEGER NOT NULL DEFAULT 0, base_dir TEXT, analyzer TEXT, manifest TEXT);
CREATE TABLE documents (id TEXT PRIMARY KEY, source TEXT NOT NULL UNIQUE,
    content_hash TEXT NOT NULL, ingested_at TEXT NOT NULL, source_class TEXT NOT NULL,
    extractor TEXT, metadata TEXT NOT NULL DEFAULT '{}', vectors_hash TEXT);
CREATE TABLE chunks (key INTEGER PRIMARY KEY AUTOINCREMENT, id TEXT NOT NULL UNIQUE,
    document_id TEXT NOT NULL REFERENCES documents(id) ON DELETE CASCADE,
    chunk_index INTEGER NOT NULL, content TEXT NOT NULL, start_offset INTEGER NOT NULL,
    end_offset INTEGER NOT NULL, content_hash TEXT NOT NULL, term_ids BLOB NOT NULL,
    tfs BLOB NOT NULL);
CREATE INDEX chunks_by_document ON chunks(document_id);
CREATE INDEX chunks_canonical ON chunks(content_hash, chunk_index, document_id);
CREATE TABLE terms (id INTEGER PRIMARY KEY, term TEXT NOT NULL UNIQUE);
INSERT INTO state (id, schema_version, generation, analyzer) VALUES (1, 1, 7, 'an');
INSERT INTO documents VALUES ('d1', 'a.txt', 'h', '2026-01-01T00:00:00+00:00', 'text', NULL,
    '{}', NULL);
INSERT INTO terms VALUES (1, 'alpha');
INSERT INTO chunks (id, document_id, chunk_index, content, start_offset, end_offset,
    content_hash, term_ids, tfs) VALUES ('c1', 'd1', 0, 'alpha', 0, 5, 'ch',
    X'01000000', X'01000000');
"""


async def test_a_version_1_file_is_migrated_in_place(tmp_path: Path) -> None:
    path = tmp_path / "old.sqlite3"
    with sqlite3.connect(path) as conn:
        conn.executescript(_VERSION_1)
        # Enough rows that the old chunk table's pages would stay free without compaction.
        conn.execute(
            "INSERT INTO documents VALUES ('d2', 'b.txt', 'h2', "
            "'2026-01-01T00:00:00+00:00', 'text', NULL, '{}', NULL)"
        )
        conn.executemany(
            "INSERT INTO chunks (id, document_id, chunk_index, content, start_offset,"
            " end_offset, content_hash, term_ids, tfs) VALUES (?, 'd2', ?, ?, ?, ?, ?,"
            " X'01000000', X'01000000')",
            [(f"b{i}", i, "alpha " * 80, i * 480, i * 480 + 480, f"h{i}") for i in range(500)],
        )
    conn.close()
    store = await SQLiteMetadataStore.open(path)
    try:
        assert await store.generations() == (7, 0)
        assert await store.get_analyzer() == "an"
        contents = [s.content async for batch in store.iter_chunks() for s in batch]
        assert contents[0] == "alpha" and len(contents) == 501
        await store.mark_vectors_stored_many([("d1", "h")])
        assert await store.generations() == (7, 1)
    finally:
        await store.close()
    with sqlite3.connect(path) as conn:
        assert conn.execute("SELECT schema_version FROM state").fetchone() == (SCHEMA_VERSION,)
        # Current chunks counted once at the migration, then kept by the triggers.
        assert conn.execute("SELECT live_chunks FROM state").fetchone() == (501,)
        # The rebuilt chunk table's old pages are given back, not left free in the file.
        assert conn.execute("PRAGMA freelist_count").fetchone() == (0,)
        migrated = _indexes(conn), _triggers(conn)
    conn.close()
    fresh = await SQLiteMetadataStore.open(tmp_path / "fresh.sqlite3")
    await fresh.close()
    with sqlite3.connect(tmp_path / "fresh.sqlite3") as conn:
        assert (_indexes(conn), _triggers(conn)) == migrated
    conn.close()


def _triggers(conn: sqlite3.Connection) -> list[str]:
    rows = conn.execute("SELECT sql FROM sqlite_master WHERE type = 'trigger' ORDER BY name")
    return [str(sql) for (sql,) in rows.fetchall()]


def _indexes(conn: sqlite3.Connection) -> list[tuple[str, str]]:
    rows = conn.execute(
        "SELECT name, tbl_name FROM sqlite_master WHERE type = 'index' ORDER BY name"
    ).fetchall()
    return [(str(name), str(table)) for name, table in rows]


@pytest.mark.parametrize(
    ("sql", "damage"),
    [
        ("UPDATE documents SET metadata = '{not json'", "metadata"),
        ("UPDATE documents SET metadata = '[1, 2]'", "metadata"),
        ('UPDATE documents SET metadata = \'{"fields": {"x": {"a": 1}}}\'', "fields"),
        ("UPDATE documents SET metadata = '{\"page_starts\": [5, 0]}'", "page offsets"),
        ("UPDATE documents SET source_class = 'sorcery'", "source class"),
        ("UPDATE documents SET extractor = 'pypdf/1' WHERE source_class = 'text'", "extractor"),
        ("UPDATE chunks SET start_offset = -3", "start offset"),
        ("UPDATE chunks SET end_offset = end_offset + 7", "offsets"),
        ("UPDATE chunks SET content = X'00'", "text"),
        ("UPDATE chunks SET term_ids = X'010000'", "term statistics"),
        ("UPDATE chunks SET tfs = X'00000000'", "term statistics"),
        ("UPDATE state SET manifest = '{\"provider\": 3}'", "embedding manifest"),
        ("UPDATE state SET generation = 'many'", "generation"),
    ],
)
async def test_damaged_values_are_storage_errors_naming_the_row(
    tmp_path: Path, sql: str, damage: str
) -> None:
    path = tmp_path / "c.sqlite3"
    store = await SQLiteMetadataStore.open(path)
    await put(store, "a.txt", ["alpha secretword", "beta"])
    await store.close()
    with sqlite3.connect(path) as conn:
        conn.execute(sql)
    conn.close()
    store = await SQLiteMetadataStore.open(path)
    reads: list[Callable[[], Awaitable[Any]]] = [
        store.generations,
        store.read_manifest,
        store.document_states,
        lambda: _drain(store.iter_documents()),
        lambda: _drain(store.iter_chunks()),
        lambda: _drain(store.iter_postings()),
        store.chunk_owners,
        lambda: store.get_chunks_by_keys([1, 2]),
    ]
    failures: list[str] = []
    try:
        for read in reads:
            try:
                await read()
            except StorageError as exc:
                failures.append(str(exc))
    finally:
        await store.close()
    assert failures, f"nothing noticed {damage!r}"
    assert any(f": damaged {damage};" in message for message in failures), failures
    for message in failures:
        assert "secretword" not in message  # the row is named, never its text


async def _drain(iterator: Any) -> list[Any]:
    return [item async for item in iterator]


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


async def test_hits_of_long_metadata_are_read_once_per_document(tmp_path: Path) -> None:
    """The plain lookup copies a document's metadata into every hit; once a store has met
    long metadata, and for reads of more keys than a search's, the statement carries it
    with one row per document version only."""
    from groundkit.contracts import GAPS_KEY
    from groundkit.storage.sqlite import _INLINE_KEYS, _hits_sql
    from groundkit.testing.conformance.helpers import make_document, put_document

    store = await SQLiteMetadataStore.open(tmp_path / "m.sqlite3")
    try:
        document, chunks, terms = make_document("long.txt", [f"w{i}" for i in range(100)])
        metadata = {"pad": "x" * 70_000, GAPS_KEY: {str(i): " " for i in range(99)}}
        await put_document(store, document.model_copy(update={"metadata": metadata}), chunks, terms)
        await put(store, "short.txt", ["tiny", "small"])
        keys = sorted([s.key async for batch in store.iter_chunks() for s in batch])
        assert not store._long_metadata
        plain = await store.get_chunks_by_keys(keys[:10])
        assert store._long_metadata  # met: later reads share it
        assert await store.get_chunks_by_keys(keys[:10]) == plain
        with sqlite3.connect(store.path) as raw:
            for n in (10, _INLINE_KEYS + 1):
                rows = raw.execute(_hits_sql(n, shared=True), keys[:n] * 2).fetchall()
                assert len(rows) == n
                assert sum(r[12] is not None for r in rows) == 1  # one copy of its metadata
            rows = raw.execute(_hits_sql(3, shared=True), [keys[0], *keys[-2:]] * 2).fetchall()
            assert sum(r[12] is not None for r in rows) == 2  # one per document
    finally:
        await store.close()


async def test_hit_reads_follow_the_file_as_it_shrinks_and_grows(tmp_path: Path) -> None:
    """A search's hit rows are read on the store's read-only connection, kept open
    between searches. A compaction by another handle that cuts the file to under half,
    then writes that grow it again, must leave every read right: no row lost, none
    invented."""
    path = tmp_path / "shrinking.sqlite3"
    reader = await SQLiteMetadataStore.open(path)
    writer = await SQLiteMetadataStore.open(path)
    try:
        filler = " ".join(f"word{i}" for i in range(400))
        for n in range(60):
            await put(writer, f"f{n}.txt", [f"kept{n} {filler}", f"other{n} {filler}"])
        await writer.compact()  # every page in the file itself, none left in the log
        kept = await document_chunks(reader, "doc:f0.txt")
        keys = [c.key for c in kept]
        before = await reader.get_chunks_by_keys(keys)  # opens the read-only connection
        assert reader._reader is not None
        big = path.stat().st_size
        await writer.delete_documents([f"f{n}.txt" for n in range(1, 60)])
        report = await writer.compact()
        assert report.unfinished is None
        assert path.stat().st_size < big // 2
        assert await reader.get_chunks_by_keys(keys) == before
        gone = await reader.get_chunks_by_keys(list(range(max(keys) + 1, max(keys) + 40)))
        assert gone == {}
        for n in range(60, 90):
            await put(writer, f"f{n}.txt", [f"new{n} {filler}"])
        grown = await document_chunks(writer, "doc:f89.txt")
        rows = await reader.get_chunks_by_keys([*keys, grown[0].key])
        assert [rows[k] for k in keys] == [before[k] for k in keys]
        assert rows[grown[0].key].content.startswith("new89 ")
    finally:
        await writer.close()
        await reader.close()


async def test_a_scan_sorts_a_documents_metadata_once_not_once_per_chunk(tmp_path: Path) -> None:
    # A document with 1 MB of metadata (a long PDF's geometry, a file of many headings)
    # and 1,500 chunks: sorted with every chunk, its metadata would need 1.5 GB of
    # sorter space. With the sorter in memory and SQLite's heap capped at 200 MB, the
    # scan must still complete, every chunk holding the metadata.
    from groundkit.testing.conformance.helpers import make_document

    store = await SQLiteMetadataStore.open(tmp_path / "long.sqlite3")
    try:
        pad = "g" * 1_000_000
        document, chunks, terms = make_document("long.md", [f"part {i}" for i in range(1500)])
        document = document.model_copy(update={"metadata": {"pad": pad}})
        await store.replace_documents([(document, chunks, terms)])
        await put(store, "short.md", ["one", "two"])
        await store._conn.execute("PRAGMA temp_store = MEMORY")
        limits = sqlite3.connect(":memory:")
        limits.execute(f"PRAGMA hard_heap_limit = {200 * 1024 * 1024}")  # the whole process
        try:
            seen = [(s.source, s.metadata.get("pad")) async for b in store.iter_chunks() for s in b]
        finally:
            limits.execute("PRAGMA hard_heap_limit = 0")
            limits.close()
        assert seen == [("long.md", pad)] * 1500 + [("short.md", None)] * 2
    finally:
        await store.close()
