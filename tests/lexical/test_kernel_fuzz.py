"""Damaged input never crashes a search: it is refused, on both paths, by one error.

Segments are made from random corpora and then damaged the ways a bad writer or a
crafted pack could damage them (a frequency of 0, a posting past the documents,
postings out of order, term and block tables that do not fit, bounds that lie, arrays
cut short or of another type) and queried with weights a damaged set of statistics
could give (0, negative, not a number, infinite). Three properties:

- the compiled kernel, called directly with anything, returns or raises ValueError /
  TypeError / OverflowError: it never reads or writes out of bounds (CI also runs
  these tests with the kernel built under AddressSanitizer, ``.ci/sanitize``);
- ``segment_from_arrays`` refuses every pack a search could not trust, and on any
  pack it accepts the compiled kernel and the numpy path return the same hits as the
  exhaustive scorer, without an error;
- a search that meets damage raises ``StorageError`` on either path.

Where a crash would take pytest down with it, the calls run in a subprocess: the
reproduction of the kernel's old overflow, and a fixed sweep of mutated calls.
"""

from __future__ import annotations

import dataclasses
import math
import os
import random
import subprocess
import sys
import textwrap
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from groundkit.errors import StorageError
from groundkit.lexical import bm25
from groundkit.lexical.bm25 import BM25Index, SegmentView
from groundkit.lexical.segment import BLOCK, Segment, segment_from_arrays
from groundkit.lexical.vocabulary import VocabularyPack, vocabulary_arrays
from tests.lexical.kernels import BUILT_WITHOUT_COMPILER, KERNELS, lexical_path
from tests.lexical.test_segments import _corpus, _segment

ROOT = Path(__file__).resolve().parents[2]

needs_kernel = pytest.mark.skipif(
    (bm25._kernel is None and not os.environ.get("CI")) or BUILT_WITHOUT_COMPILER,
    reason="the compiled kernel was not built",
)

# What the kernel may raise for input it refuses: never anything else, never a crash.
REFUSED = (ValueError, TypeError, OverflowError)

Args = dict[str, Any]
Mutation = Callable[[Args, random.Random], None]


# -- segments and kernel calls ---------------------------------------------------------


def make_segment(rng: random.Random) -> Segment:
    """A random segment; one in three has terms long enough for several blocks."""
    n_docs = rng.choice([rng.randint(1, 40), rng.randint(40, 500)])
    n_terms = rng.randint(2, 12 if n_docs > 200 else 30)
    docs = _corpus(rng, n_docs, n_terms)
    seg: Segment = _segment(docs, list(range(n_docs)))
    return seg


def kernel_args(seg: Segment, rng: random.Random) -> Args:
    """A sound call of the kernel's ``top_k`` on ``seg``, as ``_SegmentSearch`` makes it."""
    m = int(seg.terms.shape[0])
    chosen = sorted(rng.sample(range(m), min(m, rng.randint(1, 4))))
    avg = max(1.0, float(seg.lengths.mean())) if seg.size else 1.0
    return {
        "docs": seg.docs,
        "tfs": seg.tfs,
        "lengths": seg.lengths,
        "term_max_tf": seg.term_max_tf,
        "term_min_len": seg.term_min_len,
        "block_ptr": seg.block_ptr,
        "block_max_tf": seg.block_max_tf,
        "block_min_len": seg.block_min_len,
        "keys": seg.keys,
        "order": seg.order,
        "spans": [(int(seg.term_ptr[j]), int(seg.term_ptr[j + 1]), j) for j in chosen],
        "scales": [rng.uniform(0.05, 4.0) for _ in chosen],
        "base": 1.5 * 0.25,
        "per_length": 1.5 * 0.75 / avg,
        "allow1": None,
        "allow2": rng.choice([None, np.asarray([rng.random() < 0.8 for _ in range(seg.size)])]),
        "k": rng.randint(1, 25),
        "theta": 0.0,
        "floor": rng.choice([0.0, 0.0, 0.5]),
        "mode": rng.choice([-1, 0, 1]),
    }


def _copy(args: Args, name: str) -> Any:
    value = np.array(args[name], copy=True)
    args[name] = value
    return value


def _at(rng: random.Random, array: Any) -> int:
    return rng.randrange(int(array.shape[0])) if array.shape[0] else 0


def _put(array: Any, index: Any, value: int) -> None:
    """``array[index] = value``, clipped to what its type holds (an earlier mutation may
    have changed the type)."""
    if array.dtype.kind in "iu":
        info = np.iinfo(array.dtype)
        value = min(max(value, int(info.min)), int(info.max))
    array[index] = value


def _zero_tf(args: Args, rng: random.Random) -> None:
    tfs = _copy(args, "tfs")
    if rng.random() < 0.3:
        tfs[:] = 0
    elif tfs.size:
        _put(tfs, _at(rng, tfs), 0)


def _doc_out_of_range(args: Args, rng: random.Random) -> None:
    docs = _copy(args, "docs")
    if docs.size:
        n = int(args["lengths"].shape[0])
        _put(docs, _at(rng, docs), rng.choice([n, n + 1, 2**32 - 1]))


def _docs_out_of_order(args: Args, rng: random.Random) -> None:
    docs = _copy(args, "docs")
    if docs.size > 1:
        i = rng.randrange(docs.size - 1)
        if rng.random() < 0.5:
            docs[i], docs[i + 1] = docs[i + 1], docs[i]
        else:
            _put(docs, i + 1, int(docs[i]))  # one document twice in a term


def _bad_span(args: Args, rng: random.Random) -> None:
    spans = list(args["spans"])
    if not spans:
        return
    i = rng.randrange(len(spans))
    lo, hi, j = spans[i]
    postings = int(args["docs"].shape[0])
    spans[i] = rng.choice(
        [
            (-1, hi, j),
            (lo, postings + 1, j),
            (hi, lo, j),
            (lo, lo, j),
            (lo, hi + BLOCK, j),
            (lo + 1, hi, j),
            (0, postings, j),
            (lo, hi, -1),
            (lo, hi, int(args["term_max_tf"].shape[0])),
            (lo, hi, 2**40),
            (2**62, 2**62 + 5, j),
        ]
    )
    args["spans"] = spans


def _bad_block_ptr(args: Args, rng: random.Random) -> None:
    ptr = _copy(args, "block_ptr")
    if ptr.size:
        blocks = int(args["block_max_tf"].shape[0])
        value = rng.choice([-1, -(2**63), 2**63 - 1, blocks + 1, int(ptr[_at(rng, ptr)]) + 1])
        _put(ptr, _at(rng, ptr), value)


def _lying_bounds(args: Args, rng: random.Random) -> None:
    name = rng.choice(["block_max_tf", "block_min_len", "term_max_tf", "term_min_len"])
    array = _copy(args, name)
    if array.size:
        _put(array, _at(rng, array), rng.choice([0, 2**32 - 1]))


def _bad_scale(args: Args, rng: random.Random) -> None:
    scales = list(args["scales"])
    if scales:
        scales[rng.randrange(len(scales))] = rng.choice(
            [0.0, -0.0, -1.0, math.nan, math.inf, -math.inf, 5e-324, 1e308]
        )
    args["scales"] = scales


def _bad_norm(args: Args, rng: random.Random) -> None:
    args[rng.choice(["base", "per_length"])] = rng.choice([-1.0, math.nan, math.inf, 1e308])


def _cut_short(args: Args, rng: random.Random) -> None:
    name = rng.choice(
        ["docs", "tfs", "lengths", "term_max_tf", "block_ptr", "block_max_tf", "keys", "order"]
    )
    args[name] = args[name][: rng.choice([0, max(0, int(args[name].shape[0]) - 1)])]


def _wrong_type(args: Args, rng: random.Random) -> None:
    name, dtype = rng.choice(
        [("docs", np.int64), ("tfs", np.float32), ("block_ptr", np.int32), ("keys", np.uint8)]
    )
    args[name] = np.asarray(args[name]).astype(dtype)


def _bad_allow(args: Args, rng: random.Random) -> None:
    n = int(args["lengths"].shape[0])
    args[rng.choice(["allow1", "allow2"])] = np.ones(max(0, n + rng.choice([-1, 1])), np.bool_)


def _bad_threshold(args: Args, rng: random.Random) -> None:
    args[rng.choice(["theta", "floor"])] = rng.choice([math.nan, math.inf, -math.inf, -1.0])


def _bad_k(args: Args, rng: random.Random) -> None:
    args["k"] = rng.choice([0, -1])


def _mismatched_scales(args: Args, rng: random.Random) -> None:
    args["scales"] = [*args["scales"], 1.0]


MUTATIONS: dict[str, Mutation] = {
    "zero tf": _zero_tf,
    "doc out of range": _doc_out_of_range,
    "docs out of order": _docs_out_of_order,
    "bad span": _bad_span,
    "bad block pointer": _bad_block_ptr,
    "lying bounds": _lying_bounds,
    "bad scale": _bad_scale,
    "bad normalisation": _bad_norm,
    "cut short": _cut_short,
    "wrong type": _wrong_type,
    "bad allow": _bad_allow,
    "bad threshold": _bad_threshold,
    "bad k": _bad_k,
    "mismatched scales": _mismatched_scales,
}


def call_damaged(kernel: Any, seed: int, names: list[str]) -> str:
    """One kernel call on a random segment damaged by ``names``: "ok" or the refusal."""
    rng = random.Random(seed)
    args = kernel_args(make_segment(rng), rng)
    for name in names:
        MUTATIONS[name](args, rng)
    try:
        hits, scored = kernel.top_k(**args)
    except REFUSED as exc:
        return f"{type(exc).__name__}: {exc}"
    n = int(args["lengths"].shape[0])
    assert isinstance(hits, list) and len(hits) <= args["k"] and scored >= 0
    assert all(0 <= hit[3] < n for hit in hits)
    return "ok"


def sweep(seed: int, count: int) -> None:
    """``count`` damaged calls (what the subprocess test runs): prints what came back."""
    kernel = bm25._kernel
    assert kernel is not None, "the compiled kernel was not built"
    rng = random.Random(seed)
    outcomes: Counter[str] = Counter()
    for _ in range(count):
        names = rng.sample(sorted(MUTATIONS), rng.randint(1, 3))
        outcomes[call_damaged(kernel, rng.randrange(2**32), names).split(":")[0]] += 1
    print(dict(sorted(outcomes.items())))


def _run(code: str) -> subprocess.CompletedProcess[str]:
    """``code`` in a fresh interpreter at the repository root (the environment, and so a
    sanitizer's settings, inherited)."""
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


# -- the kernel alone, in a subprocess ---------------------------------------------------


@needs_kernel
def test_a_zero_frequency_no_longer_overruns_the_kernel() -> None:
    # One term, 10,000 postings of document 0, each with frequency 0: the kernel used to
    # append document 0 once per posting to a list sized for one document (SIGSEGV).
    done = _run(
        """
        import numpy as np
        from groundkit.lexical import _kernel as K
        P = 10_000; nb = (P + 127) // 128
        args = [np.zeros(P, np.uint32), np.zeros(P, np.uint8), np.ones(1, np.uint8),
                np.ones(1, np.uint8), np.ones(1, np.uint8), np.array([0, nb], np.int64),
                np.ones(nb, np.uint8), np.ones(nb, np.uint8), np.zeros(1, np.int64),
                np.zeros((1, 3), np.uint64), [(0, P, 0)], [1.0], 0.375, 1.0, None, None,
                10, 0.0, 0.0]
        for mode in (-1, 0, 1):
            try:
                K.top_k(*args, mode)
            except ValueError as exc:
                print("refused:", exc)
        args[1] = np.ones(P, np.uint8)
        args[11] = [0.0]  # a weight of 0 by its scale instead
        for mode in (-1, 0, 1):
            try:
                K.top_k(*args, mode)
            except ValueError as exc:
                print("refused:", exc)
        """
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[:3] == ["refused: a posting has a term frequency of 0"] * 3
    assert len(lines) == 6 and all("weight is not a finite number above 0" in x for x in lines[3:])


@needs_kernel
def test_a_zero_frequency_is_a_storage_error_in_a_new_process() -> None:
    # The same through the index: the search names the damage, the process lives.
    done = _run(
        """
        import dataclasses
        import numpy as np
        from groundkit.errors import StorageError
        from groundkit.lexical.bm25 import BM25Index, SegmentView
        from tests.lexical.test_segments import _segment, _vocab
        seg = _segment([[0, 1]] * 2000 + [[1, 2]], list(range(2001)))
        seg = dataclasses.replace(seg, tfs=np.zeros_like(seg.tfs))
        index = BM25Index([SegmentView.fresh(seg)], _vocab(3))
        for query in ({0: 1}, {0: 1, 1: 1}, {1: 1, 2: 1}):
            try:
                index.search_ids(query, 10)
            except StorageError as exc:
                print(type(exc).__name__, exc)
        """
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert len(lines) == 3
    assert all(x.startswith("StorageError the lexical index is damaged") for x in lines)
    assert all("term frequency of 0" in x for x in lines)


@needs_kernel
def test_a_sweep_of_damaged_calls_exits_cleanly() -> None:
    # A fixed sweep of every kind of damage, in a process of its own: a crash here fails
    # this test instead of taking the whole run down.
    done = _run(
        """
        from tests.lexical.test_kernel_fuzz import sweep
        sweep(seed=2024, count=1500)
        """
    )
    assert done.returncode == 0, done.stderr[-4000:]
    assert "ValueError" in done.stdout and "ok" in done.stdout


# -- the kernel alone, in process (shrinks to the smallest failing call) -----------------


@needs_kernel
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 2**32 - 1),
    names=st.lists(st.sampled_from(sorted(MUTATIONS)), min_size=0, max_size=3),
)
def test_the_kernel_returns_or_refuses_whatever_it_is_given(seed: int, names: list[str]) -> None:
    assert bm25._kernel is not None
    outcome = call_damaged(bm25._kernel, seed, names)
    if not names:
        assert outcome == "ok"


@needs_kernel
def test_each_kind_of_damage_is_refused_by_the_kernel() -> None:
    # Damage the kernel must notice whenever it reads it (the spans cover every posting).
    kernel = bm25._kernel
    assert kernel is not None
    seg = _segment([[0, 1, 1]] * (3 * BLOCK) + [[1, 2]], list(range(3 * BLOCK + 1)))

    def whole(**changes: Any) -> Args:
        args = kernel_args(seg, random.Random(0))
        m = int(seg.terms.shape[0])
        args.update(
            spans=[(int(seg.term_ptr[j]), int(seg.term_ptr[j + 1]), j) for j in range(m)],
            scales=[1.0] * m,
            allow2=None,
            floor=0.0,
        )
        args.update(changes)
        return args

    tfs = seg.tfs.copy()
    tfs[BLOCK + 3] = 0
    docs = seg.docs.copy()
    docs[3 * BLOCK - 1] = seg.size  # the last posting of term 0, read by every strategy
    bmax = seg.block_max_tf.copy()
    bmax[1] = 0
    ptr = seg.block_ptr.copy()
    ptr[1] = -(2**63)
    cases = [
        ({"tfs": tfs}, "term frequency of 0"),
        ({"docs": docs, "spans": [(0, 3 * BLOCK, 0)], "scales": [1.0]}, "names a document"),
        ({"block_ptr": ptr}, "do not fit the segment"),
        ({"scales": [1.0, 0.0, 1.0]}, "not a finite number above 0"),
        ({"scales": [1.0, math.nan, 1.0]}, "not a finite number above 0"),
        ({"per_length": -0.5}, "length normalisation"),
        ({"base": math.inf}, "length normalisation"),
        ({"theta": math.nan}, "threshold"),
    ]
    for mode in (-1, 0, 1):
        assert kernel.top_k(**whole(mode=mode))[0]
        for changes, message in cases:
            with pytest.raises(ValueError, match=message):
                kernel.top_k(**whole(mode=mode, **changes))
    # Bounds are read only document at a time: there a block bound of 0 is refused.
    with pytest.raises(ValueError, match="largest term frequency is 0"):
        kernel.top_k(**whole(mode=0, block_max_tf=bmax))


@needs_kernel
def test_weights_too_small_to_add_are_scored_document_at_a_time() -> None:
    # A weight that rounds to 0 would list a document twice term at a time (a hit
    # twice): with a scale that small the kernel goes document at a time instead.
    kernel = bm25._kernel
    assert kernel is not None
    seg = _segment([[0, 1], [0], [1, 1, 0]], [0, 1, 2])
    args = kernel_args(seg, random.Random(0))
    args.update(spans=[(0, 3, 0), (3, 5, 1)], scales=[5e-324, 1.0], allow2=None, floor=0.0, k=5)
    for mode in (-1, 0, 1):
        hits, _ = kernel.top_k(**dict(args, mode=mode))
        assert [h[3] for h in hits] == [2, 0]


# -- loaded packs: refused whole, or searched alike by both paths ------------------------


def _damage_arrays(seg: Segment, rng: random.Random, kind: str) -> dict[str, Any]:
    arrays: dict[str, Any] = {k: np.array(v, copy=True) for k, v in seg.arrays().items()}
    n, postings = seg.size, int(seg.docs.shape[0])
    if kind == "zero tf":
        arrays["tfs"][_at(rng, arrays["tfs"])] = 0
    elif kind == "doc out of range":
        arrays["docs"][_at(rng, arrays["docs"])] = n + rng.randint(0, 3)
    elif kind == "docs out of order" and postings > 1:
        i = rng.randrange(postings - 1)
        arrays["docs"][i], arrays["docs"][i + 1] = arrays["docs"][i + 1], arrays["docs"][i]
    elif kind == "term table":
        ptr = arrays["term_ptr"]
        ptr[_at(rng, ptr)] += rng.choice([-1, 1, BLOCK, -(2**40)])
    elif kind == "block table":
        ptr = arrays["block_ptr"]
        ptr[_at(rng, ptr)] += rng.choice([-1, 1, 2**40])
    elif kind == "block bound":
        name = rng.choice(["block_max_tf", "block_min_len"])
        top = int(np.iinfo(arrays[name].dtype).max)
        arrays[name][_at(rng, arrays[name])] = rng.choice([0, 1, top])
    elif kind == "term bound":
        name = rng.choice(["term_max_tf", "term_min_len"])
        arrays[name][_at(rng, arrays[name])] = rng.choice([0, 1, 255])
    elif kind == "lengths":
        arrays["lengths"][_at(rng, arrays["lengths"])] = rng.choice([0, 1, 255])
    elif kind == "terms":
        arrays["terms"][_at(rng, arrays["terms"])] = rng.choice([-1, 0, 2**31 - 1])
    elif kind == "keys":
        arrays["keys"][_at(rng, arrays["keys"])] = rng.choice([-5, 10**6])
    elif kind == "by_key":
        arrays["by_key"][_at(rng, arrays["by_key"])] = rng.choice([0, n, 2**32 - 1])
    elif kind == "order":
        arrays["order"][_at(rng, arrays["order"]), rng.randrange(3)] = rng.choice([0, 2**64 - 1])
    elif kind == "cut short":
        name = rng.choice(sorted(arrays))
        arrays[name] = arrays[name][: max(0, int(arrays[name].shape[0]) - 1)]
    elif kind == "wrong type":
        name = rng.choice(sorted(arrays))
        arrays[name] = arrays[name].astype(rng.choice([np.int16, np.float32]))
    elif kind == "not contiguous":
        name = rng.choice(sorted(arrays))
        arrays[name] = np.repeat(arrays[name], 2, axis=0)[::2]
    return arrays


PACK_DAMAGE = [
    "none",
    "zero tf",
    "doc out of range",
    "docs out of order",
    "term table",
    "block table",
    "block bound",
    "term bound",
    "lengths",
    "terms",
    "keys",
    "by_key",
    "order",
    "cut short",
    "wrong type",
    "not contiguous",
]


def _vocab_for(seg: Segment) -> dict[str, int]:
    return {f"t{t}": t for t in seg.terms.tolist()}


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 2**32 - 1),
    kinds=st.lists(st.sampled_from(PACK_DAMAGE), min_size=1, max_size=2),
)
def test_a_pack_is_refused_at_load_or_searched_alike(seed: int, kinds: list[str]) -> None:
    rng = random.Random(seed)
    seg = make_segment(rng)
    arrays: dict[str, Any] = seg.arrays()
    for kind in kinds:
        arrays = _damage_arrays(Segment(**arrays), rng, kind)
    try:
        loaded = segment_from_arrays(arrays)
    except ValueError as exc:
        assert "segment arrays do not fit together" in str(exc)
        assert kinds != ["none"]
        return
    # Accepted: every path searches it without error, and all of them agree.
    index = BM25Index([SegmentView.fresh(loaded)], _vocab_for(loaded))
    terms = sorted({int(t) for t in loaded.terms.tolist() if t >= 0})
    compiled_available = bm25._kernel is not None
    for _ in range(4):
        query = {t: rng.randint(1, 2) for t in rng.sample(terms, min(len(terms), 4))}
        k = rng.randint(1, 20)
        with lexical_path(False):
            exhaustive = index.search_ids(query, k, prune=False)
            assert index.search_ids(query, k) == exhaustive
        if compiled_available:
            for mode in (-1, 0, 1):
                with lexical_path(True), pytest.MonkeyPatch.context() as patch:
                    patch.setattr(bm25, "_KERNEL_MODE", mode)
                    assert index.search_ids(query, k) == exhaustive


@pytest.mark.parametrize("kind", [k for k in PACK_DAMAGE if k not in ("none", "keys", "lengths")])
def test_each_kind_of_pack_damage_is_refused_at_load(kind: str) -> None:
    # Damage that would mislead a search (wrong hits, a crash, an untyped error) is
    # refused whole. Keys and lengths may hold any value; a changed key or length that
    # breaks the lookup or a bound is refused by those checks.
    seg = _segment([[i % 7, (i * 3) % 11, 2] for i in range(3 * BLOCK)], list(range(3 * BLOCK)))
    refused = 0
    for seed in range(20):
        arrays = _damage_arrays(seg, random.Random(seed), kind)
        same = all(
            a.dtype == b.dtype and a.shape == b.shape and np.array_equal(a, b)
            for a, b in ((arrays[name], getattr(seg, name)) for name in arrays)
        )
        try:
            segment_from_arrays(arrays)
        except ValueError:
            refused += 1
            continue
        # Accepted: only a change a search cannot tell from sound (a looser bound, a copy
        # in another layout, a tie key or term id that keeps its order) or none at all.
        assert same or kind in ("block bound", "term bound", "not contiguous", "order", "terms")
    assert refused >= 5


# -- the Python layer: one typed error on both paths -------------------------------------


@KERNELS
def test_counts_past_the_documents_are_a_storage_error(compiled: bool) -> None:
    # An overlay whose retired counts are negative makes a term more frequent than the
    # documents: its weight would be below 0. Both paths refuse it before scoring.
    seg = _segment([[0, 1], [1, 2], [2, 0], [0]], [0, 1, 2, 3])
    dead_df = np.full(seg.terms.shape[0], -10, dtype=np.int64)
    view = SegmentView.restored(seg, np.full(seg.size, math.inf), dead_df)
    index = BM25Index([view], _vocab_for(seg))
    with lexical_path(compiled), pytest.raises(StorageError, match="not a finite number above 0"):
        index.search_ids({0: 1, 1: 1}, 3)


@KERNELS
def test_a_threshold_that_is_not_a_number_is_refused(compiled: bool) -> None:
    seg = _segment([[0, 1], [1]], [0, 1])
    index = BM25Index([SegmentView.fresh(seg)], _vocab_for(seg))
    with lexical_path(compiled), pytest.raises(ValueError, match="threshold"):
        index.search_ids({1: 1}, 3, score_threshold=math.nan)


@KERNELS
def test_a_damaged_vocabulary_pack_is_a_storage_error(compiled: bool) -> None:
    arrays = vocabulary_arrays({"alpha": 1, "beta": 2, "gamma": 3})
    starts = arrays["starts"].copy()
    starts[1] = 10**9  # past the text: the pack was accepted, then damaged in memory
    pack = VocabularyPack(arrays["text"], starts, arrays["ids"], 3, {"name": "vocab-1"})
    kernel = bm25._kernel if compiled else None
    with lexical_path(compiled), pytest.raises(StorageError, match="'vocab-1' is damaged"):
        pack.find(["alpha", "beta", "zeta"], kernel=kernel)


@KERNELS
def test_a_segment_damaged_in_memory_is_a_storage_error(compiled: bool) -> None:
    # A segment built in memory (never loaded, so never checked whole) with a posting
    # past its documents: the kernel finds it as it reads, numpy as it indexes.
    seg = _segment([[0, 1]] * (2 * BLOCK), list(range(2 * BLOCK)))
    docs = seg.docs.copy()
    docs[3] = seg.size + 4
    index = BM25Index([SegmentView.fresh(dataclasses.replace(seg, docs=docs))], _vocab_for(seg))
    for mode in (-1, 0, 1):
        with (
            lexical_path(compiled),
            pytest.MonkeyPatch.context() as patch,
            pytest.raises(StorageError, match="lexical index is damaged"),
        ):
            patch.setattr(bm25, "_KERNEL_MODE", mode)
            patch.setattr(bm25, "_CACHED_POSTINGS", 0)
            index.search_ids({0: 1, 1: 1}, 5)
