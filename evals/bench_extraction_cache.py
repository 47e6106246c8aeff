"""Re-ingest of a folder of unchanged PDFs, with and without the extraction cache.

    python -m evals.bench_extraction_cache [--pdfs 30] [--pages 20] [--scanned 3]
                                           [--repeat 3] [--out docs/benchmarks.md]

Two folders of generated PDFs (``evals.scanned``): ``--pdfs`` with a text layer of
``--pages`` pages each, and ``--scanned`` two-page scans without one, read by OCR (left
out when tesseract is not installed). Each is ingested into a new collection with an
empty cache directory; then ingested again unchanged, once reading the extraction cache
(``IngestConfig``'s default) and once with it off (``extraction_cache_bytes=0``), in
alternating order over ``--repeat`` rounds. Times are wall seconds of
``Collection.ingest`` in this process (median over rounds); the cache's size on disk is
given against the PDFs' own.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

from evals.machine import command_line, machine_lines, markdown_table, write_section

SECTION = "bench-extraction-cache"
_WORDS = [
    *("espresso", "grinder", "burr", "tamper", "portafilter", "crema", "extraction"),
    *("pressure", "boiler", "steam", "milk", "froth", "dose", "yield", "ratio"),
    *("temperature", "pump", "valve", "gasket", "descale", "water", "hardness", "bean"),
    *("roast", "origin", "acidity", "body", "aroma", "bitter", "sweet", "balance"),
    *("channel", "puck", "basket", "shower", "screen"),
]


def _page(rng: random.Random, words: int = 260) -> str:
    return " ".join(rng.choice(_WORDS) for _ in range(words)).capitalize() + "."


def _ocr_available() -> bool:
    try:
        from groundkit.extraction.ocr import ocr_engine

        ocr_engine("eng")
    except Exception:  # no tesseract, no pytesseract: the scans are left out
        return False
    return True


def make_folder(folder: Path, pdfs: int, pages: int, scanned: int) -> tuple[int, int]:
    """The PDFs written into ``folder``: (files, bytes)."""
    from evals.scanned import scanned_pdf, text_pdf

    rng = random.Random(7)
    folder.mkdir(parents=True, exist_ok=True)
    total = 0
    for i in range(pdfs):
        data = text_pdf([_page(rng) for _ in range(pages)])
        (folder / f"manual-{i:03d}.pdf").write_bytes(data)
        total += len(data)
    for i in range(scanned):
        data = scanned_pdf([_page(rng, 60) for _ in range(2)], size=14)
        (folder / f"scan-{i:03d}.pdf").write_bytes(data)
        total += len(data)
    return pdfs + scanned, total


async def _ingest(index: Path, folder: Path, cache_bytes: int | None) -> tuple[float, int]:
    import groundkit

    config = (
        groundkit.IngestConfig()
        if cache_bytes is None
        else groundkit.IngestConfig(extraction_cache_bytes=cache_bytes)
    )
    async with groundkit.Collection.open(index, base_dir=folder, ingest=config) as col:
        started = time.perf_counter()
        report = await col.ingest(folder)
        elapsed = time.perf_counter() - started
    if report.failed:
        raise RuntimeError(f"ingest failed: {report.failed}")
    return elapsed, len(report.added) + len(report.updated)


def _folder_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.glob("*.gkx")) if folder.is_dir() else 0


async def run(work: Path, pdfs: int, pages: int, scanned: int, repeat: int) -> dict[str, float]:
    """Medians over ``repeat`` rounds for one folder: seconds of each ingest, MB."""
    folder = work / "docs"
    files, pdf_bytes = make_folder(folder, pdfs, pages, scanned)
    out: dict[str, list[float]] = {"first": [], "cached": [], "off": [], "cache_mb": []}
    for round_ in range(repeat):
        os.environ["GROUNDKIT_CACHE_DIR"] = str(work / f"cache-{round_}")
        index = work / f"idx-{round_}"
        first, written = await _ingest(index, folder, None)
        if written != files:
            raise RuntimeError(f"first ingest wrote {written} of {files} files")
        order = ("cached", "off") if round_ % 2 == 0 else ("off", "cached")
        for variant in order:
            elapsed, written = await _ingest(index, folder, 0 if variant == "off" else None)
            if written:
                raise RuntimeError(f"an unchanged folder rewrote {written} files")
            out[variant].append(elapsed)
        out["first"].append(first)
        out["cache_mb"].append(_folder_bytes(work / f"cache-{round_}" / "extractions") / 1e6)
    medians = {k: statistics.median(v) for k, v in out.items()}
    return {**medians, "files": float(files), "pdf_mb": pdf_bytes / 1e6}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pdfs", type=int, default=30)
    parser.add_argument("--pages", type=int, default=20)
    parser.add_argument("--scanned", type=int, default=3)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    ocr = _ocr_available()
    folders = [(f"{args.pdfs} PDFs of {args.pages} text pages", args.pdfs, args.pages, 0)]
    if ocr and args.scanned:
        folders.append((f"{args.scanned} two-page scans, read by OCR", 0, 0, args.scanned))
    rows: list[list[str]] = []
    for label, pdfs, pages, scanned in folders:
        with tempfile.TemporaryDirectory() as tmp:
            got = asyncio.run(run(Path(tmp), pdfs, pages, scanned, args.repeat))
        first, cached, off = got["first"], got["cached"], got["off"]
        rows.append(
            [
                f"{label} ({got['pdf_mb']:.1f} MB)",
                f"{first:.2f}",
                f"{off:.2f}",
                f"{cached:.3f}",
                f"{off / cached:.0f}×",
                f"{got['cache_mb']:.2f}",
            ]
        )
    missing = "" if ocr else " (tesseract is not installed here: no scans)"
    lines = [
        "## Re-ingest of unchanged extracted files",
        "",
        "Generated by `evals/bench_extraction_cache.py`; do not edit by hand.",
        "",
        f"Command: `{command_line()}`",
        "",
        "A folder of generated PDFs is ingested into a new collection with an empty cache "
        "directory, then ingested again unchanged with the extraction cache on (the default) "
        "and off (`IngestConfig(extraction_cache_bytes=0)`), alternating, "
        f"{args.repeat} rounds; wall seconds of `Collection.ingest`, medians{missing}. "
        "Without the cache an unchanged PDF is extracted again to learn that its text did "
        "not change; with it, its bytes are hashed and the extraction read back.",
        "",
        markdown_table(
            [
                "folder",
                "first ingest s",
                "re-ingest, cache off s",
                "re-ingest, cache on s",
                "off ÷ on",
                "cache on disk MB",
            ],
            rows,
        ),
        "",
        "Machine:",
        "",
        *machine_lines(),
    ]
    print("\n".join(lines))
    if args.out is not None:
        write_section(args.out, SECTION, lines)
    return 0


if __name__ == "__main__":
    sys.exit(main())
