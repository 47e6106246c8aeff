"""Shared fixtures: a corpus on disk, a SQLite store, an open Collection."""

from __future__ import annotations

import importlib.util
import os
from collections.abc import AsyncIterator, Generator, Iterator
from pathlib import Path

import pluggy
import pytest
from hypothesis import settings

from groundkit import Collection, ConfigurationError
from groundkit.storage import SQLiteMetadataStore
from tests.embedding_server import OpenAIServer, start_openai_server
from tests.pg_support import fresh, postgres_dsn  # noqa: F401  (shared fixtures)
from tests.s3_support import s3_server  # noqa: F401  (a session fixture, shared)
from tests.support import CORPUS, SMALL_CHUNKS, write_tree

settings.register_profile("groundkit", deadline=None, print_blob=True)
settings.load_profile("groundkit")


@pytest.fixture(scope="session", autouse=True)
def _private_cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Segment packs and vector-cache files of the run go to a directory of its own, not
    the user's ``~/.cache/groundkit`` (a test that means the default sets it itself)."""
    if "GROUNDKIT_CACHE_DIR" in os.environ:
        yield
        return
    os.environ["GROUNDKIT_CACHE_DIR"] = str(tmp_path_factory.mktemp("groundkit-cache"))
    try:
        yield
    finally:
        os.environ.pop("GROUNDKIT_CACHE_DIR", None)


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


# -- the fast set (make test-fast) ------------------------------------------------------

# Modules whose tests start servers or other Pythons, embed a corpus with the real model,
# or read the SciFact data: the suite's long tail. ``make test-fast`` leaves them out; the
# full suite (``make test``, CI) runs everything.
SLOW_MODULES = (
    "tests/evals/",
    "tests/test_readme.py",
    "tests/test_cli_versions.py",
    "tests/test_packaging.py",
    "tests/test_process_exit.py",
    "tests/test_clean_exit.py",
    "tests/test_live_processes.py",
    "tests/test_shared_collection.py",
    "tests/test_http_embedded.py",
    "tests/test_vector_recovery.py",
    "tests/test_progress_terminal.py",
    "tests/test_dense_collection.py",
    "tests/test_testing.py",
    "tests/test_dependencies.py",
    "tests/service/test_inspector.py",
    "tests/service/test_transport.py",
    "tests/providers/test_openai_server.py",
    "tests/providers/test_local.py",
    "tests/providers/test_onnx.py",
    "tests/storage/test_postgres_store.py",
    "tests/storage/test_postgres_migration.py",
    "tests/storage/test_s3_vectors.py",
    "tests/lexical/test_one_format.py",
    "tests/test_writer_stress.py",
    "tests/test_atomic_records.py",
    "tests/test_interrupted_ingests.py",
)

# On an interpreter that has no torch build to install (CI's Python 3.12 and 3.13 jobs set
# this), a test that reaches for the [local] extra is skipped, naming what it needed. The
# exception it raised decides: torch, transformers or sentence-transformers missing, or
# groundkit's own ConfigurationError asking for groundkit[local] (or groundkit[onnx], which
# exports with torch).
WITHOUT_TORCH = os.environ.get("GROUNDKIT_TESTS_WITHOUT_TORCH") == "1"
_TORCH_MODULES = frozenset(
    {"torch", "transformers", "sentence_transformers", "txtai", "onnxruntime", "onnx"}
)


# The longest files of the suite, longest first (`--durations`: the SciFact dense and hybrid
# guard embeds the corpus for about 9 minutes, the Ray cluster tests take about 4). With
# `make test` each file runs whole on one worker, handed out in collection order: these
# start first, so none of them begins late and becomes the run's tail (adr/0084).
LONGEST_FIRST = ("tests/evals/test_quality_guard.py", "tests/distributed/")


def _start_rank(item: pytest.Item) -> int:
    for rank, prefix in enumerate(LONGEST_FIRST):
        if item.nodeid.startswith(prefix):
            return rank
    return len(LONGEST_FIRST)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if item.nodeid.startswith(SLOW_MODULES):
            item.add_marker(pytest.mark.slow)
    # Stable: the rest keep their order, and every worker collects the same one.
    items.sort(key=_start_rank)


def _needs_torch(error: BaseException) -> bool:
    if isinstance(error, ModuleNotFoundError):
        return (error.name or "").split(".")[0] in _TORCH_MODULES
    return isinstance(error, ConfigurationError) and (
        "groundkit[local]" in str(error) or "groundkit[onnx]" in str(error)
    )


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pluggy.Result[pytest.TestReport], None]:
    outcome = yield
    if not WITHOUT_TORCH or call.excinfo is None or importlib.util.find_spec("torch"):
        return
    if _needs_torch(call.excinfo.value):
        report = outcome.get_result()
        report.outcome = "skipped"
        report.longrepr = (
            str(item.path),
            item.location[1] or 0,
            f"needs torch: {call.excinfo.value}",
        )
