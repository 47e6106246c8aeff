"""PDF pages as PNG images, and where a rectangle in page space falls on such an image.

The citation inspector draws a citation's rectangles over the page it cites. The
rectangles are in the page's own user space (PDF points, origin at the bottom left,
page rotation not applied); the image is the crop box as a viewer shows it (rotation
applied). ``PixelFrame`` holds what maps one to the other, so the drawing and the
rendering agree by construction. Rendering uses pypdfium2 (the ``pdf`` extra), with
calls into pdfium serialised, as pdfium is not thread-safe.

One render holds one full-size buffer: pdfium draws three bytes a pixel into it, and
the PNG is compressed from it row by row. A page that would pass ``MAX_EDGE_PX`` pixels
a side or ``MAX_PAGE_PIXELS`` in all at the asked scale is rendered at the largest scale
within both (its frame says which), and one page image is made at a time in the
process, so a render never takes more than about 50 MB whatever the PDF asks for
(adr/0098-large-pages-rendered-to-fit.md).
"""

from __future__ import annotations

import importlib
import math
import struct
import threading
import zlib
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from groundkit.errors import ConfigurationError, IngestionError
from groundkit.extraction.pdf import MAX_EDGE_PX, PDFIUM_LOCK

__all__ = ["MAX_PAGE_PIXELS", "PageImage", "PixelFrame", "encode_png", "render_pdf_page"]

# The extractor's lock: every pdfium call in the process is serialised by one lock
# (pypdfium2 is not thread-safe), rendering and extraction alike.
_PDFIUM = PDFIUM_LOCK
# The most pixels one page image has: 48 MB of RGB. Four times a 4K screen, and an A0
# sheet at the inspector's 1.5 pixels a point (18 million) is shown at 1.4.
MAX_PAGE_PIXELS = 16_000_000
# One page image is rendered and encoded at a time, outside the pdfium lock for the
# encoding: concurrent requests wait rather than each holding a full-size buffer.
_ONE_IMAGE = threading.Lock()
_PNG_LEVEL = 6


@dataclass(frozen=True, slots=True)
class PixelFrame:
    """How page space maps onto the page's image.

    ``crop`` is the crop box ``(left, bottom, right, top)`` in page space, ``rotation``
    the page's /Rotate (0, 90, 180 or 270, clockwise) and ``scale`` pixels per point.
    """

    crop: tuple[float, float, float, float]
    rotation: int
    scale: float

    @property
    def size(self) -> tuple[int, int]:
        """The image's width and height in pixels."""
        left, bottom, right, top = self.crop
        width, height = (right - left) * self.scale, (top - bottom) * self.scale
        if self.rotation in (90, 270):
            width, height = height, width
        return round(width), round(height)

    def point(self, x: float, y: float) -> tuple[float, float]:
        """The image position (pixels from the top left) of page point ``(x, y)``."""
        left, bottom, right, top = self.crop
        # Unrotated: x grows to the right, y grows upwards from the crop box's bottom.
        u, v = (x - left) * self.scale, (top - y) * self.scale
        w, h = (right - left) * self.scale, (top - bottom) * self.scale
        if self.rotation == 90:
            return h - v, u
        if self.rotation == 180:
            return w - u, h - v
        if self.rotation == 270:
            return v, w - u
        return u, v

    def box(self, x0: float, y0: float, x1: float, y1: float) -> tuple[float, float, float, float]:
        """A page-space rectangle as ``(left, top, width, height)`` in image pixels."""
        ax, ay = self.point(x0, y0)
        bx, by = self.point(x1, y1)
        left, top = min(ax, bx), min(ay, by)
        return left, top, abs(bx - ax), abs(by - ay)


@dataclass(frozen=True, slots=True)
class PageImage:
    """One rendered page: the PNG and the frame its pixels are in."""

    png: bytes
    frame: PixelFrame
    width: int
    height: int


def _pdfium() -> Any:
    try:
        pypdfium2 = importlib.import_module("pypdfium2")
    except ImportError:
        raise ConfigurationError(
            "rendering PDF pages needs the 'pdf' extra: pip install groundkit[pdf]"
        ) from None
    return pypdfium2


def _open(pdfium: Any, data: bytes) -> Any:
    try:
        return pdfium.PdfDocument(data)
    except pdfium.PdfiumError as exc:
        raise IngestionError(f"not a readable PDF: {exc}") from None


def render_pdf_page(data: bytes, page_number: int, scale: float) -> PageImage:
    """Page ``page_number`` (1-based) of the PDF in ``data``, rendered at ``scale``
    pixels per point (less for a page too large for the limits at it: the frame holds
    the scale used), as a PNG. Same bytes, same image. Blocking: run it in a thread."""
    if not isinstance(scale, int | float) or not math.isfinite(scale) or scale <= 0:
        raise IngestionError(f"pages are rendered at a positive, finite scale, not {scale!r}")
    pdfium = _pdfium()
    with _ONE_IMAGE:
        with _PDFIUM:
            document = _open(pdfium, data)
            try:
                if not 1 <= page_number <= len(document):
                    raise IngestionError(
                        f"the PDF has no page {page_number} (it has {len(document)})"
                    )
                page = document[page_number - 1]
                try:
                    width_pt, height_pt = (float(v) for v in page.get_size())
                    used = _fitted_scale(width_pt, height_pt, float(scale))
                    frame = PixelFrame(
                        crop=_bounds(page.get_bbox()),
                        rotation=int(page.get_rotation()) % 360,
                        scale=used,
                    )
                    if min(frame.size) < 1:
                        width, height = frame.size
                        raise IngestionError(
                            f"page {page_number} is {width}x{height} pixels at this scale; "
                            f"pages of at least a pixel a side, up to {MAX_EDGE_PX} a side "
                            f"and {MAX_PAGE_PIXELS} in all, are rendered"
                        )
                    # Three bytes a pixel, red first: the PNG's own layout, no conversion.
                    bitmap = page.render(
                        scale=used,
                        force_bitmap_format=pdfium.raw.FPDFBitmap_BGR,
                        rev_byteorder=True,
                        no_smoothtext=False,
                        bitmap_maker=pdfium.PdfBitmap.new_native,
                    )
                    try:
                        # A buffer Python allocated (a native bitmap, packed rows): it
                        # outlives the bitmap's pdfium handle.
                        pixels, stride = bitmap.buffer, bitmap.stride
                        cols, rows = bitmap.width, bitmap.height
                    finally:
                        bitmap.close()
                finally:
                    page.close()
            except pdfium.PdfiumError as exc:
                raise IngestionError(f"cannot render page {page_number}: {exc}") from None
            finally:
                document.close()
        view = memoryview(pixels).cast("B")
        png = _png((view[r * stride : r * stride + cols * 3] for r in range(rows)), cols, rows)
        del view, pixels
    return PageImage(png=png, frame=frame, width=cols, height=rows)


def _fitted_scale(width_pt: float, height_pt: float, scale: float) -> float:
    """``scale``, or the largest below it at which a page of ``width_pt`` by ``height_pt``
    points is within ``MAX_EDGE_PX`` a side and ``MAX_PAGE_PIXELS`` in all (pdfium's
    image is the size rounded up); 0 when there is no such scale."""

    def size(at: float) -> tuple[int, int]:
        return math.ceil(width_pt * at), math.ceil(height_pt * at)

    def fits(at: float) -> bool:
        width, height = size(at)
        return max(width, height) <= MAX_EDGE_PX and width * height <= MAX_PAGE_PIXELS

    if not (math.isfinite(width_pt) and math.isfinite(height_pt)):
        return 0.0
    if width_pt <= 0 or height_pt <= 0:
        return 0.0
    used = scale
    if not fits(used):
        used = min(
            scale,
            MAX_EDGE_PX / max(width_pt, height_pt),
            math.sqrt(MAX_PAGE_PIXELS / (width_pt * height_pt)),
        )
        # Rounding up may still pass a limit by a pixel: step down until it does not.
        for _ in range(1000):
            if fits(used):
                break
            used *= 0.999
        else:
            return 0.0
    return used


def encode_png(rgb: bytes, width: int, height: int) -> bytes:
    """An 8-bit RGB PNG of ``rgb`` (rows top to bottom, three bytes a pixel): a few
    lines of zlib, so rendering needs no imaging library."""
    stride = width * 3
    if len(rgb) != stride * height:
        raise ValueError("pixel data does not match the image size")
    view = memoryview(rgb).cast("B")
    return _png((view[row * stride : (row + 1) * stride] for row in range(height)), width, height)


def _png(rows: Iterable[memoryview], width: int, height: int) -> bytes:
    """An 8-bit RGB PNG of ``rows`` (``width`` RGB pixels each, top to bottom), compressed
    as they come: no copy of the whole image is made. The same bytes as compressing the
    filtered rows in one call (zlib's output does not depend on how input is fed)."""
    compressor = zlib.compressobj(_PNG_LEVEL)
    parts: list[bytes] = []
    line = bytearray(1 + width * 3)  # filter type 0 (none), then the row
    for row in rows:
        line[1:] = row
        parts.append(compressor.compress(line))
    parts.append(compressor.flush())
    idat = b"".join(parts)

    def chunk(kind: bytes, body: bytes) -> bytes:
        crc = zlib.crc32(body, zlib.crc32(kind)) & 0xFFFFFFFF
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", crc)

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"".join(
        (b"\x89PNG\r\n\x1a\n", chunk(b"IHDR", header), chunk(b"IDAT", idat), chunk(b"IEND", b""))
    )


def _bounds(values: Any) -> tuple[float, float, float, float]:
    """``(left, bottom, right, top)`` of the visible page: pdfium's bounding box, the crop
    box within the media box, inherited from the page tree when the page has none."""
    left, bottom, right, top = (float(v) for v in values)
    return left, bottom, right, top
