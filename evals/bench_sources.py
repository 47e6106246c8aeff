"""PDF and HTML ingest throughput through the real Indexer, on generated files.

    python -m evals.bench_sources [--pdf-files 20] [--pages 25] [--html-files 60]
        [--html-kb 160] [--repeat 3] [--before COMMIT] [--rounds 5]
        [--out docs/benchmarks.md]

Files are generated into a temp dir from a seeded vocabulary: PDFs with fpdf2
(one text page after another, about 2,000 characters each), HTML pages with a
head (title, style, script), paragraphs with inline markup, lists and tables.
For each format three things are timed, each the median of ``--repeat`` runs:

* extract: the extractor alone over every file (``extract_file``), the floor;
* ingest: ``Collection.ingest`` of the folder into a fresh BM25 collection, with the
  extraction cache off (a first ingest)
  (route, read, extract, chunk, analyse, write SQLite);
* verify: ``Collection.verify_all()``, which re-extracts every file once to check
  every citation (the process's memory of extracted texts emptied first).

PDF figures are pages per second, HTML figures megabytes of input per second.

With ``--before COMMIT`` the extractors of that earlier commit (checked out as a git
worktree, as ``evals.bench_before`` does) are timed beside today's over the same
files: fresh processes alternating between the two, ``--rounds`` times, each timing
one pass over the folder after a warm-up pass; the figure is the median over rounds.
A speed-up claimed for extraction is this ratio, not two figures from two days.
With ``--out`` this script's marked section of that file is replaced (appended
the first time); the rest of the file is left alone, and bench_bm25 carries
the section over when it rewrites the file.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evals.machine import command_line, machine_lines, markdown_table, write_section
from groundkit import Collection, IngestConfig
from groundkit.extraction import html_extractor, pdf_extractor
from groundkit.extraction.memo import extracted_texts

SECTION = "bench-sources"

_VOCABULARY = (
    "energy grid solar wind storage battery turbine panel voltage current transformer "
    "substation demand supply forecast tariff carbon emission policy market price hour "
    "season winter summer peak load reserve frequency inertia hydrogen pump heat network "
    "consumer producer meter smart flexible capacity auction contract balance settlement"
)
_WORDS = _VOCABULARY.split()


def _sentence(rng: random.Random) -> str:
    words = [rng.choice(_WORDS) for _ in range(rng.randint(8, 18))]
    return " ".join(words).capitalize() + "."


def _paragraph(rng: random.Random, chars: int) -> str:
    out: list[str] = []
    size = 0
    while size < chars:
        sentence = _sentence(rng)
        out.append(sentence)
        size += len(sentence) + 1
    return " ".join(out)


def write_pdfs(directory: Path, files: int, pages: int, seed: int = 7) -> int:
    """``files`` PDFs of ``pages`` text pages each; returns the page count."""
    from fpdf import FPDF

    rng = random.Random(seed)
    directory.mkdir(parents=True, exist_ok=True)
    for n in range(files):
        pdf = FPDF()
        pdf.set_font("Helvetica", size=10)
        for _ in range(pages):
            pdf.add_page()
            for _ in range(4):
                pdf.multi_cell(0, 5, _paragraph(rng, 480))
                pdf.ln(3)
        pdf.output(str(directory / f"report-{n:03d}.pdf"))
    return files * pages


def _html_page(rng: random.Random, target_bytes: int, n: int) -> str:
    head = (
        f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>Grid notes {n}</title>"
        "<style>body{font:14px sans-serif}.note{color:#333}</style>"
        "<script>window.analytics=function(e){return e};analytics('view');</script>"
        "</head><body><nav><a href='/'>Home</a> | <a href='/grid'>Grid</a></nav>\n"
    )
    parts = [head]
    size = len(head)
    section = 0
    while size < target_bytes:
        section += 1
        block = [f"<h2>Section {section}</h2>"]
        for _ in range(3):
            text = _paragraph(rng, 600)
            words = text.split(" ")
            words[3] = f"<b>{words[3]}</b>"
            words[9] = f"<a href='#s{section}'>{words[9]}</a>"
            block.append("<p class='note'>" + " ".join(words) + "</p>")
        block.append("<ul>" + "".join(f"<li>{_sentence(rng)}</li>" for _ in range(4)) + "</ul>")
        block.append(
            "<table><tr><th>hour</th><th>load</th></tr>"
            + "".join(f"<tr><td>{h}</td><td>{rng.randint(100, 999)}</td></tr>" for h in range(6))
            + "</table><!-- generated -->"
        )
        chunk = "\n".join(block) + "\n"
        parts.append(chunk)
        size += len(chunk)
    parts.append("<footer>end</footer></body></html>\n")
    return "".join(parts)


def write_html(directory: Path, files: int, kilobytes: int, seed: int = 11) -> int:
    """``files`` pages of about ``kilobytes`` KiB each; returns the byte count."""
    rng = random.Random(seed)
    directory.mkdir(parents=True, exist_ok=True)
    total = 0
    for n in range(files):
        data = _html_page(rng, kilobytes * 1024, n).encode("utf-8")
        (directory / f"page-{n:03d}.html").write_bytes(data)
        total += len(data)
    return total


@dataclass
class Timing:
    extract: float
    ingest: float
    verify: float
    chunks: int


# One pass of an extractor over a folder, timed after a warm-up pass, run under either
# version of the package (it uses only what both export).
_EXTRACT_PASS = """
import asyncio, sys, time
from pathlib import Path
from groundkit.extraction import html_extractor, pdf_extractor
folder, kind = Path(sys.argv[1]), sys.argv[2]
extractor = pdf_extractor() if kind == "pdf" else html_extractor()
files = sorted(folder.iterdir())
async def one_pass():
    start = time.perf_counter()
    for path in files:
        await extractor.extract_file(path)
    return time.perf_counter() - start
asyncio.run(one_pass())
print(asyncio.run(one_pass()))
"""


def extract_before_and_now(
    folder: Path, kind: str, commit: str, rounds: int
) -> tuple[float, float]:
    """Median seconds of one extraction pass over ``folder``: ``commit``'s code, today's."""
    from evals.bench_before import REPO_ROOT, _child, _worktree

    old = _worktree(commit)
    before: list[float] = []
    now: list[float] = []
    for _ in range(rounds):
        for code_root, times in ((old, before), (REPO_ROOT, now)):
            args = ["-c", _EXTRACT_PASS, str(folder), kind]
            times.append(float(_child(code_root, args, f"extraction with {code_root.name}")))
    return statistics.median(before), statistics.median(now)


def _median(runs: int, work: Callable[[], Coroutine[Any, Any, float]]) -> float:
    return statistics.median(asyncio.run(work()) for _ in range(runs))


def measure(folder: Path, kind: str, runs: int, scratch: Path) -> Timing:
    extractor = pdf_extractor() if kind == "pdf" else html_extractor()
    files = sorted(folder.iterdir())

    async def extract() -> float:
        start = time.perf_counter()
        for path in files:
            await extractor.extract_file(path)
        return time.perf_counter() - start

    chunks: list[int] = []
    counter = iter(range(10_000))

    async def ingest() -> float:
        index = scratch / f"index-{kind}-{next(counter)}"
        # A first ingest: nothing read back from the host's extraction cache.
        first = IngestConfig(extraction_cache_bytes=0)
        async with Collection.open(index, base_dir=folder, ingest=first) as col:
            start = time.perf_counter()
            report = await col.ingest(folder)
            elapsed = time.perf_counter() - start
            if report.failed or len(report.added) != len(files):
                raise SystemExit(f"ingest of {kind} failed: {report.failed[:3]}")
            chunks.append(await col.store.chunk_count())
        return elapsed

    async def verify() -> float:
        index = scratch / f"index-{kind}-0"
        # As a new process checks: no text this process extracted before is reused.
        extracted_texts.clear()
        async with Collection.open(index, base_dir=folder) as col:
            start = time.perf_counter()
            outcome = await col.verify_all()
            elapsed = time.perf_counter() - start
            if not outcome.ok:
                raise SystemExit(f"verify of {kind} found problems: {outcome.problems[:3]}")
        return elapsed

    return Timing(
        extract=_median(runs, extract),
        ingest=_median(runs, ingest),
        verify=_median(runs, verify),
        chunks=chunks[0],
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pdf-files", type=int, default=20)
    parser.add_argument("--pages", type=int, default=25, help="pages per PDF")
    parser.add_argument("--html-files", type=int, default=60)
    parser.add_argument("--html-kb", type=int, default=160, help="KiB per HTML page")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--before", default=None, help="an earlier commit to time beside")
    parser.add_argument("--rounds", type=int, default=5, help="alternations with --before")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)

    with tempfile.TemporaryDirectory(prefix="gk-bench-sources-") as tmp:
        root = Path(tmp)
        started = time.perf_counter()
        pages = write_pdfs(root / "pdf", args.pdf_files, args.pages)
        html_bytes = write_html(root / "html", args.html_files, args.html_kb)
        generated = time.perf_counter() - started
        print(
            f"generated {pages} PDF pages and {html_bytes / 1e6:.1f} MB of HTML in "
            f"{generated:.1f} s",
            file=sys.stderr,
        )
        pdf = measure(root / "pdf", "pdf", args.repeat, root)
        html = measure(root / "html", "html", args.repeat, root)
        compared = (
            {
                kind: extract_before_and_now(root / kind, kind, args.before, args.rounds)
                for kind in ("pdf", "html")
            }
            if args.before
            else {}
        )

    mb = html_bytes / 1e6
    rows = [
        [
            "PDF",
            f"{args.pdf_files} files, {pages} pages",
            str(pdf.chunks),
            f"{pages / pdf.extract:,.0f} pages/s",
            f"{pages / pdf.ingest:,.0f} pages/s",
            f"{pdf.ingest / pdf.extract:.2f}×",
            f"{pages / pdf.verify:,.0f} pages/s",
        ],
        [
            "HTML",
            f"{args.html_files} files, {mb:.1f} MB",
            str(html.chunks),
            f"{mb / html.extract:.2f} MB/s",
            f"{mb / html.ingest:.2f} MB/s",
            f"{html.ingest / html.extract:.2f}×",
            f"{mb / html.verify:.2f} MB/s",
        ],
    ]
    header = ["format", "corpus", "chunks", "extract only", "ingest", "ingest ÷ extract", "verify"]
    lines = [
        "## PDF and HTML ingest",
        "",
        "Generated by `evals/bench_sources.py` (this section only).",
        "",
        f"Command: `{command_line()}`",
        "",
        "Generated files (seeded vocabulary): PDFs of text pages of about 2,000 characters",
        "made with fpdf2; HTML pages with a head (title, style, script), paragraphs with",
        "inline markup, lists and tables. *extract only* is the extractor alone over every",
        "file; *ingest* is `Collection.ingest` of the folder into a fresh BM25 collection",
        "(route, read, extract, chunk, analyse, SQLite) with the extraction cache off, as a",
        "first ingest; *verify* is `Collection.verify_all()`, which re-extracts every file to",
        "check every citation (the process's memory of extracted texts emptied first).",
        f"Median of {args.repeat} runs.",
        "",
        markdown_table(header, rows),
        "",
        *_before_lines(compared, args.before, args.rounds, pages, mb),
        "Machine (2 cores; other work may share them, so treat small differences as noise):",
        "",
        *machine_lines(),
    ]
    print("\n".join(lines))
    if args.out is not None:
        write_section(args.out, SECTION, lines)
        print(f"\nupdated {args.out}", file=sys.stderr)
    return 0


def _before_lines(
    compared: dict[str, tuple[float, float]],
    commit: str | None,
    rounds: int,
    pages: int,
    mb: float,
) -> list[str]:
    if not compared:
        return []
    rows = []
    formats = (("pdf", "PDF", pages, "pages/s"), ("html", "HTML", mb, "MB/s"))
    for kind, label, amount, unit in formats:
        before, now = compared[kind]
        digits = 0 if kind == "pdf" else 2
        rows.append(
            [
                label,
                f"{amount / before:,.{digits}f} {unit}",
                f"{amount / now:,.{digits}f} {unit}",
                f"{now / before:.2f}×",
            ]
        )
    return [
        f"Extract only, beside commit {commit} in the same run (fresh processes alternating,",
        f"{rounds} rounds, one pass after a warm-up pass each, median):",
        "",
        markdown_table(["format", f"at {commit}", "now", "time now ÷ before"], rows),
        "",
    ]


if __name__ == "__main__":
    sys.exit(main())
