"""The local read-through cache of a vector table on S3-compatible storage (moto on 127.0.0.1).

Every test compares the cached store with an uncached store on the same table: the
cache may only change where bytes are read from, never what a search answers.
"""

from __future__ import annotations

import asyncio
import fcntl
import json
import logging
import os
import shutil
import threading
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from groundkit.errors import ConfigurationError, StorageError
from groundkit.storage.lancedb import LanceDBVectorStore
from groundkit.storage.location import StoreLocation
from groundkit.storage.vector_cache import (
    CachedLanceDBVectorStore,
    VectorCacheSettings,
    parse_bytes,
)
from groundkit.testing.conformance.vectors import DIM, VectorStoreConformance, upsert
from tests.s3_support import S3Server
from tests.services import run_pythons

WIDE = 16
_MiB = 2**20


@pytest.fixture(scope="module")
def bucket(s3_server: S3Server) -> str:
    name = f"gk-{uuid.uuid4().hex[:12]}"
    s3_server.create_bucket(name)
    return name


@pytest.fixture
def prefix(bucket: str) -> str:
    return f"s3://{bucket}/idx-{uuid.uuid4().hex[:12]}"


@pytest.fixture
def cache(tmp_path: Path) -> VectorCacheSettings:
    return VectorCacheSettings(tmp_path / "cache", 64 * _MiB)


async def _cached(
    s3: S3Server, prefix: str, cache: VectorCacheSettings, name: str = "t", dim: int = WIDE
) -> CachedLanceDBVectorStore:
    return await CachedLanceDBVectorStore.open_cached(
        prefix, name, dim, cache=cache, storage_options=s3.storage_options, ann_threshold=200
    )


async def _plain(s3: S3Server, prefix: str, name: str = "t", dim: int = WIDE) -> LanceDBVectorStore:
    return await LanceDBVectorStore.open(
        prefix, name, dim, storage_options=s3.storage_options, ann_threshold=200
    )


async def _fill(store: LanceDBVectorStore, docs: int, seed: int, tag: str = "d") -> None:
    rng = np.random.default_rng(seed)
    items = [
        (f"{tag}{i}", [f"{tag}{i}#{j}" for j in range(10)], rng.normal(size=(10, store.dimensions)))
        for i in range(docs)
    ]
    await store.upsert_documents(items)


def _hits(found: list) -> list[tuple[str, str, float]]:  # type: ignore[type-arg]
    return [(h.chunk_id, h.document_id, h.score) for h in found]


async def _same(
    cached: LanceDBVectorStore, plain: LanceDBVectorStore, queries: int, seed: int, top_k: int = 10
) -> None:
    rng = np.random.default_rng(seed)
    for _ in range(queries):
        vector = rng.normal(size=cached.dimensions)
        assert _hits(await cached.query(vector, top_k)) == _hits(await plain.query(vector, top_k))


def _files(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*") if p.is_file()) if root.exists() else []


def _data_files(store: CachedLanceDBVectorStore) -> list[Path]:
    assert store.mirror is not None
    return _files(store.mirror.table_dir / "data")


class TestCachedStoreConformance(VectorStoreConformance):
    @pytest.fixture
    async def vector_store(
        self, s3_server: S3Server, prefix: str, cache: VectorCacheSettings
    ) -> AsyncIterator[CachedLanceDBVectorStore]:
        store = await _cached(s3_server, prefix, cache, "conformance", DIM)
        try:
            yield store
        finally:
            await store.close()


async def test_searches_read_the_cache_and_answer_as_uncached(
    s3_server: S3Server, prefix: str, cache: VectorCacheSettings
) -> None:
    writer = await _plain(s3_server, prefix)
    await _fill(writer, 40, seed=1)  # 400 rows: past the ANN threshold, so an index too
    await writer.optimize()
    cached = await _cached(s3_server, prefix, cache)
    try:
        assert await cached.has_ann_index()
        await _same(cached, writer, 20, seed=2)
        assert cached.mirror is not None and cached.mirror.fetched_files > 0
        assert cached.cache_state == "cached"
        assert any((cached.mirror.table_dir / "_indices").rglob("*.idx"))
        fetched = cached.mirror.fetched_files
        await _same(cached, writer, 20, seed=3)
        assert cached.mirror.fetched_files == fetched  # warm: nothing downloaded again
        # Restricted searches (the document list read from the copy) agree too.
        vector = np.ones(WIDE)
        wanted = {"d1", "d7", "d30"}
        assert _hits(await cached.query(vector, 5, document_ids=wanted)) == _hits(
            await writer.query(vector, 5, document_ids=wanted)
        )
    finally:
        await cached.close()
        await writer.close()


@pytest.fixture(scope="module")
def shared_table(
    s3_server: S3Server, bucket: str, tmp_path_factory: pytest.TempPathFactory
) -> tuple[S3Server, str, Path]:
    """One table with deletions, and a cache directory, shared by the property's examples."""
    server = s3_server
    prefix = f"s3://{bucket}/property-{uuid.uuid4().hex[:8]}"

    async def build() -> None:
        writer = await _plain(server, prefix)
        await _fill(writer, 30, seed=5)
        await writer.delete_documents(["d3", "d4"])  # deletion files in the version read
        await writer.close()

    asyncio.run(build())
    return server, prefix, tmp_path_factory.mktemp("property-cache")


@settings(
    max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    seeds=st.lists(st.integers(0, 2**31), min_size=1, max_size=6),
    top_k=st.integers(1, 60),
    restrict=st.sets(st.integers(0, 29), max_size=8),
)
def test_any_query_answers_as_uncached(
    shared_table: tuple[S3Server, str, Path], seeds: list[int], top_k: int, restrict: set[int]
) -> None:
    server, prefix, root = shared_table
    wanted = {f"d{i}" for i in restrict} or None

    async def compare() -> None:
        cached = await _cached(server, prefix, VectorCacheSettings(root, 64 * _MiB))
        plain = await _plain(server, prefix)
        try:
            for seed in seeds:
                vector = np.random.default_rng(seed).normal(size=WIDE)
                got = await cached.query(vector, top_k, document_ids=wanted)
                assert _hits(got) == _hits(await plain.query(vector, top_k, document_ids=wanted))
            assert cached.cache_state == "cached"
        finally:
            await cached.close()
            await plain.close()

    asyncio.run(compare())


async def test_another_writers_commit_is_seen_at_the_next_search(
    s3_server: S3Server, prefix: str, cache: VectorCacheSettings
) -> None:
    writer = await _plain(s3_server, prefix)
    await _fill(writer, 10, seed=1)
    cached = await _cached(s3_server, prefix, cache)
    try:
        probe = np.random.default_rng(9).normal(size=WIDE)
        before = _hits(await cached.query(probe, 5))
        await upsert(writer, "new", ["new#0"], probe[None, :])  # exactly the probe: ranks first
        assert _hits(await cached.query(probe, 5)) == before  # as uncached: until a refresh
        await cached.refresh()
        found = await cached.query(probe, 5)
        assert found[0].chunk_id == "new#0"
        assert _hits(found) == _hits(await writer.query(probe, 5))
        # This process's own write is seen by its next search, without a refresh.
        other = -probe
        await upsert(cached, "mine", ["mine#0"], other[None, :])
        assert (await cached.query(other, 1))[0].chunk_id == "mine#0"
    finally:
        await cached.close()
        await writer.close()


async def test_the_cache_directory_deleted_between_and_during_searches(
    s3_server: S3Server, prefix: str, cache: VectorCacheSettings
) -> None:
    writer = await _plain(s3_server, prefix)
    await _fill(writer, 40, seed=1)
    cached = await _cached(s3_server, prefix, cache)
    try:
        await _same(cached, writer, 3, seed=2)
        shutil.rmtree(cache.root)
        await _same(cached, writer, 3, seed=3)
        assert _data_files(cached)  # refilled
        stop = threading.Event()

        def keep_deleting() -> None:
            while not stop.is_set():
                shutil.rmtree(cache.root, ignore_errors=True)
                stop.wait(0.005)

        thread = threading.Thread(target=keep_deleting)
        thread.start()
        try:
            await _same(cached, writer, 30, seed=4)
        finally:
            stop.set()
            thread.join()
        await _same(cached, writer, 3, seed=5)
        assert cached.cache_state == "cached"
    finally:
        await cached.close()
        await writer.close()


@pytest.mark.parametrize("damage", ["flip", "truncate", "remove_sidecar_checksum"])
async def test_a_damaged_cached_file_is_never_used(
    s3_server: S3Server, prefix: str, cache: VectorCacheSettings, damage: str
) -> None:
    writer = await _plain(s3_server, prefix)
    await _fill(writer, 40, seed=1)
    cached = await _cached(s3_server, prefix, cache)
    try:
        await _same(cached, writer, 3, seed=2)
        assert cached.mirror is not None
        target = max(_data_files(cached), key=lambda p: p.stat().st_size)
        good = target.read_bytes()
        if damage == "flip":
            spoiled = bytearray(good)
            for at in range(0, len(spoiled), 97):
                spoiled[at] ^= 0xFF
            target.write_bytes(bytes(spoiled))
        elif damage == "truncate":
            target.write_bytes(good[: len(good) // 2])
        else:
            sidecar = cached.mirror.directory / ".sums" / "data" / f"{target.name}.json"
            fields = json.loads(sidecar.read_text())
            sidecar.write_text(json.dumps({**fields, "checksum": "0" * 32}))
            target.write_bytes(good)  # same bytes, new time: checked against the sidecar
        fetched = cached.mirror.fetched_files
        await _same(cached, writer, 10, seed=3)
        assert cached.mirror.fetched_files == fetched + 1  # detected and fetched again
        assert target.read_bytes() == good
        assert cached.cache_state == "cached"
    finally:
        await cached.close()
        await writer.close()


async def test_the_budget_holds_under_lru_across_tables(
    s3_server: S3Server, prefix: str, tmp_path: Path
) -> None:
    names = ["a", "b", "c"]
    writers = {n: await _plain(s3_server, prefix, n) for n in names}
    for i, name in enumerate(names):
        await _fill(writers[name], 40, seed=i)
    probe = await _cached(
        s3_server, prefix, VectorCacheSettings(tmp_path / "probe", 64 * _MiB), "a"
    )
    await probe.query(np.ones(WIDE), 1)
    assert probe.mirror is not None
    one_table = sum(p.stat().st_size for p in _files(probe.mirror.table_dir))
    await probe.close()
    budget = VectorCacheSettings(tmp_path / "lru", int(one_table * 2.5))
    stores = {n: await _cached(s3_server, prefix, budget, n) for n in names}
    try:
        for name in names:
            await _same(stores[name], writers[name], 2, seed=7)
        cached = _files(budget.root / "vectors")
        data = [p for p in cached if ".sums" not in p.parts]
        assert sum(p.stat().st_size for p in data) <= budget.max_bytes
        assert not _data_files(stores["a"])  # the least recently used table went
        assert _data_files(stores["b"]) and _data_files(stores["c"])
        await _same(stores["a"], writers["a"], 2, seed=8)  # and comes back on use
        assert _data_files(stores["a"]) and not _data_files(stores["b"])
        assert all(s.cache_state == "cached" for s in stores.values())
    finally:
        for store in [*stores.values(), *writers.values()]:
            await store.close()


async def test_a_table_larger_than_the_budget_is_searched_uncached_and_says_so(
    s3_server: S3Server, prefix: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    writer = await _plain(s3_server, prefix)
    await _fill(writer, 40, seed=1)
    small = VectorCacheSettings(tmp_path / "small", 4096)
    cached = await _cached(s3_server, prefix, small)
    try:
        with caplog.at_level(logging.WARNING, logger="groundkit.storage"):
            await _same(cached, writer, 1, seed=2)
            assert cached.mirror is not None
            planned = cached.mirror.fetched_files  # the manifest read to size the version
            await _same(cached, writer, 5, seed=3)
            assert cached.mirror.fetched_files == planned  # not planned again per search
        notices = [r for r in caplog.records if "uncached" in r.getMessage()]
        assert len(notices) == 1  # once, not per search
        assert "budget" in notices[0].getMessage()
        assert cached.cache_state.startswith("uncached:") and "budget" in cached.cache_state
        assert cached.mirror is not None and not _data_files(cached)
    finally:
        await cached.close()
        await writer.close()


async def test_a_cache_directory_that_cannot_be_written_leaves_searches_uncached(
    s3_server: S3Server, prefix: str, tmp_path: Path
) -> None:
    writer = await _plain(s3_server, prefix)
    await _fill(writer, 10, seed=1)
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("a file where the cache should be")
    cached = await _cached(s3_server, prefix, VectorCacheSettings(blocker, 64 * _MiB))
    try:
        await _same(cached, writer, 5, seed=2)
        assert cached.cache_state.startswith("uncached:")
        assert s3_server.secret_key not in cached.cache_state
    finally:
        await cached.close()
        await writer.close()


_SEARCHER = """
import asyncio, sys
import numpy as np
from pathlib import Path
from groundkit.storage.lancedb import LanceDBVectorStore
from groundkit.storage.vector_cache import CachedLanceDBVectorStore, VectorCacheSettings
import json

async def main(prefix, options, root, seed):
    options = json.loads(options)
    cache = VectorCacheSettings(Path(root), 64 * 2**20)
    cached = await CachedLanceDBVectorStore.open_cached(prefix, "t", 16, cache=cache,
                                                        storage_options=options)
    plain = await LanceDBVectorStore.open(prefix, "t", 16, storage_options=options)
    rng = np.random.default_rng(int(seed))
    for _ in range(25):
        v = rng.normal(size=16)
        a = [(h.chunk_id, h.score) for h in await cached.query(v, 7)]
        b = [(h.chunk_id, h.score) for h in await plain.query(v, 7)]
        assert a == b, (a, b)
    assert cached.cache_state == "cached", cached.cache_state
    await cached.close(); await plain.close()

asyncio.run(main(*sys.argv[1:]))
"""


async def test_two_processes_share_one_cache_directory(
    s3_server: S3Server, prefix: str, cache: VectorCacheSettings
) -> None:
    writer = await _plain(s3_server, prefix)
    await _fill(writer, 40, seed=1)
    await writer.optimize()
    await writer.close()
    args = [prefix, json.dumps(s3_server.storage_options), str(cache.root)]
    # Both start cold on the same directory, so they fetch the same files at once.
    assert await run_pythons(_SEARCHER, [[*args, "1"], [*args, "2"], [*args, "3"]]) == [0, 0, 0]
    leftovers = [p for p in _files(cache.root) if p.name.endswith(".tmp")]
    assert leftovers == []


async def test_erasure_leaves_no_cached_copy_of_an_erased_vector(
    s3_server: S3Server, prefix: str, tmp_path: Path
) -> None:
    here = VectorCacheSettings(tmp_path / "here", 64 * _MiB)
    there = VectorCacheSettings(tmp_path / "there", 64 * _MiB)  # another host's cache
    eraser = await CachedLanceDBVectorStore.open_cached(
        prefix, "t", WIDE, cache=here, storage_options=s3_server.storage_options
    )
    other = await CachedLanceDBVectorStore.open_cached(
        prefix, "t", WIDE, cache=there, storage_options=s3_server.storage_options
    )
    try:
        await _fill(eraser, 5, seed=1)
        secret = np.linspace(1.0, 2.0, WIDE, dtype=np.float32)
        await upsert(eraser, "secret", ["secret#0"], secret[None, :])
        rows = await eraser.table.query().where("chunk_id = 'secret#0'").to_arrow()
        stored = bytes(memoryview(rows["vector"][0].values.to_numpy()))  # as LanceDB keeps it
        await other.refresh()
        for store in (eraser, other):
            assert (await store.query(secret, 1))[0].chunk_id == "secret#0"

        def holding(root: Path) -> list[Path]:
            return [p for p in _files(root) if stored in p.read_bytes()]

        assert holding(here.root) and holding(there.root)  # the check can fail
        await eraser.erase_documents(["secret"])
        assert holding(here.root) == []
        await other.refresh()
        assert (await other.query(secret, 1))[0].chunk_id != "secret#0"
        assert holding(there.root) == []  # dropped at its next search
    finally:
        await eraser.close()
        await other.close()


async def test_the_location_turns_the_cache_on_for_object_storage_only(
    s3_server: S3Server, prefix: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GROUNDKIT_CACHE_DIR", str(tmp_path / "env-cache"))
    dsn = "postgresql://nobody@127.0.0.1/none"
    options = s3_server.storage_options
    on = StoreLocation.resolve("c", metadata_url=dsn, storage_uri=prefix, storage_options=options)
    assert on.vector_cache == VectorCacheSettings(tmp_path / "env-cache")
    store = await on.open_vectors(WIDE)
    try:
        assert isinstance(store, CachedLanceDBVectorStore)
        await upsert(store, "d", ["d#0"], np.ones((1, WIDE)))
        assert (await store.query(np.ones(WIDE), 1))[0].chunk_id == "d#0"
        assert list((tmp_path / "env-cache" / "vectors").iterdir())
    finally:
        await store.close()
    off = StoreLocation.resolve(
        "c", metadata_url=dsn, storage_uri=prefix, storage_options=options, vector_cache=False
    )
    plain = await off.open_vectors(WIDE)
    assert type(plain) is LanceDBVectorStore
    await plain.close()
    monkeypatch.setenv("GROUNDKIT_CACHE_MAX_BYTES", "0")
    assert StoreLocation.resolve("c", metadata_url=dsn, storage_uri=prefix).vector_cache is None
    local = StoreLocation.resolve("c", index_dir=tmp_path / "idx")
    monkeypatch.setenv("GROUNDKIT_CACHE_MAX_BYTES", "2G")
    assert StoreLocation.resolve("c", metadata_url=dsn, storage_uri=prefix).vector_cache == (
        VectorCacheSettings(tmp_path / "env-cache", 2 * 2**30)
    )
    local_store = await local.open_vectors(WIDE)
    assert type(local_store) is LanceDBVectorStore  # a local table needs no cache
    await local_store.close()
    monkeypatch.setenv("GROUNDKIT_CACHE_MAX_BYTES", "lots")
    with pytest.raises(ConfigurationError, match="GROUNDKIT_CACHE_MAX_BYTES"):
        StoreLocation.resolve("c", metadata_url=dsn, storage_uri=prefix)


def test_sizes_are_read_with_units() -> None:
    assert parse_bytes("10G") == 10 * 2**30
    assert parse_bytes("512MiB") == 512 * 2**20
    assert parse_bytes("1048576") == 2**20
    assert parse_bytes("1.5k") == 1536
    for bad in ("", "G", "-1", "ten"):
        with pytest.raises((ValueError, IndexError)):
            parse_bytes(bad)


async def test_a_shared_collection_searches_through_the_cache_and_its_info_says_so(
    postgres_dsn: str,
    fresh: str,
    s3_server: S3Server,
    bucket: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from groundkit import Collection
    from groundkit.service.collections import CollectionRegistry
    from tests.support import CORPUS, SMALL_CHUNKS, ToyEmbedder, write_tree

    for key, value in s3_server.environment.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("GROUNDKIT_CACHE_DIR", str(tmp_path / "cache"))
    base = tmp_path / "corpus"
    write_tree(base, dict(CORPUS))
    storage = f"s3://{bucket}/shared-{uuid.uuid4().hex[:8]}"
    async with Collection.open(
        name=fresh,
        metadata_url=postgres_dsn,
        storage_uri=storage,
        base_dir=base,
        chunking=SMALL_CHUNKS,
        embedder=ToyEmbedder(),
    ) as col:
        await col.ingest(base)
        cached = await col.search("solar panels electricity", 5, mode="dense")
        assert isinstance(col.vector_store, CachedLanceDBVectorStore)
        assert col.vector_store.cache_state == "cached"
    off = StoreLocation.resolve(
        fresh, metadata_url=postgres_dsn, storage_uri=storage, vector_cache=False
    )
    async with Collection.open(location=off, embedder=ToyEmbedder()) as col:
        uncached = await col.search("solar panels electricity", 5, mode="dense")
        assert type(col.vector_store) is LanceDBVectorStore
    assert [(r.chunk_id, r.score) for r in cached.results] == [
        (r.chunk_id, r.score) for r in uncached.results
    ]
    registry = CollectionRegistry(metadata_url=postgres_dsn, storage_uri=storage)
    try:
        assert (await registry.describe(fresh)).vector_cache == "on"  # no search yet
        monkeypatch.setenv("GROUNDKIT_CACHE_MAX_BYTES", "1k")
        small = CollectionRegistry(
            metadata_url=postgres_dsn, storage_uri=storage, embedder_for=lambda _: ToyEmbedder()
        )
        try:
            async with small.lease(fresh) as col:
                found = await col.search("solar panels electricity", 5, mode="dense")
                assert [(r.chunk_id, r.score) for r in found.results] == [
                    (r.chunk_id, r.score) for r in uncached.results
                ]
            state = (await small.describe(fresh)).vector_cache
            assert state is not None and state.startswith("uncached:") and "budget" in state
        finally:
            await small.close()
    finally:
        await registry.close()


async def test_only_the_files_the_version_uses_are_fetched(
    s3_server: S3Server, bucket: str, prefix: str, cache: VectorCacheSettings
) -> None:
    writer = await _plain(s3_server, prefix)
    for batch in range(4):
        await _fill(writer, 10, seed=batch, tag=f"b{batch}-")
    await writer.optimize()  # compacted fragments; the ones they replaced stay a day
    cached = await _cached(s3_server, prefix, cache)
    try:
        await _same(cached, writer, 3, seed=1)
        stored = [k for k in s3_server.keys(bucket, prefix.split("/", 3)[3]) if "/data/" in k]
        used = (await writer.table.stats())["fragment_stats"]["num_fragments"]
        assert len(_data_files(cached)) == used < len(stored)
    finally:
        await cached.close()
        await writer.close()


def test_a_manifest_that_cannot_be_read_names_no_files() -> None:
    from groundkit.storage.vector_cache import _fragment_files

    assert _fragment_files(b"") is None
    too_long = (1000).to_bytes(4, "little") + b"\x12\x05"
    assert _fragment_files(too_long + (0).to_bytes(8, "little") + b"\x00" * 4 + b"LANC") is None
    assert _fragment_files(b"\xff" * 40 + (8).to_bytes(8, "little") + b"\x00" * 4 + b"LANC") is None


def _locked(path: Path) -> int:
    """A descriptor holding a ``flock`` on ``path``, as a process writing it does."""
    fd = os.open(path, os.O_RDONLY)
    fcntl.flock(fd, fcntl.LOCK_EX)
    return fd


class _Unreadable:
    """A mirror handle whose reads fail, as when another process evicted a file under it."""

    def query(self) -> Any:
        raise OSError("No such file or directory: a cached data file")


@pytest.mark.parametrize("x_failure", ["error", "panic"])
@pytest.mark.parametrize("y_reads", [True, False])
async def test_concurrent_searches_each_fall_back_on_their_own(
    s3_server: S3Server,
    prefix: str,
    cache: VectorCacheSettings,
    monkeypatch: pytest.MonkeyPatch,
    x_failure: str,
    y_reads: bool,
) -> None:
    """X's read of the mirror fails while Y holds the same mirror handle; X reads the
    object store while Y goes on. Y neither inherits X's state nor has the handle closed
    under it; a Rust panic on a cached read (a closed handle) is a failed read too."""
    import lancedb

    writer = await _plain(s3_server, prefix)
    await _fill(writer, 10, seed=1)
    cached = await _cached(s3_server, prefix, cache)
    cached.memory_max_bytes = writer.memory_max_bytes = 0  # every search reads the table
    probe = np.random.default_rng(4).normal(size=WIDE)
    expected = _hits(await writer.query(probe, 5))
    assert cached.mirror is not None
    conn: Any = await lancedb.connect_async(str(cached.mirror.directory))
    try:
        assert _hits(await cached.query(probe, 5)) == expected  # warm
        closed: Any = await conn.open_table("t")
        closed.close()
        original = cached._read_table
        y_holds, y_go = asyncio.Event(), asyncio.Event()
        calls: dict[str, int] = {}
        tasks: dict[str, asyncio.Task[Any]] = {}

        async def staged() -> Any:
            task = asyncio.current_task()
            name = task.get_name() if task is not None else ""
            calls[name] = calls.get(name, 0) + 1
            reader = await original()
            if name == "Y" and calls[name] == 1:
                y_holds.set()
                await y_go.wait()
                return reader if y_reads else _Unreadable()
            if name == "X" and calls[name] == 1:
                await y_holds.wait()  # Y holds the mirror's handle when X's read fails
                return closed if x_failure == "panic" else _Unreadable()
            if name == "X" and calls[name] == 2:  # X reads the object store; Y goes on
                y_go.set()
                await asyncio.wait([tasks["Y"]])
            return reader

        monkeypatch.setattr(cached, "_read_table", staged)
        tasks["X"] = asyncio.create_task(cached.query(probe, 5), name="X")
        tasks["X"].add_done_callback(lambda _: y_go.set())  # never left waiting
        tasks["Y"] = asyncio.create_task(cached.query(probe, 5), name="Y")
        found = await asyncio.gather(tasks["X"], tasks["Y"], return_exceptions=True)
        assert [_hits(f) if isinstance(f, list) else f for f in found] == [expected, expected]
        assert calls["Y"] == (1 if y_reads else 2)  # answered from the mirror when it could
        monkeypatch.undo()
        assert _hits(await cached.query(probe, 5)) == expected
        assert cached.cache_state == "cached"
    finally:
        conn.close()
        await cached.close()
        await writer.close()


class _Refusing:
    """The store's own table handle with every read failing (an object store that is down)."""

    def __init__(self, table: Any) -> None:
        self.inner = table
        self.queries = 0

    def query(self) -> Any:
        self.queries += 1
        raise OSError("connection refused")

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


async def test_a_failed_read_of_the_object_store_is_not_repeated_as_a_cache_failure(
    s3_server: S3Server, prefix: str, tmp_path: Path
) -> None:
    writer = await _plain(s3_server, prefix)
    await _fill(writer, 10, seed=1)
    cached = await _cached(s3_server, prefix, VectorCacheSettings(tmp_path / "small", 4096))
    cached.memory_max_bytes = 0
    table = cached.table
    refusing = _Refusing(table)
    cached._table = refusing
    try:
        with pytest.raises(StorageError):
            await cached.query(np.ones(WIDE), 3)
        assert refusing.queries == 1  # the object store was asked once, not twice
        assert "budget" in cached.cache_state and "cached file" not in cached.cache_state
    finally:
        cached._table = table
        await cached.close()
        await writer.close()


@pytest.mark.parametrize(
    "damage",
    [
        '{"size": 1e999, "checksum": "00000000000000000000000000000000", "remote": [1, 2]}',
        "[" * 100_000 + "]" * 100_000,
        '{"size": true, "checksum": "00000000000000000000000000000000", "remote": [1, 2]}',
        '{"size": -1, "checksum": "00000000000000000000000000000000", "remote": [1, 2]}',
        '{"size": 1, "checksum": ["x"], "remote": [1, 2]}',
        '{"size": 1, "checksum": "00000000000000000000000000000000", "remote": [1e999, 2]}',
        '{"size": 1, "checksum": "00000000000000000000000000000000", "remote": {"a": 1}}',
        "null",
        "\udcff",
    ],
)
async def test_a_sidecar_of_any_shape_that_is_not_one_reads_as_missing(
    s3_server: S3Server, prefix: str, cache: VectorCacheSettings, damage: str
) -> None:
    writer = await _plain(s3_server, prefix)
    await _fill(writer, 10, seed=1)
    first = await _cached(s3_server, prefix, cache)
    try:
        await _same(first, writer, 1, seed=2)
        assert first.mirror is not None
        target = _data_files(first)[0]
        sidecar = first.mirror.directory / ".sums" / "data" / f"{target.name}.json"
        sidecar.write_bytes(damage.encode(errors="surrogateescape"))
    finally:
        await first.close()
    later = await _cached(s3_server, prefix, cache)  # as a later process: nothing verified yet
    try:
        await _same(later, writer, 3, seed=3)
        assert later.cache_state == "cached"
        assert later.mirror is not None and later.mirror.fetched_files == 2  # manifest, file
        assert json.loads(sidecar.read_text())["size"] == target.stat().st_size  # repaired
    finally:
        await later.close()
        await writer.close()


async def test_a_damaged_manifest_of_a_newer_version_does_not_lock_an_older_reader_out(
    s3_server: S3Server, prefix: str, cache: VectorCacheSettings
) -> None:
    writer = await _plain(s3_server, prefix)
    await _fill(writer, 10, seed=1)
    reader = await _cached(s3_server, prefix, cache)  # its handle stays at this version
    as_of_reader = await _plain(s3_server, prefix)
    await _fill(writer, 1, seed=2, tag="x")  # a newer version ...
    newer = await _cached(s3_server, prefix, cache)  # ... cached by another process
    probe = np.random.default_rng(3).normal(size=WIDE)
    try:
        await newer.query(probe, 3)
        assert newer.mirror is not None and reader.mirror is not None
        manifests = sorted((newer.mirror.table_dir / "_versions").glob("*.manifest"))
        newest = min(manifests, key=lambda p: int(p.stem))  # Lance's names count down
        newest.write_bytes(newest.read_bytes()[:100])  # and is damaged there
        await _same(reader, as_of_reader, 3, seed=4)
        assert reader.cache_state == "cached"
        assert not newest.exists()  # the damaged copy went; its owner fetches it again
        await _same(newer, writer, 3, seed=5)
        assert newer.cache_state == "cached"
    finally:
        for store in (reader, as_of_reader, newer, writer):
            await store.close()


@pytest.mark.parametrize("given", ["inf", "-inf", "1e400", "infG", "nan", "0.4", "1e-9", "0.5k"])
def test_a_budget_that_is_no_size_or_under_one_byte_is_refused(given: str) -> None:
    env = {"GROUNDKIT_CACHE_DIR": "/tmp/groundkit-cache", "GROUNDKIT_CACHE_MAX_BYTES": given}
    if given != "0.5k":
        with pytest.raises(ValueError):
            parse_bytes(given)
        with pytest.raises(ConfigurationError, match="GROUNDKIT_CACHE_MAX_BYTES"):
            VectorCacheSettings.from_env(env)
    else:
        assert VectorCacheSettings.from_env(env).max_bytes == 512
    off = {**env, "GROUNDKIT_CACHE_MAX_BYTES": "0"}
    assert not VectorCacheSettings.from_env(off).enabled  # 0 still turns it off


def test_cache_settings_are_checked_when_made(tmp_path: Path) -> None:
    assert VectorCacheSettings(str(tmp_path), 5).root == tmp_path  # type: ignore[arg-type]
    assert VectorCacheSettings(os.fspath(tmp_path)) == VectorCacheSettings(tmp_path)  # type: ignore[arg-type]

    class Place:
        def __fspath__(self) -> str:
            return str(tmp_path / "p")

    assert VectorCacheSettings(Place(), 0).root == tmp_path / "p"  # type: ignore[arg-type]
    for root in (None, 3, b"/tmp/x", ""):
        with pytest.raises(ConfigurationError, match="root"):
            VectorCacheSettings(root, 5)  # type: ignore[arg-type]
    for budget in ("64M", True, -1, 1.5, None):
        with pytest.raises(ConfigurationError, match="max_bytes"):
            VectorCacheSettings(tmp_path, budget)  # type: ignore[arg-type]


async def test_a_store_whose_mirror_cannot_be_made_is_closed(
    s3_server: S3Server, prefix: str, cache: VectorCacheSettings, monkeypatch: pytest.MonkeyPatch
) -> None:
    import groundkit.storage.vector_cache as module

    closed: list[object] = []
    real_close = CachedLanceDBVectorStore.close

    async def close(self: CachedLanceDBVectorStore) -> None:
        closed.append(self)
        await real_close(self)

    def refuse(*_: object) -> None:
        raise ConfigurationError("no mirror")

    monkeypatch.setattr(CachedLanceDBVectorStore, "close", close)
    monkeypatch.setattr(module, "TableMirror", refuse)
    with pytest.raises(ConfigurationError, match="no mirror"):
        await _cached(s3_server, prefix, cache)
    assert len(closed) == 1
    with pytest.raises(ConfigurationError, match="VectorCacheSettings"):
        await CachedLanceDBVectorStore.open_cached(prefix, "t", WIDE, cache=str(cache.root))  # type: ignore[arg-type]


async def test_temporary_files_nobody_writes_are_swept(
    s3_server: S3Server, prefix: str, cache: VectorCacheSettings
) -> None:
    writer = await _plain(s3_server, prefix)
    await _fill(writer, 10, seed=1)
    cached = await _cached(s3_server, prefix, cache)
    assert cached.mirror is not None
    data = cached.mirror.table_dir / "data"
    data.mkdir(parents=True)
    long_ago = time.time() - 3600

    def temp(name: str, when: float) -> Path:
        path = data / f".{name}.lance.{uuid.uuid4().hex}.tmp"
        path.write_bytes(b"\0" * 4096)
        os.utime(path, (when, when))
        return path

    killed = temp("killed", long_ago)  # left by a process killed in a download
    live = temp("live", long_ago)  # another process's download, still going (locked)
    new = temp("new", time.time() + 3600)  # just made, not locked yet
    gone = cache.root / "vectors" / f".{cached.mirror.directory.name}.{uuid.uuid4().hex}.gone"
    (gone / "t.lance").mkdir(parents=True)
    (gone / "t.lance" / "x.lance").write_bytes(b"\0" * 4096)  # a clear() that did not finish
    held = _locked(live)
    try:
        try:
            await _same(cached, writer, 2, seed=2)
        finally:
            os.close(held)
        assert not killed.exists() and live.exists() and new.exists()
        assert not gone.exists()
        assert cached.cache_state == "cached"
    finally:
        await cached.close()
        await writer.close()


async def test_a_table_created_again_is_searched_afresh_through_the_cache(
    s3_server: S3Server, prefix: str, cache: VectorCacheSettings
) -> None:
    """Another process drops the table and creates it again up to the same version
    number: after ``refresh()`` a cached store answers as a freshly opened one, with
    none of the old table's rows (from memory or from the mirror)."""
    import lancedb

    writer = await _plain(s3_server, prefix)
    await _fill(writer, 10, 1, tag="old")
    await _fill(writer, 10, 2, tag="old-b")
    await writer.close()
    reader = await _cached(s3_server, prefix, cache)
    probe = np.random.default_rng(1).normal(size=WIDE)
    try:
        assert await reader.query(probe, 2)
        version = int(await reader.table.version())
        conn = await lancedb.connect_async(prefix, storage_options=s3_server.storage_options)
        await conn.drop_table("t")
        conn.close()  # type: ignore[no-untyped-call]
        writer = await _plain(s3_server, prefix)
        await _fill(writer, 10, 3, tag="new")
        await _fill(writer, 10, 4, tag="new-b")
        assert int(await writer.table.version()) == version
        await writer.close()
        await reader.refresh()
        found = await reader.query(probe, 5)
        fresh = await _plain(s3_server, prefix)
        try:
            assert _hits(found) == _hits(await fresh.query(probe, 5))
        finally:
            await fresh.close()
        assert all(h.document_id.startswith("new") for h in found)
        assert reader.cache_state == "cached"
    finally:
        await reader.close()
