"""PostgresMetadataStore opens collections that older groundkit releases wrote.

Each old collection is built here as those releases built it: the schema-2 DDL below (the
one ``postgres.py`` created before schema 3), rows in that layout, a schema-1 collection
being the same without the vectors generation. Opening one migrates it in place.
"""

from __future__ import annotations

import asyncio
import math
from collections import Counter
from datetime import datetime
from typing import Any

import asyncpg
import pytest

from groundkit import StorageError
from groundkit.storage._rows import WriteItems, chunk_rows, document_rows, term_counts
from groundkit.storage.postgres import SCHEMA_VERSION, PostgresMetadataStore, schema_name
from groundkit.testing.conformance.helpers import (
    document_by_source,
    document_sources,
    make_document,
    put,
)
from groundkit.testing.conformance.metadata import decoded_postings

# The collection schema as groundkit created it at version 2.
_SCHEMA_2 = """
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
_INGESTED_AT = "2026-01-05T09:30:00+00:00"
_OLD_GENERATION = 7


def _old_items() -> WriteItems:
    return [
        make_document("a.txt", ["alpha beta", "beta gamma gamma"]),
        make_document("b.txt", ["delta alpha"]),
    ]


async def _write_old_collection(
    dsn: str, name: str, version: int, items: WriteItems, *, ingested_at: str = _INGESTED_AT
) -> None:
    """``items`` stored in a collection of schema ``version`` (1 or 2), as it stored them."""
    _, counts = term_counts(items)
    terms = sorted({t for group in counts for counter in group for t in counter})
    vocab = {term: i for i, term in enumerate(terms, start=1)}
    s = f'"{schema_name(name)}"'
    conn = await asyncpg.connect(dsn)
    try:
        async with conn.transaction():
            await conn.execute(f"CREATE SCHEMA {s}")
            await conn.execute(_SCHEMA_2.format(s=s))
            await conn.execute(
                f"INSERT INTO {s}.state (id, schema_version, collection, generation, analyzer)"
                " VALUES (1, 2, $1, $2, 'an-analyzer')",
                name,
                _OLD_GENERATION,
            )
            await conn.executemany(
                f"INSERT INTO {s}.terms (id, term) VALUES ($1, $2)",
                [(i, term) for term, i in vocab.items()],
            )
            await conn.executemany(
                f"INSERT INTO {s}.documents (id, source, content_hash, ingested_at, source_class,"
                " extractor, metadata) VALUES ($1, $2, $3, $4, $5, $6, $7)",
                document_rows(items, ingested_at),
            )
            await conn.executemany(
                f"INSERT INTO {s}.chunks (id, document_id, chunk_index, content, start_offset,"
                " end_offset, content_hash, term_ids, tfs)"
                " VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
                chunk_rows(items, counts, vocab),
            )
            if version == 1:
                await conn.execute(f"ALTER TABLE {s}.state DROP COLUMN vectors_generation")
                await conn.execute(f"UPDATE {s}.state SET schema_version = 1")
    finally:
        await conn.close()


async def _catalog(dsn: str, name: str) -> dict[str, list[tuple[Any, ...]]]:
    """The shape of a collection's schema: columns, indexes and constraints, by name."""
    schema = schema_name(name)
    conn = await asyncpg.connect(dsn)
    try:
        columns = await conn.fetch(
            "SELECT table_name, ordinal_position, column_name, data_type, is_nullable,"
            " column_default, collation_name, is_identity FROM information_schema.columns"
            " WHERE table_schema = $1 ORDER BY table_name, ordinal_position",
            schema,
        )
        indexes = await conn.fetch(
            "SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = $1 ORDER BY indexname",
            schema,
        )
        constraints = await conn.fetch(
            "SELECT conname, pg_get_constraintdef(oid) FROM pg_constraint"
            " WHERE connamespace = to_regnamespace($1) ORDER BY conname",
            f'"{schema}"',
        )
    finally:
        await conn.close()
    return {  # the schema's own name, which differs, left out
        "columns": [tuple(r) for r in columns],
        "indexes": [(r[0], r[1].replace(schema, "S")) for r in indexes],
        "constraints": [(r[0], r[1].replace(schema, "S")) for r in constraints],
    }


async def _schema_version(dsn: str, name: str) -> Any:
    conn = await asyncpg.connect(dsn)
    try:
        return await conn.fetchval(f'SELECT schema_version FROM "{schema_name(name)}".state')
    finally:
        await conn.close()


def _expected_postings(items: WriteItems) -> list[dict[str, int]]:
    return sorted(
        (dict(Counter(terms)) for _, _, chunk_terms in items for terms in chunk_terms),
        key=lambda p: sorted(p.items()),
    )


async def test_a_version_2_schema_is_migrated_in_place(postgres_dsn: str, fresh: str) -> None:
    items = _old_items()
    await _write_old_collection(postgres_dsn, fresh, 2, items)
    opened = await asyncio.gather(*(PostgresMetadataStore.open(postgres_dsn, fresh) for _ in "ab"))
    store, other = opened
    try:
        assert await _schema_version(postgres_dsn, fresh) == SCHEMA_VERSION
        assert await store.generations() == (_OLD_GENERATION, 0)
        assert await store.get_analyzer() == "an-analyzer"
        # What was stored is still there, as version 1, valid from its ingest time.
        assert await document_sources(store) == ["a.txt", "b.txt"]
        since = datetime.fromisoformat(_INGESTED_AT).timestamp()
        async for record in store.iter_documents():
            assert (record.version, record.past_versions, record.ingested_at) == (
                1,
                0,
                _INGESTED_AT,
            )
        old = [s async for batch in store.iter_chunks() for s in batch]
        assert [(s.source, s.content) for s in old] == [
            ("a.txt", "alpha beta"),
            ("a.txt", "beta gamma gamma"),
            ("b.txt", "delta alpha"),
        ]
        assert all((s.version, s.valid_from, s.valid_to) == (1, since, None) for s in old)
        postings = await decoded_postings(store)
        assert sorted((p for _, p in postings), key=lambda p: sorted(p.items())) == (
            _expected_postings(items)
        )
        assert {k for k, _ in postings} == {s.key for s in old}
        owners = await store.chunk_owners()
        assert sorted(owners.keys.tolist()) == sorted(s.key for s in old)
        assert (await store.lexical_delta(0, 0)).live_chunks == 3  # counted once, then kept
        # The new state: a uid of its own, a change log that starts after the migration.
        uid = await store.collection_uid()
        assert len(uid) == 32 and uid == await other.collection_uid()
        assert (await store.changes_since(_OLD_GENERATION)).complete
        assert not (await store.changes_since(_OLD_GENERATION - 1)).complete

        # A replace keeps the migrated version as the past one; keys go on growing.
        await put(store, "a.txt", ["alpha epsilon"])
        current = await store.get_chunk("doc:a.txt#0")
        past = await store.get_chunk("doc:a.txt#0", 1)
        assert current is not None and past is not None
        assert (current.version, current.content) == (2, "alpha epsilon")
        assert (past.version, past.content, past.ingested_at) == (1, "alpha beta", _INGESTED_AT)
        assert past.valid_from == since and past.valid_to == current.valid_from
        assert current.key > max(s.key for s in old)
        assert [
            k
            for b in [b async for b in other.postings_since(max(s.key for s in old))]
            for k in b.keys.tolist()
        ] == [current.key]
        log = await other.changes_since(_OLD_GENERATION)
        assert sorted(log.keys.tolist()) == [old[0].key, old[1].key]
        assert log.valid_to.tolist() == [current.valid_from] * 2
        doc_now = await document_by_source(other, "a.txt")
        assert doc_now is not None and (doc_now.version, doc_now.past_versions) == (2, 1)
        assert await store.purge_versions(0) == 1
        assert (await other.lexical_delta(0, 0)).live_chunks == await store.chunk_count() == 2
        assert await store.get_chunk("doc:a.txt#0", 1) is None
        assert (await store.changes_since(_OLD_GENERATION + 1)).valid_to.tolist() == [-math.inf] * 2
    finally:
        for opened_store in opened:
            await opened_store.close()


async def test_a_migrated_schema_is_the_fresh_schema(postgres_dsn: str, fresh: str) -> None:
    """Same columns, indexes and constraints as a collection created at version 3."""
    await _write_old_collection(postgres_dsn, fresh, 2, _old_items())
    await (await PostgresMetadataStore.open(postgres_dsn, fresh)).close()
    new = await PostgresMetadataStore.open(postgres_dsn, f"{fresh}n")
    try:
        assert await _catalog(postgres_dsn, fresh) == await _catalog(postgres_dsn, f"{fresh}n")
    finally:
        await new.drop()


async def test_a_version_1_schema_is_migrated_in_place(postgres_dsn: str, fresh: str) -> None:
    await _write_old_collection(postgres_dsn, fresh, 1, _old_items())
    opened = await asyncio.gather(*(PostgresMetadataStore.open(postgres_dsn, fresh) for _ in "ab"))
    try:
        for migrated in opened:  # two openers at once: one migrates, both work
            assert await migrated.generations() == (_OLD_GENERATION, 0)
            assert await document_sources(migrated) == ["a.txt", "b.txt"]
        await opened[0].forget_vectors()
        assert await opened[1].generations() == (_OLD_GENERATION, 1)
        await put(opened[1], "b.txt", ["delta two"])
        assert (await opened[0].get_chunk("doc:b.txt#0", 1)) is not None
    finally:
        for migrated in opened:
            await migrated.close()
    assert await _schema_version(postgres_dsn, fresh) == SCHEMA_VERSION


@pytest.mark.parametrize("ingested_at", ["secretword", "2026-13-45T00:00:00+00:00"])
async def test_a_damaged_ingest_time_stops_the_migration(
    postgres_dsn: str, fresh: str, ingested_at: str
) -> None:
    items = [make_document("a.txt", ["alpha secretword"])]
    await _write_old_collection(postgres_dsn, fresh, 2, items, ingested_at=ingested_at)
    with pytest.raises(
        StorageError, match=r"document row 'doc:a\.txt': damaged ingest time;"
    ) as info:
        await PostgresMetadataStore.open(postgres_dsn, fresh)
    assert "secretword" not in str(info.value) and "2026-13" not in str(info.value)
    assert await _schema_version(postgres_dsn, fresh) == 2  # left as it was
