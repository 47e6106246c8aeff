"""Cold start: what a new process pays before its first answer.

    python -m evals.bench_coldstart [--sizes 1k,20k,50k,1m] [--runs 7] [--out docs/benchmarks.md]

Three comparisons, each side in fresh subprocesses, the sides taking turns round by
round so that load on the machine hits them alike; figures are medians over the
rounds (``--runs``):

* *import*: the wall time of ``python -c "import groundkit"`` against
  ``python -c "import numpy; import pydantic"`` (the two dependencies every search
  needs), interpreter start included; ``python -c pass`` for reference.
* *grk*: ``grk search QUERY`` on a BM25 collection of each size against
  ``grk --version``, whole processes.
* *first search*: a process that has imported groundkit and opened the collection
  (``Collection.open``, timed apart) times its first ``Collection.search``, then,
  after 5 warm-up searches and once the background row preload (if any) is done,
  the median of ``--warm`` more searches.

The collections are the seeded synthetic corpus (``evals/synthetic.py``), one chunk a
passage, ingested once through groundkit and cached under ``evals/out/bench/`` with
``evals.bench_bm25``'s corpora (the same directories). Before the rounds, one
untimed ``grk search`` of each collection makes sure its lexical segments are saved
and its files are in the page cache: these are starts of a new process, not cold
reads of the disk.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from evals.machine import REPO_ROOT, command_line, machine_lines, markdown_table, write_section

__all__ = ["main"]

SECTION = "bench-coldstart"
DEFAULT_SIZES = "1k,20k,50k,1m"
# What each comparison is held to.
IMPORT_TARGET = 1.5  # import groundkit ÷ import numpy; import pydantic
GRK_TARGET = 1.5  # grk search ÷ grk --version, at every size
FIRST_TARGET = 10.0  # first Collection.search ÷ a warm one
# Sizes the first-search comparison is held to (it is measured at every size).
FIRST_SIZES = (20_000, 50_000)
_WARM_UP = 5
_QUERIES = 200  # as evals.bench_bm25 makes its corpora: the same cache


def _log(message: str) -> None:
    print(f"[coldstart {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


# -- the worker: a fresh process's first search ---------------------------------


async def _first_search(root: Path, first: int, warm: int) -> dict[str, Any]:
    from groundkit import Collection

    queries: list[str] = json.loads((root / "queries.json").read_text(encoding="utf-8"))
    ordered = queries[first % len(queries) :] + queries[: first % len(queries)]
    started = time.perf_counter()
    col = await Collection.open(root / "index", "bench", create=False)
    opened = time.perf_counter() - started
    try:
        started = time.perf_counter()
        response = await col.search(ordered[0])
        first_s = time.perf_counter() - started
        for query in ordered[1 : 1 + _WARM_UP]:
            await col.search(query)
        rows_in_memory = await (await col.retriever()).preload()
        times: list[float] = []
        for query in ordered[1 + _WARM_UP : 1 + _WARM_UP + warm]:
            started = time.perf_counter()
            await col.search(query)
            times.append(time.perf_counter() - started)
    finally:
        await col.close()
    return {
        "open_ms": opened * 1000,
        "first_ms": first_s * 1000,
        "warm_ms": statistics.median(times) * 1000,
        "results": len(response.results),
        "rows_in_memory": rows_in_memory,
    }


# -- rows of an earlier run ------------------------------------------------------------

_GRK_HEADER = "| command | chunks |"
_FIRST_HEADER = "| collection | chunks |"
_CARRIED = "† Not measured in this run: carried over from "


@dataclass
class Earlier:
    """Rows of the section already on the page for collections this run did not measure
    (the 1M collection takes half an hour to ingest), and when they were measured."""

    grk: list[list[str]] = field(default_factory=list)
    first: list[list[str]] = field(default_factory=list)
    when: str = "an earlier run"


def _earlier(out: Path | None, measured: set[str]) -> Earlier:
    earlier = Earlier()
    if out is None or not out.exists():
        return earlier
    text = out.read_text(encoding="utf-8")
    start, end = text.find(f"<!-- section:{SECTION} -->"), text.find(f"<!-- /section:{SECTION} -->")
    if start < 0 or end < start:
        return earlier
    table: list[list[str]] | None = None
    commit = date = carried = ""
    for line in text[start:end].splitlines():
        if line.startswith(_GRK_HEADER):
            table = earlier.grk
        elif line.startswith(_FIRST_HEADER):
            table = earlier.first
        elif not line.startswith("|"):
            table = None
            if line.startswith("- groundkit at commit "):
                commit = line.removeprefix("- groundkit at commit ").split(",")[0]
            elif line.startswith("- date: "):
                date = line.removeprefix("- date: ")
            elif line.startswith(_CARRIED):
                carried = line.removeprefix(_CARRIED).split(" (its ratios")[0]
        elif table is not None:
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            label = cells[0].removesuffix(" †")
            if label.startswith("synthetic-") and label not in measured:
                table.append([f"{label} †", *cells[1:]])
    if carried:  # rows this run carries were carried by the last one too
        earlier.when = carried
    elif commit or date:
        earlier.when = f"the run of {date or 'an earlier date'} at commit {commit or 'unknown'}"
    return earlier


# -- the parent: corpora, rounds, report ----------------------------------------


@dataclass
class Corpus:
    label: str
    root: Path
    chunks: int
    queries: list[str]
    ingest_note: str


@dataclass
class Samples:
    """Wall times in seconds by what was run, and the first-search workers' results."""

    wall: dict[str, list[float]] = field(default_factory=dict)
    first: dict[str, list[dict[str, Any]]] = field(default_factory=dict)

    def median_ms(self, key: str) -> float:
        return statistics.median(self.wall[key]) * 1000


def _grk() -> list[str]:
    """The ``grk`` script beside this Python, as users run it; else ``python -m groundkit``."""
    script = Path(sys.executable).with_name("grk")
    return [str(script)] if script.is_file() else [sys.executable, "-m", "groundkit"]


# The processes' environment: bytecode is written once and read after, from a cache of
# this benchmark's (PYTHONPYCACHEPREFIX), as an installed package has its modules
# compiled; a checkout run with PYTHONDONTWRITEBYTECODE would compile every module of
# groundkit (not numpy's or pydantic's, installed compiled) in every process.
_ENV = dict(os.environ)


def _run(cmd: list[str]) -> tuple[float, str]:
    started = time.perf_counter()
    proc = subprocess.run(cmd, cwd=REPO_ROOT, env=_ENV, capture_output=True, text=True, check=False)
    elapsed = time.perf_counter() - started
    if proc.returncode != 0:
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise RuntimeError(f"{' '.join(cmd[:4])} ... exited {proc.returncode}: {tail}")
    return elapsed, proc.stdout


def _search_cmd(corpus: Corpus, query: str, *extra: str) -> list[str]:
    index = str(corpus.root / "index")
    return [*_grk(), "search", query, "--index-dir", index, "--collection", "bench", *extra]


def _prepare(sizes: list[int], fresh: bool) -> list[Corpus]:
    from evals.bench_bm25 import prepare_synthetic

    workdir = REPO_ROOT / "evals" / "out" / "bench"
    workdir.mkdir(parents=True, exist_ok=True)
    corpora: list[Corpus] = []
    for passages in sizes:
        prepared = prepare_synthetic(workdir, passages, _QUERIES, fresh)
        queries = json.loads((prepared.root / "queries.json").read_text(encoding="utf-8"))
        corpus = Corpus(
            prepared.name, prepared.root, prepared.chunks, queries, prepared.ingest_note
        )
        # Untimed: saves the segments if no open has yet, and reads the files once.
        _, out = _run(_search_cmd(corpus, queries[0], "--json"))
        if not json.loads(out)["results"]:
            raise RuntimeError(f"{corpus.label}: the warm-up search found nothing")
        _log(f"{corpus.label}: {corpus.chunks:,} chunks ready")
        corpora.append(corpus)
    return corpora


def _round(number: int, corpora: list[Corpus], samples: Samples, warm: int) -> None:
    python = sys.executable
    jobs: list[tuple[str, list[str]]] = [
        ("python -c pass", [python, "-c", "pass"]),
        ("import numpy; import pydantic", [python, "-c", "import numpy; import pydantic"]),
        ("import groundkit", [python, "-c", "import groundkit"]),
        ("grk --version", [*_grk(), "--version"]),
    ]
    for corpus in corpora:
        query = corpus.queries[number % len(corpus.queries)]
        jobs.append((f"grk search {corpus.label}", _search_cmd(corpus, query)))
    # Each round in another order: no side always runs right after the same one.
    shift = number % len(jobs)
    for key, cmd in jobs[shift:] + jobs[:shift]:
        elapsed, _ = _run(cmd)
        samples.wall.setdefault(key, []).append(elapsed)
    for corpus in corpora:
        cmd = [
            python, "-m", "evals.bench_coldstart", "--worker", str(corpus.root),
            "--first", str(number), "--warm", str(warm),
        ]  # fmt: skip
        _, out = _run(cmd)
        samples.first.setdefault(corpus.label, []).append(json.loads(out.splitlines()[-1]))


def _ratio(a: float, b: float) -> str:
    return f"{a / b:.2f}×"


def _report(
    corpora: list[Corpus], samples: Samples, runs: int, warm: int, earlier: Earlier
) -> list[str]:
    ms = samples.median_ms
    numpy_pydantic = ms("import numpy; import pydantic")
    imported = ms("import groundkit")
    version = ms("grk --version")
    lines = [
        "## Cold start",
        "",
        "Generated by `evals/bench_coldstart.py`; do not edit by hand.",
        "",
        f"Command: `{command_line()}`",
        "",
        "What a new process pays before its first answer. Each figure is the median over "
        f"{runs} rounds; in each round every process below runs once, fresh, in a rotating "
        "order, so load on the machine falls on all of them alike. *import* and *grk* "
        "figures are the wall time of the whole process (interpreter start included), "
        "seen from the parent. The collections are the seeded synthetic corpus, one chunk "
        "a passage (evals/synthetic.py), BM25 only, their files in the page cache (one "
        "untimed search of each before the rounds). Every process reads compiled bytecode, "
        "as an installed package has it (a cache of the benchmark's, `PYTHONPYCACHEPREFIX`, "
        "filled by one untimed round): a source checkout run with "
        "`PYTHONDONTWRITEBYTECODE=1` compiles every groundkit module it imports in every "
        "process, which costs more than the imports themselves.",
        "",
        "Import:",
        "",
        markdown_table(
            ["process", "median ms", "× import numpy; import pydantic"],
            [
                [key, f"{ms(key):.0f}", _ratio(ms(key), numpy_pydantic)]
                for key in ("python -c pass", "import numpy; import pydantic", "import groundkit")
            ],
        ),
        "",
        "`grk search QUERY` (default output, top 10, a different query each round) against "
        "`grk --version`:",
        "",
    ]
    rows: list[list[str]] = [["–", "–", f"{version:.0f}", "1.00×"]]
    grk_ok = True
    for corpus in corpora:
        search = ms(f"grk search {corpus.label}")
        grk_ok = grk_ok and search / version <= GRK_TARGET
        rows.append([corpus.label, f"{corpus.chunks:,}", f"{search:.0f}", _ratio(search, version)])
    rows[0][0] = "grk --version"
    rows += earlier.grk
    lines += [markdown_table(["command", "chunks", "median ms", "× grk --version"], rows), ""]
    lines += [
        f"First `Collection.search` of a fresh process against warm ones (the median of {warm} "
        f"searches after {_WARM_UP} warm-up ones and the background row preload, in the same "
        "process); *open* is `Collection.open` before it, timed apart; *rows in memory*: "
        "whether the warm searches read the rows the preload kept:",
        "",
    ]
    first_rows: list[list[str]] = []
    first_ok = True
    for corpus in corpora:
        runs_of = samples.first[corpus.label]
        first = statistics.median(r["first_ms"] for r in runs_of)
        warm_ms = statistics.median(r["warm_ms"] for r in runs_of)
        opened = statistics.median(r["open_ms"] for r in runs_of)
        if corpus.chunks in FIRST_SIZES:
            first_ok = first_ok and first / warm_ms <= FIRST_TARGET
        kept = {r["rows_in_memory"] for r in runs_of}
        first_rows.append(
            [
                corpus.label,
                f"{corpus.chunks:,}",
                f"{opened:.1f}",
                f"{first:.2f}",
                f"{warm_ms:.3f}",
                _ratio(first, warm_ms),
                "yes" if kept == {True} else "no" if kept == {False} else "some runs",
            ]
        )
    lines += [
        markdown_table(
            [
                "collection",
                "chunks",
                "open ms",
                "first search ms",
                "warm search ms",
                "first ÷ warm",
                "rows in memory",
            ],
            first_rows + earlier.first,
        ),
        "",
        *_earlier_note(earlier),
        "Targets:",
        "",
        f"- `import groundkit` ≤ {IMPORT_TARGET}× `import numpy; import pydantic`: "
        f"{_ratio(imported, numpy_pydantic)}, "
        f"{_verdict(imported / numpy_pydantic <= IMPORT_TARGET)}.",
        f"- `grk search` ≤ {GRK_TARGET}× `grk --version` at every size: "
        f"{_verdict(grk_ok)} (table above).",
        "  `grk --version` imports no dependency; a search cannot answer without numpy and "
        "pydantic, whose import alone is "
        f"{_ratio(numpy_pydantic, version)} `grk --version` here.",
        f"- first search ≤ {FIRST_TARGET:.0f}× a warm one at "
        + " and ".join(f"{n:,}" for n in FIRST_SIZES)
        + f" chunks: {_verdict(first_ok)} (table above). `Collection.open` opens the lexical "
        "index: each pack is mapped, and read whole for its checksum and segment check only "
        "when no earlier process of this user saw the same file pass them "
        "(adr/0075-check-cache.md; the benchmark's untimed searches did); the first search "
        "reads no pack and no chunk rows.",
        "",
        "Corpora: " + "; ".join(f"{c.label}, ingested {c.ingest_note}" for c in corpora) + ".",
        "",
        f"- `grk`: `{' '.join(Path(p).name for p in _grk())}`",
        *machine_lines(),
    ]
    return lines


def _earlier_note(earlier: Earlier) -> list[str]:
    if not earlier.grk and not earlier.first:
        return []
    return [
        f"{_CARRIED}{earlier.when} (its ratios are to "
        "that run's `grk --version` and warm searches). The targets below are judged on "
        "the rows measured in this run.",
        "",
    ]


def _verdict(ok: bool) -> str:
    return "met" if ok else "**missed**"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default=DEFAULT_SIZES, help="collection sizes, e.g. 1k,20k")
    parser.add_argument("--runs", type=int, default=7, help="rounds (fresh processes each)")
    parser.add_argument("--warm", type=int, default=50, help="warm searches timed per process")
    parser.add_argument("--fresh", action="store_true", help="ingest the corpora again")
    parser.add_argument("--out", type=Path, default=None, help="docs page to write the section to")
    parser.add_argument("--worker", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--first", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker is not None:
        print(json.dumps(asyncio.run(_first_search(args.worker, args.first, args.warm))))
        return 0
    from evals.synthetic import parse_size

    if shutil.which(_grk()[0]) is None:
        raise SystemExit(f"no grk command at {_grk()[0]}")
    _ENV.setdefault("HF_HUB_OFFLINE", "1")
    _ENV.pop("PYTHONDONTWRITEBYTECODE", None)
    _ENV["PYTHONPYCACHEPREFIX"] = str(REPO_ROOT / "evals" / "out" / "coldstart-pycache")
    sizes = [parse_size(s) for s in args.sizes.split(",") if s.strip()]
    corpora = _prepare(sizes, args.fresh)
    _round(0, corpora, Samples(), args.warm)  # untimed: every module compiled once
    samples = Samples()
    for number in range(args.runs):
        _log(f"round {number + 1} of {args.runs}")
        _round(number, corpora, samples, args.warm)
    earlier = _earlier(args.out, {c.label for c in corpora})
    lines = _report(corpora, samples, args.runs, args.warm, earlier)
    if args.out is not None:
        write_section(args.out, SECTION, lines)
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
