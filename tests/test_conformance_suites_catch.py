"""The embedder, reranker and lexical index suites fail an implementation broken in a way
that matters: a suite that passes anything proves nothing. Each broken implementation is a
correct one with one defect: the test suite's toy embedder (the correct one also checks its
input, as groundkit's embedders do), the term-overlap reranker of the reranker suite's tests,
BM25 over postings. The named suite test must fail the broken one and pass the correct one."""

from __future__ import annotations

import asyncio
import inspect
import itertools
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest

from groundkit.contracts import RetrievalResult, Scores
from groundkit.lexical import BM25Index
from groundkit.lexical.protocols import LexicalHit
from groundkit.testing.conformance.embedders import EmbedderConformance
from groundkit.testing.conformance.lexical import BuiltIndex, Corpus, LexicalIndexConformance
from groundkit.testing.conformance.rerankers import RerankerConformance
from tests.lexical.test_bm25 import build_from_postings
from tests.retrieval.test_reranker_conformance import TermOverlapReranker
from tests.support import ToyEmbedder

# What a suite test raises when it fails: an assertion, a pytest.raises that saw nothing
# raised, or the implementation's own stray exception.
FAILED = (AssertionError, pytest.fail.Exception)
Raises = type[BaseException] | tuple[type[BaseException], ...]
# A broken implementation, the suite test that must fail it, that test's parameters, and
# what the test raises.
Case = tuple[Callable[[], Any], str, dict[str, Any], Raises]


async def run(suite: object, test: str, factory: Callable[[], Any], **params: Any) -> None:
    """Call the suite's test method as pytest would, with a fresh instance and the factory
    for the fixtures it names."""
    method = getattr(suite, test)
    wanted = inspect.signature(method).parameters
    kwargs = dict(params)
    for name in wanted:
        if name in ("embedder", "reranker"):
            kwargs[name] = factory()
        elif name.endswith("_factory"):
            kwargs[name] = factory
    await method(**kwargs)


# -- embedders ----------------------------------------------------------------------


class NoInputChecks(ToyEmbedder):
    """The toy embedder (the correct one every broken embedder here is compared with)
    without its input checks: Python's own error escapes for a None, and a bare string
    is embedded character by character."""

    def _vector(self, text: str) -> list[float]:
        return self._hashed(text)

    async def embed_documents(self, texts: Sequence[str]) -> Any:
        rows = [self._hashed(text) for text in texts]
        return np.asarray(rows, dtype=np.float32).reshape(len(rows), self.dimensions)


class Float64(ToyEmbedder):
    async def embed_documents(self, texts: Sequence[str]) -> Any:
        return (await super().embed_documents(texts)).astype(np.float64)


class NotUnitLength(ToyEmbedder):
    async def embed_documents(self, texts: Sequence[str]) -> Any:
        return await super().embed_documents(texts) * 2.0


class HasNaN(ToyEmbedder):
    async def embed_documents(self, texts: Sequence[str]) -> Any:
        rows = await super().embed_documents(texts)
        rows[[("bus" in t) for t in texts], 1] = np.nan
        return rows


class QueryAsMatrix(ToyEmbedder):
    async def embed_query(self, text: str) -> Any:
        return (await super().embed_query(text))[None, :]


class EmptyIsFlat(ToyEmbedder):
    async def embed_documents(self, texts: Sequence[str]) -> Any:
        rows = await super().embed_documents(texts)
        return rows if len(texts) else np.zeros(0, dtype=np.float32)


class RowsRotated(ToyEmbedder):
    """Answers each text with the next text's row."""

    async def embed_documents(self, texts: Sequence[str]) -> Any:
        return np.roll(await super().embed_documents(texts), 1, axis=0)


class BatchesConcatenatedBackwards(ToyEmbedder):
    """Embeds in batches of 64 and joins them last batch first."""

    async def embed_documents(self, texts: Sequence[str]) -> Any:
        texts = list(texts)
        parts = []
        for start in range(0, len(texts), 64):
            parts.append(await super().embed_documents(texts[start : start + 64]))
        return np.concatenate(parts[::-1]) if parts else await super().embed_documents([])


class LeansOnTheBatch(ToyEmbedder):
    """Mixes the batch's mean into each row: a text's vector depends on its neighbours."""

    async def embed_documents(self, texts: Sequence[str]) -> Any:
        rows = await super().embed_documents(texts)
        if not len(texts):
            return rows
        mixed = rows + 0.05 * rows.mean(axis=0)
        return (mixed / np.linalg.norm(mixed, axis=1, keepdims=True)).astype(np.float32)


class Noisy(ToyEmbedder):
    async def embed_documents(self, texts: Sequence[str]) -> Any:
        rows = await super().embed_documents(texts)
        rows = rows + np.random.default_rng().normal(scale=1e-3, size=rows.shape)
        return (rows / np.linalg.norm(rows, axis=1, keepdims=True)).astype(np.float32)


class OneBuffer(ToyEmbedder):
    """Hands out views of one buffer it writes every call into."""

    def __init__(self) -> None:
        super().__init__()
        self._buffer = np.zeros((256, self.dimensions), dtype=np.float32)

    async def embed_documents(self, texts: Sequence[str]) -> Any:
        rows = await super().embed_documents(texts)
        self._buffer[: len(rows)] = rows
        return self._buffer[: len(rows)]


class Constant(ToyEmbedder):
    async def embed_documents(self, texts: Sequence[str]) -> Any:
        return await super().embed_documents(["same"] * len(texts))

    async def embed_query(self, text: str) -> Any:
        return await super().embed_query("same")


class Racy(ToyEmbedder):
    """Keeps the texts of a call on the instance across an await: concurrent calls
    embed each other's texts."""

    async def embed_documents(self, texts: Sequence[str]) -> Any:
        self._pending = list(texts)
        await asyncio.sleep(0)
        return await super().embed_documents(self._pending)


_instances = itertools.count()


class DriftingName(ToyEmbedder):
    def __init__(self) -> None:
        super().__init__(model_name=f"hash-64-{next(_instances)}")


class WrongDimensions(ToyEmbedder):
    def __init__(self) -> None:
        super().__init__()
        self.dimensions = 32

    async def embed_documents(self, texts: Sequence[str]) -> Any:
        self.dimensions = 64
        rows = await super().embed_documents(texts)
        self.dimensions = 32
        return rows


EMBEDDER_CASES: list[Case] = [
    (Float64, "test_documents_are_one_unit_row_per_text", {}, AssertionError),
    (NotUnitLength, "test_documents_are_one_unit_row_per_text", {}, AssertionError),
    (HasNaN, "test_documents_are_one_unit_row_per_text", {}, AssertionError),
    (QueryAsMatrix, "test_a_query_is_one_unit_vector", {}, AssertionError),
    (EmptyIsFlat, "test_no_texts_is_an_empty_matrix", {}, AssertionError),
    (RowsRotated, "test_rows_follow_the_input_order", {}, AssertionError),
    (BatchesConcatenatedBackwards, "test_a_long_list_keeps_its_order", {}, AssertionError),
    (LeansOnTheBatch, "test_rows_follow_the_input_order", {}, AssertionError),
    (Noisy, "test_deterministic_across_calls_and_instances", {}, AssertionError),
    (OneBuffer, "test_returned_arrays_belong_to_the_caller", {}, AssertionError),
    (Constant, "test_distinct_texts_give_distinct_vectors", {}, AssertionError),
    (Racy, "test_concurrent_calls_give_what_sequential_calls_give", {}, AssertionError),
    (DriftingName, "test_provider_and_model_name_are_stable", {}, AssertionError),
    (WrongDimensions, "test_dimensions_is_a_positive_int_that_does_not_change", {}, AssertionError),
    (NotUnitLength, "test_unusual_text_is_embedded_or_refused", {"text": ""}, AssertionError),
    (
        NoInputChecks,  # its own AttributeError escapes
        "test_refuses_what_is_not_texts_with_a_groundkit_error",
        {"bad": [None]},
        AttributeError,
    ),
    (
        NoInputChecks,  # a bare string is split into characters
        "test_refuses_what_is_not_texts_with_a_groundkit_error",
        {"bad": "a bare string"},
        FAILED,
    ),
]


@pytest.mark.parametrize(
    ("broken", "test", "params", "raises"),
    EMBEDDER_CASES,
    ids=[f"{b.__name__}-{t.removeprefix('test_')}" for b, t, _, _ in EMBEDDER_CASES],
)
async def test_the_embedder_suite_fails_a_broken_embedder(
    broken: Callable[[], Any],
    test: str,
    params: dict[str, Any],
    raises: Raises,
) -> None:
    suite = EmbedderConformance()
    with pytest.raises(raises):
        await run(suite, test, broken, **params)
    # The same test passes the embedder without the defect.
    await run(suite, test, ToyEmbedder, **params)


# -- rerankers ----------------------------------------------------------------------


class Base(TermOverlapReranker):
    """The term-overlap reranker with a hook on its output."""

    def alter(
        self, ranked: list[RetrievalResult], results: Sequence[RetrievalResult]
    ) -> list[RetrievalResult]:
        return ranked

    async def rerank(
        self, query: str, results: Sequence[RetrievalResult], top_k: int | None = None
    ) -> list[RetrievalResult]:
        return self.alter(await super().rerank(query, results, top_k), results)


class Invents(Base):
    def alter(
        self, ranked: list[RetrievalResult], results: Sequence[RetrievalResult]
    ) -> list[RetrievalResult]:
        forged = ranked[0].model_copy(update={"chunk_id": "forged#0", "score": 0.0})
        return [*ranked[:-1], forged]


class Repeats(Base):
    def alter(
        self, ranked: list[RetrievalResult], results: Sequence[RetrievalResult]
    ) -> list[RetrievalResult]:
        return [*ranked[:-1], ranked[0].model_copy(update={"score": 0.0})]


class Drops(Base):
    def alter(
        self, ranked: list[RetrievalResult], results: Sequence[RetrievalResult]
    ) -> list[RetrievalResult]:
        return ranked[:-1]


class CountsWords(Base):
    """Scores by how many query words a passage holds: above 1 for most."""

    def alter(
        self, ranked: list[RetrievalResult], results: Sequence[RetrievalResult]
    ) -> list[RetrievalResult]:
        return [r.model_copy(update={"score": r.score * 9.0}) for r in ranked]


class WorstFirst(Base):
    def alter(
        self, ranked: list[RetrievalResult], results: Sequence[RetrievalResult]
    ) -> list[RetrievalResult]:
        return ranked[::-1]


class ReturnsTuple(Base):
    def alter(
        self, ranked: list[RetrievalResult], results: Sequence[RetrievalResult]
    ) -> list[RetrievalResult]:
        return tuple(ranked)  # type: ignore[return-value]


class RewritesText(Base):
    def alter(
        self, ranked: list[RetrievalResult], results: Sequence[RetrievalResult]
    ) -> list[RetrievalResult]:
        return [r.model_copy(update={"content": r.content.upper()}) for r in ranked]


class MovesCitation(Base):
    def alter(
        self, ranked: list[RetrievalResult], results: Sequence[RetrievalResult]
    ) -> list[RetrievalResult]:
        return [
            r.model_copy(
                update={"start_offset": r.start_offset + 1, "end_offset": r.end_offset + 1}
            )
            for r in ranked
        ]


class NaNSignal(Base):
    """Scores right, but a NaN in the signals groundkit shows next to them."""

    def alter(
        self, ranked: list[RetrievalResult], results: Sequence[RetrievalResult]
    ) -> list[RetrievalResult]:
        return [r.model_copy(update={"scores": Scores(rerank=float("nan"))}) for r in ranked]


class IgnoresTopK(TermOverlapReranker):
    async def rerank(
        self, query: str, results: Sequence[RetrievalResult], top_k: int | None = None
    ) -> list[RetrievalResult]:
        return await super().rerank(query, results)


class AcceptsAnyTopK(TermOverlapReranker):
    async def rerank(
        self, query: str, results: Sequence[RetrievalResult], top_k: int | None = None
    ) -> list[RetrievalResult]:
        ranked = await super().rerank(query, results)
        return ranked if top_k is None else ranked[: max(top_k, 0)]


class SortsInPlace(Base):
    def alter(
        self, ranked: list[RetrievalResult], results: Sequence[RetrievalResult]
    ) -> list[RetrievalResult]:
        if isinstance(results, list):
            order = {r.chunk_id: i for i, r in enumerate(ranked)}
            results.sort(key=lambda r: order.get(r.chunk_id, len(order)))
        return ranked


class Jittery(Base):
    def alter(
        self, ranked: list[RetrievalResult], results: Sequence[RetrievalResult]
    ) -> list[RetrievalResult]:
        rng = np.random.default_rng()
        return [
            r.model_copy(update={"score": r.score * (0.98 + 0.02 * rng.random())}) for r in ranked
        ]


class FavoursTheFirst(Base):
    """Adds a bonus for coming early in the input: a score that depends on the order."""

    def alter(
        self, ranked: list[RetrievalResult], results: Sequence[RetrievalResult]
    ) -> list[RetrievalResult]:
        position = {r.chunk_id: i for i, r in enumerate(results)}
        rescored = [
            r.model_copy(update={"score": r.score * 0.9 + 0.1 / (1 + position[r.chunk_id])})
            for r in ranked
        ]
        return sorted(rescored, key=lambda r: -r.score)


class RacyReranker(TermOverlapReranker):
    """Keeps the candidates of a call on the instance across an await."""

    async def rerank(
        self, query: str, results: Sequence[RetrievalResult], top_k: int | None = None
    ) -> list[RetrievalResult]:
        self._pending = list(results)
        await asyncio.sleep(0)
        return await super().rerank(query, self._pending, top_k)


class DriftingModel(TermOverlapReranker):
    def __init__(self) -> None:
        self.model_name = f"term-overlap-{next(_instances)}"


RERANKER_CASES: list[Case] = [
    (
        Invents,
        "test_every_candidate_once_best_first_scored_in_the_unit_interval",
        {},
        AssertionError,
    ),
    (
        Repeats,
        "test_every_candidate_once_best_first_scored_in_the_unit_interval",
        {},
        AssertionError,
    ),
    (Drops, "test_every_candidate_once_best_first_scored_in_the_unit_interval", {}, AssertionError),
    (
        CountsWords,
        "test_every_candidate_once_best_first_scored_in_the_unit_interval",
        {},
        AssertionError,
    ),
    (
        WorstFirst,
        "test_every_candidate_once_best_first_scored_in_the_unit_interval",
        {},
        AssertionError,
    ),
    (
        ReturnsTuple,
        "test_every_candidate_once_best_first_scored_in_the_unit_interval",
        {},
        AssertionError,
    ),
    (RewritesText, "test_text_and_citation_are_kept", {}, AssertionError),
    (MovesCitation, "test_text_and_citation_are_kept", {}, AssertionError),
    (IgnoresTopK, "test_top_k_caps_the_ranking", {}, AssertionError),
    (AcceptsAnyTopK, "test_refuses_a_top_k_that_is_not_a_positive_integer", {"top_k": 0}, FAILED),
    (SortsInPlace, "test_the_input_is_left_as_it_was", {}, AssertionError),
    (Jittery, "test_deterministic_across_calls_and_instances", {}, AssertionError),
    (FavoursTheFirst, "test_a_score_does_not_depend_on_the_input_order", {}, AssertionError),
    (RacyReranker, "test_concurrent_calls_give_what_sequential_calls_give", {}, AssertionError),
    (NaNSignal, "test_groundkit_takes_the_ranking_as_it_is", {}, AssertionError),
    (DriftingModel, "test_model_name_is_stable", {}, AssertionError),
]


@pytest.mark.parametrize(
    ("broken", "test", "params", "raises"),
    RERANKER_CASES,
    ids=[f"{b.__name__}-{t.removeprefix('test_')}" for b, t, _, _ in RERANKER_CASES],
)
async def test_the_reranker_suite_fails_a_broken_reranker(
    broken: Callable[[], Any],
    test: str,
    params: dict[str, Any],
    raises: Raises,
) -> None:
    suite = RerankerConformance()
    with pytest.raises(raises):
        await run(suite, test, broken, **params)
    # The same test passes the reranker without the defect.
    await run(suite, test, TermOverlapReranker, **params)


# -- lexical indexes ----------------------------------------------------------------


class Wrapped:
    """BM25 over postings, passed through: each broken index below changes one thing."""

    def __init__(self, inner: BM25Index) -> None:
        self.inner = inner

    @property
    def size(self) -> int:
        return self.inner.size

    @property
    def keys(self) -> npt.NDArray[np.int64]:
        return self.inner.keys

    def search(
        self,
        query_terms: Sequence[str],
        top_k: int,
        *,
        score_threshold: float | None = None,
        mask: npt.NDArray[np.bool_] | None = None,
    ) -> list[LexicalHit]:
        return self.inner.search(query_terms, top_k, score_threshold=score_threshold, mask=mask)


class IgnoresMask(Wrapped):
    def search(self, query_terms: Sequence[str], top_k: int, **kw: Any) -> list[LexicalHit]:
        kw.pop("mask", None)
        return super().search(query_terms, top_k, **kw)


class MaskAfterTheCut(Wrapped):
    def search(self, query_terms: Sequence[str], top_k: int, **kw: Any) -> list[LexicalHit]:
        mask = kw.pop("mask", None)
        hits = super().search(query_terms, top_k, **kw)
        if mask is None:
            return hits
        allowed = set(self.keys[mask].tolist())
        return [h for h in hits if h.key in allowed]


class MaskInKeyOrder(Wrapped):
    """Reads flag ``i`` as the ``i``-th smallest key's, not position ``i``'s."""

    def search(self, query_terms: Sequence[str], top_k: int, **kw: Any) -> list[LexicalHit]:
        mask = kw.pop("mask", None)
        if mask is not None:
            by_key = np.argsort(self.keys, kind="stable")
            moved = np.zeros_like(mask)
            moved[by_key] = mask
            kw["mask"] = moved
        return super().search(query_terms, top_k, **kw)


class AnyMaskShape(Wrapped):
    def search(self, query_terms: Sequence[str], top_k: int, **kw: Any) -> list[LexicalHit]:
        mask = kw.pop("mask", None)
        if mask is not None:
            kw["mask"] = np.resize(mask, self.size)
        return super().search(query_terms, top_k, **kw)


class IgnoresThreshold(Wrapped):
    def search(self, query_terms: Sequence[str], top_k: int, **kw: Any) -> list[LexicalHit]:
        kw.pop("score_threshold", None)
        return super().search(query_terms, top_k, **kw)


class TiesBackwards(Wrapped):
    def search(self, query_terms: Sequence[str], top_k: int, **kw: Any) -> list[LexicalHit]:
        hits = super().search(query_terms, self.size, **kw)
        rank = {k: i for i, k in enumerate(self.keys.tolist())}
        return sorted(hits, key=lambda h: (-h.score, -rank[h.key]))[:top_k]


class KeepsNonMatches(Wrapped):
    def search(self, query_terms: Sequence[str], top_k: int, **kw: Any) -> list[LexicalHit]:
        hits = super().search(query_terms, top_k, **kw)
        if not hits:
            return hits
        seen = {h.key for h in hits}
        rest = [LexicalHit(key=k, score=0.0) for k in self.keys.tolist() if k not in seen]
        return (hits + rest)[:top_k]


class RepeatsTheBest(Wrapped):
    def search(self, query_terms: Sequence[str], top_k: int, **kw: Any) -> list[LexicalHit]:
        hits = super().search(query_terms, top_k, **kw)
        return (hits[:1] + hits)[:top_k] if len(hits) > 1 else hits


class CutBeforeRanking(Wrapped):
    """Takes the first ``top_k`` matches by position, then ranks them."""

    def search(self, query_terms: Sequence[str], top_k: int, **kw: Any) -> list[LexicalHit]:
        hits = super().search(query_terms, self.size, **kw)
        rank = {k: i for i, k in enumerate(self.keys.tolist())}
        first = sorted(hits, key=lambda h: rank[h.key])[:top_k]
        return sorted(first, key=lambda h: (-h.score, rank[h.key]))


class AlternatesTies(Wrapped):
    """Breaks ties one way, then the other, call by call."""

    calls = 0

    def search(self, query_terms: Sequence[str], top_k: int, **kw: Any) -> list[LexicalHit]:
        AlternatesTies.calls += 1
        hits = super().search(query_terms, self.size, **kw)
        if AlternatesTies.calls % 2:
            return hits[:top_k]
        rank = {k: i for i, k in enumerate(self.keys.tolist())}
        return sorted(hits, key=lambda h: (-h.score, -rank[h.key]))[:top_k]


class DeduplicatesInPlace(Wrapped):
    def search(self, query_terms: Sequence[str], top_k: int, **kw: Any) -> list[LexicalHit]:
        if isinstance(query_terms, list):
            query_terms[:] = list(dict.fromkeys(query_terms))
        return super().search(query_terms, top_k, **kw)


def lexical_builder(kind: type[Wrapped]) -> Callable[[Corpus], Any]:
    async def build(corpus: Corpus) -> BuiltIndex:
        index, keys = build_from_postings(corpus)
        return BuiltIndex(index=kind(index), keys=keys, canonical=keys)

    return build


LEXICAL_CASES: list[tuple[type[Wrapped], str]] = [
    (IgnoresMask, "test_mask_applies_before_the_cut"),
    (MaskAfterTheCut, "test_mask_applies_before_the_cut"),
    (MaskInKeyOrder, "test_mask_follows_the_index_keys"),
    (AnyMaskShape, "test_a_mask_of_the_wrong_shape_is_refused"),
    (IgnoresThreshold, "test_score_threshold"),
    (TiesBackwards, "test_ties_follow_canonical_order"),
    (KeepsNonMatches, "test_only_matching_chunks_returned"),
    (KeepsNonMatches, "test_every_hit_once_finite_best_first"),
    (RepeatsTheBest, "test_every_hit_once_finite_best_first"),
    (CutBeforeRanking, "test_top_k_is_a_prefix"),
    (AlternatesTies, "test_deterministic_across_calls_and_builds"),
    (DeduplicatesInPlace, "test_the_query_terms_are_left_as_they_were"),
]


@pytest.mark.parametrize(
    ("broken", "test"),
    LEXICAL_CASES,
    ids=[f"{b.__name__}-{t.removeprefix('test_')}" for b, t in LEXICAL_CASES],
)
async def test_the_lexical_suite_fails_a_broken_index(broken: type[Wrapped], test: str) -> None:
    suite = LexicalIndexConformance()
    with pytest.raises(FAILED):
        await getattr(suite, test)(build=lexical_builder(broken))
    # The same test passes the index without the defect.
    await getattr(suite, test)(build=lexical_builder(Wrapped))
