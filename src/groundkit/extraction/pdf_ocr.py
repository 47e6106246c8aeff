"""A PDF page without a text layer, read by OCR: its text and a box per character.

The page is rendered by pdfium at the engine's resolution as a viewer shows it
(``/Rotate`` applied; a page too large for that within the pixel limit at the highest
whole dpi that fits, down to ``MIN_OCR_DPI``, adr/0098-large-pages-rendered-to-fit.md),
recognised, and laid out by fixed rules (the ``OCR_LAYOUT``
revision, part of the identity): words joined by a space, lines by a newline,
paragraphs and blocks by a blank line. A character's box is its equal share of
its word's box along the line, mapped from image pixels to the page's own user
space through pdfium's device-to-page transform, so rotated pages come out in the
same coordinates as a text layer's character boxes. Spaces and line breaks are
generated and have no box.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from groundkit.errors import ConfigurationError, IngestionError
from groundkit.extraction.ocr import GrayImage, OcrEngine, OcrLine, ocr_engine
from groundkit.utils.geometry import Box

__all__ = [
    "MIN_OCR_DPI",
    "OCR_LAYOUT",
    "OCR_MARK",
    "OCR_OFF",
    "DeviceToPage",
    "OcrEngineChangedError",
    "OcrMode",
    "OcrPolicy",
    "PageTooLargeError",
    "lay_out",
    "ocr_identity",
    "ocr_policy",
    "recorded_engine",
    "render_dpi",
    "render_page",
    "split_ocr_identity",
    "unread_note",
]

OcrMode = Literal["auto", "required", "off"]

# The layout rules below, by revision: changing them changes offsets.
OCR_LAYOUT = "groundkit-ocr/1"
# Between a PDF extractor's identity and the OCR engine's in a document's identity.
OCR_MARK = "+ocr:"
# The lowest resolution a page too large for the engine's is recognised at: below it
# the page is left unread (with a warning), not read as noise.
MIN_OCR_DPI = 72


def ocr_identity(pdf_identity: str, engine: OcrEngine) -> str:
    """The identity of a PDF's text when some of its pages were recognised."""
    return f"{pdf_identity}{OCR_MARK}{_ocr_part(engine)}"


def _ocr_part(engine: OcrEngine) -> str:
    return f"{OCR_LAYOUT}+{engine.identity}"


def split_ocr_identity(identity: str) -> tuple[str, str | None]:
    """``(pdf identity, recorded OCR part)``; the OCR part is None for a text-layer PDF."""
    base, mark, recorded = identity.partition(OCR_MARK)
    return (base, recorded) if mark else (identity, None)


class OcrEngineChangedError(ConfigurationError):
    """The OCR engine here is not the one a document was recognised with."""


_LANGUAGE_DATA = re.compile(r"(?:^|\+)([A-Za-z0-9_]+)@[0-9a-f]{12}(?=\+|$)")


def recorded_engine(recorded: str) -> OcrEngine:
    """This host's engine for the languages a recorded OCR part names.

    ``ConfigurationError`` when OCR (or that language's data) is not installed;
    ``OcrEngineChangedError``, naming both, when the engine differs from the
    recorded one (another tesseract, other language data, other settings): a
    different engine may read the page differently, so it is never used instead.
    """
    languages = _LANGUAGE_DATA.findall(recorded)
    if not languages:
        raise ConfigurationError(f"{recorded!r} names no OCR language data")
    engine = ocr_engine("+".join(languages))
    here = _ocr_part(engine)
    if here != recorded:
        raise OcrEngineChangedError(
            f"the page text was recognised by {recorded}, and the OCR engine here is {here}"
        )
    return engine


@dataclass(frozen=True, slots=True)
class OcrPolicy:
    """What to do with a page that has no text layer: recognise it with ``engine``;
    with no engine, fail the PDF (``required``) or leave the page empty, for the
    reason ``missing``."""

    engine: OcrEngine | None
    missing: str = ""
    required: bool = False

    def unread(self, pages: Sequence[int]) -> str:
        """What to say of ``pages`` (1-based) when they are left without text."""
        return unread_note(pages, self.missing)


def unread_note(pages: Sequence[int], reason: str) -> str:
    """What to say of ``pages`` (1-based) left without text, for ``reason``."""
    listed = ", ".join(str(p) for p in pages)
    if len(pages) == 1:
        return f"page {listed} has no text layer and was not read: {reason}"
    return f"pages {listed} have no text layer and were not read: {reason}"


class PageTooLargeError(IngestionError):
    """A page too large to render for OCR at ``MIN_OCR_DPI`` within the pixel limit:
    the PDF is read without it, never failed for it."""


OCR_OFF = OcrPolicy(None, "OCR is off (IngestConfig(ocr='off'), grk ingest --ocr off)")


def ocr_policy(mode: OcrMode, languages: str = "eng") -> OcrPolicy:
    """The policy ``IngestConfig.ocr`` asks for. A missing engine is not an error
    here: only a PDF with a page to recognise needs one."""
    if mode == "off":
        return OCR_OFF
    try:
        return OcrPolicy(ocr_engine(languages))
    except ConfigurationError as exc:
        return OcrPolicy(None, str(exc), required=mode == "required")


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


def render_dpi(width_pt: float, height_pt: float, dpi: int, max_edge: int) -> int:
    """The resolution a page of ``width_pt`` by ``height_pt`` points is rendered at for
    OCR: ``dpi``, or when its longer edge would pass ``max_edge`` pixels at that, the
    highest whole dpi at which it does not. A function of the page's size alone, so the
    same bytes are always read the same way. ``PageTooLargeError`` below ``MIN_OCR_DPI``
    (and for a size that is no number)."""
    longest = max(width_pt, height_pt)
    if not math.isfinite(longest) or longest <= 0:
        raise PageTooLargeError(f"a page of {width_pt}x{height_pt} pt cannot be rendered")

    def fits(resolution: int) -> bool:
        # Rounded as the limit has always been checked: pages that fitted still do.
        return round(longest * resolution / 72) <= max_edge

    if fits(dpi):
        return dpi
    fitted = min(dpi, math.floor(max_edge * 72 / longest))
    while fitted > 0 and not fits(fitted):
        fitted -= 1
    if fitted < MIN_OCR_DPI:
        raise PageTooLargeError(
            f"a page of {width_pt:.0f}x{height_pt:.0f} pt is "
            f"{round(longest * MIN_OCR_DPI / 72)} pixels across at {MIN_OCR_DPI} dpi; "
            f"pages up to {max_edge} pixels a side are recognised"
        )
    return fitted


def render_page(page: Any, dpi: int, max_edge: int) -> tuple[GrayImage, DeviceToPage]:
    """``page`` (a pypdfium2 ``PdfPage``) rendered in gray as shown (annotations and
    form fields left out: the page's own content) at ``render_dpi`` (``dpi`` unless an
    edge would pass ``max_edge`` pixels; the image says which), and the map back to
    its user space, which follows the render. ``PageTooLargeError`` when even
    ``MIN_OCR_DPI`` is too much. Call it under the pdfium lock."""
    width_pt, height_pt = page.get_size()
    used = render_dpi(width_pt, height_pt, dpi, max_edge)
    bitmap = page.render(scale=used / 72, grayscale=True, draw_annots=False, may_draw_forms=False)
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
    return GrayImage(width, height, pixels, used), transform


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
