"""The compiled BM25 kernel: built where CI runs, safe on damaged arrays, thread-safe.

Its results are proved equal to the numpy path's and to the exhaustive scorer's in
test_segments.py; these tests cover what only the kernel has.
"""

from __future__ import annotations

import dataclasses
import os
import random
import threading
from collections import Counter

import numpy as np
import pytest

from groundkit.errors import StorageError
from groundkit.lexical import bm25
from groundkit.lexical.bm25 import BM25Index, SegmentView
from groundkit.lexical.segment import BLOCK, segment_from_arrays
from tests.lexical.kernels import BUILT_WITHOUT_COMPILER, numpy_only
from tests.lexical.test_segments import _corpus, _index, _segment, _vocab

needs_kernel = pytest.mark.skipif(
    (bm25._kernel is None and not os.environ.get("CI")) or BUILT_WITHOUT_COMPILER,
    reason="the compiled kernel was not built",
)


def test_ci_builds_the_kernel() -> None:
    # Where the package is built with a C compiler (CI always is), the kernel exists:
    # otherwise every "compiled" test would silently test numpy twice. Where it was
    # built without one on purpose, searches must run on numpy, and say so.
    if BUILT_WITHOUT_COMPILER:
        assert bm25._kernel is None and not bm25.compiled_kernel()
        return
    if not os.environ.get("CI"):
        pytest.skip("only CI promises a C compiler")
    assert bm25.compiled_kernel()


@needs_kernel
def test_locate_finds_the_terms_a_segment_holds() -> None:
    assert bm25._kernel is not None
    seg = _segment([[1, 2, 2], [2, 5], [9]], [0, 1, 2])
    found = bm25._kernel.locate(seg.terms, seg.term_ptr, [0, 2, 5, 7, 9])
    with numpy_only():
        assert found == bm25._present(seg, [0, 2, 5, 7, 9])
    assert [t for t, _, _, _ in found] == [2, 5, 9]


@needs_kernel
@pytest.mark.parametrize("mode", [0, 1])
def test_a_posting_past_the_documents_is_a_storage_error(mode: int) -> None:
    docs = [[0, 1] for _ in range(3 * BLOCK)]
    seg = _segment(docs, list(range(len(docs))))
    bad = seg.docs.copy()
    bad[5] = seg.size + 7  # a document number the segment does not hold
    damaged = dataclasses.replace(seg, docs=bad)
    index = BM25Index([SegmentView.fresh(damaged)], _vocab(2))
    with (
        pytest.MonkeyPatch.context() as patch,
        pytest.raises(StorageError, match="lexical index is damaged"),
    ):
        patch.setattr(bm25, "_KERNEL_MODE", mode)
        patch.setattr(bm25, "_CACHED_POSTINGS", 0)  # the kernel reads the counts itself
        index.search_ids({0: 1, 1: 1}, 10)


def test_a_loaded_segment_is_checked_whole() -> None:
    # The term table is checked when a pack is loaded, so the index is rebuilt from the
    # store instead of searched (checksums catch damage on disk; this, a bad writer).
    seg = _segment([[0, 1], [1, 2], [2]], [0, 1, 2])
    bad_ptr = seg.term_ptr.copy()
    bad_ptr[1] = bad_ptr[2] + 1
    bad_blocks = seg.block_ptr.copy()
    bad_blocks[1] = bad_blocks[0]
    for name, value in (("term_ptr", bad_ptr), ("block_ptr", bad_blocks)):
        arrays = dict(seg.arrays(), **{name: value})
        with pytest.raises(ValueError):
            segment_from_arrays(arrays)


@needs_kernel
def test_a_term_table_out_of_order_is_a_storage_error() -> None:
    seg = _segment([[1, 2], [2, 3]], [0, 1])
    ptr = seg.term_ptr.copy()
    ptr[1], ptr[2] = ptr[2], ptr[1]  # a term whose postings end before they start
    index = BM25Index([SegmentView.fresh(dataclasses.replace(seg, term_ptr=ptr))], _vocab(4))
    with pytest.raises(StorageError, match="lexical index is damaged"):
        index.search_ids({2: 1}, 5)


@needs_kernel
def test_arrays_of_the_wrong_type_are_refused() -> None:
    # The kernel reads raw buffers: an array of another type is refused by name, never
    # reinterpreted.
    seg = _segment([[1, 2], [2]], [0, 1])
    wrong = dataclasses.replace(seg, docs=seg.docs.astype(np.int64))
    index = BM25Index([SegmentView.fresh(wrong)], _vocab(3))
    with pytest.raises(TypeError, match="docs"):
        index.search_ids({2: 1}, 3)


@needs_kernel
def test_searches_in_threads_agree() -> None:
    # The kernel releases the GIL while it scores: threads searching one index at once
    # must each get what a lone search gets.
    rng = random.Random(11)
    docs = _corpus(rng, 8 * BLOCK, 50)
    index = _index(docs, [list(range(len(docs)))], {})
    queries = [dict(Counter(rng.choices(range(50), k=rng.randint(1, 6)))) for _ in range(40)]
    expected = [index.search_ids(q, 10) for q in queries]
    failures: list[int] = []

    def run(offset: int) -> None:
        for n in range(200):
            i = (n + offset) % len(queries)
            if index.search_ids(queries[i], 10) != expected[i]:
                failures.append(i)

    threads = [threading.Thread(target=run, args=(t * 7,)) for t in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not failures
