"""Filters on every search path: applied before the cut, never dropped or broadened."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from groundkit import Collection, RetrievalError, SentenceTransformerEmbedder
from groundkit.retrieval import Retriever
from groundkit.retrieval.filters import parse_filters
from tests.retrieval.fielded import CHUNKS, QUERY, write_fielded
from tests.support import ToyEmbedder, assert_all_verify, write_tree

FILTERS: list[dict[str, Any]] = [
    {"team": "red"},
    {"team": {"ne": "blue"}},
    {"team": {"in": ["red", "labels"]}},
    {"year": {"between": [2005, 2012]}},
    {"year": {"gte": 2013}},
    {"rating": {"lt": 2}},
    {"tags": "energy"},
    {"tags": {"nin": ["roof"]}},
    {"team": {"exists": False}},
    {"team": "blue", "year": {"lt": 2003}},
    # Where a document lives: its source, exact, by prefix or by glob.
    {"source": "red/0.md"},
    {"source": {"in": ["red/1.md", "blue/03.md"]}},
    {"source": {"prefix": "red/"}},
    {"source": {"glob": "blue/1?.md"}},
    {"source": {"glob": "**/*.txt"}},
    {"source": {"nin": ["plain.txt"]}, "team": {"prefix": "bl"}},
    {"tags": {"prefix": "ener"}},
]


@pytest.fixture(scope="module")
def minilm() -> SentenceTransformerEmbedder:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    return SentenceTransformerEmbedder("all-MiniLM-L6-v2")


@pytest.fixture
async def bm25(tmp_path: Path) -> AsyncIterator[Collection]:
    base = write_fielded(tmp_path / "corpus")
    async with Collection.open(tmp_path / "index", base_dir=base, chunking=CHUNKS) as col:
        report = await col.ingest(base)
        assert not report.failed
        yield col


@pytest.fixture
async def dense(tmp_path: Path, minilm: SentenceTransformerEmbedder) -> AsyncIterator[Collection]:
    base = write_fielded(tmp_path / "corpus")
    async with Collection.open(
        tmp_path / "dense-index", base_dir=base, chunking=CHUNKS, embedder=minilm
    ) as col:
        report = await col.ingest(base)
        assert not report.failed
        yield col


def _matches(filters: dict[str, Any], result: Any) -> bool:
    flt = parse_filters(filters)
    assert flt is not None
    return flt.matches(result.fields, result.source)


async def test_top_k_is_honoured_after_filtering_bm25(bm25: Collection) -> None:
    unfiltered = await bm25.search(QUERY, 5)
    assert {r.fields.get("team") for r in unfiltered.results} == {"blue"}
    red = await bm25.search(QUERY, 5, filters={"team": "red"})
    assert len(red.results) == 5  # a post-filter of the top 5 would have left none
    assert {r.fields["team"] for r in red.results} == {"red"}
    assert red.metadata["filtered"] is True and unfiltered.metadata["filtered"] is False
    await assert_all_verify(red.results, bm25.base_dir)


@pytest.mark.parametrize("filters", FILTERS)
async def test_bm25_filter_equals_filtering_the_full_ranking(
    bm25: Collection, filters: dict[str, Any]
) -> None:
    everything = (await bm25.search(QUERY, 1000)).results
    expected = [(r.chunk_id, r.score) for r in everything if _matches(filters, r)][:7]
    got = (await bm25.search(QUERY, 7, filters=filters)).results
    assert [(r.chunk_id, r.score) for r in got] == expected
    assert expected  # every listed filter selects something


async def test_filter_matching_nothing_returns_nothing(bm25: Collection) -> None:
    response = await bm25.search(QUERY, 5, filters={"year": {"gt": 3000}})
    assert response.results == [] and response.total_results == 0


@pytest.mark.parametrize(
    ("filters", "needle"),
    [
        ({"colour": "red"}, "unknown field 'colour'"),
        ({"year": {"gt": "2010"}}, "a str value for a field holding number"),
        ({"team": {"near": "red"}}, "unknown operator"),
        ({"team": {"between": ["a"]}}, "takes [low, high]"),
        ({"source": {"gt": "a"}}, "source (the document's path or URL) takes eq, ne"),
        ({"source": 3}, "a source is text"),
        ({"team": {"glob": "r*"}}, "glob applies to source"),
        ({"team": {"prefix": 3}}, "takes a non-empty string"),
        ({"source": {"prefix": ""}}, "takes a non-empty string"),
    ],
)
async def test_bad_filters_are_errors_on_every_path(
    bm25: Collection, filters: dict[str, Any], needle: str
) -> None:
    with pytest.raises(RetrievalError) as caught:
        await bm25.search(QUERY, 5, filters=filters)
    assert needle in str(caught.value)


async def test_dense_filter_pushdown_equals_filtering_exact_ranking(dense: Collection) -> None:
    everything = (await dense.search(QUERY, 1000, mode="dense")).results
    for filters in FILTERS:
        expected = [r.chunk_id for r in everything if _matches(filters, r)][:5]
        got = (await dense.search(QUERY, 5, mode="dense", filters=filters)).results
        assert [r.chunk_id for r in got] == expected, filters


async def test_dense_and_hybrid_honour_top_k_after_filtering(dense: Collection) -> None:
    for mode in ("dense", "hybrid"):
        got = (await dense.search(QUERY, 5, mode=mode, filters={"team": "red"})).results
        assert len(got) == 5 and {r.fields["team"] for r in got} == {"red"}, mode
        await assert_all_verify(got, dense.base_dir)
    with pytest.raises(RetrievalError, match="unknown field"):
        await dense.search(QUERY, 5, mode="hybrid", filters={"nope": 1})


async def test_filters_on_a_directly_opened_retriever(bm25: Collection) -> None:
    retriever = await Retriever.open(bm25.store)
    got = await retriever.search(QUERY, 3, filters={"tags": {"in": ["energy"]}})
    assert len(got.results) == 3 and all(r.fields["tags"] == ["energy"] for r in got.results)
    assert all(r.collection is None for r in got.results)
    named = await bm25.search(QUERY, 3)
    assert all(r.collection == "default" for r in named.results)


async def test_filter_sees_a_reingest_with_new_fields(bm25: Collection) -> None:
    assert (await bm25.search(QUERY, 5, filters={"team": "green"})).results == []
    target = bm25.base_dir / "red" / "0.md"
    target.write_text(target.read_text("utf-8").replace("team: red", "team: green"), "utf-8")
    await bm25.ingest(bm25.base_dir)
    green = await bm25.search(QUERY, 5, filters={"team": "green"})
    assert [r.source for r in green.results] == ["red/0.md"]
    red = await bm25.search(QUERY, 10, filters={"team": "red"})
    assert "red/0.md" not in {r.source for r in red.results} and len(red.results) == 4


@pytest.mark.parametrize(
    ("filters", "k", "calls"),
    [
        ({"kind": "far"}, 5, [(34, False), (5, True)]),  # broad but ranked low: falls back
        ({"kind": "near"}, 5, [(15, False)]),  # broad and ranked high: one unrestricted query
        ({"kind": "far", "n": {"lt": 6}}, 5, [(5, True)]),  # narrow: pushed down at once
        ({"kind": "far"}, 40, [(267, False)]),  # deeper than the table: what it saw is all
    ],
)
async def test_dense_restriction_strategies_agree(
    tmp_path: Path, filters: dict[str, Any], k: int, calls: list[tuple[int, bool]]
) -> None:
    files = {
        f"near/{i:03d}.md": f"---\nkind: near\nn: {i}\n---\nalpha alpha {i}\n" for i in range(140)
    }
    files |= {
        f"far/{i:03d}.md": f"---\nkind: far\nn: {i}\n---\nomega zulu {i}\n" for i in range(60)
    }
    write_tree(tmp_path / "c", files)
    async with Collection.open(
        tmp_path / "i", base_dir=tmp_path / "c", embedder=ToyEmbedder()
    ) as col:
        await col.ingest(col.base_dir)
        everything = (await col.search("alpha alpha", 1000, mode="dense")).results
        assert len(everything) == 200
        expected = [r.chunk_id for r in everything if _matches(filters, r)][:k]
        seen: list[tuple[int, bool]] = []
        store = col.vector_store
        assert store is not None
        query = store.query

        async def recorded(vector: Any, top_k: int, **options: Any) -> Any:
            seen.append((top_k, options.get("document_ids") is not None))
            return await query(vector, top_k, **options)

        store.query = recorded  # type: ignore[method-assign]
        got = (await col.search("alpha alpha", k, mode="dense", filters=filters)).results
    assert [r.chunk_id for r in got] == expected
    assert seen == calls
