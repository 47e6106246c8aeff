"""An immutable lexical segment: postings of a set of chunks, laid out to be mapped.

A segment holds raw term frequencies and document lengths, not BM25 weights:
collection statistics (document count, average length, document frequencies)
change with every write, so weights are computed at query time from the
statistics of the moment, and a segment written once stays exact forever
(adr/0030-lexical-segments.md).

Documents are numbered ``0..n-1`` in canonical order (``content_hash``,
``chunk_index``, ``document_id``), so within a segment a lower number wins a
tie; across segments ``order`` (the first 64 bits of the content hash, the
chunk index and the first eight bytes of the document id) decides, and a tie
on all of it is resolved by the caller from the stored rows.

Each term's postings are ascending local document numbers, cut into blocks of
``BLOCK`` postings; for each block (and each term) the largest frequency and
the shortest document are kept, which bound any weight in it under any
statistics, since a BM25 weight grows with frequency and shrinks with length.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from groundkit.utils.ties import ORDER_COLUMNS, order_key

__all__ = [
    "BLOCK",
    "ORDER_COLUMNS",
    "Segment",
    "assemble",
    "build_segment",
    "check_segment_arrays",
    "merge_segments",
    "order_key",
    "segment_damage",
]

BLOCK = 128

U32 = npt.NDArray[np.uint32]
I64 = npt.NDArray[np.int64]
# Counts (frequencies, lengths and their block bounds) are stored in the narrowest
# unsigned type that holds them: most corpora need one or two bytes, not four.
Counts = npt.NDArray[np.uint8] | npt.NDArray[np.uint16] | U32


def narrowest(values: npt.NDArray[np.generic]) -> Counts:
    """``values`` (non-negative, below 2**32) in the smallest of uint8/16/32 that holds them."""
    top = int(values.max()) if values.size else 0
    if top <= 0xFF:
        return np.asarray(values).astype(np.uint8)
    if top <= 0xFFFF:
        return np.asarray(values).astype(np.uint16)
    return np.asarray(values).astype(np.uint32)


@dataclass(frozen=True, slots=True)
class Segment:
    """Arrays of one segment; any of them may be a read-only memory map."""

    keys: I64  # store key of each document (chunk)
    lengths: Counts  # number of terms (sum of frequencies) of each document
    order: npt.NDArray[np.uint64]  # (n, ORDER_COLUMNS) canonical tie key
    valid_from: npt.NDArray[np.float64]  # when each document's version became current
    terms: npt.NDArray[np.int32]  # global term ids present, ascending
    term_ptr: I64  # postings of terms[i] are [term_ptr[i], term_ptr[i + 1])
    docs: U32  # local document numbers, ascending within each term
    tfs: Counts  # term frequency of each posting
    term_max_tf: Counts
    term_min_len: Counts
    block_ptr: I64  # blocks of terms[i] are [block_ptr[i], block_ptr[i + 1])
    block_max_tf: Counts
    block_min_len: Counts
    by_key: U32  # local document numbers in ascending key order (key -> document lookups)

    @property
    def size(self) -> int:
        return int(self.keys.shape[0])

    @property
    def total_length(self) -> int:
        """Sum of every document's length (read once per segment: see ``SegmentView``)."""
        return int(self.lengths.sum(dtype=np.int64))

    def term_index(self, term_id: int) -> int:
        """Position of ``term_id`` in ``terms``, or -1 when no document holds it."""
        i = int(np.searchsorted(self.terms, term_id))
        return i if i < self.terms.shape[0] and int(self.terms[i]) == term_id else -1

    def locate(self, keys: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
        """Local document number of each of ``keys`` (-1 where the segment lacks it)."""
        if self.size == 0:
            return np.full(keys.shape[0], -1, dtype=np.int64)
        sorted_keys = self.keys[self.by_key]
        at = np.searchsorted(sorted_keys, keys)
        at = np.minimum(at, self.size - 1)
        found = sorted_keys[at] == keys
        return np.where(found, self.by_key[at].astype(np.int64), -1)

    def arrays(self) -> dict[str, npt.NDArray[np.generic]]:
        """Every array by field name (what a segment file stores)."""
        return {name: getattr(self, name) for name in self.__slots__}


def build_segment(
    keys: Sequence[int] | I64,
    offsets: I64,
    term_ids: npt.NDArray[np.int32],
    tfs: npt.NDArray[np.int32],
    order: npt.NDArray[np.uint64],
    valid_from: npt.NDArray[np.float64],
) -> Segment:
    """A segment from per-chunk postings (``ChunkPostings`` layout) and tie keys.

    ``keys[i]``'s unique term ids are ``term_ids[offsets[i]:offsets[i+1]]``
    with frequencies ``tfs`` at the same positions. Chunks may come in any
    order: they are renumbered canonically here.
    """
    keys_arr = np.asarray(keys, dtype=np.int64)
    n = int(keys_arr.shape[0])
    order_arr = np.asarray(order, dtype=np.uint64).reshape(n, ORDER_COLUMNS)
    offsets_arr = np.asarray(offsets, dtype=np.int64)
    counts: I64 = np.diff(offsets_arr).astype(np.int64)
    if counts.shape[0] != n or np.asarray(valid_from).shape != (n,):
        raise ValueError("one offset range, order row and valid_from per chunk is required")
    raw_tfs = np.asarray(tfs, dtype=np.int64)
    post_term = np.asarray(term_ids, dtype=np.int64)
    lengths = np.bincount(
        np.repeat(np.arange(n, dtype=np.int64), counts), weights=raw_tfs, minlength=n
    ).astype(np.uint32)

    # Canonical numbering: lexicographic on (hash prefix, chunk index, document prefix),
    # then the incoming position.
    rank = np.lexsort((np.arange(n), order_arr[:, 2], order_arr[:, 1], order_arr[:, 0]))
    if n and not bool((rank == np.arange(n)).all()):
        # Chunks' postings moved into canonical order, each chunk's run kept whole.
        moved = counts[rank]
        starts = np.zeros(n, dtype=np.int64)
        np.cumsum(moved[:-1], out=starts[1:])
        gather = np.repeat(offsets_arr[:-1][rank] - starts, moved) + np.arange(
            int(moved.sum()), dtype=np.int64
        )
        post_term, raw_tfs, counts = post_term[gather], raw_tfs[gather], moved
    post_doc = np.repeat(np.arange(n, dtype=np.int64), counts)
    # Documents are ascending already: a stable sort by term makes it term-major.
    by_term = stable_order(post_term)
    return assemble(
        keys_arr[rank],
        lengths[rank],
        order_arr[rank],
        np.asarray(valid_from, dtype=np.float64)[rank],
        post_term[by_term],
        post_doc[by_term],
        raw_tfs[by_term],
    )


def stable_order(values: I64) -> I64:
    """A stable argsort of non-negative values below 2**32, by 16-bit radix passes
    (numpy sorts 16-bit keys by radix: about twice as fast as a stable sort of the
    whole value, on tens of millions of postings)."""
    if values.size == 0:
        return np.zeros(0, dtype=np.int64)
    order = np.argsort((values & 0xFFFF).astype(np.uint16), kind="stable")
    if int(values.max()) > 0xFFFF:
        high = (values[order] >> 16).astype(np.uint16)
        order = order[np.argsort(high, kind="stable")]
    return order.astype(np.int64)


def assemble(
    keys: I64,
    lengths: npt.NDArray[np.generic],
    order: npt.NDArray[np.uint64],
    valid_from: npt.NDArray[np.float64],
    post_term: I64,
    post_doc: I64,
    raw_tfs: I64,
) -> Segment:
    """A segment from documents already numbered canonically and postings sorted by
    ``(term, document)``: the term table, block bounds and key lookup are derived."""
    total = int(post_term.shape[0])
    if total:
        starts = np.flatnonzero(np.diff(post_term)) + 1
        starts = np.concatenate([np.zeros(1, dtype=np.int64), starts])
    else:
        starts = np.zeros(0, dtype=np.int64)
    terms = post_term[starts]
    term_ptr = np.append(starts, total).astype(np.int64)

    posting_len = np.asarray(lengths, dtype=np.uint32)[post_doc]

    sizes = np.diff(term_ptr)
    blocks_per_term = (sizes + BLOCK - 1) // BLOCK
    block_ptr = np.zeros(terms.shape[0] + 1, dtype=np.int64)
    np.cumsum(blocks_per_term, out=block_ptr[1:])
    n_blocks = int(block_ptr[-1])
    # Each block is a contiguous run of its term's postings: reduce over the runs.
    first = np.repeat(term_ptr[:-1], blocks_per_term)
    within = np.arange(n_blocks, dtype=np.int64) - np.repeat(block_ptr[:-1], blocks_per_term)
    block_start = first + within * BLOCK
    empty = np.zeros(0, dtype=np.uint32)
    block_max_tf, block_min_len, term_max_tf, term_min_len = empty, empty, empty, empty
    if n_blocks:
        block_max_tf = np.maximum.reduceat(raw_tfs, block_start)
        block_min_len = np.minimum.reduceat(posting_len, block_start)
        first_block = block_ptr[:-1]
        term_max_tf = np.maximum.reduceat(block_max_tf, first_block)
        term_min_len = np.minimum.reduceat(block_min_len, first_block)

    return Segment(
        keys=np.asarray(keys, dtype=np.int64),
        lengths=narrowest(np.asarray(lengths)),
        order=np.asarray(order, dtype=np.uint64),
        valid_from=np.asarray(valid_from, dtype=np.float64),
        terms=terms.astype(np.int32),
        term_ptr=term_ptr,
        docs=post_doc.astype(np.uint32),
        tfs=narrowest(raw_tfs),
        term_max_tf=narrowest(term_max_tf),
        term_min_len=narrowest(term_min_len),
        block_ptr=block_ptr,
        block_max_tf=narrowest(block_max_tf),
        block_min_len=narrowest(block_min_len),
        by_key=np.argsort(keys, kind="stable").astype(np.uint32),
    )


def merge_segments(
    parts: Sequence[tuple[Segment, npt.NDArray[np.bool_]]],
) -> tuple[Segment, list[npt.NDArray[np.int64]]]:
    """One segment holding the ``keep``-flagged documents of each ``(segment, keep)``.

    Returns the merged segment and, per part, each old document's new number
    (-1 where dropped). A segment's own numbering is canonical, so the new
    numbers keep each part's order: every part's postings stay sorted after
    renumbering and one stable sort merges those runs.
    """
    kept = [np.flatnonzero(keep) for _, keep in parts]
    keys = np.concatenate([seg.keys[k] for (seg, _), k in zip(parts, kept, strict=True)])
    order = np.concatenate([seg.order[k] for (seg, _), k in zip(parts, kept, strict=True)])
    order = order.reshape(-1, ORDER_COLUMNS)
    n = int(keys.shape[0])
    # Full ties on the stored key keep their part order, then their order within it.
    rank = np.lexsort((np.arange(n), order[:, 2], order[:, 1], order[:, 0]))
    new_of_merged = np.empty(n, dtype=np.int64)
    new_of_merged[rank] = np.arange(n, dtype=np.int64)
    numbering: list[npt.NDArray[np.int64]] = []
    terms_parts: list[I64] = []
    docs_parts: list[I64] = []
    tfs_parts: list[I64] = []
    base = 0
    for (seg, _), k in zip(parts, kept, strict=True):
        new_local = np.full(seg.size, -1, dtype=np.int64)
        new_local[k] = new_of_merged[base : base + k.shape[0]]
        base += int(k.shape[0])
        numbering.append(new_local)
        post_term = np.repeat(seg.terms.astype(np.int64), np.diff(seg.term_ptr))
        post_doc = new_local[seg.docs]
        live = post_doc >= 0
        terms_parts.append(post_term[live])
        docs_parts.append(post_doc[live])
        tfs_parts.append(seg.tfs[live].astype(np.int64))
    post_term = np.concatenate(terms_parts) if terms_parts else np.zeros(0, np.int64)
    post_doc = np.concatenate(docs_parts) if docs_parts else np.zeros(0, np.int64)
    raw_tfs = np.concatenate(tfs_parts) if tfs_parts else np.zeros(0, np.int64)
    by_term = np.argsort((post_term << 32) | post_doc, kind="stable")
    lengths = np.concatenate([seg.lengths[k] for (seg, _), k in zip(parts, kept, strict=True)])
    valid_from = np.concatenate(
        [seg.valid_from[k] for (seg, _), k in zip(parts, kept, strict=True)]
    )
    merged = assemble(
        keys[rank],
        lengths[rank],
        order[rank],
        valid_from[rank],
        post_term[by_term],
        post_doc[by_term],
        raw_tfs[by_term],
    )
    return merged, numbering


def empty_segment() -> Segment:
    empty_i64 = np.zeros(0, dtype=np.int64)
    return build_segment(
        empty_i64,
        np.zeros(1, dtype=np.int64),
        np.zeros(0, dtype=np.int32),
        np.zeros(0, dtype=np.int32),
        np.zeros((0, ORDER_COLUMNS), dtype=np.uint64),
        np.zeros(0, dtype=np.float64),
    )


def segment_from_arrays(
    arrays: Mapping[str, npt.NDArray[np.generic]], *, checked: bool = False
) -> Segment:
    """A segment from stored arrays (``Segment.arrays()``), checked whole before any
    search reads it: ``ValueError`` naming the first thing that does not fit.

    A pack's checksum proves it is the file that was written, not that its writer was
    sound, so everything a search relies on is checked here, once per load, in a few
    vectorised passes (adr/0051-kernel-input-validation.md): types and shapes, the term
    and block tables, every posting's document (in range, ascending within its term)
    and frequency (at least 1), every block and term bound (an upper bound of what it
    covers) and the key lookup. The compiled kernel and the numpy path therefore search
    only segments that fit together, and give the same results on them; the kernel
    checks what it reads again, so a segment made in memory cannot crash it either.
    ``checked``: these very arrays already passed ``check_segment_arrays`` (run by
    the pack store that loaded them, or remembered by it), so the check is not run again.
    """
    seg = Segment(**{name: arrays[name] for name in Segment.__slots__})  # type: ignore[arg-type]
    problem = None if checked else segment_damage(seg)
    if problem is not None:
        raise ValueError(f"segment arrays do not fit together: {problem}")
    return seg


def check_segment_arrays(arrays: Mapping[str, npt.NDArray[np.generic]]) -> None:
    """``ValueError`` unless ``arrays`` make a segment that fits together."""
    try:
        segment_from_arrays(arrays)
    except (KeyError, TypeError) as exc:
        raise ValueError(
            f"segment arrays do not fit together: {exc!r} is missing or wrong"
        ) from None


# The arrays a search hands to the compiled kernel, and the element types it takes.
_COUNT_FIELDS = (
    "lengths",
    "tfs",
    "term_max_tf",
    "term_min_len",
    "block_max_tf",
    "block_min_len",
)
_TYPED_FIELDS = {
    "keys": np.dtype(np.int64),
    "order": np.dtype(np.uint64),
    "valid_from": np.dtype(np.float64),
    "terms": np.dtype(np.int32),
    "term_ptr": np.dtype(np.int64),
    "docs": np.dtype(np.uint32),
    "block_ptr": np.dtype(np.int64),
    "by_key": np.dtype(np.uint32),
}
# Postings checked per step: small enough to stay in cache (measured fastest on a
# 35M-posting segment), and the temporaries of a check never grow with the segment.
_CHECK_STEP = 1 << 18


def segment_damage(seg: Segment) -> str | None:
    """What does not fit together in ``seg`` (None: nothing). Linear in its size."""
    for name in _COUNT_FIELDS:
        array = getattr(seg, name)
        if not isinstance(array, np.ndarray) or array.dtype.kind != "u" or array.itemsize > 4:
            return f"{name} is not an array of uint8, uint16 or uint32"
    for name, dtype in _TYPED_FIELDS.items():
        array = getattr(seg, name)
        if not isinstance(array, np.ndarray) or array.dtype != dtype:
            return f"{name} is not an array of {dtype}"
    for name in Segment.__slots__:
        array = getattr(seg, name)
        if array.ndim == 0 or not array.flags.c_contiguous:
            return f"{name} is not a contiguous array"
    n, m = seg.size, int(seg.terms.shape[0])
    postings, blocks = int(seg.docs.shape[0]), int(seg.block_max_tf.shape[0])
    shapes = {
        "keys": (n,),
        "lengths": (n,),
        "order": (n, ORDER_COLUMNS),
        "valid_from": (n,),
        "by_key": (n,),
        "terms": (m,),
        "term_ptr": (m + 1,),
        "block_ptr": (m + 1,),
        "term_max_tf": (m,),
        "term_min_len": (m,),
        "docs": (postings,),
        "tfs": (postings,),
        "block_max_tf": (blocks,),
        "block_min_len": (blocks,),
    }
    for name, shape in shapes.items():
        if getattr(seg, name).shape != shape:
            return f"{name} has shape {getattr(seg, name).shape}, expected {shape}"
    return (
        _term_table_damage(seg, n, m, postings, blocks)
        or _postings_damage(seg, n, postings)
        or _order_damage(seg)
        or _key_lookup_damage(seg, n)
    )


def _term_table_damage(seg: Segment, n: int, m: int, postings: int, blocks: int) -> str | None:
    if n > 1 << 32:
        return "more documents than a posting can name"
    if int(seg.term_ptr[0]) != 0 or int(seg.term_ptr[-1]) != postings:
        return "the term table does not cover the postings"
    if int(seg.block_ptr[0]) != 0 or int(seg.block_ptr[-1]) != blocks:
        return "the block table does not cover the blocks"
    if m == 0:
        return None
    sizes = np.diff(seg.term_ptr)
    if not bool((sizes > 0).all()):
        return "the term table is out of order (a term without postings)"
    if not bool((seg.terms[1:] > seg.terms[:-1]).all()):
        return "the term ids are not ascending"
    if not np.array_equal(np.diff(seg.block_ptr), (sizes + BLOCK - 1) // BLOCK):
        return "a term's blocks do not match its postings"
    return None


def _postings_damage(seg: Segment, n: int, postings: int) -> str | None:
    """Every posting's document exists and rises within its term, every frequency is
    at least 1 (a weight of 0 would score a document for a term it does not hold),
    and every bound pruning relies on is one: a block's largest frequency and shortest
    document cover its postings, a term's cover its blocks."""
    if postings == 0:
        return None
    docs, tfs, lengths = seg.docs, seg.tfs, seg.lengths
    if int(docs.max()) >= n:
        return f"a posting names document {int(docs.max())}, past the segment's {n} documents"
    if int(tfs.min()) == 0:
        return "a posting has a term frequency of 0"
    per_term = np.diff(seg.block_ptr)
    block_start = np.repeat(seg.term_ptr[:-1], per_term) + BLOCK * (
        np.arange(int(seg.block_ptr[-1]), dtype=np.int64) - np.repeat(seg.block_ptr[:-1], per_term)
    )
    term_start = seg.term_ptr[1:-1]
    blocks = int(block_start.shape[0])
    # A run of whole blocks at a time: the run's documents are read once, while they
    # are in cache, and no temporary grows with the segment.
    step = _CHECK_STEP // BLOCK
    shortest = np.empty(step * BLOCK, dtype=lengths.dtype)
    for b0 in range(0, blocks, step):
        b1 = min(blocks, b0 + step)
        lo = int(block_start[b0])
        hi = int(block_start[b1]) if b1 < blocks else postings
        run = docs[lo:hi]
        start = max(lo, 1)
        rising = docs[start:hi] > docs[start - 1 : hi - 1]
        if not bool(rising.all()):
            # Only where a term's postings begin may a document number drop.
            falls = np.flatnonzero(~rising) + start
            at_term = np.minimum(np.searchsorted(term_start, falls), term_start.shape[0] - 1)
            if term_start.size == 0 or not np.array_equal(term_start[at_term], falls):
                return "a term's postings are not in ascending document order"
        at = block_start[b0:b1] - lo
        if bool((np.maximum.reduceat(tfs[lo:hi], at) > seg.block_max_tf[b0:b1]).any()):
            return "a block's largest term frequency is below one of its postings'"
        run_lengths = np.take(lengths, run, out=shortest[: hi - lo])
        if bool((np.minimum.reduceat(run_lengths, at) < seg.block_min_len[b0:b1]).any()):
            return "a block's shortest document is longer than one of its documents"
    first_block = seg.block_ptr[:-1]
    if bool((np.maximum.reduceat(seg.block_max_tf, first_block) > seg.term_max_tf).any()):
        return "a term's largest term frequency is below one of its blocks'"
    if bool((np.minimum.reduceat(seg.block_min_len, first_block) < seg.term_min_len).any()):
        return "a term's shortest document is longer than one of its blocks'"
    return None


def _order_damage(seg: Segment) -> str | None:
    """Documents are numbered in canonical order: the tie keys never fall from one
    document to the next (the kernel breaks ties by number, numpy by key)."""
    a, b = seg.order[:-1], seg.order[1:]
    below = (a[:, 1] < b[:, 1]) | ((a[:, 1] == b[:, 1]) & (a[:, 2] <= b[:, 2]))
    rises = (a[:, 0] < b[:, 0]) | ((a[:, 0] == b[:, 0]) & below)
    if not bool(rises.all()):
        return "the documents are not numbered in tie-key order"
    return None


def _key_lookup_damage(seg: Segment, n: int) -> str | None:
    """``by_key`` orders every document once, by ascending key (``Segment.locate``)."""
    if n == 0:
        return None
    by_key = seg.by_key
    if int(by_key.max()) >= n or not bool((np.bincount(by_key, minlength=n) == 1).all()):
        return "the key lookup does not list every document once"
    ordered = seg.keys[by_key]
    if not bool((ordered[1:] >= ordered[:-1]).all()):
        return "the key lookup is not in key order"
    return None
