"""Searching several collections at once: fused, attributed, deterministic, failures shown."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

import groundkit.sync as gks
from groundkit import (
    Collection,
    InvalidQueryError,
    MultiSearchResponse,
    RetrievalError,
    check_citation,
    search_collections,
)
from groundkit.retrieval import reciprocal_rank_fusion
from tests.support import CORPUS, SMALL_CHUNKS, ToyEmbedder, write_tree

LIBRARY = {
    "solar-notes.md": "Solar panels on the library roof. Solar output logs.\n",
    "tea-notes.txt": "Tea brewing notes: water temperature and steeping time for tea.\n",
    "duplicate.md": CORPUS["energy/solar.md"],  # the same text as in the other collection
}


@pytest.fixture
async def pair(tmp_path: Path) -> AsyncIterator[tuple[Collection, Collection]]:
    index = tmp_path / "index"
    write_tree(tmp_path / "docs", dict(CORPUS))
    write_tree(tmp_path / "library", LIBRARY)
    async with (
        Collection.open(index, "docs", base_dir=tmp_path / "docs", chunking=SMALL_CHUNKS) as a,
        Collection.open(index, "library", base_dir=tmp_path / "library") as b,
    ):
        await a.ingest(a.base_dir)
        await b.ingest(b.base_dir)
        yield a, b


def shape(response: MultiSearchResponse) -> list[tuple[str | None, str, float]]:
    return [(r.collection, r.chunk_id, r.score) for r in response.results]


async def test_results_name_their_collection_and_verify(
    pair: tuple[Collection, Collection],
) -> None:
    a, b = pair
    found = await search_collections([a, b], "solar panels", 10)
    assert found.collections == ["docs", "library"] and found.complete
    assert {r.collection for r in found.results} == {"docs", "library"}
    bases = {"docs": a.base_dir, "library": b.base_dir}
    for r in found.results:
        assert r.collection is not None
        assert (await check_citation(r.citation, r.content, bases[r.collection])).ok
    per = found.metadata["per_collection"]
    assert set(per) == {"docs", "library"} and all(v["total_results"] > 0 for v in per.values())


async def test_fusion_is_rrf_over_each_collections_ranking(
    pair: tuple[Collection, Collection],
) -> None:
    a, b = pair
    found = await search_collections([a, b], "solar panels", 5)
    ra = [("docs", r.chunk_id) for r in (await a.search("solar panels", 5)).results]
    rb = [("library", r.chunk_id) for r in (await b.search("solar panels", 5)).results]
    expected = reciprocal_rank_fusion([ra, rb], k=60)[:5]
    assert [(r.collection, r.chunk_id) for r in found.results] == [h.key for h in expected]
    assert [r.score for r in found.results] == [h.score for h in expected]


async def test_identical_across_runs_orders_and_reopen(
    pair: tuple[Collection, Collection], tmp_path: Path
) -> None:
    a, b = pair
    first = await search_collections([a, b], "solar panels tea", 10)
    assert shape(first) == shape(await search_collections([a, b], "solar panels tea", 10))
    # Ties between equal ranks break on (collection, chunk_id), not argument order.
    swapped = await search_collections([b, a], "solar panels tea", 10)
    assert shape(swapped) == shape(first)
    async with (
        Collection.open(tmp_path / "index", "docs") as a2,
        Collection.open(tmp_path / "index", "library") as b2,
    ):
        assert shape(await search_collections([a2, b2], "solar panels tea", 10)) == shape(first)


async def test_a_broken_collection_is_reported_not_skipped(
    pair: tuple[Collection, Collection],
) -> None:
    a, b = pair
    await b.close()  # its store is gone: searching it fails
    found = await search_collections([a, b], "solar panels", 5)
    assert not found.complete and found.results
    (failure,) = found.failures
    assert failure.collection == "library" and failure.error == "StorageError"
    assert "closed" in failure.detail
    assert {r.collection for r in found.results} == {"docs"}


async def test_a_collection_without_vectors_is_reported_in_dense_mode(
    tmp_path: Path,
) -> None:
    write_tree(tmp_path / "d", dict(CORPUS))
    async with (
        Collection.open(
            tmp_path / "i", "vec", base_dir=tmp_path / "d", embedder=ToyEmbedder()
        ) as dense,
        Collection.open(tmp_path / "i", "lex", base_dir=tmp_path / "d") as lexical,
    ):
        await dense.ingest(dense.base_dir)
        await lexical.ingest(lexical.base_dir)
        found = await search_collections([dense, lexical], "wind farms", 3, mode="dense")
    assert [f.collection for f in found.failures] == ["lex"]
    assert found.failures[0].error == "ConfigurationError"
    assert found.results and {r.collection for r in found.results} == {"vec"}


async def test_errors_before_any_search(pair: tuple[Collection, Collection]) -> None:
    a, b = pair
    with pytest.raises(RetrievalError, match="at least one"):
        await search_collections([], "x")
    with pytest.raises(RetrievalError, match="more than once"):
        await search_collections([a, a], "x")
    with pytest.raises(RetrievalError, match="non-empty"):
        await search_collections([a, b], "  ")
    with pytest.raises(RetrievalError, match="unknown operator"):
        await search_collections([a, b], "solar", filters={"x": {"like": 1}})
    with pytest.raises(RetrievalError, match="time zone"):
        await search_collections([a, b], "solar", as_of=datetime(2026, 3, 1))
    with pytest.raises(RetrievalError, match="bm25 mode only"):
        await search_collections([a, b], "solar", mode="dense", as_of=datetime.now(UTC))
    searched: list[str] = []
    for collection in (a, b):
        original = collection.search

        async def spy(*args: Any, _name: str = collection.name, _search: Any = original) -> Any:
            searched.append(_name)
            return await _search(*args)

        collection.search = spy  # type: ignore[method-assign,assignment]
    for rrf_k in (0, -3, "x", True):
        with pytest.raises(InvalidQueryError, match="rrf_k must be a positive integer"):
            await search_collections([a, b], "solar", rrf_k=rrf_k)  # type: ignore[arg-type]
    assert searched == []
    await a.close()
    await b.close()
    with pytest.raises(RetrievalError, match=r"no collection could be searched.*docs.*library"):
        await search_collections([a, b], "solar")


def test_sync_collections_are_refused_before_any_search(tmp_path: Path) -> None:
    """Their blocking search would run on the event loop, then fail to be awaited."""
    write_tree(tmp_path / "docs", dict(CORPUS))
    with gks.Collection.open(tmp_path / "index", "docs", base_dir=tmp_path / "docs") as col:
        col.ingest(tmp_path / "docs")
        searched: list[str] = []
        original = col.search

        def spy(*args: Any, **kwargs: Any) -> Any:
            searched.append("sync")
            return original(*args, **kwargs)

        col.search = spy  # type: ignore[method-assign]

        async def mixed() -> None:
            await search_collections([col], "solar")  # type: ignore[list-item]

        with pytest.raises(InvalidQueryError, match=r"groundkit\.sync collection.*\.aio"):
            asyncio.run(mixed())
        assert searched == []


async def test_as_of_reaches_every_collection(pair: tuple[Collection, Collection]) -> None:
    a, b = pair
    now = datetime.now(UTC)
    current = await search_collections([a, b], "solar panels", 10)
    same = await search_collections([a, b], "solar panels", 10, as_of=now)
    assert shape(same) == shape(current) and same.metadata["as_of"] == now.isoformat()
    assert "as_of" not in current.metadata
    # Before the first ingest neither collection held anything.
    before = await search_collections([a, b], "solar panels", 10, as_of=now - timedelta(days=1))
    assert before.results == [] and before.complete


async def test_filters_apply_in_every_collection(tmp_path: Path) -> None:
    write_tree(tmp_path / "x", {"a.md": "---\nteam: red\n---\nsolar panels\n", "b.md": "solar"})
    write_tree(tmp_path / "y", {"c.md": "---\nteam: red\n---\nsolar roof\n", "d.md": "solar"})
    async with (
        Collection.open(tmp_path / "i", "x", base_dir=tmp_path / "x") as x,
        Collection.open(tmp_path / "i", "y", base_dir=tmp_path / "y") as y,
    ):
        await x.ingest(x.base_dir)
        await y.ingest(y.base_dir)
        found = await search_collections([x, y], "solar", 10, filters={"team": "red"})
    assert sorted((r.collection, r.source) for r in found.results) == [
        ("x", "a.md"),
        ("y", "c.md"),
    ]
