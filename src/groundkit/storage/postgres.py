"""PostgreSQL metadata store: one schema per collection, via an asyncpg pool (ADR 0024).

The same semantics as ``SQLiteMetadataStore``: a versioned schema, a generation bumped by
every write, each write one transaction, term ids that only grow. What SQLite gets from its
single writer lock, this store gets from a row lock on the collection's ``state`` row, taken
first in every write transaction: writers of one collection, in any process, take turns, so
new term ids are dense and never handed out twice, generations never go backwards, and
chunk keys become visible in increasing order (see ``replace_documents``). Readers take no
lock (MVCC) and see whole transactions only.

asyncpg is an optional dependency (``pip install groundkit[postgres]``), imported when a
store is opened.
"""

from __future__ import annotations

import asyncio
import hashlib
import math
import os
import re
import socket
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping, Sequence
from contextlib import asynccontextmanager, contextmanager
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar
from urllib.parse import unquote

import numpy as np

from groundkit.contracts import CollectionManifest, DocumentRecord, EmbeddingIdentity, fields_of
from groundkit.errors import (
    CollectionNotFoundError,
    ConfigurationError,
    GroundkitError,
    StorageError,
)
from groundkit.storage._rows import (
    LEGACY_GAPS_SQL,
    REMOVED,
    STORED_ALREADY_COLUMNS,
    MetadataCarry,
    WriteItems,
    change_log,
    check_keep,
    check_storable,
    chunk_rows,
    damaged,
    document_record,
    document_rows,
    document_state,
    generations_row,
    int_value,
    iso_time,
    live_count,
    manifest_value,
    never_written,
    now_iso,
    optional_text,
    parse_metadata,
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
from groundkit.storage.names import check_collection_name
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
    StoredChunk,
)

if TYPE_CHECKING:
    import asyncpg
    from asyncpg.pool import PoolConnectionProxy

__all__ = [
    "DEFAULT_TIMEOUT",
    "SCHEMA_PREFIX",
    "SCHEMA_VERSION",
    "TIMEOUT_ENV",
    "PostgresMetadataStore",
    "collection_exists",
    "collection_names",
    "command_timeout",
    "redact_dsn",
    "schema_name",
]

SCHEMA_VERSION = 5
SCHEMA_PREFIX = "gk_"
_MAX_IDENTIFIER = 63  # PostgreSQL's NAMEDATALEN - 1, in bytes (names here are ASCII)
# Seconds ``close`` waits for borrowed connections (an abandoned iterator) before cutting them.
_CLOSE_TIMEOUT = 10.0
# Seconds a statement may go unanswered before it fails (adr/0094-postgres-statement-timeout.md):
# a server that stops answering (a network partition, a frozen host) fails the call with a
# ``StorageError`` instead of hanging it. ``TIMEOUT_ENV`` sets it; 0 turns it off.
TIMEOUT_ENV = "GROUNDKIT_POSTGRES_TIMEOUT"
DEFAULT_TIMEOUT = 60.0
# The timeout of the statements that wait for another's lock (the writer lock, the opening
# lock, a DROP or VACUUM waiting for readers) or rewrite whole tables: those wait as long as it
# takes. asyncpg has no "none" for a statement with parameters; a century stands for it.
_UNBOUNDED = 100 * 365 * 24 * 3600.0
# A drop locks the schema's tables one after another (state, documents, chunks, ...), while
# a search's statement locks them in its own order (chunks, then documents): a search under
# way can close a cycle with a drop. PostgreSQL then aborts whichever waited first, which is
# the drop; the search goes on, and the drop is tried again after it (attempts, first pause
# in seconds, doubled each time).
_DROP_ATTEMPTS, _DROP_PAUSE = 8, 0.05
_T = TypeVar("_T")
# TCP keepalives (idle, interval, count; seconds): a dead server host fails a statement that
# waits unbounded within about a minute, where no timeout would.
_KEEPALIVE = (("TCP_KEEPIDLE", 30), ("TCP_KEEPINTVL", 10), ("TCP_KEEPCNT", 3))

# What schema 3 added to a collection beside new columns: the past versions of documents,
# the change log, and the chunk indexes. A chunk id is unique among current chunks only
# (past versions keep theirs), so uniqueness is a partial index rather than a constraint.
_VERSIONED = """
CREATE TABLE {s}.document_versions (
    document_id TEXT COLLATE "C" NOT NULL REFERENCES {s}.documents(id) ON DELETE CASCADE,
    version INTEGER NOT NULL,
    source TEXT COLLATE "C" NOT NULL,
    content_hash TEXT COLLATE "C" NOT NULL,
    ingested_at TEXT NOT NULL,
    source_class TEXT NOT NULL,
    extractor TEXT,
    metadata TEXT NOT NULL DEFAULT '{{}}',
    valid_from DOUBLE PRECISION NOT NULL,
    valid_to DOUBLE PRECISION NOT NULL,
    valid_as_of TEXT,
    PRIMARY KEY (document_id, version)
);
CREATE TABLE {s}.changes (
    seq BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    generation BIGINT NOT NULL,
    key BIGINT NOT NULL,
    valid_to DOUBLE PRECISION NOT NULL,
    term_ids BYTEA NOT NULL,
    tfs BYTEA NOT NULL
);
CREATE INDEX changes_by_generation ON {s}.changes(generation);
CREATE UNIQUE INDEX chunks_current_id ON {s}.chunks(id) WHERE valid_to IS NULL;
CREATE INDEX chunks_past_id ON {s}.chunks(id, version) WHERE valid_to IS NOT NULL;
CREATE INDEX chunks_by_document ON {s}.chunks(document_id, version, chunk_index);
CREATE INDEX chunks_canonical ON {s}.chunks(content_hash, chunk_index, document_id, key);
"""

# The store counts its current chunks itself, one update per statement whatever adds,
# retires or deletes them (a cascade included): the lexical index is checked against the
# count at every catch-up for nothing (adr/0055-derived-state-checked.md).
_LIVE_TRIGGERS = """
CREATE FUNCTION {s}.chunks_live_insert() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE {s}.state SET live_chunks = live_chunks
        + (SELECT count(*) FROM added WHERE valid_to IS NULL) WHERE id = 1;
    RETURN NULL;
END $$;
CREATE FUNCTION {s}.chunks_live_update() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE {s}.state SET live_chunks = live_chunks
        + (SELECT count(*) FROM after_rows WHERE valid_to IS NULL)
        - (SELECT count(*) FROM before_rows WHERE valid_to IS NULL) WHERE id = 1;
    RETURN NULL;
END $$;
CREATE FUNCTION {s}.chunks_live_delete() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE {s}.state SET live_chunks = live_chunks
        - (SELECT count(*) FROM gone WHERE valid_to IS NULL) WHERE id = 1;
    RETURN NULL;
END $$;
CREATE TRIGGER chunks_live_insert AFTER INSERT ON {s}.chunks
    REFERENCING NEW TABLE AS added FOR EACH STATEMENT
    EXECUTE FUNCTION {s}.chunks_live_insert();
CREATE TRIGGER chunks_live_update AFTER UPDATE ON {s}.chunks
    REFERENCING OLD TABLE AS before_rows NEW TABLE AS after_rows FOR EACH STATEMENT
    EXECUTE FUNCTION {s}.chunks_live_update();
CREATE TRIGGER chunks_live_delete AFTER DELETE ON {s}.chunks
    REFERENCING OLD TABLE AS gone FOR EACH STATEMENT
    EXECUTE FUNCTION {s}.chunks_live_delete();
"""

# Text compared or ordered by the store is COLLATE "C" (byte order, as SQLite's BINARY):
# canonical order and source order must not depend on the database's locale. Moments
# (valid_from, valid_to) are seconds since the epoch, as in SQLite.
_SCHEMA = (
    """
CREATE TABLE {s}.state (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    schema_version INTEGER NOT NULL,
    collection TEXT NOT NULL,
    generation BIGINT NOT NULL DEFAULT 0,
    vectors_generation BIGINT NOT NULL DEFAULT 0,
    base_dir TEXT,
    analyzer TEXT,
    manifest TEXT,
    uid TEXT,
    changes_floor BIGINT NOT NULL DEFAULT 0,
    chunker TEXT,
    live_chunks BIGINT NOT NULL DEFAULT 0
);
CREATE TABLE {s}.documents (
    id TEXT COLLATE "C" PRIMARY KEY,
    source TEXT COLLATE "C" NOT NULL UNIQUE,
    content_hash TEXT COLLATE "C" NOT NULL,
    ingested_at TEXT NOT NULL,
    source_class TEXT NOT NULL,
    extractor TEXT,
    metadata TEXT NOT NULL DEFAULT '{{}}',
    vectors_hash TEXT COLLATE "C",
    version INTEGER NOT NULL DEFAULT 1,
    valid_from DOUBLE PRECISION NOT NULL DEFAULT 0,
    valid_as_of TEXT
);
CREATE TABLE {s}.chunks (
    key BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    id TEXT COLLATE "C" NOT NULL,
    document_id TEXT COLLATE "C" NOT NULL REFERENCES {s}.documents(id) ON DELETE CASCADE,
    chunk_index INTEGER NOT NULL,
    content TEXT NOT NULL,
    start_offset INTEGER NOT NULL,
    end_offset INTEGER NOT NULL,
    content_hash TEXT COLLATE "C" NOT NULL,
    term_ids BYTEA NOT NULL,
    tfs BYTEA NOT NULL,
    version INTEGER NOT NULL DEFAULT 1,
    valid_from DOUBLE PRECISION NOT NULL DEFAULT 0,
    valid_to DOUBLE PRECISION
);
CREATE TABLE {s}.terms (
    id INTEGER PRIMARY KEY,
    term TEXT COLLATE "C" NOT NULL UNIQUE
);
"""
    + _VERSIONED
    + _LIVE_TRIGGERS
)

# ``_MIGRATIONS[n]`` takes a schema from version n to n + 1; they run in order, each with
# its version bump, inside the opening transaction. Version 2: the vectors generation.
# Version 3: document versions, the change log, the collection uid ({uid}). Version 4: the
# chunker the collection is bound to, and every stored document marked as chunked before
# chunk gaps were recorded (``LEGACY_GAPS_SQL``, its braces doubled for ``format``). Where
# SQLite rebuilds its chunk table for 3, PostgreSQL alters it in place: the new columns have
# constant defaults (a catalog change), and the unique chunk id constraint gives way to a
# partial unique index. ``_date_versions`` then writes each stored version's start, which
# does touch every chunk row once. Version 5: the count of current chunks, kept
# by statement triggers (``_LIVE_TRIGGERS``).
_LEGACY_GAPS = LEGACY_GAPS_SQL.replace("{", "{{").replace("}", "}}")
_MIGRATIONS: dict[int, str] = {
    1: "ALTER TABLE {s}.state ADD COLUMN vectors_generation BIGINT NOT NULL DEFAULT 0",
    2: """
ALTER TABLE {s}.state ADD COLUMN uid TEXT, ADD COLUMN changes_floor BIGINT NOT NULL DEFAULT 0;
UPDATE {s}.state SET uid = '{uid}', changes_floor = generation + 1;
ALTER TABLE {s}.documents ADD COLUMN version INTEGER NOT NULL DEFAULT 1,
    ADD COLUMN valid_from DOUBLE PRECISION NOT NULL DEFAULT 0, ADD COLUMN valid_as_of TEXT;
ALTER TABLE {s}.chunks ADD COLUMN version INTEGER NOT NULL DEFAULT 1,
    ADD COLUMN valid_from DOUBLE PRECISION NOT NULL DEFAULT 0,
    ADD COLUMN valid_to DOUBLE PRECISION,
    DROP CONSTRAINT chunks_id_key;
DROP INDEX {s}.chunks_by_document, {s}.chunks_canonical;
"""
    + _VERSIONED,
    3: "ALTER TABLE {s}.state ADD COLUMN chunker TEXT;"
    + "".join(
        f"UPDATE {{s}}.{table} SET {_LEGACY_GAPS};" for table in ("documents", "document_versions")
    ),
    4: "ALTER TABLE {s}.state ADD COLUMN live_chunks BIGINT NOT NULL DEFAULT 0;"
    " UPDATE {s}.state SET live_chunks ="
    " (SELECT count(*) FROM {s}.chunks WHERE valid_to IS NULL) WHERE id = 1;" + _LIVE_TRIGGERS,
}

# A chunk joined to its document: ``d`` is the current row (``_current``) or the row of the
# chunk's own version, current or past (``_EVERY_VERSION``).
_CHUNK_COLUMNS = (
    "c.key, c.id, c.chunk_index, c.content, c.start_offset, c.end_offset, d.id, d.source,"
    " d.content_hash, d.ingested_at, d.source_class, d.extractor, d.metadata, c.version,"
    " c.valid_from, c.valid_to"
)
_VERSION_FIELDS = "version, source, content_hash, ingested_at, source_class, extractor, metadata"
_EVERY_VERSION = (
    f"(SELECT id, {_VERSION_FIELDS} FROM {{s}}.documents"
    f" UNION ALL SELECT document_id, {_VERSION_FIELDS} FROM {{s}}.document_versions)"
)
_DOCUMENT_COLUMNS = (
    "d.id, d.source, d.content_hash, d.ingested_at, d.source_class, d.extractor, d.metadata,"
    " (SELECT COUNT(*) FROM {s}.chunks c WHERE c.document_id = d.id AND c.valid_to IS NULL),"
    " d.version, (SELECT COUNT(*) FROM {s}.document_versions v WHERE v.document_id = d.id)"
)
_POSTING_COLUMNS = (
    "key, term_ids, tfs, content_hash, chunk_index, document_id, valid_from, valid_to"
)
# The term no text is analysed into, kept at the largest id ever handed out once an
# erase removed terms (as in the SQLite store; adr/0053-erasure.md).
_MARKER = ""
# The collection's tables, as an erase vacuums them.
_TABLES = ("documents", "document_versions", "chunks", "changes", "terms")
_CHUNK_INSERT = (
    "id",
    "document_id",
    "chunk_index",
    "content",
    "start_offset",
    "end_offset",
    "content_hash",
    "term_ids",
    "tfs",
    "version",
    "valid_from",
)
_DOCUMENT_INSERT = (
    "id",
    "source",
    "content_hash",
    "ingested_at",
    "source_class",
    "extractor",
    "metadata",
    "version",
    "valid_from",
    "valid_as_of",
)


def _driver() -> Any:
    """asyncpg, imported on first use so the base install does not need it."""
    try:
        import asyncpg
    except ImportError:
        raise ConfigurationError(
            "the PostgreSQL metadata store needs asyncpg: pip install groundkit[postgres]"
        ) from None
    return asyncpg


def _driver_errors() -> tuple[type[BaseException], ...]:
    """Everything asyncpg raises for a failed call (socket errors and timeouts included)."""
    pg = _driver()
    return (
        pg.PostgresError,
        pg.InterfaceError,
        pg.exceptions.InternalClientError,
        OSError,
        TimeoutError,
    )


def command_timeout(
    given: float | None = None, environ: Mapping[str, str] | None = None
) -> float | None:
    """The statement timeout in seconds (None: none): ``given``, else ``$TIMEOUT_ENV``, else
    ``DEFAULT_TIMEOUT``; 0 turns it off. The variable unset, empty or blank is the default.
    Anything else (not a number, negative, ``inf``, ``nan``) is a ``ConfigurationError``
    quoting what was set."""
    said: object = given
    if given is None:
        raw = (os.environ if environ is None else environ).get(TIMEOUT_ENV, "")
        if not raw.strip():
            return DEFAULT_TIMEOUT
        said = raw  # as the user wrote it, not what float() made of it
        try:
            given = float(raw)
        except ValueError:
            given = math.nan
    if isinstance(given, bool) or not math.isfinite(given) or given < 0:
        raise ConfigurationError(
            f"the PostgreSQL statement timeout must be a finite number of seconds, 0 for "
            f"none (${TIMEOUT_ENV}); got {said!r}"
        )
    return float(given) or None


async def _keep_alive(conn: Any) -> None:
    """TCP keepalives on a new connection (asyncpg has no setting for them)."""
    transport = getattr(conn, "_transport", None)
    sock = transport.get_extra_info("socket") if transport is not None else None
    if sock is None or sock.family not in (socket.AF_INET, socket.AF_INET6):
        return  # a Unix socket: the server is on this host
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    for name, seconds in _KEEPALIVE:
        option = getattr(socket, name, None)
        if option is not None:
            sock.setsockopt(socket.IPPROTO_TCP, option, seconds)


_URL_DSN = re.compile(r"^([a-z][a-z0-9+.-]*://)(.*)$", re.IGNORECASE | re.DOTALL)
# A password given as a query parameter of a URL, or as a libpq key=value pair.
_QUERY_PASSWORD = re.compile(r"([?&]password=)([^&]*)", re.IGNORECASE)
_KEYWORD_PASSWORD = re.compile(r"(password\s*=\s*)('[^']*'|\S+)", re.IGNORECASE)
# The characters that end a URL's user information early when left unescaped in a password.
_URL_DELIMITERS = re.compile(r"[#/?@:&=]")


def _userinfo_password(dsn: str) -> tuple[str, str, str] | None:
    """A URL DSN cut around the password of its user information: ``(head, password, tail)``.

    Not by ``urlsplit``: a password pasted unescaped may hold ``#``, ``/``, ``?`` or ``@``,
    and the host part ends at the first of those. The user information ends at the last
    ``@`` instead (when an ``@`` in the query is the last, more than the password is cut:
    a message then shows less, never the password)."""
    url = _URL_DSN.match(dsn)
    if url is None:
        return None
    scheme, rest = url.groups()
    at = rest.rfind("@")
    colon = rest.find(":", 0, max(at, 0))
    if at < 0 or colon < 0 or any(c in rest[:colon] for c in "/?#"):
        return None  # no password there, or the '@' lies beyond the host part
    return scheme + rest[: colon + 1], rest[colon + 1 : at], rest[at:]


def redact_dsn(dsn: str) -> str:
    """``dsn`` fit for a message: the password (in the userinfo or the query) is ``***``."""
    if _URL_DSN.match(dsn) is None:  # a libpq key=value string
        return _KEYWORD_PASSWORD.sub(r"\1***", dsn)
    cut = _userinfo_password(dsn)
    if cut is not None:
        head, _, tail = cut
        dsn = f"{head}***{tail}"
    return _QUERY_PASSWORD.sub(r"\1***", dsn)


def _secrets_of(dsn: str, *, pieces: bool = False) -> list[str]:
    """The literal password strings in ``dsn``, to scrub from any message.

    ``pieces``: also each part of a password between URL delimiters, for the messages of
    a DSN that did not parse, which quote the part of it the parser stopped at."""
    found = [m.group(2).strip("'") for m in _KEYWORD_PASSWORD.finditer(dsn)]
    found += [m.group(2) for m in _QUERY_PASSWORD.finditer(dsn)]
    cut = _userinfo_password(dsn)
    if cut is not None:
        found.append(cut[1])
    # The driver may quote it percent-decoded.
    out = {v for s in found for v in (s, unquote(s)) if v}
    if pieces:
        out |= {p for s in list(out) for p in _URL_DELIMITERS.split(s) if len(p) > 1}
    return sorted(out, key=len, reverse=True)


def schema_name(collection: str) -> str:
    """The PostgreSQL schema holding ``collection`` (validated; at most 63 bytes).

    Names too long for the prefix keep their start and get a hash of the whole name, so
    two long names never share a schema.
    """
    check_collection_name(collection)
    name = SCHEMA_PREFIX + collection
    if len(name) <= _MAX_IDENTIFIER:
        return name
    digest = hashlib.sha256(collection.encode()).hexdigest()[:16]
    keep = _MAX_IDENTIFIER - len(SCHEMA_PREFIX) - len(digest) - 1
    return f"{SCHEMA_PREFIX}{collection[:keep]}_{digest}"


def _quote(identifier: str) -> str:
    return '"' + identifier.replace('"', '""') + '"'


def _affected(status: str) -> int:
    """Row count from a command tag such as ``DELETE 3``."""
    tail = status.rsplit(" ", 1)[-1]
    return int(tail) if tail.isdigit() else 0


class PostgresMetadataStore:
    """``MetadataStoreProtocol`` on one PostgreSQL schema; create with ``await .open(dsn)``.

    Credentials come from the DSN or the libpq environment (``PGPASSWORD``, ``.pgpass``);
    messages show the DSN with its password replaced by ``***``.
    """

    def __init__(
        self, pool: Any, dsn: str, collection: str, timeout: float | None = DEFAULT_TIMEOUT
    ) -> None:
        self._pool = pool
        self._dsn = dsn
        self._timeout = timeout
        # The collection's uid when this store opened it: a write finding another one
        # (the collection dropped and made again meanwhile) is refused (``_write``).
        self._uid: str | None = None
        self.collection = collection
        self.schema = schema_name(collection)
        s = _quote(self.schema)
        self._s = s
        self._vocab: dict[str, int] | None = None
        # The erase marker's id when ``_vocab`` was read (see ``_MARKER``).
        self._vocab_marker: int | None = None
        self._closed = False
        self._errors = _driver_errors()
        pg = _driver()
        # What leaves a connection in doubt (no answer from the server, a client-side failure),
        # as opposed to an error the server answered with.
        self._broken = (pg.InterfaceError, pg.exceptions.InternalClientError, OSError)
        self._where = f"collection {collection!r}"
        self._current = (
            f"SELECT {_CHUNK_COLUMNS} FROM {s}.chunks c JOIN {s}.documents d"
            " ON d.id = c.document_id WHERE c.valid_to IS NULL"
        )
        # Every current chunk in source order, a document's metadata read with its first
        # chunk only: sorted once per document, not once per chunk (``MetadataCarry``).
        first_only = _CHUNK_COLUMNS.replace(
            "d.metadata", "CASE WHEN c.chunk_index = f.first THEN d.metadata END"
        )
        self._scan = (
            f"SELECT {first_only} FROM {s}.chunks c JOIN {s}.documents d"
            " ON d.id = c.document_id JOIN (SELECT document_id, version,"
            f" MIN(chunk_index) AS first FROM {s}.chunks WHERE valid_to IS NULL"
            " GROUP BY document_id, version) f"
            " ON f.document_id = c.document_id AND f.version = c.version"
            " WHERE c.valid_to IS NULL ORDER BY d.source, c.chunk_index"
        )
        self._any_version = (
            f"SELECT {_CHUNK_COLUMNS} FROM {s}.chunks c JOIN {_EVERY_VERSION.format(s=s)} d"
            " ON d.id = c.document_id AND d.version = c.version"
        )
        # A search's hits, a document version's metadata read with the first of its
        # hits only (``share_metadata`` hands it to the others): a long PDF's geometry
        # crosses the wire once per search, not once per hit.
        once = _CHUNK_COLUMNS.replace("d.metadata", "CASE WHEN c.key = f.first THEN d.metadata END")
        self._hits = (
            f"SELECT {once} FROM {s}.chunks c JOIN {_EVERY_VERSION.format(s=s)} d"
            " ON d.id = c.document_id AND d.version = c.version JOIN (SELECT document_id,"
            f" version, MIN(key) AS first FROM {s}.chunks WHERE key = ANY($1::bigint[])"
            " GROUP BY document_id, version) f"
            " ON f.document_id = c.document_id AND f.version = c.version"
            " WHERE c.key = ANY($1::bigint[])"
        )
        self._select_documents = f"SELECT {_DOCUMENT_COLUMNS.format(s=s)} FROM {s}.documents d"

    @property
    def dsn(self) -> str:
        """The DSN without its password."""
        return redact_dsn(self._dsn)

    @classmethod
    async def open(
        cls,
        dsn: str,
        collection: str = "default",
        *,
        create: bool = True,
        min_connections: int = 1,
        max_connections: int = 8,
        connect_timeout: float = 30.0,
        statement_timeout: float | None = None,
    ) -> PostgresMetadataStore:
        """Connect a pool, then create or check the collection's schema.

        ``statement_timeout``: seconds a statement may go unanswered before the call fails with a
        ``StorageError`` (``command_timeout``: None reads ``$GROUNDKIT_POSTGRES_TIMEOUT``,
        0 is none). Waiting for another writer's lock is not bounded by it."""
        pg = _driver()
        check_collection_name(collection)
        seconds = command_timeout(statement_timeout)
        with _connecting(dsn):
            pool = await pg.create_pool(
                dsn,
                min_size=min_connections,
                max_size=max_connections,
                timeout=connect_timeout,
                command_timeout=seconds,
                init=_keep_alive,
            )
        store = cls(pool, dsn, collection, seconds)
        try:
            await store._prepare(create)
        except BaseException:
            await store.close()
            raise
        return store

    @contextmanager
    def _mapped(self, what: str) -> Iterator[None]:
        """Turn driver errors into ``StorageError`` naming ``what``, without credentials."""
        if self._closed:
            raise StorageError(f"the metadata store of {self.collection!r} is closed")
        try:
            yield
        except GroundkitError:
            raise
        except TimeoutError:
            within = "in time" if self._timeout is None else f"within {self._timeout:g} s"
            raise StorageError(
                f"{self.collection!r}: could not {what}: the PostgreSQL server at {self.dsn} "
                f"did not answer {within} (${TIMEOUT_ENV} sets the limit)"
            ) from None
        except self._errors as exc:
            _raise(StorageError, f"{self.collection!r}: could not {what}", exc, self._dsn)

    @asynccontextmanager
    async def _connection(self) -> AsyncIterator[PoolConnectionProxy[asyncpg.Record]]:
        """A connection of the pool, cut rather than handed back when a statement on it
        timed out, was cancelled or lost the server: handing it back would wait (for the
        cancel request, the reset) on a server that may not answer again."""
        conn = await self._pool.acquire()
        try:
            yield conn
        except BaseException as exc:
            stalled = _stalled(exc)
            if stalled is not None or isinstance(exc, self._broken):
                conn.terminate()
            if stalled is not None and stalled is not exc:
                raise stalled from None  # not asyncpg's failed ROLLBACK that followed it
            raise
        finally:
            await self._pool.release(conn)

    async def _prepare(self, create: bool) -> None:
        with self._mapped("open the collection"):
            async with self._connection() as conn, conn.transaction():
                # Two processes creating one collection at once would race on the catalog;
                # the lock key is the schema's name hashed (seed 8: any fixed value will do).
                # Another process may hold it for a whole migration: no timeout.
                await conn.execute(
                    "SELECT pg_advisory_xact_lock(hashtextextended($1, 8))",
                    self.schema,
                    timeout=_UNBOUNDED,
                )
                exists = await conn.fetchval("SELECT to_regclass($1)", f"{self._s}.state")
                if exists is None:
                    if not create:
                        raise CollectionNotFoundError(
                            f"no collection {self.collection!r} at {self.dsn}; ingest something "
                            "first"
                        )
                    await conn.execute(f"CREATE SCHEMA IF NOT EXISTS {self._s}")
                    await conn.execute(_SCHEMA.format(s=self._s))
                    self._uid = uuid.uuid4().hex
                    await conn.execute(
                        f"INSERT INTO {self._s}.state (id, schema_version, collection, uid)"
                        " VALUES (1, $1, $2, $3)",
                        SCHEMA_VERSION,
                        self.collection,
                        self._uid,
                    )
                    return
                row = await conn.fetchrow(
                    f"SELECT schema_version, collection FROM {self._s}.state WHERE id = 1"
                )
                found = row[0] if row else None
                if row is not None and row[1] != self.collection:
                    raise StorageError(
                        f"schema {self.schema!r} at {self.dsn} holds collection {row[1]!r}, "
                        f"not {self.collection!r}"
                    )
                if isinstance(found, int) and found in _MIGRATIONS:
                    # Under the advisory lock: one process migrates, the others see it done.
                    found = await self._migrate(conn, found)
                if found == SCHEMA_VERSION:
                    uid = await conn.fetchval(f"SELECT uid FROM {self._s}.state WHERE id = 1")
                    self._uid = text_value(uid, "collection uid", self._where)
        if found != SCHEMA_VERSION:
            raise StorageError(
                f"collection {self.collection!r} (schema {self.schema!r} at {self.dsn}) has "
                f"schema version {found}, this groundkit reads version {SCHEMA_VERSION}: open it "
                "with the groundkit that wrote it, or drop the schema and ingest again"
            )

    async def _migrate(self, conn: Any, found: int) -> int:
        """Bring the schema from version ``found`` to ``SCHEMA_VERSION`` (caller's transaction)."""
        while found < SCHEMA_VERSION:
            # A migration rewrites whole tables: as long as it takes.
            await conn.execute(
                _MIGRATIONS[found].format(s=self._s, uid=uuid.uuid4().hex), timeout=_UNBOUNDED
            )
            if found == 2:
                await self._date_versions(conn)
            found += 1
            await conn.execute(
                f"UPDATE {self._s}.state SET schema_version = $1 WHERE id = 1", found
            )
        return found

    async def _date_versions(self, conn: Any) -> None:
        """Schema 3: every stored document becomes version 1, valid from its ingest time.

        The times are read here rather than cast in SQL, so a damaged one is named, not
        quoted, in the error.
        """
        rows = await conn.fetch(
            f"SELECT id, ingested_at FROM {self._s}.documents", timeout=_UNBOUNDED
        )
        await conn.execute(
            f"UPDATE {self._s}.documents d SET valid_from = u.start"
            " FROM unnest($1::text[], $2::float8[]) AS u(id, start) WHERE d.id = u.id",
            [row[0] for row in rows],
            [_ingest_seconds(row[0], row[1]) for row in rows],
            timeout=_UNBOUNDED,
        )
        await conn.execute(
            f"UPDATE {self._s}.chunks c SET valid_from = d.valid_from FROM {self._s}.documents d"
            " WHERE d.id = c.document_id",
            timeout=_UNBOUNDED,
        )

    async def close(self) -> None:
        """Close the pool; later calls raise ``StorageError``. Idempotent."""
        if self._closed:
            return
        self._closed = True
        try:
            await asyncio.wait_for(self._pool.close(), _CLOSE_TIMEOUT)
        except self._errors:  # includes the timeout
            self._pool.terminate()

    async def drop(self) -> None:
        """Delete the collection (its whole schema) and close the store."""

        async def once() -> None:
            async with self._connection() as conn:
                # Waits for the searches and the write under way: no timeout.
                await conn.execute(f"DROP SCHEMA IF EXISTS {self._s} CASCADE", timeout=_UNBOUNDED)

        try:
            with self._mapped("drop the collection"):
                await _past_deadlocks(once)
        finally:
            self._vocab = None
            await self.close()

    # -- plumbing ------------------------------------------------------------

    async def _fetch(self, what: str, sql: str, *args: Any) -> list[Any]:
        with self._mapped(what):
            async with self._connection() as conn:
                return list(await conn.fetch(sql, *args))

    async def _value(self, what: str, sql: str, *args: Any) -> Any:
        with self._mapped(what):
            async with self._connection() as conn:
                return await conn.fetchval(sql, *args)

    @asynccontextmanager
    async def _write(self, what: str) -> AsyncIterator[PoolConnectionProxy[asyncpg.Record]]:
        """A write transaction holding the collection's writer lock (the ``state`` row).

        The lock is waited for without a timeout (writers take turns). Under it the
        collection's uid is compared with the one seen at open: a collection dropped (and
        perhaps made again) meanwhile is refused before anything is written, and the
        vocabulary cache, whose ids were the old collection's, is dropped. Otherwise the
        cache goes back to what it was if the transaction does not commit: ids minted
        inside it are gone.
        """
        vocab_before = None if self._vocab is None else dict(self._vocab)
        replaced = False
        pg = _driver()
        try:
            with self._mapped(what):
                async with self._connection() as conn, conn.transaction():
                    try:
                        uid = await conn.fetchval(
                            f"SELECT uid FROM {self._s}.state WHERE id = 1 FOR UPDATE",
                            timeout=_UNBOUNDED,
                        )
                    except (pg.UndefinedTableError, pg.InvalidSchemaNameError):
                        uid = None
                    if uid != self._uid:
                        replaced = True
                        raise StorageError(
                            f"collection {self.collection!r} at {self.dsn} was dropped or made "
                            "again since this process opened it; open it again "
                            f"(nothing was written: could not {what})"
                        )
                    yield conn
        except BaseException:
            self._vocab = None if replaced else vocab_before
            raise

    async def _bump(self, conn: Any) -> int:
        """Bump the generation inside a ``_write`` transaction; returns the new value."""
        value = await conn.fetchval(
            f"UPDATE {self._s}.state SET generation = generation + 1 WHERE id = 1"
            " RETURNING generation"
        )
        return int_value(value, "generation", self._where)

    async def _cursor(
        self, what: str, sql: str, batch_size: int, *args: Any
    ) -> AsyncIterator[list[Any]]:
        """Rows of ``sql`` in batches through a server-side cursor (one snapshot)."""
        with self._mapped(what):
            async with self._connection() as conn, conn.transaction(readonly=True):
                cursor = await conn.cursor(sql, *args)
                while rows := await cursor.fetch(batch_size):
                    yield rows

    @asynccontextmanager
    async def _snapshot(self, what: str) -> AsyncIterator[PoolConnectionProxy[asyncpg.Record]]:
        """A read-only repeatable-read transaction: its reads all see one moment."""
        with self._mapped(what):
            async with (
                self._connection() as conn,
                conn.transaction(isolation="repeatable_read", readonly=True),
            ):
                yield conn

    # -- state ---------------------------------------------------------------

    async def _state(self, column: str) -> Any:
        return await self._value(
            f"read {column}", f"SELECT {column} FROM {self._s}.state WHERE id = 1"
        )

    async def generation(self) -> int:
        return int_value(await self._state("generation"), "generation", self._where)

    async def generations(self) -> Generations:
        rows = await self._fetch(
            "read the generations",
            f"SELECT generation, vectors_generation FROM {self._s}.state WHERE id = 1",
        )
        return generations_row(tuple(rows[0]) if rows else None, self._where)

    async def get_base_dir(self) -> str | None:
        return optional_text(await self._state("base_dir"), "base directory", self._where)

    async def set_base_dir(self, base_dir: str) -> None:
        async with self._write("set the base directory") as conn:
            await conn.execute(f"UPDATE {self._s}.state SET base_dir = $1 WHERE id = 1", base_dir)

    async def get_analyzer(self) -> str | None:
        return optional_text(await self._state("analyzer"), "analyzer", self._where)

    async def get_chunker(self) -> str | None:
        return optional_text(await self._state("chunker"), "chunker", self._where)

    async def bind_chunker(self, identity: str) -> str:
        """Bind the collection to the chunker ``identity`` unless bound; returns the bound one."""
        return await self._bind("chunker", identity)

    async def bind_analyzer(self, identity: str) -> str:
        """Bind the collection to ``identity`` unless bound; returns the bound identity."""
        return await self._bind("analyzer", identity)

    async def _bind(self, column: str, identity: str) -> str:
        """Compare-and-set one binding column of ``state`` (``column`` is ours, not input)."""
        async with self._write(f"bind the {column}") as conn:
            current = await conn.fetchval(f"SELECT {column} FROM {self._s}.state WHERE id = 1")
            if current is None:
                await conn.execute(
                    f"UPDATE {self._s}.state SET {column} = $1 WHERE id = 1", identity
                )
                current = identity
        return str(current)

    async def read_manifest(self) -> CollectionManifest | None:
        return manifest_value(await self._state("manifest"), self._where)

    async def bind_embedding(self, identity: EmbeddingIdentity) -> CollectionManifest:
        """Bind the collection to ``identity`` unless bound; returns the bound manifest."""
        async with self._write("bind the embedding model") as conn:
            raw = await conn.fetchval(f"SELECT manifest FROM {self._s}.state WHERE id = 1")
            manifest = manifest_value(raw, self._where)
            if manifest is None:
                manifest = CollectionManifest(**identity.model_dump(), created_at=now_iso())
                # A bump: open Retrievers must learn that dense search is now possible.
                await conn.execute(
                    f"UPDATE {self._s}.state SET manifest = $1, generation = generation + 1"
                    " WHERE id = 1",
                    manifest.model_dump_json(),
                )
        return manifest

    # -- documents -----------------------------------------------------------

    async def document_states(
        self, *, sources: Sequence[str] | None = None, under: str | None = None
    ) -> dict[str, DocumentState]:
        sql = (
            f"SELECT source, content_hash, source_class, extractor, metadata FROM {self._s}"
            ".documents"
        )
        if sources is None and under is None:
            rows = await self._fetch("read documents", sql)
            return {row[0]: document_state(row) for row in rows}
        low, high = prefix_range(under if under is not None else "")
        # The column's collation is "C" (byte order), so the range is the prefix.
        rows = await self._fetch(
            "read documents",
            f"{sql} WHERE source = ANY($1::text[])"
            " OR ($2::boolean AND (source = $3 OR (source > $4 AND source < $5)))",
            list(dict.fromkeys(sources or ())),
            under is not None,
            under or "",
            low,
            high,
        )
        return {row[0]: document_state(row) for row in rows}

    async def iter_documents(self) -> AsyncIterator[DocumentRecord]:
        sql = f"{self._select_documents} ORDER BY d.source"
        async for rows in self._cursor("read documents", sql, 1000):
            for row in rows:
                yield document_record(row, row[7], row[8], row[9])

    async def _term_ids(self, conn: Any, terms: set[str]) -> dict[str, int]:
        """Ids for ``terms``, creating missing ones; the caller holds the writer lock.

        Under that lock no other writer can mint ids, so the next id is the largest plus one:
        ids stay dense (BM25 sizes arrays by the largest id) and a term gets one id only.
        """
        marker = await conn.fetchval(f"SELECT id FROM {self._s}.terms WHERE term = $1", _MARKER)
        if self._vocab is None or marker != self._vocab_marker:
            # Read anew after an erase (of any process): an erased term's cached id
            # must not be written again.
            self._vocab = await self.vocabulary()
            self._vocab_marker = marker
        vocab = self._vocab
        missing = sorted(t for t in terms if t not in vocab)
        if not missing:
            return vocab
        rows = await conn.fetch(
            f"SELECT term, id FROM {self._s}.terms WHERE term = ANY($1::text[])", missing
        )
        for term, term_id in rows:  # written by another process since our cache was filled
            vocab[term] = int(term_id)
        new = [t for t in missing if t not in vocab]
        if new:
            first = int(
                await conn.fetchval(f"SELECT COALESCE(MAX(id), 0) + 1 FROM {self._s}.terms")
            )
            ids = list(range(first, first + len(new)))
            await conn.copy_records_to_table(
                "terms",
                schema_name=self.schema,
                columns=("id", "term"),
                records=zip(ids, new, strict=True),
            )
            vocab.update(zip(new, ids, strict=True))
        return vocab

    async def replace_documents(
        self,
        items: WriteItems,
        *,
        valid_as_of: datetime | None = None,
        keep_versions: int | None = None,
    ) -> frozenset[str]:
        """Write a batch of documents as one transaction, bumping the generation once.

        What was stored under each source is kept as that document's past version, or
        removed (``MetadataStoreProtocol.replace_documents`` has the rules). New rows go in
        by binary COPY, a round trip per table instead of one per row.
        """
        if not items:
            return frozenset()
        sources, counts = term_counts(items)
        check_storable(items, nul_allowed=False)
        check_keep(keep_versions)
        version_start(valid_as_of, time.time())  # a bad valid_as_of is refused before waiting
        what = repr(sources[0]) if len(sources) == 1 else f"{len(sources)} documents"
        async with self._write(f"store {what}") as conn:
            # Key order is commit order: a live index reads new chunks as the keys above the
            # largest it has seen, so a key must never become visible after a larger one.
            # Keys come from a sequence, which hands them out outside any transaction; they
            # are drawn (by the COPY below) only after this transaction took the state row
            # lock (``_write``, then this bump), which it holds until it commits. Writers
            # therefore draw keys one transaction at a time, in the order they commit.
            # Taken under the state row lock: a writer that waited for it starts its
            # version after the one committed meanwhile, not before it.
            now = write_moment(time.time())  # also ``ingested_at``: see ``write_moment``
            start = version_start(valid_as_of, now)
            stored = await conn.fetch(
                f"SELECT {STORED_ALREADY_COLUMNS} FROM {self._s}.documents"
                " WHERE source = ANY($1::text[])",
                sources,
            )
            same = stored_already(items, [tuple(row) for row in stored])
            if same:
                items = [item for item in items if item[0].source not in same]
                if not items:
                    return frozenset(same)  # nothing written, not even a generation
                sources, counts = term_counts(items)
            generation = await self._bump(conn)
            vocab = await self._term_ids(conn, {t for group in counts for c in group for t in c})
            existing = await conn.fetch(
                f"SELECT id, source, version, valid_from FROM {self._s}.documents"
                " WHERE source = ANY($1::text[])",
                sources,
            )
            plan = plan_versions(items, [tuple(row) for row in existing], start)
            if plan.foreign:
                await self._remove_documents(conn, plan.foreign, generation)
            if plan.next_version:
                await self._retire(conn, list(plan.next_version), start, generation, keep_versions)
            as_of = None if valid_as_of is None else iso_time(start)
            rows = document_rows(items, iso_time(now))
            fresh = [(*row, 1, start, as_of) for row in rows if row[0] not in plan.next_version]
            if fresh:
                await conn.copy_records_to_table(
                    "documents", schema_name=self.schema, columns=_DOCUMENT_INSERT, records=fresh
                )
            updated = [
                (row[0], *row[2:7], plan.next_version[row[0]], start, as_of)
                for row in rows
                if row[0] in plan.next_version
            ]
            if updated:
                await conn.executemany(
                    f"UPDATE {self._s}.documents SET content_hash = $2, ingested_at = $3,"
                    " source_class = $4, extractor = $5, metadata = $6, vectors_hash = NULL,"
                    " version = $7, valid_from = $8, valid_as_of = $9 WHERE id = $1",
                    updated,
                )
            chunks = [
                (*row, plan.next_version.get(row[1], 1), start)
                for row in chunk_rows(items, counts, vocab)
            ]
            if chunks:
                await conn.copy_records_to_table(
                    "chunks", schema_name=self.schema, columns=_CHUNK_INSERT, records=chunks
                )
        return frozenset(same)

    async def _log(
        self, conn: Any, generation: int, valid_to: float, change: str, *args: Any
    ) -> None:
        """Run ``change`` (a DELETE or UPDATE of ``chunks``, its parameters from ``$3``) and
        record in the change log that every chunk it touched leaves the current view at
        ``valid_to`` (``$2``; ``REMOVED``: it is gone) in ``generation``."""
        await conn.execute(
            f"WITH moved AS ({change} RETURNING key, term_ids, tfs)"
            f" INSERT INTO {self._s}.changes (generation, key, valid_to, term_ids, tfs)"
            " SELECT $1::bigint, key, $2::float8, term_ids, tfs FROM moved ORDER BY key",
            generation,
            valid_to,
            *args,
        )

    async def _retire(
        self, conn: Any, ids: list[str], start: float, generation: int, keep: int | None
    ) -> None:
        """End the current version of the documents ``ids`` at ``start``: its row is copied
        to ``document_versions`` and its chunks marked, or with ``keep == 0`` its chunks are
        deleted. Either way each chunk goes into the change log."""
        current = "valid_to IS NULL AND document_id = ANY($3::text[])"
        if keep == 0:
            await self._log(
                conn, generation, REMOVED, f"DELETE FROM {self._s}.chunks WHERE {current}", ids
            )
            # Keeping none means none: past versions an earlier write kept go too.
            await self._remove_versions(conn, generation, await self._trim(conn, 0, ids))
            return
        await conn.execute(
            f"INSERT INTO {self._s}.document_versions (document_id, {_VERSION_FIELDS},"
            " valid_from, valid_to, valid_as_of)"
            f" SELECT id, {_VERSION_FIELDS}, valid_from, $1, valid_as_of FROM {self._s}.documents"
            " WHERE id = ANY($2::text[])",
            start,
            ids,
        )
        await self._log(
            conn,
            generation,
            start,
            f"UPDATE {self._s}.chunks SET valid_to = $2 WHERE {current}",
            ids,
        )
        if keep is not None:
            await self._remove_versions(conn, generation, await self._trim(conn, keep, ids))

    async def _trim(self, conn: Any, keep: int, ids: list[str] | None) -> list[Any]:
        """Delete the ``document_versions`` rows beyond the ``keep`` newest of each document
        (of ``ids``, else of every one); returns their ``(document_id, version)``."""
        scope = "" if ids is None else " WHERE document_id = ANY($2::text[])"
        return list(
            await conn.fetch(
                f"DELETE FROM {self._s}.document_versions v USING (SELECT document_id, version,"
                " row_number() OVER (PARTITION BY document_id ORDER BY version DESC) AS newer"
                f" FROM {self._s}.document_versions{scope}) r"
                " WHERE v.document_id = r.document_id AND v.version = r.version"
                " AND r.newer > $1 RETURNING v.document_id, v.version",
                keep,
                *([] if ids is None else [ids]),
            )
        )

    async def _remove_versions(self, conn: Any, generation: int, versions: list[Any]) -> None:
        """Delete the chunks of these ``(document_id, version)`` pairs, logged as removed."""
        if versions:
            await self._log(
                conn,
                generation,
                REMOVED,
                f"DELETE FROM {self._s}.chunks c USING unnest($3::text[], $4::int[])"
                " AS p(id, version) WHERE c.document_id = p.id AND c.version = p.version",
                [row[0] for row in versions],
                [row[1] for row in versions],
            )

    async def _remove_documents(self, conn: Any, ids: list[str], generation: int) -> int:
        """Delete the documents ``ids`` (past versions go by cascade) after logging each of
        their chunks as removed."""
        await self._log(
            conn,
            generation,
            REMOVED,
            f"DELETE FROM {self._s}.chunks WHERE document_id = ANY($3::text[])",
            ids,
        )
        status = await conn.execute(
            f"DELETE FROM {self._s}.documents WHERE id = ANY($1::text[])", ids
        )
        return _affected(status)

    async def delete_documents(self, sources: Sequence[str]) -> frozenset[str]:
        if not sources:
            return frozenset()
        async with self._write("delete documents") as conn:
            # Locked as read: a writer that removed them first leaves them out here.
            rows = await conn.fetch(
                f"SELECT id, source FROM {self._s}.documents WHERE source = ANY($1::text[])"
                " FOR UPDATE",
                list(sources),
            )
            if not rows:
                return frozenset()
            generation = await self._bump(conn)
            await self._remove_documents(conn, [row[0] for row in rows], generation)
            return frozenset(row[1] for row in rows)

    async def purge_versions(self, keep: int) -> int:
        check_keep(keep)
        async with self._write("purge past versions") as conn:
            doomed = await self._trim(conn, keep, None)
            if doomed:  # the generation moves only when something went
                await self._remove_versions(conn, await self._bump(conn), doomed)
        return len(doomed)

    async def find_documents(
        self, *, document_ids: Sequence[str] = (), sources: Sequence[str] = ()
    ) -> list[DocumentRecord]:
        rows = await self._fetch(
            "look up documents",
            f"{self._select_documents} WHERE d.id = ANY($1::text[]) OR d.source = ANY($2::text[])"
            " ORDER BY d.source",
            list(dict.fromkeys(document_ids)),
            list(dict.fromkeys(sources)),
        )
        return [document_record(row, row[7], row[8], row[9]) for row in rows]

    async def erase_documents(self, sources: Sequence[str]) -> ErasedRows:
        async with self._write("erase documents") as conn:
            ids = [
                row[0]
                for row in await conn.fetch(
                    f"SELECT id FROM {self._s}.documents WHERE source = ANY($1::text[])",
                    list(dict.fromkeys(sources)),
                )
            ]
            documents = versions = chunks = 0
            if ids:
                versions = int(
                    await conn.fetchval(
                        f"SELECT COUNT(*) FROM {self._s}.document_versions"
                        " WHERE document_id = ANY($1::text[])",
                        ids,
                    )
                )
                chunks = int(
                    await conn.fetchval(
                        f"SELECT COUNT(*) FROM {self._s}.chunks"
                        " WHERE document_id = ANY($1::text[])",
                        ids,
                    )
                )
                documents = await self._remove_documents(conn, ids, await self._bump(conn))
            terms = await self._drop_unused_terms(conn)
        self._vocab = None
        return ErasedRows(documents=documents, versions=versions, chunks=chunks, terms=terms)

    async def _drop_unused_terms(self, conn: Any) -> int:
        """Delete every term no chunk row uses (inside the caller's ``_write``); returns
        how many went. The erase marker then moves above every id ever handed out."""
        top = await conn.fetchval(f"SELECT MAX(id) FROM {self._s}.terms")
        if top is None:
            return 0
        top = int(top)
        used = np.zeros(top + 1, dtype=bool)
        cursor = await conn.cursor(f"SELECT term_ids FROM {self._s}.chunks")
        while rows := await cursor.fetch(20_000):
            ids = np.frombuffer(b"".join(bytes(r[0]) for r in rows), dtype="<i4")
            used[ids[(ids >= 0) & (ids <= top)]] = True
        marker = await conn.fetchval(f"SELECT id FROM {self._s}.terms WHERE term = $1", _MARKER)
        unused = [
            int(row[0])
            for row in await conn.fetch(f"SELECT id FROM {self._s}.terms")
            if not used[row[0]] and row[0] != marker
        ]
        if not unused:
            return 0
        await conn.execute(f"DELETE FROM {self._s}.terms WHERE id = ANY($1::int[])", unused)
        await conn.execute(f"DELETE FROM {self._s}.terms WHERE term = $1", _MARKER)
        await conn.execute(
            f"INSERT INTO {self._s}.terms (id, term) VALUES ($1, $2)", top + 1, _MARKER
        )
        return len(unused)

    async def compact(self) -> Compaction:
        """``VACUUM (FULL, ANALYZE)`` of the collection's tables: each is rewritten into
        new files and the old ones deleted, so removed rows leave no bytes in them. It
        holds an exclusive lock on each table while it runs (searches wait). The
        server's write-ahead log, its archive and backups are the server's: not here."""
        size_sql = (
            "SELECT COALESCE(SUM(pg_total_relation_size(c.oid)), 0) FROM pg_class c"
            " JOIN pg_namespace n ON n.oid = c.relnamespace"
            " WHERE n.nspname = $1 AND c.relkind = 'r'"
        )
        tables = ", ".join(f"{self._s}.{table}" for table in _TABLES)
        with self._mapped("vacuum the collection's tables"):
            async with self._connection() as conn:
                before = int(await conn.fetchval(size_sql, self.schema))
                # Rewrites every table, after waiting for the searches under way: no timeout.
                await conn.execute(f"VACUUM (FULL, ANALYZE) {tables}", timeout=_UNBOUNDED)
                after = int(await conn.fetchval(size_sql, self.schema))
        return Compaction(bytes_reclaimed=max(0, before - after))

    async def collection_uid(self) -> str:
        return text_value(await self._state("uid"), "collection uid", self._where)

    async def term_ids(self, terms: Sequence[str]) -> dict[str, int]:
        wanted = sorted(set(terms))
        if not wanted:
            return {}
        if self._vocab is not None and all(t in self._vocab for t in wanted):
            return {t: self._vocab[t] for t in wanted}
        rows = await self._fetch(
            "look up terms",
            f"SELECT term, id FROM {self._s}.terms WHERE term = ANY($1::text[])",
            wanted,
        )
        return {str(term): int(term_id) for term, term_id in rows}

    async def postings_since(
        self, after_key: int, batch_size: int = 50_000
    ) -> AsyncIterator[ChunkPostings]:
        sql = f"SELECT {_POSTING_COLUMNS} FROM {self._s}.chunks WHERE key > $1 ORDER BY key"
        async for rows in self._cursor("read postings", sql, batch_size, int(after_key)):
            yield postings_from_rows(rows)

    async def changes_since(self, generation: int) -> ChangeLog:
        """The floor and the entries from one snapshot: a prune committing between the two
        reads cannot make a log with a gap look complete."""
        async with self._snapshot("read the change log") as conn:
            floor = await conn.fetchval(f"SELECT changes_floor FROM {self._s}.state WHERE id = 1")
            rows = await conn.fetch(
                f"SELECT key, valid_to, term_ids, tfs FROM {self._s}.changes"
                " WHERE generation > $1 ORDER BY seq",
                int(generation),
            )
        floor = int_value(floor, "change log floor", self._where)
        return change_log([tuple(row) for row in rows], complete=floor <= generation + 1)

    async def lexical_delta(self, after_key: int, since_generation: int) -> LexicalDelta:
        async with self._snapshot("read the changes since the last search") as conn:
            state = await conn.fetchrow(
                f"SELECT generation, changes_floor, live_chunks FROM {self._s}.state WHERE id = 1"
            )
            changes = await conn.fetch(
                f"SELECT key, valid_to, term_ids, tfs FROM {self._s}.changes"
                " WHERE generation > $1 ORDER BY seq",
                int(since_generation),
            )
            postings = await conn.fetch(
                f"SELECT {_POSTING_COLUMNS} FROM {self._s}.chunks WHERE key > $1 ORDER BY key",
                int(after_key),
            )
        if state is None:
            raise damaged(self._where, "collection state")
        generation = int_value(state[0], "generation", self._where)
        floor = int_value(state[1], "change log floor", self._where)
        rows = [tuple(row) for row in postings]
        return LexicalDelta(
            generation=generation,
            changes=change_log(
                [tuple(row) for row in changes], complete=floor <= since_generation + 1
            ),
            postings=[
                postings_from_rows(rows[i : i + 50_000]) for i in range(0, len(rows), 50_000)
            ],
            live_chunks=live_count(state[2]),
        )

    async def prune_changes(self, through_generation: int) -> None:
        async with self._write("prune the change log") as conn:
            await conn.execute(
                f"DELETE FROM {self._s}.changes WHERE generation <= $1", int(through_generation)
            )
            await conn.execute(
                f"UPDATE {self._s}.state SET changes_floor = GREATEST(changes_floor, $1)"
                " WHERE id = 1",
                int(through_generation) + 1,
            )

    # -- chunks --------------------------------------------------------------

    async def documents_missing_vectors(self) -> list[str]:
        """Ids of documents whose current content has no confirmed vectors."""
        rows = await self._fetch(
            "read documents",
            f"SELECT id FROM {self._s}.documents"
            " WHERE vectors_hash IS NULL OR vectors_hash <> content_hash ORDER BY source",
        )
        return [row[0] for row in rows]

    async def mark_vectors_stored_many(self, items: Sequence[tuple[str, str]]) -> None:
        """One statement for all pairs; a pair whose content changed meanwhile matches nothing."""
        if not items:
            return
        async with self._write("confirm stored vectors") as conn:
            await conn.execute(
                f"UPDATE {self._s}.documents d SET vectors_hash = v.hash"
                " FROM unnest($1::text[], $2::text[]) AS v(id, hash)"
                " WHERE d.id = v.id AND d.content_hash = v.hash",
                [document_id for document_id, _ in items],
                [content_hash for _, content_hash in items],
            )
            await self._bump_vectors(conn)

    async def forget_vectors(self, document_ids: Sequence[str] | None = None) -> None:
        async with self._write("forget stored vectors") as conn:
            if document_ids is None:
                await conn.execute(f"UPDATE {self._s}.documents SET vectors_hash = NULL")
            else:
                await conn.execute(
                    f"UPDATE {self._s}.documents SET vectors_hash = NULL"
                    " WHERE id = ANY($1::text[])",
                    list(dict.fromkeys(document_ids)),
                )
            await self._bump_vectors(conn)

    async def bump_vectors_generation(self) -> None:
        async with self._write("record a vector write") as conn:
            await self._bump_vectors(conn)

    async def _bump_vectors(self, conn: Any) -> None:
        await conn.execute(
            f"UPDATE {self._s}.state SET vectors_generation = vectors_generation + 1 WHERE id = 1"
        )

    async def confirmed_vectors(self) -> ConfirmedVectors:
        """Both reads in one snapshot, so they describe one moment."""
        async with self._snapshot("read confirmed vectors") as conn:
            documents = await conn.fetch(
                f"SELECT id FROM {self._s}.documents WHERE vectors_hash = content_hash"
            )
            chunks = await conn.fetch(
                f"SELECT c.id FROM {self._s}.chunks c JOIN {self._s}.documents d"
                " ON d.id = c.document_id"
                " WHERE c.valid_to IS NULL AND d.vectors_hash = d.content_hash"
            )
        return ConfirmedVectors(
            frozenset(row[0] for row in documents), frozenset(row[0] for row in chunks)
        )

    async def confirmed_vector_count(self) -> int:
        value = await self._value(
            "count confirmed vectors",
            f"SELECT (SELECT live_chunks FROM {self._s}.state WHERE id = 1)"
            f" - (SELECT COUNT(*) FROM {self._s}.chunks WHERE valid_to IS NULL AND document_id"
            f" IN (SELECT id FROM {self._s}.documents"
            " WHERE vectors_hash IS NULL OR vectors_hash <> content_hash))",
        )
        return int_value(value, "confirmed vector count", self._where)

    async def document_ids(self) -> set[str]:
        rows = await self._fetch("read documents", f"SELECT id FROM {self._s}.documents")
        return {row[0] for row in rows}

    async def get_chunks_for_documents(
        self, document_ids: Sequence[str]
    ) -> dict[str, list[StoredChunk]]:
        """Current chunks of several documents, each list in chunk order; absent ids are
        left out."""
        if not document_ids:
            return {}
        rows = await self._fetch(
            "read chunks",
            f"{self._current} AND c.document_id = ANY($1::text[])"
            " ORDER BY c.document_id, c.chunk_index",
            list(dict.fromkeys(document_ids)),
        )
        out: dict[str, list[StoredChunk]] = {}
        for row in rows:
            stored = stored_chunk(row)
            out.setdefault(stored.document_id, []).append(stored)
        return out

    async def get_chunks_by_ids(self, chunk_ids: Sequence[str]) -> Mapping[str, StoredChunk]:
        if not chunk_ids:
            return {}
        rows = await self._fetch(
            "read chunks", f"{self._current} AND c.id = ANY($1::text[])", list(chunk_ids)
        )
        return {row[1]: stored_chunk(row) for row in rows}

    async def chunk_count(self) -> int:
        value = await self._value(
            # Kept by the triggers (``_LIVE_TRIGGERS``): no scan of the chunk index.
            "count chunks",
            f"SELECT live_chunks FROM {self._s}.state WHERE id = 1",
        )
        return int(value)

    async def get_chunk(self, chunk_id: str, version: int | None = None) -> StoredChunk | None:
        where = "c.id = $1"
        args: list[Any] = [chunk_id]
        if version is not None:
            where += " AND c.version = $2"
            args.append(int(version))
        # The current row first, then the newest past one, each on its partial index.
        for when in ("c.valid_to IS NULL", "c.valid_to IS NOT NULL"):
            rows = await self._fetch(
                "read a chunk",
                f"{self._any_version} WHERE {where} AND {when} ORDER BY c.version DESC LIMIT 1",
                *args,
            )
            if rows:
                return stored_chunk(rows[0])
        return None

    async def current_chunk_ids(self, keys: Sequence[int]) -> Mapping[int, str]:
        if not keys:
            return {}
        rows = await self._fetch(
            "read chunk ids",
            f"SELECT key, id FROM {self._s}.chunks"
            " WHERE key = ANY($1::bigint[]) AND valid_to IS NULL",
            [int(k) for k in keys],
        )
        return {int(key): str(chunk_id) for key, chunk_id in rows}

    async def get_chunks_by_keys(self, keys: Sequence[int]) -> Mapping[int, StoredChunk]:
        if not keys:
            return {}
        rows = await self._fetch("read chunks", self._hits, [int(k) for k in keys])
        return {int(row[0]): stored_hit(row) for row in share_metadata(rows)}

    async def iter_chunks(self, batch_size: int = 1000) -> AsyncIterator[list[StoredChunk]]:
        carry = MetadataCarry()  # each document's metadata is sorted once (``_scan``)
        async for rows in self._cursor("read chunks", self._scan, batch_size):
            yield [stored_chunk(r) for r in carry.fill(rows)]

    # -- lexical statistics --------------------------------------------------

    async def vocabulary(self, after: int = 0) -> dict[str, int]:
        rows = await self._fetch(
            "read the vocabulary",
            f"SELECT term, id FROM {self._s}.terms WHERE id > $1 AND term <> $2",
            int(after),
            _MARKER,
        )
        return {term: int(term_id) for term, term_id in rows}

    async def chunk_owners(self) -> ChunkOwners:
        """Both reads in one snapshot, as the protocol asks. Owners are document versions:
        a chunk of version 1 filters by the fields version 1 had."""
        async with self._snapshot("read chunk owners") as conn:
            documents = await conn.fetch(
                f"SELECT id, version, metadata, true FROM {self._s}.documents UNION ALL"
                f" SELECT document_id, version, metadata, false FROM {self._s}.document_versions"
            )
            chunks = await conn.fetch(f"SELECT key, document_id, version FROM {self._s}.chunks")
        document_ids = [row[0] for row in documents]
        fields = [
            fields_of(parse_metadata(row[2], f"document row {row[0]!r}")) for row in documents
        ]
        position = {(row[0], row[1]): i for i, row in enumerate(documents)}
        try:
            owners = np.fromiter(
                (position[(row[1], row[2])] for row in chunks), dtype=np.int64, count=len(chunks)
            )
        except KeyError:
            raise damaged(self._where, "chunk owner (a chunk without its document)") from None
        return ChunkOwners(
            keys=np.fromiter((row[0] for row in chunks), dtype=np.int64, count=len(chunks)),
            owners=owners,
            document_ids=document_ids,
            fields=fields,
            current=[bool(row[3]) for row in documents],
        )

    async def iter_postings(self, batch_size: int = 50_000) -> AsyncIterator[ChunkPostings]:
        """Every retained chunk in canonical order (the ``chunks_canonical`` index)."""
        sql = (
            f"SELECT {_POSTING_COLUMNS} FROM {self._s}.chunks"
            " ORDER BY content_hash, chunk_index, document_id, key"
        )
        async for rows in self._cursor("read postings", sql, batch_size):
            yield postings_from_rows(rows)


def _ingest_seconds(document_id: Any, ingested_at: Any) -> float:
    """A stored ingest time (ISO 8601 text) as seconds since the epoch; UTC when naive."""
    where = f"document row {document_id!r}" if isinstance(document_id, str) else "a document row"
    try:
        moment = datetime.fromisoformat(text_value(ingested_at, "ingest time", where))
    except ValueError:
        raise damaged(where, "ingest time") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.timestamp()


def _stalled(exc: BaseException) -> BaseException | None:
    """The timeout or cancellation behind ``exc``, or None. asyncpg's ROLLBACK after one
    fails at once ("another operation is cancelling"), and that error would hide it."""
    seen: BaseException | None = exc
    for _ in range(4):
        if seen is None:
            break
        if isinstance(seen, (TimeoutError, asyncio.CancelledError)):
            return seen
        seen = seen.__context__
    return None


@contextmanager
def _connecting(dsn: str) -> Iterator[None]:
    """Map a failure to connect: the caller's (DSN, login, database) or the server's."""
    pg = _driver()
    try:
        yield
    except (pg.InvalidAuthorizationSpecificationError, pg.InvalidCatalogNameError) as exc:
        _raise(ConfigurationError, f"cannot connect to {redact_dsn(dsn)}", exc, dsn)
    except (ValueError, OverflowError, pg.ClientConfigurationError) as exc:
        # An out-of-range port is an OverflowError from the socket layer.
        _raise(ConfigurationError, f"bad PostgreSQL DSN {redact_dsn(dsn)}", exc, dsn, pieces=True)
    except _driver_errors() as exc:
        _raise(StorageError, f"cannot connect to {redact_dsn(dsn)}", exc, dsn)


@asynccontextmanager
async def _connected(dsn: str, connect_timeout: float, what: str) -> AsyncIterator[Any]:
    """One connection for one task (``what``, for messages), with the statement timeout
    and keepalives of a store's pool; driver errors after connecting become
    ``StorageError`` naming the task, not the connection."""
    pg = _driver()
    with _connecting(dsn):
        conn = await pg.connect(dsn, timeout=connect_timeout, command_timeout=command_timeout())
    try:
        await _keep_alive(conn)
        yield conn
    except GroundkitError:
        raise
    except TimeoutError:
        raise StorageError(
            f"could not {what}: the PostgreSQL server at {redact_dsn(dsn)} did not answer "
            f"in time (${TIMEOUT_ENV} sets the limit)"
        ) from None
    except _driver_errors() as exc:
        _raise(StorageError, f"could not {what}", exc, dsn)
    finally:
        try:
            await conn.close(timeout=_CLOSE_TIMEOUT)
        except (Exception, asyncio.CancelledError):
            conn.terminate()


async def collection_names(dsn: str, *, connect_timeout: float = 30.0) -> list[str]:
    """Names of the groundkit collections in the database at ``dsn``, sorted.

    Schemas this role may not read (another team's collections) are left out: they are
    not its collections to list, and reading them would fail."""
    pg = _driver()
    names = []
    async with _connected(
        dsn, connect_timeout, f"list the collections at {redact_dsn(dsn)}"
    ) as conn:
        schemas = await conn.fetch(
            "SELECT n.nspname FROM pg_namespace n JOIN pg_class c ON c.relnamespace = n.oid"
            " WHERE starts_with(n.nspname, $1) AND c.relname = 'state' AND c.relkind = 'r'"
            " AND has_schema_privilege(n.oid, 'USAGE') AND has_table_privilege(c.oid, 'SELECT')",
            SCHEMA_PREFIX,
        )
        for row in schemas:
            try:
                names.append(await conn.fetchval(f"SELECT collection FROM {_quote(row[0])}.state"))
            except (
                pg.UndefinedTableError,
                pg.InvalidSchemaNameError,
                pg.InsufficientPrivilegeError,
            ):
                continue  # dropped, or its grant revoked, since the listing
    return sorted(str(n) for n in names if n)


async def collection_exists(dsn: str, collection: str, *, connect_timeout: float = 30.0) -> bool:
    """Whether ``collection`` exists in the database at ``dsn``: its own schema is read,
    no other (another's schema this role may not read must not stop it)."""
    s = _quote(schema_name(collection))
    async with _connected(dsn, connect_timeout, f"open collection {collection!r}") as conn:
        if await conn.fetchval("SELECT to_regclass($1)", f"{s}.state") is None:
            return False
        found = await conn.fetchval(f"SELECT collection FROM {s}.state WHERE id = 1")
    return bool(found == collection)


async def drop_if_unwritten(dsn: str, collection: str, *, connect_timeout: float = 30.0) -> bool:
    """Drop ``collection``'s schema if nothing was ever written to it; whether it did.

    Decided under the collection's writer lock (its ``state`` row, which every write
    takes first) in the transaction that drops it, so a write another process commits
    meanwhile is either seen (nothing is dropped) or finds the schema gone (its write
    fails), never lost. The lock and the drop wait as long as they must."""
    s = _quote(schema_name(collection))
    what = f"remove the unused collection {collection!r}"

    async with _connected(dsn, connect_timeout, what) as conn:

        async def once() -> bool:
            async with conn.transaction():
                if await conn.fetchval("SELECT to_regclass($1)", f"{s}.state") is None:
                    return False
                row = await conn.fetchrow(
                    f"SELECT generation, manifest FROM {s}.state WHERE id = 1 FOR UPDATE",
                    timeout=_UNBOUNDED,
                )
                if row is None or not never_written(row["generation"], row["manifest"]):
                    return False
                await conn.execute(f"DROP SCHEMA {s} CASCADE", timeout=_UNBOUNDED)
            return True

        return await _past_deadlocks(once)


async def _past_deadlocks(attempt: Callable[[], Awaitable[_T]]) -> _T:
    """``attempt()``, made again when PostgreSQL ended it as one side of a deadlock.

    Only drops come here: a drop taking the schema's tables in its order can meet a
    search taking them in another, and the server aborts the drop, which waited first.
    Its transaction rolled back whole, so it can simply run again once the search is
    through (``_DROP_ATTEMPTS`` times, pausing ``_DROP_PAUSE`` s, doubled each time)."""
    deadlock = _driver().DeadlockDetectedError
    pause = _DROP_PAUSE
    for _ in range(_DROP_ATTEMPTS - 1):
        try:
            return await attempt()
        except deadlock:
            await asyncio.sleep(pause)
            pause *= 2
    return await attempt()


# asyncpg's message for a value it could not encode quotes the value (a whole
# list of terms, say): only the part before the value is kept.
_ECHOED_INPUT = re.compile(
    r"^(invalid input (?:for query argument \$\d+|in executemany\(\) argument sequence"
    r" element #\d+|for argument \$\d+)).*",
    re.DOTALL,
)


def _driver_message(exc: BaseException) -> str:
    """The driver's message without the parts that may quote stored values.

    asyncpg appends the server's DETAIL and HINT lines ("Key (term)=(...)
    already exists", "Failing row contains (...)"), which echo row contents;
    only the first line is kept, and a client-side encoding failure is cut
    before the value it quotes.
    """
    text = str(exc).strip()
    first = text.splitlines()[0] if text else ""
    echoed = _ECHOED_INPUT.match(first)
    if echoed is not None:
        first = echoed.group(1)
    return f"{type(exc).__name__}: {first}" if first else type(exc).__name__


def _raise(
    kind: type[GroundkitError], what: str, exc: BaseException, dsn: str, *, pieces: bool = False
) -> NoReturn:
    """Raise ``kind`` with the driver's message (``_driver_message``), passwords blanked out
    of the whole text (``pieces``: ``_secrets_of``)."""
    message = f"{what}: {_driver_message(exc)}"
    for secret in _secrets_of(dsn, pieces=pieces):
        message = message.replace(secret, "***")
    raise kind(message) from None
