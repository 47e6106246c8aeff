"""A refused write names the document (source, chunk index), never the text it holds.

Every document here carries a marker in its chunk text and its terms; each
write the stores must refuse is provoked, on SQLite and on PostgreSQL, and the
marker must appear in no error message. A refused write leaves the store as it was.
"""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from groundkit import StorageError
from groundkit.contracts import Chunk, Document
from groundkit.storage import MetadataStoreProtocol, SQLiteMetadataStore
from groundkit.storage.postgres import PostgresMetadataStore
from groundkit.testing.conformance.helpers import make_document, put
from groundkit.testing.conformance.metadata import snapshot

MARKER = "zqmarkerqz"

Batch = list[tuple[Document, list[Chunk], list[list[str]]]]


@pytest.fixture
async def sqlite_store(tmp_path: Path) -> AsyncIterator[SQLiteMetadataStore]:
    store = await SQLiteMetadataStore.open(tmp_path / "meta.sqlite3")
    try:
        await put(store, "kept.txt", ["already stored"])
        yield store
    finally:
        await store.close()


@pytest.fixture
async def postgres_store(postgres_dsn: str, fresh: str) -> AsyncIterator[PostgresMetadataStore]:
    store = await PostgresMetadataStore.open(postgres_dsn, fresh, max_connections=2)
    try:
        await put(store, "kept.txt", ["already stored"])
        yield store
    finally:
        await store.close()


@pytest.fixture(params=["sqlite_store", "postgres_store"])
def any_store(request: pytest.FixtureRequest) -> MetadataStoreProtocol:
    store: MetadataStoreProtocol = request.getfixturevalue(request.param)
    return store


def one(source: str, pieces: list[str], **kwargs: object) -> Batch:
    document, chunks, terms = make_document(source, pieces, **kwargs)  # type: ignore[arg-type]
    return [(document, chunks, terms)]


def with_terms(batch: Batch, terms: list[list[str]]) -> Batch:
    ((document, chunks, _),) = batch
    return [(document, chunks, terms)]


# Writes either store refuses: constraint violations and text UTF-8 cannot encode.
COMMON: dict[str, Batch] = {
    "duplicate chunk ids": one("b.txt", [f"{MARKER} one", f"{MARKER} two"], chunk_ids=["x", "x"]),
    "chunk id of another document": one("b.txt", [f"{MARKER} one"], chunk_ids=["doc:kept.txt#0"]),
    "document id of another source": one("b.txt", [f"{MARKER} one"], document_id="doc:kept.txt"),
    "lone surrogate in the text": one("b.txt", ["fine", f"{MARKER} \ud800 inside"]),
    "lone surrogate in a term only": with_terms(
        one("b.txt", [f"{MARKER} clean"]), [[MARKER, "te\udfffrm"]]
    ),
    "bad document among good ones": (
        one("a.txt", [f"{MARKER} good"])
        + one("b.txt", [f"{MARKER} \udc80 bad"])
        + one("c.txt", [f"{MARKER} good"])
    ),
}
# What PostgreSQL text cannot hold, which SQLite stores.
POSTGRES_ONLY: dict[str, Batch] = {
    "NUL in the text": one("b.txt", [f"{MARKER} nul \x00 inside"]),
    "NUL in a term": with_terms(one("b.txt", [f"{MARKER} clean"]), [[MARKER, "t\x00"]]),
    # An incompressible term beyond what a btree index entry can hold.
    "over-long term": one("b.txt", [f"{MARKER} {secrets.token_hex(5000)}"]),
}


async def refused(store: MetadataStoreProtocol, batch: Batch) -> str:
    before = await snapshot(store)
    vocabulary = await store.vocabulary()
    with pytest.raises(StorageError) as caught:
        await store.replace_documents(batch)
    assert await snapshot(store) == before
    assert await store.vocabulary() == vocabulary
    message = str(caught.value)
    assert MARKER not in message, message
    assert "\n" not in message
    return message


@pytest.mark.parametrize("case", sorted(COMMON))
async def test_refused_writes_never_quote_the_text(
    any_store: MetadataStoreProtocol, case: str
) -> None:
    message = await refused(any_store, COMMON[case])
    assert "'b.txt'" in message or "documents" in message


async def test_text_utf8_cannot_encode_is_named_by_source_and_chunk(
    any_store: MetadataStoreProtocol,
) -> None:
    message = await refused(any_store, COMMON["lone surrogate in the text"])
    assert message.startswith("could not store 'b.txt': chunk 1 cannot be encoded as UTF-8")
    message = await refused(any_store, COMMON["bad document among good ones"])
    assert message.startswith("could not store 'b.txt': chunk 0 ")
    message = await refused(any_store, COMMON["lone surrogate in a term only"])
    assert message.startswith("could not store 'b.txt': a term of chunk 0 cannot be encoded")


@pytest.mark.parametrize("case", sorted(POSTGRES_ONLY))
async def test_postgres_refusals_never_quote_the_text(
    postgres_store: PostgresMetadataStore, case: str
) -> None:
    message = await refused(postgres_store, POSTGRES_ONLY[case])
    assert "'b.txt'" in message
    if case.startswith("NUL"):
        assert "holds a NUL character" in message


async def test_sqlite_stores_nul_and_long_terms(sqlite_store: SQLiteMetadataStore) -> None:
    for batch in POSTGRES_ONLY.values():
        await sqlite_store.replace_documents(batch)
    assert await sqlite_store.chunk_count() == 2  # kept.txt, and b.txt as last written


async def test_a_read_given_text_utf8_cannot_encode_is_a_storage_error(
    any_store: MetadataStoreProtocol,
) -> None:
    # The API checks its arguments first; a direct store call still gets a typed error.
    for call in (
        any_store.get_chunk(f"{MARKER}\ud800"),
        any_store.get_chunks_by_ids([f"{MARKER}\udcff"]),
    ):
        with pytest.raises(StorageError) as caught:
            await call
        assert MARKER not in str(caught.value) and "\n" not in str(caught.value)
    assert await any_store.get_chunk("doc:kept.txt#0") is not None
