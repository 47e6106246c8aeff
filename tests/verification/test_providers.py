"""Provider citation formats: results sent as the SDKs' blocks, citations mapped back and checked.

Responses are built with the official SDKs' own types, to their documented
schemas; nothing reaches the network.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from anthropic.types import (
    CitationCharLocation,
    CitationsSearchResultLocation,
    Message,
    TextBlock,
    Usage,
)
from openai.types.responses import ResponseOutputMessage, ResponseOutputText
from openai.types.responses.response_output_text import (
    AnnotationFileCitation,
    AnnotationURLCitation,
)

from groundkit import Collection
from groundkit.verification.providers import (
    chunk_uri,
    citations_of,
    from_anthropic_citations,
    from_openai_annotations,
    to_anthropic_documents,
    to_anthropic_search_results,
)
from tests.answer_support import TEA, tea_and_sky, tea_and_sky_collection


@pytest.fixture
async def col(tmp_path: Path) -> AsyncIterator[Collection]:
    async with tea_and_sky_collection(tmp_path) as opened:
        yield opened


def message(*blocks: TextBlock) -> Message:
    return Message(
        id="msg_1",
        type="message",
        role="assistant",
        model="claude-test",
        content=list(blocks),
        stop_reason="end_turn",
        stop_sequence=None,
        usage=Usage(input_tokens=10, output_tokens=10),
    )


async def test_search_result_blocks_round_trip(col: Collection) -> None:
    response = await tea_and_sky(col)
    blocks = to_anthropic_search_results(response)
    tea = response.results[0]
    assert blocks[0]["type"] == "search_result"
    assert blocks[0]["source"] == chunk_uri(tea) == f"groundkit://default/chunks/{tea.chunk_id}"
    assert blocks[0]["title"] == f"tea.txt [{tea.start_offset}:{tea.end_offset}]"
    assert "".join(b["text"] for b in blocks[0]["content"]) == tea.content
    assert blocks[0]["citations"] == {"enabled": True}
    # The block the model cites: the second sentence of the first result.
    cited = blocks[0]["content"][1]["text"].strip()
    reply = message(
        TextBlock(
            type="text",
            text="Green tea lowers blood pressure.",
            citations=[
                CitationsSearchResultLocation(
                    type="search_result_location",
                    cited_text=cited,
                    search_result_index=0,
                    source=blocks[0]["source"],
                    title=blocks[0]["title"],
                    start_block_index=1,
                    end_block_index=2,
                )
            ],
        ),
        TextBlock(
            type="text",
            text="The sky is green.",
            citations=[
                CitationsSearchResultLocation(
                    type="search_result_location",
                    cited_text="The sky is green",
                    search_result_index=1,
                    source=blocks[1]["source"],
                    title=blocks[1]["title"],
                    start_block_index=0,
                    end_block_index=1,
                ),
                CitationsSearchResultLocation(
                    type="search_result_location",
                    cited_text="anything",
                    search_result_index=7,
                    source="groundkit://default/chunks/nope",
                    title="",
                    start_block_index=0,
                    end_block_index=1,
                ),
            ],
        ),
    )
    found = await from_anthropic_citations(reply, response, col.base_dir)
    assert [f.verdict for f in found] == ["verified", "not_in_span", "unmapped"]
    first = found[0]
    assert (
        first.citation == tea.citation and first.answer_text == "Green tea lowers blood pressure."
    )
    assert first.start_offset is not None and first.end_offset is not None
    assert TEA[first.start_offset : first.end_offset] == cited
    assert citations_of(found) == [tea.citation]
    # The JSON of the message reads the same as the SDK object.
    again = await from_anthropic_citations(reply.model_dump(mode="json"), response, col.base_dir)
    assert again == found


async def test_a_search_result_whose_source_changed_is_drifted(col: Collection) -> None:
    response = await tea_and_sky(col)
    blocks = to_anthropic_search_results(response)
    (col.base_dir / "tea.txt").write_text("All new text.\n", encoding="utf-8")
    reply = message(
        TextBlock(
            type="text",
            text="Tea is a drink.",
            citations=[
                CitationsSearchResultLocation(
                    type="search_result_location",
                    cited_text="Tea is a drink.",
                    search_result_index=0,
                    source=blocks[0]["source"],
                    title=blocks[0]["title"],
                    start_block_index=0,
                    end_block_index=1,
                )
            ],
        )
    )
    (found,) = await from_anthropic_citations(reply, response, col.base_dir)
    assert found.verdict == "drifted" and not found.ok


async def test_a_source_uri_that_disagrees_with_the_index_is_unmapped(col: Collection) -> None:
    response = await tea_and_sky(col)
    reply = message(
        TextBlock(
            type="text",
            text="x",
            citations=[
                CitationsSearchResultLocation(
                    type="search_result_location",
                    cited_text="Tea is a drink.",
                    search_result_index=0,
                    source=chunk_uri(response.results[1]),
                    title="",
                    start_block_index=0,
                    end_block_index=1,
                )
            ],
        )
    )
    (found,) = await from_anthropic_citations(reply, response, col.base_dir)
    assert found.verdict == "unmapped" and "not" in found.detail


async def test_char_location_citations_on_document_blocks(col: Collection) -> None:
    response = await tea_and_sky(col)
    documents = to_anthropic_documents(response)
    sky = response.results[1]
    assert documents[1]["source"] == {
        "type": "text",
        "media_type": "text/plain",
        "data": sky.content,
    }
    start = sky.content.index("air scatters")
    reply = message(
        TextBlock(
            type="text",
            text="Air scatters light.",
            citations=[
                CitationCharLocation(
                    type="char_location",
                    cited_text="air scatters short wavelengths",
                    document_index=1,
                    document_title=documents[1]["title"],
                    start_char_index=start,
                    end_char_index=start + 30,
                    file_id=None,
                )
            ],
        )
    )
    (found,) = await from_anthropic_citations(reply, list(response.results), col.base_dir)
    assert found.verdict == "verified" and found.result_index == 1
    assert found.start_offset == sky.start_offset + start


async def test_openai_file_and_url_citations(col: Collection) -> None:
    response = await tea_and_sky(col)
    tea, sky = response.results
    text = "Green tea lowers blood pressure, and the sky is blue."
    output = ResponseOutputMessage(
        id="msg_1",
        type="message",
        role="assistant",
        status="completed",
        content=[
            ResponseOutputText(
                type="output_text",
                text=text,
                annotations=[
                    AnnotationFileCitation(
                        type="file_citation", file_id="file-tea", filename="x.txt", index=30
                    ),
                    AnnotationFileCitation(
                        type="file_citation", file_id="file-9", filename="sky.txt", index=52
                    ),
                    AnnotationFileCitation(
                        type="file_citation", file_id="file-0", filename="moon.txt", index=52
                    ),
                    AnnotationURLCitation(
                        type="url_citation",
                        url="https://example.com/none",
                        title="t",
                        start_index=0,
                        end_index=5,
                    ),
                ],
            )
        ],
    )
    found = await from_openai_annotations(
        output, response, col.base_dir, file_ids={"file-tea": tea.chunk_id}
    )
    assert [f.verdict for f in found] == ["verified", "verified", "unmapped", "unmapped"]
    assert [f.citation for f in found[:2]] == [tea.citation, sky.citation]
    (col.base_dir / "sky.txt").unlink()
    again = await from_openai_annotations(
        [output], response, col.base_dir, file_ids={"file-tea": tea.chunk_id}
    )
    assert again[1].verdict == "unresolvable"
    # A line put in front of tea.txt: the span's text moved, and the citation says where.
    head = "A line put in front.\n"
    (col.base_dir / "tea.txt").write_text(head + TEA, encoding="utf-8")
    moved = await from_openai_annotations(
        output, response, col.base_dir, file_ids={"file-tea": tea.chunk_id}
    )
    span = await col.verify(tea)
    assert moved[0].verdict == span.verification == "moved" and not moved[0].ok
    assert (moved[0].start_offset, moved[0].end_offset) == (
        span.current_start_offset,
        span.current_end_offset,
    )


async def test_bad_inputs(col: Collection) -> None:
    response = await tea_and_sky(col)
    from groundkit import RetrievalError

    with pytest.raises(RetrievalError, match="no content list"):
        await from_anthropic_citations({"id": "x"}, response, col.base_dir)
    with pytest.raises(RetrievalError, match="RetrievalResult objects"):
        to_anthropic_search_results(["x"])  # type: ignore[list-item]


def test_the_old_module_path_still_works_and_warns() -> None:
    import importlib
    import sys

    sys.modules.pop("groundkit.integrations.providers", None)
    with pytest.warns(DeprecationWarning, match=r"functions from groundkit\.verification;"):
        old = importlib.import_module("groundkit.integrations.providers")
    assert old.from_anthropic_citations is from_anthropic_citations


async def test_a_wrong_argument_to_the_block_makers_is_a_retrieval_error(col: Collection) -> None:
    """``citations="yes"`` went out as ``"enabled": "yes"`` (refused by the API only once
    sent) and ``chunk_uri(None)`` raised ``AttributeError``."""
    from groundkit import RetrievalError

    results = (await tea_and_sky(col)).results
    for make in (to_anthropic_search_results, to_anthropic_documents):
        with pytest.raises(RetrievalError, match="citations must be True or False, not str"):
            make(results, citations="yes")  # type: ignore[arg-type]
        assert make(results, citations=False)[0]["citations"] == {"enabled": False}
    with pytest.raises(RetrievalError, match="takes a RetrievalResult, not NoneType"):
        chunk_uri(None)  # type: ignore[arg-type]
