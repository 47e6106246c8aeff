"""Search responses read as the list of their results, and stay pydantic models."""

from __future__ import annotations

import copy
import pickle
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

import groundkit.sync as gks
from groundkit import (
    Collection,
    CollectionFailure,
    ConfigurationError,
    MultiSearchResponse,
    RetrievalResult,
    SearchResponse,
)
from groundkit.contracts import Highlights


def result(index: int) -> RetrievalResult:
    content = f"chunk number {index}"
    return RetrievalResult(
        content=content,
        score=1.0 / (index + 1),
        document_id=f"doc-{index}",
        chunk_id=f"chunk-{index}",
        chunk_index=0,
        source=f"notes/{index}.md",
        source_class="text",
        extractor=None,
        start_offset=0,
        end_offset=len(content),
        metadata={"fields": {"n": index}},
        highlights=Highlights([(0, 5)]),
    )


def single(count: int) -> SearchResponse:
    results = [result(i) for i in range(count)]
    return SearchResponse(query="q", mode="bm25", results=results, total_results=count)


def multi(count: int) -> MultiSearchResponse:
    results = [result(i).model_copy(update={"collection": "a"}) for i in range(count)]
    failure = CollectionFailure(collection="b", error="StorageError", detail="gone")
    return MultiSearchResponse(
        query="q",
        mode="bm25",
        collections=["a", "b"],
        results=results,
        total_results=count,
        failures=[failure],
    )


RESPONSES: st.SearchStrategy[SearchResponse | MultiSearchResponse] = st.integers(
    min_value=0, max_value=12
).flatmap(lambda n: st.sampled_from([single(n), multi(n)]))


@given(RESPONSES)
def test_a_response_iterates_counts_and_tests_like_its_results(
    response: SearchResponse | MultiSearchResponse,
) -> None:
    assert list(response) == response.results
    assert len(response) == len(response.results)
    assert bool(response) is bool(response.results)
    assert list(reversed(response)) == response.results[::-1]
    for item in response.results:
        assert item in response


@given(st.data())
def test_indexing_and_slicing_are_the_results(data: st.DataObject) -> None:
    response = data.draw(RESPONSES)
    count = len(response.results)
    if count:
        index = data.draw(st.integers(min_value=-count, max_value=count - 1))
        assert response[index] is response.results[index]
    cut = data.draw(st.slices(count))
    assert response[cut] == response.results[cut]
    assert isinstance(response[cut], list)
    with pytest.raises(IndexError):
        response[count]


@given(RESPONSES)
def test_to_list_gives_each_result_as_json_ready_dicts(
    response: SearchResponse | MultiSearchResponse,
) -> None:
    rows = response.to_list()
    assert rows == [r.to_dict() for r in response.results]
    full = response.to_list(full=True)
    assert full == [r.model_dump(mode="json") for r in response.results]
    assert [RetrievalResult.model_validate(row) for row in full] == response.results


@given(RESPONSES)
def test_the_model_is_still_a_model(response: SearchResponse | MultiSearchResponse) -> None:
    cls = type(response)
    dumped = response.model_dump()
    assert set(dumped) == set(cls.model_fields)
    assert cls.model_validate(dumped) == response
    assert cls.model_validate_json(response.model_dump_json()) == response
    assert pickle.loads(pickle.dumps(response)) == response
    assert copy.deepcopy(response) == response and copy.copy(response) == response
    emptied = response.model_copy(update={"results": [], "total_results": 0})
    assert not emptied and len(emptied) == 0
    assert (emptied == response) is (not response)
    # The fields are attributes still; only iteration changed its meaning.
    assert response.query == "q" and response.mode == "bm25"


def test_to_pandas_is_one_row_per_result_in_rank_order() -> None:
    pandas = pytest.importorskip("pandas")
    response = single(3)
    frame = response.to_pandas()
    assert isinstance(frame, pandas.DataFrame)
    assert list(frame["citation.chunk_id"]) == ["chunk-0", "chunk-1", "chunk-2"]
    assert list(frame["score"]) == [r.score for r in response]
    # Nested keys are flattened with dots: the citation's fields are columns.
    assert {c.split(".")[0] for c in frame.columns} == set(response.to_list()[0])
    assert "citation.start_offset" in frame.columns
    empty = single(0).to_pandas()
    assert len(empty) == 0 and "citation.chunk_id" in empty.columns
    assert list(multi(2).to_pandas()["collection"]) == ["a", "a"]


def test_to_pandas_without_pandas_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pandas", None)  # what an absent package looks like
    with pytest.raises(ConfigurationError, match=r"pip install groundkit\[pandas\]"):
        single(1).to_pandas()


async def test_a_real_search_iterates_its_results(tmp_path: Path) -> None:
    for name, text in {"green": "Green tea at 80 degrees.", "black": "Black tea boils."}.items():
        (tmp_path / f"{name}.md").write_text(text + "\n", "utf-8")
    async with Collection.open(tmp_path / "idx", base_dir=tmp_path) as col:
        await col.ingest(tmp_path)
        response = await col.search("tea")
        sources = [r.source for r in response]
        assert sorted(sources) == ["black.md", "green.md"] and len(response) == 2
        assert response[0].source == sources[0]
        assert not await col.search("coffee")


def test_a_blocking_search_iterates_its_results(tmp_path: Path) -> None:
    (tmp_path / "a.md").write_text("Oolong is rolled.\n", "utf-8")
    with gks.Collection.open(tmp_path / "idx", base_dir=tmp_path) as col:
        col.ingest(tmp_path / "a.md")
        (top,) = col.search("oolong")
        assert top.source == "a.md"
        assert [r.source for r in gks.search_collections([col], "oolong")] == ["a.md"]


@pytest.mark.parametrize("make", [single, multi])
def test_a_field_name_as_index_points_to_rank_and_attribute(
    make: Callable[[int], SearchResponse | MultiSearchResponse],
) -> None:
    response = make(2)
    with pytest.raises(TypeError) as refusal:
        response["results"]  # type: ignore[call-overload]
    assert str(refusal.value) == (
        "a response is indexed by rank (response[0], response[:3]); its fields are "
        "attributes: response.results"
    )
    with pytest.raises(TypeError, match=r"by rank .* not 'score'"):
        response["score"]  # type: ignore[call-overload]
    assert response[0] is response.results[0]
