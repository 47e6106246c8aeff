"""Malformed provider responses: every one is a RetrievalError or a list of verdicts.

A response arrives from a network peer, so any JSON can come back: wrong types,
missing keys, deep nesting, huge lists, indices that are negative, fractional or
longer than any integer can be printed. The mappers read it without recursion
and name the field that is wrong.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from groundkit import RetrievalError, RetrievalResult
from groundkit.contracts import ProviderCitation
from groundkit.verification.providers import (
    chunk_uri,
    from_anthropic_citations,
    from_openai_annotations,
)
from tests.answer_support import tea_and_sky, tea_and_sky_collection


@pytest.fixture(scope="module")
def sent(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[list[RetrievalResult], Path]]:
    """The tea and sky results of a real collection, and the folder they were read from."""
    root = tmp_path_factory.mktemp("providers")

    async def search() -> tuple[list[RetrievalResult], Path]:
        async with tea_and_sky_collection(root) as col:
            return list((await tea_and_sky(col)).results), col.base_dir

    yield asyncio.run(search())


def anthropic(message: Any, sent: tuple[list[RetrievalResult], Path]) -> list[ProviderCitation]:
    return asyncio.run(from_anthropic_citations(message, sent[0], sent[1]))


def openai(response: Any, sent: tuple[list[RetrievalResult], Path]) -> list[ProviderCitation]:
    return asyncio.run(from_openai_annotations(response, sent[0], sent[1]))


def deep(levels: int) -> Any:
    value: Any = "x"
    for _ in range(levels):
        value = [value]
    return value


# Scalars of every JSON type, and two values no message should hold but a peer can
# send: an integer too long to print and a list nested past the recursion limit.
leaves = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats()
    | st.text(max_size=20)
    | st.sampled_from(
        ["text", "search_result_location", "char_location", "file_citation", "url_citation"]
    )
    | st.builds(lambda: 10**5000)
    | st.builds(lambda: deep(5000))
)
# Keys the mappers read, so generated objects often have the right names with wrong values.
_KEYS = [
    "type",
    "text",
    "citations",
    "cited_text",
    "search_result_index",
    "document_index",
    "source",
    "start_block_index",
    "end_block_index",
    "start_char_index",
    "end_char_index",
    "annotations",
    "file_id",
    "filename",
    "url",
    "start_index",
    "end_index",
    "output",
    "content",
]
shaped = leaves | st.recursive(
    leaves,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.sampled_from(_KEYS), inner, max_size=6)
    ),
    max_leaves=30,
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(shaped)
def test_any_anthropic_shape_is_a_verdict_list_or_a_retrieval_error(
    sent: tuple[list[RetrievalResult], Path], body: Any
) -> None:
    for message in (body, {"content": body}, {"content": [{"type": "text", "citations": body}]}):
        try:
            found = anthropic(message, sent)
        except RetrievalError:
            continue
        assert all(isinstance(f, ProviderCitation) for f in found)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(shaped)
def test_any_openai_shape_is_a_verdict_list_or_a_retrieval_error(
    sent: tuple[list[RetrievalResult], Path], body: Any
) -> None:
    part = {"type": "output_text", "text": "Tea.", "annotations": body}
    for response in (body, {"output": body}, {"output": [{"content": [part]}]}):
        try:
            found = openai(response, sent)
        except RetrievalError:
            continue
        assert all(isinstance(f, ProviderCitation) for f in found)


def cite(**fields: Any) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": "Tea.", "citations": [fields]}]}


@pytest.mark.parametrize(
    ("message", "field"),
    [
        ({"content": ["not a block"]}, r"content\[0\] should be an object"),
        ({"content": [{"type": "text", "text": 3}]}, r"content\[0\]\.text should be a string"),
        ({"content": [{"type": "text", "text": deep(100_000)}]}, r"\.text should be a string"),
        ({"content": [{"type": "text", "citations": 5}]}, r"citations should be a list"),
        ({"content": [{"type": "text", "citations": [7]}]}, r"citations\[0\] should be an object"),
        (cite(type=deep(100_000)), r"citations\[0\]\.type should be a string, not a list"),
        (cite(type="char_location", cited_text=["x"]), r"cited_text should be a string"),
        (cite(type="search_result_location", search_result_index=0, source={"a": 1}), "source"),
    ],
)
def test_wrong_types_name_the_field(
    sent: tuple[list[RetrievalResult], Path], message: Any, field: str
) -> None:
    with pytest.raises(RetrievalError, match=field):
        anthropic(message, sent)


@pytest.mark.parametrize(
    "index",
    [
        -1,
        2,
        pytest.param(10**5000, id="huge"),
        math.nan,
        math.inf,
        0.5,
        True,
        "0",
        None,
        [0],
        {"i": 0},
    ],
)
def test_an_index_that_names_no_result_is_unmapped(
    sent: tuple[list[RetrievalResult], Path], index: Any
) -> None:
    for kind, key in (
        ("search_result_location", "search_result_index"),
        ("char_location", "document_index"),
    ):
        (found,) = anthropic(cite(type=kind, cited_text="Tea", **{key: index}), sent)
        assert found.verdict == "unmapped" and "names no result" in found.detail
        assert len(found.detail) < 200


@pytest.mark.parametrize(
    ("start", "end"),
    [
        (-5, 3),
        (3, 1),
        (0, 10**9),
        (math.nan, 2),
        pytest.param(10**5000, 0, id="huge"),
        (None, None),
    ],
)
def test_bad_offsets_are_ignored_and_the_quote_is_still_checked(
    sent: tuple[list[RetrievalResult], Path], start: Any, end: Any
) -> None:
    tea = sent[0][0]
    for fields in (
        {
            "type": "char_location",
            "document_index": 0,
            "start_char_index": start,
            "end_char_index": end,
        },
        {
            "type": "search_result_location",
            "search_result_index": 0,
            "source": chunk_uri(tea),
            "start_block_index": start,
            "end_block_index": end,
        },
    ):
        (found,) = anthropic(cite(cited_text="Green tea lowers blood pressure", **fields), sent)
        assert found.verdict == "verified" and found.citation == tea.citation


def test_deep_nesting_and_huge_lists_in_an_openai_response(
    sent: tuple[list[RetrievalResult], Path],
) -> None:
    # Nesting below the documented levels is not walked: nothing there is a citation.
    nested: Any = {"type": "output_text", "text": "x", "annotations": []}
    for _ in range(50_000):
        nested = {"type": "message", "content": [nested]}
    assert openai({"output": [nested]}, sent) == []
    with pytest.raises(RetrievalError, match=r"annotations\[0\]\.type should be a string"):
        openai(
            {
                "output": [
                    {
                        "content": [
                            {
                                "type": "output_text",
                                "text": "x",
                                "annotations": [{"type": deep(99)}],
                            }
                        ]
                    }
                ]
            },
            sent,
        )
    notes = [{"type": "file_citation", "filename": "tea.txt"}] * 50_000
    part = {"type": "output_text", "text": "Tea.", "annotations": notes}
    found = openai({"output": [{"type": "message", "content": [part]}]}, sent)
    assert len(found) == 50_000 and {f.verdict for f in found} == {"verified"}


def test_a_huge_anthropic_response_reads_each_source_once(
    sent: tuple[list[RetrievalResult], Path],
) -> None:
    tea, sky = sent[0]
    citations = [
        {
            "type": "search_result_location",
            "cited_text": "Green tea lowers blood pressure" if i % 2 else "The sky is blue",
            "search_result_index": 0 if i % 2 else 1,
            "source": chunk_uri(tea) if i % 2 else chunk_uri(sky),
            "start_block_index": 0,
            "end_block_index": 1,
        }
        for i in range(50_000)
    ]
    found = anthropic(
        {"content": [{"type": "text", "text": "Both.", "citations": citations}]}, sent
    )
    assert len(found) == 50_000 and {f.verdict for f in found} == {"verified"}


def test_bad_arguments_are_retrieval_errors(sent: tuple[list[RetrievalResult], Path]) -> None:
    with pytest.raises(RetrievalError, match="SearchResponse or a list"):
        asyncio.run(from_anthropic_citations({"content": []}, 5, sent[1]))  # type: ignore[arg-type]
    with pytest.raises(RetrievalError, match="allowed_base_dir must be a path"):
        asyncio.run(from_anthropic_citations({"content": []}, sent[0], 5))  # type: ignore[arg-type]
    with pytest.raises(RetrievalError, match="file_ids must map"):
        asyncio.run(from_openai_annotations({}, sent[0], sent[1], file_ids=["a"]))  # type: ignore[arg-type]

    # Not a response at all: an error, not "it cites nothing".
    for wrong in (None, "The answer text.", 5, b"{}"):
        with pytest.raises(RetrievalError, match="not a Responses API response"):
            openai(wrong, sent)
        with pytest.raises(RetrievalError, match="not a Messages API response"):
            anthropic(wrong, sent)
    assert openai({}, sent) == openai([], sent) == []
    # An object of another API: none of its annotations would be read.
    chat = {"choices": [{"message": {"content": "x", "annotations": [{"type": "url_citation"}]}}]}
    with pytest.raises(RetrievalError, match="a Chat Completions response"):
        openai(chat, sent)
    with pytest.raises(RetrievalError, match="has no 'output' or 'content'"):
        openai({"result": "oops"}, sent)

    class Broken:
        def model_dump(self, mode: str) -> Any:
            raise ValueError("no")

    with pytest.raises(RetrievalError, match="could not read the Broken"):
        anthropic(Broken(), sent)
