"""A PDF page without a text layer, read by OCR: its text and a box per character.

The page is rendered by pdfium at the engine's resolution as a viewer shows it
(``/Rotate`` applied), recognised, and laid out by fixed rules (the ``OCR_LAYOUT``
revision, part of the identity): words joined by a space, lines by a newline,
paragraphs and blocks by a blank line. A character's box is its equal share of
its word's box along the line, mapped from image pixels to the page's own user
space through pdfium's device-to-page transform, so rotated pages come out in the
same coordinates as a text layer's character boxes. Spaces and line breaks are
generated and have no box.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from groundkit.extraction.ocr import GrayImage, OcrEngine, OcrLine

__all__ = ["OCR_LAYOUT", "OCR_MARK", "DeviceToPage", "lay_out", "ocr_identity", "render_page"]

# The layout rules below, by revision: changing them changes offsets.
OCR_LAYOUT = "groundkit-ocr/1"
# Between a PDF extractor's identity and the OCR engine's in a document's identity.
OCR_MARK = "+ocr:"

# x0, y0, x1, y1 in PDF points.
Box = tuple[float, float, float, float]


def ocr_identity(pdf_identity: str, engine: OcrEngine) -> str:
    """The identity of a PDF's text when some of its pages were recognised."""
    return f"{pdf_identity}{OCR_MARK}{OCR_LAYOUT}+{engine.identity}"


@dataclass(frozen=True, slots=True)
class DeviceToPage:
    """The affine map from rendered-image pixels (origin top-left) to the page's
    user space (points, origin bottom-left, ``/Rotate`` not applied)."""

    origin: tuple[float, float]
    per_x: tuple[float, float]  # page delta for one pixel right
    per_y: tuple[float, float]  # page delta for one pixel down

    def __call__(self, x: float, y: float) -> tuple[float, float]:
        return (
            self.origin[0] + x * self.per_x[0] + y * self.per_y[0],
            self.origin[1] + x * self.per_x[1] + y * self.per_y[1],
        )

    @classmethod
    def from_corners(
        cls,
        to_page: Callable[[int, int], tuple[float, float]],
        width: int,
        height: int,
    ) -> DeviceToPage:
        """The map through three image corners, as pdfium converts them: the corners
        are far apart, so the per-pixel steps are exact to well below a point."""
        ox, oy = to_page(0, 0)
        rx, ry = to_page(width, 0)
        dx, dy = to_page(0, height)
        return cls(
            (ox, oy),
            ((rx - ox) / width, (ry - oy) / width),
            ((dx - ox) / height, (dy - oy) / height),
        )


def render_page(page: Any, dpi: int) -> tuple[GrayImage, DeviceToPage]:
    """``page`` (a pypdfium2 ``PdfPage``) rendered in gray at ``dpi`` as shown
    (annotations and form fields left out: the page's own content), and the map
    back to its user space. Call it under the pdfium lock."""
    bitmap = page.render(scale=dpi / 72, grayscale=True, draw_annots=False, may_draw_forms=False)
    try:
        width, height, stride = bitmap.width, bitmap.height, bitmap.stride
        view = memoryview(bitmap.buffer).cast("B")
        if stride == width:
            pixels = bytes(view[: width * height])
        else:
            pixels = b"".join(view[r * stride : r * stride + width] for r in range(height))
        transform = DeviceToPage.from_corners(bitmap.get_posconv(page).to_page, width, height)
    finally:
        bitmap.close()
    return GrayImage(width, height, pixels), transform


def _char_box(to_page: DeviceToPage, left: float, top: float, right: float, bottom: float) -> Box:
    ax, ay = to_page(left, top)
    bx, by = to_page(right, bottom)
    return (min(ax, bx), min(ay, by), max(ax, bx), max(ay, by))


def lay_out(lines: Sequence[OcrLine], to_page: DeviceToPage) -> tuple[str, list[Box | None]]:
    """The page's text from recognised lines, and each character's box (None for
    the spaces and line breaks the layout puts between words and lines)."""
    parts: list[str] = []
    boxes: list[Box | None] = []
    previous: tuple[int, int] | None = None
    for line in lines:
        if previous is not None:
            # A new paragraph or block is a paragraph break for the chunker too.
            gap = "\n" if (line.block, line.paragraph) == previous else "\n\n"
            parts.append(gap)
            boxes.extend([None] * len(gap))
        previous = (line.block, line.paragraph)
        for index, word in enumerate(line.words):
            if index:
                parts.append(" ")
                boxes.append(None)
            step = (word.right - word.left) / len(word.text)
            for i in range(len(word.text)):
                boxes.append(
                    _char_box(
                        to_page,
                        word.left + i * step,
                        word.top,
                        word.left + (i + 1) * step,
                        word.bottom,
                    )
                )
            parts.append(word.text)
    return "".join(parts), boxes
