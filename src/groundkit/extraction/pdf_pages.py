"""PDF pages as PNG images, and where a rectangle in page space falls on such an image.

The citation inspector draws a citation's rectangles over the page it cites. The
rectangles are in the page's own user space (PDF points, origin at the bottom left,
page rotation not applied); the image is the crop box as a viewer shows it (rotation
applied). ``PixelFrame`` holds what maps one to the other, so the drawing and the
rendering agree by construction. Rendering uses pypdfium2 (the ``pdf`` extra), with
calls into pdfium serialised, as pdfium is not thread-safe.
"""

from __future__ import annotations

import importlib
import struct
import zlib
from dataclasses import dataclass
from typing import Any

from groundkit.errors import ConfigurationError, IngestionError
from groundkit.extraction.pdf import MAX_EDGE_PX, PDFIUM_LOCK

__all__ = ["PageImage", "PixelFrame", "encode_png", "render_pdf_page"]

# The extractor's lock: every pdfium call in the process is serialised by one lock
# (pypdfium2 is not thread-safe), rendering and extraction alike.
_PDFIUM = PDFIUM_LOCK


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
    pixels per point, as a PNG. Same bytes, same image. Blocking: run it in a thread."""
    pdfium = _pdfium()
    with _PDFIUM:
        document = _open(pdfium, data)
        try:
            if not 1 <= page_number <= len(document):
                raise IngestionError(f"the PDF has no page {page_number} (it has {len(document)})")
            page = document[page_number - 1]
            try:
                frame = PixelFrame(
                    crop=_bounds(page.get_bbox()),
                    rotation=int(page.get_rotation()) % 360,
                    scale=scale,
                )
                width, height = frame.size
                if max(width, height) > MAX_EDGE_PX or min(width, height) < 1:
                    raise IngestionError(
                        f"page {page_number} is {width}x{height} pixels at this scale; "
                        f"pages up to {MAX_EDGE_PX} pixels a side are rendered"
                    )
                bitmap = page.render(scale=scale, rev_byteorder=True, no_smoothtext=False)
                try:
                    pixels = bitmap.to_numpy()
                finally:
                    bitmap.close()
            finally:
                page.close()
        except pdfium.PdfiumError as exc:
            raise IngestionError(f"cannot render page {page_number}: {exc}") from None
        finally:
            document.close()
    rows, cols = int(pixels.shape[0]), int(pixels.shape[1])
    channels = int(pixels.shape[2]) if pixels.ndim == 3 else 1
    rgb = pixels[:, :, :3] if channels >= 3 else pixels.reshape(rows, cols, 1).repeat(3, axis=2)
    return PageImage(
        png=encode_png(rgb.tobytes(), cols, rows), frame=frame, width=cols, height=rows
    )


def encode_png(rgb: bytes, width: int, height: int) -> bytes:
    """An 8-bit RGB PNG of ``rgb`` (rows top to bottom, three bytes a pixel): a few
    lines of zlib, so rendering needs no imaging library."""
    stride = width * 3
    if len(rgb) != stride * height:
        raise ValueError("pixel data does not match the image size")
    raw = b"".join(b"\x00" + rgb[row * stride : (row + 1) * stride] for row in range(height))

    def chunk(kind: bytes, body: bytes) -> bytes:
        crc = zlib.crc32(kind + body) & 0xFFFFFFFF
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", crc)

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(raw, 6))
        + chunk(b"IEND", b"")
    )


def _bounds(values: Any) -> tuple[float, float, float, float]:
    """``(left, bottom, right, top)`` of the visible page: pdfium's bounding box, the crop
    box within the media box, inherited from the page tree when the page has none."""
    left, bottom, right, top = (float(v) for v in values)
    return left, bottom, right, top
