"""PostgreSQL metadata store: one schema per collection, via an asyncpg pool (ADR 0024).

The same semantics as ``SQLiteMetadataStore``: a versioned schema, a generation bumped by
every write, each write one transaction, term ids that only grow. What SQLite gets from its
single writer lock, this store gets from a row lock on the collection's ``state`` row, taken
first in every write transaction: writers of one collection, in any process, take turns, so
new term ids are dense and never handed out twice, and generations never go backwards.
Readers take no lock (MVCC) and see whole transactions only.

asyncpg is an optional dependency (``pip install groundkit[postgres]``), imported when a
store is opened.
"""

from __future__ import annotations

import asyncio
import hashlib
import re
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from contextlib import asynccontextmanager, contextmanager
from typing import TYPE_CHECKING, Any, NoReturn
from urllib.parse import unquote, urlsplit, urlunsplit

import numpy as np

from groundkit.contracts import CollectionManifest, DocumentRecord, EmbeddingIdentity, fields_of
from groundkit.errors import ConfigurationError, GroundkitError, StorageError
from groundkit.storage._rows import (
    WriteItems,
    check_fields_value,
    check_storable,
    chunk_rows,
    document_record,
    document_rows,
    document_state,
    generations_row,
    int_value,
    manifest_value,
    now_iso,
    optional_text,
    parse_metadata,
    postings_from_blobs,
    stored_chunk,
    term_counts,
)
from groundkit.storage.names import check_collection_name
from groundkit.storage.protocols import (
    ChunkOwners,
    ChunkPostings,
    ConfirmedVectors,
    DocumentState,
    Generations,
    StoredChunk,
)

if TYPE_CHECKING:
    import asyncpg
    from asyncpg.pool import PoolConnectionProxy

__all__ = [
    "SCHEMA_PREFIX",
    "SCHEMA_VERSION",
    "PostgresMetadataStore",
    "collection_names",
    "redact_dsn",
    "schema_name",
]

SCHEMA_VERSION = 2
# Applied in order, each with its version bump, inside the opening transaction.
_MIGRATIONS: dict[int, str] = {
    1: "ALTER TABLE {s}.state ADD COLUMN vectors_generation BIGINT NOT NULL DEFAULT 0",
}
SCHEMA_PREFIX = "gk_"
_MAX_IDENTIFIER = 63  # PostgreSQL's NAMEDATALEN - 1, in bytes (names here are ASCII)
# Seconds ``close`` waits for borrowed connections (an abandoned iterator) before cutting them.
_CLOSE_TIMEOUT = 10.0

# Text compared or ordered by the store is COLLATE "C" (byte order, as SQLite's BINARY):
# canonical order and source order must not depend on the database's locale.
_SCHEMA = """
CREATE TABLE {s}.state (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    schema_version INTEGER NOT NULL,
    collection TEXT NOT NULL,
    generation BIGINT NOT NULL DEFAULT 0,
    vectors_generation BIGINT NOT NULL DEFAULT 0,
    base_dir TEXT,
    analyzer TEXT,
    manifest TEXT
);
CREATE TABLE {s}.documents (
    id TEXT COLLATE "C" PRIMARY KEY,
    source TEXT COLLATE "C" NOT NULL UNIQUE,
    content_hash TEXT COLLATE "C" NOT NULL,
    ingested_at TEXT NOT NULL,
    source_class TEXT NOT NULL,
    extractor TEXT,
    metadata TEXT NOT NULL DEFAULT '{{}}',
    vectors_hash TEXT COLLATE "C"
);
CREATE TABLE {s}.chunks (
    key BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    id TEXT COLLATE "C" NOT NULL UNIQUE,
    document_id TEXT COLLATE "C" NOT NULL REFERENCES {s}.documents(id) ON DELETE CASCADE,
    chunk_index INTEGER NOT NULL,
    content TEXT NOT NULL,
    start_offset INTEGER NOT NULL,
    end_offset INTEGER NOT NULL,
    content_hash TEXT COLLATE "C" NOT NULL,
    term_ids BYTEA NOT NULL,
    tfs BYTEA NOT NULL
);
CREATE INDEX chunks_by_document ON {s}.chunks(document_id, chunk_index);
CREATE INDEX chunks_canonical ON {s}.chunks(content_hash, chunk_index, document_id)
    INCLUDE (key);
CREATE TABLE {s}.terms (
    id INTEGER PRIMARY KEY,
    term TEXT COLLATE "C" NOT NULL UNIQUE
);
"""

_CHUNK_COLUMNS = (
    "c.key, c.id, c.chunk_index, c.content, c.start_offset, c.end_offset, "
    "d.id, d.source, d.content_hash, d.ingested_at, d.source_class, d.extractor, d.metadata"
)
_DOCUMENT_COLUMNS = (
    "d.id, d.source, d.content_hash, d.ingested_at, d.source_class, d.extractor, d.metadata,"
    " (SELECT COUNT(*) FROM {s}.chunks c WHERE c.document_id = d.id)"
)
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
)
_DOCUMENT_INSERT = (
    "id",
    "source",
    "content_hash",
    "ingested_at",
    "source_class",
    "extractor",
    "metadata",
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


def redact_dsn(dsn: str) -> str:
    """``dsn`` fit for a message: the password (in the userinfo or the query) is ``***``."""
    try:
        parts = urlsplit(dsn)
    except ValueError:
        return "<unparsable DSN>"
    if not parts.scheme:  # a libpq key=value string
        return re.sub(r"(password\s*=\s*)('[^']*'|\S+)", r"\1***", dsn, flags=re.IGNORECASE)
    netloc = parts.netloc
    if "@" in netloc:
        userinfo, _, hosts = netloc.rpartition("@")
        user = userinfo.split(":", 1)[0]
        netloc = f"{user}:***@{hosts}" if ":" in userinfo else f"{user}@{hosts}"
    query = re.sub(r"(^|&)(password=)[^&]*", r"\1\2***", parts.query, flags=re.IGNORECASE)
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


def _secrets_of(dsn: str) -> list[str]:
    """The literal password strings in ``dsn``, to scrub from any driver message."""
    found = re.findall(r"password\s*=\s*('[^']*'|[^&\s]+)", dsn, flags=re.IGNORECASE)
    out = [s.strip("'") for s in found]
    with_user = re.match(r"^[a-z][a-z0-9+.-]*://[^/]*?:([^/]*)@", dsn, flags=re.IGNORECASE)
    if with_user:
        out.append(with_user.group(1))
    # The driver may quote it percent-decoded.
    return sorted({v for s in out for v in (s, unquote(s)) if v}, key=len, reverse=True)


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

    def __init__(self, pool: Any, dsn: str, collection: str) -> None:
        self._pool = pool
        self._dsn = dsn
        self.collection = collection
        self.schema = schema_name(collection)
        s = _quote(self.schema)
        self._s = s
        self._vocab: dict[str, int] | None = None
        self._closed = False
        self._errors = _driver_errors()
        self._where = f"collection {collection!r}"
        self._select_chunks = f"SELECT {_CHUNK_COLUMNS} FROM {s}.chunks c JOIN {s}.documents d"
        self._select_chunks += " ON d.id = c.document_id"
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
    ) -> PostgresMetadataStore:
        """Connect a pool, then create or check the collection's schema."""
        pg = _driver()
        check_collection_name(collection)
        with _connecting(dsn):
            pool = await pg.create_pool(
                dsn,
                min_size=min_connections,
                max_size=max_connections,
                timeout=connect_timeout,
            )
        store = cls(pool, dsn, collection)
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
        except self._errors as exc:
            _raise(StorageError, f"{self.collection!r}: could not {what}", exc, self._dsn)

    async def _prepare(self, create: bool) -> None:
        with self._mapped("open the collection"):
            async with self._pool.acquire() as conn, conn.transaction():
                # Two processes creating one collection at once would race on the catalog;
                # the lock key is the schema's name hashed (seed 8: any fixed value will do).
                await conn.execute(
                    "SELECT pg_advisory_xact_lock(hashtextextended($1, 8))", self.schema
                )
                exists = await conn.fetchval("SELECT to_regclass($1)", f"{self._s}.state")
                if exists is None:
                    if not create:
                        raise StorageError(
                            f"no collection {self.collection!r} at {self.dsn}; ingest something "
                            "first"
                        )
                    await conn.execute(f"CREATE SCHEMA IF NOT EXISTS {self._s}")
                    await conn.execute(_SCHEMA.format(s=self._s))
                    await conn.execute(
                        f"INSERT INTO {self._s}.state (id, schema_version, collection)"
                        " VALUES (1, $1, $2)",
                        SCHEMA_VERSION,
                        self.collection,
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
                    while found < SCHEMA_VERSION:
                        await conn.execute(_MIGRATIONS[found].format(s=self._s))
                        found += 1
                        await conn.execute(
                            f"UPDATE {self._s}.state SET schema_version = $1 WHERE id = 1", found
                        )
        if found != SCHEMA_VERSION:
            raise StorageError(
                f"collection {self.collection!r} (schema {self.schema!r} at {self.dsn}) has "
                f"schema version {found}, this groundkit reads version {SCHEMA_VERSION}: open it "
                "with the groundkit that wrote it, or drop the schema and ingest again"
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
        try:
            with self._mapped("drop the collection"):
                await self._pool.execute(f"DROP SCHEMA IF EXISTS {self._s} CASCADE")
        finally:
            self._vocab = None
            await self.close()

    # -- plumbing ------------------------------------------------------------

    async def _fetch(self, what: str, sql: str, *args: Any) -> list[Any]:
        with self._mapped(what):
            return list(await self._pool.fetch(sql, *args))

    async def _value(self, what: str, sql: str, *args: Any) -> Any:
        with self._mapped(what):
            return await self._pool.fetchval(sql, *args)

    @asynccontextmanager
    async def _write(self, what: str) -> AsyncIterator[PoolConnectionProxy[asyncpg.Record]]:
        """A write transaction holding the collection's writer lock (the ``state`` row).

        The vocabulary cache goes back to what it was if the transaction does not commit:
        ids minted inside it are gone.
        """
        vocab_before = None if self._vocab is None else dict(self._vocab)
        try:
            with self._mapped(what):
                async with self._pool.acquire() as conn, conn.transaction():
                    await conn.execute(f"SELECT 1 FROM {self._s}.state WHERE id = 1 FOR UPDATE")
                    yield conn
        except BaseException:
            self._vocab = vocab_before
            raise

    async def _cursor(self, what: str, sql: str, batch_size: int) -> AsyncIterator[list[Any]]:
        """Rows of ``sql`` in batches through a server-side cursor (one snapshot)."""
        with self._mapped(what):
            async with self._pool.acquire() as conn, conn.transaction(readonly=True):
                cursor = await conn.cursor(sql)
                while rows := await cursor.fetch(batch_size):
                    yield rows

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
        await self._value(
            "set the base directory",
            f"UPDATE {self._s}.state SET base_dir = $1 WHERE id = 1",
            base_dir,
        )

    async def get_analyzer(self) -> str | None:
        return optional_text(await self._state("analyzer"), "analyzer", self._where)

    async def bind_analyzer(self, identity: str) -> str:
        """Bind the collection to ``identity`` unless bound; returns the bound identity."""
        async with self._write("bind the analyzer") as conn:
            current = await conn.fetchval(f"SELECT analyzer FROM {self._s}.state WHERE id = 1")
            if current is None:
                await conn.execute(
                    f"UPDATE {self._s}.state SET analyzer = $1 WHERE id = 1", identity
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

    async def document_states(self) -> dict[str, DocumentState]:
        rows = await self._fetch(
            "read documents",
            f"SELECT source, content_hash, source_class, extractor, metadata FROM {self._s}"
            ".documents",
        )
        return {row[0]: document_state(row) for row in rows}

    async def iter_documents(self) -> AsyncIterator[DocumentRecord]:
        sql = f"{self._select_documents} ORDER BY d.source"
        async for rows in self._cursor("read documents", sql, 1000):
            for row in rows:
                yield document_record(row, row[7])

    async def _term_ids(self, conn: Any, terms: set[str]) -> dict[str, int]:
        """Ids for ``terms``, creating missing ones; the caller holds the writer lock.

        Under that lock no other writer can mint ids, so the next id is the largest plus one:
        ids stay dense (BM25 sizes arrays by the largest id) and a term gets one id only.
        """
        if self._vocab is None:
            self._vocab = await self.vocabulary()
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

    async def replace_documents(self, items: WriteItems) -> None:
        """Store several documents in one transaction (one generation bump).

        Rows go in by binary COPY: one round trip per table rather than one per row.
        """
        if not items:
            return
        sources, counts = term_counts(items)
        check_storable(items, nul_allowed=False)
        what = repr(sources[0]) if len(sources) == 1 else f"{len(sources)} documents"
        async with self._write(f"store {what}") as conn:
            vocab = await self._term_ids(conn, {t for group in counts for c in group for t in c})
            await conn.execute(
                f"DELETE FROM {self._s}.documents WHERE source = ANY($1::text[])", sources
            )
            await conn.copy_records_to_table(
                "documents",
                schema_name=self.schema,
                columns=_DOCUMENT_INSERT,
                records=document_rows(items),
            )
            rows = chunk_rows(items, counts, vocab)
            if rows:
                await conn.copy_records_to_table(
                    "chunks", schema_name=self.schema, columns=_CHUNK_INSERT, records=rows
                )
            await conn.execute(
                f"UPDATE {self._s}.state SET generation = generation + 1 WHERE id = 1"
            )

    async def delete_documents(self, sources: Sequence[str]) -> int:
        if not sources:
            return 0
        async with self._write("delete documents") as conn:
            status = await conn.execute(
                f"DELETE FROM {self._s}.documents WHERE source = ANY($1::text[])", list(sources)
            )
            deleted = _affected(status)
            if deleted:
                await conn.execute(
                    f"UPDATE {self._s}.state SET generation = generation + 1 WHERE id = 1"
                )
        return deleted

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
        """Both reads in one repeatable-read transaction, so they describe one moment."""
        with self._mapped("read confirmed vectors"):
            async with (
                self._pool.acquire() as conn,
                conn.transaction(isolation="repeatable_read", readonly=True),
            ):
                documents = await conn.fetch(
                    f"SELECT id FROM {self._s}.documents WHERE vectors_hash = content_hash"
                )
                chunks = await conn.fetch(
                    f"SELECT c.id FROM {self._s}.chunks c JOIN {self._s}.documents d"
                    " ON d.id = c.document_id WHERE d.vectors_hash = d.content_hash"
                )
        return ConfirmedVectors(
            frozenset(row[0] for row in documents), frozenset(row[0] for row in chunks)
        )

    async def confirmed_vector_count(self) -> int:
        value = await self._value(
            "count confirmed vectors",
            f"SELECT (SELECT COUNT(*) FROM {self._s}.chunks) - (SELECT COUNT(*)"
            f" FROM {self._s}.chunks WHERE document_id IN (SELECT id FROM {self._s}.documents"
            " WHERE vectors_hash IS NULL OR vectors_hash <> content_hash))",
        )
        return int_value(value, "confirmed vector count", self._where)

    async def document_ids(self) -> set[str]:
        rows = await self._fetch("read documents", f"SELECT id FROM {self._s}.documents")
        return {row[0] for row in rows}

    async def get_chunks_for_documents(
        self, document_ids: Sequence[str]
    ) -> dict[str, list[StoredChunk]]:
        """Chunks of several documents, each list in chunk order; absent ids are left out."""
        if not document_ids:
            return {}
        rows = await self._fetch(
            "read chunks",
            f"{self._select_chunks} WHERE c.document_id = ANY($1::text[])"
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
            "read chunks", f"{self._select_chunks} WHERE c.id = ANY($1::text[])", list(chunk_ids)
        )
        return {row[1]: stored_chunk(row) for row in rows}

    async def chunk_count(self) -> int:
        return int(await self._value("count chunks", f"SELECT COUNT(*) FROM {self._s}.chunks"))

    async def get_chunk(self, chunk_id: str) -> StoredChunk | None:
        rows = await self._fetch("read a chunk", f"{self._select_chunks} WHERE c.id = $1", chunk_id)
        return stored_chunk(rows[0]) if rows else None

    async def get_chunks_by_keys(self, keys: Sequence[int]) -> Mapping[int, StoredChunk]:
        if not keys:
            return {}
        rows = await self._fetch(
            "read chunks",
            f"{self._select_chunks} WHERE c.key = ANY($1::bigint[])",
            [int(k) for k in keys],
        )
        return {int(row[0]): stored_chunk(row) for row in rows}

    async def iter_chunks(self, batch_size: int = 1000) -> AsyncIterator[list[StoredChunk]]:
        sql = f"{self._select_chunks} ORDER BY d.source, c.chunk_index"
        async for rows in self._cursor("read chunks", sql, batch_size):
            yield [stored_chunk(r) for r in rows]

    # -- lexical statistics --------------------------------------------------

    async def vocabulary(self) -> dict[str, int]:
        rows = await self._fetch("read the vocabulary", f"SELECT term, id FROM {self._s}.terms")
        return {term: int(term_id) for term, term_id in rows}

    async def chunk_owners(self) -> ChunkOwners:
        """Both reads in one repeatable-read transaction: one snapshot, as the protocol asks."""
        with self._mapped("read chunk owners"):
            async with (
                self._pool.acquire() as conn,
                conn.transaction(isolation="repeatable_read", readonly=True),
            ):
                documents = await conn.fetch(f"SELECT id, metadata FROM {self._s}.documents")
                chunks = await conn.fetch(f"SELECT key, document_id FROM {self._s}.chunks")
        document_ids = [row[0] for row in documents]
        fields = [
            check_fields_value(fields_of(parse_metadata(row[1], f"document row {row[0]!r}")), "")
            for row in documents
        ]
        position = {document_id: i for i, document_id in enumerate(document_ids)}
        return ChunkOwners(
            keys=np.fromiter((row[0] for row in chunks), dtype=np.int64, count=len(chunks)),
            owners=np.fromiter(
                (position[row[1]] for row in chunks), dtype=np.int64, count=len(chunks)
            ),
            document_ids=document_ids,
            fields=fields,
        )

    async def iter_postings(self, batch_size: int = 50_000) -> AsyncIterator[ChunkPostings]:
        """Canonical order from the covering index; blobs arrive as bytes, no per-term decode."""
        sql = (
            f"SELECT key, term_ids, tfs FROM {self._s}.chunks"
            " ORDER BY content_hash, chunk_index, document_id"
        )
        async for rows in self._cursor("read postings", sql, batch_size):
            yield postings_from_blobs(
                [r[0] for r in rows], [r[1] for r in rows], [r[2] for r in rows]
            )


@contextmanager
def _connecting(dsn: str) -> Iterator[None]:
    """Map a failure to connect: the caller's (DSN, login, database) or the server's."""
    pg = _driver()
    try:
        yield
    except (pg.InvalidAuthorizationSpecificationError, pg.InvalidCatalogNameError) as exc:
        _raise(ConfigurationError, f"cannot connect to {redact_dsn(dsn)}", exc, dsn)
    except (ValueError, pg.ClientConfigurationError) as exc:
        _raise(ConfigurationError, f"bad PostgreSQL DSN {redact_dsn(dsn)}", exc, dsn)
    except _driver_errors() as exc:
        _raise(StorageError, f"cannot connect to {redact_dsn(dsn)}", exc, dsn)


async def collection_names(dsn: str, *, connect_timeout: float = 30.0) -> list[str]:
    """Names of the groundkit collections in the database at ``dsn``, sorted."""
    pg = _driver()
    with _connecting(dsn):
        conn = await pg.connect(dsn, timeout=connect_timeout)
        try:
            schemas = await conn.fetch(
                "SELECT nspname FROM pg_namespace WHERE starts_with(nspname, $1)", SCHEMA_PREFIX
            )
            names = []
            for row in schemas:
                state = f"{_quote(row['nspname'])}.state"
                if await conn.fetchval("SELECT to_regclass($1)", state) is not None:
                    names.append(await conn.fetchval(f"SELECT collection FROM {state}"))
        finally:
            await conn.close()
    return sorted(str(n) for n in names if n)


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


def _raise(kind: type[GroundkitError], what: str, exc: BaseException, dsn: str) -> NoReturn:
    """Raise ``kind`` with the driver's message (``_driver_message``), passwords blanked out."""
    detail = _driver_message(exc)
    for secret in _secrets_of(dsn):
        detail = detail.replace(secret, "***")
    raise kind(f"{what}: {detail}") from None
