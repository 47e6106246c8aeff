"""PostgresMetadataStore: the shared conformance suite plus what is specific to PostgreSQL.

Every test runs against a real server (``tests.pg_support``): a private one started for the
session, or the one ``GROUNDKIT_TEST_POSTGRES_DSN`` names.
"""

from __future__ import annotations

import asyncio
import re
import sys
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import asyncpg
import pytest

from groundkit import ConfigurationError, GroundkitError, StorageError
from groundkit.contracts import Document
from groundkit.lexical import Analyzer, BM25Index
from groundkit.retrieval import Retriever
from groundkit.storage import MetadataStoreProtocol, SQLiteMetadataStore
from groundkit.storage.location import StoreLocation
from groundkit.storage.postgres import (
    DEFAULT_TIMEOUT,
    SCHEMA_VERSION,
    TIMEOUT_ENV,
    PostgresMetadataStore,
    command_timeout,
    drop_if_unwritten,
    redact_dsn,
    schema_name,
)
from groundkit.testing.conformance.helpers import (
    document_by_source,
    document_hashes,
    document_sources,
    put,
    put_document,
)
from groundkit.testing.conformance.metadata import (
    MetadataStoreConformance,
    check_reopen,
    decoded_postings,
    snapshot,
)
from tests.services import run_pythons
from tests.support import make_document


def _name() -> str:
    return f"t{uuid.uuid4().hex[:12]}"


@pytest.fixture
async def pg(postgres_dsn: str, fresh: str) -> AsyncIterator[PostgresMetadataStore]:
    """An open store on a fresh collection."""
    store = await PostgresMetadataStore.open(postgres_dsn, fresh, max_connections=2)
    try:
        yield store
    finally:
        await store.close()


class TestPostgresConformance(MetadataStoreConformance):
    @pytest.fixture
    def store(self, pg: PostgresMetadataStore) -> PostgresMetadataStore:
        return pg


def _with_password(dsn: str, password: str) -> str:
    parts = urlsplit(dsn)
    user = parts.username or "postgres"
    host = parts.hostname or "127.0.0.1"
    netloc = f"{user}:{password}@{host}" + (f":{parts.port}" if parts.port else "")
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))


async def test_persists_across_reopen(postgres_dsn: str, fresh: str) -> None:
    store = await PostgresMetadataStore.open(postgres_dsn, fresh)
    await check_reopen(store, lambda: PostgresMetadataStore.open(postgres_dsn, fresh, create=False))


async def test_open_missing_without_create(postgres_dsn: str, fresh: str) -> None:
    with pytest.raises(StorageError, match="ingest something first"):
        await PostgresMetadataStore.open(postgres_dsn, fresh, create=False)
    conn = await asyncpg.connect(postgres_dsn)
    try:
        assert await conn.fetchval("SELECT to_regnamespace($1)", schema_name(fresh)) is None
    finally:
        await conn.close()


async def test_collections_are_isolated(postgres_dsn: str, fresh: str) -> None:
    other_name = _name()
    first = await PostgresMetadataStore.open(postgres_dsn, fresh)
    second = await PostgresMetadataStore.open(postgres_dsn, other_name)
    try:
        await put(first, "a.txt", ["alpha"])
        assert await document_hashes(second) == {}
        assert await second.generation() == 0
        await put(second, "a.txt", ["beta"])
        assert (await first.vocabulary()).keys() == {"alpha"}
        assert (await second.vocabulary()) == {"beta": 1}
    finally:
        await first.close()
        await second.drop()


async def test_schema_version_mismatch_names_the_remedy(postgres_dsn: str, fresh: str) -> None:
    store = await PostgresMetadataStore.open(postgres_dsn, fresh)
    await store.close()
    conn = await asyncpg.connect(postgres_dsn)
    try:
        await conn.execute(
            f'UPDATE "{schema_name(fresh)}".state SET schema_version = $1', SCHEMA_VERSION + 1
        )
    finally:
        await conn.close()
    with pytest.raises(StorageError, match="drop the schema and ingest again") as info:
        await PostgresMetadataStore.open(postgres_dsn, fresh)
    message = str(info.value)
    assert f"schema version {SCHEMA_VERSION + 1}" in message
    assert schema_name(fresh) in message


async def test_schema_of_another_collection_is_refused(postgres_dsn: str, fresh: str) -> None:
    store = await PostgresMetadataStore.open(postgres_dsn, fresh)
    await store.close()
    conn = await asyncpg.connect(postgres_dsn)
    try:
        await conn.execute(f'UPDATE "{schema_name(fresh)}".state SET collection = $1', "other")
    finally:
        await conn.close()
    with pytest.raises(StorageError, match="holds collection 'other'"):
        await PostgresMetadataStore.open(postgres_dsn, fresh)


async def test_closed_store_refuses_calls(postgres_dsn: str, fresh: str) -> None:
    store = await PostgresMetadataStore.open(postgres_dsn, fresh)
    await store.close()
    await store.close()  # idempotent
    with pytest.raises(StorageError, match="is closed"):
        await store.generation()
    with pytest.raises(StorageError, match="is closed"):
        await put(store, "a.txt", ["alpha"])
    with pytest.raises(StorageError, match="is closed"):
        [b async for b in store.iter_postings()]


async def test_drop_removes_the_collection(postgres_dsn: str, fresh: str) -> None:
    store = await PostgresMetadataStore.open(postgres_dsn, fresh)
    await put(store, "a.txt", ["alpha"])
    await store.drop()
    with pytest.raises(StorageError, match="ingest"):
        await PostgresMetadataStore.open(postgres_dsn, fresh, create=False)


async def _waits_for_lock(
    watcher: asyncpg.Connection, schema: str, table: str, waiting: asyncio.Future[Any]
) -> None:
    """Until some session waits for a lock on ``schema.table`` (``waiting`` still under way)."""
    while not await watcher.fetchval(
        "SELECT count(*) FROM pg_locks l JOIN pg_class c ON c.oid = l.relation"
        " WHERE NOT l.granted AND c.relname = $2"
        " AND c.relnamespace = (SELECT oid FROM pg_namespace WHERE nspname = $1)",
        schema,
        table,
    ):
        assert not waiting.done(), waiting.exception()
        await asyncio.sleep(0.02)


@pytest.mark.parametrize("how", ["drop", "drop_if_unwritten"])
async def test_a_drop_caught_in_a_deadlock_with_a_search_is_made_again(
    postgres_dsn: str, fresh: str, how: str
) -> None:
    # A drop locks state, documents, chunks, ... in turn; a search's statement locks chunks
    # before documents. The server breaks the cycle by aborting the drop (it waited first).
    store = await PostgresMetadataStore.open(postgres_dsn, fresh)
    if how == "drop":
        await put(store, "a.txt", ["alpha"])
    schema = schema_name(fresh)
    reader = await asyncpg.connect(postgres_dsn)
    watcher = await asyncpg.connect(postgres_dsn)
    try:
        # The search side looks for deadlocks last, so the server's victim is the drop.
        await reader.execute("SET deadlock_timeout = '1h'")
        search = reader.transaction()
        await search.start()
        await reader.fetch(f'SELECT 1 FROM "{schema}".chunks LIMIT 1')
        if how == "drop":
            dropped: asyncio.Future[Any] = asyncio.ensure_future(store.drop())
        else:
            await store.close()
            dropped = asyncio.ensure_future(drop_if_unwritten(postgres_dsn, fresh))
        await _waits_for_lock(watcher, schema, "chunks", dropped)
        await reader.fetch(f'SELECT 1 FROM "{schema}".documents LIMIT 1')  # the cycle
        await search.commit()
        result = await asyncio.wait_for(dropped, 120)
        assert result in (None, True)
        gone = "SELECT count(*) FROM pg_namespace WHERE nspname = $1"
        assert await watcher.fetchval(gone, schema) == 0
    finally:
        await reader.close()
        await watcher.close()
        await store.close()


def test_schema_names() -> None:
    assert schema_name("default") == "gk_default"
    assert schema_name("My_Coll-2") == "gk_My_Coll-2"
    long_a, long_b = "a" * 63 + "1", "a" * 63 + "2"
    for name in (long_a, long_b, "9" * 64):
        assert len(schema_name(name)) <= 63
    assert schema_name(long_a) != schema_name(long_b)
    assert schema_name(long_a) == schema_name(long_a)
    for bad in ("", '"; DROP SCHEMA public; --', "a/b", "x" * 65):
        with pytest.raises(ConfigurationError, match="invalid collection name"):
            schema_name(bad)


async def test_long_collection_names(postgres_dsn: str) -> None:
    names = ["L" * 63 + "1", "L" * 63 + "2"]
    stores = [await PostgresMetadataStore.open(postgres_dsn, n) for n in names]
    try:
        await put(stores[0], "a.txt", ["only in the first"])
        assert await document_hashes(stores[1]) == {}
    finally:
        for s in stores:
            await s.drop()


async def test_order_is_bytewise_whatever_the_database_collation(
    pg: PostgresMetadataStore,
) -> None:
    # The test server's default collation is ICU en-US, which sorts "B" after "a".
    sources = ["b.txt", "B.txt", "a.txt", "_x.txt", "a-b.txt", "ab.txt", "é.txt", "Z.txt"]
    for source in sources:
        await put(pg, source, [f"text of {source}"], document_id=f"id {source}")
    assert await document_sources(pg) == sorted(sources)
    flat = [s async for batch in pg.iter_chunks() for s in batch]
    assert [s.source for s in flat] == sorted(sources)
    # Canonical order ties on content_hash/chunk_index fall to document_id, bytewise.
    for source in sources:
        await put(pg, source, ["same text"], document_id=f"id {source}")
    by_key = {s.key: s for batch in [b async for b in pg.iter_chunks()] for s in batch}
    keys = [k for k, _ in await decoded_postings(pg) if k in by_key]  # the current chunks
    assert [by_key[k].document_id for k in keys] == sorted(f"id {s}" for s in sources)


async def test_same_postings_and_scores_as_sqlite(
    pg: PostgresMetadataStore, tmp_path: Path
) -> None:
    lite = await SQLiteMetadataStore.open(tmp_path / "same.sqlite3")
    try:
        docs = [
            make_document(f"{n}.txt", [f"{n} shared words", "shared tail", f"{n} {n} end"])
            for n in ("delta", "alpha", "charlie", "bravo")
        ]
        for store in (pg, lite):
            assert isinstance(store, MetadataStoreProtocol)
            await store.replace_documents(docs[:2])
            await store.replace_documents(docs[2:])
            await store.delete_documents(["alpha.txt"])
        pg_post, lite_post = await decoded_postings(pg), await decoded_postings(lite)
        assert [p for _, p in pg_post] == [p for _, p in lite_post]
        pg_index, lite_index = await BM25Index.from_store(pg), await BM25Index.from_store(lite)
        for query in (["shared"], ["charlie", "end"], ["tail", "bravo"]):
            pg_hits = pg_index.search(query, 10)
            lite_hits = lite_index.search(query, 10)
            pg_ids = [(await pg.get_chunks_by_keys([h.key]))[h.key].chunk_id for h in pg_hits]
            lite_ids = [(await lite.get_chunks_by_keys([h.key]))[h.key].chunk_id for h in lite_hits]
            assert pg_ids == lite_ids
            assert [h.score for h in pg_hits] == pytest.approx([h.score for h in lite_hits])
    finally:
        await lite.close()


async def test_filtered_search_matches_sqlite(pg: PostgresMetadataStore, tmp_path: Path) -> None:
    lite = await SQLiteMetadataStore.open(tmp_path / "filtered.sqlite3")
    try:
        items = []
        for i, team in enumerate(["red", "blue", "red", "green", "blue"]):
            doc, chunks, terms = make_document(f"{i}.md", [f"solar panels {team}", "solar roof"])
            fields = {"fields": {"team": team, "year": 2020 + i}}
            items.append((doc.model_copy(update={"metadata": fields}), chunks, terms))
        for store in (pg, lite):
            await store.replace_documents(items)
        found = {}
        for name, store in (("pg", pg), ("lite", lite)):
            retriever = await Retriever.open(store, analyzer=Analyzer())
            response = await retriever.search(
                "solar panels", 10, filters={"team": {"in": ["red", "green"]}, "year": {"gt": 2020}}
            )
            found[name] = [(r.citation.source, r.content, r.score) for r in response.results]
        assert {source for source, _, _ in found["pg"]} == {"2.md", "3.md"}
        assert found["pg"] == found["lite"]
    finally:
        await lite.close()


async def test_nul_in_text_is_a_storage_error(pg: PostgresMetadataStore) -> None:
    await put(pg, "a.txt", ["fine"])
    before = await snapshot(pg)
    document, chunks, terms = make_document("b.txt", ["nul \x00 inside"])
    with pytest.raises(StorageError, match=r"could not store 'b\.txt'"):
        await put_document(pg, document, chunks, terms)
    assert await snapshot(pg) == before


# -- credentials -------------------------------------------------------------


def test_redact_dsn() -> None:
    assert redact_dsn("postgresql://u:s3cret@h:5432/db") == "postgresql://u:***@h:5432/db"
    assert redact_dsn("postgres://u@h/db") == "postgres://u@h/db"
    assert redact_dsn("postgresql://h/db?user=u&password=s3cret&sslmode=require") == (
        "postgresql://h/db?user=u&password=***&sslmode=require"
    )
    assert redact_dsn("postgresql://u:p%40ss@h1,h2:5433/db") == "postgresql://u:***@h1,h2:5433/db"
    assert redact_dsn("host=h user=u password=s3cret dbname=d") == (
        "host=h user=u password=*** dbname=d"
    )


# Passwords pasted unescaped: '#', '/', '?' and '@' end a URL's host part for urlsplit.
_AWKWARD_PASSWORDS = ["s3cr#t-pw", "ab/cd-pw", "ab?cd-pw", "p@ss:w#rd/x?y"]


@pytest.mark.parametrize("password", _AWKWARD_PASSWORDS)
def test_redact_dsn_of_a_password_with_url_delimiters(password: str) -> None:
    dsn = f"postgresql://app:{password}@db.example.com:5432/kb"
    assert redact_dsn(dsn) == "postgresql://app:***@db.example.com:5432/kb"
    assert password not in StoreLocation.resolve("kb", metadata_url=dsn).describe()
    query = f"postgresql://db.example.com/kb?user=app&password={password}&sslmode=require"
    assert redact_dsn(query) == (
        "postgresql://db.example.com/kb?user=app&password=***&sslmode=require"
    )


@pytest.mark.parametrize("password", _AWKWARD_PASSWORDS)
async def test_a_dsn_that_does_not_parse_never_shows_the_password(password: str) -> None:
    dsn = f"postgresql://app:{password}@127.0.0.1:5432/kb"
    with pytest.raises(GroundkitError) as info:
        await PostgresMetadataStore.open(dsn, "default", connect_timeout=5)
    # Nor a piece of it: the parser's message quotes where it stopped.
    for piece in re.split(r"[#/?@:]", password):
        assert len(piece) < 2 or piece not in str(info.value)
    assert "app:***@127.0.0.1:5432/kb" in str(info.value)


async def test_a_port_out_of_range_is_a_configuration_error() -> None:
    with pytest.raises(ConfigurationError, match=r"bad PostgreSQL DSN.*port"):
        await PostgresMetadataStore.open("postgresql://app:pw@127.0.0.1:70000/kb", "default")


async def test_wrong_password_never_shows_it(postgres_dsn: str) -> None:
    secret = "Wr0ng-" + uuid.uuid4().hex
    dsn = _with_password(postgres_dsn, secret)
    with pytest.raises(ConfigurationError) as info:
        await PostgresMetadataStore.open(dsn, "default")
    message = str(info.value)
    assert "password authentication failed" in message
    assert ":***@" in message
    assert secret not in message
    assert info.value.__cause__ is None and info.value.__suppress_context__


async def test_unreachable_server_never_shows_the_password() -> None:
    secret = "S3cret-" + uuid.uuid4().hex
    with pytest.raises(StorageError) as info:
        await PostgresMetadataStore.open(
            f"postgresql://u:{secret}@127.0.0.1:1/db", "default", connect_timeout=5
        )
    assert secret not in str(info.value)
    assert "cannot connect to postgresql://u:***@127.0.0.1:1/db" in str(info.value)


async def test_malformed_dsn_is_a_configuration_error() -> None:
    secret = "S3cret-" + uuid.uuid4().hex
    with pytest.raises(ConfigurationError) as info:
        await PostgresMetadataStore.open(f"postgresql://u:{secret}@127.0.0.1:notaport/db")
    assert secret not in str(info.value)


def test_store_repr_and_dsn_hide_the_password(postgres_dsn: str, pg: PostgresMetadataStore) -> None:
    password = urlsplit(postgres_dsn).password
    assert password and password not in pg.dsn and password not in repr(pg)


def test_missing_driver_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "asyncpg", None)
    with pytest.raises(ConfigurationError, match=r"pip install groundkit\[postgres\]"):
        asyncio.run(PostgresMetadataStore.open("postgresql://u@127.0.0.1/db"))


def test_base_import_does_not_load_the_driver() -> None:
    import subprocess

    code = (
        "import sys, groundkit, groundkit.storage.postgres; "
        "assert 'asyncpg' not in sys.modules, 'asyncpg imported eagerly'"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


# -- concurrency -------------------------------------------------------------


async def write_rounds(store: PostgresMetadataStore, tag: str, rounds: int) -> None:
    """Two writes a round; writers with other tags mint the same new terms in the same round."""
    for i in range(rounds):
        words = [f"new{i}", f"new{i + 1}", f"{tag}{i}", "common"]
        doc = make_document(f"{tag}/{i}.txt", [" ".join(words), f"new{i} {tag}"])
        again = make_document(f"{tag}/{i}.txt", [" ".join(reversed(words))])
        await store.replace_documents([doc])
        await put_document(store, *again)


async def check_rounds(store: PostgresMetadataStore, tags: str, rounds: int) -> None:
    """What ``write_rounds`` by each of ``tags`` must leave, whatever the interleaving."""
    assert await store.generation() == 2 * len(tags) * rounds
    vocab = await store.vocabulary()
    expected = {f"new{i}" for i in range(rounds + 1)} | {"common", *tags}
    expected |= {f"{t}{i}" for t in tags for i in range(rounds)}
    assert set(vocab) == expected
    assert sorted(vocab.values()) == list(range(1, len(vocab) + 1)), "ids not dense"
    assert await store.chunk_count() == len(tags) * rounds
    postings = dict(await decoded_postings(store))
    async for batch in store.iter_chunks():
        for s in batch:
            assert postings[s.key] == dict(Counter(s.content.split()))


async def test_concurrent_writers_share_one_vocabulary(postgres_dsn: str, fresh: str) -> None:
    """Two stores (two pools) write one collection at once; a reader sees no step back."""
    first = await PostgresMetadataStore.open(postgres_dsn, fresh)
    second = await PostgresMetadataStore.open(postgres_dsn, fresh)
    reader = await PostgresMetadataStore.open(postgres_dsn, fresh, max_connections=1)
    rounds = 25
    seen: list[int] = []
    done = asyncio.Event()

    async def watch() -> None:
        while not done.is_set():
            seen.append(await reader.generation())
            await asyncio.sleep(0)

    watcher = asyncio.create_task(watch())
    try:
        await asyncio.gather(write_rounds(first, "x", rounds), write_rounds(second, "y", rounds))
        done.set()
        await watcher
        assert seen == sorted(seen), "generation went backwards"
        await check_rounds(reader, "xy", rounds)
    finally:
        done.set()
        watcher.cancel()
        for opened in (first, second, reader):
            await opened.close()


async def test_a_reader_following_new_keys_misses_no_chunk(postgres_dsn: str, fresh: str) -> None:
    """Keys become visible in the order they grow: a reader that asks again and again for the
    keys above the largest it has seen, as a live index does, finds every chunk written
    while two stores (two pools) write at once."""
    first = await PostgresMetadataStore.open(postgres_dsn, fresh)
    second = await PostgresMetadataStore.open(postgres_dsn, fresh)
    reader = await PostgresMetadataStore.open(postgres_dsn, fresh, max_connections=1)
    seen: list[int] = []
    done = asyncio.Event()

    async def follow() -> None:
        while True:
            last_pass = done.is_set()
            async for batch in reader.postings_since(max(seen, default=0)):
                seen.extend(batch.keys.tolist())
            if last_pass:
                return
            await asyncio.sleep(0)

    follower = asyncio.create_task(follow())
    try:
        await asyncio.gather(write_rounds(first, "x", 15), write_rounds(second, "y", 15))
        done.set()
        await follower
        assert seen == sorted(k for k, _ in await decoded_postings(reader))
        assert len(seen) == 2 * 15 * 3  # every version of every chunk is retained
    finally:
        done.set()
        follower.cancel()
        for opened in (first, second, reader):
            await opened.close()


_WRITER = """
import asyncio, sys
from groundkit.storage.postgres import PostgresMetadataStore
from tests.storage.test_postgres_store import write_rounds

async def main(dsn: str, name: str, tag: str, rounds: int) -> None:
    store = await PostgresMetadataStore.open(dsn, name)
    try:
        await write_rounds(store, tag, rounds)
    finally:
        await store.close()

asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])))
"""


async def test_writer_processes_share_one_vocabulary(postgres_dsn: str, fresh: str) -> None:
    """Three processes, each with its own cache, ingest one collection at the same time."""
    store = await PostgresMetadataStore.open(postgres_dsn, fresh)  # created before they start
    try:
        rounds = 20
        argv = [[postgres_dsn, fresh, tag, str(rounds)] for tag in "pqr"]
        assert await run_pythons(_WRITER, argv) == [0, 0, 0]
        await check_rounds(store, "pqr", rounds)
    finally:
        await store.close()


async def test_stale_vocabulary_cache_reads_back_ids(postgres_dsn: str, fresh: str) -> None:
    first = await PostgresMetadataStore.open(postgres_dsn, fresh)
    second = await PostgresMetadataStore.open(postgres_dsn, fresh)
    try:
        await put(first, "a.txt", ["alpha"])
        await put(second, "b.txt", ["beta alpha"])
        await put(first, "c.txt", ["beta gamma"])  # first's cache has never seen "beta"
        vocab = await first.vocabulary()
        assert vocab == {"alpha": 1, "beta": 2, "gamma": 3}
    finally:
        await first.close()
        await second.close()


async def test_concurrent_first_open_creates_once(postgres_dsn: str, fresh: str) -> None:
    stores = await asyncio.gather(
        *(PostgresMetadataStore.open(postgres_dsn, fresh, max_connections=1) for _ in range(4))
    )
    try:
        for opened in stores:
            assert await opened.generation() == 0
    finally:
        for opened in stores:
            await opened.close()


async def test_write_after_collection_dropped_is_a_storage_error(
    postgres_dsn: str, fresh: str
) -> None:
    store = await PostgresMetadataStore.open(postgres_dsn, fresh)
    other = await PostgresMetadataStore.open(postgres_dsn, fresh)
    await other.drop()
    try:
        with pytest.raises(StorageError, match=repr(fresh)):
            await put_document(store, Document(document_id="d", source="d", content="x"), [], [])
    finally:
        await store.close()


@pytest.mark.parametrize(
    ("sql", "damage"),
    [
        ("UPDATE {s}.documents SET metadata = '{{not json'", "metadata"),
        ("UPDATE {s}.documents SET source_class = 'sorcery'", "source class"),
        ("UPDATE {s}.chunks SET end_offset = end_offset + 7", "offsets"),
        ("UPDATE {s}.chunks SET term_ids = '\\x010000'::bytea", "term statistics"),
        ("UPDATE {s}.state SET manifest = '{{\"provider\": 3}}'", "embedding manifest"),
        # What schema 3 added: versions, validity, the change log, the uid.
        ("UPDATE {s}.chunks SET version = 0 WHERE valid_to IS NULL", "version"),
        ("UPDATE {s}.chunks SET valid_from = 'NaN'", "start of validity"),
        ("UPDATE {s}.chunks SET valid_to = 'NaN' WHERE valid_to IS NOT NULL", "end of validity"),
        ("UPDATE {s}.documents SET version = 0", "version"),
        ("UPDATE {s}.documents SET valid_from = 'NaN'", "start of validity"),
        ("UPDATE {s}.document_versions SET metadata = '[secretword'", "metadata"),
        ("UPDATE {s}.document_versions SET source_class = 'sorcery'", "source class"),
        ("DELETE FROM {s}.document_versions", "chunk owner (a chunk without its document)"),
        ("UPDATE {s}.state SET uid = NULL", "collection uid"),
        ("UPDATE {s}.state SET changes_floor = -1", "change log floor"),
        ("UPDATE {s}.changes SET valid_to = 'NaN'", "change-log time"),
        ("UPDATE {s}.changes SET tfs = '\\x00000000'::bytea", "term statistics"),
    ],
)
async def test_damaged_values_are_storage_errors_naming_the_row(
    postgres_dsn: str, fresh: str, sql: str, damage: str
) -> None:
    store = await PostgresMetadataStore.open(postgres_dsn, fresh)
    try:
        await put(store, "a.txt", ["alpha secretword", "beta"])
        await put(store, "a.txt", ["alpha secretword again"])  # version 2, a change logged
        keys = [k for k, _ in await decoded_postings(store)]
        conn = await asyncpg.connect(postgres_dsn)
        try:
            await conn.execute(sql.format(s=f'"{schema_name(fresh)}"'))
        finally:
            await conn.close()
        calls: list[Callable[[], Awaitable[Any]]] = [
            store.read_manifest,
            store.document_states,
            store.collection_uid,
            store.chunk_owners,
            lambda: _drain(store.iter_documents()),
            lambda: _drain(store.iter_chunks()),
            lambda: _drain(store.iter_postings()),
            lambda: _drain(store.postings_since(0)),
            lambda: store.changes_since(0),
            lambda: store.get_chunk("doc:a.txt#0", 1),
            lambda: store.get_chunks_by_keys(keys),
            # A write reads the start of the current version.
            lambda: put(store, "a.txt", ["alpha secretword third"]),
        ]
        failures: list[str] = []
        for call in calls:
            try:
                await call()
            except StorageError as exc:
                failures.append(str(exc))
        assert any(f": damaged {damage};" in message for message in failures), failures
        assert all("secretword" not in message for message in failures)
    finally:
        await store.drop()


async def _drain(iterator: Any) -> list[Any]:
    return [item async for item in iterator]


async def test_a_write_that_waited_for_the_lock_starts_after_what_committed_meanwhile(
    pg: PostgresMetadataStore, postgres_dsn: str
) -> None:
    """A writer waiting for the collection's write lock while another commits a newer
    version of the same document starts its own version when it holds the lock, so after
    that one: it used to take its moment before waiting, and its write failed."""
    await put(pg, "a.txt", ["version one"])
    other = await asyncpg.connect(postgres_dsn)
    try:
        held = other.transaction()
        await held.start()
        await other.execute(f"SELECT 1 FROM {pg._s}.state WHERE id = 1 FOR UPDATE")
        writing = asyncio.ensure_future(put(pg, "a.txt", ["version three"]))
        await asyncio.sleep(0.2)  # the write is waiting for the lock
        # What another writer's commit of version two leaves: its row current from now.
        await other.execute(
            f"UPDATE {pg._s}.documents SET valid_from = extract(epoch FROM clock_timestamp()),"
            " version = 2 WHERE source = 'a.txt'"
        )
        await held.commit()
        await writing
    finally:
        await other.close()
    stored = await document_by_source(pg, "a.txt")
    assert stored is not None and stored.version == 3


# -- a collection dropped and made again --------------------------------------


async def test_a_write_into_a_collection_made_again_is_refused(
    postgres_dsn: str, fresh: str
) -> None:
    """A store opened before the collection was dropped and made again must not write its
    cached term ids (the old collection's) into the new one."""
    stale = await PostgresMetadataStore.open(postgres_dsn, fresh)
    try:
        await put(stale, "a.txt", ["alpha bravo charlie"])
        await (await PostgresMetadataStore.open(postgres_dsn, fresh)).drop()
        again = await PostgresMetadataStore.open(postgres_dsn, fresh)
        try:
            await put(again, "z.txt", ["zulu yankee"])
            before, vocabulary = await snapshot(again), await again.vocabulary()
            with pytest.raises(StorageError, match=r"dropped or made again.*open it again"):
                await put(stale, "b.txt", ["alpha bravo"])
            with pytest.raises(StorageError, match="dropped or made again"):
                await stale.set_base_dir("/elsewhere")
            assert await snapshot(again) == before
            assert await again.vocabulary() == vocabulary
            assert await again.get_base_dir() is None
        finally:
            await again.close()
    finally:
        await stale.close()
    reopened = await PostgresMetadataStore.open(postgres_dsn, fresh, create=False)
    try:
        await put(reopened, "b.txt", ["alpha bravo"])  # a store opened since writes
        assert await reopened.vocabulary() == {**vocabulary, "alpha": 3, "bravo": 4}
    finally:
        await reopened.close()


async def test_a_write_after_the_drop_names_the_remedy(postgres_dsn: str, fresh: str) -> None:
    store = await PostgresMetadataStore.open(postgres_dsn, fresh)
    await put(store, "a.txt", ["alpha"])
    await (await PostgresMetadataStore.open(postgres_dsn, fresh)).drop()
    try:
        with pytest.raises(StorageError, match=r"dropped or made again.*open it again"):
            await put(store, "b.txt", ["beta"])
    finally:
        await store.close()


# -- a server that does not answer --------------------------------------------


class _Proxy:
    """A TCP relay to the server that can stop forwarding bytes while keeping its sockets
    open: what a network partition or a frozen host looks like to a client."""

    def __init__(self, dsn: str) -> None:
        self._dsn = dsn
        self.flowing = asyncio.Event()
        self.flowing.set()
        self._writers: list[asyncio.StreamWriter] = []
        self._server: asyncio.Server | None = None

    async def __aenter__(self) -> str:
        parts = urlsplit(self._dsn)
        host, port = parts.hostname or "127.0.0.1", parts.port or 5432

        async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            try:
                while data := await reader.read(65536):
                    await self.flowing.wait()
                    writer.write(data)
                    await writer.drain()
            except OSError:
                pass
            finally:
                writer.close()

        async def relay(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            upstream_reader, upstream_writer = await asyncio.open_connection(host, port)
            self._writers += [writer, upstream_writer]
            await asyncio.gather(pipe(reader, upstream_writer), pipe(upstream_reader, writer))

        self._server = await asyncio.start_server(relay, "127.0.0.1", 0)
        proxy_port = self._server.sockets[0].getsockname()[1]
        netloc = parts.netloc.rsplit("@", 1)
        netloc[-1] = f"127.0.0.1:{proxy_port}"
        return urlunsplit(parts._replace(netloc="@".join(netloc)))

    async def __aexit__(self, *exc: object) -> None:
        self.flowing.set()
        for writer in self._writers:
            writer.close()
        if self._server is not None:
            self._server.close()


def test_statement_timeout_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(TIMEOUT_ENV, raising=False)
    assert command_timeout() == DEFAULT_TIMEOUT
    assert command_timeout(2.5) == 2.5
    assert command_timeout(0) is None
    monkeypatch.setenv(TIMEOUT_ENV, "7")
    assert command_timeout() == 7.0
    monkeypatch.setenv(TIMEOUT_ENV, "0")
    assert command_timeout() is None
    for bad in ("soon", "-1", "inf", "nan"):
        monkeypatch.setenv(TIMEOUT_ENV, bad)
        with pytest.raises(ConfigurationError, match=TIMEOUT_ENV):
            command_timeout()


@pytest.mark.parametrize(
    ("value", "meaning"),
    [("", DEFAULT_TIMEOUT), ("  ", DEFAULT_TIMEOUT), ("0", None), (" 2.5 ", 2.5), ("-0", None)],
)
def test_a_statement_timeout_variable_that_is_taken(
    monkeypatch: pytest.MonkeyPatch, value: str, meaning: float | None
) -> None:
    # Empty or blank: the default, as when unset; 0: no timeout.
    monkeypatch.setenv(TIMEOUT_ENV, value)
    assert command_timeout() == meaning


@pytest.mark.parametrize("value", ["abc", "-1", "inf", "-inf", "nan", "1e400", "0x10", " soon "])
def test_a_refused_statement_timeout_variable_is_quoted_as_set(
    monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    monkeypatch.setenv(TIMEOUT_ENV, value)
    with pytest.raises(ConfigurationError) as refused:
        command_timeout()
    message = str(refused.value)
    assert TIMEOUT_ENV in message and message.endswith(f"got {value!r}"), message


async def test_a_server_that_stops_answering_is_a_storage_error(
    postgres_dsn: str, fresh: str
) -> None:
    proxy = _Proxy(postgres_dsn)
    async with proxy as through:
        store = await PostgresMetadataStore.open(through, fresh, statement_timeout=0.5)
        try:
            await put(store, "a.txt", ["alpha"])
            proxy.flowing.clear()  # the sockets stay open; no byte arrives
            with pytest.raises(StorageError, match=r"did not answer within 0\.5 s") as info:
                await store.document_ids()
            assert TIMEOUT_ENV in str(info.value)
            with pytest.raises(StorageError, match="did not answer"):
                await put(store, "b.txt", ["beta"])
            proxy.flowing.set()
            # The stalled connections were cut, not handed back: the pool connects anew.
            assert await document_sources(store) == ["a.txt"]
        finally:
            await store.close()


async def test_a_cancelled_call_returns_when_the_server_stops_answering(
    postgres_dsn: str, fresh: str
) -> None:
    """``asyncio.wait_for`` around a call gets control back at its deadline, even with no
    statement timeout: the stalled connection is cut, not waited on."""
    proxy = _Proxy(postgres_dsn)
    async with proxy as through:
        store = await PostgresMetadataStore.open(through, fresh, statement_timeout=0)
        try:
            await put(store, "a.txt", ["alpha"])
            proxy.flowing.clear()
            for call in (store.document_ids, lambda: put(store, "b.txt", ["beta"])):
                task = asyncio.ensure_future(asyncio.wait_for(call(), 0.5))
                done, _ = await asyncio.wait({task}, timeout=60)  # a hang fails, not stalls
                assert task in done, "the cancelled call did not return"
                assert isinstance(task.exception(), TimeoutError)
            proxy.flowing.set()
            assert await document_sources(store) == ["a.txt"]
        finally:
            await store.close()


async def test_the_writer_lock_is_waited_for_beyond_the_timeout(
    postgres_dsn: str, fresh: str
) -> None:
    store = await PostgresMetadataStore.open(postgres_dsn, fresh, statement_timeout=0.5)
    holder = await asyncpg.connect(postgres_dsn)
    # Watched from a connection of its own: inside the holder's transaction the server
    # keeps one snapshot of pg_stat_activity, and a first look taken before the writer
    # queued would never see it.
    watcher = await asyncpg.connect(postgres_dsn)
    try:
        lock = holder.transaction()
        await lock.start()
        await holder.execute(f'SELECT 1 FROM "{schema_name(fresh)}".state FOR UPDATE')
        writing = asyncio.ensure_future(put(store, "a.txt", ["alpha"]))
        while not await watcher.fetchval(
            "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
            " AND query LIKE '%FOR UPDATE%' AND pid = ANY($1::int[])",
            [pid for pid in await _backends_of(watcher, schema_name(fresh))],
        ):
            assert not writing.done(), writing.exception()
            await asyncio.sleep(0.05)
        await asyncio.sleep(2.0)  # four times the statement timeout
        assert not writing.done(), writing.exception()
        await lock.rollback()
        await writing
        assert await document_sources(store) == ["a.txt"]
    finally:
        await watcher.close()
        await holder.close()
        await store.close()


async def _backends_of(watcher: Any, schema: str) -> list[int]:
    """The server processes whose current query names ``schema`` (this test's only)."""
    rows = await watcher.fetch(
        "SELECT pid FROM pg_stat_activity WHERE query LIKE '%' || $1 || '%'"
        " AND pid <> pg_backend_pid()",
        schema,
    )
    return [int(row["pid"]) for row in rows]


async def test_pool_connections_have_keepalives(pg: PostgresMetadataStore) -> None:
    import socket

    async with pg._connection() as conn:
        transport: Any = getattr(conn, "_transport")  # noqa: B009 (asyncpg has no public one)
        sock = transport.get_extra_info("socket")
        assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE) == 1


# -- schemas another role owns ------------------------------------------------


@pytest.fixture
async def role_dsn(postgres_dsn: str) -> AsyncIterator[str]:
    """The DSN of a new login role that may create schemas but read no one else's."""
    role, password = f"r{uuid.uuid4().hex[:12]}", uuid.uuid4().hex
    admin = await asyncpg.connect(postgres_dsn)
    try:
        database = await admin.fetchval("SELECT current_database()")
        await admin.execute(f"CREATE ROLE {role} LOGIN PASSWORD '{password}'")
        await admin.execute(f'GRANT CREATE ON DATABASE "{database}" TO {role}')
        parts = urlsplit(postgres_dsn)
        host = parts.netloc.rsplit("@", 1)[-1]
        yield urlunsplit(parts._replace(netloc=f"{role}:{password}@{host}"))
    finally:
        await admin.execute(f"DROP OWNED BY {role} CASCADE")
        await admin.execute(f"DROP ROLE {role}")
        await admin.close()


async def test_a_schema_the_role_cannot_read_does_not_stop_its_own(
    postgres_dsn: str, role_dsn: str, fresh: str
) -> None:
    foreign = await PostgresMetadataStore.open(postgres_dsn, fresh)  # another owner's
    await put(foreign, "a.txt", ["alpha"])
    await foreign.close()
    own = StoreLocation.resolve(_name(), metadata_url=role_dsn)
    assert not await own.exists()
    store = await PostgresMetadataStore.open(role_dsn, own.name)
    try:
        await put(store, "b.txt", ["beta"])
    finally:
        await store.close()
    assert await own.exists()
    assert await own.list_collections() == [own.name]  # the foreign one is not listed
    assert fresh in await StoreLocation.resolve(fresh, metadata_url=postgres_dsn).list_collections()


async def test_a_collection_the_role_cannot_read_is_no_connection_error(
    postgres_dsn: str, role_dsn: str, fresh: str
) -> None:
    await (await PostgresMetadataStore.open(postgres_dsn, fresh)).close()
    with pytest.raises(StorageError, match="permission denied") as info:
        await StoreLocation.resolve(fresh, metadata_url=role_dsn).exists()
    assert "cannot connect" not in str(info.value)
    assert f"could not open collection {fresh!r}" in str(info.value)
