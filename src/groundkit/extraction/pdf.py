"""PDF text and character boxes through pdfium (pypdfium2), pages joined by ``PAGE_SEPARATOR``.

Text and boxes come from one pdfium text page, character by character, so the
offsets a citation names and the rectangles it shows are one extraction
(adr/0072-pdf-rectangles.md). pypdfium2 is the optional ``pdf`` extra, imported on
first use. pdfium is not thread-safe: every call into it holds one process-wide lock.

What pdfium reports is normalised the same way every run:

- a line break (``"\\r\\n"``, which pdfium generates) becomes ``"\\n"``;
- a hyphen pdfium marks as ending a line (it reports it as U+0002, or U+FFFE in
  bulk text) becomes ``"-"`` with its box, followed by a ``"\\n"``;
- NUL (a glyph with no Unicode mapping) becomes U+FFFD with its box.

Characters pdfium generates (spaces between words placed apart, line breaks)
have no box; every other character keeps its loose box: the glyph's advance
width by the font's ascent to descent, so boxes of one line share a height and
abut, and a highlight reads as a line of text, not a row of glyph outlines.

A page with no text layer (a scan) is read by OCR when the extractor's policy has
an engine (``with_policy``; extraction/pdf_ocr.py, adr/0073-ocr.md): one page at a
time, rendered under the lock and recognised after it is released, so one page
image is held at once and other PDFs are read meanwhile. A page too large for 300 dpi
within ``MAX_EDGE_PX`` is rendered at the highest whole dpi that fits; one too large
even at 72 dpi is left unread with a note, never failing the PDF
(adr/0098-large-pages-rendered-to-fit.md).
"""

from __future__ import annotations

import ctypes
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any

from groundkit.errors import ConfigurationError, IngestionError
from groundkit.extraction.base import (
    BaseExtractor,
    Extraction,
    composite_identity,
    join_pages,
)
from groundkit.extraction.ocr import OCR_DPI, OcrEngine, OcrLine
from groundkit.extraction.pdf_ocr import (
    MIN_OCR_DPI,
    OCR_OFF,
    DeviceToPage,
    OcrPolicy,
    PageTooLargeError,
    lay_out,
    ocr_identity,
    render_page,
    unread_note,
)
from groundkit.utils.geometry import NO_BOX, Box, PackedBoxes, PageFrame, encode_geometry

__all__ = ["MAX_EDGE_PX", "PDFIUM_LOCK", "PDF_LAYOUT", "PdfExtractor", "pdf_extractor"]

# groundkit's rules on top of pdfium's output (the normalisation above, the page
# separator): a change to them is a new identity.
PDF_LAYOUT = "groundkit-pdf/1"

# pdfium keeps global state and is not safe to call from two threads at once.
PDFIUM_LOCK = threading.Lock()
# The largest image edge pdfium is asked to render, in pixels (page images and pages
# rendered for OCR): a huge page is not a way to exhaust memory.
MAX_EDGE_PX = 6000
# Why a scanned page is left unread by an extractor that has an OCR engine.
_TOO_LARGE = (
    f"it is too large to recognise (OCR renders a page at {MIN_OCR_DPI} dpi or more, "
    f"at most {MAX_EDGE_PX} pixels a side)"
)

_ENCRYPTED = "encrypted PDF that needs a password; decrypt it first (qpdf --decrypt)"
_HYPHEN_CODES = frozenset({0x02, 0xFFFE, 0x2D})
_MAYBE_GENERATED = frozenset({0x20, 0x0A, 0x0D, 0x02, 0xFFFE, 0x2D})
_INFO_KEYS = {
    "title": "Title",
    "author": "Author",
    "subject": "Subject",
    "creation_date": "CreationDate",
}


def _import_pdfium() -> Any:
    try:
        import pypdfium2
    except ImportError:
        raise ConfigurationError(
            "reading PDF needs the 'pdf' extra: pip install groundkit[pdf]"
        ) from None
    return pypdfium2


PageText = tuple[str, Sequence[Box | None]]


@dataclass(frozen=True, slots=True)
class _Scanned:
    """A page with no text layer: what its layer holds (whitespace at most)."""

    layer: PageText


@dataclass(frozen=True, slots=True)
class _Read:
    """What is read from the document under the pdfium lock."""

    frames: list[PageFrame]
    pages: list[PageText | _Scanned]
    info: dict[str, str]
    info_error: str | None


class PdfExtractor(BaseExtractor):
    """pdfium's text page per page, with each character's box. Get it from ``pdf_extractor()``;
    it reads no page by OCR unless given a policy that does (``with_policy``)."""

    def __init__(self, identity: str, module: Any, policy: OcrPolicy = OCR_OFF) -> None:
        super().__init__(identity, module)
        self._policy = policy

    @property
    def run_identity(self) -> str:
        # Pages without a text layer read by this engine, or left empty with this
        # reason (the reason is in the extraction's note), or failing the PDF.
        engine = self._policy.engine
        if engine is not None:
            ocr = f"ocr={engine.identity}"
        else:
            ocr = f"ocr=none;required={self._policy.required};{self._policy.missing}"
        return f"{self.identity}\x00{ocr}"

    def with_policy(self, policy: OcrPolicy) -> PdfExtractor:
        """This extractor treating pages without a text layer as ``policy`` says."""
        return PdfExtractor(self.identity, self._module, policy)

    def with_ocr(self, engine: OcrEngine) -> PdfExtractor:
        """This extractor recognising every page without a text layer with ``engine``."""
        return self.with_policy(OcrPolicy(engine, required=True))

    def _run(self, data: bytes, charset: str | None) -> Extraction:
        with PDFIUM_LOCK:
            read = self._extract(data)
        return self._assemble(read, data)

    def _text(self, data: bytes) -> str:
        # Without each character's box: about half the cost, the very same text.
        with PDFIUM_LOCK:
            read = self._extract(data, with_boxes=False)
        pages, _, _ = self._recognise(read.pages, data)
        return join_pages([text for text, _ in pages])[0]

    def _extract(self, data: bytes, *, with_boxes: bool = True) -> _Read:
        pdfium = self._module
        try:
            document = pdfium.PdfDocument(data)
        except pdfium.PdfiumError as exc:
            if getattr(exc, "err_code", None) == pdfium.raw.FPDF_ERR_PASSWORD:
                # pdfium tries the empty user password itself, as viewers do; anything
                # else needs a password groundkit has no way to be given.
                raise IngestionError(_ENCRYPTED) from None
            raise IngestionError(f"not a readable PDF (damaged or truncated?): {exc}") from None
        try:
            frames: list[PageFrame] = []
            pages: list[PageText | _Scanned] = []
            for index in range(len(document)):
                page = document[index]
                try:
                    frames.append(_frame(pdfium, page))
                    pages.append(_page_text(pdfium, page, with_boxes=with_boxes))
                finally:
                    page.close()
            info, info_error = _pdf_info(document)
        except IngestionError:
            raise
        except Exception as exc:
            # pdfium reports damage as PdfiumError; a wrapper may raise others. None
            # may cross the public API.
            raise IngestionError(
                f"not a readable PDF (damaged or truncated?): {type(exc).__name__}: {exc}"
            ) from None
        finally:
            document.close()
        if not pages:
            raise IngestionError("PDF has no pages")
        return _Read(frames, pages, info, info_error)

    def _assemble(self, read: _Read, data: bytes) -> Extraction:
        pages, recognised, unread = self._recognise(read.pages, data)
        frames, info, info_error = read.frames, read.info, read.info_error
        joined, starts = join_pages([text for text, _ in pages])
        try:
            geometry = encode_geometry(
                frames,
                [(start, text, boxes) for start, (text, boxes) in zip(starts, pages, strict=True)],
            )
        except ValueError as exc:  # the encoder's own checks: this file fails, typed
            raise IngestionError(
                f"cannot record where this PDF's characters stand ({exc}); not ingested"
            ) from None
        return Extraction(
            text=joined,
            page_starts=starts,
            info=info,
            info_error=info_error,
            geometry=geometry,
            identity=(
                ocr_identity(self.identity, self._policy.engine)
                if recognised and self._policy.engine is not None
                else None
            ),
            unread=unread,
        )

    def _recognise(
        self, read: list[PageText | _Scanned], data: bytes
    ) -> tuple[list[PageText], bool, str | None]:
        """Each page's text and boxes, scanned pages recognised; whether OCR gave any
        text, and what to say of scanned pages left unread (None when there are none)."""
        pages: list[PageText] = []
        recognised = False
        unread: list[int] = []
        too_large: list[int] = []
        engine = self._policy.engine
        for number, page in enumerate(read, start=1):
            if not isinstance(page, _Scanned):
                pages.append(page)
            elif engine is None:
                unread.append(number)
                pages.append(page.layer)
            else:
                try:
                    lines, to_page = self._recognise_page(data, number - 1, engine)
                except PageTooLargeError:
                    # Left as OCR off leaves it: the PDF's other pages are still read.
                    too_large.append(number)
                    pages.append(page.layer)
                    continue
                # tesseract ran with the lock released: other PDFs were read meanwhile.
                text, boxes = lay_out(lines, to_page)
                # Nothing recognised: the page stays as its layer reads, so the text
                # is the same as with OCR off and the identity need not name OCR.
                recognised |= bool(text)
                pages.append((text, boxes) if text else page.layer)
        if unread and self._policy.required:
            raise IngestionError(self._policy.unread(unread))
        notes = [self._policy.unread(unread)] if unread else []
        if too_large:
            notes.append(unread_note(too_large, _TOO_LARGE))
        return pages, recognised, "; ".join(notes) or None

    def _recognise_page(
        self, data: bytes, index: int, engine: OcrEngine
    ) -> tuple[list[OcrLine], DeviceToPage]:
        """Page ``index`` recognised: its lines and the map back to its points. The
        document is opened again for the page (cheap next to recognition), so the lock
        is held only while pdfium renders."""
        pdfium = self._module
        with PDFIUM_LOCK:
            try:
                document = pdfium.PdfDocument(data)
            except pdfium.PdfiumError as exc:
                raise IngestionError(
                    f"cannot open the PDF to read page {index + 1}: {exc}"
                ) from None
            try:
                page = document[index]
                try:
                    image, to_page = render_page(page, OCR_DPI, MAX_EDGE_PX)
                except pdfium.PdfiumError as exc:
                    raise IngestionError(f"cannot render page {index + 1} for OCR: {exc}") from None
                finally:
                    page.close()
            finally:
                document.close()
        return engine.recognise(image), to_page


def _frame(pdfium: Any, page: Any) -> PageFrame:
    """The page's crop box (as pdfium bounds it by the media box) and its rotation."""
    rect = pdfium.raw.FS_RECTF()
    if not pdfium.raw.FPDF_GetPageBoundingBox(page, rect):
        raise IngestionError("not a readable PDF (damaged or truncated?): a page has no box")
    x0, x1 = sorted((rect.left, rect.right))
    y0, y1 = sorted((rect.bottom, rect.top))
    return PageFrame(round(x0, 2), round(y0, 2), round(x1, 2), round(y1, 2), page.get_rotation())


def _page_text(pdfium: Any, page: Any, *, with_boxes: bool = True) -> PageText | _Scanned:
    """The page's text and one box (or None) per character of it (none at all without
    ``with_boxes``: the text is the same).

    The one place a page becomes text. A page whose layer holds no text but that
    draws something is a scan, left to OCR (``PdfExtractor._recognise``, outside
    the lock). A page that draws nothing is blank, not scanned.
    """
    textpage = page.get_textpage()
    try:
        layer = _text_layer(pdfium.raw, textpage, with_boxes=with_boxes)
    finally:
        textpage.close()
    if layer[0].strip() or pdfium.raw.FPDFPage_CountObjects(page) <= 0:
        return layer
    return _Scanned(layer)


def _text_layer(raw: Any, textpage: Any, *, with_boxes: bool = True) -> tuple[str, PackedBoxes]:
    """pdfium's characters, normalised (module docstring), with their loose boxes (left
    empty without ``with_boxes``: nothing of the text depends on them).

    The hot loop of a PDF read: two pdfium calls a character. It calls pdfium with the
    raw handle and a reference made once (pypdfium2's wrapper would look both up at every
    call), and orders each box's corners in one pass at the end.
    """
    handle = textpage.raw
    count = raw.FPDFText_CountChars(handle)
    if count < 0:
        raise IngestionError("not a readable PDF (damaged or truncated?): unreadable text layer")
    unicode_at, generated_at, box_at = (
        raw.FPDFText_GetUnicode,
        raw.FPDFText_IsGenerated,
        raw.FPDFText_GetLooseCharBox,
    )
    rect = raw.FS_RECTF()
    rect_ref = ctypes.byref(rect)
    chars: list[str] = []
    add = chars.append
    packed = PackedBoxes()
    # The array's own extend, called once a character.
    push, none = packed.values.extend if with_boxes else _discard, NO_BOX
    for i in range(count):
        code = unicode_at(handle, i)
        if code == 0x0D:  # pdfium's line break is "\r\n": the "\n" stands for it
            if i + 1 < count and unicode_at(handle, i + 1) == 0x0A:
                continue
            code = 0x0A
        # pdfium generates only blanks and line breaks: other characters skip the call.
        if code == 0x0A or (code in _MAYBE_GENERATED and generated_at(handle, i) == 1):
            add(chr(code))
            push(none)
            continue
        if with_boxes:
            box_at(handle, i, rect_ref)
            box = (rect.left, rect.bottom, rect.right, rect.top)
        else:
            box = none
        if code in _HYPHEN_CODES and raw.FPDFText_IsHyphen(handle, i) == 1:
            add("-")
            push(box)
            following = unicode_at(handle, i + 1) if i + 1 < count else 0
            if following not in (0x0D, 0x0A):  # pdfium joined the lines: break them again
                add("\n")
                push(none)
            continue
        add(chr(code) if 0 < code < 0xD800 else _char(code))
        push(box)
    packed.order_corners()
    return "".join(chars), packed


def _discard(_: Box) -> None:
    """Where a text-only read sends boxes."""


def _char(code: int) -> str:
    """A code pdfium reports as one character of the text."""
    if code == 0 or 0xD800 <= code <= 0xDFFF or code > 0x10FFFF:
        return "\ufffd"  # no Unicode mapping, or half a pair: a replacement, in place
    return chr(code)


def _pdf_info(document: Any) -> tuple[dict[str, str], str | None]:
    """The document info strings fields are made from, or why they could not be read."""
    try:
        found = document.get_metadata_dict(skip_empty=True)
    except Exception as exc:  # a damaged info dictionary
        return {}, f"unreadable document info: {type(exc).__name__}: {exc}"
    info: dict[str, str] = {}
    for name, key in _INFO_KEYS.items():
        value = found.get(key)
        if value is None:
            continue
        if not isinstance(value, str):
            return {}, f"document info /{key} is a {type(value).__name__}, not text"
        info[name] = value
    return info, None


@cache
def pdf_extractor() -> PdfExtractor:
    """The process's PdfExtractor; ``ConfigurationError`` when the 'pdf' extra is missing."""
    module = _import_pdfium()
    return PdfExtractor(composite_identity(PDF_LAYOUT, "pypdfium2"), module)
