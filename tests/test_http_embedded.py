"""A collection embedded through a real OpenAI-compatible server, searched from Python,
from ``grk search --mode hybrid`` and from ``grk serve``: the manifest names provider,
model and size, the endpoint comes from configuration, and no secret is stored."""

from __future__ import annotations

import asyncio
import functools
import json
from pathlib import Path

import pytest

from groundkit import Collection, OpenAICompatibleEmbedder
from groundkit.cli import main
from tests.embedding_server import MODEL, OpenAIServer
from tests.support import CORPUS, SMALL_CHUNKS, write_tree

SECRET = "sk-test-never-stored-0123456789"


@pytest.fixture
def corpus(tmp_path: Path) -> Path:
    base = tmp_path / "base"
    write_tree(base / "docs", CORPUS)
    return base


async def embed_collection(index: Path, base: Path, server: OpenAIServer) -> None:
    embedder = OpenAICompatibleEmbedder(MODEL, base_url=server.base_url, api_key=SECRET)
    async with Collection.open(
        index, base_dir=base, embedder=embedder, chunking=SMALL_CHUNKS
    ) as col:
        report = await col.ingest(base / "docs")
        assert not report.failed and report.chunks_embedded > 0
        hybrid = await col.search("boiling water tea", top_k=3, mode="hybrid")
        assert hybrid.results[0].source == "docs/kitchen/tea.rst"
        assert "degraded" not in hybrid.metadata
        dense = await col.search("a hot drink made from leaves", top_k=3, mode="dense")
        assert dense.results and dense.metadata["stage"] == "dense"
        for result in hybrid.results:
            assert (await col.fetch_chunk(result.chunk_id)).verification == "verified"
        manifest = await col.store.read_manifest()
        assert manifest is not None
        assert (manifest.provider, manifest.model_name, manifest.dimensions) == (
            "openai-compatible",
            MODEL,
            384,
        )
    await embedder.aclose()


def stored_bytes(index: Path) -> bytes:
    return b"".join(p.read_bytes() for p in index.rglob("*") if p.is_file())


async def test_python_grk_search_and_the_stored_manifest(
    tmp_path: Path,
    corpus: Path,
    openai_server: OpenAIServer,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    index = tmp_path / "idx"
    await embed_collection(index, corpus, openai_server)
    # Neither the key nor the endpoint is anywhere in the store.
    everything = stored_bytes(index)
    assert SECRET.encode() not in everything
    assert openai_server.base_url.encode() not in everything

    monkeypatch.delenv("GROUNDKIT_EMBEDDING_URL", raising=False)
    where = ["--index-dir", str(index)]
    # Without an endpoint grk says what to set, and BM25 still works.
    assert await _grk(["search", "boiling water tea", "--mode", "hybrid", *where]) == 2
    err = capsys.readouterr().err
    assert "GROUNDKIT_EMBEDDING_URL" in err and "--embedding-url" in err
    assert await _grk(["search", "boiling water tea", *where]) == 0
    capsys.readouterr()

    monkeypatch.setenv("GROUNDKIT_EMBEDDING_URL", openai_server.base_url)
    code = await _grk(["search", "boiling water tea", "--mode", "hybrid", *where, "--json"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    found = json.loads(captured.out)
    assert found["mode"] == "hybrid" and found["metadata"]["stage"] == "fusion"
    assert found["results"][0]["citation"]["source"] == "docs/kitchen/tea.rst"
    assert "warning" not in captured.err
    # The flag works as well as the variable, and dense too.
    monkeypatch.delenv("GROUNDKIT_EMBEDDING_URL")
    code = await _grk(
        ["search", "tea", "--mode", "dense", *where, "--embedding-url", openai_server.base_url]
    )
    assert code == 0, capsys.readouterr().err


async def test_grk_ingest_binds_a_collection_to_the_server(
    tmp_path: Path,
    corpus: Path,
    openai_server: OpenAIServer,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("GROUNDKIT_EMBEDDING_API_KEY", SECRET)
    where = ["--index-dir", str(tmp_path / "idx"), "--base-dir", str(corpus)]
    args = ["--embedding-provider", "openai-compatible", "--embedder", MODEL]
    code = await _grk(
        ["ingest", str(corpus / "docs"), *where, *args, "--embedding-url", openai_server.base_url]
    )
    assert code == 0, capsys.readouterr().err
    capsys.readouterr()
    # A later ingest rebuilds the recorded embedder from the environment.
    monkeypatch.setenv("GROUNDKIT_EMBEDDING_URL", openai_server.base_url)
    (corpus / "docs" / "extra.txt").write_text("Rooibos is not a tea at all.\n", "utf-8")
    assert await _grk(["ingest", str(corpus / "docs"), *where, "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["added"] == ["docs/extra.txt"] and report["chunks_embedded"] > 0
    assert SECRET.encode() not in stored_bytes(tmp_path / "idx")


async def _grk(argv: list[str]) -> int:
    # main() runs its own event loop: off this test's loop, in a thread.
    return await asyncio.to_thread(main, argv)


async def test_grk_serve_answers_hybrid_through_the_server(
    tmp_path: Path, corpus: Path, openai_server: OpenAIServer
) -> None:
    pytest.importorskip("mcp")
    from mcp import Client, StdioServerParameters
    from mcp.client.stdio import stdio_client

    from tests.service.test_e2e import GRK, child_env
    from tests.service.test_server import call

    index = tmp_path / "idx"
    await embed_collection(index, corpus, openai_server)
    params = StdioServerParameters(
        command=str(GRK),
        args=["serve", "--index-dir", str(index), "--base-dir", str(corpus)],
        env=child_env(GROUNDKIT_EMBEDDING_URL=openai_server.base_url),
        cwd=str(tmp_path),
    )
    log = tmp_path / "serve.log"
    with log.open("w", encoding="utf-8") as errlog:
        async with Client(stdio_client(params, errlog=errlog)) as client:
            found = await call(client, "search", query="boiling water tea", mode="hybrid", top_k=3)
            assert found["results"][0]["citation"]["source"] == "docs/kitchen/tea.rst"
            assert not found.get("degraded")
            dense = await call(client, "search", query="leaves steeped in hot water", mode="dense")
            assert dense["results"]
            chunk_id = found["results"][0]["citation"]["chunk_id"]
            fetched = await call(client, "fetch_chunk", chunk_id=chunk_id)
            assert fetched["verification"] == "verified"
            listed = await call(client, "list_collections")
            assert listed["collections"][0]["embedding"]["provider"] == "openai-compatible"
    assert "serving 1 collection(s)" in log.read_text(encoding="utf-8")


async def test_records_get_vectors_and_lose_them_when_deleted(
    tmp_path: Path, openai_server: OpenAIServer
) -> None:
    embedder = OpenAICompatibleEmbedder(MODEL, base_url=openai_server.base_url)
    async with Collection.open(tmp_path / "idx", base_dir=tmp_path, embedder=embedder) as col:
        report = await col.add_documents(
            [
                {"id": "q1", "text": "Parcels to Norway take five working days."},
                {"id": "q2", "text": "Our office dog is called Biscuit."},
            ]
        )
        assert report.chunks_embedded == 2
        dense = await col.search("how long does shipping to Scandinavia take", mode="dense")
        assert dense.results[0].source == "record://q1"
        assert (await col.fetch_chunk(dense.results[0].chunk_id)).verification == "verified"
        assert col.vector_store is not None
        assert await col.vector_store.count() == 2
        # The same text again is neither stored nor embedded again.
        again = await col.add_documents(
            [{"id": "q1", "text": "Parcels to Norway take five working days."}]
        )
        assert again.unchanged == ["record://q1"] and again.chunks_embedded == 0
        await col.delete(records=["q1"])
        assert await col.vector_store.count() == 1
        left = await col.search("shipping to Scandinavia", mode="dense")
        assert [r.source for r in left.results] == ["record://q2"]
    await embedder.aclose()


async def test_a_server_without_an_endpoint_still_serves_bm25(
    tmp_path: Path, corpus: Path, openai_server: OpenAIServer, caplog: pytest.LogCaptureFixture
) -> None:
    pytest.importorskip("mcp")
    from groundkit import ConfigurationError
    from groundkit.providers.factory import embedder_for_manifest
    from groundkit.service import CollectionRegistry

    index = tmp_path / "idx"
    await embed_collection(index, corpus, openai_server)
    registry = CollectionRegistry(
        index, embedder_for=functools.partial(embedder_for_manifest, environ={})
    )
    try:
        with caplog.at_level("WARNING", logger="groundkit"):
            async with registry.lease("default") as col:
                assert col.embedder is None
                found = await col.search("boiling water tea")
                assert found.results[0].source == "docs/kitchen/tea.rst"
                with pytest.raises(ConfigurationError):
                    await col.search("boiling water tea", mode="hybrid")
        assert "GROUNDKIT_EMBEDDING_URL" in caplog.text
    finally:
        await registry.close()
