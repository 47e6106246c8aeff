"""BM25 over immutable segments, scored exactly at query time and pruned to the top k.

Weights are computed when a query runs, from the statistics of the view it
searches (the current documents, or the documents current at a past moment; with
a ``Corpus``, only those of its documents, as a clearance defines them):
Lucene's idf ``log(1 + (N - df + 0.5) / (df + 0.5))`` and length normalisation
``tf / (tf + k1 * (1 - b + b * len / avglen))``, summed over query terms in
term-id order in float64 and returned as float32, so every path (pruned or
exhaustive, one segment or many, fresh or live) gives the same number.

The top k is found by MaxScore with block bounds (adr/0030-lexical-segments.md):
with ``theta`` the k-th best exact score found so far, a document whose upper
bound is below ``theta`` cannot enter the result, so terms whose summed bounds
stay below it only contribute to documents found through the other terms, and
blocks whose bound (plus every other term's) stays below it are never read.
Bounds are taken over any statistics (largest frequency, shortest document),
so pruning is exact whatever the collection looks like now. Ties break on the
canonical position ``(content_hash, chunk_index, document_id)``; see
``groundkit.lexical.segment`` for how segments carry it.
"""

from __future__ import annotations

import importlib
import itertools
import logging
import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import TypeVar

import numpy as np
import numpy.typing as npt

from groundkit.errors import StorageError
from groundkit.lexical.protocols import LexicalHit, PostingsBatch, PostingsSource
from groundkit.lexical.segment import (
    BLOCK,
    ORDER_COLUMNS,
    Segment,
    build_segment,
    empty_segment,
)


def _load_kernel() -> ModuleType | None:
    try:
        return importlib.import_module("groundkit.lexical._kernel")
    except ImportError:  # installed without a C compiler: numpy gives the same results
        return None


_kernel = _load_kernel()

__all__ = [
    "BM25Index",
    "Corpus",
    "SegmentView",
    "View",
    "compiled_kernel",
    "segment_from_batches",
    "sorted_union",
    "view_from_batches",
]

_N = TypeVar("_N", bound=np.generic)


logger = logging.getLogger("groundkit.lexical")


def compiled_kernel() -> bool:
    """Whether pruned searches run in the compiled kernel (``groundkit.lexical._kernel``)
    rather than in numpy. Both return the same hits and scores; the kernel is faster."""
    return _kernel is not None and _USE_KERNEL


def kernel_module() -> ModuleType | None:
    """The compiled kernel, or None where it is not installed (or tests turned it off)."""
    return _kernel if _USE_KERNEL else None


def _say_numpy_once() -> None:
    global _TOLD
    if not _TOLD:
        _TOLD = True
        logger.warning(
            "groundkit's compiled BM25 kernel is not installed (the package was built "
            "without a C compiler): searches use numpy, with the same results, slower"
        )


_TOLD = False
# Tests set this to False to run the numpy path where the kernel is installed.
_USE_KERNEL = True
# How the kernel scores a segment: -1 lets it choose (term at a time when the segment is
# small next to the postings read, else MaxScore); 0 and 1 force one (tests).
_KERNEL_MODE = -1

# Bounds are stretched, and thresholds shrunk, by this much: more than float32 rounding
# (about 6e-8 relative), so rounding never makes a bound too tight or a threshold too high.
_SLACK = 1.0 + 1e-6
_INF = math.inf


@dataclass(frozen=True, slots=True)
class View:
    """Which documents a search sees: the current ones, or those current at ``as_of``
    (seconds since the epoch); with a ``corpus``, only those of it (the documents a
    clearance admits). Statistics are taken over exactly these documents."""

    as_of: float | None = None
    corpus: Corpus | None = None

    def within(self, corpus: Corpus | None) -> View:
        """This view narrowed to ``corpus`` (None: this view as it is)."""
        return self if corpus is None else View(self.as_of, corpus)


CURRENT = View()


@dataclass(slots=True)
class SegmentView:
    """A segment and what has happened to its documents since it was written.

    ``valid_to[i]`` is when document ``i`` stopped being current (``inf``: it
    still is; ``-inf``: removed, visible at no time). ``dead_df[j]`` counts the
    postings of term ``segment.terms[j]`` held by documents that are not
    current (None: there are none), so current document frequencies need no
    scan. A view is never changed once a search may be reading it: ``apply``
    returns a new one.
    """

    segment: Segment
    valid_to: npt.NDArray[np.float64]
    dead_df: npt.NDArray[np.int64] | None = None
    dead_docs: int = 0
    dead_length: int = 0
    removed: int = 0
    _current: npt.NDArray[np.bool_] | None = None
    _total_length: int | None = None
    # Per-posting tf / (tf + norm) for one normalisation, kept for small segments.
    _weights: tuple[float, float, npt.NDArray[np.float64]] | None = None

    def tf_weights(self, norm: _Norm) -> npt.NDArray[np.float64] | None:
        """``tf / (tf + norm(len))`` of every posting, for ``norm``; computed once and
        kept while the statistics stay the same (searches between writes), for
        segments of at most ``_CACHED_POSTINGS`` postings. None for larger ones."""
        seg = self.segment
        if seg.docs.shape[0] > _CACHED_POSTINGS:
            return None
        cached = self._weights
        if cached is not None and cached[0] == norm.base and cached[1] == norm.per_length:
            return cached[2]
        tf = seg.tfs.astype(np.float64)
        weights = tf / (tf + norm.lengths(seg.lengths)[seg.docs])
        self._weights = (norm.base, norm.per_length, weights)
        return weights

    @property
    def total_length(self) -> int:
        """The segment's summed document lengths, computed on first use (a search
        needs it every time; the segment never changes)."""
        if self._total_length is None:
            self._total_length = self.segment.total_length
        return self._total_length

    @classmethod
    def fresh(cls, segment: Segment) -> SegmentView:
        return cls(segment, np.full(segment.size, _INF, dtype=np.float64))

    @classmethod
    def with_valid_to(cls, segment: Segment, valid_to: npt.NDArray[np.float64]) -> SegmentView:
        """A view whose retired documents are ``valid_to < inf``; statistics counted
        with one pass over the postings."""
        view = cls(segment, np.asarray(valid_to, dtype=np.float64))
        view._recount()
        return view

    @classmethod
    def restored(
        cls,
        segment: Segment,
        valid_to: npt.NDArray[np.float64],
        dead_df: npt.NDArray[np.int64] | None,
    ) -> SegmentView:
        """A view from persisted state: document counts are recomputed (cheap), the
        per-term counts are taken as given (checked for shape)."""
        if valid_to.shape != (segment.size,):
            raise ValueError("an overlay does not fit its segment")
        if dead_df is not None and dead_df.shape != segment.terms.shape:
            raise ValueError("an overlay's term counts do not fit its segment")
        view = cls(segment, valid_to, dead_df)
        view._count_docs()
        return view

    @property
    def current(self) -> npt.NDArray[np.bool_]:
        if self._current is None:
            self._current = self.valid_to == _INF
        return self._current

    def _count_docs(self) -> None:
        dead = ~self.current
        self.dead_docs = int(dead.sum())
        self.removed = int(np.count_nonzero(self.valid_to == -_INF))
        self.dead_length = (
            int(self.segment.lengths[dead].sum(dtype=np.int64)) if self.dead_docs else 0
        )

    def _recount(self) -> None:
        self._current = None
        self._count_docs()
        seg = self.segment
        if not self.dead_docs or seg.terms.size == 0:
            self.dead_df = None
            return
        dead = ~self.current
        self.dead_df = np.add.reduceat(dead[seg.docs].astype(np.int64), seg.term_ptr[:-1])
        # reduceat gives a lone value, not zero, for an empty range; terms always have postings.

    def dead_count(self, term_index: int) -> int:
        return 0 if self.dead_df is None else int(self.dead_df[term_index])

    def apply(
        self,
        docs: npt.NDArray[np.int64],
        valid_to: npt.NDArray[np.float64],
        term_ids: Sequence[npt.NDArray[np.int32]],
    ) -> SegmentView:
        """A new view with document ``docs[i]`` no longer current from ``valid_to[i]``
        (``-inf``: removed); ``term_ids[i]`` are that document's terms. Applying
        the same change twice changes nothing, so a log may be replayed."""
        new_valid_to = self.valid_to.copy()
        dead_df = None if self.dead_df is None else self.dead_df.copy()
        seg = self.segment
        for doc, until, terms in zip(docs.tolist(), valid_to.tolist(), term_ids, strict=True):
            before = float(new_valid_to[doc])
            if before == until or before == -_INF:
                continue  # already so (a replay), or removed (nothing comes after)
            new_valid_to[doc] = until
            if before != _INF:
                continue  # a past version removed: the current statistics are unchanged
            if terms.size:
                at = np.minimum(np.searchsorted(seg.terms, terms), seg.terms.shape[0] - 1)
                if seg.terms.size == 0 or not np.array_equal(seg.terms[at], terms):
                    raise ValueError("a change names terms its document does not hold")
                if dead_df is None:
                    dead_df = np.zeros(seg.terms.shape[0], dtype=np.int64)
                np.add.at(dead_df, at, 1)
        view = SegmentView(seg, new_valid_to, dead_df, _total_length=self._total_length)
        view._count_docs()
        return view

    def visible(self, view: View) -> npt.NDArray[np.bool_]:
        if view.as_of is None:
            return self.current
        t = view.as_of
        return (self.segment.valid_from <= t) & (self.valid_to > t)


@dataclass(frozen=True, slots=True)
class _Stats:
    docs: int
    avg_length: float
    df: dict[int, int]


class BM25Index:
    """Segments searched as one index (``LexicalIndexProtocol``).

    ``keys`` lists every document of every segment, current or not, in segment
    order: that is what a mask lines up with. ``vocabulary`` maps terms to the
    store's term ids; a term it does not know matches nothing.
    """

    def __init__(
        self,
        views: Sequence[SegmentView],
        vocabulary: Mapping[str, int] | None = None,
        *,
        k1: float = 1.5,
        b: float = 0.75,
    ) -> None:
        self._views = list(views)
        self._vocab: Mapping[str, int] = vocabulary or {}
        self.k1 = float(k1)
        self.b = float(b)
        sizes = [v.segment.size for v in self._views]
        self._offsets = np.zeros(len(sizes) + 1, dtype=np.int64)
        np.cumsum(sizes, out=self._offsets[1:])
        self._keys: npt.NDArray[np.int64] | None = None
        self._largest_term: int | None = None
        # Large segments are searched first: the threshold they set prunes the small ones.
        self._largest_first = sorted(range(len(sizes)), key=lambda i: -sizes[i])

    # -- building -------------------------------------------------------------

    @classmethod
    async def from_store(
        cls, store: PostingsSource, *, k1: float = 1.5, b: float = 0.75
    ) -> BM25Index:
        """One segment holding every chunk of ``store`` (the full rebuild)."""
        batches = [batch async for batch in store.iter_postings()]
        # Read after the postings: the vocabulary only grows, so it covers them.
        vocabulary = await store.vocabulary()
        return cls.from_postings(batches, vocabulary, k1=k1, b=b)

    @classmethod
    def from_postings(
        cls,
        batches: Sequence[PostingsBatch],
        vocabulary: Mapping[str, int],
        *,
        k1: float = 1.5,
        b: float = 0.75,
    ) -> BM25Index:
        """One segment from postings given in canonical order.

        Without tie keys in the batches, a document's canonical position is its
        place in the input, which is what the store's canonical order gives.
        """
        segment = segment_from_batches(batches)
        return cls([SegmentView.fresh(segment)], vocabulary, k1=k1, b=b)

    # -- shape ----------------------------------------------------------------

    @property
    def size(self) -> int:
        return int(self._offsets[-1])

    @property
    def live_size(self) -> int:
        return sum(v.segment.size - v.dead_docs for v in self._views)

    def lookup(self, query: Mapping[int, int]) -> TermLookup:
        """Where the query's terms are in each segment, and how many postings they
        hold in all (what a search may read). ``search_ids`` takes it, so a caller
        that looks first, to decide where to run the search, does not look twice."""
        wanted = sorted(t for t, n in query.items() if n > 0)
        present = [_present(v.segment, wanted) for v in self._views]
        postings = sum(hi - lo for found in present for _, _, lo, hi in found)
        return TermLookup(wanted, present, postings)

    def idf(self, lookup: TermLookup, view: View = CURRENT) -> dict[int, float]:
        """The idf of each looked-up term that some document of ``view`` holds."""
        return _idf(self._stats(lookup.wanted, lookup.present, view))

    def current_keys(self) -> npt.NDArray[np.int64]:
        """Keys of every current document, ascending."""
        if not self._views:
            return np.zeros(0, dtype=np.int64)
        return np.sort(np.concatenate([v.segment.keys[v.current] for v in self._views]))

    @property
    def largest_term(self) -> int:
        """The largest term id any segment holds (0 when none holds any)."""
        if self._largest_term is None:
            self._largest_term = max(
                (int(v.segment.terms[-1]) for v in self._views if v.segment.terms.size),
                default=0,
            )
        return self._largest_term

    @property
    def views(self) -> list[SegmentView]:
        return list(self._views)

    @property
    def vocabulary(self) -> Mapping[str, int]:
        return self._vocab

    @property
    def keys(self) -> npt.NDArray[np.int64]:
        if self._keys is None:
            if not self._views:
                self._keys = np.zeros(0, dtype=np.int64)
            else:
                self._keys = np.concatenate([v.segment.keys for v in self._views])
        return self._keys

    # -- searching ------------------------------------------------------------

    def search(
        self,
        query_terms: Sequence[str],
        top_k: int,
        *,
        score_threshold: float | None = None,
        mask: npt.NDArray[np.bool_] | None = None,
        view: View = CURRENT,
        prune: bool = True,
    ) -> list[LexicalHit]:
        """Best ``top_k`` chunks, by ``(-score, canonical position)``.

        Chunks matching none of the terms are never returned; with ``mask``
        (one flag per position of ``keys``) neither are chunks whose flag is
        False, and the mask applies before the cut; a ``view`` within a corpus
        returns nothing outside it. ``prune=False`` scores every matching chunk (the
        reference the pruned search must equal).
        """
        if top_k < 1 or self.size == 0:
            return []
        if mask is not None and mask.shape != (self.size,):
            raise ValueError(f"mask has shape {mask.shape}, expected ({self.size},)")
        vocab = self._vocab
        wanted = Counter(vocab[t] for t in query_terms if t in vocab)
        if not wanted:
            return []
        hits = self.search_ids(
            wanted, top_k, score_threshold=score_threshold, mask=mask, view=view, prune=prune
        )
        return [LexicalHit(key=k, score=s) for k, s, _ in hits]

    def search_ids(
        self,
        query: Mapping[int, int],
        top_k: int,
        *,
        score_threshold: float | None = None,
        mask: npt.NDArray[np.bool_] | None = None,
        view: View = CURRENT,
        prune: bool = True,
        lookup: TermLookup | None = None,
    ) -> list[tuple[int, float, bool]]:
        """Like ``search`` on ``{term id: query frequency}``; each hit is ``(key, score,
        tied)``, where ``tied`` marks hits whose score and tie key equal a neighbour's
        (the caller orders those by their full canonical key). ``lookup`` is this
        index's ``lookup(query)``, when the caller already has it."""
        if top_k < 1 or self.size == 0:
            return []
        found = self.lookup(query) if lookup is None else lookup
        wanted, present = found.wanted, found.present
        if not wanted:
            return []
        stats = self._stats(wanted, present, view)
        if stats.docs == 0:
            return []
        if view.corpus is not None:
            # Nothing outside the corpus is returned either.
            within = view.corpus.mask
            mask = within if mask is None or mask is within else mask & within
        scale = {t: query[t] * w for t, w in _idf(stats).items()}
        if not scale:
            return []
        floor = 0.0 if score_threshold is None else float(score_threshold)
        best = _TopK(top_k, floor)
        norm = _Norm.of(self.k1, self.b, stats.avg_length)
        for i in self._largest_first:
            terms = [p for p in present[i] if p[0] in scale]
            if not terms:
                continue
            seg_view = self._views[i]
            local_mask = None
            if mask is not None:
                local_mask = mask[self._offsets[i] : self._offsets[i + 1]]
            search = _SegmentSearch(
                seg_view, i, terms, scale, norm, seg_view.visible(view), local_mask
            )
            search.run(best, prune)
        return best.result(self._views)

    def corpus(self, mask: npt.NDArray[np.bool_]) -> Corpus:
        """The documents flagged in ``mask`` (one flag per position of ``keys``) as a
        corpus of this index: a view ``within`` it is scored as an index holding only
        them would score it."""
        return Corpus(self, mask)

    def _stats(self, terms: Sequence[int], present: list[list[_Term]], view: View) -> _Stats:
        if view.corpus is not None:
            if view.corpus.index is not self:
                raise ValueError("a corpus is searched with the index it was made for")
            return view.corpus.stats(terms, present, view)
        docs = 0
        length = 0
        df = dict.fromkeys(terms, 0)
        for v, found in zip(self._views, present, strict=True):
            seg = v.segment
            if view.as_of is None:
                docs += seg.size - v.dead_docs
                length += v.total_length - v.dead_length
                for t, j, lo, hi in found:
                    df[t] += (hi - lo) - v.dead_count(j)
            else:
                visible = v.visible(view)
                docs += int(visible.sum())
                length += int(seg.lengths[visible].sum(dtype=np.int64))
                for t, _, lo, hi in found:
                    df[t] += int(np.count_nonzero(visible[seg.docs[lo:hi]]))
        avg = length / docs if docs else 1.0
        return _Stats(docs, avg or 1.0, df)


class Corpus:
    """The documents a reader's statistics are taken over (a clearance's), as a flag per
    position of one index's ``keys``; made by ``BM25Index.corpus``.

    A search whose view is ``within`` a corpus counts N, the total length and each
    query term's document frequency over the corpus's documents alone, so its scores
    are those of an index holding only them; nothing outside it is returned. Counts
    over the current documents are kept, since the index's views never change: the
    totals per segment on first use, each term's frequency on the first query that
    names it (one pass over that term's postings, skipped in segments that lie wholly
    inside or outside the corpus). Counts as of a past moment are taken per search,
    as they are without a corpus.
    """

    def __init__(self, index: BM25Index, mask: npt.NDArray[np.bool_]) -> None:
        if mask.shape != (index.size,):
            raise ValueError(f"a corpus mask has shape {mask.shape}, expected ({index.size},)")
        self.index = index
        self.mask = mask
        ends = index._offsets.tolist()
        self._parts = [mask[lo:hi] for lo, hi in itertools.pairwise(ends)]
        # Per segment: True when all of it is in the corpus, False when none is, else None.
        self._whole: list[bool | None] = [
            True if part.all() else False if not part.any() else None for part in self._parts
        ]
        self._current: list[npt.NDArray[np.bool_] | None] | None = None
        self._totals: tuple[int, int] | None = None
        self._df: dict[int, int] = {}

    @property
    def size(self) -> int:
        """Current documents in the corpus."""
        return self._current_totals()[0]

    def _current_parts(self) -> list[npt.NDArray[np.bool_] | None]:
        """Per segment partly in the corpus: its documents in it and current."""
        if self._current is None:
            self._current = [
                None if whole is not None else part & v.current
                for v, part, whole in zip(self.index._views, self._parts, self._whole, strict=True)
            ]
        return self._current

    def _current_totals(self) -> tuple[int, int]:
        if self._totals is None:
            docs = length = 0
            views = self.index._views
            for v, whole, current in zip(views, self._whole, self._current_parts(), strict=True):
                if whole:
                    docs += v.segment.size - v.dead_docs
                    length += v.total_length - v.dead_length
                elif current is not None:
                    docs += int(np.count_nonzero(current))
                    length += int(v.segment.lengths[current].sum(dtype=np.int64))
            self._totals = (docs, length)
        return self._totals

    def stats(self, terms: Sequence[int], present: list[list[_Term]], view: View) -> _Stats:
        """The statistics of ``terms`` (found at ``present``, per segment) over the
        documents of ``view`` that are in the corpus."""
        if view.as_of is None:
            docs, length = self._current_totals()
            df = self._current_df(terms, present)
        else:
            docs = length = 0
            df = dict.fromkeys(terms, 0)
            for v, part, whole, found in zip(
                self.index._views, self._parts, self._whole, present, strict=True
            ):
                if whole is False:
                    continue
                seen = v.visible(view) if whole else v.visible(view) & part
                docs += int(np.count_nonzero(seen))
                length += int(v.segment.lengths[seen].sum(dtype=np.int64))
                for t, _, lo, hi in found:
                    df[t] += int(np.count_nonzero(seen[v.segment.docs[lo:hi]]))
        avg = length / docs if docs else 1.0
        return _Stats(docs, avg or 1.0, df)

    def _current_df(self, terms: Sequence[int], present: list[list[_Term]]) -> dict[int, int]:
        """Each term's current document frequency in the corpus, counted once per term.
        (Searches may run in worker threads: the kept counts are only read and added to.)"""
        df: dict[int, int] = {}
        for t in terms:
            known = self._df.get(t)
            if known is not None:
                df[t] = known
        missing = {t: 0 for t in terms if t not in df}
        if not missing:
            return df
        views = self.index._views
        for v, whole, current, found in zip(
            views, self._whole, self._current_parts(), present, strict=True
        ):
            if whole is False:
                continue
            for t, j, lo, hi in found:
                if t not in missing:
                    continue
                if current is None:
                    missing[t] += (hi - lo) - v.dead_count(j)
                else:
                    missing[t] += int(np.count_nonzero(current[v.segment.docs[lo:hi]]))
        if len(self._df) + len(missing) > _CORPUS_TERMS:
            self._df = {}
        self._df.update(missing)
        df.update(missing)
        return df


# Term frequencies a corpus keeps (past this many it starts again).
_CORPUS_TERMS = 100_000


def _idf(stats: _Stats) -> dict[int, float]:
    n = stats.docs
    return {t: math.log1p((n - df + 0.5) / (df + 0.5)) for t, df in stats.df.items() if df > 0}


# (term id, index in the segment's term table, first posting, end of postings)
_Term = tuple[int, int, int, int]
# What the kernel returns per hit: (key, score, tied, local document number).
_KernelHit = tuple[int, float, bool, int]


@dataclass(frozen=True, slots=True)
class TermLookup:
    """A query's term ids (ascending), where each segment holds them, and their
    postings in all (``BM25Index.lookup``)."""

    wanted: list[int]
    present: list[list[_Term]]
    postings: int


# Below this many candidates, scoring them all costs less than narrowing them down.
_NARROW_FROM = 1024
# A segment this small, searched for terms with this few postings, is scored whole
# (``run_dense``): a few array operations per term instead of a lookup per candidate.
# Measured on SciFact (7k chunks): 0.40 ms against 1.1 ms end to end at p50; on a
# segment much larger than the postings, the array itself costs more than it saves.
_DENSE_POSTINGS = 65536
_DENSE_RATIO = 4.0
# Segments of up to this many postings keep their per-posting weights between
# searches (8 bytes a posting: 16 MB at most per segment).
_CACHED_POSTINGS = 2_000_000


def _present(seg: Segment, wanted: list[int]) -> list[_Term]:
    """The query terms this segment holds, with their posting ranges (one lookup)."""
    if seg.terms.shape[0] == 0 or not wanted:
        return []
    if _kernel is not None and _USE_KERNEL:
        try:
            found: list[_Term] = _kernel.locate(seg.terms, seg.term_ptr, wanted)
        except ValueError as exc:
            raise _damaged(exc) from None
        return found
    query_ids = np.asarray(wanted, dtype=np.int32)
    at = np.searchsorted(seg.terms, query_ids)
    np.minimum(at, seg.terms.shape[0] - 1, out=at)
    hit = seg.terms[at] == query_ids
    if not hit.any():
        return []
    js = at[hit]
    starts, ends = seg.term_ptr[js].tolist(), seg.term_ptr[js + 1].tolist()
    return list(zip(query_ids[hit].tolist(), js.tolist(), starts, ends, strict=True))


def _damaged(exc: ValueError) -> StorageError:
    """What a search says when a segment's arrays do not fit together (the kernel checks
    every index it reads, so it stops there instead of reading out of bounds)."""
    return StorageError(
        f"the lexical index is damaged ({exc}); remove the collection's .segments "
        "directory and it is rebuilt from the store at the next open"
    )


@dataclass(frozen=True, slots=True)
class _Norm:
    """BM25's length normalisation for one search's statistics:
    ``k1 * (1 - b + b * len / avg)``, computed as ``base + per_length * len``."""

    k1: float
    b: float
    avg: float
    base: float = 0.0
    per_length: float = 0.0

    @classmethod
    def of(cls, k1: float, b: float, avg: float) -> _Norm:
        return cls(k1, b, avg, k1 * (1.0 - b), k1 * b / avg)

    def lengths(self, length: npt.NDArray[np.generic]) -> npt.NDArray[np.float64]:
        return self.base + self.per_length * np.asarray(length, dtype=np.float64)

    def weight(self, tf: float, length: float) -> float:
        if tf <= 0.0:
            return 0.0
        return tf / (tf + (self.base + self.per_length * length))

    def weights(
        self, tf: npt.NDArray[np.generic], length: npt.NDArray[np.generic]
    ) -> npt.NDArray[np.float64]:
        tf64 = np.asarray(tf, dtype=np.float64)
        return tf64 / (tf64 + self.lengths(length))


class _SegmentSearch:
    """One segment's part of a search: bounds, candidates, exact scores."""

    def __init__(
        self,
        view: SegmentView,
        seg_no: int,
        terms: list[_Term],
        scale: dict[int, float],
        norm: _Norm,
        visible: npt.NDArray[np.bool_],
        mask: npt.NDArray[np.bool_] | None,
    ) -> None:
        self.view = view
        self.seg = view.segment
        self.seg_no = seg_no
        self.terms = terms
        self.scale = scale
        self.norm = norm
        self.visible = visible
        self.mask = mask
        self.bound: dict[int, float] = {}
        self.total_bound = 0.0
        self.scored = 0  # documents the compiled kernel scored exactly (tests read it)

    def _bounds(self) -> None:
        """Each term's largest possible weight here (what pruning needs; a segment
        scored whole never asks)."""
        seg, norm, scale = self.seg, self.norm, self.scale
        self.bound = {
            t: scale[t]
            * norm.weight(float(seg.term_max_tf[j]), float(seg.term_min_len[j]))
            * _SLACK
            for t, j, _, _ in self.terms
        }
        self.total_bound = sum(self.bound.values())

    def allowed(self, docs: npt.NDArray[np.uint32]) -> npt.NDArray[np.bool_]:
        keep = self.visible[docs]
        if self.mask is not None:
            keep &= self.mask[docs]
        return keep

    def run(self, best: _TopK, prune: bool) -> None:
        if not all(0.0 < self.scale[t] < _INF for t, _, _, _ in self.terms):
            # An idf of 0 or below counts a term in more documents than there are: the
            # counts kept beside the segments are damaged. Refused on both paths, as the
            # kernel refuses such a weight, before anything is scored with it.
            raise _damaged(ValueError("a query term's weight is not a finite number above 0"))
        if prune and _kernel is not None and _USE_KERNEL:
            self.run_compiled(best)
            return
        try:
            self.run_numpy(best, prune)
        except (IndexError, ValueError) as exc:
            # What the kernel checks as it reads, numpy meets as an index out of range
            # (loaded segments are checked whole first: one made in memory may not be).
            raise _damaged(ValueError(f"its arrays do not fit together: {exc}")) from None

    def run_numpy(self, best: _TopK, prune: bool) -> None:
        if _kernel is None:
            _say_numpy_once()
        postings = sum(hi - lo for _, _, lo, hi in self.terms)
        if prune and postings <= _DENSE_POSTINGS and self.seg.size <= _DENSE_RATIO * postings:
            self.run_dense(best)
            return
        self._bounds()
        if prune and best.threshold <= 0.0:
            best.raise_threshold(self.first_threshold(best.k))
        # The threshold is a float32 score; the sums compared with it are float64, which
        # can sit just below a float32 value that rounds them up: compare with room.
        theta = best.threshold / _SLACK if prune else 0.0
        if self.total_bound < theta:
            return  # nothing in this segment can reach the current top k
        # Essential terms: all but the longest run of low bounds that sums below theta.
        essential: list[_Term] = []
        running = 0.0
        for term in sorted(self.terms, key=lambda p: (self.bound[p[0]], p[0])):
            running += self.bound[term[0]]
            if running >= theta:
                essential.append(term)
        candidates = self.candidates(essential, theta)
        if candidates.size == 0:
            return
        candidates = candidates[self.allowed(candidates)]
        if candidates.size == 0:
            return
        scored = self.score(candidates, theta)
        if scored is not None:
            best.offer(scored[1], scored[0], self.seg, self.seg_no)

    def run_compiled(self, best: _TopK) -> None:
        """The segment's own top k from the compiled kernel (the same MaxScore bounds,
        document at a time with block skipping; the same sums, so the same bits)."""
        terms = sorted(self.terms)
        spans = [(lo, hi, j) for _, j, lo, hi in terms]
        scales = [self.scale[t] for t, _, _, _ in terms]
        everyone = self.visible is self.view.current and not self.view.dead_docs
        try:
            hits, scored = self._top_k(spans, scales, everyone, best)
        except ValueError as exc:  # arrays that do not fit: checked there, never read past
            raise _damaged(exc) from None
        self.scored = scored
        if hits:
            best.offer_ranked(hits, self.seg, self.seg_no)

    def _top_k(
        self,
        spans: list[tuple[int, int, int]],
        scales: list[float],
        everyone: bool,
        best: _TopK,
    ) -> tuple[list[_KernelHit], int]:
        assert _kernel is not None
        seg = self.seg
        found: tuple[list[_KernelHit], int] = _kernel.top_k(
            seg.docs,
            seg.tfs,
            seg.lengths,
            seg.term_max_tf,
            seg.term_min_len,
            seg.block_ptr,
            seg.block_max_tf,
            seg.block_min_len,
            seg.keys,
            seg.order,
            spans,
            scales,
            self.norm.base,
            self.norm.per_length,
            None if everyone else self.visible,
            self.mask,
            best.k,
            best.threshold,
            best.floor,
            _KERNEL_MODE,
        )
        return found

    def run_dense(self, best: _TopK) -> None:
        """Every posting of the query terms added into one array of the segment's
        documents: when those postings are few, cheaper than narrowing candidates
        down. The same additions in the same term order as ``score``, so the same bits."""
        seg = self.seg
        terms = sorted(self.terms)
        counts = np.array([hi - lo for _, _, lo, hi in terms], dtype=np.int64)
        firsts = np.array([lo for _, _, lo, _ in terms], dtype=np.int64)
        # Every posting of every term, terms in id order: one gather, not one per term.
        at = np.arange(int(counts.sum()), dtype=np.int64)
        at += np.repeat(firsts - (np.cumsum(counts) - counts), counts)
        docs = seg.docs[at]
        cached = self.view.tf_weights(self.norm)
        if cached is not None:
            weight = cached[at]
        else:
            tf = seg.tfs[at].astype(np.float64)
            weight = tf / (tf + self.norm.lengths(seg.lengths)[docs])
        weight *= np.repeat(np.array([self.scale[t] for t, _, _, _ in terms]), counts)
        # bincount adds in input order, so each document's sum runs in term-id order.
        total = np.bincount(docs, weights=weight, minlength=seg.size)
        keep = total > 0.0
        keep &= self.visible
        if self.mask is not None:
            keep &= self.mask
        docs_kept = np.flatnonzero(keep).astype(np.uint32)
        if docs_kept.size:
            best.offer(total[docs_kept].astype(np.float32), docs_kept, seg, self.seg_no)

    def first_threshold(self, k: int) -> float:
        """A score at least k allowed documents reach: the k-th best single-term weight.

        A document's score is at least any one of its term weights, so if k
        documents each hold a weight of at least ``w`` in some term, the k-th
        best score is at least ``w``. The rarest term is used (fewest postings).
        """
        t, _, lo, hi = min(self.terms, key=lambda p: (p[3] - p[2], p[0]))
        if hi - lo < k:
            return 0.0
        docs = self.seg.docs[lo:hi]
        keep = self.allowed(docs)
        if int(keep.sum()) < k:
            return 0.0
        weights = self.scale[t] * self.norm.weights(
            self.seg.tfs[lo:hi][keep], self.seg.lengths[docs[keep]]
        )
        return float(np.partition(weights, weights.size - k)[weights.size - k])

    def candidates(self, essential: list[_Term], theta: float) -> npt.NDArray[np.uint32]:
        """Local documents holding an essential term in a block that can still matter."""
        seg = self.seg
        parts: list[npt.NDArray[np.uint32]] = []
        for t, j, lo, hi in essential:
            docs = seg.docs[lo:hi]
            if theta > 0.0 and hi - lo > BLOCK:
                b0, b1 = int(seg.block_ptr[j]), int(seg.block_ptr[j + 1])
                others = self.total_bound - self.bound[t]
                block_bound = (
                    self.scale[t]
                    * self.norm.weights(seg.block_max_tf[b0:b1], seg.block_min_len[b0:b1])
                    * _SLACK
                )
                keep = block_bound + others >= theta
                if not keep.any():
                    continue
                if not keep.all():
                    docs = docs[np.repeat(keep, _block_sizes(hi - lo, b1 - b0))]
            parts.append(docs)
        if not parts:
            return np.zeros(0, dtype=np.uint32)
        if len(parts) == 1:
            return np.asarray(parts[0], dtype=np.uint32)
        return sorted_union(parts)

    def score(
        self, candidates: npt.NDArray[np.uint32], theta: float
    ) -> tuple[npt.NDArray[np.uint32], npt.NDArray[np.float32]] | None:
        """Exact scores of ``candidates``: each term's weight looked up and added in
        term-id order (the one order every path sums in, so scores agree bitwise)."""
        seg = self.seg
        norm = self.norm.lengths(seg.lengths[candidates])
        total = np.zeros(candidates.shape[0], dtype=np.float64)
        remaining = self.total_bound
        for t, _, lo, hi in sorted(self.terms):
            docs = seg.docs[lo:hi]
            at = np.searchsorted(docs, candidates)
            np.minimum(at, docs.shape[0] - 1, out=at)
            hit = np.flatnonzero(docs[at] == candidates)
            if hit.size:
                tf = seg.tfs[lo:hi][at[hit]].astype(np.float64)
                total[hit] += self.scale[t] * (tf / (tf + norm[hit]))
            remaining -= self.bound[t]
            if theta > 0.0 and remaining > 0.0 and candidates.shape[0] >= _NARROW_FROM:
                hopeful = total + remaining >= theta
                if not hopeful.all():
                    candidates, norm, total = candidates[hopeful], norm[hopeful], total[hopeful]
                    if candidates.size == 0:
                        return None
        matched = total > 0.0
        if not matched.any():
            return None
        return candidates[matched], total[matched].astype(np.float32)


def sorted_union(parts: Sequence[npt.NDArray[_N]]) -> npt.NDArray[_N]:
    """The sorted union of arrays: concatenated, merged (a stable sort merges
    ascending runs in about linear time), duplicates dropped. numpy's own ``unique``
    hashes, which was ten times slower on posting lists, and imports ``numpy.ma``
    (about 18 ms) the first time a process calls it."""
    merged = np.concatenate(parts)
    merged.sort(kind="stable")
    if merged.size < 2:
        return merged
    keep = np.empty(merged.shape[0], dtype=np.bool_)
    keep[0] = True
    np.not_equal(merged[1:], merged[:-1], out=keep[1:])
    return merged[keep]


def _block_sizes(postings: int, blocks: int) -> npt.NDArray[np.int64]:
    sizes = np.full(blocks, BLOCK, dtype=np.int64)
    if blocks:
        sizes[-1] = postings - BLOCK * (blocks - 1)
    return sizes


class _TopK:
    """The best k candidates so far, ordered by ``(-score, tie key, segment, document)``."""

    def __init__(self, k: int, floor: float) -> None:
        if math.isnan(floor):
            raise ValueError("a score threshold must be a number")
        self.k = k
        self._floor = floor
        self._scores = _NO_SCORES
        self._order = _NO_ORDER
        self._where = _NO_WHERE  # (segment, local document)
        self._threshold = floor
        # One segment's ranked best, kept as the kernel gave it until another segment
        # offers more (most searches have one segment with the query's terms).
        self._ranked: tuple[list[_KernelHit], Segment, int] | None = None

    @property
    def threshold(self) -> float:
        return self._threshold

    @property
    def floor(self) -> float:
        return self._floor

    def raise_threshold(self, value: float) -> float:
        self._threshold = max(self._threshold, value)
        return self._threshold

    def offer(
        self,
        scores: npt.NDArray[np.float32],
        docs: npt.NDArray[np.uint32],
        seg: Segment,
        seg_no: int,
    ) -> None:
        """Take a segment's candidates (any order; those below the floor are dropped)."""
        self._unpack_ranked()
        keep = scores >= np.float32(self._floor) if self._floor > 0.0 else scores > 0.0
        if not keep.all():
            scores, docs = scores[keep], docs[keep]
        if scores.size == 0:
            return
        if scores.size > self.k:
            # Only this segment's own k best (and ties with its k-th) can make the cut.
            cut = scores.size - self.k
            kth = np.partition(scores, cut)[cut]
            keep = scores >= kth
            scores, docs = scores[keep], docs[keep]
        where = np.stack(
            [np.full(docs.shape[0], seg_no, dtype=np.int64), docs.astype(np.int64)], axis=1
        )
        all_scores = np.concatenate([self._scores, scores])
        all_order = np.concatenate([self._order, seg.order[docs]])
        all_where = np.concatenate([self._where, where])
        if all_scores.size > self.k:
            # Everything at or above the k-th score survives the cut (ties decided below).
            cut = all_scores.size - self.k
            kth = np.partition(all_scores, cut)[cut]
            survive = all_scores >= kth
            all_scores, all_order, all_where = (
                all_scores[survive],
                all_order[survive],
                all_where[survive],
            )
        rank = np.lexsort(
            (
                all_where[:, 1],
                all_where[:, 0],
                all_order[:, 2],
                all_order[:, 1],
                all_order[:, 0],
                -all_scores.astype(np.float64),
            )
        )
        # Keep the k best plus everything tied with the k-th on score and tie key.
        keep_n = min(self.k, rank.size)
        if rank.size > keep_n:
            last = rank[keep_n - 1]
            same = (all_scores[rank[keep_n:]] == all_scores[last]) & np.all(
                all_order[rank[keep_n:]] == all_order[last], axis=1
            )
            keep_n += int(np.argmin(same)) if not same.all() else int(same.size)
        rank = rank[:keep_n]
        self._scores, self._order, self._where = all_scores[rank], all_order[rank], all_where[rank]
        if self._scores.size >= self.k:
            self._threshold = max(self._threshold, float(self._scores[self.k - 1]))

    def offer_ranked(self, hits: list[_KernelHit], seg: Segment, seg_no: int) -> None:
        """Take a segment's own best from the kernel: at most k, best first, each
        ``(key, score, tied, document)``, the floor already applied."""
        if self._ranked is None and self._scores.size == 0:
            self._ranked = (hits, seg, seg_no)
            if len(hits) >= self.k:
                self._threshold = max(self._threshold, hits[self.k - 1][1])
            return
        scores = np.array([h[1] for h in hits], dtype=np.float32)
        docs = np.array([h[3] for h in hits], dtype=np.uint32)
        self.offer(scores, docs, seg, seg_no)

    def _unpack_ranked(self) -> None:
        """The kept segment's hits as arrays, to merge with another segment's."""
        if self._ranked is None:
            return
        hits, seg, seg_no = self._ranked
        self._ranked = None
        docs = np.array([h[3] for h in hits], dtype=np.int64)
        self._scores = np.array([h[1] for h in hits], dtype=np.float32)
        self._order = seg.order[docs]
        self._where = np.empty((docs.shape[0], 2), dtype=np.int64)
        self._where[:, 0] = seg_no
        self._where[:, 1] = docs

    def result(self, views: Sequence[SegmentView]) -> list[tuple[int, float, bool]]:
        if self._ranked is not None:
            return [(key, score, tied) for key, score, tied, _ in self._ranked[0]]
        n = self._scores.size
        if n == 0:
            return []
        scores = self._scores.tolist()
        where = self._where.tolist()
        tied = [False] * n
        for i in range(n - 1):
            # Equal scores are rare; only then are the tie keys compared.
            if scores[i] == scores[i + 1] and bool((self._order[i] == self._order[i + 1]).all()):
                tied[i] = tied[i + 1] = True
        return [
            (int(views[seg_no].segment.keys[doc]), score, is_tied)
            for (seg_no, doc), score, is_tied in zip(where, scores, tied, strict=True)
        ]


_NO_SCORES = np.zeros(0, dtype=np.float32)
_NO_ORDER = np.zeros((0, ORDER_COLUMNS), dtype=np.uint64)
_NO_WHERE = np.zeros((0, 2), dtype=np.int64)


def segment_from_batches(batches: Sequence[PostingsBatch]) -> Segment:
    """One segment from postings batches in canonical order (position breaks ties)."""
    if not batches:
        return empty_segment()
    keys = np.concatenate([p.keys for p in batches])
    n = int(keys.shape[0])
    if n == 0:
        return empty_segment()
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.concatenate([np.diff(p.offsets) for p in batches]), out=offsets[1:])
    term_ids = np.concatenate([p.term_ids for p in batches]).astype(np.int32)
    tfs = np.concatenate([p.tfs for p in batches]).astype(np.int32)
    orders = [getattr(p, "order", None) for p in batches]
    order: npt.NDArray[np.uint64]
    if all(o is not None for o in orders):
        order = np.concatenate([np.asarray(o, dtype=np.uint64) for o in orders])
    else:
        order = np.zeros((n, ORDER_COLUMNS), dtype=np.uint64)
        order[:, 0] = np.arange(n, dtype=np.uint64)
    starts = [getattr(p, "valid_from", None) for p in batches]
    valid_from: npt.NDArray[np.float64]
    if all(s is not None for s in starts):
        valid_from = np.concatenate([np.asarray(s, dtype=np.float64) for s in starts])
    else:
        valid_from = np.full(n, -_INF, dtype=np.float64)
    return build_segment(keys, offsets, term_ids, tfs, order, valid_from)


def view_from_batches(batches: Sequence[PostingsBatch]) -> SegmentView:
    """A view of one new segment from postings batches, with each chunk's validity
    when the batches carry it (``valid_to``: ``inf`` current, ``-inf`` removed)."""
    segment = segment_from_batches(batches)
    ends = [getattr(p, "valid_to", None) for p in batches]
    if segment.size == 0 or not all(e is not None for e in ends):
        return SegmentView.fresh(segment)
    incoming = np.concatenate([np.asarray(e, dtype=np.float64) for e in ends])
    if bool((incoming == _INF).all()):
        return SegmentView.fresh(segment)
    keys = np.concatenate([p.keys for p in batches]).astype(np.int64)
    valid_to = np.full(segment.size, _INF, dtype=np.float64)
    valid_to[segment.locate(keys)] = incoming
    return SegmentView.with_valid_to(segment, valid_to)
