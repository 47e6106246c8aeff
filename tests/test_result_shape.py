"""One shape for a result: the Python method, ``model_dump``, the CLI's ``--json`` and
MCP's structured content give the same data for the same result."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from groundkit import Collection
from groundkit.cli import main
from groundkit.contracts import Evidence, EvidenceSpan, FetchResult, RetrievalResult
from groundkit.service import CollectionRegistry
from tests.sources import make_pdf
from tests.test_contracts import _result

QUERY = "kettle water boil"
GUIDE = """# Kettles

## Boiling

A kettle brings water to the boil in minutes. Descale the kettle when the water tastes of lime.

## Storing

Keep the kettle dry between uses.
"""


def part_of(small: Any, big: Any) -> bool:
    """True when ``small`` is ``big`` with keys left out (at any depth), nothing renamed."""
    if isinstance(small, dict):
        return isinstance(big, dict) and all(
            k in big and part_of(v, big[k]) for k, v in small.items()
        )
    if isinstance(small, list):
        return (
            isinstance(big, list)
            and len(small) == len(big)
            and all(part_of(a, b) for a, b in zip(small, big, strict=True))
        )
    return bool(small == big)


def as_json(data: Any) -> Any:
    return json.loads(json.dumps(data))


def grk(capsys: pytest.CaptureFixture[str], *argv: str) -> Any:
    code = main(list(argv))
    out, err = capsys.readouterr()
    assert code == 0, err
    return json.loads(out)


@pytest.fixture
def index(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> list[str]:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "kettles.md").write_text(GUIDE, encoding="utf-8")
    (docs / "tea.md").write_text("Pour the water from the kettle over the leaves.\n", "utf-8")
    # A PDF result: its citation has pages and rectangles.
    (docs / "shelf.pdf").write_bytes(make_pdf(["The old kettle stands on the top shelf."]))
    args = ["--index-dir", str(tmp_path / "idx"), "--base-dir", str(tmp_path)]
    grk(capsys, "ingest", str(docs), *args, "--meta", "team=red", "--json")
    return args


async def searched(index_dir: str, full: bool) -> tuple[list[Any], Any]:
    async with Collection.open(index_dir) as col:
        response = await col.search(QUERY, 10)
        fetched = await col.fetch_chunk(response.results[0].chunk_id)
    return [r.to_dict(full=full) for r in response.results], fetched.to_dict(full=full)


async def served(index_dir: str, chunk_id: str, full: bool) -> tuple[Any, Any]:
    from mcp import Client

    from groundkit.service import build_server

    registry = CollectionRegistry(Path(index_dir))
    try:
        async with Client(build_server(registry)) as client:
            found = await client.call_tool("search", {"query": QUERY, "full": full})
            fetched = await client.call_tool("fetch_chunk", {"chunk_id": chunk_id, "full": full})
    finally:
        await registry.close()
    assert not found.is_error and not fetched.is_error
    return found.structured_content, fetched.structured_content


@pytest.mark.parametrize("full", [False, True])
def test_cli_mcp_and_python_give_one_shape(
    index: list[str], capsys: pytest.CaptureFixture[str], full: bool
) -> None:
    wide = ["--full"] if full else []
    results, fetched = asyncio.run(searched(index[1], full))
    assert len(results) >= 2
    top = results[0]
    assert top["citation"]["source"] == "docs/kettles.md"
    assert top["heading_path"] == ["Kettles", "Boiling"]
    assert top["fields"] == {"team": "red"}
    assert top["evidence"] and top["collection"] == "default"

    [pdf] = [r for r in results if r["citation"]["source"] == "docs/shelf.pdf"]
    assert pdf["citation"]["page"] == 1 and len(pdf["citation"]["rects"]) == 1
    cli = grk(capsys, "search", QUERY, *index, "--json", *wide)
    assert cli["results"] == as_json(results)
    chunk_id = top["citation"]["chunk_id"]
    assert grk(capsys, "fetch", chunk_id, *index, "--json", *wide) == as_json(fetched)

    pytest.importorskip("mcp")
    found, served_chunk = asyncio.run(served(index[1], chunk_id, full))
    assert found["results"] == as_json(results)
    assert served_chunk == {"collection": "default", **as_json(fetched)}


def test_the_compact_shape_is_part_of_the_full_one(index: list[str]) -> None:
    compact, fetched = asyncio.run(searched(index[1], False))
    full, fetched_full = asyncio.run(searched(index[1], True))
    assert all(part_of(a, b) for a, b in zip(compact, full, strict=True))
    assert part_of(fetched, fetched_full)
    # What the compact shape leaves out, and what it keeps from the full one.
    assert set(compact[0]) == {
        "content", "score", "scores", "citation", "evidence", "heading_path", "fields",
        "collection",
    }  # fmt: skip
    # Only the signals that scored the result (a BM25 search: its BM25 sum).
    assert compact[0]["scores"] == {"bm25": compact[0]["score"]}
    assert {"chunk_index", "metadata", "highlights"} <= set(full[0])
    assert set(compact[0]["evidence"][0]) == {"text", "start_offset", "end_offset"}
    assert set(fetched) == {"content", "citation", "verification", "detail", "read_from"}


def test_the_compact_json_is_smaller(index: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    compact = json.dumps(grk(capsys, "search", QUERY, *index, "--json"), indent=2)
    full = json.dumps(grk(capsys, "search", QUERY, *index, "--json", "--full"), indent=2)
    assert len(compact.splitlines()) < len(full.splitlines())


def test_full_needs_json(index: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["search", QUERY, *index, "--full"]) == 2
    assert "--full widens the --json output" in capsys.readouterr().err


results = st.builds(
    lambda content, start, version, collection, source_class, score, offset: RetrievalResult(
        content=content,
        score=score,
        document_id="d",
        chunk_id="c",
        chunk_index=0,
        source="https://example.org/a" if source_class == "snapshot" else "a.pdf",
        source_class=source_class,
        extractor="pypdf/4" if source_class == "extracted" else None,
        start_offset=start,
        end_offset=start + len(content),
        metadata={"fields": {"team": "red"}} if offset else {},
        version=version,
        collection=collection,
        evidence=Evidence(
            [
                EvidenceSpan(
                    start_offset=start, end_offset=start + len(content), text=content, score=1.0,
                    method="terms",
                )
            ]
        )
        if offset
        else None,
    ),
    st.text(max_size=20),
    st.integers(0, 10_000),
    st.none() | st.integers(1, 9),
    st.none() | st.sampled_from(["default", "notes"]),
    st.sampled_from(["text", "extracted", "snapshot", "record"]),
    st.floats(0, 100, allow_nan=False),
    st.booleans(),
)  # fmt: skip


@given(results)
def test_every_dump_reads_back_and_holds_the_compact_shape(result: RetrievalResult) -> None:
    dumped = result.model_dump(mode="json")
    assert RetrievalResult.model_validate(dumped) == result
    assert RetrievalResult.model_validate_json(result.model_dump_json()) == result
    assert dumped == result.to_dict(full=True)
    assert part_of(as_json(result.to_dict()), dumped)
    assert dumped["citation"] == result.citation.model_dump(mode="json")
    assert not {"source", "chunk_id", "start_offset", "version"} & set(dumped)


def test_a_fetch_compact_shape_leaves_out_only_what_is_unset() -> None:
    result = RetrievalResult(**_result(version=2))
    fetched = FetchResult(
        content="abc",
        citation=result.citation,
        verification="moved",
        detail="moved",
        version=2,
        current_start_offset=11,
        current_end_offset=14,
    )
    assert fetched.to_dict() == {
        "content": "abc",
        "citation": result.to_dict()["citation"],
        "verification": "moved",
        "detail": "moved",
        "current_start_offset": 11,
        "current_end_offset": 14,
    }
