"""A conformance suite any ``LexicalIndexProtocol`` implementation must pass.

Subclass it with a ``Test*`` class that provides a ``build`` fixture: an async
callable that indexes a corpus (one list of analysed terms per chunk, in the
order given) and returns a ``BuiltIndex``::

    class TestMyIndex(LexicalIndexConformance):
        @pytest.fixture
        def build(self):
            async def make(corpus):
                keys = [100 + i for i in range(len(corpus))]
                index = MyIndex.build(dict(zip(keys, corpus)))
                return BuiltIndex(index=index, keys=keys, canonical=sorted(keys))
            return make

A search's hits become cited results in the order the index gives them, so the
suite pins what the retriever relies on: only chunks that match a term, each
once, scored finite and positive, best first, ties in canonical order; ``top_k``
a cut of one fixed ranking (so every smaller ``top_k`` is a prefix); a
``score_threshold`` and a ``mask`` applied before the cut, never after; a mask
of the wrong shape refused with ``ValueError``; ``keys`` lining up with mask
positions; and the same hits on every call and every build of the same corpus.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import pytest

from groundkit.lexical.protocols import LexicalHit, LexicalIndexProtocol

__all__ = ["BuiltIndex", "Corpus", "LexicalIndexConformance"]

Corpus = list[list[str]]


@dataclass
class BuiltIndex:
    """An index over a corpus: ``keys[i]`` is the store key of ``corpus[i]``;
    ``canonical`` lists every key in the order that breaks ties."""

    index: LexicalIndexProtocol
    keys: list[int]
    canonical: list[int]

    def position(self, hit: LexicalHit) -> int:
        """Where the hit's chunk stood in the corpus."""
        return self.keys.index(hit.key)


Builder = Callable[[Corpus], Awaitable[BuiltIndex]]


class LexicalIndexConformance:
    """What any ``LexicalIndexProtocol`` must do. Subclasses provide a ``build`` fixture."""

    CORPUS: ClassVar[Corpus] = [
        ["solar", "panel", "panel", "sun"],
        ["wind", "turbine"],
        ["solar", "wind", "grid"],
        ["tea", "kettle"],
        ["solar", "panel", "panel", "sun"],  # identical to position 0
        [],
    ]
    QUERIES: ClassVar[tuple[tuple[str, ...], ...]] = (
        ("solar",),
        ("wind",),
        ("solar", "panel"),
        ("solar", "panel", "wind"),
        ("sun", "tea", "grid"),
        ("kettle", "zebra"),
    )

    async def test_satisfies_protocol(self, build: Builder) -> None:
        built = await build(self.CORPUS)
        assert isinstance(built.index, LexicalIndexProtocol)
        assert built.index.size == len(self.CORPUS)

    async def test_only_matching_chunks_returned(self, build: Builder) -> None:
        built = await build(self.CORPUS)
        hits = built.index.search(["wind"], 10)
        assert {built.position(h) for h in hits} == {1, 2}
        assert all(isinstance(h, LexicalHit) and h.score > 0 for h in hits)

    async def test_every_hit_once_finite_best_first(self, build: Builder) -> None:
        built = await build(self.CORPUS)
        for query in self.QUERIES:
            hits = built.index.search(list(query), 10)
            keys = [h.key for h in hits]
            assert len(set(keys)) == len(keys), query
            assert set(keys) <= set(built.keys), query
            assert all(math.isfinite(h.score) and h.score > 0 for h in hits), query
            assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
            matching = {i for i, doc in enumerate(self.CORPUS) if set(doc) & set(query)}
            assert {built.position(h) for h in hits} == matching, query

    async def test_unknown_terms_give_nothing(self, build: Builder) -> None:
        built = await build(self.CORPUS)
        assert built.index.search(["zebra", "unicorn"], 10) == []
        assert built.index.search([], 10) == []

    async def test_ties_follow_canonical_order(self, build: Builder) -> None:
        built = await build(self.CORPUS)
        hits = built.index.search(["solar", "panel"], 10)
        assert [built.position(h) for h in hits[2:]] == [2]
        assert {built.position(h) for h in hits[:2]} == {0, 4}
        assert hits[0].score == hits[1].score > hits[2].score
        tied = [h.key for h in hits[:2]]
        assert tied == sorted(tied, key=built.canonical.index)

    async def test_top_k_is_a_prefix(self, build: Builder) -> None:
        built = await build(self.CORPUS)
        full = built.index.search(["solar", "wind"], 10)
        assert len(full) == 4
        for k in range(1, 5):
            assert built.index.search(["solar", "wind"], k) == full[:k]
        assert built.index.search(["solar"], 0) == []

    async def test_score_threshold(self, build: Builder) -> None:
        built = await build(self.CORPUS)
        query = ["solar", "panel", "wind"]
        full = built.index.search(query, 10)
        cut = (full[1].score + full[-1].score) / 2
        kept = built.index.search(query, 10, score_threshold=cut)
        assert kept == [h for h in full if h.score >= cut]
        assert 0 < len(kept) < len(full)
        assert built.index.search(["solar"], 10, score_threshold=1e9) == []
        # Before the cut: the two best are kept whichever top_k asks for them.
        assert built.index.search(query, 2, score_threshold=cut) == kept[:2]

    async def test_empty_index(self, build: Builder) -> None:
        built = await build([])
        assert built.index.size == 0
        assert built.index.search(["solar"], 10) == []

    async def test_keys_line_up_with_positions(self, build: Builder) -> None:
        built = await build(self.CORPUS)
        keys = built.index.keys
        assert keys.dtype == np.int64 and sorted(keys.tolist()) == sorted(built.keys)
        assert len(set(keys.tolist())) == built.index.size

    async def test_mask_applies_before_the_cut(self, build: Builder) -> None:
        built = await build(self.CORPUS)
        query = ["solar", "panel", "wind"]
        full = built.index.search(query, 10)
        best = full[0].key
        mask = built.index.keys != best
        assert built.index.search(query, 2, mask=mask) == [h for h in full if h.key != best][:2]
        assert built.index.search(query, 10, mask=np.zeros(built.index.size, np.bool_)) == []
        everything = np.ones(built.index.size, np.bool_)
        assert built.index.search(query, 10, mask=everything) == full

    async def test_mask_follows_the_index_keys(self, build: Builder) -> None:
        """A mask's flag ``i`` is for the chunk ``index.keys[i]``: positions, not corpus order."""
        built = await build(self.CORPUS)
        query = ["solar", "wind"]
        full = built.index.search(query, 10)
        for allowed in full:
            mask = built.index.keys == allowed.key
            assert built.index.search(query, 10, mask=mask) == [allowed]

    async def test_a_mask_of_the_wrong_shape_is_refused(self, build: Builder) -> None:
        built = await build(self.CORPUS)
        for size in (built.index.size + 1, max(built.index.size - 1, 0)):
            with pytest.raises(ValueError):
                built.index.search(["solar"], 10, mask=np.ones(size, np.bool_))

    async def test_deterministic_across_calls_and_builds(self, build: Builder) -> None:
        first = await build(self.CORPUS)
        again = await build(self.CORPUS)
        for query in self.QUERIES:
            ranking = first.index.search(list(query), 10)
            assert first.index.search(list(query), 10) == ranking, query
            assert [(first.position(h), h.score) for h in ranking] == [
                (again.position(h), h.score) for h in again.index.search(list(query), 10)
            ], query

    async def test_the_query_terms_are_left_as_they_were(self, build: Builder) -> None:
        built = await build(self.CORPUS)
        terms = ["solar", "panel", "solar"]
        mask = np.ones(built.index.size, np.bool_)
        built.index.search(terms, 10, mask=mask)
        assert terms == ["solar", "panel", "solar"]
        assert mask.all()
