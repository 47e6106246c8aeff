"""Shared fixtures: a corpus on disk, a SQLite store, an open Collection."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from hypothesis import settings

from groundkit import Collection, SQLiteMetadataStore
from tests.embedding_server import OpenAIServer, start_openai_server
from tests.pg_support import fresh, postgres_dsn  # noqa: F401  (shared fixtures)
from tests.s3_support import s3_server  # noqa: F401  (a session fixture, shared)
from tests.support import CORPUS, SMALL_CHUNKS, write_tree

settings.register_profile("groundkit", deadline=None, print_blob=True)
settings.load_profile("groundkit")


@pytest.fixture
def corpus_dir(tmp_path: Path) -> Path:
    """A small mixed-language corpus (nested dirs, CRLF, emoji, a non-ASCII file name)."""
    base = tmp_path / "corpus"
    write_tree(base, dict(CORPUS))
    return base


@pytest.fixture
def index_dir(tmp_path: Path) -> Path:
    return tmp_path / "index"


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SQLiteMetadataStore]:
    s = await SQLiteMetadataStore.open(tmp_path / "store" / "meta.sqlite3")
    try:
        yield s
    finally:
        await s.close()


@pytest.fixture
async def collection(index_dir: Path, corpus_dir: Path) -> AsyncIterator[Collection]:
    async with Collection.open(index_dir, base_dir=corpus_dir, chunking=SMALL_CHUNKS) as col:
        yield col


@pytest.fixture
async def ingested(collection: Collection, corpus_dir: Path) -> Collection:
    report = await collection.ingest(corpus_dir)
    assert not report.failed
    return collection


@pytest.fixture(scope="session")
def openai_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[OpenAIServer]:
    """A real OpenAI-compatible embedding server (txtai serving the packaged MiniLM)."""
    server = start_openai_server(tmp_path_factory.mktemp("txtai"))
    try:
        yield server
    finally:
        server.stop()
