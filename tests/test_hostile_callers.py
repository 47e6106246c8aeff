"""A careless or hostile caller of the public API: each wrong argument gets a groundkit
error that says what to pass, never an internal exception or a misleading one."""

from __future__ import annotations

from pathlib import Path

import pytest

import groundkit.sync as gks
from groundkit import (
    Citation,
    Collection,
    InvalidInputError,
    InvalidQueryError,
    InvalidSettingError,
    SearchRequest,
    check_citation,
    resolve_citation,
)


@pytest.mark.parametrize("source_class", ["record", "snapshot"])
@pytest.mark.parametrize("document_id", ["../../../etc", "sub/x", "x\x00y"])
async def test_a_forged_stored_text_citation_is_unresolvable(
    ingested: Collection, source_class: str, document_id: str
) -> None:
    """A citation naming an indexed source with a document id that cannot name a
    stored text is refused as a verdict, not with an internal path error."""
    top = (await ingested.search("offshore wind")).results[0]
    forged = top.citation.model_copy(
        update={"source_class": source_class, "document_id": document_id}
    )
    checked = await ingested.verify(forged, content=top.content)
    assert checked.verification == "unresolvable"
    # Refused before any read: the id is not the one its source gives.
    assert checked.detail.startswith("refused: ") and "is not the id of" in checked.detail


@pytest.mark.parametrize("method", ["fetch_chunk", "fetch_in_source"])
async def test_fetch_takes_a_chunk_id_not_the_result_or_citation(
    ingested: Collection, method: str
) -> None:
    """Not a ``StorageError`` telling the caller their database is damaged."""
    top = (await ingested.search("offshore wind")).results[0]
    for wrong in (top, top.citation, 5, None):
        with pytest.raises(InvalidQueryError, match=r"chunk id \(a str, such as result\.chunk_id"):
            await getattr(ingested, method)(wrong)


@pytest.mark.parametrize(
    "update",
    [
        {"start_offset": 50, "end_offset": 3},
        {"start_offset": "0"},
        {"end_offset": 2.0},
        {"start_offset": -4},
        {"source_class": "bogus"},
    ],
)
async def test_a_citation_made_without_its_checks_is_refused_by_name(
    ingested: Collection, corpus_dir: Path, update: dict[str, object]
) -> None:
    """pydantic's ``model_copy(update=...)`` skips the model's checks; verifying such a
    citation raises ``InvalidQueryError``, not pydantic's error or a ``TypeError``."""
    top = (await ingested.search("offshore wind")).results[0]
    forged = top.citation.model_copy(update=update)
    with pytest.raises(InvalidQueryError, match="the citation is not a valid one"):
        await ingested.verify(forged, content=top.content)
    with pytest.raises(InvalidQueryError, match="the citation is not a valid one"):
        await check_citation(forged, top.content, corpus_dir)
    assert (await ingested.verify(top.citation, content=top.content)).ok


@pytest.mark.parametrize("value", ["5", 5.0, True])
def test_citation_offsets_are_whole_numbers_not_converted(value: object) -> None:
    given = {
        "document_id": "d",
        "chunk_id": "c",
        "source": "a.md",
        "source_class": "text",
        "extractor": None,
        "start_offset": 0,
        "end_offset": 9,
    }
    for field in ("start_offset", "end_offset", "page", "version", "end_page"):
        extra = {"page": 1} if field == "end_page" else {}
        with pytest.raises(ValueError, match=field):
            Citation(**{**given, **extra, field: value})  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("update", "field"),
    [
        ({"top_k": -5}, "top_k"),
        ({"top_k": "3"}, "top_k"),
        ({"query": ""}, "query"),
        ({"mmr": 5.0}, "mmr"),
        ({"as_of": "yesterday"}, "as_of"),
        ({"bogus": 1}, "bogus"),
    ],
)
async def test_a_search_request_copied_with_bad_values_is_refused(
    ingested: Collection, update: dict[str, object], field: str
) -> None:
    """pydantic's ``model_copy(update=...)`` is checked like ``replace``: a ``top_k`` of -5
    searched and answered nothing, ``"3"`` raised a ``TypeError`` deep in the search."""
    request = SearchRequest(query="offshore wind", top_k=2)
    with pytest.raises(InvalidQueryError, match=field):
        request.model_copy(update=update)
    copied = request.model_copy(update={"top_k": 1})
    assert copied == request.replace(top_k=1)
    assert len((await ingested.search(copied)).results) == 1
    assert request.model_copy() == request


def test_blocking_search_collections_names_what_is_not_a_list_of_collections(
    index_dir: Path, corpus_dir: Path
) -> None:
    with gks.Collection.open(index_dir, base_dir=corpus_dir) as col:
        col.ingest(corpus_dir)
        for wrong in (None, col, "default", {"default": col}):
            with pytest.raises(InvalidQueryError, match="takes a list of collections"):
                gks.search_collections(wrong, "wind")  # type: ignore[arg-type]
        for member in ("default", col.aio):
            with pytest.raises(InvalidQueryError, match=r"collections\[1\] is a"):
                gks.search_collections([col, member], "wind")  # type: ignore[list-item]
        assert gks.search_collections([col], "wind").results


@pytest.mark.parametrize(
    ("given", "message"),
    [
        ({"index_dir": 5}, "index_dir must be a directory path"),
        ({"base_dir": b"corpus"}, "base_dir must be a directory path"),
        ({"embedder": "all-MiniLM-L6-v2"}, r"embedder must be an object with embed_documents"),
        ({"reranker": 5}, r"reranker must be an object with rerank\(\)"),
        ({"rewriter": {"heart attack": "MI"}}, r"rewriter must be an object with rewrite\(\)"),
        ({"embedder_for": "manifest"}, "embedder_for must be a function"),
    ],
)
async def test_open_refuses_an_argument_of_the_wrong_kind_before_creating_anything(
    tmp_path: Path, given: dict[str, object], message: str
) -> None:
    where = tmp_path / "index"
    arguments: dict[str, object] = {"index_dir": where, **given}
    with pytest.raises(InvalidSettingError, match=message):
        await Collection.open(**arguments)  # type: ignore[arg-type]
    assert not where.exists()


async def test_ingest_refuses_a_progress_that_is_not_a_function(
    collection: Collection, corpus_dir: Path
) -> None:
    with pytest.raises(InvalidInputError, match="progress must be a function"):
        await collection.ingest(corpus_dir, progress=5)  # type: ignore[arg-type]
    assert (await collection.search("wind")).results == []


@pytest.mark.parametrize("value", ["no", "false", 0, 1, None])
async def test_a_destructive_switch_takes_only_true_or_false(
    ingested: Collection, corpus_dir: Path, tmp_path: Path, value: object
) -> None:
    """``erase="no"`` erased and ``rebuild_damaged="no"`` would move a damaged file aside:
    a switch that deletes, rebuilds or creates is refused unless it is a bool."""
    before = [r.chunk_id for r in await ingested.search("offshore wind")]
    with pytest.raises(InvalidSettingError, match="erase must be True or False"):
        await ingested.delete(sources=["energy/wind.txt"], erase=value)  # type: ignore[arg-type]
    with pytest.raises(InvalidSettingError, match="force must be True or False"):
        await ingested.rebase(corpus_dir, force=value)  # type: ignore[arg-type]
    assert [r.chunk_id for r in await ingested.search("offshore wind")] == before != []
    for switch in ("create", "rebuild_damaged"):
        with pytest.raises(InvalidSettingError, match=f"{switch} must be True or False"):
            await Collection.open(tmp_path / "other", **{switch: value})  # type: ignore[arg-type]
    assert not (tmp_path / "other").exists()


async def test_verify_each_and_resolve_citation_name_an_argument_of_the_wrong_kind(
    ingested: Collection, corpus_dir: Path
) -> None:
    top = (await ingested.search("offshore wind")).results[0]
    for wrong in (None, 5, "results", {"a": top}):
        with pytest.raises(InvalidQueryError, match="verify_each takes a SearchResponse"):
            await ingested.verify_each(wrong)  # type: ignore[arg-type]
    for citation in (None, top, top.citation.to_dict()):
        with pytest.raises(InvalidQueryError, match="resolve_citation takes a Citation"):
            await resolve_citation(citation, corpus_dir)  # type: ignore[arg-type]
    swapped = top.citation.model_copy(update={"start_offset": 9, "end_offset": 2})
    with pytest.raises(InvalidQueryError, match="not a valid one"):
        await resolve_citation(swapped, corpus_dir)
    assert await resolve_citation(top.citation, corpus_dir) == top.content
