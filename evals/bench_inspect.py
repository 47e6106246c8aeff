"""What the citation inspector costs: rendering a PDF page, and its pages end to end.

python -m evals.bench_inspect [--pages 12] [--repeat 15] [--out docs/benchmarks.md]

A generated PDF (letter pages of 11 pt text, about 45 lines each) and a few Markdown
files are ingested; then, in this process, through the ASGI app (no network): a search
page (BM25, top 10, each result verified), a text result page, and a PDF result page
as a new process first shows it (the PDF extracted, the page rendered), with the text
remembered but the page rendered (a new app), and warm (both remembered). Rendering
alone is timed on every page of the PDF, with the PNG's size.
"""

from __future__ import annotations

import argparse
import asyncio
import re
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import httpx

from evals.machine import command_line, machine_lines, markdown_table, write_section
from evals.stats import percentile
from groundkit import Collection
from groundkit.extraction.memo import extracted_texts
from groundkit.extraction.pdf_pages import render_pdf_page
from groundkit.service.collections import CollectionRegistry
from groundkit.service.inspector.app import PAGE_SCALE, build_app

# The words the generated pages are made of (any text would do; this one is on topic).
TOPIC = (
    "Rooftop arrays feed the grid at noon; batteries hold the surplus for the evening "
    "peak, inverters change direct current to alternating, and meters count both ways."
)
WORDS = re.findall(r"[a-z]+", TOPIC.lower())


def _pdf(pages: int) -> bytes:
    from fpdf import FPDF

    pdf = FPDF(unit="pt", format="letter")
    pdf.set_font("helvetica", size=11)
    for number in range(pages):
        pdf.add_page()
        pdf.set_xy(72, 72)
        sentences = []
        for i in range(60):
            words = [WORDS[(number * 7 + i * 3 + k) % len(WORDS)] for k in range(9 + i % 5)]
            sentences.append(" ".join(words).capitalize() + ".")
        pdf.multi_cell(468, 14, " ".join(sentences))
    return bytes(pdf.output())


def _ms(values: list[float]) -> str:
    return f"{percentile(values, 50) * 1000:.1f}"


async def _time(repeat: int, call: Callable[[], Awaitable[object]]) -> list[float]:
    out = []
    for _ in range(repeat):
        started = time.perf_counter()
        await call()
        out.append(time.perf_counter() - started)
    return out


async def run(pages: int, repeat: int) -> list[str]:
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        (base / "docs").mkdir()
        data = _pdf(pages)
        (base / "docs" / "energy.pdf").write_bytes(data)
        for i in range(20):
            text = " ".join(WORDS[(i + k) % len(WORDS)] for k in range(80))
            (base / "docs" / f"note{i}.md").write_text(f"# Note {i}\n\n{text}.\n")
        async with Collection.open(base / "idx", base_dir=base) as col:
            await col.ingest(base / "docs")
            pdf_hit = (await col.search("solar inverter battery", top_k=50)).results
            pdf_chunk = next(r.chunk_id for r in pdf_hit if r.source.endswith(".pdf"))
            text_chunk = next(r.chunk_id for r in pdf_hit if r.source.endswith(".md"))

        renders: list[float] = []
        sizes: list[int] = []
        for number in range(1, pages + 1):
            started = time.perf_counter()
            image = await asyncio.to_thread(render_pdf_page, data, number, PAGE_SCALE)
            renders.append(time.perf_counter() - started)
            sizes.append(len(image.png))

        registry = CollectionRegistry(base / "idx")
        try:

            def client() -> httpx.AsyncClient:
                app = build_app(registry)
                transport = httpx.ASGITransport(app=app)
                return httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1")

            async with client() as http:
                await http.get("/c/default/", params={"q": "warm up"})
                search = await _time(
                    repeat, lambda: http.get("/c/default/", params={"q": "solar battery storage"})
                )
                text_page = await _time(repeat, lambda: http.get(f"/c/default/chunk/{text_chunk}"))
                warm = await _time(repeat, lambda: http.get(f"/c/default/chunk/{pdf_chunk}"))

            async def cold_once() -> None:
                async with client() as fresh:
                    shown = await fresh.get(f"/c/default/chunk/{pdf_chunk}")
                    assert shown.status_code == 200, shown.text

            async def first_once() -> None:
                # As a new process meets it: the PDF's text not yet extracted here.
                extracted_texts.clear()
                await cold_once()

            first = await _time(repeat, first_once)
            cold = await _time(repeat, cold_once)
        finally:
            await registry.close()

    rows = [
        ["render one PDF page to PNG (pdfium, 1.5 px/pt)", _ms(renders), f"{len(renders)} pages"],
        ["search page, BM25 top 10, each result verified", _ms(search), f"{repeat} requests"],
        ["text result page", _ms(text_page), f"{repeat} requests"],
        [
            "PDF result page, first view (PDF extracted, page rendered)",
            _ms(first),
            f"{repeat} requests",
        ],
        ["PDF result page, text remembered, page rendered", _ms(cold), f"{repeat} requests"],
        ["PDF result page, text and page remembered (warm)", _ms(warm), f"{repeat} requests"],
    ]
    return [
        "## Citation inspector",
        "",
        "Generated by `evals/bench_inspect.py`; do not edit by hand.",
        "",
        f"Command: `{command_line()}`",
        "",
        f"A {pages}-page PDF of 11 pt text (about 45 lines a page) and 20 Markdown notes, one "
        "collection; requests through the ASGI app in-process (no network, no browser). "
        "A PDF result page verifies the citation against the PDF's text, extracted at the "
        "first view in a process (*first view*: the process's memory of extracted texts "
        "emptied before each request) and reused for the same bytes after, then renders the "
        "cited page (a new app each time) or reuses it from the page cache (warm).",
        "",
        markdown_table(["what", "p50 ms", "measured over"], rows),
        "",
        f"PNG size of a page: p50 {percentile([float(s) for s in sizes], 50) / 1024:.0f} KiB, "
        f"largest {max(sizes) / 1024:.0f} KiB (918 x 1188 pixels, RGB).",
        "",
        "Machine:",
        "",
        *machine_lines(),
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--pages", type=int, default=12)
    parser.add_argument("--repeat", type=int, default=15)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    lines = asyncio.run(run(args.pages, args.repeat))
    if args.out is not None:
        write_section(args.out, "inspector", lines)
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
