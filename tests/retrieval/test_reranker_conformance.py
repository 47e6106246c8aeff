"""The cross-encoder reranker, and a reranker an application would write, run the
reranker suite.

The cross-encoder is the tiny ``BertForSequenceClassification`` the rerank tests build
on disk (tests/retrieval/conftest.py): nothing is downloaded. Its candidates use the
words its tokenizer knows, so the scores it gives differ from passage to passage.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Sequence

import pytest

from groundkit.contracts import RetrievalResult, Scores
from groundkit.errors import RetrievalError
from groundkit.retrieval.rerank import CrossEncoderReranker, RerankerProtocol
from groundkit.testing.conformance.rerankers import RerankerConformance
from tests.retrieval.conftest import TinyCrossEncoders

Factory = Callable[[], RerankerProtocol]


class TermOverlapReranker:
    """The share of the query's words a passage holds: a plain Python reranker, as an
    application might write one, with no model behind it."""

    model_name = "term-overlap"

    @staticmethod
    def _words(text: str) -> set[str]:
        return set(re.findall(r"\w+", text.casefold()))

    async def rerank(
        self, query: str, results: Sequence[RetrievalResult], top_k: int | None = None
    ) -> list[RetrievalResult]:
        if top_k is not None and (type(top_k) is not int or top_k < 1):
            raise RetrievalError(f"top_k must be a positive integer, got {top_k!r}")
        wanted = self._words(query)
        scored = []
        for result in results:
            score = len(wanted & self._words(result.content)) / len(wanted) if wanted else 0.0
            signals = dataclasses.replace(result.scores or Scores(), rerank=score)
            scored.append(result.model_copy(update={"score": score, "scores": signals}))
        scored.sort(key=lambda r: (-r.score, r.source, r.start_offset, r.chunk_id))
        return scored if top_k is None else scored[:top_k]


class TestTermOverlapConformance(RerankerConformance):
    @pytest.fixture
    def reranker_factory(self) -> Factory:
        return TermOverlapReranker


def _vocabulary_candidates() -> list[RetrievalResult]:
    def result(content: str, source: str, start: int = 0, **fields: object) -> RetrievalResult:
        return RetrievalResult(
            content=content,
            score=fields.pop("score", 2.0),  # type: ignore[arg-type]
            document_id=f"doc:{source}",
            chunk_id=f"{source}@{start}",
            chunk_index=start // 10,
            source=source,
            source_class="text",
            extractor=None,
            start_offset=start,
            end_offset=start + len(content),
            **fields,  # type: ignore[arg-type]
        )

    return [
        result("the sky is blue because of light", "sky.txt", 10, collection="docs"),
        result("cats purr and dogs bark", "pets.txt", metadata={"lang": "en"}),
        result("solar panel cells are made of silicon", "solar.md", 30, version=2),
        result("green tea is steeped in hot water", "tea.rst", 40, scores=Scores(bm25=2.0)),
        result("rocket launch at dawn over the ocean", "launch.md", score=9.5),
        result("the sky is blue because of light", "copy/sky.txt"),
        result("wind turbine power from air", "wind.txt", 70),
    ]


@pytest.mark.slow
class TestCrossEncoderConformance(RerankerConformance):
    @pytest.fixture
    def reranker_factory(self, tiny_cross_encoders: TinyCrossEncoders) -> Factory:
        return lambda: CrossEncoderReranker(str(tiny_cross_encoders.single))

    def sample_query(self) -> str:
        return "why is the sky blue"

    def sample_candidates(self) -> Sequence[RetrievalResult]:
        return _vocabulary_candidates()


@pytest.mark.slow
class TestCrossEncoderInSmallBatchesConformance(RerankerConformance):
    """The suite's own candidates, scored two at a time: each order of the input pads
    the pairs differently, and a candidate's score must not move with it."""

    @pytest.fixture
    def reranker_factory(self, tiny_cross_encoders: TinyCrossEncoders) -> Factory:
        return lambda: CrossEncoderReranker(str(tiny_cross_encoders.single), batch_size=2)
