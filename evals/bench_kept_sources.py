"""What kept sources cost: codec sizes and speeds, ingest and verify, on a real corpus.

    python -m evals.bench_kept_sources [--data DIR] [--file-kb 32] [--repeat 3]
        [--out docs/benchmarks.md]

The corpus is a BEIR ``corpus.jsonl`` (SciFact by default, read in place): its
abstracts written as files of about ``--file-kb`` kilobytes each (abstracts one
after another, so the text is real prose), plus the same abstracts one per file
(the small-file case). Measured in one run:

* each stdlib codec a kept copy could use (zlib at levels 6 and 9, lzma at its
  default preset), one call per file: stored size against the UTF-8 text, and
  compress and decompress throughput (MB of text per second, median of
  ``--repeat``);
* ``Collection.ingest`` of the folder into a fresh BM25 collection with and
  without ``IngestConfig(keep_sources=True)``, alternating, median of
  ``--repeat``: the ratio is what keeping copies adds to an ingest;
* ``Collection.verify_all()`` of every chunk, with the files present and from a
  host without them (the kept copies read instead), median of ``--repeat``.

Timings are ratios against a baseline measured beside them in the same run; the
absolute figures depend on the machine (listed with the results).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import lzma
import shutil
import statistics
import sys
import tempfile
import time
import zlib
from collections.abc import Callable
from pathlib import Path

from evals.machine import (
    command_line,
    default_scifact_dir,
    machine_lines,
    markdown_table,
    write_section,
)
from groundkit import Collection, IngestConfig

SECTION = "bench-kept-sources"

CODECS: dict[str, tuple[Callable[[bytes], bytes], Callable[[bytes], bytes]]] = {
    "zlib level 6 (used)": (lambda b: zlib.compress(b, 6), zlib.decompress),
    "zlib level 9": (lambda b: zlib.compress(b, 9), zlib.decompress),
    "lzma preset 6": (lambda b: lzma.compress(b, preset=6), lzma.decompress),
}


def abstracts(data: Path) -> list[str]:
    out: list[str] = []
    with (data / "corpus.jsonl").open(encoding="utf-8") as fh:
        for line in fh:
            row = json.loads(line)
            text = f"{row.get('title', '')}\n\n{row.get('text', '')}".strip()
            if text:
                out.append(text + "\n")
    return out


def as_files(texts: list[str], file_kb: int) -> list[str]:
    """The abstracts packed into files of about ``file_kb`` KB each."""
    files: list[str] = []
    current: list[str] = []
    size = 0
    for text in texts:
        current.append(text)
        size += len(text.encode("utf-8"))
        if size >= file_kb * 1024:
            files.append("\n".join(current))
            current, size = [], 0
    if current:
        files.append("\n".join(current))
    return files


def codec_rows(shapes: dict[str, list[str]], repeat: int) -> list[list[str]]:
    rows: list[list[str]] = []
    for shape, texts in shapes.items():
        raw = [t.encode("utf-8") for t in texts]
        total = sum(map(len, raw))
        for name, (pack, unpack) in CODECS.items():
            packed = [pack(b) for b in raw]  # warm-up, and the sizes
            stored = sum(map(len, packed))
            packing, unpacking = [], []
            for _ in range(repeat):
                started = time.perf_counter()
                for b in raw:
                    pack(b)
                packing.append(time.perf_counter() - started)
                started = time.perf_counter()
                for b in packed:
                    unpack(b)
                unpacking.append(time.perf_counter() - started)
            rows.append(
                [
                    shape,
                    name,
                    f"{stored / 1e6:.2f} MB",
                    f"{total / stored:.2f}×",
                    f"{total / 1e6 / statistics.median(packing):.0f}",
                    f"{total / 1e6 / statistics.median(unpacking):.0f}",
                ]
            )
    return rows


async def ingest_once(base: Path, index: Path, keep: bool) -> float:
    shutil.rmtree(index, ignore_errors=True)
    started = time.perf_counter()
    opened = Collection.open(index, base_dir=base, ingest=IngestConfig(keep_sources=keep))
    async with opened as col:
        report = await col.ingest(base)
        assert not report.failed, report.failed[:3]
    return time.perf_counter() - started


async def verify_once(base: Path, index: Path) -> tuple[float, int, int]:
    async with Collection.open(index, base_dir=base) as col:
        started = time.perf_counter()
        report = await col.verify_all()
        elapsed = time.perf_counter() - started
    assert report.ok, report.problems[:3]
    return elapsed, report.verified, report.kept_copy


async def timings(files: list[str], root: Path, repeat: int) -> list[list[str]]:
    base, elsewhere = root / "base", root / "elsewhere"
    base.mkdir()
    elsewhere.mkdir()
    for n, text in enumerate(files):
        (base / f"doc{n:05d}.txt").write_text(text, encoding="utf-8")
    plain: list[float] = []
    kept: list[float] = []
    for _ in range(repeat):  # alternating, so drift in the machine hits both alike
        plain.append(await ingest_once(base, root / "plain", keep=False))
        kept.append(await ingest_once(base, root / "kept", keep=True))
    from_file: list[float] = []
    from_copy: list[float] = []
    chunks = copies = 0
    for _ in range(repeat):
        elapsed, chunks, _ = await verify_once(base, root / "kept")
        from_file.append(elapsed)
        elapsed, _, copies = await verify_once(elsewhere, root / "kept")
        from_copy.append(elapsed)
    assert copies == chunks, (copies, chunks)
    on_disk = sum(p.stat().st_size for p in (root / "kept" / "default.snapshots").iterdir())
    size = sum(len(t.encode("utf-8")) for t in files)
    p_ingest, k_ingest = statistics.median(plain), statistics.median(kept)
    f_verify, c_verify = statistics.median(from_file), statistics.median(from_copy)
    return [
        ["files", f"{len(files)} ({size / 1e6:.2f} MB of text, {chunks} chunks)"],
        ["kept copies on disk", f"{on_disk / 1e6:.2f} MB ({size / on_disk:.2f}× smaller)"],
        ["ingest, BM25, without copies", f"{p_ingest:.2f} s"],
        ["ingest, BM25, keep_sources=True", f"{k_ingest:.2f} s ({k_ingest / p_ingest:.2f}×)"],
        ["verify every chunk, files present", f"{f_verify:.2f} s"],
        ["verify every chunk, from kept copies", f"{c_verify:.2f} s ({c_verify / f_verify:.2f}×)"],
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", type=Path, default=default_scifact_dir())
    parser.add_argument("--file-kb", type=int, default=32)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    texts = abstracts(args.data)
    files = as_files(texts, args.file_kb)
    shapes = {f"{len(texts)} abstracts, one a file": texts, f"{len(files)} files": files}
    codecs = codec_rows(shapes, args.repeat)
    with tempfile.TemporaryDirectory() as tmp:
        costs = asyncio.run(timings(files, Path(tmp), args.repeat))
    lines = [
        "## Kept sources",
        "",
        f"`{command_line()}`",
        "",
        *machine_lines(),
        "",
        markdown_table(
            ["corpus", "codec", "stored", "ratio", "compress MB/s", "decompress MB/s"], codecs
        ),
        "",
        markdown_table(["measured", "value"], costs),
    ]
    print("\n".join(lines))
    if args.out is not None:
        write_section(args.out, SECTION, lines)
    return 0


if __name__ == "__main__":
    sys.exit(main())
