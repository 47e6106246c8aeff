"""A careless or hostile caller of the public API: each wrong argument gets a groundkit
error that says what to pass, never an internal exception or a misleading one."""

from __future__ import annotations

import pytest

from groundkit import Collection, InvalidQueryError


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
