"""Where each character of an extracted text stands on its page, kept compactly.

A PDF's document metadata holds, per page, the page's frame (crop box in the
page's user space, and its ``/Rotate``) and, per text line, the box of each
character that has one (characters the extractor generated, such as inserted
spaces and line breaks, have none). A citation's rectangles are read from it:
per line, the union of the boxes of the span's characters on that line.

The encoding (adr/0072-pdf-rectangles.md) is a JSON object::

    {"format": 1, "pages": [[x0, y0, x1, y1, rotation, "<blob>"], ...]}

one entry per page, in page order. ``blob`` is base64 of zlib-compressed
little-endian int32 values, coordinates in hundredths of a point::

    n_lines, then per line: start (its first boxed character's offset, as a
    delta from the previous line's start; the first from 0), n_boxes, then per
    box: offset (delta from the previous boxed character; the first from the
    line's start, so 0), x0 - previous x1, y0 - previous y0, x1 - x0, y1 -
    previous y1 (the first box's "previous" is all zeros)

A "line" is a line fragment: a run of characters on one text line whose boxes
follow on from each other, so text in two columns is two fragments.

Boxes along a line abut and share a height, so most of these are 0 or a glyph
width, which compress well.

Offsets are absolute (into the whole document text). Every value is checked
when read: a blob that does not decode to exactly this shape is damaged.
Per-page blobs keep a search cheap: a result decodes only the pages it spans,
and the JSON holding them parses as a few strings, not thousands of numbers.
"""

from __future__ import annotations

import base64
import binascii
import sys
import zlib
from array import array
from bisect import bisect_left
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

__all__ = [
    "FORMAT",
    "Box",
    "DamagedGeometryError",
    "PageFrame",
    "PageLines",
    "check_geometry",
    "decode_page",
    "encode_geometry",
    "page_frame",
    "span_rects",
]

FORMAT = 1
# Coordinates are stored in hundredths of a point: far below a glyph's size,
# and the same integer for the same float on every platform.
_SCALE = 100
_ROTATIONS = frozenset({0, 90, 180, 270})

# A character's box: x0, y0, x1, y1 in points.
Box = tuple[float, float, float, float]


class DamagedGeometryError(ValueError):
    """The stored geometry does not decode to what the encoder writes."""


@dataclass(frozen=True, slots=True)
class PageFrame:
    """A page's crop box in its own user space (points, origin bottom-left, the
    page's rotation not applied) and its ``/Rotate`` (0, 90, 180 or 270)."""

    x0: float
    y0: float
    x1: float
    y1: float
    rotation: int


@dataclass(frozen=True, slots=True)
class PageLines:
    """A page's lines decoded: per line, its boxed characters' offsets (sorted) and
    their boxes in hundredths of a point, one tuple per coordinate (``min`` and ``max``
    over a slice of one run in C, which is what a span's rectangle costs)."""

    starts: tuple[int, ...]
    offsets: tuple[tuple[int, ...], ...]
    x0: tuple[tuple[int, ...], ...]
    y0: tuple[tuple[int, ...], ...]
    x1: tuple[tuple[int, ...], ...]
    y1: tuple[tuple[int, ...], ...]
    # Per line, the union of its boxes: a span covering a whole line (most lines of
    # most spans) takes it as it is, so only its first and last lines are scanned.
    bounds: tuple[tuple[int, int, int, int], ...]

    @property
    def boxes(self) -> tuple[tuple[tuple[int, int, int, int], ...], ...]:
        """Per line, each character's ``(x0, y0, x1, y1)``."""
        return tuple(
            tuple(zip(*columns, strict=True))
            for columns in zip(self.x0, self.y0, self.x1, self.y1, strict=True)
        )


def _q(value: float) -> int:
    return round(value * _SCALE)


def encode_geometry(
    frames: Sequence[PageFrame],
    pages: Sequence[tuple[int, str, Sequence[Box | None]]],
) -> dict[str, Any]:
    """The metadata value for a document: ``frames`` and, per page, ``(offset, text,
    boxes)`` where ``boxes[i]`` is the box of ``text[i]`` (None when it has none).

    Lines are the runs of ``text`` between ``"\\n"``, split again where a box does not
    follow on from the one before (another column); a box is ``(x0, y0, x1, y1)`` in
    points with ``x0 <= x1`` and ``y0 <= y1``.
    """
    if len(frames) != len(pages):
        raise ValueError("one frame per page")
    out: list[list[Any]] = []
    for frame, (page_offset, text, boxes) in zip(frames, pages, strict=True):
        if len(boxes) != len(text):
            raise ValueError("one box (or None) per character of the page's text")
        if frame.rotation not in _ROTATIONS:
            raise ValueError(f"page rotation {frame.rotation} is not a multiple of 90")
        lines = _fragments(page_offset, text, boxes)
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
        if sys.byteorder != "little":
            values.byteswap()
        blob = base64.b64encode(zlib.compress(values.tobytes(), 9)).decode("ascii")
        out.append([frame.x0, frame.y0, frame.x1, frame.y1, frame.rotation, blob])
    return {"format": FORMAT, "pages": out}


_Quantised = tuple[int, int, int, int]


def _fragments(
    page_offset: int, text: str, boxes: Sequence[Box | None]
) -> list[list[tuple[int, _Quantised]]]:
    """The page's line fragments: runs of boxed characters within one line of ``text``
    whose boxes follow on from each other (``_follows``). Two columns that one text
    line runs across are two fragments, so a rectangle never spans the gap between them.
    """
    fragments: list[list[tuple[int, _Quantised]]] = []
    current: list[tuple[int, _Quantised]] = []
    for i, (char, box) in enumerate(zip(text, boxes, strict=True)):
        if char == "\n" and current:
            fragments.append(current)
            current = []
        if box is None:
            continue
        x0, y0, x1, y1 = quantised = (_q(box[0]), _q(box[1]), _q(box[2]), _q(box[3]))
        if x1 < x0 or y1 < y0:
            raise ValueError(f"box {box} is not ordered (x0 <= x1, y0 <= y1)")
        if current and not _follows(current[-1][1], quantised):
            fragments.append(current)
            current = []
        current.append((page_offset + i, quantised))
    if current:
        fragments.append(current)
    return fragments


def _follows(a: _Quantised, b: _Quantised) -> bool:
    """Whether box ``b`` continues the line box ``a`` belongs to: they share at least half
    of the smaller extent across the line, and the gap along it is at most the larger
    extent across it (about a glyph's height). Holds for text running left or right,
    up or down (rotated text); a jump to another column or line fails it."""
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


def check_geometry(value: Any, pages: int | None = None) -> bool:
    """Whether ``value`` has the encoding's outer shape (and ``pages`` entries when
    given). Cheap: the blobs are checked when decoded."""
    if not isinstance(value, dict) or value.get("format") != FORMAT or len(value) != 2:
        return False
    entries = value.get("pages")
    if not isinstance(entries, list) or (pages is not None and len(entries) != pages):
        return False
    for entry in entries:
        if not (isinstance(entry, list) and len(entry) == 6):
            return False
        *box, rotation, blob = entry
        if not all(type(v) in (int, float) for v in box) or box[0] > box[2] or box[1] > box[3]:
            return False
        if rotation not in _ROTATIONS or type(rotation) is not int or not isinstance(blob, str):
            return False
    return True


def page_frame(geometry: Mapping[str, Any], page: int) -> PageFrame | None:
    """The frame of 1-based ``page``, or None when ``geometry`` has no such page."""
    entries = geometry.get("pages")
    if not check_geometry(geometry) or not isinstance(entries, list):
        return None
    if not 1 <= page <= len(entries):
        return None
    x0, y0, x1, y1, rotation, _ = entries[page - 1]
    return PageFrame(float(x0), float(y0), float(x1), float(y1), rotation)


@lru_cache(maxsize=256)
def decode_page(blob: str) -> PageLines:
    """One page's lines; ``DamagedGeometryError`` unless ``blob`` is what the encoder
    writes. Memoised: the results of one search mostly share a few pages."""
    try:
        raw = zlib.decompress(base64.b64decode(blob, validate=True))
    except (binascii.Error, zlib.error, ValueError):
        raise DamagedGeometryError("page geometry does not decode") from None
    if len(raw) % 4:
        raise DamagedGeometryError("page geometry has a partial value")
    values = array("i")
    values.frombytes(raw)
    if sys.byteorder != "little":
        values.byteswap()
    if not values or values[0] < 0:
        raise DamagedGeometryError("page geometry has no line count")
    starts: list[int] = []
    offsets: list[tuple[int, ...]] = []
    columns: tuple[list[tuple[int, ...]], ...] = ([], [], [], [])
    at = 1
    line_start = 0
    for _ in range(values[0]):
        if at + 2 > len(values):
            raise DamagedGeometryError("page geometry ends inside a line")
        delta, count = values[at], values[at + 1]
        at += 2
        if delta < 0 or count < 1 or at + 5 * count > len(values):
            raise DamagedGeometryError("page geometry has a malformed line")
        line_start += delta
        if starts and line_start <= starts[-1]:
            raise DamagedGeometryError("page geometry lines are out of order")
        offset = line_start
        y0 = x1 = y1 = 0
        line_offsets: list[int] = []
        line_boxes: list[tuple[int, int, int, int]] = []
        for _ in range(count):
            step, gap, dy0, width, dy1 = values[at : at + 5]
            at += 5
            if step < 0 or (line_offsets and step == 0):
                raise DamagedGeometryError("page geometry offsets are out of order")
            offset += step
            x0 = x1 + gap
            x1, y0, y1 = x0 + width, y0 + dy0, y1 + dy1
            if width < 0 or y1 < y0:
                raise DamagedGeometryError("page geometry holds an unordered box")
            line_offsets.append(offset)
            line_boxes.append((x0, y0, x1, y1))
        starts.append(line_start)
        offsets.append(tuple(line_offsets))
        for column, values_of_line in zip(columns, zip(*line_boxes, strict=True), strict=True):
            column.append(values_of_line)
    if at != len(values):
        raise DamagedGeometryError("page geometry has values after its last line")
    x0s, y0s, x1s, y1s = (tuple(column) for column in columns)
    bounds = tuple(
        (min(a), min(b), max(c), max(d)) for a, b, c, d in zip(x0s, y0s, x1s, y1s, strict=True)
    )
    return PageLines(tuple(starts), tuple(offsets), x0s, y0s, x1s, y1s, bounds)


def span_rects(
    geometry: Mapping[str, Any], first_page: int, last_page: int, start: int, end: int
) -> list[tuple[int, float, float, float, float]]:
    """``(page, x0, y0, x1, y1)`` per line holding a boxed character of ``[start, end)``,
    in offset order: the union of those characters' boxes. Only pages
    ``first_page..last_page`` (1-based) are read; a union with no area is left out.
    ``DamagedGeometryError`` when a blob read is damaged."""
    entries = geometry.get("pages")
    if not isinstance(entries, list) or start >= end:
        return []
    rects: list[tuple[int, float, float, float, float]] = []
    for page in range(max(1, first_page), min(last_page, len(entries)) + 1):
        entry = entries[page - 1]
        if not (isinstance(entry, list) and len(entry) == 6 and isinstance(entry[5], str)):
            raise DamagedGeometryError(f"page {page}'s geometry is malformed")
        lines = decode_page(entry[5])
        first = max(0, bisect_left(lines.starts, start) - 1)  # lines before it end before
        for index in range(first, len(lines.starts)):
            offsets = lines.offsets[index]
            if offsets[0] >= end:
                break
            if offsets[-1] < start:
                continue
            lo = bisect_left(offsets, start)
            hi = bisect_left(offsets, end)
            if lo >= hi:
                continue
            if lo == 0 and hi == len(offsets):
                x0, y0, x1, y1 = lines.bounds[index]
            else:
                x0, y0 = min(lines.x0[index][lo:hi]), min(lines.y0[index][lo:hi])
                x1, y1 = max(lines.x1[index][lo:hi]), max(lines.y1[index][lo:hi])
            if x0 < x1 and y0 < y1:  # a lone blank's box may have no extent
                rects.append((page, x0 / _SCALE, y0 / _SCALE, x1 / _SCALE, y1 / _SCALE))
    return rects
