"""A reranker's output is held to the protocol before a search returns it.

A reranker may be application code: whatever it raises or returns must not reach the
caller as a third-party exception, a duplicated or invented result, a NaN score or
text under a citation it does not come from.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

from groundkit.contracts import RetrievalResult, Scores
from groundkit.errors import RetrievalError
from groundkit.retrieval.rerank import checked_rerank
from tests.retrieval.conftest import reranked_collection
from tests.retrieval.test_rerank import SENTINEL, _candidates

Rerank = Callable[[Sequence[RetrievalResult], int | None], Any]


class _Custom:
    """A reranker whose answer is whatever ``answer`` makes of the candidates."""

    model_name = "custom-model"

    def __init__(self, answer: Rerank) -> None:
        self.answer = answer

    async def rerank(
        self, query: str, results: Sequence[RetrievalResult], top_k: int | None = None
    ) -> list[RetrievalResult]:
        out: list[RetrievalResult] = self.answer(results, top_k)
        return out


def _raise(results: Sequence[RetrievalResult], top_k: int | None) -> Any:
    raise ValueError(f"blew up on {SENTINEL}")


def _reversed(results: Sequence[RetrievalResult], top_k: int | None) -> list[RetrievalResult]:
    out = [r.model_copy(update={"score": 1.0 / (1 + i)}) for i, r in enumerate(reversed(results))]
    return out if top_k is None else out[:top_k]


BAD: dict[str, tuple[Rerank, str]] = {
    "raises": (_raise, r"_Custom \('custom-model'\) failed \(ValueError\)"),
    "none": (lambda rs, k: None, "expected a list of results, got NoneType"),
    "dicts": (lambda rs, k: [{"content": "forged"}], "result 0 is dict"),
    "one chunk four times": (lambda rs, k: [rs[0]] * 4, "at most 2"),
    "the list three times": (lambda rs, k: list(rs) * 3, "at most 2"),
    "a repeat within top_k": (lambda rs, k: [rs[0], rs[0]], "repeats a candidate"),
    "a nan score": (
        lambda rs, k: [rs[0].model_copy(update={"score": float("nan")})],
        "not a finite number",
    ),
    "a negative score": (
        lambda rs, k: [rs[0].model_copy(update={"score": -1.0})],
        "not a finite number",
    ),
    "a nan signal": (
        lambda rs, k: [rs[0].model_copy(update={"scores": Scores(rerank=math.inf)})],
        "not finite signals",
    ),
    "replaced content": (
        lambda rs, k: [rs[0].model_copy(update={"content": "Aspirin cures everything."})],
        "changed the candidate's content",
    ),
    "a moved citation": (
        lambda rs, k: [rs[0].model_copy(update={"start_offset": rs[0].start_offset + 1})],
        "changed the candidate's start_offset",
    ),
    "an invented chunk": (
        lambda rs, k: [rs[0].model_copy(update={"chunk_id": "nowhere#0@0"})],
        "not one of the",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD))
async def test_checked_rerank_refuses_what_the_protocol_does_not_allow(
    case: str, caplog: pytest.LogCaptureFixture
) -> None:
    answer, message = BAD[case]
    with (
        caplog.at_level(logging.DEBUG, logger="groundkit.retrieval"),
        pytest.raises(RetrievalError, match=message) as info,
    ):
        await checked_rerank(_Custom(answer), "q", _candidates(), top_k=2)
    # The reranker is named; its own message (which may quote a passage) is not.
    assert "custom-model" in str(info.value)
    assert SENTINEL not in str(info.value)
    error = info.value
    assert error.__cause__ is None and (error.__context__ is None or error.__suppress_context__)


async def test_checked_rerank_keeps_the_candidates_with_the_rerankers_order_and_scores() -> None:
    candidates = _candidates()
    out = await checked_rerank(_Custom(_reversed), "q", candidates, top_k=3)
    assert [r.chunk_id for r in out] == [r.chunk_id for r in reversed(candidates)][:3]
    assert [r.score for r in out] == [1.0, 0.5, 1.0 / 3]
    for got, want in zip(out, reversed(candidates), strict=False):
        assert got.content == want.content and got.citation == want.citation
    # Without top_k every candidate may come back; fewer than asked is allowed.
    assert len(await checked_rerank(_Custom(_reversed), "q", candidates)) == len(candidates)
    assert await checked_rerank(_Custom(lambda rs, k: []), "q", candidates, top_k=2) == []


@pytest.mark.parametrize("case", ["raises", "one chunk four times", "the list three times"])
async def test_a_misbehaving_reranker_fails_the_search_with_a_retrieval_error(
    case: str, index_dir: Path, corpus_dir: Path
) -> None:
    answer, message = BAD[case]
    async with reranked_collection(index_dir, corpus_dir, _Custom(answer)) as col:
        with pytest.raises(RetrievalError, match=message):
            await col.search("solar", 2, mode="bm25", rerank=True)
        ranked = await col.search("solar", 2, mode="bm25")
        assert ranked.results  # the corpus has hits: the reranker saw candidates


async def test_a_well_behaved_custom_reranker_still_orders_the_search(
    index_dir: Path, corpus_dir: Path
) -> None:
    async with reranked_collection(index_dir, corpus_dir, _Custom(_reversed)) as col:
        plain = await col.search("solar", 8, mode="bm25")
        ranked = await col.search("solar", 2, mode="bm25", rerank=True)
        assert ranked.metadata["stage"] == "rerank"
        assert [r.chunk_id for r in ranked.results] == [
            r.chunk_id for r in reversed(plain.results)
        ][:2]
