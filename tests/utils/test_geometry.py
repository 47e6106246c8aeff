"""The per-character geometry encoding: what is written reads back, damage is refused."""

from __future__ import annotations

import base64
import zlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from groundkit.utils.geometry import (
    Box,
    DamagedGeometryError,
    PageFrame,
    check_geometry,
    decode_page,
    encode_geometry,
    span_rects,
)

_BOX = st.tuples(st.floats(0, 500, allow_nan=False), st.floats(0, 700, allow_nan=False)).flatmap(
    lambda corner: st.tuples(
        st.just(corner[0]),
        st.just(corner[1]),
        st.floats(corner[0], corner[0] + 40, allow_nan=False),
        st.floats(corner[1], corner[1] + 20, allow_nan=False),
    )
)
_CHAR = st.tuples(st.sampled_from("ab \n"), st.one_of(st.none(), _BOX))


@given(pages=st.lists(st.lists(_CHAR, max_size=60), min_size=1, max_size=3))
def test_every_box_reads_back_at_its_offset(pages: list[list[tuple[str, Box | None]]]) -> None:
    offset = 0
    entries: list[tuple[int, str, list[Box | None]]] = []
    frames: list[PageFrame] = []
    for chars in pages:
        text = "".join(c for c, _ in chars)
        boxes = [None if c == "\n" else b for c, b in chars]
        entries.append((offset, text, boxes))
        frames.append(PageFrame(0, 0, 600, 800, 0))
        offset += len(text) + 3
    geometry = encode_geometry(frames, entries)
    assert check_geometry(geometry, len(pages))
    for (start, text, boxes), (*_, blob) in zip(entries, geometry["pages"], strict=True):
        lines = decode_page(blob)
        found = {
            o: b
            for offs, bs in zip(lines.offsets, lines.boxes, strict=True)
            for o, b in zip(offs, bs, strict=True)
        }
        want = {
            start + i: tuple(round(v * 100) for v in box)
            for i, box in enumerate(boxes)
            if box is not None
        }
        assert found == want
        for offs in lines.offsets:  # a line fragment never crosses a line break
            assert "\n" not in text[offs[0] - start : offs[-1] - start]


def test_rectangles_are_per_line_unions_and_skip_what_has_no_extent() -> None:
    text = "ab cd\nef"
    boxes = [(10, 0, 15, 10), (15, 0, 20, 10), None, (25, 0, 30, 10), (30, 1, 35, 11), None,
             (10, 20, 15, 30), (15, 20, 20, 30)]  # fmt: skip
    geometry = encode_geometry([PageFrame(0, 0, 100, 100, 0)], [(0, text, boxes)])
    assert span_rects(geometry, 1, 1, 0, 8) == [(1, 10, 0, 35, 11), (1, 10, 20, 20, 30)]
    assert span_rects(geometry, 1, 1, 1, 4) == [(1, 15, 0, 30, 10)]
    assert span_rects(geometry, 1, 1, 2, 3) == []  # a generated space has no box
    assert span_rects(geometry, 1, 1, 3, 3) == []


def test_two_columns_on_one_text_line_are_two_fragments() -> None:
    text = "ab cd"
    boxes = [(10, 0, 15, 10), (15, 0, 20, 10), None, (300, 0, 305, 10), (305, 0, 310, 10)]
    geometry = encode_geometry([PageFrame(0, 0, 400, 100, 0)], [(0, text, boxes)])
    assert span_rects(geometry, 1, 1, 0, 5) == [(1, 10, 0, 20, 10), (1, 300, 0, 310, 10)]


@pytest.mark.parametrize(
    "blob",
    [
        "not base64!",
        base64.b64encode(b"not zlib").decode(),
        base64.b64encode(zlib.compress(b"\x01\x00\x00")).decode(),  # a partial value
        base64.b64encode(zlib.compress((5).to_bytes(4, "little"))).decode(),  # lines missing
        base64.b64encode(
            zlib.compress(
                b"".join(v.to_bytes(4, "little", signed=True) for v in (1, 0, 1, 0, 0, 0, -5, 0))
            )
        ).decode(),  # negative width
    ],
)
def test_damaged_blobs_are_refused(blob: str) -> None:
    with pytest.raises(DamagedGeometryError):
        decode_page(blob)


def test_outer_shape_is_checked() -> None:
    good = encode_geometry([PageFrame(0, 0, 10, 10, 90)], [(0, "a", [(1, 1, 2, 2)])])
    assert check_geometry(good, 1) and not check_geometry(good, 2)
    assert not check_geometry({**good, "extra": 1})
    assert not check_geometry({"format": 1, "pages": [[0, 0, 10, 10, 45, "x"]]})
    assert not check_geometry({"format": 1, "pages": [[10, 0, 0, 10, 0, "x"]]})
    with pytest.raises(ValueError, match="rotation"):
        encode_geometry([PageFrame(0, 0, 10, 10, 45)], [(0, "a", [None])])
    with pytest.raises(ValueError, match="one box"):
        encode_geometry([PageFrame(0, 0, 10, 10, 0)], [(0, "ab", [None])])
