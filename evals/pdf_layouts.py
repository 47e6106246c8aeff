"""Generated PDFs whose every line of text stands where this module put it.

Each layout is drawn with fpdf2 line by line at a known baseline, so the box a
passage's glyphs occupy is known without asking any PDF reader: its width from
fpdf2's own string widths, its height from the font's ascent and descent. The
rectangles groundkit derives from pdfium's character boxes are judged against
these (``judge``). Layouts: plain multi-page text, the same pages under
``/Rotate`` 90, 180 and 270 (plus one line drawn upright along the page edge), two
columns sharing baselines, ligatures (DejaVu Sans shaped by HarfBuzz, so "fi" is
one glyph standing for two characters) and words hyphenated across lines.
"""

from __future__ import annotations

import io
import random
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = [
    "DEJAVU",
    "LAYOUTS",
    "TOLERANCE",
    "Layout",
    "Run",
    "Verdict",
    "judge",
    "layout",
    "run_offsets",
]

DEJAVU = Path("/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf")
# How far (points) a rectangle may fall short of the glyphs, or run past them along the line.
TOLERANCE = 1.5
_PAGE = (595.0, 842.0)  # A4 in points
_SIZE = 11.0
_LEADING = 15.0
# Ascent and descent of the glyphs drawn, as a share of the font size: Helvetica's
# ascender and descender (718, -207), DejaVu Sans' (760, -240).
_METRICS = {"helvetica": (0.718, 0.207), "dejavu": (0.76, 0.24)}
# fmt: off
_WORDS = (
    "river", "stone", "light", "harbour", "quiet", "engine", "market", "garden", "silver",
    "winter", "field", "copper", "signal", "orbit", "candle", "ladder", "meadow", "thunder",
    "basket", "mirror", "pocket", "rocket", "saddle", "lantern", "marble", "needle", "pepper",
    "ribbon", "shadow", "timber", "velvet", "wagon", "yellow", "anchor", "bridge", "castle",
    "dragon", "falcon", "glacier", "hammer", "island", "jacket", "kettle", "lemon", "magnet",
    "nickel", "oyster", "parrot", "quartz", "rabbit", "salmon", "tunnel", "umbrella", "violin",
    "walnut", "zephyr",
)
# fmt: on
_LIGATURE_WORDS = ("office", "finally", "flower", "baffle", "official", "shuffle", "affine")


@dataclass(frozen=True, slots=True)
class Run:
    """One line of text drawn at a known place: ``text`` from the baseline origin
    ``(x, y)`` in the page's user space (points, origin bottom-left), along +x when
    ``angle`` is 0 and along +y when it is 90. ``advance[i]`` is the width of
    ``text[:i]``; ``edges`` the indices where a glyph begins or ends (all of them
    but those inside a ligature)."""

    page: int
    text: str
    x: float
    y: float
    size: float
    angle: int
    ascent: float
    descent: float
    advance: tuple[float, ...]
    edges: frozenset[int]

    def box(self, a: int, b: int, *, whole: bool = False) -> tuple[float, float, float, float]:
        """Where the glyphs of ``text[a:b]`` stand: ``(x0, y0, x1, y1)``. A boundary inside
        a ligature moves to the glyph's edge: outwards with ``whole`` (every glyph the
        span touches), else inwards (the glyphs wholly in the span)."""
        if a not in self.edges:
            a = (
                max(e for e in self.edges if e < a)
                if whole
                else min(e for e in self.edges if e > a)
            )
        if b not in self.edges:
            b = (
                min(e for e in self.edges if e > b)
                if whole
                else max(e for e in self.edges if e < b)
            )
        start, end = self.advance[a], self.advance[max(a, b)]
        up, down = self.ascent * self.size, self.descent * self.size
        if self.angle == 0:
            return (self.x + start, self.y - down, self.x + end, self.y + up)
        return (self.x - up, self.y + start, self.x + down, self.y + end)


@dataclass(frozen=True, slots=True)
class Layout:
    """A generated PDF and the runs drawn on it."""

    name: str
    data: bytes
    runs: tuple[Run, ...]
    rotations: tuple[int, ...]


def _line(rng: random.Random, words: Sequence[str], count: int) -> str:
    return " ".join(rng.choice(words) for _ in range(count))


def _shaped_advance(pdf: Any, text: str) -> tuple[tuple[float, ...], frozenset[int]]:
    """``advance`` for ``text`` in the current (shaped) font as fpdf2 draws it: its own
    HarfBuzz call and its rounding of each glyph's advance. A ligature's width is
    shared equally by the characters it stands for (a glyph has no inner positions);
    the second value holds the indices where a glyph begins or ends."""
    font = pdf.current_font
    infos, positions = font.perform_harfbuzz_shaping(text, pdf.font_size_pt, pdf.text_shaping)
    clusters = [info.cluster for info in infos]
    widths = [0.0] * len(text)
    for index, (cluster, position) in enumerate(zip(clusters, positions, strict=True)):
        after = clusters[index + 1] if index + 1 < len(clusters) else len(text)
        chars = range(cluster, max(after, cluster + 1))
        width = round(font.scale * position.x_advance + 0.001) * pdf.font_size_pt * 0.001
        for char in chars:
            widths[char] += width / len(chars)
    advance = [0.0]
    for width in widths:
        advance.append(advance[-1] + width)
    return tuple(advance), frozenset([*clusters, len(text)])


def _new_pdf(font: str) -> Any:
    from fpdf import FPDF

    pdf = FPDF(unit="pt", format=_PAGE)
    pdf.set_auto_page_break(False)
    if font == "dejavu":
        pdf.add_font("dejavu", fname=str(DEJAVU))
        pdf.set_text_shaping(True)
    return pdf


def _draw(pdf: Any, runs: list[Run], page: int, text: str, x: float, top: float, font: str) -> None:
    """Draw ``text`` with its baseline ``top`` points below the page's top edge."""
    pdf.set_font(font if font == "dejavu" else "helvetica", size=_SIZE)
    if font == "dejavu":
        # Through a cell: fpdf2 shapes text there (``text()`` places glyphs unshaped).
        # A cell puts its baseline 0.3 of the font size below its middle and starts
        # its text one cell margin in.
        advance, edges = _shaped_advance(pdf, text)
        height = 2 * _SIZE
        pdf.set_xy(x - pdf.c_margin, top - 0.5 * height - 0.3 * _SIZE)
        pdf.cell(w=0, h=height, text=text)
    else:
        advance = tuple(pdf.get_string_width(text[:i]) for i in range(len(text) + 1))
        edges = frozenset(range(len(text) + 1))
        pdf.text(x, top, text)
    ascent, descent = _METRICS[font]
    runs.append(Run(page, text, x, _PAGE[1] - top, _SIZE, 0, ascent, descent, advance, edges))


def _lines_pages(
    name: str, pages: int, lines: int, seed: int, rotations: Sequence[int] = ()
) -> Layout:
    rng = random.Random(seed)
    pdf = _new_pdf("helvetica")
    runs: list[Run] = []
    for page in range(1, pages + 1):
        pdf.add_page()
        for row in range(lines):
            _draw(pdf, runs, page, _line(rng, _WORDS, 9), 60, 80 + row * _LEADING, "helvetica")
        if rotations:
            # One line upright along the left edge, reading bottom to top.
            text = _line(rng, _WORDS, 5)
            pdf.set_font("helvetica", size=_SIZE)
            advance = tuple(pdf.get_string_width(text[:i]) for i in range(len(text) + 1))
            with pdf.rotation(90, 40, 700):
                pdf.text(40, 700, text)
            ascent, descent = _METRICS["helvetica"]
            edges = frozenset(range(len(text) + 1))
            runs.append(
                Run(page, text, 40, _PAGE[1] - 700, _SIZE, 90, ascent, descent, advance, edges)
            )
    data = bytes(pdf.output())
    if rotations:
        data = _rotated(data, rotations)
    return Layout(name, data, tuple(runs), tuple(rotations) or (0,) * pages)


def _rotated(data: bytes, rotations: Sequence[int]) -> bytes:
    """The same PDF with each page's ``/Rotate`` set (pdfium writes it)."""
    import pypdfium2

    document = pypdfium2.PdfDocument(data)
    try:
        for index, rotation in enumerate(rotations):
            page = document[index]
            page.set_rotation(rotation)
            page.close()
        out = io.BytesIO()
        document.save(out)
        return out.getvalue()
    finally:
        document.close()


def _two_columns(seed: int) -> Layout:
    rng = random.Random(seed)
    pdf = _new_pdf("helvetica")
    runs: list[Run] = []
    for page in (1, 2):
        pdf.add_page()
        for row in range(40):
            top = 80 + row * _LEADING
            _draw(pdf, runs, page, _line(rng, _WORDS, 4), 50, top, "helvetica")
            _draw(pdf, runs, page, _line(rng, _WORDS, 4), 320, top, "helvetica")
    return Layout("two columns", bytes(pdf.output()), tuple(runs), (0, 0))


def _ligatures(seed: int) -> Layout:
    rng = random.Random(seed)
    pdf = _new_pdf("dejavu")
    runs: list[Run] = []
    pdf.add_page()
    words = (*_WORDS[:20], *_LIGATURE_WORDS, *_LIGATURE_WORDS)
    for row in range(40):
        _draw(pdf, runs, 1, _line(rng, words, 8), 60, 80 + row * _LEADING, "dejavu")
    return Layout("ligatures", bytes(pdf.output()), tuple(runs), (0,))


def _hyphenated(seed: int) -> Layout:
    rng = random.Random(seed)
    pdf = _new_pdf("helvetica")
    runs: list[Run] = []
    pdf.add_page()
    carry = ""
    for row in range(40):
        word = rng.choice(_WORDS)
        cut = max(2, len(word) // 2)
        text = " ".join(filter(None, (carry, _line(rng, _WORDS, 7), word[:cut] + "-")))
        carry = word[cut:]
        _draw(pdf, runs, 1, text, 60, 80 + row * _LEADING, "helvetica")
    return Layout("hyphenation", bytes(pdf.output()), tuple(runs), (0,))


LAYOUTS = ("plain", "rotated", "two columns", "ligatures", "hyphenation")


def layout(name: str, seed: int = 34) -> Layout:
    """The generated PDF ``name`` (one of ``LAYOUTS``); the same bytes for the same seed."""
    if name == "plain":
        return _lines_pages("plain", 3, 45, seed)
    if name == "rotated":
        return _lines_pages("rotated", 4, 30, seed, rotations=(90, 180, 270, 0))
    if name == "two columns":
        return _two_columns(seed)
    if name == "ligatures":
        return _ligatures(seed)
    if name == "hyphenation":
        return _hyphenated(seed)
    raise ValueError(f"no layout {name!r}")


def run_offsets(text: str, page_starts: Sequence[int], runs: Sequence[Run]) -> list[int]:
    """Where each run's text is in the extracted ``text`` (found on its own page)."""
    offsets: list[int] = []
    bounds = [*page_starts, len(text) + 1]
    for run in runs:
        start, end = bounds[run.page - 1], bounds[run.page]
        at = text.find(run.text, start, end)
        if at < 0 or text.find(run.text, at + 1, end) >= 0:
            raise AssertionError(f"run {run.text!r} is not once on page {run.page}")
        offsets.append(at)
    return offsets


@dataclass(frozen=True, slots=True)
class Verdict:
    """How a span's rectangles compare with its glyphs."""

    covers: bool  # every glyph fragment lies inside a rectangle (within TOLERANCE)
    tight: bool  # no rectangle runs past its fragment by more than TOLERANCE along the
    # line or one line across it, and there is no rectangle where no glyph is
    per_line: bool  # as many rectangles as line fragments holding a glyph of the span

    @property
    def ok(self) -> bool:
        return self.covers and self.tight


def judge(
    start: int,
    end: int,
    rects: Sequence[tuple[int, float, float, float, float]],
    runs: Sequence[Run],
    offsets: Sequence[int],
) -> Verdict:
    """Compare the rectangles of ``[start, end)`` with the glyph boxes of the runs it covers."""
    expected: list[tuple[Run, tuple[float, float, float, float]]] = []
    touched: list[tuple[Run, tuple[float, float, float, float]]] = []
    for run, at in zip(runs, offsets, strict=True):
        a, b = max(start, at) - at, min(end, at + len(run.text)) - at
        if a < b:
            touched.append((run, run.box(a, b, whole=True)))
            # A blank draws nothing: only what lies between the first and last glyph
            # must be covered.
            part = run.text[a:b]
            a, b = a + len(part) - len(part.lstrip()), b - (len(part) - len(part.rstrip()))
            if a < b:
                expected.append((run, run.box(a, b)))
    t = TOLERANCE
    covers = all(
        any(
            page == run.page
            and x0 <= e[0] + t
            and y0 <= e[1] + t
            and x1 >= e[2] - t
            and y1 >= e[3] - t
            for page, x0, y0, x1, y1 in rects
        )
        for run, e in expected
    )

    def inside(rect: tuple[int, float, float, float, float]) -> bool:
        page, x0, y0, x1, y1 = rect
        for run, e in touched:
            # TOLERANCE along the line, one line's leading across it.
            sx, sy = (t, _LEADING) if run.angle == 0 else (_LEADING, t)
            if (
                page == run.page
                and x0 >= e[0] - sx
                and x1 <= e[2] + sx
                and y0 >= e[1] - sy
                and y1 <= e[3] + sy
            ):
                return True
        return False

    return Verdict(
        covers=covers, tight=all(inside(r) for r in rects), per_line=len(rects) == len(expected)
    )
