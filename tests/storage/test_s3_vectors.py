"""LanceDBVectorStore with its table on S3-compatible object storage (a local moto server).

The store is built from a LanceDB connection to ``s3://bucket/prefix`` (see
``tests.s3_support.open_s3_vector_store``): its own write, delete, index and search code
runs unchanged, and passes the same conformance suite as on a local directory.
"""

from __future__ import annotations

import json
import textwrap
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import numpy as np
import pytest

from groundkit.storage.lancedb import LanceDBVectorStore
from groundkit.testing.conformance.vectors import (
    DIM,
    VectorStoreConformance,
    basis,
    random_rows,
    upsert,
)
from tests.s3_support import S3Server, open_s3_vector_store
from tests.services import run_pythons


@pytest.fixture(scope="module")
def bucket(s3_server: S3Server) -> str:
    name = f"gk-{uuid.uuid4().hex[:12]}"
    s3_server.create_bucket(name)
    return name


@pytest.fixture
def prefix(bucket: str) -> str:
    """A fresh ``s3://`` URI under the test bucket."""
    return f"s3://{bucket}/idx-{uuid.uuid4().hex[:12]}"


class TestLanceDBOnS3Conformance(VectorStoreConformance):
    @pytest.fixture
    async def vector_store(
        self, s3_server: S3Server, prefix: str
    ) -> AsyncIterator[LanceDBVectorStore]:
        store = await open_s3_vector_store(
            prefix, "conformance", DIM, storage_options=s3_server.storage_options
        )
        try:
            yield store
        finally:
            await store.close()


async def test_table_lives_under_the_prefix(
    s3_server: S3Server, bucket: str, prefix: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # a relative local write would land here
    store = await open_s3_vector_store(
        prefix, "notes", DIM, storage_options=s3_server.storage_options
    )
    try:
        await upsert(store, "d1", ["d1#0", "d1#1"], np.stack([basis(0), basis(1)]))
    finally:
        await store.close()
    keys = s3_server.keys(bucket, prefix.removeprefix(f"s3://{bucket}/"))
    assert keys, "nothing written to the bucket"
    assert all(k.startswith(f"{prefix.split('/', 3)[3]}/notes.lance/") for k in keys)
    assert any("/data/" in k for k in keys) and any("/_versions/" in k for k in keys)
    assert list(tmp_path.iterdir()) == []


async def test_credentials_and_endpoint_from_the_environment(
    s3_server: S3Server, prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    for key, value in s3_server.environment.items():
        monkeypatch.setenv(key, value)
    writer = await open_s3_vector_store(prefix, "env", DIM)  # no storage options at all
    try:
        await upsert(writer, "d1", ["d1#0", "d1#1"], np.stack([basis(0), basis(1)]))
        await upsert(writer, "d2", ["d2#0"], basis(2)[None, :])
    finally:
        await writer.close()
    reader = await open_s3_vector_store(prefix, "env", DIM)
    try:
        assert await reader.count() == 3
        hits = await reader.query(basis(2), 1)
        assert [h.chunk_id for h in hits] == ["d2#0"]
    finally:
        await reader.close()


async def test_ann_index_is_built_on_object_storage(s3_server: S3Server, prefix: str) -> None:
    rows = random_rows(600, seed=3)
    store = await open_s3_vector_store(
        prefix, "ann", DIM, storage_options=s3_server.storage_options, ann_threshold=500
    )
    try:
        await store.upsert_documents(
            [
                (f"d{i}", [f"d{i}#{j}" for j in range(10)], rows[i * 10 : i * 10 + 10])
                for i in range(60)
            ]
        )
        assert await store.has_ann_index()
        hits = await store.query(rows[123], 1)
        assert [h.chunk_id for h in hits] == ["d12#3"]
    finally:
        await store.close()


_WRITER = textwrap.dedent(
    """
    import asyncio, json, sys
    import numpy as np
    from tests.s3_support import open_s3_vector_store

    async def main(uri: str, options: dict, tag: str, rounds: int) -> None:
        store = await open_s3_vector_store(uri, "shared", 8, storage_options=options)
        rng = np.random.default_rng(sum(map(ord, tag)))
        for i in range(rounds):
            # Each round replaces the same two documents: a delete and an add per upsert.
            for doc in (f"{tag}-a", f"{tag}-b"):
                ids = [f"{doc}#{j}" for j in range(i % 3 + 1)]
                await store.upsert_documents([(doc, ids, rng.standard_normal((len(ids), 8)))])
        await store.close()

    asyncio.run(main(sys.argv[1], json.loads(sys.argv[2]), sys.argv[3], int(sys.argv[4])))
    """
)


async def test_two_processes_upsert_one_table(s3_server: S3Server, prefix: str) -> None:
    """Object-store commits are atomic: concurrent writers lose no row and keep no stale one."""
    seed = await open_s3_vector_store(
        prefix, "shared", DIM, storage_options=s3_server.storage_options
    )
    await upsert(seed, "seed", ["seed#0"], basis(0)[None, :])  # the table exists before both start
    await seed.close()
    rounds = 8
    args = [prefix, json.dumps(s3_server.storage_options)]
    assert await run_pythons(_WRITER, [[*args, tag, str(rounds)] for tag in "pq"]) == [0, 0]
    store = await open_s3_vector_store(
        prefix, "shared", DIM, storage_options=s3_server.storage_options
    )
    try:
        last = (rounds - 1) % 3 + 1
        expected = {"seed"} | {f"{t}-{d}" for t in "pq" for d in "ab"}
        assert await store.document_ids() == expected
        assert await store.count() == 1 + 4 * last
        probe = np.ones(DIM, dtype=np.float32)
        hits = await store.query(probe, 50)
        assert sorted(h.chunk_id for h in hits) == sorted(
            ["seed#0"] + [f"{doc}#{j}" for doc in expected - {"seed"} for j in range(last)]
        )
    finally:
        await store.close()
