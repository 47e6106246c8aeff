"""MCP tools with filters, a server clearance, and search across collections."""

from __future__ import annotations

from pathlib import Path

import pytest

from groundkit import SENSITIVITY_LEVELS, Collection
from groundkit.service import CollectionRegistry
from tests.retrieval.fielded import CHUNKS, write_fielded
from tests.service.test_server import call, connected, refused
from tests.support import write_tree


@pytest.fixture
async def labelled(tmp_path: Path) -> Path:
    """An index with the fielded corpus as ``default`` and a small ``extra`` collection."""
    base = write_fielded(tmp_path / "base")
    write_tree(
        base / "extra",
        {
            "x.md": "---\nsensitivity: restricted\n---\nsolar codeword restricted\n",
            "y.md": "solar panels on the extra shed\n",
        },
    )
    index = tmp_path / "index"
    async with Collection.open(index, base_dir=base, chunking=CHUNKS) as col:
        report = await col.ingest(base)
        assert not report.failed
    async with Collection.open(index, "extra", base_dir=base / "extra") as col:
        assert not (await col.ingest(base / "extra")).failed
    return index


async def test_search_tool_filters(labelled: Path) -> None:
    async with connected(CollectionRegistry(labelled)) as client:
        found = await call(client, "search", query="solar panels", top_k=5, filters={"team": "red"})
        assert len(found["results"]) == 5
        assert {r["fields"]["team"] for r in found["results"]} == {"red"}
        assert {r["collection"] for r in found["results"]} == {"default"}
        message = await refused(client, "search", query="solar panels", filters={"colour": "red"})
        assert "unknown field 'colour'" in message
        message = await refused(client, "search", query="solar", filters={"team": {"like": "r"}})
        assert "unknown operator 'like'" in message
        bad_glob = {"source": {"glob": "red/[z-a].md"}}
        message = await refused(client, "search", query="solar", filters=bad_glob)
        assert "glob 'red/[z-a].md': the range z-a runs backwards" in message


async def test_server_clearance_holds_at_every_tool(labelled: Path) -> None:
    async with connected(CollectionRegistry(labelled)) as client:
        every = await call(client, "search", query="memo codeword", top_k=50)
        secret = next(r for r in every["results"] if "codeword restricted" in r["content"])[
            "citation"
        ]["chunk_id"]
    async with connected(CollectionRegistry(labelled, clearance="internal")) as client:
        texts: list[str] = []
        for query in ("memo codeword", "codeword restricted", "solar panels"):
            found = await call(client, "search", query=query, top_k=100)
            texts += [r["content"] for r in found["results"]]
            multi = await call(
                client,
                "search_collections",
                query=query,
                collections=["default", "extra"],
                top_k=100,
            )
            texts += [r["content"] for r in multi["results"]]
            assert multi["failures"] == []
        assert texts and not any(
            f"codeword {lvl}" in t for t in texts for lvl in SENSITIVITY_LEVELS[2:]
        )
        message = await refused(client, "fetch_chunk", chunk_id=secret)
        assert "no chunk" in message


async def test_search_collections_tool(labelled: Path) -> None:
    async with connected(CollectionRegistry(labelled)) as client:
        first = await call(
            client,
            "search_collections",
            query="solar panels",
            collections=["default", "extra"],
            top_k=8,
        )
        again = await call(
            client,
            "search_collections",
            query="solar panels",
            collections=["extra", "default"],
            top_k=8,
        )
        assert first["results"] == again["results"] and first["failures"] == []
        assert {r["collection"] for r in first["results"]} == {"default", "extra"}
        message = await refused(
            client, "search_collections", query="solar", collections=["default", "nope"]
        )
        assert "'nope'" in message
        # A collection that cannot be opened is reported, and the others still answer.
        (labelled / "extra.sqlite3").write_bytes(b"not a database" * 100)
        broken = await call(
            client, "search_collections", query="solar panels", collections=["default", "extra"]
        )
        assert broken["results"] and [f["collection"] for f in broken["failures"]] == ["extra"]
        assert broken["failures"][0]["error"] == "StorageError"
