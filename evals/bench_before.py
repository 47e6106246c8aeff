"""Search latency now against an earlier commit of groundkit, measured in one run.

    python -m evals.bench_before [--commit db568d0] [--sizes scifact,100k] [--rounds 3]
                                 [--crossed] [--out docs/benchmarks.md]

A claim of "no regression" needs the earlier code measured beside today's, on the
same machine and the same corpus, not a figure from another day. The earlier commit
is checked out as a git worktree under ``evals/out/before/``; each side ingests the
corpus with its own code (their stores differ) and is timed in fresh processes that
alternate between the two, ``--rounds`` times. Each process reads every file of its
index once (a warm page cache), opens the collection, runs five warm-up queries, waits
for the rows of a small collection to be in memory where its version reads them after
the first answer, then times each query once, as ``evals.bench_bm25`` times groundkit:
``Retriever.search`` with k=10, the join to the stored rows and the citations included.
The figure kept for each side is the median over rounds of each process's p50 and p95.
Two ingests of one corpus lay their files out differently, and that alone moves p50 by
several percent; with ``--crossed`` (for versions sharing their on-disk formats) each
version is also timed over the other's ingest, and its figures pool both.

The default commit is the last one before persisted segments, when BM25 was an
in-memory matrix of precomputed weights rebuilt at every open.

This module imports only the standard library at import time, so the same file runs
the timing worker under either version of the package (``--time``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_COMMIT = "db568d0"
WARMUP = 5
K = 10
_SECTION = "bench-before"


# -- the timing worker (runs under either version) ----------------------------


def _read_files(directory: Path) -> None:
    for path in sorted(directory.rglob("*")):
        if path.is_file():
            with open(path, "rb", buffering=0) as handle:
                while handle.read(1 << 20):
                    pass


async def _time(root: Path, variant: str, limit: int) -> dict[str, float]:
    from groundkit.retrieval.search import Retriever
    from groundkit.storage.location import metadata_path
    from groundkit.storage.sqlite import SQLiteMetadataStore

    _read_files(root / "index")
    store = await SQLiteMetadataStore.open(metadata_path(root / "index", "bench"), create=False)
    try:
        from groundkit.storage.location import StoreLocation

        if hasattr(StoreLocation, "segments"):  # the packs it saved, as a collection reads them
            location = StoreLocation.resolve("bench", index_dir=root / "index")
            retriever = await Retriever.open(store, segments=location.segments())
        else:  # a version before persisted segments: built in memory at open
            retriever = await Retriever.open(store)
        lexical = getattr(retriever, "lexical", None)
        rebuilt = getattr(lexical, "rebuilt_because", None) is not None
        queries = json.loads((root / "queries.json").read_text(encoding="utf-8"))[:limit]
        for query in queries[:WARMUP]:
            await retriever.search(query, K)
        # A version that reads a small collection's rows after its first answer (ADR 0063)
        # is timed once they are read, as a long-lived process searches; an older one read
        # them at open.
        preload = getattr(retriever, "preload", None)
        if preload is not None:
            await preload()
        times: list[float] = []
        for query in queries:
            started = time.perf_counter()
            await retriever.search(query, K)
            times.append((time.perf_counter() - started) * 1000)
    finally:
        await store.close()
    times.sort()
    return {
        "p50": times[len(times) // 2],
        "p95": times[min(len(times) - 1, int(len(times) * 0.95))],
        "queries": float(len(times)),
        "rebuilt": float(rebuilt),
    }


# -- preparing both sides -----------------------------------------------------------


def _worktree(commit: str) -> Path:
    path = REPO_ROOT / "evals" / "out" / "before" / commit
    if not (path / "src" / "groundkit").is_dir():
        path.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            ["git", "-C", str(REPO_ROOT), "worktree", "add", "--detach", "-f", str(path), commit],
            check=True,
            capture_output=True,
        )
    _build_kernel(path)
    return path


def _build_kernel(path: Path) -> None:
    """The compiled BM25 kernel, built in place where the version has one: without it
    that version scores in Python and would be timed slower than it is."""
    source = path / "src" / "groundkit" / "lexical" / "_kernel.c"
    if not source.is_file() or any(source.parent.glob("_kernel*.so")):
        return
    subprocess.run(
        [sys.executable, "setup.py", "build_ext", "--inplace", "-q"],
        cwd=path,
        check=True,
        capture_output=True,
    )
    if not any(source.parent.glob("_kernel*.so")):
        raise RuntimeError(f"the BM25 kernel of {path.name} did not build")


def _env(code_root: Path) -> dict[str, str]:
    """An environment that imports groundkit (and evals) from ``code_root`` only."""
    env = dict(os.environ)
    env["PYTHONPATH"] = f"{code_root / 'src'}{os.pathsep}{code_root}"
    env.setdefault("HF_HUB_OFFLINE", "1")
    return env


_PREPARE = """
import sys
from pathlib import Path
from evals import bench_bm25 as b
size, workdir, data, queries = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3]), int(sys.argv[4])
if size == "scifact":
    prepared = b.prepare_scifact(workdir, data, queries, False)
else:
    prepared = b.prepare_synthetic(workdir, b.parse_size(size), queries, False)
print(prepared.root)
"""


def _child(code_root: Path, args: list[str], what: str, cwd: Path | None = None) -> str:
    """Run ``python args`` with ``code_root``'s package; its last line of output."""
    proc = subprocess.run(
        [sys.executable, *args],
        cwd=cwd,
        env=_env(code_root),
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"{what} failed: {proc.stderr.strip().splitlines()[-1:]}")
    return proc.stdout.strip().splitlines()[-1]


def _prepare(code_root: Path, size: str, workdir: Path, data: Path, queries: int) -> Path:
    """Ingest ``size`` with the code at ``code_root`` (cached as the bench caches it)."""
    args = ["-c", _PREPARE, size, str(workdir), str(data), str(queries)]
    return Path(_child(code_root, args, f"preparing {size}", cwd=code_root))


def _timed(code_root: Path, root: Path, variant: str, queries: int) -> dict[str, float]:
    args = [str(Path(__file__).resolve()), "--time", variant, "--root", str(root)]
    line = _child(code_root, [*args, "--queries", str(queries)], f"timing {variant}")
    result: dict[str, float] = json.loads(line)
    return result


# -- the report ---------------------------------------------------------------------


def _section(rows: list[dict[str, Any]], commit: str) -> list[str]:
    from evals.machine import command_line, machine_lines, markdown_table

    default = commit == DEFAULT_COMMIT
    lines = [
        "## Search latency against the in-memory index (before persisted segments)"
        if default
        else f"## Search latency against commit {commit}",
        "",
        "Generated by `evals/bench_before.py` (this section only).",
        "",
        f"Command: `{command_line()}`",
        "",
        f"Both versions in one run: today's code and commit `{commit}`"
        + (
            " (the last before persisted segments: BM25 as an in-memory matrix of "
            "precomputed weights, rebuilt at every open)"
            if default
            else ""
        )
        + ", each ingesting the corpus with its own code (its compiled BM25 kernel built "
        "where it has one) and timed in fresh "
        "processes that alternate between the two. A process reads its index files once, "
        f"opens the collection, runs {WARMUP} warm-up queries, waits for a small "
        "collection's rows to be in memory where its version reads them after the first "
        "answer, then times each query "
        f"once: `Retriever.search`, k={K}, rows and citations included. The figures are "
        "the medians over rounds of each process's p50 and p95."
        + (
            " *Crossed*: each version is also timed over the other's ingest (the versions "
            "share their on-disk formats), and its figures pool both: two ingests of the "
            "same corpus lay their files out differently, which alone moved p50 by 4-9% at "
            "100k chunks."
            if any(row.get("crossed") for row in rows)
            else ""
        ),
        "",
    ]
    header = ["corpus", "chunks", "rounds", "before p50 ms", "now p50 ms", "now ÷ before"]
    header += ["before p95 ms", "now p95 ms", "now ÷ before"]
    table = [
        [
            row["corpus"],
            f"{row['chunks']:,}",
            str(row["rounds"]),
            f"{row['before_p50']:.3f}",
            f"{row['now_p50']:.3f}",
            f"{row['now_p50'] / row['before_p50']:.2f}×",
            f"{row['before_p95']:.3f}",
            f"{row['now_p95']:.3f}",
            f"{row['now_p95'] / row['before_p95']:.2f}×",
        ]
        for row in rows
    ]
    lines += [markdown_table(header, table), ""]
    for row in rows:
        ratio = row["now_p50"] / row["before_p50"]
        # Judged as shown: a difference below the page's precision is no regression.
        verdict = "met" if round(ratio, 2) <= 1.0 else "**missed**"
        lines.append(
            f"- {row['corpus']}: search p50 no slower than "
            f"{'before segments' if default else 'at ' + commit}: "
            f"{ratio:.2f}× → {verdict}"
        )
    return [*lines, "", "Machine:", "", *machine_lines()]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--commit", default=DEFAULT_COMMIT)
    parser.add_argument("--sizes", default="scifact,100k")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument(
        "--crossed",
        action="store_true",
        help="time each version over both ingests (versions with the same on-disk formats)",
    )
    parser.add_argument("--data", type=Path, default=None, help="SciFact folder")
    parser.add_argument("--out", type=Path, default=REPO_ROOT / "docs" / "benchmarks.md")
    parser.add_argument("--time", choices=("now", "before"), help=argparse.SUPPRESS)
    parser.add_argument("--root", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.time:
        print(json.dumps(asyncio.run(_time(args.root, args.time, args.queries))))
        return 0

    from evals.machine import default_scifact_dir

    data = args.data or default_scifact_dir()
    old = _worktree(args.commit)
    rows: list[dict[str, Any]] = []
    for size in [s.strip() for s in args.sizes.split(",") if s.strip()]:
        print(f"[{size}] preparing both versions ...", file=sys.stderr, flush=True)
        now_root = _prepare(REPO_ROOT, size, REPO_ROOT / "evals" / "out" / "bench", data, 200)
        old_root = _prepare(old, size, old.parent / f"{args.commit}-bench", data, 200)
        # The segments are built once, untimed, as the main benchmark's build phase does.
        _timed(REPO_ROOT, now_root, "now", 1)
        pairs = [("before", old, old_root), ("now", REPO_ROOT, now_root)]
        if args.crossed:
            # Each version also over the other's ingest: the two ingests lay out their
            # files differently, which alone moved p50 by 4-9% at 100k.
            for variant, code, root in (("before", old, now_root), ("now", REPO_ROOT, old_root)):
                if _timed(code, root, variant, 1)["rebuilt"]:
                    raise SystemExit(
                        f"--crossed: {variant}'s code cannot read the other's segments as "
                        "saved (the on-disk formats differ); run without --crossed"
                    )
                pairs.append((variant, code, root))
        runs: dict[str, list[dict[str, float]]] = {"now": [], "before": []}
        for round_no in range(args.rounds):
            shift = round_no % len(pairs)
            for variant, code, root in pairs[shift:] + pairs[:shift]:
                runs[variant].append(_timed(code, root, variant, args.queries))
        meta = json.loads((now_root / "meta.json").read_text(encoding="utf-8"))
        rows.append(
            {
                "corpus": now_root.name,
                "chunks": meta["prepared"]["chunks"],
                "rounds": args.rounds,
                "crossed": args.crossed,
                **{
                    f"{variant}_{stat}": statistics.median(r[stat] for r in runs[variant])
                    for variant in ("now", "before")
                    for stat in ("p50", "p95")
                },
            }
        )
        print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    from evals.machine import write_section

    # Another commit's comparison is a section of its own, beside the default one.
    section = _SECTION if args.commit == DEFAULT_COMMIT else f"{_SECTION}-{args.commit}"
    write_section(args.out, section, _section(rows, args.commit))
    print(f"wrote {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
