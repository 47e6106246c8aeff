"""Load on the MCP server: many concurrent searches over streamable HTTP.

    python -m evals.bench_serve [--chunks 10000] [--concurrency 200] [--sessions 20]
                                [--rounds 3] [--fresh] [--out docs/benchmarks.md]

A synthetic collection (``evals.synthetic``, one chunk per passage) is
ingested once and cached under ``evals/out/bench_serve/``. ``grk serve
--transport http`` runs it in its own process, exactly as deployed. The
client opens ``--sessions`` MCP sessions with the SDK's own client, warms the
server up, then per round starts ``--concurrency`` ``search`` calls at once,
spread over the sessions, and times each call from send to parsed result.
Any tool error or exception counts as an error; the run fails (exit 1) unless
there are none, and unless a sample of the hits fetches back ``verified``.

Client and server share the machine, so the latencies include the client's
own JSON and pydantic work competing for the same cores. The section it writes
into ``--out`` sits between markers that ``evals.bench_bm25`` carries over.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evals.bench_util import reusable_cache, verdict
from evals.machine import REPO_ROOT, command_line, machine_lines, markdown_table, write_section
from evals.stats import percentile
from evals.synthetic import BENCH_CHUNKING, SyntheticSpec, generate, write_corpus
from groundkit import Collection

_CACHE_VERSION = 1
_SECTION = "bench-serve"


@dataclass(frozen=True)
class Prepared:
    index: Path
    base: Path
    queries: list[str]
    chunks: int


async def _prepare(workdir: Path, chunks: int, fresh: bool) -> Prepared:
    spec = SyntheticSpec(passages=chunks)
    fingerprint = f"{_CACHE_VERSION}:{spec.fingerprint()}"
    meta_path = workdir / "meta.json"
    base, index = workdir / "base", workdir / "index"
    if not fresh and (meta := reusable_cache(meta_path, fingerprint, index)) is not None:
        return Prepared(index, base, meta["queries"], meta["chunks"])
    shutil.rmtree(workdir, ignore_errors=True)
    corpus = generate(spec, queries=200)
    write_corpus(corpus, base / "corpus", check=False)
    started = time.perf_counter()
    async with Collection.open(index, "bench", base_dir=base, chunking=BENCH_CHUNKING) as col:
        report = await col.ingest(base / "corpus")
        stored = await col.store.chunk_count()
    if report.failed:
        raise SystemExit(f"ingest failed for {len(report.failed)} files")
    print(f"ingested {stored} chunks in {time.perf_counter() - started:.1f} s", flush=True)
    meta = {"fingerprint": fingerprint, "queries": corpus.queries, "chunks": stored}
    meta_path.write_text(json.dumps(meta), encoding="utf-8")
    return Prepared(index, base, corpus.queries, stored)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


async def _start_server(prepared: Prepared, port: int, log: Path) -> asyncio.subprocess.Process:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "LANCEDB_LOG": "error"}
    with log.open("wb") as sink:
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            *("-m", "groundkit.cli", "serve", "--transport", "http", "--port", str(port)),
            *("--index-dir", str(prepared.index), "--base-dir", str(prepared.base), "-q"),
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=sink,
            stderr=sink,
        )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.returncode is not None:
            raise SystemExit(f"grk serve exited: {log.read_text(encoding='utf-8')}")
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return proc
        await asyncio.sleep(0.1)
    proc.terminate()
    raise SystemExit("grk serve did not start listening within 60 s")


@dataclass
class Round:
    latencies_ms: list[float]
    errors: list[str]
    wall_s: float
    server_cpu_s: float
    client_cpu_s: float


def _cpu_seconds(pid: int) -> float:
    """User + system CPU time of process ``pid`` (Linux /proc), in seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text(encoding="utf-8").rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def _search(client: Any, query: str, top_k: int) -> tuple[float, str | None, Any]:
    started = time.perf_counter()
    try:
        result = await client.call_tool(
            "search", {"query": query, "collection": "bench", "top_k": top_k}
        )
    except Exception as exc:
        return (time.perf_counter() - started) * 1000, f"{type(exc).__name__}: {exc}", None
    elapsed = (time.perf_counter() - started) * 1000
    if result.is_error:
        return elapsed, f"tool error: {result.content[0].text}", None
    return elapsed, None, result.structured_content


async def _run(args: argparse.Namespace) -> int:
    from mcp import Client

    prepared = await _prepare(args.workdir, args.chunks, args.fresh)
    port = _free_port()
    url = f"http://127.0.0.1:{port}/mcp"
    server = await _start_server(prepared, port, args.workdir / "serve.log")
    rounds: list[Round] = []
    verified = sampled = 0
    try:
        async with contextlib.AsyncExitStack() as stack:
            clients = [await stack.enter_async_context(Client(url)) for _ in range(args.sessions)]
            # Warm-up: opens the collection and builds its BM25 index once.
            for i, client in enumerate(clients):
                _, error, _ = await _search(client, prepared.queries[i], args.top_k)
                if error:
                    raise SystemExit(f"warm-up failed: {error}")
            sample: list[str] = []
            for r in range(args.rounds):
                queries = [
                    prepared.queries[(r * args.concurrency + i) % len(prepared.queries)]
                    for i in range(args.concurrency)
                ]
                server_cpu, client_cpu = _cpu_seconds(server.pid), time.process_time()
                started = time.perf_counter()
                outcomes = await asyncio.gather(
                    *(
                        _search(clients[i % len(clients)], q, args.top_k)
                        for i, q in enumerate(queries)
                    )
                )
                wall = time.perf_counter() - started
                rounds.append(
                    Round(
                        latencies_ms=[ms for ms, _, _ in outcomes],
                        errors=[e for _, e, _ in outcomes if e],
                        wall_s=wall,
                        server_cpu_s=_cpu_seconds(server.pid) - server_cpu,
                        client_cpu_s=time.process_time() - client_cpu,
                    )
                )
                for _, error, content in outcomes[:: max(1, args.concurrency // 10)]:
                    if error is None and content["results"]:
                        sample.append(content["results"][0]["citation"]["chunk_id"])
                print(
                    f"round {r + 1}: {args.concurrency} searches in {wall:.2f} s, "
                    f"{len(rounds[-1].errors)} errors",
                    flush=True,
                )
            for chunk_id in sample:
                fetched = await clients[0].call_tool(
                    "fetch_chunk", {"chunk_id": chunk_id, "collection": "bench"}
                )
                if (
                    not fetched.is_error
                    and fetched.structured_content["verification"] == "verified"
                ):
                    verified += 1
            sampled = len(sample)
    finally:
        if server.returncode is None:
            server.terminate()
        await asyncio.wait_for(server.wait(), 30)

    errors = [e for rnd in rounds for e in rnd.errors]
    latencies = [ms for rnd in rounds for ms in rnd.latencies_ms]
    total = len(latencies)
    per_round = [
        [
            str(i),
            str(len(rnd.latencies_ms)),
            str(len(rnd.errors)),
            f"{percentile(rnd.latencies_ms, 50):.1f}",
            f"{percentile(rnd.latencies_ms, 95):.1f}",
            f"{max(rnd.latencies_ms):.1f}",
            f"{rnd.wall_s:.2f}",
            f"{len(rnd.latencies_ms) / rnd.wall_s:.0f}",
            f"{rnd.server_cpu_s * 1000 / len(rnd.latencies_ms):.2f}",
            f"{rnd.client_cpu_s * 1000 / len(rnd.latencies_ms):.2f}",
        ]
        for i, rnd in enumerate(rounds, start=1)
    ]
    table = markdown_table(
        [
            "round",
            "searches",
            "errors",
            "p50 ms",
            "p95 ms",
            "max ms",
            "wall s",
            "searches/s",
            "server CPU ms/search",
            "client CPU ms/search",
        ],
        per_round,
    )
    p50, p95 = percentile(latencies, 50), percentile(latencies, 95)
    ok = not errors and verified == sampled
    summary = (
        f"{total} searches, {len(errors)} errors; p50 {p50:.1f} ms, p95 {p95:.1f} ms, "
        f"mean {statistics.fmean(latencies):.1f} ms; sampled citations verified {verified}/"
        f"{sampled}"
    )
    print(summary)
    for error in errors[:5]:
        print("  error:", error)
    lines = [
        "## MCP server under load (streamable HTTP)",
        "",
        "Generated by `evals/bench_serve.py`; do not edit by hand.",
        "",
        f"Command: `{command_line()}`",
        "",
        f"`grk serve --transport http` in its own process, one collection of "
        f"{prepared.chunks:,} synthetic chunks (`evals.synthetic`, one chunk per passage). "
        f"The SDK's own client opens {args.sessions} sessions; each round starts "
        f"{args.concurrency} `search` calls (BM25, top_k={args.top_k}) at once, spread over "
        "the sessions, and times each from send to parsed result. Client and server share the "
        "machine's cores, so these latencies include the client's own work and queueing "
        "behind the other calls in flight; a search inside the server costs well under a "
        "millisecond (docs/benchmarks.md above). *CPU ms/search* is each process's CPU time "
        "over the round divided by the searches in it: where the time goes.",
        "",
        table,
        "",
        f"- all rounds: {summary}",
        f"- zero errors required: {verdict(not errors)}",
        "",
        "Machine:",
        "",
        *machine_lines(),
    ]
    write_section(args.out, _SECTION, lines)
    print(f"wrote section {_SECTION!r} of {args.out}")
    return 0 if ok else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m evals.bench_serve", description=__doc__)
    parser.add_argument("--chunks", type=int, default=10_000)
    parser.add_argument("--concurrency", type=int, default=200)
    parser.add_argument("--sessions", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--top-k", type=int, default=10)
    parser.add_argument("--fresh", action="store_true", help="rebuild the cached collection")
    parser.add_argument("--workdir", type=Path, default=REPO_ROOT / "evals" / "out" / "bench_serve")
    parser.add_argument("--out", type=Path, default=REPO_ROOT / "docs" / "benchmarks.md")
    args = parser.parse_args(argv)
    return asyncio.run(_run(args))


if __name__ == "__main__":
    raise SystemExit(main())
