"""PDF pages rendered for the inspector: the pixel mapping agrees with pdfium's own,
the PNG is the page, the same bytes give the same image, bad input is an error."""

from __future__ import annotations

import io
import math
import struct
import tracemalloc
import zlib
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

pytest.importorskip("pypdfium2")

from groundkit.errors import IngestionError
from groundkit.extraction.pdf import MAX_EDGE_PX
from groundkit.extraction.pdf_pages import (
    MAX_PAGE_PIXELS,
    PageImage,
    PixelFrame,
    encode_png,
    render_pdf_page,
)
from groundkit.service.inspector.page_cache import PageCache

ROTATIONS = (0, 90, 180, 270)
# Page 3 and 4 have a crop box that does not start at the origin.
CROPS = {3: (20.0, 30.0, 380.0, 560.0), 4: (10.0, 40.0, 390.0, 590.0)}


def _pdf() -> bytes:
    """Four 400x600 pt pages, "Page N" at (50, 100) from the top left; page N has
    /Rotate 90*(N-1)."""
    import pypdfium2
    from fpdf import FPDF

    pdf = FPDF(unit="pt", format=(400, 600))
    pdf.set_font("helvetica", size=24)
    for number in range(1, 5):
        pdf.add_page()
        pdf.text(50, 100, f"Page {number}")
    document = pypdfium2.PdfDocument(bytes(pdf.output()))
    for index, rotation in enumerate(ROTATIONS):
        document[index].set_rotation(rotation)
    for number, crop in CROPS.items():
        document[number - 1].set_cropbox(*crop)
    out = io.BytesIO()
    document.save(out)
    document.close()
    return out.getvalue()


PDF = _pdf()


def _pdfium_mapping(page_number: int, scale: float) -> tuple[Any, Any, Any]:
    import pypdfium2

    document = pypdfium2.PdfDocument(PDF)
    page = document[page_number - 1]
    bitmap = page.render(scale=scale)
    return document, page, bitmap.get_posconv(page)


@settings(max_examples=60, deadline=None)
@given(
    page_number=st.integers(1, 4),
    x=st.floats(0, 400, allow_nan=False),
    y=st.floats(0, 600, allow_nan=False),
)
def test_points_map_as_pdfium_maps_them(page_number: int, x: float, y: float) -> None:
    image = render_pdf_page(PDF, page_number, 1.5)
    document, _, convert = _pdfium_mapping(page_number, 1.5)
    try:
        px, py = convert.to_bitmap(x, y)
    finally:
        document.close()
    mine = image.frame.point(x, y)
    # pdfium rounds to whole pixels.
    assert abs(mine[0] - px) <= 1 and abs(mine[1] - py) <= 1, (mine, (px, py))


def test_the_image_is_the_page_as_a_viewer_shows_it() -> None:
    import pypdfium2
    from PIL import Image

    assert len(pypdfium2.PdfDocument(PDF)) == 4
    for number, rotation in enumerate(ROTATIONS, start=1):
        image = render_pdf_page(PDF, number, 2.0)
        assert image.frame.rotation == rotation
        left, bottom, right, top = CROPS.get(number, (0.0, 0.0, 400.0, 600.0))
        assert image.frame.crop == (left, bottom, right, top)
        width, height = round((right - left) * 2), round((top - bottom) * 2)
        if rotation in (90, 270):
            width, height = height, width
        decoded = Image.open(io.BytesIO(image.png))
        assert decoded.size == (image.width, image.height) == (width, height) == image.frame.size
        # "Page N" is ink; a box around its baseline position holds it.
        gray = decoded.convert("L")
        x0, y0, w, h = image.frame.box(50, 600 - 100 - 4, 150, 600 - 100 + 20)
        ink = gray.crop((round(x0), round(y0), round(x0 + w), round(y0 + h))).histogram()
        assert sum(ink[:128]) > 50, number
        # Nothing in a margin corner.
        corner = gray.crop((0, 0, 20, 20)).histogram()
        assert sum(corner[:250]) == 0


def test_same_bytes_same_image() -> None:
    assert render_pdf_page(PDF, 2, 1.5).png == render_pdf_page(PDF, 2, 1.5).png


def test_bad_input_is_an_ingestion_error() -> None:
    with pytest.raises(IngestionError, match="no page 5"):
        render_pdf_page(PDF, 5, 1.5)
    with pytest.raises(IngestionError, match="no page 0"):
        render_pdf_page(PDF, 0, 1.5)
    with pytest.raises(IngestionError, match="not a readable PDF"):
        render_pdf_page(b"%PDF-1.4 this is not a pdf", 1, 1.5)
    with pytest.raises(IngestionError, match="0x0 pixels at this scale"):
        render_pdf_page(PDF, 1, 1e-4)  # no pixel at all


@pytest.mark.parametrize("scale", [math.nan, math.inf, -math.inf, -1.5, 0.0])
def test_a_scale_that_is_no_positive_number_is_refused(scale: float) -> None:
    with pytest.raises(IngestionError, match="positive, finite scale"):
        render_pdf_page(PDF, 1, scale)


def _big_pdf(side: float) -> bytes:
    """One ``side`` x ``side`` pt page with "Hello" at (100, 200) from the top left."""
    from fpdf import FPDF

    pdf = FPDF(unit="pt", format=(side, side))
    pdf.add_page()
    pdf.set_font("helvetica", size=40)
    pdf.text(100, 200, "Hello")
    return bytes(pdf.output())


def test_a_page_too_large_at_the_scale_is_rendered_smaller_within_the_limits() -> None:
    from PIL import Image

    # 6,000 x 6,000 pixels asked: within the edge limit, over the area limit.
    image = render_pdf_page(_big_pdf(4000), 1, 1.5)
    assert image.width * image.height <= MAX_PAGE_PIXELS
    assert max(image.width, image.height) <= MAX_EDGE_PX
    # The largest scale within 16 million pixels: 4,000 pixels a side.
    assert 0.999 < image.frame.scale <= math.sqrt(MAX_PAGE_PIXELS) / 4000
    decoded = Image.open(io.BytesIO(image.png))
    assert decoded.size == (image.width, image.height) == image.frame.size
    # The frame is the scale used: "Hello" is where it maps.
    x0, y0, w, h = image.frame.box(100, 4000 - 200, 200, 4000 - 170)
    ink = decoded.convert("L").crop((round(x0), round(y0), round(x0 + w), round(y0 + h)))
    assert sum(ink.histogram()[:128]) > 50
    # Far past the edge limit as asked (the old refusal): shown smaller, not refused.
    wide = render_pdf_page(PDF, 1, 100.0)
    assert max(wide.width, wide.height) <= MAX_EDGE_PX
    assert wide.width * wide.height <= MAX_PAGE_PIXELS
    # pdfium rounds the size up, the frame to the nearest: a pixel apart at most.
    (frame_width, frame_height) = wide.frame.size
    assert abs(frame_width - wide.width) <= 1 and abs(frame_height - wide.height) <= 1


def test_a_render_holds_one_full_size_buffer() -> None:
    # tracemalloc sees pypdfium2's bitmap (a ctypes buffer), bytes and zlib's state:
    # a render that copied the pixels (to bytes, to filtered rows, joined) peaks at 4x.
    data = _big_pdf(1000)
    render_pdf_page(data, 1, 1.0)  # imports and pdfium's first-use allocations
    tracemalloc.start()
    try:
        image = render_pdf_page(data, 1, 1.0)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    full = image.width * image.height * 3
    assert (image.width, image.height) == (1000, 1000)
    assert peak < 1.5 * full, peak / full


def test_png_encoding_is_what_one_zlib_call_makes() -> None:
    # Rows compressed as they come give the very bytes of compressing them at once.
    width, height = 97, 61
    rgb = bytes(
        (x * 31 + y * 7 + (x * y) % 13) % 256 for y in range(height) for x in range(width * 3)
    )
    raw = b"".join(b"\x00" + rgb[r * width * 3 : (r + 1) * width * 3] for r in range(height))

    def chunk(kind: bytes, body: bytes) -> bytes:
        crc = zlib.crc32(kind + body) & 0xFFFFFFFF
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", crc)

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    expected = (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(raw, 6))
        + chunk(b"IEND", b"")
    )
    assert encode_png(rgb, width, height) == expected


def test_png_encoding_round_trips() -> None:
    from PIL import Image

    rgb = bytes((i * 7) % 256 for i in range(7 * 5 * 3))
    decoded = Image.open(io.BytesIO(encode_png(rgb, 7, 5)))
    assert decoded.mode == "RGB" and decoded.size == (7, 5)
    assert decoded.tobytes() == rgb
    with pytest.raises(ValueError, match="does not match"):
        encode_png(b"abc", 2, 2)


def test_the_cache_keeps_the_most_recent_within_its_budget() -> None:
    frame = PixelFrame((0, 0, 1, 1), 0, 1.0)

    def image(size: int) -> PageImage:
        return PageImage(b"x" * size, frame, 1, 1)

    cache = PageCache(budget_bytes=100)
    cache.put("a", image(40))
    cache.put("b", image(40))
    assert cache.get("a") is not None  # a is now the most recent
    cache.put("c", image(40))
    assert cache.get("b") is None and cache.get("a") is not None and cache.get("c") is not None
    assert cache.size_bytes == 80 and len(cache) == 2
    cache.put("huge", image(101))
    assert cache.get("huge") is None and len(cache) == 2
