"""verify_answer time against answer length, now and at an earlier commit, in one run.

    python -m evals.bench_verify_answer [--sizes 1k,5k,20k,50k,100k,200k] [--repeat 3]
        [--commit c8a30cf] [--before-max 200k] [--citations 100000] [--before-citations 10000]
    [--out docs/benchmarks.md]

An answer is generated from a seeded mix of short sentences of the kinds an LLM
writes from search results: cited claims (``... [2].``, ``[1, 3]``), quotes of
the results with a marker after them, quotes with a marker inside, uncited
sentences and a marker naming no result. Each size is checked with
``Collection.verify_answer`` (BM25 collection of generated documents, ten
results cited; the terms method, so no model time is counted), best of
``--repeat`` runs.

Three more figures:

* a small request while a long one runs: a one-sentence ``verify_answer``
  started just after a check of the largest answer began, timed on its own and
  alongside (the MCP server serves every client on one event loop);
* provider citations: ``from_anthropic_citations`` on one message carrying
  ``--citations`` search-result citations;
* the same at ``--commit`` (default: the last commit before answer checks were
  made linear), checked out as a git worktree under ``evals/out/before/`` and run
  in its own process, with the verdict counts of both sides compared.

This module imports only the standard library at import time, so the same file
runs the worker under either version of the package (``--worker``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from evals.bench_before import _worktree

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_COMMIT = "c8a30cf"
SECTION = "bench-verify-answer"
_TARGET_SECONDS = 1.0

_VOCABULARY = (
    "grid solar wind storage battery turbine voltage demand supply forecast tariff carbon "
    "policy market price season winter summer peak load reserve frequency hydrogen heat "
    "network consumer meter capacity auction contract balance settlement"
)
_WORDS = _VOCABULARY.split(" ")


def _sentence(rng: random.Random, fewest: int = 8, most: int = 14) -> str:
    words = rng.randint(fewest, most)
    return " ".join(rng.choice(_WORDS) for _ in range(words)).capitalize() + "."


def write_corpus(directory: Path, files: int = 10, seed: int = 3) -> None:
    """``files`` text documents of about 1,500 characters, each one chunk."""
    rng = random.Random(seed)
    directory.mkdir(parents=True, exist_ok=True)
    for n in range(files):
        text = " ".join(_sentence(rng) for _ in range(16))
        (directory / f"doc-{n:02d}.txt").write_text(text + "\n", encoding="utf-8")


def make_answer(contents: list[str], chars: int, seed: int = 11) -> str:
    """A seeded answer of ``chars`` characters citing ``contents`` (1-based markers)."""
    rng = random.Random(seed)
    out: list[str] = []
    size = 0
    while size < chars:
        n = rng.randrange(len(contents))
        content = contents[n]
        kind = rng.random()
        if kind < 0.35:  # a claim in the words of a cited sentence
            words = rng.choice(content.split(". ")).split()[: rng.randint(3, 6)]
            piece = " ".join(words).rstrip(".") + f" [{n + 1}]."
        elif kind < 0.55:  # a quote, then its marker
            at = rng.randrange(max(1, len(content) - 40))
            piece = f'"{content[at : at + 20].strip()}" [{n + 1}].'
        elif kind < 0.65:  # a marker inside the quote
            at = rng.randrange(max(1, len(content) - 40))
            words = content[at : at + 30].split()[1:-1] or ["grid"]
            half = len(words) // 2
            piece = f'"{" ".join(words[:half])} [{n + 1}] {" ".join(words[half:])}".'
        elif kind < 0.80:  # two results
            piece = f"{_sentence(rng, 3, 6)[:-1]} [{n + 1}, {rng.randrange(len(contents)) + 1}]."
        elif kind < 0.95:
            piece = _sentence(rng, 4, 8)
        else:
            piece = f"{_sentence(rng, 3, 5)[:-1]} [{len(contents) + 5}]."
        out.append(piece)
        size += len(piece) + 1
    return " ".join(out)[:chars]


def make_terse_answer(contents: list[str], chars: int, seed: int = 13) -> str:
    """An answer of the shortest cited sentences ("Grid load [3]." and '"wind" [2].'),
    about 15 characters each: the most sentences, markers and quotes per character."""
    rng = random.Random(seed)
    out: list[str] = []
    size = 0
    while size < chars:
        n = rng.randrange(len(contents))
        words = contents[n].rstrip(".\n").split()
        at = rng.randrange(len(words) - 1)
        if rng.random() < 0.3:
            piece = f'"{words[at]}" [{n + 1}].'
        else:
            piece = f"{words[at].capitalize()} {words[at + 1]} [{n + 1}]."
        out.append(piece)
        size += len(piece) + 1
    return " ".join(out)[:chars]


def parse_size(text: str) -> int:
    text = text.strip().lower()
    return int(float(text[:-1]) * 1000) if text.endswith("k") else int(text)


# -- the worker (runs under either version) ---------------------------------------


async def _work(sizes: list[int], repeat: int, citations: int) -> dict[str, Any]:
    from groundkit import Collection
    from groundkit.verification.providers import chunk_uri, from_anthropic_citations

    with tempfile.TemporaryDirectory(prefix="gk-bench-verify-") as tmp:
        base = Path(tmp) / "corpus"
        write_corpus(base)
        async with Collection.open(Path(tmp) / "index", base_dir=base) as col:
            await col.ingest(base)
            response = await col.search(" ".join(_WORDS[:12]), top_k=10)
            results = list(response.results)
            contents = [r.content for r in results]
            out: dict[str, Any] = {"results": len(results), "sizes": {}}
            await col.verify_answer(make_answer(contents, 2000), response)  # warm up
            for size in sizes:
                answer = make_answer(contents, size)
                best = cpu = float("inf")
                for _ in range(repeat):
                    started, used = time.perf_counter(), time.process_time()
                    report = await col.verify_answer(answer, response)
                    best = min(best, time.perf_counter() - started)
                    cpu = min(cpu, time.process_time() - used)
                out["sizes"][str(size)] = {
                    "seconds": best,
                    "cpu": cpu,
                    "sentences": len(report.sentences),
                    "counts": report.counts,
                }
                print(f"  {size:>7} chars: {best:.3f} s", file=sys.stderr, flush=True)

            terse = make_terse_answer(contents, max(sizes))
            started, used = time.perf_counter(), time.process_time()
            report = await col.verify_answer(terse, response)
            out["terse"] = {
                "chars": len(terse),
                "seconds": time.perf_counter() - started,
                "cpu": time.process_time() - used,
                "sentences": len(report.sentences),
                "counts": report.counts,
            }

            small = "Green tea is not in these results, but this sentence cites one [1]."
            started = time.perf_counter()
            await col.verify_answer(small, response)
            alone = time.perf_counter() - started
            # Both are tasks on one loop, the long one first, as two MCP clients' calls are;
            # the small one's time runs from when it was started.
            longest = make_answer(contents, max(sizes))
            big = asyncio.create_task(col.verify_answer(longest, response))
            started = time.perf_counter()
            await asyncio.create_task(col.verify_answer(small, response))
            beside = time.perf_counter() - started
            await big
            out["small"] = {"alone": alone, "beside": beside, "beside_chars": max(sizes)}

            if citations:
                found = [
                    {
                        "type": "search_result_location",
                        "cited_text": contents[i % len(results)][20:60],
                        "search_result_index": i % len(results),
                        "source": chunk_uri(results[i % len(results)]),
                        "title": "",
                        "start_block_index": 0,
                        "end_block_index": 1,
                    }
                    for i in range(citations)
                ]
                message = {"content": [{"type": "text", "text": "An answer.", "citations": found}]}
                started, used = time.perf_counter(), time.process_time()
                mapped = await from_anthropic_citations(message, response, base)
                out["citations"] = {
                    "count": len(mapped),
                    "seconds": time.perf_counter() - started,
                    "cpu": time.process_time() - used,
                    "verified": sum(1 for m in mapped if m.ok),
                }
            return out


# -- the runner ------------------------------------------------------------------


def _run(src: Path, sizes: list[int], repeat: int, citations: int) -> dict[str, Any]:
    """The worker in a fresh process importing groundkit from ``src`` (evals from here)."""
    env = dict(os.environ, PYTHONPATH=f"{src}{os.pathsep}{REPO_ROOT}", HF_HUB_OFFLINE="1")
    args = ["--worker", "--sizes", ",".join(map(str, sizes)), "--repeat", str(repeat)]
    args += ["--citations", str(citations)]
    proc = subprocess.run(
        [sys.executable, "-m", "evals.bench_verify_answer", *args],
        cwd=REPO_ROOT,
        env=env,
        stdout=subprocess.PIPE,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"the worker for {src} failed")
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


def _size(n: int) -> str:
    return f"{n // 1000}k" if n % 1000 == 0 else str(n)


def _ratio(value: float) -> str:
    return f"{value:.1f}×" if value < 10 else f"{value:,.0f}×"


def _section(
    now: dict[str, Any], before: dict[str, Any] | None, commit: str, repeat: int
) -> list[str]:
    from evals.bench_util import verdict
    from evals.machine import command_line, machine_lines, markdown_table

    header = ["answer", "sentences", "now", "now, CPU"]
    if before is not None:
        header += [f"at {commit}", "speed-up", "same verdicts"]
    rows = []
    for size, got in now["sizes"].items():
        row = [f"{_size(int(size))} chars", f"{got['sentences']:,}", f"{got['seconds']:.3f} s"]
        row.append(f"{got['cpu']:.3f} s")
        if before is not None:
            old = before["sizes"].get(size)
            if old is None:
                row += ["not run", "", ""]
            else:
                row += [
                    f"{old['seconds']:.2f} s",
                    _ratio(old["seconds"] / got["seconds"]),
                    "yes" if old["counts"] == got["counts"] else "**no**",
                ]
        rows.append(row)
    from evals.machine import load_average

    terse = now["terse"]
    row = [f"{_size(terse['chars'])} chars, terse", f"{terse['sentences']:,}"]
    row += [f"{terse['seconds']:.3f} s", f"{terse['cpu']:.3f} s"]
    if before is not None:
        old = before["terse"]
        same = "yes" if old["counts"] == terse["counts"] else "**no**"
        row += [f"{old['seconds']:.2f} s", _ratio(old["seconds"] / terse["seconds"]), same]
    rows.append(row)
    largest = max(int(s) for s in now["sizes"])
    worst = now["sizes"][str(largest)]
    ok = worst["cpu"] < _TARGET_SECONDS
    small, cited = now["small"], now.get("citations")
    lines = [
        "## Answer checks against answer length",
        "",
        "Generated by `evals/bench_verify_answer.py` (this section only).",
        "",
        f"Command: `{command_line()}`",
        "",
        f"`Collection.verify_answer` on generated answers of short sentences ({now['results']} "
        "BM25 results of generated documents, each about 1,500 characters, cited with `[n]` and "
        "`[n, m]`; quotes of the results with a marker after or inside them; uncited sentences; "
        "a marker naming no result); *terse* is the largest size in sentences of about 15 "
        'characters (`Grid load [3].`, `"wind" [2].`), run once. Terms method, so no model '
        "time is counted. Best of "
        f"{repeat} runs: wall time, and the CPU time of the process (every thread; on a "
        "shared machine the steadier figure). *at {commit}* is the same worker run once on that "
        "commit's code in its own process, with *same verdicts* comparing the verdict counts.",
        "",
        markdown_table(header, rows),
        "",
        f"Target: 200,000 characters in under {_TARGET_SECONDS:.0f} s: "
        + (
            f"{verdict(ok)} in CPU time ({worst['cpu']:.3f} s); the wall time, "
            f"{worst['seconds']:.3f} s, is what a 2-core machine at load average "
            f"{load_average().split()[0]} left this process."
            if largest >= 200_000
            else "not run."
        ),
        "",
        f"A one-sentence check takes {small['alone'] * 1000:.1f} ms alone and "
        f"{small['beside'] * 1000:.1f} ms when started just after a "
        f"{_size(small['beside_chars'])}-character check",
    ]
    if before is not None:
        old_small = before["small"]
        lines[-1] += (
            f" ({old_small['alone'] * 1000:.1f} ms and {old_small['beside'] * 1000:,.0f} ms at "
            f"{commit}, where the long check held the event loop)"
        )
    lines[-1] += "."
    if cited is not None:
        line = (
            f"`from_anthropic_citations` on one message of {cited['count']:,} search-result "
            f"citations: {cited['seconds']:.2f} s, {cited['cpu']:.2f} s of CPU "
            f"({cited['verified']:,} verified)"
        )
        old_cited = before.get("citations") if before is not None else None
        if old_cited is not None:
            line += (
                f"; at {commit}, {old_cited['count']:,} citations took {old_cited['seconds']:.2f} s"
            )
        lines += ["", line + "."]
    lines += [
        "",
        "Machine (2 cores; other work may share them, so treat small differences as noise):",
        "",
        *machine_lines(),
    ]
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="1k,5k,20k,50k,100k,200k")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--commit", default=DEFAULT_COMMIT, help="'' to skip the earlier code")
    parser.add_argument("--before-max", default="200k", help="largest size run at --commit")
    parser.add_argument("--citations", type=int, default=100_000)
    parser.add_argument(
        "--before-citations", type=int, default=10_000, help="provider citations at --commit"
    )
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    sizes = [parse_size(s) for s in args.sizes.split(",") if s.strip()]

    if args.worker:
        result = asyncio.run(_work(sizes, args.repeat, args.citations))
        print(json.dumps(result))
        return 0

    print("now:", file=sys.stderr)
    now = _run(REPO_ROOT / "src", sizes, args.repeat, args.citations)
    before = None
    if args.commit:
        limit = parse_size(args.before_max)
        print(f"at {args.commit} (one run per size):", file=sys.stderr)
        old_sizes = [s for s in sizes if s <= limit]
        before = _run(_worktree(args.commit) / "src", old_sizes, 1, args.before_citations)
    report = _section(now, before, args.commit, args.repeat)
    if args.out is None:
        print("\n".join(report))
    else:
        from evals.machine import write_section

        write_section(args.out, SECTION, report)
        print("\n".join(report), f"\nupdated {args.out}", sep="\n", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
