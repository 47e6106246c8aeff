"""Citation echo: each result's citation must lead back to exactly its content.

python -m evals.echo [--data DIR] [--limit-queries N] [--top-k 10] [--modes bm25,hybrid]

Two checks over every result of every query, per mode:

* positive: ``resolve_citation`` on the real source returns the result's
  content exactly, and ``Collection.fetch_chunk`` of its chunk says
  ``verified`` with the same content and citation;
* negative: every cited file is copied with one character replaced inside each
  cited span (by another single character, so the text keeps its length and
  the comparison itself is what has to notice); ``check_citation`` against
  the copy must answer drifted, and so must ``fetch_chunk`` of the same index
  opened with the copy as its base directory.

A citation that failed either check would let an application quote text its
source does not hold, so any failure is a bug and the command exits 1.
Without ``--modes`` it checks bm25, and hybrid too when the packaged
all-MiniLM-L6-v2 can be loaded offline.
"""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from evals.beir import (
    DEFAULT_EMBEDDER,
    BeirDataset,
    RunMode,
    ingest_dataset,
    load_beir,
    local_embedder_available,
    offline_models,
    parse_modes,
    search_args,
    work_dir,
)
from evals.machine import default_scifact_dir, markdown_table
from groundkit import (
    Collection,
    EmbeddingProtocol,
    RetrievalError,
    RetrievalResult,
    SentenceTransformerEmbedder,
    check_citation,
    resolve_citation,
)
from groundkit.storage import SQLiteMetadataStore

__all__ = [
    "EchoReport",
    "default_echo_modes",
    "echo_collection",
    "main",
    "run_echo",
    "summary_rows",
    "tamper_copy",
]

# Failures beyond this many are counted but not described.
_KEEP_FAILURES = 20


@dataclass
class EchoReport:
    """Counts from one echo: results checked, and how many passed each side."""

    queries: int
    modes: tuple[RunMode, ...]
    top_k: int
    results: int = 0
    echoed: int = 0
    drift_detected: int = 0
    tampered_files: int = 0
    tampered_spans: int = 0
    per_mode: dict[str, int] = field(default_factory=dict)
    failure_count: int = 0
    failures: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """Something was checked, and every result passed both sides."""
        return (
            self.results > 0
            and self.failure_count == 0
            and self.echoed == self.results
            and self.drift_detected == self.results
        )

    def fail(self, message: str) -> None:
        self.failure_count += 1
        if len(self.failures) < _KEEP_FAILURES:
            self.failures.append(message)


def _label(result: RetrievalResult) -> str:
    return f"{result.source}[{result.start_offset}:{result.end_offset}]"


def _relative_parts(source: str) -> tuple[str, ...]:
    """A cited source as path parts under a base; refuses anything that could leave it."""
    path = PurePosixPath(source)
    if path.is_absolute() or ".." in path.parts or not path.parts:
        raise ValueError(f"cited source {source!r} is not a plain relative path")
    return path.parts


def tamper_copy(base: Path, results: Iterable[RetrievalResult], dest: Path) -> tuple[int, int]:
    """Copy every cited text file from ``base`` to ``dest``, one character changed per span.

    The character at the middle of each distinct span is swapped for ``x`` (or
    ``y`` where it already was ``x``); each position is changed once, from the
    original, so overlapping spans cannot undo each other's change. Returns
    ``(files, spans)`` written.
    """
    marks: dict[str, set[int]] = {}
    spans: set[tuple[str, int, int]] = set()
    for result in results:
        if result.source_class != "text":
            continue
        key = (result.source, result.start_offset, result.end_offset)
        if key in spans:
            continue
        spans.add(key)
        # end > start for every stored chunk, so the midpoint lies inside the span.
        marks.setdefault(result.source, set()).add((result.start_offset + result.end_offset) // 2)
    for source, positions in marks.items():
        parts = _relative_parts(source)
        chars = list(base.joinpath(*parts).read_bytes().decode("utf-8"))
        for i in positions:
            chars[i] = "y" if chars[i] == "x" else "x"
        target = dest.joinpath(*parts)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes("".join(chars).encode("utf-8"))
    return len(marks), len(spans)


async def _echoes(collection: Collection, result: RetrievalResult, report: EchoReport) -> bool:
    label = _label(result)
    try:
        span = await resolve_citation(
            result.citation, collection.base_dir, snapshot_dir=collection.snapshot_dir
        )
    except RetrievalError as exc:
        report.fail(f"{label}: citation did not resolve ({exc.verdict}): {exc}")
        return False
    if span != result.content:
        report.fail(f"{label}: the source holds other text at the cited offsets")
        return False
    fetched = await collection.fetch_chunk(result.chunk_id)
    if fetched.verification != "verified":
        report.fail(f"{label}: fetch_chunk says {fetched.verification}: {fetched.detail}")
        return False
    if fetched.content != result.content or fetched.citation != result.citation:
        report.fail(f"{label}: fetch_chunk returned another content or citation")
        return False
    return True


async def _drift_caught(result: RetrievalResult, tampered: Collection, report: EchoReport) -> bool:
    label = _label(result)
    if result.source_class != "text":
        report.fail(f"{label}: a {result.source_class!r} source cannot be tampered with here")
        return False
    checked = await check_citation(result.citation, result.content, tampered.base_dir)
    if checked.ok:
        report.fail(f"{label}: a changed character inside the span went unnoticed")
        return False
    if checked.verification != "drifted":
        report.fail(
            f"{label}: the tampered copy gave {checked.verification!r}, not drifted: "
            f"{checked.detail}"
        )
        return False
    fetched = await tampered.fetch_chunk(result.chunk_id)
    if fetched.verification != "drifted":
        report.fail(f"{label}: fetch_chunk against the tampered copy says {fetched.verification}")
        return False
    return True


async def echo_collection(
    collection: Collection,
    queries: Mapping[str, str],
    *,
    modes: Sequence[RunMode],
    tamper_dir: Path,
    top_k: int = 10,
) -> EchoReport:
    """Search every query in every mode and check each result both ways.

    ``tamper_dir`` receives the tampered copies; it must not be the base directory.
    """
    if tamper_dir.resolve() == collection.base_dir.resolve():
        raise ValueError("the tampered copy must not overwrite the collection's sources")
    report = EchoReport(queries=len(queries), modes=tuple(modes), top_k=top_k)
    checked: list[RetrievalResult] = []
    for mode in modes:
        search_mode, rerank = search_args(mode)
        report.per_mode[mode] = 0
        for text in queries.values():
            response = await collection.search(text, top_k, mode=search_mode, rerank=rerank)
            for result in response.results:
                report.results += 1
                report.per_mode[mode] += 1
                if await _echoes(collection, result, report):
                    report.echoed += 1
                checked.append(result)
    report.tampered_files, report.tampered_spans = await asyncio.to_thread(
        tamper_copy, collection.base_dir, checked, tamper_dir
    )
    # The same index read against the tampered copy: what an application would be told.
    assert isinstance(collection.store, SQLiteMetadataStore)
    async with Collection.open(
        collection.store.path.parent, collection.name, base_dir=tamper_dir
    ) as tampered:
        for result in checked:
            if await _drift_caught(result, tampered, report):
                report.drift_detected += 1
    return report


def default_echo_modes() -> list[RunMode]:
    """bm25, plus hybrid when the packaged embedding model is installed."""
    return ["bm25", "hybrid"] if local_embedder_available() else ["bm25"]


async def run_echo(
    dataset: BeirDataset,
    *,
    modes: Sequence[RunMode] | None = None,
    limit_queries: int | None = None,
    top_k: int = 10,
    embedder: EmbeddingProtocol | None = None,
    workdir: Path | None = None,
) -> EchoReport:
    """Ingest ``dataset`` as files into a fresh collection and echo its judged queries.

    Dense modes embed with ``embedder``, by default the packaged all-MiniLM-L6-v2.
    """
    picked = list(modes) if modes is not None else default_echo_modes()
    if "hybrid+rerank" in picked:
        raise ValueError("the echo command has no reranker; use evals.beir_run --reranker")
    dense = any(m != "bm25" for m in picked)
    if dense and embedder is None:
        embedder = SentenceTransformerEmbedder(DEFAULT_EMBEDDER)
    queries = dataset.judged_queries(limit_queries)
    with work_dir(workdir, "groundkit-echo-") as root:
        async with ingest_dataset(dataset, root, embedder=embedder if dense else None) as ing:
            return await echo_collection(
                ing.collection, queries, modes=picked, tamper_dir=root / "tampered", top_k=top_k
            )


def summary_rows(report: EchoReport) -> list[list[str]]:
    """``[name, value]`` rows for a Markdown table of one echo."""
    per_mode = ", ".join(f"{mode} {count}" for mode, count in report.per_mode.items())
    return [
        ["queries", str(report.queries)],
        ["results checked (top_k per query)", f"{report.results} ({report.top_k}): {per_mode}"],
        ["citation resolves to the exact content (positive)", f"{report.echoed}"],
        ["tampered span reported as drifted (negative)", f"{report.drift_detected}"],
        [
            "tampered copies written",
            f"{report.tampered_files} files, {report.tampered_spans} spans",
        ],
        ["failures", str(report.failure_count)],
    ]


def main(argv: list[str] | None = None) -> int:
    offline_models()
    parser = argparse.ArgumentParser(prog="python -m evals.echo", description=__doc__)
    parser.add_argument("--data", type=Path, default=default_scifact_dir())
    parser.add_argument("--limit-queries", type=int, default=None)
    parser.add_argument("--top-k", type=int, default=10)
    parser.add_argument("--modes", default=None, help="bm25, dense, hybrid (comma-separated)")
    args = parser.parse_args(argv)
    try:
        modes = parse_modes(args.modes) if args.modes is not None else default_echo_modes()
    except ValueError as exc:
        parser.error(str(exc))
    if "hybrid+rerank" in modes:
        parser.error("hybrid+rerank needs a reranker: run python -m evals.beir_run --reranker")
    report = asyncio.run(
        run_echo(
            load_beir(args.data), modes=modes, limit_queries=args.limit_queries, top_k=args.top_k
        )
    )
    print(markdown_table(["citation echo", "count"], summary_rows(report)))
    for failure in report.failures:
        print(f"FAIL {failure}")
    if not report.ok:
        print("citation echo FAILED: every failure above is a bug")
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
