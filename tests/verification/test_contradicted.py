"""verify_answer reads claims for contradiction, and evidence is body text, never a heading."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import pytest

import groundkit.sync as gks
from groundkit import ANSWER_PROBLEMS, Collection, RetrievalError, RetrievalResult, verify_answer
from groundkit.retrieval.evidence import body_spans
from groundkit.verification import ClaimJudgement, ClaimPair, sentence_spans
from tests.support import write_tree

TEA = (
    "# Brewing green tea\n\n"
    "Green tea is brewed at about 80 degrees for three minutes. "
    "Black tea wants boiling water. "
    "Tea does not contain much caffeine.\n"
)
PRESSURE = (
    "---\ntitle: Green tea lowers blood pressure in adults\n---\n"
    "# Green tea lowers blood pressure in adults\n\n"
    "A trial of 400 people found lower readings after daily cups of green tea.\n"
)


@pytest.fixture
async def col(tmp_path: Path) -> AsyncIterator[Collection]:
    base = tmp_path / "corpus"
    write_tree(base, {"tea.md": TEA, "pressure.md": PRESSURE})
    async with Collection.open(tmp_path / "index", base_dir=base) as opened:
        await opened.ingest(base)
        yield opened


async def _tea(col: Collection) -> list[RetrievalResult]:
    response = await col.search("green tea brewed degrees", 1)
    assert response.results[0].source == "tea.md"
    return list(response.results)


async def test_the_tea_example_reads_contradicted_with_its_reason(col: Collection) -> None:
    results = await _tea(col)
    report = await col.verify_answer("The tea is steeped at 100 degrees [1].", results)
    (sentence,) = report.sentences
    assert sentence.verdict == "contradicted"
    assert sentence.detail.startswith("claim 100 degrees, source about 80 degrees")
    assert sentence.evidence is not None
    assert sentence.evidence.text.startswith("Green tea is brewed at about 80 degrees")
    assert "contradicted" in ANSWER_PROBLEMS and not report.ok
    assert report.counts == {"contradicted": 1}
    assert report.claim_judge == "rules"
    assert report.problems[0].startswith("sentence 1 (contradicted): ")


async def test_a_paraphrase_with_the_same_numbers_stays_supported(col: Collection) -> None:
    results = await _tea(col)
    answer = "Green tea is steeped at 80 degrees for three minutes [1]."
    report = await col.verify_answer(answer, results)
    assert [s.verdict for s in report.sentences] == ["supported"]
    assert report.ok


@pytest.mark.parametrize(
    ("answer", "reason"),
    [
        ("Tea contains a lot of caffeine [1].", "source negated (not), claim not"),
        ("Green tea is not brewed at 80 degrees [1].", "claim negated (not), source not"),
    ],
)
async def test_negation_reads_contradicted(col: Collection, answer: str, reason: str) -> None:
    report = await col.verify_answer(answer, await _tea(col))
    (sentence,) = report.sentences
    assert sentence.verdict == "contradicted", sentence.detail
    assert sentence.detail.startswith(reason)


async def test_standalone_and_sync_entry_points_agree(col: Collection, tmp_path: Path) -> None:
    results = await _tea(col)
    answer = "The tea is steeped at 100 degrees [1]."
    report = await verify_answer(answer, results, tmp_path / "corpus")
    assert [s.verdict for s in report.sentences] == ["contradicted"]
    chunk_id = results[0].chunk_id
    await col.close()
    with gks.Collection.open(tmp_path / "index", base_dir=tmp_path / "corpus") as sync_col:
        again = sync_col.verify_answer(answer, [chunk_id])
    assert [s.detail for s in again.sentences] == [s.detail for s in report.sentences]
    sync_report = gks.verify_answer(answer, results, tmp_path / "corpus")
    assert [s.verdict for s in sync_report.sentences] == ["contradicted"]


async def test_a_quote_is_checked_as_a_quote_not_judged(col: Collection) -> None:
    answer = 'It says "Green tea is brewed at about 80 degrees" and not 100 degrees [1].'
    report = await col.verify_answer(answer, await _tea(col))
    assert [s.verdict for s in report.sentences] == ["quoted"]


class Always:
    """A judge that finds every claim contradicted, saying so."""

    name = "always"

    def __init__(self) -> None:
        self.seen: list[ClaimPair] = []

    async def judge(self, pairs: Sequence[ClaimPair]) -> list[ClaimJudgement]:
        self.seen.extend(pairs)
        return [ClaimJudgement("contradiction", "always contradicted") for _ in pairs]


async def test_a_caller_judge_reads_the_closest_body_sentences(col: Collection) -> None:
    judge = Always()
    answer = "Green tea is steeped at 80 degrees [1]. Coffee is a bean from Brazil [1]."
    report = await col.verify_answer(answer, await _tea(col), claim_judge=judge)
    # Only the sentence close enough to be supported or weak is judged.
    assert [s.verdict for s in report.sentences] == ["contradicted", "unsupported"]
    assert report.sentences[0].detail.startswith("always contradicted (closest cited")
    assert report.claim_judge == "always"
    (pair,) = judge.seen
    assert pair.claim == "Green tea is steeped at 80 degrees."
    assert len(pair.evidence) == 2
    assert pair.evidence[0].startswith("Green tea is brewed at about 80 degrees")
    assert not any(e.startswith("#") for e in pair.evidence)


class Broken:
    name = "broken"

    def __init__(self, returns: object = None, raises: Exception | None = None) -> None:
        self._returns, self._raises = returns, raises

    async def judge(self, pairs: Sequence[ClaimPair]) -> list[ClaimJudgement]:
        if self._raises is not None:
            raise self._raises
        return self._returns  # type: ignore[return-value]


@pytest.mark.parametrize(
    ("judge", "match"),
    [
        (Broken(raises=ValueError("boom")), "failed \\(ValueError\\)"),
        (Broken(returns=[]), "returned 0 judgements for 1 claims"),
        (Broken(returns=["contradiction"]), "not a ClaimJudgement"),
        (Broken(returns=None), "returned NoneType judgements"),
        # A report holding it could not be written as JSON.
        (
            Broken(returns=[ClaimJudgement("contradiction", "bad \ud800")]),
            r"reason cannot be encoded as UTF-8.*U\+D800",
        ),
        (Broken(returns=[ClaimJudgement("contradiction", 3)]), "reason is a int"),  # type: ignore[arg-type]
    ],
)
async def test_a_misbehaving_judge_is_a_retrieval_error(
    col: Collection, judge: Broken, match: str
) -> None:
    with pytest.raises(RetrievalError, match=match):
        await col.verify_answer(
            "Green tea is steeped at 80 degrees [1].", await _tea(col), claim_judge=judge
        )


async def test_something_that_is_not_a_judge_is_refused(col: Collection) -> None:
    with pytest.raises(RetrievalError, match="claim_judge must be a ClaimJudge"):
        results = await _tea(col)
        await col.verify_answer("Tea [1].", results, claim_judge=object())  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("option", "named"),
    [
        ({"analyzer": "english"}, "analyzer must be"),
        ({"embedder": "all-MiniLM-L6-v2"}, "embedder must be"),
    ],
)
async def test_an_analyzer_or_embedder_that_is_not_one_is_refused(
    col: Collection, option: dict[str, Any], named: str
) -> None:
    """A name where the object belongs failed deep inside with an ``AttributeError``."""
    results = await _tea(col)
    with pytest.raises(RetrievalError, match=named):
        await verify_answer(
            "Green tea is steeped at 80 degrees [1].", results, col.base_dir, **option
        )


# -- evidence is body text -----------------------------------------------------------


async def _body_chunk(col: Collection) -> RetrievalResult:
    """The pressure chunk: its front matter, its heading and its body (small sections,
    joined into one chunk), the title given twice before any body text."""
    response = await col.search("green tea lowers blood pressure in adults", 5)
    (result,) = [r for r in response.results if "A trial" in r.content]
    assert "\n# Green tea lowers blood pressure in adults\n" in result.content
    return result


async def test_a_heading_is_never_answer_evidence(col: Collection) -> None:
    result = await _body_chunk(col)
    report = await col.verify_answer("Green tea lowers blood pressure in adults [1].", [result])
    (sentence,) = report.sentences
    assert sentence.evidence is not None
    assert sentence.evidence.text.startswith("A trial of 400 people")


async def test_a_heading_is_never_search_evidence(col: Collection) -> None:
    result = await _body_chunk(col)
    assert result.evidence
    assert [e.text for e in result.evidence] == [
        "A trial of 400 people found lower readings after daily cups of green tea."
    ]


@pytest.mark.parametrize(
    ("text", "body"),
    [
        ("Title line\n\nBody one. Body two.", ["Body one.", "Body two."]),
        ("---\ntitle: T\n---\n# H\n\nBody.", ["Body."]),
        ("# H\nText under the heading", ["Text under the heading"]),
        ("Setext title\n===\n\nBody.", ["Body."]),
        ("Intro:\n\n- item one\n- item two", ["Intro:", "- item one", "- item two"]),
        ("Only a title", ["Only a title"]),  # nothing else: kept
        ("It wraps\nonto a second line.", ["It wraps\nonto a second line."]),
    ],
)
def test_body_spans(text: str, body: list[str]) -> None:
    assert [text[a:b] for a, b in body_spans(text, sentence_spans(text))] == body
