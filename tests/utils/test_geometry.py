"""The per-character geometry encoding: what is written reads back, damage is refused."""

from __future__ import annotations

import base64
import struct
import zlib
from array import array
from collections.abc import Sequence

import pytest
from hypothesis import given
from hypothesis import strategies as st

from groundkit.utils.geometry import (
    _ZLIB_LEVEL,
    Box,
    DamagedGeometryError,
    PackedBoxes,
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


def _float32(value: float) -> float:
    return float(struct.unpack("f", struct.pack("f", value))[0])


_F32 = st.floats(-1e6, 1e6, allow_nan=False, width=32)


@given(
    boxes=st.lists(st.one_of(st.none(), st.tuples(_F32, _F32, _F32, _F32)), max_size=50),
    cut=st.tuples(st.integers(-60, 60), st.integers(-60, 60), st.sampled_from([1, 2, -1])),
)
def test_packed_boxes_read_back_as_appended(
    boxes: list[Box | None], cut: tuple[int, int, int]
) -> None:
    """pdfium's boxes are float32: packed as such they read back exactly, so the
    geometry encoded from them is the one a list of tuples gives."""
    packed = PackedBoxes()
    for box in boxes:
        packed.append(box)
    assert len(packed) == len(boxes)
    assert list(packed) == boxes
    assert [packed[i] for i in range(-len(boxes), len(boxes))] == boxes + boxes
    start, stop, step = cut
    assert packed[start:stop:step] == boxes[start:stop:step]
    for outside in (len(boxes), -len(boxes) - 1):
        with pytest.raises(IndexError):
            packed[outside]
    frame = PageFrame(0, 0, 2e6, 2e6, 0)
    text = "x" * len(boxes)
    ordered = [
        None if b is None else (min(b[0], b[2]), min(b[1], b[3]), max(b[0], b[2]), max(b[1], b[3]))
        for b in boxes
    ]
    again = PackedBoxes()
    for box in ordered:
        again.append(box)
    assert encode_geometry([frame], [(0, text, again)]) == encode_geometry(
        [frame], [(0, text, ordered)]
    )


def test_a_box_that_is_not_float32_is_rounded_to_it() -> None:
    packed = PackedBoxes()
    packed.append((0.1, 0.2, 0.3, 0.4))
    assert packed[0] == tuple(_float32(v) for v in (0.1, 0.2, 0.3, 0.4))


def test_a_box_beyond_the_encodable_range_is_no_box() -> None:
    frame = PageFrame(0, 0, 600, 800, 0)
    near = (10.0, 700.0, 16.0, 712.0)
    for far in ((1e8, 700.0, 1e8 + 6, 712.0), (float("inf"), 0.0, float("inf"), 1.0)):
        boxes: list[Box | None] = [far, near, (16.0, 700.0, 22.0, 712.0)]
        blob = encode_geometry([frame], [(0, "abc", boxes)])
        alone = encode_geometry([frame], [(0, "abc", [None, *boxes[1:]])])
        assert blob == alone


def _reference_page(page_offset: int, text: str, boxes: list[Box | None]) -> str:
    """The encoder written one character at a time, as it was before it worked over
    whole arrays: what the array version must reproduce byte for byte."""
    limit = (1 << 30) // 100

    def follows(a: tuple[int, ...], b: tuple[int, ...]) -> bool:
        for across, along in (((1, 3), (0, 2)), ((0, 2), (1, 3))):
            lo, hi = across
            shared = min(a[hi], b[hi]) - max(a[lo], b[lo])
            extent = min(a[hi] - a[lo], b[hi] - b[lo])
            if shared * 2 < extent or (extent <= 0 and shared < 0):
                continue
            lo, hi = along
            gap = max(b[lo] - a[hi], a[lo] - b[hi], 0)
            if gap <= max(a[across[1]] - a[across[0]], b[across[1]] - b[across[0]]):
                return True
        return False

    lines: list[list[tuple[int, tuple[int, ...]]]] = []
    current: list[tuple[int, tuple[int, ...]]] = []
    for i, (char, box) in enumerate(zip(text, boxes, strict=True)):
        if char == "\n" and current:
            lines.append(current)
            current = []
        if box is None or not all(-limit < v < limit for v in box):
            continue
        quantised = tuple(round(v * 100) for v in box)
        if current and not follows(current[-1][1], quantised):
            lines.append(current)
            current = []
        current.append((page_offset + i, quantised))
    if current:
        lines.append(current)
    values = array("i", [len(lines)])
    last_line = 0
    for line in lines:
        line_start = line[0][0]
        values.extend((line_start - last_line, len(line)))
        last_line = previous_offset = line_start
        py0 = px1 = py1 = 0
        for offset, (x0, y0, x1, y1) in line:
            values.extend((offset - previous_offset, x0 - px1, y0 - py0, x1 - x0, y1 - py1))
            previous_offset = offset
            py0, px1, py1 = y0, x1, y1
    return base64.b64encode(zlib.compress(values.tobytes(), _ZLIB_LEVEL)).decode("ascii")


# Boxes on a small grid, so that neighbours often touch, overlap, abut or jump lines.
_GRID = st.integers(0, 12).map(lambda v: v * 2.5)
_GRID_BOX = st.tuples(_GRID, _GRID, st.integers(0, 4), st.integers(0, 4)).map(
    lambda b: (b[0], b[1], b[0] + b[2] * 1.25, b[1] + b[3] * 1.25)
)


@given(
    chars=st.lists(
        st.tuples(
            st.sampled_from("ab \n"),
            st.one_of(st.none(), _GRID_BOX, _BOX, st.just((1e8, 1.0, 1e8 + 1, 2.0))),
        ),
        max_size=80,
    ),
    page_offset=st.integers(0, 10**6),
    packed=st.booleans(),
)
def test_the_array_encoder_writes_what_the_per_character_one_wrote(
    chars: list[tuple[str, Box | None]], page_offset: int, packed: bool
) -> None:
    text = "".join(c for c, _ in chars)
    boxes: list[Box | None] = [b for _, b in chars]
    if packed:
        packing = PackedBoxes()
        for box in boxes:
            packing.append(box)
        boxes = list(packing)  # float32 values, as pdfium gives them
        given_boxes: Sequence[Box | None] = packing
    else:
        given_boxes = boxes
    frame = PageFrame(0, 0, 600, 800, 0)
    [[*_, blob]] = encode_geometry([frame], [(page_offset, text, given_boxes)])["pages"]
    assert blob == _reference_page(page_offset, text, boxes)


_CORNER = st.floats(-1e6, 1e6, width=32)


@given(st.lists(st.tuples(_CORNER, _CORNER, _CORNER, _CORNER) | st.none(), max_size=40))
def test_ordering_corners_at_once_is_ordering_each_box(boxes: list[Box | None]) -> None:
    # A reader appends corners as its source gives them and orders them in one pass.
    packed = PackedBoxes()
    for box in boxes:
        packed.append(box)
    packed.order_corners()
    assert list(packed) == [
        None
        if box is None
        else (min(box[0], box[2]), min(box[1], box[3]), max(box[0], box[2]), max(box[1], box[3]))
        for box in boxes
    ]
