"""A conformance suite any ``RerankerProtocol`` implementation must pass.

Subclass it with a ``Test*`` class that provides a ``reranker_factory`` fixture
returning a zero-argument callable that builds a fresh, identically configured
reranker, and optionally ``sample_query`` and ``sample_candidates`` with a query
and results it really reads (the defaults are generic; ``default_candidates``
builds them)::

    class TestMyReranker(RerankerConformance):
        @pytest.fixture
        def reranker_factory(self):
            return lambda: MyReranker(...)

A reranker's output goes to the caller as cited results. groundkit checks it
(``checked_rerank``) and refuses a defect at search time, far from its cause; the
suite pins the same contract, and the protocol's, on the reranker itself: a new
list of the candidates it was given, each at most once and none invented, best
first, every score finite and in ``[0, 1]``; text and citation untouched; ``top_k``
a cap on that list (``None``: every candidate); the input left as it was; the same
ranking on every call, every fresh instance and under concurrency; a candidate's
score independent of where it stood in the input; groundkit errors, never a third
party's, for a ``top_k`` that is not a positive integer. ``SCORE_TOLERANCE`` (a
class attribute) bounds how far two scores of one candidate may differ; the order
of one input must be the same every time.
"""

from __future__ import annotations

import asyncio
import itertools
import math
from collections.abc import Callable, Sequence
from typing import Any

import pytest

from groundkit.contracts import RESULT_CITATION_FIELDS, RetrievalResult, Scores
from groundkit.errors import GroundkitError
from groundkit.retrieval.rerank import RerankerProtocol, checked_rerank

__all__ = [
    "DEFAULT_QUERY",
    "KEPT_FIELDS",
    "NOT_TOP_K",
    "UNUSUAL_QUERIES",
    "RerankerConformance",
    "default_candidates",
]

Factory = Callable[[], RerankerProtocol]

DEFAULT_QUERY = "how hot should the water be for green tea"
# What a reranker may not change about a candidate: its text and its citation.
KEPT_FIELDS = ("content", *RESULT_CITATION_FIELDS, "chunk_index", "collection", "metadata")
UNUSUAL_QUERIES = (
    "",
    "   ",
    "tea",
    "Straße ÉCOLE naïve café – 東京 の 天気 🌊 مرحبا",
    "e\u0301 combining",
    "tea " * 5_000,
)
NOT_TOP_K: tuple[object, ...] = (0, -1, True, 2.5, "3")
_TWIN = "Green tea is brewed at about eighty degrees; boiling water makes it bitter."


def _result(
    content: str,
    *,
    source: str,
    score: float,
    start: int = 0,
    index: int = 0,
    **fields: Any,
) -> RetrievalResult:
    return RetrievalResult(
        content=content,
        score=score,
        document_id=f"doc:{source}",
        chunk_id=f"{source}#{index}@{start}",
        chunk_index=index,
        source=source,
        source_class=fields.pop("source_class", "text"),
        extractor=fields.pop("extractor", None),
        start_offset=start,
        end_offset=start + len(content),
        **fields,
    )


def default_candidates() -> list[RetrievalResult]:
    """Candidates as a first-stage search hands them over: scores on its own scale
    (BM25 sums above 1), signals, metadata, a collection and a version, an extracted
    and a snapshot source, two chunks with the same text, text in several scripts."""
    return [
        _result(
            _TWIN,
            source="kitchen/tea.md",
            score=7.25,
            start=120,
            index=2,
            metadata={"lang": "en", "tags": ["tea", "kitchen"]},
            scores=Scores(bm25=7.25),
            collection="docs",
        ),
        _result(
            "The night bus leaves the station at midnight.",
            source="travel/bus.txt",
            score=3.5,
            scores=Scores(bm25=3.5),
        ),
        _result(
            "Black tea tolerates boiling water and a longer steep.",
            source="manuals/tea.pdf",
            score=5.0,
            start=40,
            index=1,
            source_class="extracted",
            extractor="pdf:pypdf",
            version=3,
            scores=Scores(bm25=5.0, vector=0.4, fused=0.8),
        ),
        _result(
            "Photovoltaic cells turn sunlight into electricity.",
            source="https://example.org/solar",
            score=0.25,
            source_class="snapshot",
            scores=Scores(vector=0.5),
        ),
        _result(_TWIN, source="copies/tea-copy.md", score=6.0, metadata={"copy": True}),
        _result(
            "緑茶は約八十度のお湯で淹れます。",
            source="notes/お茶.txt",
            score=1.0,
            start=9,
            index=4,
        ),
        _result(
            "Sourdough rises slowly because wild yeast ferments overnight.",
            source="kitchen/bread.txt",
            score=0.5,
            collection="docs",
        ),
    ]


def _finite_number(value: object) -> bool:
    return (
        isinstance(value, int | float)
        and not isinstance(value, bool)
        and math.isfinite(float(value))
    )


class RerankerConformance:
    """Behaviour shared by every reranker."""

    # How far two scores of one candidate for one query may differ (calls, instances,
    # input order).
    SCORE_TOLERANCE: float = 1e-5

    def sample_query(self) -> str:
        """The query to rerank for; override with one the reranker really reads."""
        return DEFAULT_QUERY

    def sample_candidates(self) -> Sequence[RetrievalResult]:
        """Candidates to rerank (at least three, distinct chunk ids); override with
        ones the reranker really reads."""
        return default_candidates()

    @pytest.fixture
    def reranker(self, reranker_factory: Factory) -> RerankerProtocol:
        """One instance from the implementer's factory."""
        return reranker_factory()

    # -- helpers -------------------------------------------------------------

    def _candidates(self) -> list[RetrievalResult]:
        candidates = list(self.sample_candidates())
        ids = [c.chunk_id for c in candidates]
        assert len(ids) >= 3 and len(set(ids)) == len(ids), (
            "sample_candidates must offer at least three results with distinct chunk ids"
        )
        return candidates

    @staticmethod
    def _valid(
        out: object, candidates: Sequence[RetrievalResult], top_k: int | None
    ) -> list[RetrievalResult]:
        """``out`` checked as a best-first list of the candidates, each once, at most
        ``top_k`` of them (all of them for ``None``), scored in ``[0, 1]``."""
        assert isinstance(out, list), f"expected a list, got {type(out).__name__}"
        assert all(isinstance(r, RetrievalResult) for r in out), [type(r).__name__ for r in out]
        given = {c.chunk_id: c for c in candidates}
        ids = [r.chunk_id for r in out]
        invented = [i for i in ids if i not in given]
        assert not invented, f"results that were not among the candidates: {invented}"
        assert len(set(ids)) == len(ids), f"a candidate returned twice: {ids}"
        wanted = len(given) if top_k is None else min(top_k, len(given))
        assert len(out) == wanted, f"{len(out)} results where {wanted} were due"
        scores = [r.score for r in out]
        assert all(_finite_number(s) for s in scores), f"scores are not finite: {scores}"
        assert all(0.0 <= s <= 1.0 for s in scores), f"scores outside [0, 1]: {scores}"
        assert all(a >= b for a, b in itertools.pairwise(scores)), f"not best first: {scores}"
        return out

    async def _ranked(
        self, reranker: RerankerProtocol, candidates: Sequence[RetrievalResult], top_k: int | None
    ) -> list[RetrievalResult]:
        out = await reranker.rerank(self.sample_query(), candidates, top_k=top_k)
        return self._valid(out, candidates, top_k)

    def _same_ranking(
        self, got: Sequence[RetrievalResult], want: Sequence[RetrievalResult], what: str
    ) -> None:
        assert [r.chunk_id for r in got] == [r.chunk_id for r in want], f"{what}: another order"
        for a, b in zip(got, want, strict=True):
            assert abs(a.score - b.score) <= self.SCORE_TOLERANCE, (
                f"{what}: {a.chunk_id} scored {a.score} and {b.score}"
            )

    # -- identity ------------------------------------------------------------

    async def test_satisfies_the_protocol(self, reranker: RerankerProtocol) -> None:
        assert isinstance(reranker, RerankerProtocol)
        assert isinstance(reranker.model_name, str) and reranker.model_name.strip()

    async def test_model_name_is_stable(
        self, reranker: RerankerProtocol, reranker_factory: Factory
    ) -> None:
        name = reranker.model_name
        await reranker.rerank(self.sample_query(), self._candidates())
        assert reranker.model_name == name
        assert reranker_factory().model_name == name

    # -- the ranking ---------------------------------------------------------

    async def test_no_candidates_is_an_empty_list(self, reranker: RerankerProtocol) -> None:
        for top_k in (None, 3):
            out = await reranker.rerank(self.sample_query(), [], top_k=top_k)
            assert isinstance(out, list) and out == [], out

    async def test_every_candidate_once_best_first_scored_in_the_unit_interval(
        self, reranker: RerankerProtocol
    ) -> None:
        candidates = self._candidates()
        out = await self._ranked(reranker, candidates, None)
        assert {r.chunk_id for r in out} == {c.chunk_id for c in candidates}

    async def test_text_and_citation_are_kept(self, reranker: RerankerProtocol) -> None:
        candidates = self._candidates()
        given = {c.chunk_id: c for c in candidates}
        for result in await self._ranked(reranker, candidates, None):
            candidate = given[result.chunk_id]
            changed = [f for f in KEPT_FIELDS if getattr(result, f, None) != getattr(candidate, f)]
            assert not changed, f"{result.chunk_id}: the reranker changed {changed}"
            assert result.citation == candidate.citation, result.chunk_id

    async def test_top_k_caps_the_ranking(self, reranker: RerankerProtocol) -> None:
        candidates = self._candidates()
        full = await self._ranked(reranker, candidates, None)
        for top_k in range(1, len(candidates) + 2):
            capped = await self._ranked(reranker, candidates, top_k)
            self._same_ranking(capped, full[:top_k], f"top_k={top_k}")

    @pytest.mark.parametrize("top_k", NOT_TOP_K, ids=[repr(k) for k in NOT_TOP_K])
    async def test_refuses_a_top_k_that_is_not_a_positive_integer(
        self, reranker: RerankerProtocol, top_k: object
    ) -> None:
        with pytest.raises(GroundkitError):
            await reranker.rerank(
                self.sample_query(),
                self._candidates(),
                top_k=top_k,  # type: ignore[arg-type]
            )

    async def test_the_input_is_left_as_it_was(self, reranker: RerankerProtocol) -> None:
        candidates = self._candidates()
        held = list(candidates)
        dumps = [c.model_dump() for c in candidates]
        out = await self._ranked(reranker, candidates, None)
        assert out is not candidates, "the reranker returned the list it was given"
        assert [id(c) for c in candidates] == [id(c) for c in held], (
            "the reranker changed the list it was given"
        )
        assert [c.model_dump() for c in candidates] == dumps, "the reranker changed a candidate"

    async def test_any_sequence_of_candidates_is_accepted(self, reranker: RerankerProtocol) -> None:
        candidates = self._candidates()
        from_list = await self._ranked(reranker, candidates, None)
        from_tuple = await self._ranked(reranker, tuple(candidates), None)
        self._same_ranking(from_tuple, from_list, "a tuple of the same candidates")

    # -- determinism ---------------------------------------------------------

    async def test_deterministic_across_calls_and_instances(
        self, reranker: RerankerProtocol, reranker_factory: Factory
    ) -> None:
        candidates = self._candidates()
        first = await self._ranked(reranker, candidates, None)
        self._same_ranking(await self._ranked(reranker, candidates, None), first, "a second call")
        fresh = reranker_factory()
        self._same_ranking(await self._ranked(fresh, candidates, None), first, "a fresh instance")

    async def test_a_score_does_not_depend_on_the_input_order(
        self, reranker: RerankerProtocol
    ) -> None:
        candidates = self._candidates()
        scores = {r.chunk_id: r.score for r in await self._ranked(reranker, candidates, None)}
        for name, order in (
            ("reversed", candidates[::-1]),
            ("rotated", candidates[2:] + candidates[:2]),
            ("interleaved", candidates[::2] + candidates[1::2]),
        ):
            for result in await self._ranked(reranker, order, None):
                assert abs(result.score - scores[result.chunk_id]) <= self.SCORE_TOLERANCE, (
                    f"{name} input: {result.chunk_id} scored {result.score}, "
                    f"{scores[result.chunk_id]} before"
                )

    async def test_concurrent_calls_give_what_sequential_calls_give(
        self, reranker: RerankerProtocol
    ) -> None:
        candidates = self._candidates()
        calls: list[tuple[Sequence[RetrievalResult], int | None]] = [
            (candidates, None),
            (candidates[::-1], None),
            (candidates, 2),
            (candidates[1:], None),
        ]
        sequential = [await self._ranked(reranker, c, k) for c, k in calls]
        concurrent = await asyncio.gather(*(self._ranked(reranker, c, k) for c, k in calls))
        for i, (got, want) in enumerate(zip(concurrent, sequential, strict=True)):
            self._same_ranking(got, want, f"concurrent call {i}")

    async def test_groundkit_takes_the_ranking_as_it_is(self, reranker: RerankerProtocol) -> None:
        candidates = self._candidates()
        for top_k in (None, 2):
            direct = await self._ranked(reranker, candidates, top_k)
            try:
                checked = await checked_rerank(reranker, self.sample_query(), candidates, top_k)
            except GroundkitError as exc:
                raise AssertionError(f"groundkit refuses the reranker's results: {exc}") from exc
            self._same_ranking(checked, direct, f"top_k={top_k}, through checked_rerank")
            for a, b in zip(checked, direct, strict=True):
                # groundkit keeps each candidate with only the reranker's score and signals.
                differ = [
                    f
                    for f in RetrievalResult.model_fields
                    if f not in ("score", "scores") and getattr(a, f) != getattr(b, f)
                ]
                assert not differ, f"{b.chunk_id}: the reranker changed {differ}"

    @pytest.mark.parametrize("query", UNUSUAL_QUERIES, ids=[ascii(q)[:16] for q in UNUSUAL_QUERIES])
    async def test_an_unusual_query_is_ranked_or_refused(
        self, reranker: RerankerProtocol, query: str
    ) -> None:
        candidates = self._candidates()
        try:
            out = await reranker.rerank(query, candidates)
        except GroundkitError:
            return
        self._valid(out, candidates, None)
