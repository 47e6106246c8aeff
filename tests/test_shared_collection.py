"""Shared collections: PostgreSQL metadata, vectors and snapshots on S3 (moto), many processes."""

from __future__ import annotations

import asyncio
import textwrap
import uuid
from pathlib import Path
from typing import Any

import pytest

from groundkit import Collection, ConfigurationError, SearchMode, resolve_citation
from groundkit.testing.conformance.helpers import document_sources
from groundkit.utils.hashing import sha256_text
from tests.s3_support import S3Server
from tests.services import run_pythons
from tests.support import CORPUS, SMALL_CHUNKS, ToyEmbedder, write_tree


@pytest.fixture
def bucket(s3_server: S3Server, monkeypatch: pytest.MonkeyPatch) -> str:
    """A fresh bucket; the server's settings in the environment, as a deployment would."""
    name = f"gk-{uuid.uuid4().hex[:12]}"
    s3_server.create_bucket(name)
    for key, value in s3_server.environment.items():
        monkeypatch.setenv(key, value)
    return name


def test_location_errors(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="index_dir, or metadata_url"):
        Collection.open()
    with pytest.raises(ConfigurationError, match="PostgreSQL URL"):
        Collection.open(metadata_url="mysql://root:hunter2@db/x")


async def test_dense_needs_storage_on_a_shared_collection(
    postgres_dsn: str, fresh: str, tmp_path: Path
) -> None:
    with pytest.raises(ConfigurationError, match="storage_uri"):
        await Collection.open(
            name=fresh,
            metadata_url=postgres_dsn,
            embedder=ToyEmbedder(),
            base_dir=tmp_path,
        )


async def test_shared_collection_round_trip(
    postgres_dsn: str, fresh: str, bucket: str, s3_server: S3Server, tmp_path: Path
) -> None:
    base = tmp_path / "corpus"
    write_tree(base, dict(CORPUS))
    storage = f"s3://{bucket}/groundkit"
    opened = Collection.open(
        name=fresh,
        metadata_url=postgres_dsn,
        storage_uri=storage,
        base_dir=base,
        chunking=SMALL_CHUNKS,
        embedder=ToyEmbedder(),
    )
    async with opened as col:
        report = await col.ingest(base)
        assert not report.failed and len(report.added) == len(CORPUS)
        modes: tuple[SearchMode, ...] = ("bm25", "dense", "hybrid")
        for mode in modes:
            found = await col.search("solar panels electricity", 5, mode=mode)
            assert found.results, mode
            for r in found.results:
                assert (await col.fetch_chunk(r.chunk_id)).verification == "verified"
    assert any(k.startswith(f"groundkit/{fresh}.lance/") for k in s3_server.keys(bucket))
    # Another process (here: another open) with no base_dir finds the stored absolute one.
    async with Collection.open(
        name=fresh, metadata_url=postgres_dsn, storage_uri=storage, embedder=ToyEmbedder()
    ) as again:
        assert again.base_dir == base.resolve()
        assert (await again.verify_all()).ok
        hit = (await again.search("wind farms", 1, mode="dense")).results[0]
        assert await resolve_citation(hit.citation, again.base_dir) == hit.content


_WORKER = textwrap.dedent(
    """
    import asyncio, json, sys, time
    from pathlib import Path
    from groundkit import Collection
    from tests.support import ToyEmbedder

    dsn, storage, name, base, role, tag, rounds = sys.argv[1:8]
    rounds = int(rounds)

    async def ingest():
        try:
            async with Collection.open(name=name, metadata_url=dsn, storage_uri=storage,
                                       base_dir=base, embedder=ToyEmbedder()) as col:
                folder = Path(base) / tag
                for r in range(rounds):
                    path = folder / f"{tag}{r:03d}.md"
                    path.parent.mkdir(parents=True, exist_ok=True)
                    path.write_text(f"Round {r} of writer {tag}: tidal turbines, solar panels.\\n")
                    report = await col.ingest(folder)
                    assert not report.failed, report.failed
        finally:  # searchers stop once both writers have stopped, however they did
            (Path(base) / f"done-{tag}").write_text("")

    async def search():
        checked, seen = 0, set()
        async with Collection.open(name=name, metadata_url=dsn, storage_uri=storage,
                                   base_dir=base, embedder=ToyEmbedder()) as col:
            while True:
                finished = all((Path(base) / f"done-{t}").exists() for t in "ab")
                for mode in ("bm25", "dense", "hybrid"):
                    found = await col.search("tidal turbines solar panels", 20, mode=mode)
                    for r in found.results:
                        fetched = await col.fetch_chunk(r.chunk_id)
                        assert fetched.verification == "verified", fetched.detail
                        checked += 1
                        seen.add(r.source)
                if finished:
                    break
        print(json.dumps({"checked": checked, "sources": len(seen)}))

    asyncio.run(ingest() if role == "ingest" else search())
    """
)


async def test_two_ingesting_and_two_searching_processes(
    postgres_dsn: str, fresh: str, bucket: str, tmp_path: Path
) -> None:
    base = tmp_path / "shared"
    base.mkdir()
    storage = f"s3://{bucket}/many"
    # Created (and bound to the embedder) before the workers start.
    async with Collection.open(
        name=fresh,
        metadata_url=postgres_dsn,
        storage_uri=storage,
        base_dir=base,
        embedder=ToyEmbedder(),
    ) as col:
        write_tree(base / "seed", {"s.md": "A seed document about tidal turbines.\n"})
        assert not (await col.ingest(base / "seed")).failed
    rounds = 8
    common = [postgres_dsn, storage, fresh, str(base)]
    argv = [
        [*common, "ingest", "a", str(rounds)],
        [*common, "ingest", "b", str(rounds)],
        [*common, "search", "x", "0"],
        [*common, "search", "y", "0"],
    ]
    assert await run_pythons(_WORKER, argv) == [0, 0, 0, 0]
    async with Collection.open(
        name=fresh, metadata_url=postgres_dsn, storage_uri=storage, embedder=ToyEmbedder()
    ) as col:
        sources = set(await document_sources(col.store))
        expected = {"seed/s.md"} | {f"{t}/{t}{r:03d}.md" for t in "ab" for r in range(rounds)}
        assert sources == expected  # no document lost
        assert (await col.verify_all()).ok
        assert await col.store.documents_missing_vectors() == []
        dense = await col.search("tidal turbines", 100, mode="dense")
        assert {r.source for r in dense.results} == expected


async def test_grk_ingests_searches_and_serves_a_shared_collection(
    postgres_dsn: str, fresh: str, bucket: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The CLI from the environment, then two `grk serve` processes that share nothing but
    the stores answer the same results."""
    pytest.importorskip("mcp")
    from mcp import Client, StdioServerParameters
    from mcp.client.stdio import stdio_client

    from groundkit.cli import main
    from tests.service.test_e2e import GRK, child_env
    from tests.service.test_server import call

    base = tmp_path / "corpus"
    write_tree(base, dict(CORPUS))
    monkeypatch.setenv("GROUNDKIT_METADATA_URL", postgres_dsn)
    monkeypatch.setenv("GROUNDKIT_STORAGE_URI", f"s3://{bucket}/cli")
    common = ["--collection", fresh, "--base-dir", str(base), "-q"]
    assert await asyncio.to_thread(main, ["ingest", str(base), *common]) == 0
    assert await asyncio.to_thread(main, ["verify", *common]) == 0
    results = []
    for attempt in range(2):
        params = StdioServerParameters(
            command=str(GRK), args=["serve"], env=child_env(), cwd=str(tmp_path)
        )
        with (tmp_path / f"serve{attempt}.log").open("w", encoding="utf-8") as errlog:
            async with Client(stdio_client(params, errlog=errlog)) as client:
                listed = await call(client, "list_collections")
                assert fresh in [c["name"] for c in listed["collections"]]
                found = await call(client, "search", query="wind farms", collection=fresh)
                first = found["results"][0]["citation"]["chunk_id"]
                fetched = await call(client, "fetch_chunk", chunk_id=first, collection=fresh)
                assert fetched["verification"] == "verified"
                results.append(found["results"])
    assert results[0] == results[1] and results[0]


def test_readme_shared_example_runs(
    postgres_dsn: str, fresh: str, bucket: str, tmp_path: Path
) -> None:
    """The README's `grk ingest` and `grk search` lines, against the test servers."""
    import re
    import shlex
    import subprocess

    from tests.service.test_e2e import GRK, child_env
    from tests.services import REPO_ROOT

    readme = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
    section = readme.split("## Running on more than one machine", 1)[1]
    block = re.search(r"```bash\n(.*?)```", section, re.S)
    assert block is not None
    commands = [
        shlex.split(line.split("  #")[0])
        for line in block.group(1).splitlines()
        if line.startswith(("grk ingest", "grk search"))
    ]
    assert [c[:2] for c in commands] == [["grk", "ingest"], ["grk", "search"]]
    write_tree(tmp_path / "handbook", {"oncall.md": "The on-call rota changes every Monday.\n"})
    env = child_env(
        GROUNDKIT_METADATA_URL=postgres_dsn, GROUNDKIT_STORAGE_URI=f"s3://{bucket}/readme"
    )
    outputs = []
    for command in commands:
        done = subprocess.run(
            [str(GRK), *command[1:], "--collection", fresh],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        outputs.append(done.stdout)
    assert "oncall.md" in outputs[1]


def test_cli_never_prints_the_database_password(capsys: pytest.CaptureFixture[str]) -> None:
    from groundkit.cli import main

    url = "postgresql://reader:s3cret-pw-42@127.0.0.1:1/groundkit"
    for argv in (["search", "x"], ["ingest", "."], ["verify"]):
        assert main([*argv, "--metadata-url", url, "--collection", "docs", "-q"]) == 2
        out, err = capsys.readouterr()
        assert "s3cret-pw-42" not in out + err
        assert "grk: error:" in err and "***" in err


async def test_lost_vector_objects_degrade_to_bm25_and_one_ingest_repairs(
    postgres_dsn: str, fresh: str, bucket: str, s3_server: S3Server, tmp_path: Path
) -> None:
    base = tmp_path / "corpus"
    write_tree(base, dict(CORPUS))
    storage = f"s3://{bucket}/groundkit"

    def opened() -> Any:
        return Collection.open(
            name=fresh,
            metadata_url=postgres_dsn,
            storage_uri=storage,
            base_dir=base,
            chunking=SMALL_CHUNKS,
            embedder=ToyEmbedder(),
        )

    async with opened() as col:
        await col.ingest(base)
    data = [k for k in s3_server.keys(bucket, f"groundkit/{fresh}.lance/data/")]
    assert data
    for key in data:  # every fragment of every version is gone
        s3_server.delete(bucket, key)
    async with opened() as col:
        bm25 = await col.search("solar panels electricity", 5)
        for mode in ("dense", "hybrid"):
            response = await col.search("solar panels electricity", 5, mode=mode)
            assert "vector search unavailable" in response.metadata["degraded"]
            assert [r.chunk_id for r in response.results] == [r.chunk_id for r in bm25.results]
        report = await col.ingest(base)
        assert report.embedded == len(CORPUS)
        assert any("dropped it" in note for note in report.repairs), report.repairs
        assert col.vector_store is not None
        rows = [row async for batch in col.store.iter_chunks() for row in batch]
        assert await col.vector_store.inventory() == {r.chunk_id: r.document_id for r in rows}
        response = await col.search("solar panels electricity", 5, mode="dense")
        assert response.results and "degraded" not in response.metadata
        for r in response.results:
            assert (await col.fetch_chunk(r.chunk_id)).verification == "verified"


async def test_records_on_a_shared_collection_live_in_object_storage(
    postgres_dsn: str, fresh: str, bucket: str, s3_server: S3Server, tmp_path: Path
) -> None:
    storage = f"s3://{bucket}/groundkit"
    opened = Collection.open(
        name=fresh, metadata_url=postgres_dsn, storage_uri=storage, base_dir=tmp_path
    )
    async with opened as col:
        report = await col.add_documents(
            [{"id": "row/1", "text": "Tidal turbines spin twice a day."}]
        )
        assert report.added == ["record://row/1"]
        hit = (await col.search("tidal turbines")).results[0]
        assert hit.source_class == "record"
        assert (await col.fetch_chunk(hit.chunk_id)).verification == "verified"
    # Named by the record and the hash of its text.
    text_key = f"groundkit/{fresh}.snapshots/{hit.document_id}.{sha256_text(hit.content)}"
    assert text_key in s3_server.keys(bucket)
    # Another host (another open) verifies against the same stored record, then deletes it.
    async with Collection.open(name=fresh, metadata_url=postgres_dsn, storage_uri=storage) as again:
        assert (await again.verify_all()).ok
        assert (await again.delete(records=["row/1"])).deleted == ["record://row/1"]
    assert text_key not in s3_server.keys(bucket)


@pytest.fixture
async def second_database(postgres_dsn: str) -> Any:
    """Another database on the same server (a staging beside prod), dropped afterwards."""
    import asyncpg

    name = f"gk_{uuid.uuid4().hex[:12]}"
    admin = await asyncpg.connect(postgres_dsn)
    try:
        await admin.execute(f'CREATE DATABASE "{name}"')
    finally:
        await admin.close()
    yield postgres_dsn.rsplit("/", 1)[0] + f"/{name}"
    admin = await asyncpg.connect(postgres_dsn)
    try:
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        await admin.close()


async def test_two_collections_sharing_storage_and_name_never_touch_each_others_vectors(
    postgres_dsn: str, second_database: str, fresh: str, tmp_path: Path
) -> None:
    """Prod and staging databases, one storage_uri, one collection name: staging is
    refused (at open, or at its ingest when it opened before the table existed) and
    prod's dense search keeps finding its documents, also after a restart; a local
    collection whose directory is that storage_uri is refused the same way."""
    from groundkit import StorageError
    from groundkit.storage import StoreLocation

    storage, prod_base, staging_base = tmp_path / "shared", tmp_path / "a", tmp_path / "z"
    write_tree(prod_base, {"a.txt": "solar panels produce electricity\n"})
    write_tree(staging_base, {"z.txt": "wind farms produce electricity too\n"})

    def opened(dsn: str, base: Path) -> Any:
        return Collection.open(
            name=fresh, metadata_url=dsn, storage_uri=storage, base_dir=base, embedder=ToyEmbedder()
        )

    early = await opened(second_database, staging_base)  # before prod's table exists
    try:
        async with opened(postgres_dsn, prod_base) as prod:
            await prod.ingest(prod_base)
        with pytest.raises(StorageError, match="belongs to another collection"):
            await early.ingest(staging_base)
    finally:
        await early.close()
    with pytest.raises(StorageError, match="Give each its own storage_uri or name"):
        await opened(second_database, staging_base)
    with pytest.raises(StorageError, match="belongs to another collection"):
        await Collection.open(storage, fresh, base_dir=staging_base, embedder=ToyEmbedder())
    assert (storage / f"{fresh}.lance").is_dir()
    async with opened(postgres_dsn, prod_base) as prod:
        found = await prod.search("solar electricity", 5, mode="dense")
        assert [r.source for r in found.results] == ["a.txt"]
        assert "degraded" not in found.metadata
        assert await prod.store.documents_missing_vectors() == []
    # Staging without an embedder (text only) exists; dropping it leaves prod's table.
    async with Collection.open(
        name=fresh, metadata_url=second_database, storage_uri=storage, base_dir=staging_base
    ) as staging:
        await staging.ingest(staging_base)
    await StoreLocation.resolve(fresh, metadata_url=second_database, storage_uri=storage).drop()
    async with opened(postgres_dsn, prod_base) as prod:
        found = await prod.search("solar electricity", 5, mode="dense")
        assert [r.source for r in found.results] == ["a.txt"]
