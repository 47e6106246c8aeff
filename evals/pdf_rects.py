"""How well PDF citation rectangles cover the cited glyphs, what they cost to store, and
how fast pdfium extracts compared with the pypdf extractor it replaced.

python -m evals.pdf_rects [--repeat N] [--out docs/quality.md]

The PDFs are generated (evals/pdf_layouts.py), so where every glyph stands is known
from the drawing, not from a PDF reader. They are ingested into a collection with
300-character chunks; every stored chunk's citation is judged, and so are random spans of
3 to 40 words starting at a random word of a random line (they cross lines, columns
and hyphens). A citation passes when its rectangles cover all its glyphs (within
``TOLERANCE`` points) and none runs past them by more than that along the line or by
more than one line across it. Extraction speed is both extractors on the same PDFs in
the same process, alternating, best of ``--repeat`` runs each.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evals.machine import command_line, machine_lines, markdown_table, write_section
from evals.pdf_layouts import (
    LAYOUTS,
    TOLERANCE,
    Layout,
    Run,
    Verdict,
    judge,
    layout,
    run_offsets,
)
from groundkit import ChunkingConfig, Collection
from groundkit.contracts import PAGE_STARTS_KEY, rects_at
from groundkit.extraction.pdf import pdf_extractor
from groundkit.extraction.pdf_legacy import pypdf_extractor

_RANDOM_SPANS = 80  # per layout
# Small chunks, so a page gives many chunk spans (the default is 1,600 characters).
_CHUNK_CHARS = 300


@dataclass
class Tally:
    spans: int = 0
    covers: int = 0
    tight: int = 0
    both: int = 0
    per_line: int = 0

    def add(self, verdict: Verdict) -> None:
        self.spans += 1
        self.covers += verdict.covers
        self.tight += verdict.tight
        self.both += verdict.ok
        self.per_line += verdict.per_line

    def cells(self) -> list[str]:
        def share(n: int) -> str:
            return f"{n / self.spans:.1%}" if self.spans else "-"

        return [
            str(self.spans),
            share(self.covers),
            share(self.tight),
            share(self.both),
            share(self.per_line),
        ]


def _random_spans(
    rng: random.Random, text: str, runs: Sequence[Run], offsets: Sequence[int]
) -> list[tuple[int, int]]:
    spans: list[tuple[int, int]] = []
    for _ in range(_RANDOM_SPANS):
        index = rng.randrange(len(runs))
        words = [
            i for i, c in enumerate(runs[index].text) if i == 0 or runs[index].text[i - 1] == " "
        ]
        start = offsets[index] + rng.choice(words)
        end = start
        for _ in range(rng.randint(3, 40)):  # whole words, whatever lies between them
            end = _word_end(text, end)
        spans.append((start, end))
    return spans


def _word_end(text: str, at: int) -> int:
    while at < len(text) and text[at].isspace():
        at += 1
    while at < len(text) and not text[at].isspace():
        at += 1
    return at


async def _accuracy(
    root: Path, pdfs: Sequence[Layout]
) -> tuple[dict[str, Tally], dict[str, Tally]]:
    """Judge every chunk's citation, then random spans of each document."""
    base = root / "corpus"
    base.mkdir()
    by_source = {f"{pdf.name.replace(' ', '-')}.pdf": pdf for pdf in pdfs}
    for source, pdf in by_source.items():
        (base / source).write_bytes(pdf.data)
    chunks = {pdf.name: Tally() for pdf in pdfs}
    randoms = {pdf.name: Tally() for pdf in pdfs}
    documents: dict[str, tuple[str, list[int], dict[str, Any]]] = {}
    chunking = ChunkingConfig(max_chars=_CHUNK_CHARS, overlap_chars=_CHUNK_CHARS // 8)
    async with Collection.open(root / "index", base_dir=base, chunking=chunking) as col:
        report = await col.ingest(base)
        if report.failed:
            raise RuntimeError(f"ingest failed: {report.failed}")
        async for batch in col.store.iter_chunks():
            for chunk in batch:
                pdf = by_source[chunk.source]
                if chunk.source not in documents:
                    text = (await pdf_extractor().extract_bytes(pdf.data)).text
                    offsets = run_offsets(text, chunk.metadata[PAGE_STARTS_KEY], pdf.runs)
                    documents[chunk.source] = (text, offsets, chunk.metadata)
                offsets = documents[chunk.source][1]
                rects = [(r.page, r.x0, r.y0, r.x1, r.y1) for r in chunk.citation.rects]
                verdict = judge(chunk.start_offset, chunk.end_offset, rects, pdf.runs, offsets)
                chunks[pdf.name].add(verdict)
    rng = random.Random(34)
    for source, (text, offsets, metadata) in sorted(documents.items()):
        pdf = by_source[source]
        for start, end in _random_spans(rng, text, pdf.runs, offsets):
            rects = [(r.page, r.x0, r.y0, r.x1, r.y1) for r in rects_at(metadata, start, end)]
            verdict = judge(start, end, rects, pdf.runs, offsets)
            randoms[pdf.name].add(verdict)
    return chunks, randoms


def _dense_page() -> bytes:
    """One A4 page filled with 10 pt text: what a report's page holds."""
    from fpdf import FPDF

    rng = random.Random(5)
    pdf = FPDF()
    pdf.set_font("helvetica", size=10)
    pdf.add_page()
    words = [
        "the",
        "of",
        "and",
        "to",
        "in",
        "is",
        "was",
        "for",
        "on",
        "that",
        "with",
        "as",
        "by",
        "at",
        "from",
        "report",
        "energy",
    ]
    pdf.multi_cell(0, 5, " ".join(rng.choice(words) for _ in range(560)))
    return bytes(pdf.output())


async def _sizes(pdfs: Sequence[Layout]) -> list[list[str]]:
    rows = []
    named = [(pdf.name, pdf.data) for pdf in pdfs] + [("dense page (10 pt, A4)", _dense_page())]
    for name, data in named:
        extraction = await pdf_extractor().extract_bytes(data)
        assert extraction.geometry is not None
        pages = len(extraction.page_starts)
        size = len(json.dumps(extraction.geometry, separators=(",", ":")))
        chars = len(extraction.text) / pages
        rows.append(
            [
                name,
                str(pages),
                f"{chars:,.0f}",
                f"{size / pages:,.0f}",
                f"{size / pages / chars:.2f}",
            ]
        )
    return rows


async def _speed(pdfs: Sequence[Layout], repeat: int) -> tuple[float, float, int]:
    datas = [pdf.data for pdf in pdfs] + [_dense_page()]
    pages = 0
    for data in datas:
        pages += len((await pdf_extractor().extract_bytes(data)).page_starts)
    best = {"pdfium": float("inf"), "pypdf": float("inf")}
    extractors = {"pdfium": pdf_extractor(), "pypdf": pypdf_extractor()}
    for _ in range(repeat):
        for name, extractor in extractors.items():
            began = time.perf_counter()
            for data in datas:
                await extractor.extract_bytes(data)
            best[name] = min(best[name], time.perf_counter() - began)
    return best["pdfium"], best["pypdf"], pages


def _columns(spans: str) -> list[str]:
    return [spans, "covers", "tight", "pass", "one per line"]


def _long_pdf(pages: int) -> bytes:
    """``pages`` A4 pages of 10 pt text drawn from eleven words."""
    from fpdf import FPDF

    rng = random.Random(9)
    words = [
        "river",
        "stone",
        "light",
        "harbour",
        "quiet",
        "engine",
        "market",
        "garden",
        "silver",
        "winter",
        "field",
    ]
    pdf = FPDF()
    pdf.set_font("helvetica", size=10)
    for _ in range(pages):
        pdf.add_page()
        pdf.multi_cell(0, 5, " ".join(rng.choice(words) for _ in range(500)))
    return bytes(pdf.output())


async def _search_cost(root: Path, pages: int, queries: int) -> dict[str, float]:
    """p50 ms of a top-10 BM25 search reading every result's citation, on one long PDF
    ingested with pdfium (geometry in its metadata) and with pypdf (none)."""
    import groundkit.ingestion.extracted

    loaders: Any = groundkit.ingestion.extracted  # the PDF loader's factory is swapped below
    data = _long_pdf(pages)
    out: dict[str, float] = {}
    factories: dict[str, Callable[[], Any]] = {"pdfium": pdf_extractor, "pypdf": pypdf_extractor}
    for name, factory in factories.items():
        base = root / name
        base.mkdir()
        (base / "long.pdf").write_bytes(data)
        original = loaders.pdf_extractor
        loaders.pdf_extractor = factory  # as an index built before pdfium had it
        try:
            async with Collection.open(root / f"index-{name}", base_dir=base) as col:
                await col.ingest(base)
                times = []
                for i in range(queries):
                    began = time.perf_counter()
                    response = await col.search(f"harbour engine {i % 7}", top_k=10)
                    for result in response.results:
                        _ = result.citation
                    times.append(time.perf_counter() - began)
        finally:
            loaders.pdf_extractor = original
        out[name] = sorted(times)[len(times) // 2] * 1000
    return out


async def run(args: argparse.Namespace) -> list[str]:
    pdfs = [layout(name) for name in LAYOUTS]
    with tempfile.TemporaryDirectory(prefix="groundkit-pdf-rects-") as tmp:
        chunks, randoms = await _accuracy(Path(tmp), pdfs)
    total_chunks, total_random = Tally(), Tally()
    rows = []
    for pdf in pdfs:
        c, r = chunks[pdf.name], randoms[pdf.name]
        rows.append([pdf.name, str(len(set(r.page for r in pdf.runs))), *c.cells(), *r.cells()])
        for into, tally in ((total_chunks, c), (total_random, r)):
            into.spans += tally.spans
            into.covers += tally.covers
            into.tight += tally.tight
            into.both += tally.both
            into.per_line += tally.per_line
    rows.append(["**all**", str(sum(len(set(r.page for r in p.runs)) for p in pdfs)),
                 *total_chunks.cells(), *total_random.cells()])  # fmt: skip
    sizes = await _sizes(pdfs)
    pdfium, pypdf, pages = await _speed(pdfs, args.repeat)
    with tempfile.TemporaryDirectory(prefix="groundkit-pdf-search-") as tmp:
        cost = await _search_cost(Path(tmp), args.long_pages, 50)
    return [
        "## PDF citation rectangles",
        "",
        f"Command: `{command_line()}`",
        "",
        "Generated PDFs (evals/pdf_layouts.py) whose every line was drawn at a known place: "
        "plain text over three pages; four pages under `/Rotate` 90, 180, 270 and 0, each with "
        "one line drawn upright along its edge; two columns sharing baselines; DejaVu Sans "
        "shaped by HarfBuzz, so `fi`, `fl`, `ffi` are single glyphs standing for several "
        "characters; words hyphenated across lines. A citation passes when its rectangles cover "
        f"every glyph of its span to within {TOLERANCE} pt (*covers*) and none runs past the "
        f"glyphs by more than {TOLERANCE} pt along the line or one line (15 pt) across it, "
        "nor stands where the span has no glyph (*tight*). Within a ligature the glyph's width is "
        "shared equally by its characters, so a span that ends inside one must cover the glyphs "
        "wholly inside it and may reach to the ligature's far edge. *one per line*: as many "
        "rectangles as line fragments holding a glyph of the span (a box never spans two lines "
        "or two columns).",
        "",
        f"Chunk spans are every chunk of the ingested collection ({_CHUNK_CHARS}-character chunks, "
        "cut at paragraph, line and sentence ends as the chunker does); random spans "
        f"are {_RANDOM_SPANS} per PDF, 3 to 40 words from a random word of a random line.",
        "",
        markdown_table(
            ["PDF", "pages", *_columns("chunks"), *_columns("random spans")],
            rows,
        ),
        "",
        "Geometry stored per page (the `geometry` document metadata: JSON of per-page "
        "base64 zlib blobs, boxes in hundredths of a point):",
        "",
        markdown_table(
            ["PDF", "pages", "characters per page", "bytes per page", "bytes per character"], sizes
        ),
        "",
        f"Extraction speed, the same {pages} pages through both extractors in this process, best "
        f"of {args.repeat}: pdfium (text and boxes) {pdfium * 1000 / pages:.1f} ms per page, "
        f"pypdf (text only, the extractor before) {pypdf * 1000 / pages:.1f} ms per page; "
        f"pdfium takes {pdfium / pypdf:.2f}x pypdf's time.",
        "",
        f"What the geometry costs a search: one {args.long_pages}-page PDF (10 pt text), a top-10 "
        "BM25 search whose results all come from it, each result's citation read, p50 of 50: "
        f"{cost['pdfium']:.1f} ms ingested with pdfium (the document's geometry is parsed once "
        f"per process), {cost['pypdf']:.1f} ms ingested with pypdf (no geometry).",
        "",
        "Machine:",
        "",
        *machine_lines(),
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--long-pages", type=int, default=300)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    lines = asyncio.run(run(args))
    if args.out is not None:
        write_section(args.out, "pdf-rects", lines)
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
