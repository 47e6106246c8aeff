"""The stored form of a chunk's term statistics: one byte a frequency when they fit.

Rows written with four-byte frequencies (every collection before the narrow form)
must read the same, alone or mixed with narrow rows in one batch, and a blob whose
length fits neither form is refused naming its chunk.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from groundkit.errors import StorageError
from groundkit.storage._rows import postings_from_blobs, term_blobs

Row = tuple[list[int], list[int]]

rows_strategy = st.lists(
    st.lists(
        st.tuples(st.integers(0, 2**31 - 1), st.integers(1, 70_000)),
        max_size=30,
        unique_by=lambda p: p[0],
    ).map(lambda pairs: sorted(pairs)),
    max_size=12,
)


def _legacy(ids: list[int], tfs: list[int]) -> tuple[bytes, bytes]:
    return np.asarray(ids, dtype="<i4").tobytes(), np.asarray(tfs, dtype="<i4").tobytes()


@settings(max_examples=200, deadline=None)
@given(rows=rows_strategy, legacy=st.lists(st.booleans(), min_size=12, max_size=12))
def test_round_trip_in_any_mix_of_widths(
    rows: list[list[tuple[int, int]]], legacy: list[bool]
) -> None:
    id_blobs: list[bytes] = []
    tf_blobs: list[bytes] = []
    for pairs, old in zip(rows, legacy, strict=False):
        ids, tfs = [i for i, _ in pairs], [n for _, n in pairs]
        blob_ids, blob_tfs = _legacy(ids, tfs) if old else term_blobs(ids, tfs)
        id_blobs.append(blob_ids)
        tf_blobs.append(blob_tfs)
    keys = list(range(1, len(rows) + 1))
    got = postings_from_blobs(keys, id_blobs, tf_blobs)
    assert got.term_ids.tolist() == [i for pairs in rows for i, _ in pairs]
    assert got.tfs.tolist() == [n for pairs in rows for _, n in pairs]
    assert np.diff(got.offsets).tolist() == [len(pairs) for pairs in rows]


def test_small_frequencies_take_one_byte_each() -> None:
    ids, tfs = term_blobs([3, 9, 40], [1, 255, 7])
    assert len(ids) == 12 and tfs == bytes([1, 255, 7])
    _, wide = term_blobs([3, 9], [1, 256])
    assert len(wide) == 8


@pytest.mark.parametrize("tfs", [b"\x01\x02", b"\x01\x00\x00", b""])
def test_a_blob_of_neither_width_names_its_chunk(tfs: bytes) -> None:
    ids = np.asarray([1, 2, 3], dtype="<i4").tobytes()
    with pytest.raises(StorageError, match="chunk row 7"):
        postings_from_blobs([7], [ids], [tfs])


def test_a_zero_frequency_is_damage() -> None:
    ids, _ = term_blobs([1, 2], [1, 1])
    with pytest.raises(StorageError, match="chunk row 4"):
        postings_from_blobs([4], [ids], [b"\x01\x00"])
