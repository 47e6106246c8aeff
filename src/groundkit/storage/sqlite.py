"""SQLite metadata store: one WAL-mode file per collection, via aiosqlite."""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import functools
import inspect
import json
import logging
import os
import random
import sqlite3
import threading
import time
import uuid
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

import aiosqlite
import numpy as np

from groundkit.contracts import (
    CollectionManifest,
    DocumentRecord,
    EmbeddingIdentity,
    FieldValue,
)
from groundkit.errors import CollectionNotFoundError, StorageError
from groundkit.storage._rows import (
    LEGACY_GAPS_SQL,
    REMOVED,
    STORED_ALREADY_COLUMNS,
    MetadataCarry,
    WriteItems,
    change_log,
    check_fields_value,
    check_keep,
    check_storable,
    chunk_rows,
    damaged,
    document_record,
    document_rows,
    document_state,
    generations_row,
    has_long_metadata,
    int_value,
    iso_time,
    live_count,
    manifest_value,
    now_iso,
    optional_text,
    plan_versions,
    postings_from_rows,
    prefix_range,
    share_metadata,
    stored_already,
    stored_chunk,
    stored_hit,
    term_counts,
    text_value,
    version_start,
    write_moment,
)
from groundkit.storage.protocols import (
    ChangeLog,
    ChunkOwners,
    ChunkPostings,
    Compaction,
    ConfirmedVectors,
    DocumentState,
    ErasedRows,
    Generations,
    LexicalDelta,
    MetadataStoreProtocol,
    StoredChunk,
)

logger = logging.getLogger(__name__)

__all__ = ["SCHEMA_VERSION", "SQLiteMetadataStore", "StoreReplacedError"]

SCHEMA_VERSION = 5
# Applied in order to a file of an older version, each in the opening transaction,
# so an existing collection opens without a re-ingest. Version 2: the vectors
# generation. Version 3: document versions, the change log, the collection uid.
# Version 4: the chunker the collection is bound to; every document stored before it
# is marked as chunked before chunk gaps were recorded (``LEGACY_GAPS_SQL``). Version
# 5: the count of current chunks, kept by triggers (``_LIVE_TRIGGERS``).
# The store counts its current chunks itself, whichever statement adds, retires or
# deletes them (a cascade included): the lexical index is checked against the count
# at every catch-up for nothing (adr/0055-derived-state-checked.md).
_LIVE_TRIGGERS = (
    "CREATE TRIGGER chunks_live_insert AFTER INSERT ON chunks WHEN NEW.valid_to IS NULL"
    " BEGIN UPDATE state SET live_chunks = live_chunks + 1 WHERE id = 1; END",
    "CREATE TRIGGER chunks_live_update AFTER UPDATE OF valid_to ON chunks"
    " WHEN (OLD.valid_to IS NULL) != (NEW.valid_to IS NULL)"
    " BEGIN UPDATE state SET live_chunks = live_chunks"
    " + (CASE WHEN NEW.valid_to IS NULL THEN 1 ELSE -1 END) WHERE id = 1; END",
    "CREATE TRIGGER chunks_live_delete AFTER DELETE ON chunks WHEN OLD.valid_to IS NULL"
    " BEGIN UPDATE state SET live_chunks = live_chunks - 1 WHERE id = 1; END",
)
_MIGRATIONS: dict[int, tuple[str, ...]] = {
    1: ("ALTER TABLE state ADD COLUMN vectors_generation INTEGER NOT NULL DEFAULT 0",),
    3: (
        "ALTER TABLE state ADD COLUMN chunker TEXT",
        f"UPDATE documents SET {LEGACY_GAPS_SQL}",
        f"UPDATE document_versions SET {LEGACY_GAPS_SQL}",
    ),
    2: (
        "ALTER TABLE state ADD COLUMN uid TEXT",
        "UPDATE state SET uid = lower(hex(randomblob(16)))",
        "ALTER TABLE state ADD COLUMN changes_floor INTEGER NOT NULL DEFAULT 0",
        "UPDATE state SET changes_floor = generation + 1",
        "ALTER TABLE documents ADD COLUMN version INTEGER NOT NULL DEFAULT 1",
        "ALTER TABLE documents ADD COLUMN valid_from REAL NOT NULL DEFAULT 0",
        "ALTER TABLE documents ADD COLUMN valid_as_of TEXT",
        "UPDATE documents SET valid_from = CAST(strftime('%s', ingested_at) AS REAL)",
        "CREATE TABLE document_versions ("
        " document_id TEXT NOT NULL REFERENCES documents(id) ON DELETE CASCADE,"
        " version INTEGER NOT NULL, source TEXT NOT NULL, content_hash TEXT NOT NULL,"
        " ingested_at TEXT NOT NULL, source_class TEXT NOT NULL, extractor TEXT,"
        " metadata TEXT NOT NULL DEFAULT '{}', valid_from REAL NOT NULL, valid_to REAL NOT NULL,"
        " valid_as_of TEXT, PRIMARY KEY (document_id, version))",
        # chunks is rebuilt: the unique chunk id now holds among current chunks only.
        "CREATE TABLE chunks_v3 ("
        " key INTEGER PRIMARY KEY AUTOINCREMENT, id TEXT NOT NULL,"
        " document_id TEXT NOT NULL REFERENCES documents(id) ON DELETE CASCADE,"
        " version INTEGER NOT NULL DEFAULT 1, valid_from REAL NOT NULL DEFAULT 0, valid_to REAL,"
        " chunk_index INTEGER NOT NULL, content TEXT NOT NULL, start_offset INTEGER NOT NULL,"
        " end_offset INTEGER NOT NULL, content_hash TEXT NOT NULL, term_ids BLOB NOT NULL,"
        " tfs BLOB NOT NULL)",
        "INSERT INTO chunks_v3 (key, id, document_id, version, valid_from, valid_to, chunk_index,"
        " content, start_offset, end_offset, content_hash, term_ids, tfs)"
        " SELECT c.key, c.id, c.document_id, 1, d.valid_from, NULL, c.chunk_index, c.content,"
        " c.start_offset, c.end_offset, c.content_hash, c.term_ids, c.tfs"
        " FROM chunks c JOIN documents d ON d.id = c.document_id",
        # Keys only ever grow: the new table continues the old one's sequence.
        "CREATE TEMP TABLE old_chunk_seq AS SELECT seq FROM sqlite_sequence WHERE name = 'chunks'",
        "DROP TABLE chunks",
        "ALTER TABLE chunks_v3 RENAME TO chunks",
        "INSERT INTO sqlite_sequence (name, seq) SELECT 'chunks', 0"
        " WHERE NOT EXISTS (SELECT 1 FROM sqlite_sequence WHERE name = 'chunks')",
        "UPDATE sqlite_sequence SET seq = max(seq, COALESCE((SELECT max(seq) FROM"
        " old_chunk_seq), 0)) WHERE name = 'chunks'",
        "DROP TABLE old_chunk_seq",
        "CREATE UNIQUE INDEX chunks_current_id ON chunks(id) WHERE valid_to IS NULL",
        "CREATE INDEX chunks_past_id ON chunks(id) WHERE valid_to IS NOT NULL",
        "CREATE INDEX chunks_by_document ON chunks(document_id, version)",
        "CREATE INDEX chunks_canonical ON chunks(content_hash, chunk_index, document_id)",
        "CREATE TABLE changes (seq INTEGER PRIMARY KEY AUTOINCREMENT,"
        " generation INTEGER NOT NULL, key INTEGER NOT NULL, valid_to REAL NOT NULL,"
        " term_ids BLOB NOT NULL, tfs BLOB NOT NULL)",
        "CREATE INDEX changes_by_generation ON changes(generation)",
    ),
    4: (
        "ALTER TABLE state ADD COLUMN live_chunks INTEGER NOT NULL DEFAULT 0",
        "UPDATE state SET live_chunks = (SELECT count(*) FROM chunks WHERE valid_to IS NULL)",
        *_LIVE_TRIGGERS,
    ),
}
# The first bytes of every SQLite database file.
_SQLITE_MAGIC = b"SQLite format 3\x00"
_IN_BATCH = 500
# Key lookups up to this size run inline on a read-only connection: a handful of
# primary-key reads in WAL mode (readers never wait for writers) cost less than
# the round trip to aiosqlite's thread, which dominated small-corpus searches.
_INLINE_KEYS = 64
# How long one attempt at a statement waits for SQLite's write lock (ms), inside
# aiosqlite's thread, where neither a cancellation nor a close can reach it.
_BUSY_WAIT_MS = 10_000
# How long a write keeps trying (s): attempts that ran out of ``_BUSY_WAIT_MS`` are
# made again, with cancellable pauses between them. Writers queue for the one write
# lock, each holding it for one batch; on a loaded machine with dozens of writers
# (threads, tasks and processes) the queue took longer than ten seconds. A long wait
# means a long queue, not a stuck holder: a process that dies lets go of the lock.
_WRITE_WAIT_S = 600.0
# How long a cancelled close waits for aiosqlite's thread to end (see _Worker).
_WORKER_WAIT = 10.0
# A snapshot read on a connection of its own is tried again after each of these
# pauses (s) when SQLite reports a transient fault (``_snapshot``): about 1.7 s in all,
# since under 64 concurrent writers on a loaded 2-core machine 0.2 s was once too short
# (a short read beside an erase's VACUUM and truncating checkpoint).
_SNAPSHOT_PAUSES_S = (0.01, 0.04, 0.16, 0.5, 1.0)

_SCHEMA = """
CREATE TABLE IF NOT EXISTS state (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    schema_version INTEGER NOT NULL,
    generation INTEGER NOT NULL DEFAULT 0,
    vectors_generation INTEGER NOT NULL DEFAULT 0,
    base_dir TEXT,
    analyzer TEXT,
    manifest TEXT,
    uid TEXT,
    changes_floor INTEGER NOT NULL DEFAULT 0,
    chunker TEXT,
    live_chunks INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS documents (
    id TEXT PRIMARY KEY,
    source TEXT NOT NULL UNIQUE,
    content_hash TEXT NOT NULL,
    ingested_at TEXT NOT NULL,
    source_class TEXT NOT NULL,
    extractor TEXT,
    metadata TEXT NOT NULL DEFAULT '{}',
    vectors_hash TEXT,
    version INTEGER NOT NULL DEFAULT 1,
    valid_from REAL NOT NULL DEFAULT 0,
    valid_as_of TEXT
);
CREATE TABLE IF NOT EXISTS document_versions (
    document_id TEXT NOT NULL REFERENCES documents(id) ON DELETE CASCADE,
    version INTEGER NOT NULL,
    source TEXT NOT NULL,
    content_hash TEXT NOT NULL,
    ingested_at TEXT NOT NULL,
    source_class TEXT NOT NULL,
    extractor TEXT,
    metadata TEXT NOT NULL DEFAULT '{}',
    valid_from REAL NOT NULL,
    valid_to REAL NOT NULL,
    valid_as_of TEXT,
    PRIMARY KEY (document_id, version)
);
CREATE TABLE IF NOT EXISTS chunks (
    key INTEGER PRIMARY KEY AUTOINCREMENT,
    id TEXT NOT NULL,
    document_id TEXT NOT NULL REFERENCES documents(id) ON DELETE CASCADE,
    version INTEGER NOT NULL DEFAULT 1,
    valid_from REAL NOT NULL DEFAULT 0,
    valid_to REAL,
    chunk_index INTEGER NOT NULL,
    content TEXT NOT NULL,
    start_offset INTEGER NOT NULL,
    end_offset INTEGER NOT NULL,
    content_hash TEXT NOT NULL,
    term_ids BLOB NOT NULL,
    tfs BLOB NOT NULL
);
CREATE UNIQUE INDEX IF NOT EXISTS chunks_current_id ON chunks(id) WHERE valid_to IS NULL;
CREATE INDEX IF NOT EXISTS chunks_past_id ON chunks(id) WHERE valid_to IS NOT NULL;
CREATE INDEX IF NOT EXISTS chunks_by_document ON chunks(document_id, version);
CREATE INDEX IF NOT EXISTS chunks_canonical ON chunks(content_hash, chunk_index, document_id);
CREATE TABLE IF NOT EXISTS changes (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    generation INTEGER NOT NULL,
    key INTEGER NOT NULL,
    valid_to REAL NOT NULL,
    term_ids BLOB NOT NULL,
    tfs BLOB NOT NULL
);
CREATE INDEX IF NOT EXISTS changes_by_generation ON changes(generation);
CREATE TABLE IF NOT EXISTS terms (
    id INTEGER PRIMARY KEY,
    term TEXT NOT NULL UNIQUE
);
"""

# A chunk joined to its own version's document: the current row, or the past version.
_CHUNK_COLUMNS = (
    "c.key, c.id, c.chunk_index, c.content, c.start_offset, c.end_offset, c.document_id,"
    " COALESCE(v.source, d.source), COALESCE(v.content_hash, d.content_hash),"
    " COALESCE(v.ingested_at, d.ingested_at), COALESCE(v.source_class, d.source_class),"
    " CASE WHEN v.document_id IS NULL THEN d.extractor ELSE v.extractor END,"
    " COALESCE(v.metadata, d.metadata), c.version, c.valid_from, c.valid_to"
)
_CHUNKS_JOINED = (
    "chunks c JOIN documents d ON d.id = c.document_id"
    " LEFT JOIN document_versions v ON v.document_id = c.document_id AND v.version = c.version"
)


# Every current chunk in (source, chunk index) order, its document's metadata read with
# its first chunk only (``MetadataCarry`` fills in the rest).
_SCAN_SQL = (
    "SELECT "
    + _CHUNK_COLUMNS.replace(
        "COALESCE(v.metadata, d.metadata)",
        "CASE WHEN c.chunk_index = f.first THEN COALESCE(v.metadata, d.metadata) END",
    )
    + f" FROM {_CHUNKS_JOINED} JOIN (SELECT document_id, version, MIN(chunk_index) AS first"
    " FROM chunks WHERE valid_to IS NULL GROUP BY document_id, version) f"
    " ON f.document_id = c.document_id AND f.version = c.version"
    " WHERE c.valid_to IS NULL ORDER BY d.source, c.chunk_index"
)


# What a search reads of its hits: n rows by key, for each n a search's hits can
# number inline. Each row brings its document's metadata whole, gaps included, and
# ``stored_hit`` leaves the gaps out in Python (no JSON in SQL); long metadata is
# parsed once per process (the memo in ``groundkit.storage._rows``). The plain lookup
# copies a document's metadata once per hit; once a store has met long metadata (a
# PDF's geometry), and for every read of more keys than a search's, the statement
# reads it with the first hit of each document version only (``shared``) and
# ``share_metadata`` hands it to the others, so a batch of one long PDF's rows holds
# one copy, not hundreds (adr/0077-hit-rows.md).
def _hits_sql(n: int, shared: bool = False) -> str:
    marks = ",".join("?" * n)
    if not shared:
        return f"SELECT {_CHUNK_COLUMNS} FROM {_CHUNKS_JOINED} WHERE c.key IN ({marks})"
    once = _CHUNK_COLUMNS.replace(
        "COALESCE(v.metadata, d.metadata)",
        "CASE WHEN c.key = f.first THEN COALESCE(v.metadata, d.metadata) END",
    )
    return (
        f"SELECT {once} FROM {_CHUNKS_JOINED} JOIN (SELECT document_id, version,"
        f" MIN(key) AS first FROM chunks WHERE key IN ({marks}) GROUP BY document_id, version)"
        f" f ON f.document_id = c.document_id AND f.version = c.version WHERE c.key IN ({marks})"
    )


_HITS_BY_KEY = {
    shared: [_hits_sql(n, shared) for n in range(_INLINE_KEYS + 1)] for shared in (False, True)
}
_POSTING_COLUMNS = (
    "key, term_ids, tfs, content_hash, chunk_index, document_id, valid_from, valid_to"
)
# A document row as ``document_record`` reads it (``{}``: the condition on ``d``).
_DOCUMENT_WHERE = (
    "SELECT d.id, d.source, d.content_hash, d.ingested_at, d.source_class, d.extractor,"
    " d.metadata, (SELECT COUNT(*) FROM chunks c WHERE c.document_id = d.id"
    " AND c.valid_to IS NULL), d.version,"
    " (SELECT COUNT(*) FROM document_versions v WHERE v.document_id = d.id)"
    " FROM documents d WHERE {}"
)
# The term no text is analysed into, kept at the largest id ever handed out once an
# erase removed terms: ids are never handed out twice, and a process whose cached
# vocabulary predates an erase sees the marker's id change (adr/0053-erasure.md).
_MARKER = ""


class _Worker:
    """aiosqlite's thread for one connection, and the connection it runs on.

    aiosqlite runs every call on a thread of its own and hands the result back
    through the event loop. Cancelling an await does not stop the call: when the
    thread finishes after the loop has closed (``asyncio.run`` returning, a
    server stopping mid-request) it dies with "Event loop is closed" on stderr.
    A close that is cancelled therefore stops the thread and waits for it
    (``finish``), outside the loop, before the cancellation goes on.

    A store nobody closes must not keep the process alive either (adr/0049). The
    thread is a daemon, so the interpreter never waits for it at exit, and the
    connection is closed without an event loop (``release``) when the store is
    garbage-collected, or at exit when the loop it was opened on has ended: what
    was committed is in the file either way, and a clean close also folds the WAL
    back into it.
    """

    def __init__(self, raw: sqlite3.Connection) -> None:
        self.raw = raw
        self._thread: threading.Thread | None = None
        self._started = threading.Event()
        # The event loop the store was opened on and its aiosqlite connection, while
        # open (set by ``attach``), and the store's read-only connection, once made.
        self.loop: asyncio.AbstractEventLoop | None = None
        self._conn: aiosqlite.Connection | None = None
        self.reader: sqlite3.Connection | None = None
        self._done = False
        self._pid = os.getpid()

    def attach(self, conn: aiosqlite.Connection) -> None:
        """Before ``conn`` starts its thread: make the thread a daemon, note the loop."""
        # aiosqlite makes the thread in its constructor and starts it on the first
        # await, with no option for a daemon: the flag is set here, in between.
        thread = getattr(conn, "_thread", None)
        if isinstance(thread, threading.Thread) and not thread.is_alive():
            thread.daemon = True
        self.loop = asyncio.get_running_loop()
        self._conn = conn
        _OPEN_WORKERS.add(self)

    def connect(self) -> sqlite3.Connection:
        """aiosqlite's connector: runs on the worker thread, so it learns which one that is."""
        self._thread = threading.current_thread()
        self._started.set()
        return self.raw

    def closed(self) -> None:
        """The connection is closed (or being closed): nothing is left to release."""
        self._done = True
        self._conn = None
        _OPEN_WORKERS.discard(self)

    def finish(self, conn: aiosqlite.Connection) -> None:
        """Stop ``conn``'s thread and wait until it has ended (blocking, bounded)."""
        self.closed()
        with contextlib.suppress(sqlite3.Error):
            self.raw.interrupt()  # a long read ends now, not when it is done
        conn.stop()  # queued behind what the thread still has to do
        self._wait(time.monotonic() + _WORKER_WAIT)

    def abandoned(self) -> bool:
        """Whether the loop the store was opened on has ended (closed, or not running)."""
        loop = self.loop
        return loop is None or loop.is_closed() or not loop.is_running()

    def release(self) -> None:
        """Close a store nobody closed, without an event loop (garbage collection, exit).
        Blocking, bounded; does nothing once the connection is closed."""
        if self._stop():
            self._wait(time.monotonic() + _WORKER_WAIT)

    def _stop(self) -> bool:
        """Queue the thread's stop, which closes the connection; False if already closed."""
        if self._done:
            return False
        conn = self._conn
        self.closed()
        if os.getpid() != self._pid:
            return False  # a forked child's copy: the connection is the parent's
        reader, self.reader = self.reader, None
        if reader is not None:
            with contextlib.suppress(sqlite3.Error):
                reader.close()
        if conn is not None:
            _stop_outside_loop(conn)
        return True

    def _wait(self, deadline: float) -> None:
        """Wait (until ``deadline``) for the thread to end, then close the connection."""
        if self._thread is threading.current_thread():
            return  # collected on the thread itself: it closes the connection as it stops
        if self._started.wait(max(0.0, deadline - time.monotonic())) and self._thread:
            self._thread.join(max(0.0, deadline - time.monotonic()))
            if self._thread.is_alive():
                return  # still inside a statement: the connection is not ours to close
        with contextlib.suppress(sqlite3.Error):
            self.raw.close()


def _stop_outside_loop(conn: aiosqlite.Connection) -> None:
    """``conn.stop()``, called from a thread that has no event loop.

    ``stop`` asks ``asyncio.get_event_loop()`` for a future to report on. Where a
    store is left behind that answer is wrong: the thread that ran it may still hold
    its closed loop (the worker then dies with "Event loop is closed"), and a main
    thread that never had a loop gets a new one made for the asking, never closed.
    In a thread of its own there is no loop and aiosqlite reports to no one.
    """
    helper = threading.Thread(target=conn.stop, name="groundkit-sqlite-stop", daemon=True)
    try:
        helper.start()
    except RuntimeError:  # no new threads this late in the interpreter's life
        conn.stop()
        return
    helper.join()


# Workers whose connection is open; the exit hook releases those left behind.
_OPEN_WORKERS: weakref.WeakSet[_Worker] = weakref.WeakSet()


def _release_abandoned() -> None:
    """At exit: close every store nobody closed whose event loop has ended (bounded in
    all). A store whose loop still runs belongs to a daemon thread; it is left alone."""
    stopping = [w for w in list(_OPEN_WORKERS) if w.abandoned() and w._stop()]
    deadline = time.monotonic() + _WORKER_WAIT
    for worker in stopping:
        worker._wait(deadline)


# After non-daemon threads are joined: a thread still running then may yet close its
# collection itself. The worker threads are daemons, so nothing waits on them before.
atexit.register(_release_abandoned)


async def _close_connection(conn: aiosqlite.Connection, worker: _Worker | None) -> None:
    """``conn.close()``, finished off by ``worker.finish`` if the close is cancelled."""
    try:
        await conn.close()
    except asyncio.CancelledError:
        if worker is not None:
            worker.finish(conn)
        raise
    finally:
        if worker is not None:
            worker.closed()


_Method = TypeVar("_Method", bound=Callable[..., Awaitable[Any]])
_R = TypeVar("_R")


def _serialized(method: _Method) -> _Method:
    """Run a writing method under the store's write lock (see ``_writing``), and
    again while SQLite refuses it as busy, for up to ``_WRITE_WAIT_S``.

    Each attempt waits for the write lock up to ``_BUSY_WAIT_MS`` inside SQLite. One
    case fails at once instead: this connection still reads an older snapshot
    (another coroutine's query, between two of its fetches) and another process has
    committed since; waiting inside the transaction cannot help there. Either way the
    transaction was rolled back, so it is run again after a pause (where a
    cancellation lands), once the reader has moved on or the queue has.
    """

    @functools.wraps(method)
    async def run(self: SQLiteMetadataStore, *args: Any, **kwargs: Any) -> Any:
        self.refuse_writes()
        deadline = time.monotonic() + _WRITE_WAIT_S
        pause = 0.005
        while True:
            async with self._writing:
                try:
                    return await method(self, *args, **kwargs)
                except (StorageError, sqlite3.OperationalError) as exc:
                    if not _busy(exc) or time.monotonic() > deadline:
                        raise
            await asyncio.sleep(pause * (0.5 + random.random()))
            pause = min(pause * 2, 0.5)

    return run  # type: ignore[return-value]


def _busy(exc: BaseException) -> bool:
    """Whether ``exc`` (the driver's error, or a ``StorageError`` raised while handling
    one) comes from SQLite finding the database busy or locked."""
    cause = exc if isinstance(exc, sqlite3.OperationalError) else exc.__context__
    return _primary_code(cause) in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED)


def _primary_code(exc: BaseException | None) -> int | None:
    """SQLite's primary result code of an ``OperationalError`` (extended codes share
    its low byte); None for anything else."""
    code = getattr(exc, "sqlite_errorcode", None)
    if not isinstance(exc, sqlite3.OperationalError) or not isinstance(code, int):
        return None
    return code & 0xFF


class SQLiteMetadataStore:
    """``MetadataStoreProtocol`` on one SQLite file; create with ``await .open(path)``."""

    def __init__(
        self,
        conn: aiosqlite.Connection,
        path: Path,
        *,
        worker: _Worker | None = None,
        media: _Media | None = None,
    ) -> None:
        self._db: aiosqlite.Connection | None = conn
        self._worker = worker
        self.path = path
        self._vocab: dict[str, int] | None = None
        # The erase marker's id when ``_vocab`` was read (see ``_MARKER``).
        self._vocab_marker: int | None = None
        self._reader: sqlite3.Connection | None = None
        # Whether a hit read has met a document's long metadata (``_hits_sql``).
        self._long_metadata = False
        # One write transaction at a time on the shared connection: coroutines of one
        # process (an ingest and a background merge pruning the change log) would
        # otherwise interleave their BEGIN and COMMIT.
        self._writing = asyncio.Lock()
        # The file this store opened (device, inode): a write checks the path still
        # names it (``_begin_write``).
        self._file: tuple[int, int] | None = None
        # What opening had to repair (``open(rebuild_damaged=True)``), for the next report.
        self.repairs: list[str] = []
        # Opened on a read-only filesystem (``_Media``): never written; None for a store
        # opened the usual way. Every connection of its own reads through ``_read_uri``.
        self.media = media
        self._read_uri = f"{path.resolve().as_uri()}?mode=ro" if media is None else media.uri
        # Garbage-collected without ``close``: the connection is closed without a loop.
        if worker is not None:
            weakref.finalize(self, worker.release).atexit = False

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
                raise CollectionNotFoundError(
                    f"no collection at {str(path)!r}; ingest something first"
                )
            await _to_thread_to_the_end(_create_file, path)
        media = _Media.of(path)  # a statvfs, and a stat on read-only media: inline
        before: tuple[int, int] | None = None
        with contextlib.suppress(OSError):
            before = _file_identity(path)
        try:
            # Connected here rather than by aiosqlite: when its connect fails it
            # stops its thread without waiting for it, and a thread that ends after
            # the event loop has closed prints a traceback. Handing aiosqlite a
            # connection that is already open cannot fail.
            # ``mode=rw``: a file removed since it was found (a drop in another process)
            # must not be made again, empty, by SQLite's create-if-missing open.
            raw = await asyncio.to_thread(
                sqlite3.connect,
                f"{path.absolute().as_uri()}?mode=rw" if media is None else media.uri,
                isolation_level=None,
                check_same_thread=False,
                uri=True,
            )
        except (OSError, sqlite3.Error) as exc:
            if not await asyncio.to_thread(os.path.lexists, path):
                raise CollectionNotFoundError(
                    f"no collection at {str(path)!r}: it was removed as it was opened"
                ) from None
            raise StorageError(f"cannot open {str(path)!r}: {exc}") from None
        worker = _Worker(raw)
        conn = aiosqlite.Connection(worker.connect, iter_chunk_size=64)
        worker.attach(conn)
        try:
            await conn
        except BaseException:  # cancelled: aiosqlite has already told its thread to stop
            worker.finish(conn)
            raise
        store = cls(conn, path, worker=worker, media=media)
        with contextlib.suppress(OSError):  # not looked at: writes are not compared
            # Looked at before and after connecting: a file removed or replaced in
            # between (a drop in another process) leaves ``replaced()`` true.
            after = _file_identity(path)
            store._file = after if before is None or after == before else before
        try:
            await store._prepare()
            if check:
                await store._integrity_check()
        except BaseException as exc:
            await _close_connection(conn, worker)
            if isinstance(exc, StorageError) and store.replaced():
                raise StoreReplacedError(path, str(exc)) from None
            raise
        return store

    async def _begin_write(self) -> None:
        """Begin a write transaction on the file this store opened, or refuse.

        Another process may remove a collection it created and never wrote to (or a
        user may drop or replace it) while this one has it open: SQLite would go on
        writing into the removed file, and the write would be lost without a word. So
        once the write lock is held (the remover holds it while it removes), the path
        must still name the file opened; otherwise the transaction is rolled back and
        the write refused."""
        await self._conn.execute("BEGIN IMMEDIATE")
        if self._file is None:
            return
        try:
            current = _file_identity(self.path)  # one stat: inline, as SQLite's own are
        except OSError:  # cannot be looked at now: the write goes ahead, as before
            return
        if current != self._file:
            await self._conn.execute("ROLLBACK")
            raise StorageError(
                f"{str(self.path)!r} was removed or replaced since this process opened it "
                "(another process dropped the collection, or removed it unused): nothing "
                "was written; open the collection again"
            )

    async def _integrity_check(self) -> None:
        """SQLite's ``quick_check`` (every page read once): ``_DamagedFile`` on failure."""
        try:
            async with self._conn.execute("PRAGMA quick_check") as cur:
                rows = [row[0] async for row in cur]
        except sqlite3.DatabaseError as exc:
            full = _no_space(self.path.parent, exc)
            if full is not None:  # not damage: nothing to move aside
                raise StorageError(_unopenable(self.path, full)) from None
            raise _DamagedFile(self.path, f"the integrity check failed: {exc}") from None
        if rows != ["ok"]:
            raise _DamagedFile(self.path, "the integrity check found damaged pages")

    async def _prepare(self) -> None:
        try:
            await self._conn.execute(f"PRAGMA busy_timeout={_BUSY_WAIT_MS}")
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
            if self.media is None:
                await self._conn.execute("PRAGMA journal_mode=WAL")
                await self._conn.execute("PRAGMA synchronous=NORMAL")
            await self._conn.execute("PRAGMA foreign_keys=ON")
            found = await self._schema_version()
            if found != SCHEMA_VERSION:
                if self.media is not None and found < SCHEMA_VERSION:
                    raise StorageError(
                        f"{str(self.path)!r} was written by an older groundkit and is on a "
                        "read-only filesystem, where it cannot be brought up to date: open it "
                        "once on writable storage (any command does it), then mount it again"
                    )
                await self._migrate(found)
        except sqlite3.DatabaseError as exc:
            unwritable = _unwritable(self.path.parent, exc)
            if unwritable is not None:  # not damage: nothing to move aside
                raise StorageError(_unopenable(self.path, unwritable)) from None
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
            rebuilt = version < 3
            if rebuilt:
                # Rebuilding a table that others reference needs the checks off.
                await self._conn.execute("PRAGMA defer_foreign_keys=ON")
            while version < SCHEMA_VERSION:
                for statement in _MIGRATIONS[version]:
                    await self._conn.execute(statement)
                version += 1
                await self._conn.execute(
                    "UPDATE state SET schema_version = ? WHERE id = 1", (version,)
                )
            await self._conn.execute("COMMIT")
        except BaseException:
            await self._rollback()
            raise
        if rebuilt:
            await self._compact()

    async def _compact(self) -> None:
        """Give back the pages a rebuilt table left free (the old chunk table: about as
        large as the new one). Best effort: a reader of another process holding the
        file only leaves the pages free, for later writes to reuse."""
        try:
            await self._conn.execute("VACUUM")
        except sqlite3.OperationalError as exc:
            logger.info("left %s uncompacted after its migration: %s", self.path.name, exc)

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
            if self._worker is not None:
                self._worker.reader = None
        db, self._db = self._db, None
        if db is not None:
            await _close_connection(db, self._worker)

    def replaced(self) -> bool:
        """Whether the path no longer names the file this store opened: the collection
        was dropped, or dropped and made again, since. Its reads still come from the
        removed file, so a long-lived reader (the server) opens it again by name. One
        stat; False when the file cannot be looked at. On a read-only filesystem, also
        whether the file read as immutable was written through another mount since."""
        if self.media is not None and self.media.changed(self.path):
            return True
        if self._file is None:
            return False
        try:
            return _file_identity(self.path) != self._file
        except OSError:
            return False

    def refuse_writes(self) -> None:
        """A write to a store on a read-only filesystem: refused before anything starts."""
        if self.media is not None:
            raise StorageError(
                f"{str(self.path)!r} is {_READ_ONLY_FS}: the collection can be searched and "
                "its citations checked there, not written; copy the index directory to "
                "writable storage to change it"
            )

    def _check_media(self, media: _Media) -> None:
        """Before a search of an immutable file: it must still be the file opened."""
        if media.changed(self.path):
            raise StorageError(
                f"{str(self.path)!r} changed since this process opened it read-only (it was "
                "written through another mount): open the collection again"
            )

    def _open_conn_check(self) -> None:
        if self._db is None:
            raise StorageError(f"the metadata store {self.path.name!r} is closed")

    def _read_inline(self, sql: str, params: Sequence[Any]) -> list[Any] | None:
        """Run a small read on the read-only connection; None if it would have to wait."""
        if self._db is None:
            raise StorageError(f"the metadata store {self.path.name!r} is closed")
        if self._reader is None:
            self._reader = sqlite3.connect(self._read_uri, uri=True, check_same_thread=False)
            self._reader.execute("PRAGMA busy_timeout=0")
            if self._worker is not None:
                self._worker.reader = self._reader  # closed with the store if it is left
        try:
            return self._reader.execute(sql, params).fetchall()
        except sqlite3.OperationalError:
            return None  # busy or locked: take the threaded path instead

    async def _read(self, sql: str, params: Sequence[Any], *, inline: bool) -> list[Any]:
        """Rows of a read: inline on the read-only connection when ``inline`` and it
        need not wait, else on the store's thread."""
        rows = self._read_inline(sql, params) if inline else None
        if rows is None:
            rows = list(await self._conn.execute_fetchall(sql, params))
        return rows

    # -- state ---------------------------------------------------------------

    async def _state(self, column: str) -> Any:
        async with self._conn.execute(f"SELECT {column} FROM state WHERE id = 1") as cur:
            row = await cur.fetchone()
        return row[0] if row else None

    async def generation(self) -> int:
        # Checked before every Collection search, so it takes the inline path.
        if self.media is not None:  # read-only media: one stat (ADR 0089)
            self._check_media(self.media)
        rows = self._read_inline("SELECT generation FROM state WHERE id = 1", ())
        if rows is None:
            return int_value(await self._state("generation"), "generation", self.path.name)
        value = rows[0][0]
        if type(value) is int and value >= 0:
            return value
        return int_value(value, "generation", self.path.name)

    async def generations(self) -> Generations:
        sql = "SELECT generation, vectors_generation FROM state WHERE id = 1"
        if self.media is not None:  # read-only media: one stat (ADR 0089)
            self._check_media(self.media)
        rows = self._read_inline(sql, ())
        if rows is None:
            async with self._conn.execute(sql) as cur:
                rows = [await cur.fetchone()]
        return generations_row(rows[0], self.path.name)

    async def get_base_dir(self) -> str | None:
        return optional_text(await self._state("base_dir"), "base directory", self.path.name)

    @_serialized
    async def set_base_dir(self, base_dir: str) -> None:
        await self._conn.execute("UPDATE state SET base_dir = ? WHERE id = 1", (base_dir,))

    async def get_analyzer(self) -> str | None:
        return optional_text(await self._state("analyzer"), "analyzer", self.path.name)

    async def get_chunker(self) -> str | None:
        return optional_text(await self._state("chunker"), "chunker", self.path.name)

    @_serialized
    async def bind_chunker(self, identity: str) -> str:
        """Bind the collection to the chunker ``identity`` unless bound; returns the bound one."""
        return await self._bind("chunker", identity)

    @_serialized
    async def bind_analyzer(self, identity: str) -> str:
        """Bind the collection to ``identity`` unless bound; returns the bound identity."""
        return await self._bind("analyzer", identity)

    async def _bind(self, column: str, identity: str) -> str:
        """Compare-and-set one binding column of ``state`` (``column`` is ours, not input)."""
        bound = await self._state(column)
        if bound is not None:  # a binding never changes: no write lock to queue for
            return str(bound)
        await self._begin_write()
        try:
            current = await self._state(column)
            if current is None:
                await self._conn.execute(f"UPDATE state SET {column} = ? WHERE id = 1", (identity,))
                current = identity
            await self._conn.execute("COMMIT")
        except BaseException:
            await self._conn.execute("ROLLBACK")
            raise
        return str(current)

    async def read_manifest(self) -> CollectionManifest | None:
        return manifest_value(await self._state("manifest"), self.path.name)

    @_serialized
    async def bind_embedding(self, identity: EmbeddingIdentity) -> CollectionManifest:
        """Bind the collection to ``identity`` unless bound; returns the bound manifest."""
        bound = await self.read_manifest()
        if bound is not None:  # a binding never changes: no write lock to queue for
            return bound
        await self._begin_write()
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

    async def document_states(
        self, *, sources: Sequence[str] | None = None, under: str | None = None
    ) -> dict[str, DocumentState]:
        sql = "SELECT source, content_hash, source_class, extractor, metadata FROM documents"
        if sources is None and under is None:
            async with self._conn.execute(sql) as cur:
                return {row[0]: document_state(row) async for row in cur}
        out: dict[str, DocumentState] = {}
        if under is not None:
            # Byte order (BINARY): everything from "dir/" up to "dir0" lies under "dir".
            low, high = prefix_range(under)
            async with self._conn.execute(
                f"{sql} WHERE source = ? OR (source > ? AND source < ?)", (under, low, high)
            ) as cur:
                out.update({row[0]: document_state(row) async for row in cur})
        wanted = [s for s in dict.fromkeys(sources or ()) if s not in out]
        for start in range(0, len(wanted), _IN_BATCH):
            part = wanted[start : start + _IN_BATCH]
            marks = ", ".join("?" * len(part))
            async with self._conn.execute(f"{sql} WHERE source IN ({marks})", part) as cur:
                out.update({row[0]: document_state(row) async for row in cur})
        return out

    async def iter_documents(self) -> AsyncIterator[DocumentRecord]:
        async with self._conn.execute(
            "SELECT d.id, d.source, d.content_hash, d.ingested_at, d.source_class, d.extractor,"
            " d.metadata, (SELECT COUNT(*) FROM chunks c WHERE c.document_id = d.id"
            " AND c.valid_to IS NULL), d.version,"
            " (SELECT COUNT(*) FROM document_versions v WHERE v.document_id = d.id)"
            " FROM documents d ORDER BY d.source"
        ) as cur:
            async for row in cur:
                yield document_record(row, row[7], row[8], row[9])

    async def _term_ids(self, terms: set[str]) -> dict[str, int]:
        """Ids for ``terms``, creating missing ones (inside the caller's transaction)."""
        marker = await self._marker()
        if self._vocab is None or marker != self._vocab_marker:
            # Read anew after an erase (of any process): an erased term's cached id
            # must not be written again.
            self._vocab = await self.vocabulary()
            self._vocab_marker = marker
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

    @_serialized
    async def replace_documents(
        self,
        items: WriteItems,
        *,
        valid_as_of: datetime | None = None,
        keep_versions: int | None = None,
    ) -> frozenset[str]:
        """Store several documents in one transaction (one generation bump).

        A document already stored under its source becomes a past version (see
        ``MetadataStoreProtocol.replace_documents``). A transaction per document
        cost about eight round trips to aiosqlite's thread each; bulk ingest spent
        more time on those hops than on SQLite, so the work is done in batches.
        """
        if not items:
            return frozenset()
        sources, counts = term_counts(items)
        check_storable(items, nul_allowed=True)
        check_keep(keep_versions)
        version_start(valid_as_of, time.time())  # a bad valid_as_of is refused before waiting
        vocab_before = None if self._vocab is None else dict(self._vocab)
        try:
            await self._begin_write()
            # Taken under the write lock: a writer that waited for it starts its version
            # after the one committed meanwhile, not before it.
            now = write_moment(time.time())  # also ``ingested_at``: see ``write_moment``
            start = version_start(valid_as_of, now)
            same = stored_already(
                items,
                await self._rows_in(
                    f"SELECT {STORED_ALREADY_COLUMNS} FROM documents WHERE source IN ({{}})",
                    sources,
                ),
            )
            if same:
                items = [item for item in items if item[0].source not in same]
                if not items:
                    await self._conn.execute("ROLLBACK")
                    return frozenset(same)
                sources, counts = term_counts(items)
            generation = await self._bump_generation()
            vocab = await self._term_ids({t for group in counts for c in group for t in c})
            existing = await self._rows_in(
                "SELECT id, source, version, valid_from FROM documents WHERE source IN ({})",
                sources,
            )
            plan = plan_versions(items, existing, start)
            if plan.foreign:
                await self._log_and_delete_documents(plan.foreign, generation)
            if plan.next_version:
                await self._retire(list(plan.next_version), start, generation, keep_versions)
            stamp = iso_time(now)
            as_of = None if valid_as_of is None else iso_time(start)
            rows = document_rows(items, stamp)
            fresh = [r for r in rows if r[0] not in plan.next_version]
            if fresh:
                await self._conn.executemany(
                    "INSERT INTO documents (id, source, content_hash, ingested_at, source_class,"
                    " extractor, metadata, version, valid_from, valid_as_of)"
                    " VALUES (?, ?, ?, ?, ?, ?, ?, 1, ?, ?)",
                    [(*row, start, as_of) for row in fresh],
                )
            updated = [r for r in rows if r[0] in plan.next_version]
            if updated:
                await self._conn.executemany(
                    "UPDATE documents SET content_hash = ?, ingested_at = ?, source_class = ?,"
                    " extractor = ?, metadata = ?, vectors_hash = NULL, version = ?,"
                    " valid_from = ?, valid_as_of = ? WHERE id = ?",
                    [
                        (*row[2:7], plan.next_version[row[0]], start, as_of, row[0])
                        for row in updated
                    ],
                )
            await self._conn.executemany(
                "INSERT INTO chunks (id, document_id, chunk_index, content, start_offset,"
                " end_offset, content_hash, term_ids, tfs, version, valid_from)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [
                    (*row, plan.next_version.get(row[1], 1), start)
                    for row in chunk_rows(items, counts, vocab)
                ],
            )
            await self._conn.execute("COMMIT")
            return frozenset(same)
        except BaseException as exc:
            await self._rollback()
            self._vocab = vocab_before  # ids handed out inside the transaction are void
            if isinstance(exc, sqlite3.Error):
                what = repr(sources[0]) if len(sources) == 1 else f"{len(sources)} documents"
                raise StorageError(f"could not store {what}: {exc}") from None
            raise

    async def _bump_generation(self) -> int:
        await self._conn.execute("UPDATE state SET generation = generation + 1 WHERE id = 1")
        return int(await self._state("generation"))

    async def _rows_in(self, sql: str, values: Sequence[Any]) -> list[Any]:
        """``sql`` with ``{}`` filled by placeholders for ``values``, in batches."""
        out: list[Any] = []
        for i in range(0, len(values), _IN_BATCH):
            part = list(values[i : i + _IN_BATCH])
            marks = ",".join("?" * len(part))
            out.extend(await self._conn.execute_fetchall(sql.format(marks), part))
        return out

    async def _run_in(self, sql: str, values: Sequence[Any], *before: Any) -> int:
        """Execute ``sql`` (``{}`` = placeholders for a batch of ``values``, after the
        parameters ``before``) batch by batch; returns the rows changed."""
        changed = 0
        for i in range(0, len(values), _IN_BATCH):
            part = list(values[i : i + _IN_BATCH])
            marks = ",".join("?" * len(part))
            cur = await self._conn.execute(sql.format(marks), [*before, *part])
            changed += max(cur.rowcount, 0)
            await cur.close()
        return changed

    async def _log(self, generation: int, valid_to: float, where: str, *params: Any) -> None:
        """Record in the change log that the chunks matching ``where`` leave the
        current view at ``valid_to`` (``REMOVED``: they are gone)."""
        await self._conn.execute(
            "INSERT INTO changes (generation, key, valid_to, term_ids, tfs)"
            f" SELECT ?, key, ?, term_ids, tfs FROM chunks WHERE {where}",
            (generation, valid_to, *params),
        )

    async def _log_in(
        self, generation: int, valid_to: float, where: str, ids: Sequence[str]
    ) -> None:
        """``_log`` for ``where`` holding ``{}`` for a batch of document ids."""
        for i in range(0, len(ids), _IN_BATCH):
            part = list(ids[i : i + _IN_BATCH])
            await self._log(generation, valid_to, where.format(",".join("?" * len(part))), *part)

    async def _retire(
        self, ids: list[str], start: float, generation: int, keep_versions: int | None
    ) -> None:
        """Make the current version of each of ``ids`` a past one ending at ``start``
        (or remove it when no past versions are kept), logging every chunk affected."""
        current = "valid_to IS NULL AND document_id IN ({})"
        if keep_versions == 0:
            await self._log_in(generation, REMOVED, current, ids)
            await self._run_in(f"DELETE FROM chunks WHERE {current}", ids)
            # Keeping none means none: past versions an earlier write kept go too.
            await self._keep_newest(ids, 0, generation)
            return
        await self._log_in(generation, start, current, ids)
        await self._run_in(
            "INSERT INTO document_versions (document_id, version, source, content_hash,"
            " ingested_at, source_class, extractor, metadata, valid_from, valid_to, valid_as_of)"
            " SELECT id, version, source, content_hash, ingested_at, source_class, extractor,"
            " metadata, valid_from, ?, valid_as_of FROM documents WHERE id IN ({})",
            ids,
            start,
        )
        await self._run_in(f"UPDATE chunks SET valid_to = ? WHERE {current}", ids, start)
        if keep_versions is not None:
            await self._keep_newest(ids, keep_versions, generation)

    async def _keep_newest(self, ids: list[str], keep: int, generation: int) -> int:
        """Remove the past versions of ``ids`` beyond the ``keep`` newest; returns how many."""
        rows = await self._rows_in(
            "SELECT document_id, version FROM document_versions WHERE document_id IN ({})"
            " ORDER BY document_id, version DESC",
            ids,
        )
        seen: dict[str, int] = {}
        doomed: list[tuple[str, int]] = []
        for document_id, version in rows:
            seen[document_id] = seen.get(document_id, 0) + 1
            if seen[document_id] > keep:
                doomed.append((document_id, int(version)))
        for document_id, version in doomed:
            await self._log(
                generation, REMOVED, "document_id = ? AND version = ?", document_id, version
            )
        await self._conn.executemany(
            "DELETE FROM chunks WHERE document_id = ? AND version = ?", doomed
        )
        await self._conn.executemany(
            "DELETE FROM document_versions WHERE document_id = ? AND version = ?", doomed
        )
        return len(doomed)

    async def _log_and_delete_documents(self, ids: list[str], generation: int) -> int:
        """Remove documents with every version and chunk, logging each chunk."""
        await self._log_in(generation, REMOVED, "document_id IN ({})", ids)
        return await self._run_in("DELETE FROM documents WHERE id IN ({})", ids)

    async def _rollback(self) -> None:
        if self._conn.in_transaction:
            await self._conn.execute("ROLLBACK")

    @_serialized
    async def delete_documents(self, sources: Sequence[str]) -> frozenset[str]:
        if not sources:
            return frozenset()
        try:
            await self._begin_write()
            rows = await self._rows_in(
                "SELECT id, source FROM documents WHERE source IN ({})", list(sources)
            )
            if rows:
                generation = await self._bump_generation()
                await self._log_and_delete_documents([row[0] for row in rows], generation)
            await self._conn.execute("COMMIT")
        except BaseException as exc:
            await self._rollback()
            if isinstance(exc, sqlite3.Error):
                raise StorageError(f"could not delete documents: {exc}") from None
            raise
        return frozenset(row[1] for row in rows)

    @_serialized
    async def purge_versions(self, keep: int) -> int:
        check_keep(keep)
        try:
            await self._begin_write()
            ids = [
                row[0]
                for row in await self._conn.execute_fetchall(
                    "SELECT DISTINCT document_id FROM document_versions"
                )
            ]
            purged = 0
            if ids:
                generation = await self._bump_generation()
                purged = await self._keep_newest(ids, keep, generation)
                if not purged:
                    await self._conn.execute(
                        "UPDATE state SET generation = generation - 1 WHERE id = 1"
                    )
            await self._conn.execute("COMMIT")
        except BaseException as exc:
            await self._rollback()
            if isinstance(exc, sqlite3.Error):
                raise StorageError(f"could not purge versions: {exc}") from None
            raise
        return purged

    async def find_documents(
        self, *, document_ids: Sequence[str] = (), sources: Sequence[str] = ()
    ) -> list[DocumentRecord]:
        found: dict[str, DocumentRecord] = {}
        for column, values in (("d.id", document_ids), ("d.source", sources)):
            rows = await self._rows_in(
                _DOCUMENT_WHERE.format(f"{column} IN ({{}})"), list(dict.fromkeys(values))
            )
            for row in rows:
                found[row[0]] = document_record(row, row[7], row[8], row[9])
        return sorted(found.values(), key=lambda record: record.source)

    @_serialized
    async def erase_documents(self, sources: Sequence[str]) -> ErasedRows:
        """``delete_documents`` and the sweep of unused terms in one transaction, with
        SQLite's secure delete on: the pages they free are zeroed (``compact`` then
        rewrites the file and empties the WAL)."""
        async with self._conn.execute("PRAGMA secure_delete") as cur:
            row = await cur.fetchone()
        secure = int(row[0]) if row else 0
        await self._conn.execute("PRAGMA secure_delete=ON")
        try:
            await self._begin_write()
            ids = [
                row[0]
                for row in await self._rows_in(
                    "SELECT id FROM documents WHERE source IN ({})", list(dict.fromkeys(sources))
                )
            ]
            documents = versions = chunks = 0
            if ids:
                versions = await self._count_in("document_versions", ids)
                chunks = await self._count_in("chunks", ids)
                generation = await self._bump_generation()
                documents = await self._log_and_delete_documents(ids, generation)
            terms = await self._drop_unused_terms()
            await self._conn.execute("COMMIT")
        except BaseException as exc:
            await self._rollback()
            if isinstance(exc, sqlite3.Error):
                raise StorageError(f"could not erase documents: {exc}") from None
            raise
        finally:
            await self._conn.execute(f"PRAGMA secure_delete={secure}")
        self._vocab = None
        return ErasedRows(documents=documents, versions=versions, chunks=chunks, terms=terms)

    async def _count_in(self, table: str, ids: Sequence[str]) -> int:
        """Rows of ``table`` (ours, not input) belonging to the documents ``ids``."""
        rows = await self._rows_in(
            f"SELECT COUNT(*) FROM {table} WHERE document_id IN ({{}})", list(ids)
        )
        return sum(int(row[0]) for row in rows)

    async def _marker(self) -> int | None:
        async with self._conn.execute("SELECT id FROM terms WHERE term = ?", (_MARKER,)) as cur:
            row = await cur.fetchone()
        return None if row is None else int(row[0])

    async def _drop_unused_terms(self) -> int:
        """Delete every term no chunk row uses (inside the caller's transaction); returns
        how many went. The erase marker then moves above every id ever handed out."""
        async with self._conn.execute("SELECT MAX(id) FROM terms") as cur:
            row = await cur.fetchone()
        if row is None or row[0] is None:
            return 0
        top = int(row[0])
        used = np.zeros(top + 1, dtype=bool)
        async with self._conn.execute("SELECT term_ids FROM chunks") as cur:
            while rows := await cur.fetchmany(20_000):
                ids = np.frombuffer(b"".join(r[0] for r in rows), dtype="<i4")
                used[ids[(ids >= 0) & (ids <= top)]] = True
        marker = await self._marker()
        unused = [
            int(term_id)
            for (term_id,) in await self._conn.execute_fetchall("SELECT id FROM terms")
            if not used[term_id] and term_id != marker
        ]
        if not unused:
            return 0
        await self._run_in("DELETE FROM terms WHERE id IN ({})", unused)
        await self._conn.execute("DELETE FROM terms WHERE term = ?", (_MARKER,))
        await self._conn.execute("INSERT INTO terms (id, term) VALUES (?, ?)", (top + 1, _MARKER))
        return len(unused)

    @_serialized
    async def compact(self) -> Compaction:
        """VACUUM (the file rebuilt without free pages), then a TRUNCATE checkpoint
        (the WAL folded in and cut to nothing). A reader of another process holding an
        old snapshot keeps the WAL from being emptied: ``unfinished`` says so."""
        before = await asyncio.to_thread(_file_bytes, self.path)
        unfinished: list[str] = []
        try:
            await self._conn.execute("VACUUM")
        except sqlite3.OperationalError as exc:
            unfinished.append(f"the metadata file could not be rebuilt ({exc})")
        async with self._conn.execute("PRAGMA wal_checkpoint(TRUNCATE)") as cur:
            row = await cur.fetchone()
        if row is None or row[0] != 0:
            unfinished.append(
                "another process is reading the metadata file, so its write-ahead log "
                "could not be emptied"
            )
        after = await asyncio.to_thread(_file_bytes, self.path)
        return Compaction(
            bytes_reclaimed=max(0, before - after), unfinished="; ".join(unfinished) or None
        )

    async def collection_uid(self) -> str:
        value = await self._state("uid")
        return text_value(value, "collection uid", self.path.name)

    async def term_ids(self, terms: Sequence[str]) -> dict[str, int]:
        wanted = sorted(set(terms))
        if not wanted:
            return {}
        if self._vocab is not None and all(t in self._vocab for t in wanted):
            return {t: self._vocab[t] for t in wanted}
        marks = ",".join("?" * len(wanted))
        sql = f"SELECT term, id FROM terms WHERE term IN ({marks})"
        rows = await self._read(sql, wanted, inline=len(wanted) <= _INLINE_KEYS)
        return {str(term): int(term_id) for term, term_id in rows}

    async def postings_since(
        self, after_key: int, batch_size: int = 50_000
    ) -> AsyncIterator[ChunkPostings]:
        async with self._conn.execute(
            f"SELECT {_POSTING_COLUMNS} FROM chunks WHERE key > ? ORDER BY key", (int(after_key),)
        ) as cur:
            while rows := await cur.fetchmany(batch_size):
                yield postings_from_rows(list(rows))

    async def changes_since(self, generation: int) -> ChangeLog:
        floor = int_value(await self._state("changes_floor"), "change log floor", self.path.name)
        rows = await self._conn.execute_fetchall(
            "SELECT key, valid_to, term_ids, tfs FROM changes WHERE generation > ? ORDER BY seq",
            (int(generation),),
        )
        return change_log(list(rows), complete=floor <= generation + 1)

    async def lexical_delta(self, after_key: int, since_generation: int) -> LexicalDelta:
        # One read transaction on a connection of its own, in one thread hop: the
        # shared connection may be inside a write of this process meanwhile.
        self._open_conn_check()

        def read(conn: sqlite3.Connection) -> tuple[Any, list[Any], list[Any]]:
            state = conn.execute(
                "SELECT generation, changes_floor, live_chunks FROM state WHERE id = 1"
            ).fetchone()
            changes = conn.execute(
                "SELECT key, valid_to, term_ids, tfs FROM changes WHERE generation > ?"
                " ORDER BY seq",
                (int(since_generation),),
            ).fetchall()
            postings = conn.execute(
                f"SELECT {_POSTING_COLUMNS} FROM chunks WHERE key > ? ORDER BY key",
                (int(after_key),),
            ).fetchall()
            return state or (None, None, None), changes, postings

        try:
            (generation, floor, live), changes, postings = await asyncio.to_thread(
                _snapshot, self._read_uri, read
            )
        except sqlite3.Error as exc:
            raise StorageError(
                f"could not read the changes since the last search: {_sqlite_error(exc)}"
            ) from None
        where = self.path.name
        generation = int_value(generation, "generation", where)
        floor = int_value(floor, "change log floor", where)
        batches = [
            postings_from_rows(postings[i : i + 50_000]) for i in range(0, len(postings), 50_000)
        ]
        return LexicalDelta(
            generation=generation,
            changes=change_log(changes, complete=floor <= since_generation + 1),
            postings=batches,
            live_chunks=live_count(live),
        )

    @_serialized
    async def prune_changes(self, through_generation: int) -> None:
        try:
            await self._begin_write()
            await self._conn.execute(
                "DELETE FROM changes WHERE generation <= ?", (int(through_generation),)
            )
            await self._conn.execute(
                "UPDATE state SET changes_floor = max(changes_floor, ?) WHERE id = 1",
                (int(through_generation) + 1,),
            )
            await self._conn.execute("COMMIT")
        except BaseException as exc:
            await self._rollback()
            if isinstance(exc, sqlite3.Error):
                raise StorageError(f"could not prune the change log: {exc}") from None
            raise

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

    @_serialized
    async def _vector_write(self, what: str, sql: str | None, rows: list[tuple[Any, ...]]) -> None:
        """``sql`` for each of ``rows`` and a vectors-generation bump, in one transaction."""
        try:
            await self._begin_write()
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
            " WHERE c.valid_to IS NULL AND d.vectors_hash = d.content_hash"
        )

        def read(conn: sqlite3.Connection) -> ConfirmedVectors:
            documents = frozenset(row[0] for row in conn.execute(documents_sql))
            chunks = frozenset(row[0] for row in conn.execute(chunks_sql))
            return ConfirmedVectors(documents, chunks)

        self._open_conn_check()
        try:
            return await asyncio.to_thread(_snapshot, self._read_uri, read)
        except sqlite3.Error as exc:
            raise StorageError(f"could not read confirmed vectors: {_sqlite_error(exc)}") from None

    async def confirmed_vector_count(self) -> int:
        # Current chunks (the count the triggers keep) minus those of unconfirmed
        # documents (usually none, found by index), where counting the join takes
        # a few hundred milliseconds at a million chunks.
        async with self._conn.execute(
            "SELECT (SELECT live_chunks FROM state WHERE id = 1) - (SELECT COUNT(*)"
            " FROM chunks WHERE valid_to IS NULL AND document_id IN (SELECT id FROM documents"
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
        """Current chunks of several documents, each list in chunk order; absent ids
        are left out."""
        out: dict[str, list[StoredChunk]] = {}
        rows = await self._rows_in(
            f"SELECT {_CHUNK_COLUMNS} FROM {_CHUNKS_JOINED}"
            " WHERE c.valid_to IS NULL AND c.document_id IN ({})",
            list(dict.fromkeys(document_ids)),
        )
        for row in rows:
            stored = stored_chunk(row)
            out.setdefault(stored.document_id, []).append(stored)
        for listed in out.values():
            listed.sort(key=lambda r: r.chunk_index)
        return out

    async def get_chunks_by_ids(self, chunk_ids: Sequence[str]) -> Mapping[str, StoredChunk]:
        rows = await self._chunks_where("c.valid_to IS NULL AND c.id", list(chunk_ids))
        return {row.chunk_id: row for row in rows}

    async def _chunks_where(self, column: str, values: list[Any]) -> list[StoredChunk]:
        """Chunks whose ``column`` is one of ``values``; small lookups run inline."""
        out: list[StoredChunk] = []
        for i in range(0, len(values), _IN_BATCH):
            part = values[i : i + _IN_BATCH]
            marks = ",".join("?" * len(part))
            sql = f"SELECT {_CHUNK_COLUMNS} FROM {_CHUNKS_JOINED} WHERE {column} IN ({marks})"
            rows = await self._read(sql, part, inline=len(part) <= _INLINE_KEYS)
            out.extend(stored_chunk(row) for row in rows)
        return out

    async def chunk_count(self) -> int:
        # Kept by the triggers (``_LIVE_TRIGGERS``): no scan of the chunk index.
        async with self._conn.execute("SELECT live_chunks FROM state WHERE id = 1") as cur:
            row = await cur.fetchone()
        return int(row[0]) if row else 0

    async def get_chunk(self, chunk_id: str, version: int | None = None) -> StoredChunk | None:
        params: tuple[Any, ...] = (chunk_id,)
        where = "c.id = ?"
        if version is not None:
            where, params = "c.id = ? AND c.version = ?", (chunk_id, int(version))
        # The current row first, then the newest past one: two lookups, each on its
        # partial index (the past one is empty for a corpus never edited).
        for when in ("c.valid_to IS NULL", "c.valid_to IS NOT NULL"):
            async with self._conn.execute(
                f"SELECT {_CHUNK_COLUMNS} FROM {_CHUNKS_JOINED} WHERE {where} AND {when}"
                " ORDER BY c.version DESC LIMIT 1",
                params,
            ) as cur:
                row = await cur.fetchone()
            if row:
                return stored_chunk(row)
        return None

    async def current_chunk_ids(self, keys: Sequence[int]) -> Mapping[int, str]:
        wanted = [int(k) for k in keys]
        out: dict[int, str] = {}
        for i in range(0, len(wanted), _IN_BATCH):
            part = wanted[i : i + _IN_BATCH]
            marks = ",".join("?" * len(part))
            sql = f"SELECT key, id FROM chunks WHERE key IN ({marks}) AND valid_to IS NULL"
            # Inline on the read-only connection, as a search's hits are read: it sees
            # only committed rows (this process's write connection may be inside a
            # transaction), and a search that has raised leaves nothing queued behind it.
            rows = await self._read(sql, part, inline=True)
            out.update((int(key), str(chunk_id)) for key, chunk_id in rows)
        return out

    async def get_chunks_by_keys(self, keys: Sequence[int]) -> Mapping[int, StoredChunk]:
        wanted = [int(k) for k in keys]
        out: dict[int, StoredChunk] = {}
        shared = self._long_metadata or len(wanted) > _INLINE_KEYS
        step = _IN_BATCH // 2 if shared else _IN_BATCH  # shared binds each key twice
        for i in range(0, len(wanted), step):
            part = wanted[i : i + step]
            small = len(part) <= _INLINE_KEYS
            sql = _HITS_BY_KEY[shared][len(part)] if small else _hits_sql(len(part), shared)
            params = part * 2 if shared else part
            # A search's hits: one statement, read inline, its text made once.
            rows = await self._read(sql, params, inline=small)
            if shared:
                rows = share_metadata(rows)
            elif has_long_metadata(rows):
                self._long_metadata = True
            out.update((row.key, row) for row in map(stored_hit, rows))
        return out

    async def iter_chunks(self, batch_size: int = 1000) -> AsyncIterator[list[StoredChunk]]:
        carry = MetadataCarry()  # each document's metadata is sorted once (_SCAN_SQL)
        async with self._conn.execute(_SCAN_SQL) as cur:
            while rows := await cur.fetchmany(batch_size):
                yield [stored_chunk(r) for r in carry.fill(rows)]

    # -- lexical statistics --------------------------------------------------

    async def vocabulary(self, after: int = 0) -> dict[str, int]:
        async with self._conn.execute(
            "SELECT term, id FROM terms WHERE id > ? AND term != ?", (int(after), _MARKER)
        ) as cur:
            rows = await cur.fetchall()
        return {term: int(term_id) for term, term_id in rows}

    async def chunk_owners(self) -> ChunkOwners:
        # One statement, so documents and chunks come from the same snapshot. A
        # past version's chunk is owned by that version (its own fields).
        document_ids: list[str] = []
        fields: list[dict[str, FieldValue]] = []
        current: list[bool] = []
        position: dict[tuple[str, int], int] = {}
        keys: list[int] = []
        owner_of: list[tuple[str, int]] = []
        async with self._conn.execute(
            "SELECT 0, id, version, json_extract(metadata, '$.fields') FROM documents"
            " UNION ALL SELECT 2, document_id, version, json_extract(metadata, '$.fields')"
            " FROM document_versions"
            " UNION ALL SELECT 1, document_id, version, key FROM chunks"
        ) as cur:
            while batch := await cur.fetchmany(50_000):
                for kind, document_id, version, value in batch:
                    if kind != 1:
                        position[(document_id, version)] = len(document_ids)
                        document_ids.append(document_id)
                        fields.append(_stored_fields(value, document_id))
                        current.append(kind == 0)
                    else:
                        keys.append(value)
                        owner_of.append((document_id, version))
        try:
            owners = np.fromiter(
                (position[o] for o in owner_of), dtype=np.int64, count=len(owner_of)
            )
        except KeyError:
            raise damaged(self.path.name, "chunk owner (a chunk without its document)") from None
        return ChunkOwners(
            keys=np.asarray(keys, dtype=np.int64),
            owners=owners,
            document_ids=document_ids,
            fields=fields,
            current=current,
        )

    async def iter_postings(self, batch_size: int = 50_000) -> AsyncIterator[ChunkPostings]:
        async with self._conn.execute(
            f"SELECT {_POSTING_COLUMNS} FROM chunks ORDER BY content_hash, chunk_index, document_id"
        ) as cur:
            while rows := await cur.fetchmany(batch_size):
                yield postings_from_rows(list(rows))


def _file_bytes(path: Path) -> int:
    """The size of the database file and its WAL together (0 for what is missing)."""
    total = 0
    for name in (path.name, path.name + "-wal"):
        with contextlib.suppress(OSError):
            total += path.with_name(name).stat().st_size
    return total


def _stored_fields(raw: Any, document_id: Any) -> dict[str, FieldValue]:
    where = f"document row {document_id!r}"
    if raw is None:
        return {}
    try:
        value = json.loads(raw) if isinstance(raw, str) else raw
    except (ValueError, RecursionError):
        raise damaged(where, "fields") from None
    return dict(check_fields_value(value, where))


def _unopenable(path: Path, unwritable: str) -> str:
    if unwritable == _READ_ONLY_FS:
        return (
            f"cannot open {str(path)!r}: its directory is {unwritable} and the collection was "
            "left with a write-ahead log that SQLite cannot read without writing beside it "
            "(its shared-memory file is missing); open it once on writable storage, which "
            "folds the log in, then mount it read-only again"
        )
    if unwritable.startswith("on a full filesystem"):
        return (
            f"cannot open {str(path)!r}: its directory is {unwritable}, and a collection needs "
            "room beside its file (SQLite's write-ahead log) even to be searched; the file "
            "itself is not damaged: free some space and try again"
        )
    return (
        f"cannot open {str(path)!r}: its directory is {unwritable}, and a collection needs to "
        "write beside its file (SQLite's write-ahead log) to be searched there; copy the index "
        "directory to writable storage, or mount it read-only"
    )


_READ_ONLY_FS = "on a read-only filesystem"


@dataclass(frozen=True)
class _Media:
    """How a store file on a filesystem mounted read-only is read (adr/0089-read-only-media.md).

    SQLite reads a WAL database through a shared-memory file beside it, which it
    cannot make there. A file closed cleanly has no log beside it: it is read as
    immutable (no locks, no shared memory), which holds only while nothing changes
    it, so ``changed`` compares its stat, and the absence of a log, with those at
    open before each search. A file with a log beside it (a writer on another mount,
    or one that never closed) is read through the log's existing index file.
    """

    uri: str
    # Immutable reads only: (device, inode, size, mtime in ns) at open.
    stat: tuple[int, int, int, int] | None

    @classmethod
    def of(cls, path: Path) -> _Media | None:
        """None unless ``path``'s directory is on a read-only filesystem."""
        if not _on_read_only_fs(path.parent):
            return None
        try:
            base = path.resolve().as_uri()
            if os.path.lexists(f"{path}-wal"):
                return cls(f"{base}?mode=ro", None)
            return cls(f"{base}?mode=ro&immutable=1", _stat_key(path))
        except OSError:
            return None  # cannot be looked at: opened as usual, which says what fails

    def changed(self, path: Path) -> bool:
        """Whether an immutable read can no longer be trusted: the file or its log moved."""
        if self.stat is None:
            return False
        try:
            return _stat_key(path) != self.stat or os.path.lexists(f"{path}-wal")
        except OSError:
            return True


def _stat_key(path: Path) -> tuple[int, int, int, int]:
    found = os.stat(path)
    return (found.st_dev, found.st_ino, found.st_size, found.st_mtime_ns)


def _on_read_only_fs(directory: Path) -> bool:
    try:
        return bool(os.statvfs(directory).f_flag & os.ST_RDONLY)
    except OSError:  # cannot be looked at: opened as usual, which says what fails
        return False


def _unwritable(directory: Path, error: BaseException | None = None) -> str | None:
    """Why nothing can be written in ``directory`` (None: something can); ``error``, the
    SQLite error that made the caller ask."""
    if _on_read_only_fs(directory):
        return _READ_ONLY_FS
    if not os.access(directory, os.W_OK):
        return "not writable by this user"
    return _no_space(directory, error)


# Less room than this beside a collection's file is a full disk to SQLite: its
# shared-memory file alone takes 32 KiB.
_MIN_FREE_BYTES = 1 << 20


def _no_space(directory: Path, error: BaseException | None = None) -> str | None:
    """Why ``directory`` has no room for what SQLite writes beside a file, or None. A full
    disk fails the open as "disk I/O error" (the log files cannot be made), which must
    not read as damage: moving a sound file aside would lose the collection."""
    try:
        stats = os.statvfs(directory)
    except OSError:
        free = None
    else:
        free = stats.f_bavail * stats.f_frsize
    full = getattr(error, "sqlite_errorname", None) == "SQLITE_FULL"
    if not full and (free is None or free >= _MIN_FREE_BYTES):
        return None
    room = "" if free is None else f", {free:,} bytes free"
    return f"on a full filesystem{room}"


class StoreReplacedError(StorageError):
    """A collection file removed or replaced while it was opened or read (a drop, or a
    drop and a new ingest, in another process): not damage, so open it again."""

    def __init__(self, path: Path, detail: str) -> None:
        super().__init__(
            f"{str(path)!r} was removed or replaced while it was read (dropped, or dropped "
            f"and made again, by another process): open the collection again ({detail})"
        )


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


def _file_identity(path: Path) -> tuple[int, int] | None:
    """The (device, inode) ``path`` names now; None when nothing is there. Other
    failures to look (``OSError``) are the caller's to judge."""
    try:
        found = os.stat(path)
    except FileNotFoundError:
        return None
    return (found.st_dev, found.st_ino)


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


def _snapshot(uri: str, read: Callable[[sqlite3.Connection], _R]) -> _R:
    """``read`` in one read transaction on a read-only connection of its own.

    An I/O or locking-protocol error from SQLite is tried again after each pause of
    ``_SNAPSHOT_PAUSES_S``: with dozens of processes writing, opening and closing the
    file, a freshly opened connection's first read can (rarely) fail with SQLite's
    "disk I/O error" where the same read a moment later succeeds. Busy and locked are
    not among them (SQLite's busy timeout has waited already). A lasting fault fails
    every try and is raised.
    """
    for pause in _SNAPSHOT_PAUSES_S:
        try:
            return _snapshot_once(uri, read)
        except sqlite3.OperationalError as exc:
            if _primary_code(exc) not in (sqlite3.SQLITE_IOERR, sqlite3.SQLITE_PROTOCOL):
                raise
        time.sleep(pause)
    return _snapshot_once(uri, read)


def _snapshot_once(uri: str, read: Callable[[sqlite3.Connection], _R]) -> _R:
    conn = sqlite3.connect(uri, uri=True)
    try:
        conn.execute(f"PRAGMA busy_timeout={_BUSY_WAIT_MS}")
        conn.execute("BEGIN")
        result = read(conn)
        conn.execute("COMMIT")
        return result
    finally:
        conn.close()


def _sqlite_error(exc: sqlite3.Error) -> str:
    """The driver's message with SQLite's extended error name, which tells I/O errors apart."""
    name = getattr(exc, "sqlite_errorname", None)
    return f"{exc} ({name})" if isinstance(name, str) and name not in str(exc) else str(exc)


async def _to_thread_to_the_end(fn: Callable[..., None], *args: Any) -> None:
    """``fn`` in a worker thread; cancelled, this still waits for the thread (which
    nothing can stop) before it raises, so the caller's clean-up sees what it made."""
    work = asyncio.ensure_future(asyncio.to_thread(fn, *args))
    try:
        await asyncio.shield(work)
    except asyncio.CancelledError:
        await asyncio.wait({work})
        if not work.cancelled() and work.exception() is not None:
            logger.debug("cancelled while it failed: %s", work.exception())
        raise


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
    if _on_read_only_fs(path.parent):
        raise StorageError(
            f"cannot create {str(path)!r}: its directory is {_READ_ONLY_FS}; give an index "
            "directory on writable storage for a new collection"
        )
    temp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
    try:
        # A WAL left by a database file deleted since would be replayed into the new
        # one by SQLite (it cannot tell the files apart): it goes first.
        for suffix in ("-wal", "-shm"):
            path.with_name(path.name + suffix).unlink(missing_ok=True)
        conn = sqlite3.connect(temp, isolation_level=None)
        try:
            conn.execute("PRAGMA journal_mode=WAL")
            conn.executescript(
                "BEGIN IMMEDIATE;"
                + _SCHEMA
                + "".join(f"{trigger};" for trigger in _LIVE_TRIGGERS)
                + f"INSERT INTO state (id, schema_version, uid) VALUES (1, {SCHEMA_VERSION},"
                + f" '{uuid.uuid4().hex}');"
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
            with contextlib.suppress(OSError):  # the error above says what went wrong
                leftover.unlink(missing_ok=True)


def _guard_sqlite_errors(cls: type[SQLiteMetadataStore]) -> None:
    """Wrap every protocol method so a SQLite failure surfaces as ``StorageError``.

    Reads meet damaged or vanished files too (a collection replaced under a
    running server); the driver's exception must not cross the public API.
    """

    def closed_under(store: SQLiteMetadataStore, exc: Exception) -> bool:
        """The driver's complaint about a connection ``close`` took from a read in flight
        (aiosqlite's ``ValueError``, sqlite3's ``ProgrammingError``)."""
        return store._db is None and isinstance(exc, ValueError | sqlite3.ProgrammingError)

    def typed(store: SQLiteMetadataStore, exc: Exception) -> Exception:
        if closed_under(store, exc):
            return StorageError(f"the metadata store {store.path.name!r} is closed")
        if isinstance(exc, ValueError) and not isinstance(exc, UnicodeEncodeError):
            return exc  # a ValueError of an open store is no driver failure: left as it is
        if not isinstance(exc, UnicodeEncodeError) and store.replaced():
            return StoreReplacedError(store.path, str(exc))
        return StorageError(message(store, exc))

    def message(store: SQLiteMetadataStore, exc: Exception) -> str:
        if isinstance(exc, UnicodeEncodeError):
            # A str argument SQLite cannot bind; the driver's message is not quoted.
            return (
                f"metadata store {store.path.name!r}: a value given to it cannot be encoded "
                "as UTF-8 (it holds a lone surrogate)"
            )
        return (
            f"metadata store {store.path.name!r} failed: {exc}; if the file is damaged, "
            "restore it from a backup, or ingest again with rebuild_damaged (grk ingest "
            "--rebuild) to move it aside and start anew"
        )

    for name in dir(MetadataStoreProtocol):
        if name.startswith("_") or name == "close":
            continue
        method = getattr(cls, name)
        if inspect.isasyncgenfunction(method):

            def gen_wrapper(method: Any) -> Any:
                @functools.wraps(method)
                async def wrapped(self: SQLiteMetadataStore, *a: Any, **k: Any) -> Any:
                    items = method(self, *a, **k)
                    try:
                        try:
                            async for item in items:
                                yield item
                        finally:
                            # Closed here, not left to the garbage collector, whose
                            # finalizer task would only reach the loop's handler.
                            try:
                                await items.aclose()
                            except (sqlite3.Error, ValueError) as exc:
                                # A cursor of a closed store needs no closing.
                                if not closed_under(self, exc):
                                    raise
                    except (sqlite3.Error, UnicodeEncodeError, ValueError) as exc:
                        error = typed(self, exc)
                        if error is exc:
                            raise
                        raise error from None

                return wrapped

            setattr(cls, name, gen_wrapper(method))
        elif inspect.iscoroutinefunction(method):

            def coro_wrapper(method: Any) -> Any:
                @functools.wraps(method)
                async def wrapped(self: SQLiteMetadataStore, *a: Any, **k: Any) -> Any:
                    try:
                        return await method(self, *a, **k)
                    except (sqlite3.Error, UnicodeEncodeError, ValueError) as exc:
                        error = typed(self, exc)
                        if error is exc:
                            raise
                        raise error from None

                return wrapped

            setattr(cls, name, coro_wrapper(method))


_guard_sqlite_errors(SQLiteMetadataStore)
