"""SQLite metadata store: one WAL-mode file per collection, via aiosqlite."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import inspect
import json
import os
import sqlite3
import threading
import uuid
from collections.abc import AsyncIterator, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiosqlite
import numpy as np

from groundkit.contracts import CollectionManifest, DocumentRecord, EmbeddingIdentity, FieldValue
from groundkit.errors import StorageError
from groundkit.storage._rows import (
    WriteItems,
    check_fields_value,
    check_storable,
    chunk_rows,
    damaged,
    document_record,
    document_rows,
    document_state,
    generations_row,
    int_value,
    manifest_value,
    now_iso,
    optional_text,
    postings_from_blobs,
    stored_chunk,
    term_counts,
)
from groundkit.storage.protocols import (
    ChunkOwners,
    ChunkPostings,
    ConfirmedVectors,
    DocumentState,
    Generations,
    MetadataStoreProtocol,
    StoredChunk,
)

__all__ = ["SCHEMA_VERSION", "SQLiteMetadataStore"]

SCHEMA_VERSION = 2
# Applied in order to a file of an older version, in one transaction each, so an
# existing collection opens without a re-ingest. Version 2: vectors_generation.
_MIGRATIONS: dict[int, str] = {
    1: "ALTER TABLE state ADD COLUMN vectors_generation INTEGER NOT NULL DEFAULT 0",
}
# The first bytes of every SQLite database file.
_SQLITE_MAGIC = b"SQLite format 3\x00"
_IN_BATCH = 500
# Key lookups up to this size run inline on a read-only connection: a handful of
# primary-key reads in WAL mode (readers never wait for writers) cost less than
# the round trip to aiosqlite's thread, which dominated small-corpus searches.
_INLINE_KEYS = 64
# How long a cancelled close waits for aiosqlite's thread to end (see _Worker).
_WORKER_WAIT = 10.0

_SCHEMA = """
CREATE TABLE IF NOT EXISTS state (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    schema_version INTEGER NOT NULL,
    generation INTEGER NOT NULL DEFAULT 0,
    vectors_generation INTEGER NOT NULL DEFAULT 0,
    base_dir TEXT,
    analyzer TEXT,
    manifest TEXT
);
CREATE TABLE IF NOT EXISTS documents (
    id TEXT PRIMARY KEY,
    source TEXT NOT NULL UNIQUE,
    content_hash TEXT NOT NULL,
    ingested_at TEXT NOT NULL,
    source_class TEXT NOT NULL,
    extractor TEXT,
    metadata TEXT NOT NULL DEFAULT '{}',
    vectors_hash TEXT
);
CREATE TABLE IF NOT EXISTS chunks (
    key INTEGER PRIMARY KEY AUTOINCREMENT,
    id TEXT NOT NULL UNIQUE,
    document_id TEXT NOT NULL REFERENCES documents(id) ON DELETE CASCADE,
    chunk_index INTEGER NOT NULL,
    content TEXT NOT NULL,
    start_offset INTEGER NOT NULL,
    end_offset INTEGER NOT NULL,
    content_hash TEXT NOT NULL,
    term_ids BLOB NOT NULL,
    tfs BLOB NOT NULL
);
CREATE INDEX IF NOT EXISTS chunks_by_document ON chunks(document_id);
CREATE INDEX IF NOT EXISTS chunks_canonical ON chunks(content_hash, chunk_index, document_id);
CREATE TABLE IF NOT EXISTS terms (
    id INTEGER PRIMARY KEY,
    term TEXT NOT NULL UNIQUE
);
"""

_CHUNK_COLUMNS = (
    "c.key, c.id, c.chunk_index, c.content, c.start_offset, c.end_offset, "
    "d.id, d.source, d.content_hash, d.ingested_at, d.source_class, d.extractor, d.metadata"
)


class _Worker:
    """aiosqlite's thread for one connection, and the connection it runs on.

    aiosqlite runs every call on a thread of its own and hands the result back
    through the event loop. Cancelling an await does not stop the call: when the
    thread finishes after the loop has closed (``asyncio.run`` returning, a
    server stopping mid-request) it dies with "Event loop is closed" on stderr.
    A close that is cancelled therefore stops the thread and waits for it
    (``finish``), outside the loop, before the cancellation goes on.
    """

    def __init__(self, raw: sqlite3.Connection) -> None:
        self.raw = raw
        self._thread: threading.Thread | None = None
        self._started = threading.Event()

    def connect(self) -> sqlite3.Connection:
        """aiosqlite's connector: runs on the worker thread, so it learns which one that is."""
        self._thread = threading.current_thread()
        self._started.set()
        return self.raw

    def finish(self, conn: aiosqlite.Connection) -> None:
        """Stop ``conn``'s thread and wait until it has ended (blocking, bounded)."""
        with contextlib.suppress(sqlite3.Error):
            self.raw.interrupt()  # a long read ends now, not when it is done
        conn.stop()  # queued behind what the thread still has to do
        if self._started.wait(_WORKER_WAIT) and self._thread is not None:
            self._thread.join(_WORKER_WAIT)
            if self._thread.is_alive():
                return  # still inside a statement: the connection is not ours to close
        with contextlib.suppress(sqlite3.Error):
            self.raw.close()


async def _close_connection(conn: aiosqlite.Connection, worker: _Worker | None) -> None:
    """``conn.close()``, finished off by ``worker.finish`` if the close is cancelled."""
    try:
        await conn.close()
    except asyncio.CancelledError:
        if worker is not None:
            worker.finish(conn)
        raise


class SQLiteMetadataStore:
    """``MetadataStoreProtocol`` on one SQLite file; create with ``await .open(path)``."""

    def __init__(
        self, conn: aiosqlite.Connection, path: Path, *, worker: _Worker | None = None
    ) -> None:
        self._db: aiosqlite.Connection | None = conn
        self._worker = worker
        self.path = path
        self._vocab: dict[str, int] | None = None
        self._reader: sqlite3.Connection | None = None
        # What opening had to repair (``open(rebuild_damaged=True)``), for the next report.
        self.repairs: list[str] = []

    @classmethod
    async def open(
        cls, path: Path, *, create: bool = True, rebuild_damaged: bool = False
    ) -> SQLiteMetadataStore:
        """Open (or create) the store at ``path`` and check its schema version.

        A new file appears whole: it is built under a temporary name and linked
        into place, so a file at ``path`` that is empty or not a groundkit
        database is damage (``StorageError``), never a fresh collection.

        ``rebuild_damaged`` runs SQLite's integrity check too and, when the file
        is damaged, moves it (and its WAL) aside and starts an empty collection
        in its place; ``repairs`` then says so. The old file is kept, never
        deleted. A file of a newer schema, or a database that is not a groundkit
        collection at all, is never moved.
        """
        path = Path(path)
        try:
            return await cls._open(path, create=create, check=rebuild_damaged)
        except _DamagedFile as exc:
            if not rebuild_damaged:
                raise
            aside = await asyncio.to_thread(_set_aside, path)
            store = await cls._open(path, create=True, check=False)
            store.repairs.append(
                f"the metadata store was damaged ({exc.detail}); moved it to {aside} and "
                "started the collection anew: ingest each of its folders and URLs again"
            )
            return store

    @classmethod
    async def _open(cls, path: Path, *, create: bool, check: bool) -> SQLiteMetadataStore:
        found = await asyncio.to_thread(_existing_file, path)
        if not found:
            if not create:
                raise StorageError(f"no collection at {str(path)!r}; ingest something first")
            await asyncio.to_thread(_create_file, path)
        try:
            # Connected here rather than by aiosqlite: when its connect fails it
            # stops its thread without waiting for it, and a thread that ends after
            # the event loop has closed prints a traceback. Handing aiosqlite a
            # connection that is already open cannot fail.
            raw = await asyncio.to_thread(
                sqlite3.connect, path, isolation_level=None, check_same_thread=False
            )
        except (OSError, sqlite3.Error) as exc:
            raise StorageError(f"cannot open {str(path)!r}: {exc}") from None
        worker = _Worker(raw)
        conn = aiosqlite.Connection(worker.connect, iter_chunk_size=64)
        try:
            await conn
        except BaseException:  # cancelled: aiosqlite has already told its thread to stop
            worker.finish(conn)
            raise
        store = cls(conn, path, worker=worker)
        try:
            await store._prepare()
            if check:
                await store._integrity_check()
        except BaseException:
            await _close_connection(conn, worker)
            raise
        return store

    async def _integrity_check(self) -> None:
        """SQLite's ``quick_check`` (every page read once): ``_DamagedFile`` on failure."""
        try:
            async with self._conn.execute("PRAGMA quick_check") as cur:
                rows = [row[0] async for row in cur]
        except sqlite3.DatabaseError as exc:
            raise _DamagedFile(self.path, f"the integrity check failed: {exc}") from None
        if rows != ["ok"]:
            raise _DamagedFile(self.path, "the integrity check found damaged pages")

    async def _prepare(self) -> None:
        try:
            await self._conn.execute("PRAGMA busy_timeout=10000")
            # Looked at before anything could change the file: someone else's database
            # must be left exactly as it was found.
            async with self._conn.execute(
                "SELECT name FROM sqlite_master WHERE type='table'"
            ) as cur:
                tables = {row[0] async for row in cur}
            if "state" not in tables:
                raise StorageError(
                    f"{str(self.path)!r} is an SQLite database but not a groundkit collection "
                    "(it has no state table); move it away, or open another index directory"
                )
            await self._conn.execute("PRAGMA journal_mode=WAL")
            await self._conn.execute("PRAGMA foreign_keys=ON")
            await self._conn.execute("PRAGMA synchronous=NORMAL")
            found = await self._schema_version()
            if found != SCHEMA_VERSION:
                await self._migrate(found)
        except sqlite3.DatabaseError as exc:
            raise _DamagedFile(self.path, str(exc)) from None

    async def _schema_version(self) -> int:
        async with self._conn.execute("SELECT schema_version FROM state WHERE id = 1") as cur:
            row = await cur.fetchone()
        if row is None or isinstance(row[0], bool) or not isinstance(row[0], int):
            raise _DamagedFile(self.path, "the collection state row is damaged")
        return int(row[0])

    async def _migrate(self, found: int) -> None:
        """Bring an older file up to ``SCHEMA_VERSION``; refuse a newer one."""
        if found > SCHEMA_VERSION or found not in _MIGRATIONS:
            raise StorageError(
                f"{str(self.path)!r} has schema version {found}, this groundkit reads version "
                f"{SCHEMA_VERSION}: open it with the groundkit that wrote it, or move it away "
                "and ingest again"
            )
        await self._conn.execute("BEGIN IMMEDIATE")
        try:
            version = await self._schema_version()  # another process may have migrated
            while version < SCHEMA_VERSION:
                await self._conn.execute(_MIGRATIONS[version])
                version += 1
                await self._conn.execute(
                    "UPDATE state SET schema_version = ? WHERE id = 1", (version,)
                )
            await self._conn.execute("COMMIT")
        except BaseException:
            await self._rollback()
            raise

    @property
    def _conn(self) -> aiosqlite.Connection:
        if self._db is None:
            raise StorageError(f"the metadata store {self.path.name!r} is closed")
        return self._db

    async def close(self) -> None:
        """Close the connections; later calls raise ``StorageError``. Idempotent."""
        if self._reader is not None:
            self._reader.close()
            self._reader = None
        db, self._db = self._db, None
        if db is not None:
            await _close_connection(db, self._worker)

    def _open_conn_check(self) -> None:
        if self._db is None:
            raise StorageError(f"the metadata store {self.path.name!r} is closed")

    def _read_inline(self, sql: str, params: Sequence[Any]) -> list[Any] | None:
        """Run a small read on the read-only connection; None if it would have to wait."""
        if self._db is None:
            raise StorageError(f"the metadata store {self.path.name!r} is closed")
        if self._reader is None:
            self._reader = sqlite3.connect(
                f"{self.path.resolve().as_uri()}?mode=ro", uri=True, check_same_thread=False
            )
            self._reader.execute("PRAGMA busy_timeout=0")
        try:
            return self._reader.execute(sql, params).fetchall()
        except sqlite3.OperationalError:
            return None  # busy or locked: take the threaded path instead

    # -- state ---------------------------------------------------------------

    async def _state(self, column: str) -> Any:
        async with self._conn.execute(f"SELECT {column} FROM state WHERE id = 1") as cur:
            row = await cur.fetchone()
        return row[0] if row else None

    async def generation(self) -> int:
        # Checked before every Collection search, so it takes the inline path.
        rows = self._read_inline("SELECT generation FROM state WHERE id = 1", ())
        if rows is None:
            return int_value(await self._state("generation"), "generation", self.path.name)
        return int_value(rows[0][0], "generation", self.path.name)

    async def generations(self) -> Generations:
        sql = "SELECT generation, vectors_generation FROM state WHERE id = 1"
        rows = self._read_inline(sql, ())
        if rows is None:
            async with self._conn.execute(sql) as cur:
                rows = [await cur.fetchone()]
        return generations_row(rows[0], self.path.name)

    async def get_base_dir(self) -> str | None:
        return optional_text(await self._state("base_dir"), "base directory", self.path.name)

    async def set_base_dir(self, base_dir: str) -> None:
        await self._conn.execute("UPDATE state SET base_dir = ? WHERE id = 1", (base_dir,))

    async def get_analyzer(self) -> str | None:
        return optional_text(await self._state("analyzer"), "analyzer", self.path.name)

    async def bind_analyzer(self, identity: str) -> str:
        """Bind the collection to ``identity`` unless bound; returns the bound identity."""
        await self._conn.execute("BEGIN IMMEDIATE")
        try:
            current = await self._state("analyzer")
            if current is None:
                await self._conn.execute("UPDATE state SET analyzer = ? WHERE id = 1", (identity,))
                current = identity
            await self._conn.execute("COMMIT")
        except BaseException:
            await self._conn.execute("ROLLBACK")
            raise
        return str(current)

    async def read_manifest(self) -> CollectionManifest | None:
        return manifest_value(await self._state("manifest"), self.path.name)

    async def bind_embedding(self, identity: EmbeddingIdentity) -> CollectionManifest:
        """Bind the collection to ``identity`` unless bound; returns the bound manifest."""
        await self._conn.execute("BEGIN IMMEDIATE")
        try:
            manifest = await self.read_manifest()
            if manifest is None:
                manifest = CollectionManifest(**identity.model_dump(), created_at=now_iso())
                # A bump: open Retrievers must learn that dense search is now possible.
                await self._conn.execute(
                    "UPDATE state SET manifest = ?, generation = generation + 1 WHERE id = 1",
                    (manifest.model_dump_json(),),
                )
            await self._conn.execute("COMMIT")
        except BaseException:
            await self._conn.execute("ROLLBACK")
            raise
        return manifest

    # -- documents -----------------------------------------------------------

    async def document_states(self) -> dict[str, DocumentState]:
        async with self._conn.execute(
            "SELECT source, content_hash, source_class, extractor, metadata FROM documents"
        ) as cur:
            return {row[0]: document_state(row) async for row in cur}

    async def iter_documents(self) -> AsyncIterator[DocumentRecord]:
        async with self._conn.execute(
            "SELECT d.id, d.source, d.content_hash, d.ingested_at, d.source_class, d.extractor,"
            " d.metadata, (SELECT COUNT(*) FROM chunks c WHERE c.document_id = d.id)"
            " FROM documents d ORDER BY d.source"
        ) as cur:
            async for row in cur:
                yield document_record(row, row[7])

    async def _term_ids(self, terms: set[str]) -> dict[str, int]:
        """Ids for ``terms``, creating missing ones (inside the caller's transaction)."""
        if self._vocab is None:
            self._vocab = await self.vocabulary()
        vocab = self._vocab
        missing = sorted(t for t in terms if t not in vocab)
        for i in range(0, len(missing), _IN_BATCH):
            part = missing[i : i + _IN_BATCH]
            await self._conn.executemany(
                "INSERT OR IGNORE INTO terms (term) VALUES (?)", [(t,) for t in part]
            )
            marks = ",".join("?" * len(part))
            async with self._conn.execute(
                f"SELECT term, id FROM terms WHERE term IN ({marks})", part
            ) as cur:
                async for term, term_id in cur:
                    vocab[term] = term_id
        return vocab

    async def replace_documents(self, items: WriteItems) -> None:
        """Store several documents in one transaction (one generation bump).

        A transaction per document cost about eight round trips to aiosqlite's
        thread each; bulk ingest spent more time on those hops than on SQLite.
        """
        if not items:
            return
        sources, counts = term_counts(items)
        check_storable(items, nul_allowed=True)
        vocab_before = None if self._vocab is None else dict(self._vocab)
        try:
            await self._conn.execute("BEGIN IMMEDIATE")
            vocab = await self._term_ids({t for group in counts for c in group for t in c})
            for i in range(0, len(sources), _IN_BATCH):
                part = sources[i : i + _IN_BATCH]
                marks = ",".join("?" * len(part))
                await self._conn.execute(f"DELETE FROM documents WHERE source IN ({marks})", part)
            await self._conn.executemany(
                "INSERT INTO documents (id, source, content_hash, ingested_at, source_class,"
                " extractor, metadata) VALUES (?, ?, ?, ?, ?, ?, ?)",
                document_rows(items),
            )
            rows = chunk_rows(items, counts, vocab)
            await self._conn.executemany(
                "INSERT INTO chunks (id, document_id, chunk_index, content, start_offset,"
                " end_offset, content_hash, term_ids, tfs) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                rows,
            )
            await self._conn.execute("UPDATE state SET generation = generation + 1 WHERE id = 1")
            await self._conn.execute("COMMIT")
        except BaseException as exc:
            await self._rollback()
            self._vocab = vocab_before  # ids minted in the rolled-back transaction are gone
            if isinstance(exc, sqlite3.Error):
                what = repr(sources[0]) if len(sources) == 1 else f"{len(sources)} documents"
                raise StorageError(f"could not store {what}: {exc}") from None
            raise

    async def _rollback(self) -> None:
        if self._conn.in_transaction:
            await self._conn.execute("ROLLBACK")

    async def delete_documents(self, sources: Sequence[str]) -> int:
        if not sources:
            return 0
        deleted = 0
        try:
            await self._conn.execute("BEGIN IMMEDIATE")
            for i in range(0, len(sources), _IN_BATCH):
                part = list(sources[i : i + _IN_BATCH])
                marks = ",".join("?" * len(part))
                cur = await self._conn.execute(
                    f"DELETE FROM documents WHERE source IN ({marks})", part
                )
                deleted += cur.rowcount
                await cur.close()
            if deleted:
                await self._conn.execute(
                    "UPDATE state SET generation = generation + 1 WHERE id = 1"
                )
            await self._conn.execute("COMMIT")
        except BaseException as exc:
            await self._rollback()
            if isinstance(exc, sqlite3.Error):
                raise StorageError(f"could not delete documents: {exc}") from None
            raise
        return deleted

    # -- chunks --------------------------------------------------------------

    async def documents_missing_vectors(self) -> list[str]:
        """Ids of documents whose current content has no confirmed vectors."""
        async with self._conn.execute(
            "SELECT id FROM documents WHERE vectors_hash IS NULL OR vectors_hash != content_hash"
            " ORDER BY source"
        ) as cur:
            return [row[0] async for row in cur]

    async def mark_vectors_stored_many(self, items: Sequence[tuple[str, str]]) -> None:
        """Confirm stored vectors for several documents in one statement."""
        if not items:
            return
        await self._vector_write(
            "confirm stored vectors",
            "UPDATE documents SET vectors_hash = ? WHERE id = ? AND content_hash = ?",
            [(content_hash, document_id, content_hash) for document_id, content_hash in items],
        )

    async def forget_vectors(self, document_ids: Sequence[str] | None = None) -> None:
        if document_ids is None:
            sql = "UPDATE documents SET vectors_hash = NULL"
            await self._vector_write("forget stored vectors", sql, [()])
            return
        await self._vector_write(
            "forget stored vectors",
            "UPDATE documents SET vectors_hash = NULL WHERE id = ?",
            [(document_id,) for document_id in dict.fromkeys(document_ids)],
        )

    async def bump_vectors_generation(self) -> None:
        await self._vector_write("record a vector write", None, [])

    async def _vector_write(self, what: str, sql: str | None, rows: list[tuple[Any, ...]]) -> None:
        """``sql`` for each of ``rows`` and a vectors-generation bump, in one transaction."""
        try:
            await self._conn.execute("BEGIN IMMEDIATE")
            if sql is not None:
                await self._conn.executemany(sql, rows)
            await self._conn.execute(
                "UPDATE state SET vectors_generation = vectors_generation + 1 WHERE id = 1"
            )
            await self._conn.execute("COMMIT")
        except BaseException as exc:
            await self._rollback()
            if isinstance(exc, sqlite3.Error):
                raise StorageError(f"could not {what}: {exc}") from None
            raise

    async def confirmed_vectors(self) -> ConfirmedVectors:
        # Two plain reads on a connection of its own, in one thread hop: a million
        # chunk ids go through aiosqlite's batches several times slower.
        documents_sql = "SELECT id FROM documents WHERE vectors_hash = content_hash"
        chunks_sql = (
            "SELECT c.id FROM chunks c JOIN documents d ON d.id = c.document_id"
            " WHERE d.vectors_hash = d.content_hash"
        )

        def read() -> ConfirmedVectors:
            conn = sqlite3.connect(f"{self.path.resolve().as_uri()}?mode=ro", uri=True)
            try:
                conn.execute("PRAGMA busy_timeout=10000")
                conn.execute("BEGIN")  # one snapshot for both reads
                documents = frozenset(row[0] for row in conn.execute(documents_sql))
                chunks = frozenset(row[0] for row in conn.execute(chunks_sql))
                conn.execute("COMMIT")
            finally:
                conn.close()
            return ConfirmedVectors(documents, chunks)

        self._open_conn_check()
        try:
            return await asyncio.to_thread(read)
        except sqlite3.Error as exc:
            raise StorageError(f"could not read confirmed vectors: {exc}") from None

    async def confirmed_vector_count(self) -> int:
        # Every chunk minus those of unconfirmed documents (usually none): two index
        # counts, a few milliseconds at a million chunks, where counting the join
        # takes a few hundred.
        async with self._conn.execute(
            "SELECT (SELECT COUNT(*) FROM chunks) - (SELECT COUNT(*) FROM chunks"
            " WHERE document_id IN (SELECT id FROM documents"
            " WHERE vectors_hash IS NULL OR vectors_hash != content_hash))"
        ) as cur:
            row = await cur.fetchone()
        return int_value(row[0] if row else 0, "confirmed vector count", self.path.name)

    async def document_ids(self) -> set[str]:
        async with self._conn.execute("SELECT id FROM documents") as cur:
            return {row[0] async for row in cur}

    async def get_chunks_for_documents(
        self, document_ids: Sequence[str]
    ) -> dict[str, list[StoredChunk]]:
        """Chunks of several documents, each list in chunk order; absent ids are left out."""
        out: dict[str, list[StoredChunk]] = {}
        ids = list(dict.fromkeys(document_ids))
        for i in range(0, len(ids), _IN_BATCH):
            part = ids[i : i + _IN_BATCH]
            marks = ",".join("?" * len(part))
            rows = await self._conn.execute_fetchall(
                f"SELECT {_CHUNK_COLUMNS} FROM chunks c JOIN documents d ON d.id = c.document_id"
                f" WHERE c.document_id IN ({marks})",
                part,
            )
            for row in rows:
                stored = stored_chunk(row)
                out.setdefault(stored.document_id, []).append(stored)
        for listed in out.values():
            listed.sort(key=lambda r: r.chunk_index)
        return out

    async def get_chunks_by_ids(self, chunk_ids: Sequence[str]) -> Mapping[str, StoredChunk]:
        rows = await self._chunks_where("c.id", list(chunk_ids))
        return {row.chunk_id: row for row in rows}

    async def _chunks_where(self, column: str, values: list[Any]) -> list[StoredChunk]:
        """Chunks whose ``column`` is one of ``values``; small lookups run inline."""
        out: list[StoredChunk] = []
        for i in range(0, len(values), _IN_BATCH):
            part = values[i : i + _IN_BATCH]
            marks = ",".join("?" * len(part))
            sql = (
                f"SELECT {_CHUNK_COLUMNS} FROM chunks c JOIN documents d ON d.id = c.document_id"
                f" WHERE {column} IN ({marks})"
            )
            rows = self._read_inline(sql, part) if len(part) <= _INLINE_KEYS else None
            if rows is None:
                rows = list(await self._conn.execute_fetchall(sql, part))
            out.extend(stored_chunk(row) for row in rows)
        return out

    async def chunk_count(self) -> int:
        async with self._conn.execute("SELECT COUNT(*) FROM chunks") as cur:
            row = await cur.fetchone()
        return int(row[0]) if row else 0

    async def get_chunk(self, chunk_id: str) -> StoredChunk | None:
        async with self._conn.execute(
            f"SELECT {_CHUNK_COLUMNS} FROM chunks c JOIN documents d ON d.id = c.document_id"
            " WHERE c.id = ?",
            (chunk_id,),
        ) as cur:
            row = await cur.fetchone()
        return stored_chunk(row) if row else None

    async def get_chunks_by_keys(self, keys: Sequence[int]) -> Mapping[int, StoredChunk]:
        rows = await self._chunks_where("c.key", [int(k) for k in keys])
        return {row.key: row for row in rows}

    async def iter_chunks(self, batch_size: int = 1000) -> AsyncIterator[list[StoredChunk]]:
        async with self._conn.execute(
            f"SELECT {_CHUNK_COLUMNS} FROM chunks c JOIN documents d ON d.id = c.document_id"
            " ORDER BY d.source, c.chunk_index"
        ) as cur:
            while rows := await cur.fetchmany(batch_size):
                yield [stored_chunk(r) for r in rows]

    # -- lexical statistics --------------------------------------------------

    async def vocabulary(self) -> dict[str, int]:
        async with self._conn.execute("SELECT term, id FROM terms") as cur:
            rows = await cur.fetchall()
        return {term: int(term_id) for term, term_id in rows}

    async def chunk_owners(self) -> ChunkOwners:
        # One statement, so documents and chunks come from the same snapshot.
        document_ids: list[str] = []
        fields: list[dict[str, FieldValue]] = []
        position: dict[int, int] = {}
        keys: list[int] = []
        owner_rowids: list[int] = []
        async with self._conn.execute(
            "SELECT 0, rowid, id, json_extract(metadata, '$.fields') FROM documents"
            " UNION ALL SELECT 1, c.key, d.rowid, NULL"
            " FROM chunks c JOIN documents d ON d.id = c.document_id"
        ) as cur:
            while batch := await cur.fetchmany(50_000):
                for kind, a, b, raw in batch:
                    if kind == 0:
                        position[a] = len(document_ids)
                        document_ids.append(b)
                        fields.append(_stored_fields(raw, b))
                    else:
                        keys.append(a)
                        owner_rowids.append(b)
        return ChunkOwners(
            keys=np.asarray(keys, dtype=np.int64),
            owners=np.fromiter(
                (position[r] for r in owner_rowids), dtype=np.int64, count=len(owner_rowids)
            ),
            document_ids=document_ids,
            fields=fields,
        )

    async def iter_postings(self, batch_size: int = 50_000) -> AsyncIterator[ChunkPostings]:
        async with self._conn.execute(
            "SELECT key, term_ids, tfs FROM chunks ORDER BY content_hash, chunk_index, document_id"
        ) as cur:
            while rows := await cur.fetchmany(batch_size):
                yield postings_from_blobs(
                    [r[0] for r in rows], [r[1] for r in rows], [r[2] for r in rows]
                )


def _stored_fields(raw: Any, document_id: Any) -> dict[str, FieldValue]:
    where = f"document row {document_id!r}"
    if raw is None:
        return {}
    try:
        value = json.loads(raw) if isinstance(raw, str) else raw
    except (ValueError, RecursionError):
        raise damaged(where, "fields") from None
    return dict(check_fields_value(value, where))


class _DamagedFile(StorageError):
    """A collection file that is there but unreadable: what ``rebuild_damaged`` repairs."""

    def __init__(self, path: Path, detail: str) -> None:
        super().__init__(
            f"{str(path)!r}: {detail}; restore it from a backup, or ingest again with "
            "rebuild_damaged (grk ingest --rebuild) to move it aside and start anew"
        )
        self.detail = detail


def _set_aside(path: Path) -> str:
    """Rename a damaged collection file (and its WAL and shared memory) out of the way."""
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S%f")
    aside = path.with_name(f"{path.name}.damaged-{stamp}")
    try:
        path.rename(aside)
        for suffix in ("-wal", "-shm"):
            sidecar = path.with_name(path.name + suffix)
            if sidecar.exists():
                sidecar.rename(aside.with_name(aside.name + suffix))
    except OSError as exc:
        raise StorageError(
            f"{str(path)!r} is damaged and cannot be moved aside ({exc.strerror or exc}); "
            "move or delete it, then ingest again"
        ) from None
    return aside.name


def _existing_file(path: Path) -> bool:
    """Whether ``path`` holds a collection; ``StorageError`` when it holds something else.

    Collections are created whole (``_create_file``), so an empty file or one
    without SQLite's header was damaged or put there by something else.
    """
    try:
        with open(path, "rb") as handle:
            header = handle.read(len(_SQLITE_MAGIC))
    except FileNotFoundError:
        return False
    except IsADirectoryError:
        raise StorageError(f"{str(path)!r} is a directory, not a groundkit collection") from None
    except OSError as exc:
        raise StorageError(f"cannot read {str(path)!r}: {exc.strerror or exc}") from None
    if not header:
        raise _DamagedFile(path, "it is empty (0 bytes), not a groundkit collection")
    if header != _SQLITE_MAGIC:
        raise _DamagedFile(path, "it is not an SQLite database, so not a groundkit collection")
    return True


def _create_file(path: Path) -> None:
    """Build an empty collection under a temporary name, then link it to ``path``.

    Linking fails if ``path`` appeared meanwhile (another process created the
    collection first), and then that one is used: two creators never replace
    each other's file, and nobody ever sees a half-made one.
    """
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise StorageError(f"cannot create {str(path.parent)!r}: {exc.strerror or exc}") from None
    temp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
    # A WAL left by a database file deleted since would be replayed into the new
    # one by SQLite (it cannot tell the files apart): it goes first.
    for suffix in ("-wal", "-shm"):
        path.with_name(path.name + suffix).unlink(missing_ok=True)
    try:
        conn = sqlite3.connect(temp, isolation_level=None)
        try:
            conn.execute("PRAGMA journal_mode=WAL")
            conn.executescript(
                "BEGIN IMMEDIATE;"
                + _SCHEMA
                + f"INSERT INTO state (id, schema_version) VALUES (1, {SCHEMA_VERSION});"
                + "COMMIT;"
            )
        finally:
            conn.close()
        try:
            os.link(temp, path)
        except FileExistsError:
            pass
        except OSError:
            # No hard links on this filesystem: a rename, unless someone was faster.
            if not path.exists():
                os.replace(temp, path)
    except (OSError, sqlite3.Error) as exc:
        raise StorageError(f"cannot create {str(path)!r}: {exc}") from None
    finally:
        for leftover in (
            temp,
            temp.with_name(temp.name + "-wal"),
            temp.with_name(temp.name + "-shm"),
        ):
            leftover.unlink(missing_ok=True)


def _guard_sqlite_errors(cls: type[SQLiteMetadataStore]) -> None:
    """Wrap every protocol method so a SQLite failure surfaces as ``StorageError``.

    Reads meet damaged or vanished files too (a collection replaced under a
    running server); the driver's exception must not cross the public API.
    """

    def message(store: SQLiteMetadataStore, exc: Exception) -> str:
        if isinstance(exc, UnicodeEncodeError):
            # A str argument SQLite cannot bind; the driver's message is not quoted.
            return (
                f"metadata store {store.path.name!r}: a value given to it cannot be encoded "
                "as UTF-8 (it holds a lone surrogate)"
            )
        return (
            f"metadata store {store.path.name!r} failed: {exc}; if the file is damaged, "
            "restore it or ingest again into a new index directory"
        )

    for name in dir(MetadataStoreProtocol):
        if name.startswith("_") or name == "close":
            continue
        method = getattr(cls, name)
        if inspect.isasyncgenfunction(method):

            def gen_wrapper(method: Any) -> Any:
                @functools.wraps(method)
                async def wrapped(self: SQLiteMetadataStore, *a: Any, **k: Any) -> Any:
                    try:
                        async for item in method(self, *a, **k):
                            yield item
                    except (sqlite3.Error, UnicodeEncodeError) as exc:
                        raise StorageError(message(self, exc)) from None

                return wrapped

            setattr(cls, name, gen_wrapper(method))
        elif inspect.iscoroutinefunction(method):

            def coro_wrapper(method: Any) -> Any:
                @functools.wraps(method)
                async def wrapped(self: SQLiteMetadataStore, *a: Any, **k: Any) -> Any:
                    try:
                        return await method(self, *a, **k)
                    except (sqlite3.Error, UnicodeEncodeError) as exc:
                        raise StorageError(message(self, exc)) from None

                return wrapped

            setattr(cls, name, coro_wrapper(method))


_guard_sqlite_errors(SQLiteMetadataStore)
