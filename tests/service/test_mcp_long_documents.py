"""The MCP search tool's long-document arguments: expand, mmr, reorder, rewrite."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client

from groundkit import ChunkingConfig, Collection
from groundkit.retrieval.rewriting import GlossaryRewriter
from groundkit.service import CollectionRegistry
from tests.service.test_e2e import GRK, child_env
from tests.service.test_server import call, connected, refused, text_of
from tests.support import write_tree

GUIDE = """# Guide

The guide walks through the whole tool, one part at a time.

## Install

Run pip install groundkit to fetch the package. It needs Python 3.11 or later.
Check the installation with grk --version afterwards.

## Usage

Index a folder with grk ingest. Search it with grk search.
"""
CARDIOLOGY = "# Cardiology notes\n\nMyocardial infarction follows a blocked coronary artery.\n"
GLOSSARY = '[synonyms]\n"heart attack" = ["myocardial infarction"]\n'


@pytest.fixture
async def index(tmp_path: Path) -> Path:
    write_tree(tmp_path / "base", {"docs/guide.md": GUIDE, "docs/cardiology.md": CARDIOLOGY})
    where = tmp_path / "index"
    chunking = ChunkingConfig(strategy="sentence")
    async with Collection.open(where, base_dir=tmp_path / "base", chunking=chunking) as col:
        assert not (await col.ingest(tmp_path / "base" / "docs")).failed
    return where


async def test_the_search_schema_takes_the_new_arguments(index: Path) -> None:
    async with connected(CollectionRegistry(index)) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
    schema = tools["search"].input_schema
    props = schema["properties"]
    assert schema["required"] == ["query"]
    assert {"enum": ["parent", "window"], "type": "string"} in props["expand"]["anyOf"]
    (number,) = [s for s in props["mmr"]["anyOf"] if s.get("type") == "number"]
    assert (number["minimum"], number["maximum"]) == (0.0, 1.0)
    assert {"const": "lost-in-the-middle", "type": "string"} in props["reorder"]["anyOf"]
    assert props["rewrite"]["type"] == "boolean" and props["rewrite"]["default"] is False
    assert "context" in str(tools["search"].output_schema)


@pytest.mark.parametrize("kind", ["parent", "window"])
async def test_expand_returns_the_passage_as_an_exact_slice(
    index: Path, tmp_path: Path, kind: str
) -> None:
    async with connected(CollectionRegistry(index)) as client:
        result = await client.call_tool(
            "search", {"query": "python installation", "expand": kind, "top_k": 3}
        )
        assert not result.is_error, text_of(result)
    found = result.structured_content
    assert found is not None and found["steps"] == [f"expand:{kind}"]
    top = found["results"][0]
    assert top["heading_path"] == ["Guide", "Install"]
    context = top["context"]
    assert context["kind"] == kind
    text = (tmp_path / "base" / "docs" / "guide.md").read_text(encoding="utf-8")
    assert text[context["start_offset"] : context["end_offset"]] == context["content"]
    assert context["start_offset"] <= top["citation"]["start_offset"]
    assert top["citation"]["end_offset"] <= context["end_offset"]
    if kind == "parent":
        assert context["content"].startswith("## Install")
        assert context["content"].endswith("grk --version afterwards.")
    block = text_of(result)
    assert "   under: Guide > Install" in block
    assert f"   context {kind} [{context['start_offset']}:{context['end_offset']}]" in block
    assert " ".join(context["content"].split()) in block


async def test_mmr_and_reorder_are_applied(index: Path) -> None:
    async with connected(CollectionRegistry(index)) as client:
        found = await call(
            client, "search", query="grk search", mmr=0.5, reorder="lost-in-the-middle"
        )
    assert found["steps"] == ["mmr:0.5", "reorder:lost-in-the-middle"]
    assert found["results"]


async def test_rewrite_without_a_glossary_is_a_clear_error(index: Path) -> None:
    async with connected(CollectionRegistry(index)) as client:
        message = await refused(client, "search", query="heart attack", rewrite=True)
    assert message == (
        "search failed (ConfigurationError): rewrite=true: this server has no glossary "
        "(start it with --glossary FILE)"
    )


async def test_rewrite_with_the_servers_glossary_finds_the_synonym(
    index: Path, tmp_path: Path
) -> None:
    glossary = tmp_path / "terms.toml"
    glossary.write_text(GLOSSARY, encoding="utf-8")
    registry = CollectionRegistry(index, rewriter=GlossaryRewriter.from_file(glossary))
    async with connected(registry) as client:
        assert (await call(client, "search", query="heart attack"))["results"] == []
        result = await client.call_tool("search", {"query": "heart attack", "rewrite": True})
        assert not result.is_error, text_of(result)
    found = result.structured_content
    assert found is not None
    assert found["queries"] == ["heart attack", "myocardial infarction"]
    assert found["results"][0]["citation"]["source"] == "docs/cardiology.md"
    assert "queries searched: heart attack | myocardial infarction" in text_of(result)


@pytest.mark.parametrize(
    ("arguments", "needle"),
    [
        ({"expand": "section"}, "expand: Input should be 'parent' or 'window'"),
        ({"mmr": 1.5}, "mmr: Input should be less than or equal to 1"),
        ({"mmr": "high"}, "mmr: Input should be a valid number"),
        ({"reorder": "reverse"}, "reorder: Input should be 'lost-in-the-middle'"),
        ({"rewrite": "yes"}, "rewrite: Input should be a valid boolean"),
    ],
)
async def test_bad_arguments_are_one_line_tool_errors(
    index: Path, arguments: dict[str, object], needle: str
) -> None:
    async with connected(CollectionRegistry(index)) as client:
        message = await refused(client, "search", query="guide", **arguments)
    assert message.startswith("search failed (invalid arguments): ")
    assert needle in message


async def test_grk_serve_glossary_over_stdio(index: Path, tmp_path: Path) -> None:
    glossary = tmp_path / "terms.toml"
    glossary.write_text(GLOSSARY, encoding="utf-8")
    args = ["serve", "--index-dir", str(index), "--glossary", str(glossary)]
    params = StdioServerParameters(command=str(GRK), args=args, env=child_env(), cwd=str(tmp_path))
    with (tmp_path / "stderr.log").open("w", encoding="utf-8") as errlog:
        async with Client(stdio_client(params, errlog=errlog)) as client:
            found = await call(client, "search", query="heart attack", rewrite=True)
    assert found["results"][0]["citation"]["source"] == "docs/cardiology.md"


def test_grk_serve_with_a_missing_glossary_exits_2(index: Path, tmp_path: Path) -> None:
    missing = tmp_path / "missing.toml"
    done = subprocess.run(
        [str(GRK), "serve", "--index-dir", str(index), "--glossary", str(missing)],
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert done.stderr.strip() == f"grk: error: glossary file {str(missing)!r} does not exist"
