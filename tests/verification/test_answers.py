"""verify_answer: one verdict per sentence, checked against the cited spans as they read now."""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from groundkit import (
    AnswerReport,
    Collection,
    RetrievalError,
    SentenceTransformerEmbedder,
    search_collections,
    verify_answer,
)
from tests.answer_support import TEA, tea_and_sky, tea_and_sky_collection
from tests.support import write_tree


@pytest.fixture
async def col(tmp_path: Path) -> AsyncIterator[Collection]:
    async with tea_and_sky_collection(tmp_path) as opened:
        yield opened


def verdicts(report: AnswerReport) -> list[str]:
    return [s.verdict for s in report.sentences]


async def test_every_verdict_in_one_answer(col: Collection) -> None:
    response = await tea_and_sky(col)
    answer = (
        "Here is what I found: "
        'A trial found that "Green tea lowers blood pressure in adults" [1]. '
        "Green tea lowers blood pressure in adults [1]. "
        "The sky is blue since air scatters sunlight [2]. "
        'It was "proven beyond any doubt" [1]. '
        "Coffee cures every known cancer within days [2]. "
        "Tea is the most popular drink in the whole world. "
        "Mars is red [7]. "
        "Is that all?"
    )
    report = await col.verify_answer(answer, response)
    assert verdicts(report) == [
        "no_claim",
        "quoted",
        "supported",
        "supported",
        "misquoted",
        "unsupported",
        "uncited",
        "dangling",
        "no_claim",
    ]
    assert report.method == "terms"
    assert not report.ok
    assert report.counts == {
        "dangling": 1,
        "misquoted": 1,
        "no_claim": 2,
        "quoted": 1,
        "supported": 2,
        "uncited": 1,
        "unsupported": 1,
    }
    assert len(report.problems) == 4
    assert report.problems[0].startswith("sentence 5 (misquoted): ")
    quoted = report.sentences[1]
    check = quoted.quotes[0]
    assert check.ok and check.start_offset is not None and check.end_offset is not None
    assert TEA[check.start_offset : check.end_offset] == "Green tea lowers blood pressure in adults"
    supported = report.sentences[2]
    assert supported.evidence is not None
    ev = supported.evidence
    assert TEA[ev.start_offset : ev.end_offset] == ev.text
    assert ev.text.startswith("Green tea lowers blood pressure")
    assert supported.cited[0].source == "tea.txt"
    # Sentence offsets are into the answer, markers included.
    for s in report.sentences:
        assert answer[s.start_offset : s.end_offset] == s.text
    # The report survives JSON.
    assert AnswerReport.model_validate_json(report.model_dump_json()) == report
    json.loads(report.model_dump_json())


async def test_markers_after_the_full_stop_belong_to_the_sentence_before(col: Collection) -> None:
    response = await tea_and_sky(col)
    answer = (
        "Green tea lowers blood pressure in adults.[1] "
        "The sky is blue because air scatters sunlight. [2]"
    )
    report = await col.verify_answer(answer, response)
    assert verdicts(report) == ["supported", "supported"]
    assert [s.markers for s in report.sentences] == [["1"], ["2"]]
    assert report.ok


async def test_adjacent_and_listed_markers_cite_every_result(col: Collection) -> None:
    response = await tea_and_sky(col)
    for answer in (
        "Green tea lowers blood pressure and the sky is blue [1][2].",
        "Green tea lowers blood pressure and the sky is blue [1, 2].",
        "Green tea lowers blood pressure and the sky is blue [1-2].",
    ):
        report = await col.verify_answer(answer, response)
        assert [c.source for c in report.sentences[0].cited] == ["tea.txt", "sky.txt"]


async def test_a_marker_inside_a_quote_still_cites_and_the_quote_is_checked_without_it(
    col: Collection,
) -> None:
    response = await tea_and_sky(col)
    answer = 'The paper says "Green tea lowers blood pressure [1] in adults".'
    report = await col.verify_answer(answer, response)
    assert verdicts(report) == ["quoted"]
    assert report.sentences[0].quotes[0].quote == "Green tea lowers blood pressure [1] in adults"


@pytest.mark.parametrize(
    "answer",
    [
        'It notes that "Tea is a drink [1]." Then more.',
        'It notes that "a trial of 400 people found [1]." Then more.',
        'It says "Green tea lowers blood pressure in adults [1], a trial" did it.',
    ],
)
async def test_a_marker_before_punctuation_in_a_quote_takes_its_space_with_it(
    col: Collection, answer: str
) -> None:
    """Cut out, "drink [1]." read "drink ." where the source says "drink.": misquoted."""
    response = await tea_and_sky(col)
    report = await col.verify_answer(answer, response)
    assert report.sentences[0].verdict == "quoted", report.sentences[0].detail


async def test_a_quote_spanning_two_sentences_is_one_sentence(col: Collection) -> None:
    response = await tea_and_sky(col)
    answer = 'It says "Tea is a drink. Green tea lowers blood pressure" [1].'
    report = await col.verify_answer(answer, response)
    assert verdicts(report) == ["quoted"]


@pytest.mark.parametrize("number", ["5", "12345", "99999999999999999999999", "9" * 5000])
async def test_a_marker_past_the_results_is_dangling_however_large(
    col: Collection, number: str
) -> None:
    response = await tea_and_sky(col)
    report = await col.verify_answer(
        f"Green tea lowers blood pressure in adults [{number}].", response
    )
    assert verdicts(report) == ["dangling"]
    assert f"marker {number!r} names no result" in report.sentences[0].detail


async def test_footnote_labels_and_caller_patterns_map_to_chunk_ids(col: Collection) -> None:
    response = await tea_and_sky(col)
    tea, sky = response.results
    answer = "Green tea lowers blood pressure in adults[^t]. The sky is blue[^s]."
    report = await col.verify_answer(
        answer, response, markers={"t": tea.chunk_id, "s": sky.chunk_id}
    )
    assert [c[0].source for c in (s.cited for s in report.sentences)] == ["tea.txt", "sky.txt"]
    unmapped = await col.verify_answer(answer, response)
    assert verdicts(unmapped) == ["dangling", "dangling"]
    custom = await col.verify_answer(
        "Green tea lowers blood pressure in adults (doc: t).",
        response,
        markers={"t": tea.chunk_id},
        marker_pattern=r"\(doc: (\w+)\)",
    )
    assert verdicts(custom) == ["supported"]


async def test_edited_and_deleted_sources(col: Collection) -> None:
    response = await tea_and_sky(col)
    answer = (
        "Green tea lowers blood pressure in adults [1]. The sky is blue because of scattering [2]."
    )
    (col.base_dir / "tea.txt").write_text("Tea was rewritten entirely.\n", encoding="utf-8")
    (col.base_dir / "sky.txt").unlink()
    report = await col.verify_answer(answer, response)
    assert verdicts(report) == ["drifted", "unresolvable"]
    assert (
        "re-ingest" in report.sentences[0].detail or "characters long" in report.sentences[0].detail
    )


async def test_a_cited_span_that_moved_keeps_its_sentences_and_says_where_it_is(
    col: Collection,
) -> None:
    response = await tea_and_sky(col)
    tea, sky = response.results
    head = "A heading put in front.\n\n"
    (col.base_dir / "tea.txt").write_text(head + TEA, encoding="utf-8")
    answer = (
        'A trial found that "Green tea lowers blood pressure in adults" [1]. '
        "Green tea lowers blood pressure in adults [1]. The sky is blue [2]."
    )
    report = await col.verify_answer(answer, response)
    assert verdicts(report) == ["quoted", "supported", "supported"]
    assert report.sentences[0].quotes[0].verdict == "moved"
    # One verdict per cited result, the one Collection.verify gives.
    assert [c.verification for c in report.citations] == ["moved", "verified"]
    assert report.citations[0] == await col.verify(tea)
    moved = report.citations[0]
    assert moved.current_start_offset == tea.start_offset + len(head)
    assert report.citations[1].citation == sky.citation
    alone = await verify_answer(answer, response, col.base_dir)
    assert alone.citations == report.citations and verdicts(alone) == verdicts(report)


async def test_a_sentence_citing_a_drifted_and_an_intact_result_is_judged_on_the_intact_one(
    col: Collection,
) -> None:
    response = await tea_and_sky(col)
    (col.base_dir / "sky.txt").write_text("Changed.\n", encoding="utf-8")
    report = await col.verify_answer("Green tea lowers blood pressure in adults [1, 2].", response)
    assert verdicts(report) == ["supported"]


async def test_an_answer_with_no_markers(col: Collection) -> None:
    response = await tea_and_sky(col)
    report = await col.verify_answer("Green tea lowers blood pressure in adults.", response)
    assert verdicts(report) == ["uncited"]
    empty = await col.verify_answer("", response)
    assert empty.sentences == [] and empty.ok


async def test_the_standalone_function_and_a_list_of_results(col: Collection) -> None:
    response = await tea_and_sky(col)
    report = await verify_answer(
        "Green tea lowers blood pressure in adults [1].", list(response.results), col.base_dir
    )
    assert verdicts(report) == ["supported"]


async def test_thresholds_decide_supported_weak_unsupported(col: Collection) -> None:
    response = await tea_and_sky(col)
    answer = "Green tea is served cold in summer [1]."
    loose = await col.verify_answer(answer, response, supported_threshold=0.3, weak_threshold=0.1)
    strict = await col.verify_answer(answer, response, supported_threshold=0.9, weak_threshold=0.3)
    none = await col.verify_answer(answer, response, supported_threshold=0.95, weak_threshold=0.9)
    assert verdicts(loose) == ["supported"]
    assert verdicts(strict) == ["weak"]
    assert verdicts(none) == ["unsupported"]
    sim = loose.sentences[0].similarity
    assert sim is not None and 0.3 <= sim < 0.9


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"supported_threshold": 2.0}, "supported_threshold must be a number"),
        ({"weak_threshold": "x"}, "weak_threshold must be a number"),
        ({"supported_threshold": 0.2, "weak_threshold": 0.5}, "must not be above"),
    ],
)
async def test_bad_thresholds(col: Collection, kwargs: dict[str, object], message: str) -> None:
    response = await tea_and_sky(col)
    with pytest.raises(RetrievalError, match=message):
        await col.verify_answer("x [1].", response, **kwargs)  # type: ignore[arg-type]


async def test_bad_inputs_are_retrieval_errors(col: Collection) -> None:
    response = await tea_and_sky(col)
    with pytest.raises(RetrievalError, match="must be a str"):
        await col.verify_answer(3, response)  # type: ignore[arg-type]
    with pytest.raises(RetrievalError, match="lone surrogate"):
        await col.verify_answer("bad \ud800 [1].", response)
    with pytest.raises(RetrievalError, match="SearchResponse"):
        await verify_answer("x", "not results", col.base_dir)  # type: ignore[arg-type]
    with pytest.raises(RetrievalError, match="RetrievalResult objects"):
        await verify_answer("x", [1, 2], col.base_dir)  # type: ignore[list-item]
    with pytest.raises(RetrievalError, match="map labels"):
        await col.verify_answer("x", response, markers=["a"])  # type: ignore[arg-type]


async def test_results_of_another_collection_are_refused(col: Collection, tmp_path: Path) -> None:
    base = tmp_path / "other"
    write_tree(base, {"x.txt": "Green tea again.\n"})
    async with Collection.open(tmp_path / "index", "other", base_dir=base) as other:
        await other.ingest(base)
        response = await other.search("green tea")
    with pytest.raises(RetrievalError, match="from collection 'other'"):
        await col.verify_answer("Green tea again [1].", response)


async def test_a_multi_collection_response_is_refused_unless_all_of_it_is_this_collections(
    col: Collection, tmp_path: Path
) -> None:
    """Its results went unchecked: another collection's were judged against this one's
    files (``drifted``, or ``verified`` where the same path happened to hold the text)."""
    base = tmp_path / "other"
    write_tree(base, {"tea.txt": TEA.replace("lowers", "raises")})
    async with Collection.open(tmp_path / "index", "other", base_dir=base) as other:
        await other.ingest(base)
        both = await search_collections([col, other], "green tea blood pressure")
        assert {r.collection for r in both.results} == {col.name, "other"}
        with pytest.raises(RetrievalError, match="from collection 'other'"):
            await col.verify_answer("Green tea lowers blood pressure in adults [1].", both)
        alone = await search_collections([col], "green tea blood pressure")
        report = await col.verify_answer("Green tea lowers blood pressure in adults [1].", alone)
        assert [c.verification for c in report.citations] == ["verified"]


@pytest.fixture(scope="module")
def minilm() -> SentenceTransformerEmbedder:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    return SentenceTransformerEmbedder("all-MiniLM-L6-v2")


async def test_with_the_real_embedder_a_paraphrase_is_supported_and_an_unrelated_claim_is_not(
    tmp_path: Path, minilm: SentenceTransformerEmbedder
) -> None:
    async with tea_and_sky_collection(tmp_path, embedder=minilm) as c:
        response = await c.search("green tea blood pressure", mode="hybrid")
        answer = (
            "Drinking green tea reduced adults' blood pressure in a trial [1]. "
            "Volcanoes erupt when magma pressure builds up underground [1]."
        )
        report = await c.verify_answer(answer, response)
    assert report.method == "embedding"
    assert verdicts(report) == ["supported", "unsupported"]
    first = report.sentences[0]
    assert first.evidence is not None and first.evidence.method == "embedding"
    assert first.evidence.text.startswith("Green tea lowers blood pressure")
