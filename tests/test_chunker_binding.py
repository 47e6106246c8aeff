"""A collection is bound to the chunking it was first ingested with.

Reopened without ``chunking``, it chunks new files the bound way; reopened with
another one, the next ingest is refused naming both; a collection written before
the chunker was recorded (schema 3) opens, searches and expands as before, and
binds at its next ingest (adr/0046-structure-chunking.md).
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from groundkit import ChunkingConfig, Collection, IndexIdentityError
from groundkit.contracts import GAPS_KEY
from groundkit.ingestion import chunk_spans, markdown_outline
from groundkit.ingestion.chunking import heading_starts
from groundkit.retrieval.context import gaps_of
from groundkit.storage import SQLiteMetadataStore
from groundkit.storage.protocols import MetadataStoreProtocol
from groundkit.storage.sqlite import SCHEMA_VERSION
from groundkit.testing.conformance.helpers import make_document, put, put_document
from tests.support import write_tree

STRUCTURE = ChunkingConfig(strategy="structure", max_chars=120, overlap_chars=10)

FIRST = (
    "# Alpha\n\nAlpha text goes here. It has two sentences.\n\n"
    "## Beta\n\nBeta text under a subheading. More words about beta follow here.\n"
)
SECOND = (
    "# Gamma\n\nGamma is the new file. Its chunks must follow the bound strategy.\n\n"
    "## Delta\n\nDelta sits under gamma. The structure chunker cuts at this heading.\n"
    "Another line of delta text, long enough to need a second chunk of its own here.\n"
)


def spans_of(text: str, config: ChunkingConfig) -> list[tuple[int, int]]:
    return chunk_spans(text, config, headings=heading_starts(markdown_outline(text)))


async def stored_spans(col: Collection, source: str) -> list[tuple[int, int]]:
    chunks = [s async for batch in col.store.iter_chunks() for s in batch if s.source == source]
    return sorted((c.start_offset, c.end_offset) for c in chunks)


async def test_reopened_without_chunking_it_chunks_the_bound_way(tmp_path: Path) -> None:
    base, index = tmp_path / "corpus", tmp_path / "index"
    write_tree(base, {"first.md": FIRST})
    async with Collection.open(index, base_dir=base, chunking=STRUCTURE) as col:
        await col.ingest(base)
        assert await col.store.get_chunker() == STRUCTURE.identity
        assert await stored_spans(col, "first.md") == spans_of(FIRST, STRUCTURE)
    # The bound chunking differs from the default on the new file: the test tells them apart.
    assert spans_of(SECOND, STRUCTURE) != spans_of(SECOND, ChunkingConfig())
    write_tree(base, {"second.md": SECOND})
    async with Collection.open(index) as col:
        report = await col.ingest(base)
        assert report.added == ["second.md"] and report.unchanged == ["first.md"]
        assert await stored_spans(col, "second.md") == spans_of(SECOND, STRUCTURE)
        assert await col.store.get_chunker() == STRUCTURE.identity
    # The same chunking given again is no change at all.
    async with Collection.open(index, chunking=STRUCTURE) as col:
        report = await col.ingest(base)
        assert report.unchanged == ["first.md", "second.md"]


@pytest.mark.parametrize(
    "other",
    [
        ChunkingConfig(),
        ChunkingConfig(strategy="sentence", max_chars=120),
        ChunkingConfig(strategy="structure", max_chars=121, overlap_chars=10),
        ChunkingConfig(strategy="structure", max_chars=120, overlap_chars=0),
        STRUCTURE.model_copy(update={"contextual": True}),
    ],
)
async def test_another_chunking_is_refused_naming_both(
    tmp_path: Path, other: ChunkingConfig
) -> None:
    base, index = tmp_path / "corpus", tmp_path / "index"
    write_tree(base, {"first.md": FIRST})
    async with Collection.open(index, base_dir=base, chunking=STRUCTURE) as col:
        await col.ingest(base)
    assert other.identity != STRUCTURE.identity
    write_tree(base, {"second.md": SECOND})
    async with Collection.open(index, chunking=other) as col:
        # Opening and searching are fine: only writing would mix two chunkings.
        assert (await col.search("alpha", 3)).results
        with pytest.raises(IndexIdentityError) as info:
            await col.ingest(base)
        message = str(info.value)
        assert repr(STRUCTURE.identity) in message and repr(other.identity) in message
        assert await stored_spans(col, "second.md") == []
        assert await col.store.get_chunker() == STRUCTURE.identity


def _undo_later_schemas(conn: sqlite3.Connection) -> None:
    """Take away what schemas 4 and 5 added to a fresh file's state: the chunker column,
    and the count of current chunks with the triggers that keep it."""
    for trigger in ("chunks_live_insert", "chunks_live_update", "chunks_live_delete"):
        conn.execute(f"DROP TRIGGER {trigger}")
    conn.execute("ALTER TABLE state DROP COLUMN live_chunks")
    conn.execute("ALTER TABLE state DROP COLUMN chunker")
    conn.execute("UPDATE state SET schema_version = 3")


def _as_schema_3(path: Path) -> None:
    """Turn a fresh collection's file into what groundkit wrote before it recorded the
    chunker: no ``chunker`` column, schema 3, and documents without chunk gaps."""
    with sqlite3.connect(path) as conn:
        _undo_later_schemas(conn)
        rows = conn.execute("SELECT id, metadata FROM documents").fetchall()
        for document_id, metadata in rows:
            value = json.loads(metadata)
            value.pop(GAPS_KEY, None)
            conn.execute(
                "UPDATE documents SET metadata = ? WHERE id = ?", (json.dumps(value), document_id)
            )
    conn.close()


# Fixed chunks with a single line break between two of them: a one-character gap that
# is not a space, which only the recorded gaps tell apart from one.
LEGACY = "First sentence about the lighthouse keeper.\nSecond sentence about the keeper's log.\n"
LEGACY_CHUNKS = ChunkingConfig(max_chars=50, overlap_chars=0)


async def test_a_schema_3_collection_opens_searches_and_binds(tmp_path: Path) -> None:
    base, index = tmp_path / "corpus", tmp_path / "index"
    write_tree(base, {"old.md": LEGACY})
    spans = spans_of(LEGACY, LEGACY_CHUNKS)
    assert len(spans) == 2 and LEGACY[spans[0][1] : spans[1][0]] == "\n"
    async with Collection.open(index, base_dir=base, chunking=LEGACY_CHUNKS) as col:
        await col.ingest(base)
    path = index / "default.sqlite3"
    assert path.is_file()
    _as_schema_3(path)
    with sqlite3.connect(path) as conn:
        assert conn.execute("SELECT schema_version FROM state").fetchone() == (3,)
    conn.close()
    async with Collection.open(index, chunking=LEGACY_CHUNKS) as col:
        assert await col.store.get_chunker() is None
        (legacy,) = [s async for batch in col.store.iter_chunks() for s in batch][:1]
        # Marked by the migration: chunked before gaps were recorded.
        assert GAPS_KEY in legacy.metadata and legacy.metadata[GAPS_KEY] is None
        hits = (await col.search("keeper", 5)).results
        assert len(hits) == 2
        for hit in hits:
            assert (await col.verify(hit)).ok
        for kind in ("parent", "window"):
            for hit in (await col.search("keeper", 5, expand=kind)).results:
                ctx = hit.context
                assert ctx is not None
                # Exact: the unrecorded line break is not guessed to be a space, so
                # the passage is the chunk alone.
                assert LEGACY[ctx.start_offset : ctx.end_offset] == ctx.content
                assert ctx.content == hit.content and ctx.chunk_ids == (hit.chunk_id,)
        write_tree(base, {"new.md": "A new file about the keeper.\n"})
        report = await col.ingest(base)
        assert report.added == ["new.md"] and report.unchanged == ["old.md"]
        assert await col.store.get_chunker() == LEGACY_CHUNKS.identity
        # Ingested again once changed, the document has its gaps: one passage again.
        changed = LEGACY + "Third sentence, added.\n"
        write_tree(base, {"old.md": changed})
        assert (await col.ingest(base)).updated == ["old.md"]
        hit = (await col.search("lighthouse", 1, expand="window")).results[0]
        assert hit.context is not None
        assert hit.context.content == changed.strip()
    with sqlite3.connect(path) as conn:
        assert conn.execute("SELECT schema_version FROM state").fetchone() == (SCHEMA_VERSION,)
    conn.close()


# --- the migration's mark, store by store ---------------------------------------------


async def _two_versions(store: MetadataStoreProtocol) -> None:
    """``a.md`` at version 2 (with fields) over a past version 1, as schema 3 kept them."""
    document, chunks, terms = make_document("a.md", ["alpha one", "alpha two"])
    await put_document(store, document, chunks, terms)
    document, chunks, terms = make_document("a.md", ["alpha three", "beta"])
    titled = document.model_copy(update={"metadata": {"fields": {"title": "Ä title"}}})
    await put_document(store, titled, chunks, terms)


async def _check_marked(store: MetadataStoreProtocol) -> None:
    current = await store.get_chunk("doc:a.md#0")
    past = await store.get_chunk("doc:a.md#0", 1)
    assert current is not None and past is not None and past.version == 1
    assert current.metadata == {GAPS_KEY: None, "fields": {"title": "Ä title"}}
    assert past.metadata == {GAPS_KEY: None}
    assert gaps_of(current.metadata) is None
    # A document written after the migration records its gaps as ever.
    await put(store, "b.md", ["beta"])
    fresh_row = await store.get_chunk("doc:b.md#0")
    assert fresh_row is not None and GAPS_KEY not in fresh_row.metadata
    assert gaps_of(fresh_row.metadata) == {}


async def test_sqlite_marks_what_schema_3_stored(tmp_path: Path) -> None:
    path = tmp_path / "meta.sqlite3"
    store = await SQLiteMetadataStore.open(path)
    try:
        await _two_versions(store)
    finally:
        await store.close()
    with sqlite3.connect(path) as conn:
        _undo_later_schemas(conn)
    conn.close()
    store = await SQLiteMetadataStore.open(path)
    try:
        await _check_marked(store)
    finally:
        await store.close()


async def test_postgres_marks_what_schema_3_stored(postgres_dsn: str, fresh: str) -> None:
    import asyncpg

    from groundkit.storage.postgres import PostgresMetadataStore, schema_name

    store = await PostgresMetadataStore.open(postgres_dsn, fresh)
    try:
        await _two_versions(store)
    finally:
        await store.close()
    conn = await asyncpg.connect(postgres_dsn)
    try:
        schema = f'"{schema_name(fresh)}"'
        for name in ("chunks_live_insert", "chunks_live_update", "chunks_live_delete"):
            await conn.execute(f"DROP TRIGGER {name} ON {schema}.chunks")
            await conn.execute(f"DROP FUNCTION {schema}.{name}()")
        await conn.execute(f"ALTER TABLE {schema}.state DROP COLUMN live_chunks")
        await conn.execute(f"ALTER TABLE {schema}.state DROP COLUMN chunker")
        await conn.execute(f"UPDATE {schema}.state SET schema_version = 3")
    finally:
        await conn.close()
    store = await PostgresMetadataStore.open(postgres_dsn, fresh)
    try:
        await _check_marked(store)
        assert await store.get_chunker() is None
    finally:
        await store.close()
