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
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, overload

__all__ = [
    "FORMAT",
    "NO_BOX",
    "Box",
    "DamagedGeometryError",
    "PackedBoxes",
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
# Coordinates kept, in points (about 10 km): any two of them, scaled, differ by less than
# an int32 can hold, so every value of the encoding fits. A character beyond has no box.
_MAX_POINTS = (1 << 30) // _SCALE
_ROTATIONS = frozenset({0, 90, 180, 270})
# zlib's level for a page's blob. Level 9 took a third of a generated PDF's extraction
# time for 11% smaller blobs than 6 (90 pages: 0.26 s against 0.03 s, 163 KB against
# 182 KB); the blob decodes the same at any level.
_ZLIB_LEVEL = 6

# A character's box: x0, y0, x1, y1 in points.
Box = tuple[float, float, float, float]
# What ``PackedBoxes`` holds for a character without a box.
NO_BOX = (float("nan"),) * 4


class PackedBoxes(Sequence[Box | None]):
    """A page's character boxes, packed as four float32 values a character (NaN for a
    character without a box): 16 bytes a character where a list of tuples of floats
    takes about 180, and a PDF's boxes are all held until its geometry is encoded (a
    PDF of a million characters held some 180 MB of them). Exact for pdfium's boxes,
    whose coordinates are float32 (``FS_RECTF``); a box with a NaN coordinate reads back
    as no box."""

    __slots__ = ("values",)

    def __init__(self) -> None:
        # Four values a character, ``NO_BOX`` for none: a hot loop extends it directly.
        self.values = array("f")

    def append(self, box: Box | None) -> None:
        self.values.extend(NO_BOX if box is None else box)

    def order_corners(self) -> None:
        """Make every box ``x0 <= x1`` and ``y0 <= y1``, in one pass over all of them: a
        reader may append corners as its source gives them (pdfium's left may lie right
        of its right), which costs less than ordering each box as it comes."""
        if not self.values:
            return
        import numpy as np

        boxes = np.frombuffer(self.values, dtype=np.float32).reshape(-1, 4)
        low = np.minimum(boxes[:, :2], boxes[:, 2:])
        boxes[:, 2:] = np.maximum(boxes[:, :2], boxes[:, 2:])
        boxes[:, :2] = low

    def __len__(self) -> int:
        return len(self.values) // 4

    @overload
    def __getitem__(self, index: int) -> Box | None: ...

    @overload
    def __getitem__(self, index: slice) -> list[Box | None]: ...

    def __getitem__(self, index: int | slice) -> Box | list[Box | None] | None:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        size = len(self)
        at = index + size if index < 0 else index
        if not 0 <= at < size:
            raise IndexError("box index out of range")
        x0, y0, x1, y1 = self.values[4 * at : 4 * at + 4]
        return None if x0 != x0 else (x0, y0, x1, y1)

    def __iter__(self) -> Iterator[Box | None]:
        values = iter(self.values)
        for x0, y0, x1, y1 in zip(values, values, values, values, strict=True):
            yield None if x0 != x0 else (x0, y0, x1, y1)


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
        data = _page_values(page_offset, text, boxes)
        blob = base64.b64encode(zlib.compress(data, _ZLIB_LEVEL)).decode("ascii")
        out.append([frame.x0, frame.y0, frame.x1, frame.y1, frame.rotation, blob])
    return {"format": FORMAT, "pages": out}


def _page_values(page_offset: int, text: str, boxes: Sequence[Box | None]) -> bytes:
    """One page's int32 values (the encoding above), little-endian, computed over all
    its boxes at once: a PDF's pages hold a box for nearly every character, and a loop
    per character here took about as long as reading the PDF.

    Line fragments are runs of boxed characters within one line of ``text`` whose boxes
    follow on from each other (``_follows_each``): two columns that one text line runs across
    are two fragments, so a rectangle never spans the gap between them. A box of a
    character drawn beyond ``_MAX_POINTS`` (or at no finite place) is none: no
    rectangle could use it, and its values would not fit the encoding.
    """
    import numpy as np

    coords = _coordinates(np, boxes)
    with np.errstate(invalid="ignore"):
        usable = np.all((coords > -_MAX_POINTS) & (coords < _MAX_POINTS), axis=1)
    where = np.flatnonzero(usable)
    if not len(where):
        return _little_endian(np, np.zeros(1, dtype=np.int64))
    # round() of a float is half-to-even, as rint is; both scale the same float64.
    q = np.rint(coords[where] * _SCALE).astype(np.int64)
    unordered = np.flatnonzero((q[:, 2] < q[:, 0]) | (q[:, 3] < q[:, 1]))
    if len(unordered):
        box = tuple(float(v) for v in coords[where[unordered[0]]])
        raise ValueError(f"box {box} is not ordered (x0 <= x1, y0 <= y1)")
    # A fragment starts at the first box, after a line break, and where a box does not
    # follow on from the one before it.
    breaks = np.cumsum(
        np.frombuffer(text.encode("utf-32-le", "surrogatepass"), dtype="<u4") == 0x0A
    )
    before = np.concatenate(([0], breaks[where[:-1]]))
    starts = (breaks[where] != before) | ~_follows_each(np, q)
    starts[0] = True
    fragment = np.cumsum(starts) - 1
    first = np.flatnonzero(starts)
    offsets = page_offset + where.astype(np.int64)
    # Each box against the one before it in its fragment; a fragment's first box
    # against its own start and zeros.
    previous = np.roll(q, 1, axis=0)
    previous[first] = 0
    previous_offset = np.roll(offsets, 1)
    previous_offset[first] = offsets[first]
    per_box = np.stack(
        (
            offsets - previous_offset,
            q[:, 0] - previous[:, 2],
            q[:, 1] - previous[:, 1],
            q[:, 2] - q[:, 0],
            q[:, 3] - previous[:, 3],
        ),
        axis=1,
    )
    line_start = offsets[first]
    counts = np.diff(np.append(first, len(where)))
    headers = np.stack((line_start - np.concatenate(([0], line_start[:-1])), counts), axis=1)
    values = np.empty(1 + 2 * len(first) + 5 * len(where), dtype=np.int64)
    values[0] = len(first)
    header_at = 1 + 2 * np.arange(len(first)) + 5 * first
    values[header_at] = headers[:, 0]
    values[header_at + 1] = headers[:, 1]
    box_at = 3 + 2 * fragment + 5 * np.arange(len(where))
    for column in range(5):
        values[box_at + column] = per_box[:, column]
    return _little_endian(np, values)


def _coordinates(np: Any, boxes: Sequence[Box | None]) -> Any:
    """The boxes as an (n, 4) float64 array, NaN for a character without a box."""
    if isinstance(boxes, PackedBoxes):
        return np.frombuffer(boxes.values, dtype=np.float32).astype(np.float64).reshape(-1, 4)
    return np.array([NO_BOX if b is None else b for b in boxes], dtype=np.float64).reshape(-1, 4)


def _follows_each(np: Any, q: Any) -> Any:
    """Whether each box ``b = q[i]`` continues the line box ``a = q[i - 1]`` belongs to
    (False for the first): they share at least half of the smaller extent across the
    line, and the gap along it is at most the larger extent across it (about a glyph's
    height). Holds for text running left or right, up or down (rotated text); a jump to
    another column or line fails it."""
    a, b = np.roll(q, 1, axis=0), q
    out = np.zeros(len(q), dtype=bool)
    for (lo, hi), (lo2, hi2) in (((1, 3), (0, 2)), ((0, 2), (1, 3))):
        shared = np.minimum(a[:, hi], b[:, hi]) - np.maximum(a[:, lo], b[:, lo])
        extent_a, extent_b = a[:, hi] - a[:, lo], b[:, hi] - b[:, lo]
        extent = np.minimum(extent_a, extent_b)
        across = ~((shared * 2 < extent) | ((extent <= 0) & (shared < 0)))
        gap = np.maximum(np.maximum(b[:, lo2] - a[:, hi2], a[:, lo2] - b[:, hi2]), 0)
        out |= across & (gap <= np.maximum(extent_a, extent_b))
    out[0] = False
    return out


def _little_endian(np: Any, values: Any) -> bytes:
    if values.min(initial=0) < -(1 << 31) or values.max(initial=0) >= 1 << 31:
        raise ValueError("a geometry value does not fit 32 bits")
    return bytes(values.astype("<i4").tobytes())


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


def blobs_unpack(value: Mapping[str, Any]) -> bool:
    """Whether every page blob of ``value`` (shaped as ``check_geometry`` accepts)
    unpacks to whole 32-bit values: the cheap part of ``decode_page``, for geometry
    read from outside the store. A blob can still fail ``decode_page`` later."""
    try:
        return all(_unpacked(entry[5]) for entry in value["pages"])  # b"": no line count
    except DamagedGeometryError:
        return False


def _unpacked(blob: str) -> bytes:
    """A page blob's int32 bytes; ``DamagedGeometryError`` unless it unpacks to whole
    values."""
    try:
        raw = zlib.decompress(base64.b64decode(blob, validate=True))
    except (binascii.Error, zlib.error, ValueError):
        raise DamagedGeometryError("page geometry does not decode") from None
    if len(raw) % 4:
        raise DamagedGeometryError("page geometry has a partial value")
    return raw


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
    raw = _unpacked(blob)
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
