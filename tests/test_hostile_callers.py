"""A careless or hostile caller of the public API: each wrong argument gets a groundkit
error that says what to pass, never an internal exception or a misleading one."""

from __future__ import annotations

from pathlib import Path

import pytest

from groundkit import Citation, Collection, InvalidQueryError, check_citation


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
    assert "cannot name a snapshot" in checked.detail


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
