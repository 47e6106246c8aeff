"""Every retrieval mode over one BEIR-format folder, through the real pipeline.

python -m evals.beir_run --data DIR [--modes bm25,dense,hybrid,hybrid+rerank]
                         [--reranker PATH] [--limit-queries N] [--out docs/quality.md]
                         [--record] [--check] [--no-echo]

The folder holds ``corpus.jsonl``, ``queries.jsonl`` and ``qrels/test.tsv``.
Each document is written as a file and the folder ingested once with
``groundkit.Collection`` (with the packaged all-MiniLM-L6-v2 when a dense mode
is asked for); every mode is then evaluated on that collection: nDCG@10,
Recall@100, MRR@10 and MAP@100 of documents ranked by their best chunk, query
latency, and the top ten cited spans read back. The citation echo
(``evals.echo``) runs on the same collection unless ``--no-echo``.

``--record`` writes the figures to ``evals/recorded.json``, which the CI guard
compares against; ``--check`` exits 1 when a mode falls more than 0.01 below
its recorded nDCG@10. ``--out`` writes a Markdown page and, beside it under
``img/``, a PNG of nDCG@10 per mode with published figures as reference lines.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from evals.beir import (
    DEFAULT_EMBEDDER,
    DEFAULT_MEASURES,
    BeirDataset,
    RunMode,
    Searcher,
    VerifyTally,
    chunk_top_k,
    ingest_dataset,
    load_beir,
    offline_models,
    parse_modes,
    rank_queries,
    search_args,
    time_queries,
    verify_results,
    work_dir,
)
from evals.echo import EchoReport, echo_collection
from evals.echo import summary_rows as echo_rows
from evals.machine import (
    REPO_ROOT,
    carried_sections,
    command_line,
    default_scifact_dir,
    machine_lines,
    markdown_table,
    source_state,
)
from evals.metrics import Report, evaluate
from evals.plots import plot_quality_ndcg
from evals.stats import percentile
from groundkit import (
    AnalyzerConfig,
    ChunkingConfig,
    CrossEncoderReranker,
    EmbeddingProtocol,
    RerankerProtocol,
    RetrievalConfig,
    SentenceTransformerEmbedder,
)

__all__ = [
    "ANCHORS",
    "RECORDED",
    "TOLERANCE",
    "BeirRun",
    "ModeResult",
    "evaluate_mode",
    "load_recorded",
    "main",
    "record",
    "regressions",
    "render",
    "run_modes",
    "write_plot",
]

RECORDED = REPO_ROOT / "evals" / "recorded.json"
# How far nDCG@10 may fall below the recorded figure before the guard fails.
TOLERANCE = 0.01
# Published nDCG@10 on each dataset's test split, drawn as reference lines.
# SciFact: as listed in shared/eval/scifact/README.md beside the data.
ANCHORS: dict[str, list[tuple[str, float]]] = {
    "scifact": [
        ("BM25, Elasticsearch (BEIR paper)", 0.665),
        ("BM25, Pyserini flat", 0.679),
        ("bm25s, Lucene k1=1.5 b=0.75, stemmed, stop words", 0.687),
        ("all-MiniLM-L6-v2 dense (MTEB)", 0.645),
        ("BM25 top-100 + ms-marco-MiniLM-L-6-v2 cross-encoder (BEIR paper)", 0.688),
        ("RRF k=60 of BM25 and BGE-base dense", 0.744),
    ],
}


@dataclass
class ModeResult:
    """One mode's quality, latency and citation check on the shared collection."""

    mode: RunMode
    report: Report
    top_k: int
    latencies_ms: list[float]
    latencies_k10_ms: list[float]
    short_queries: int
    citations: VerifyTally

    @property
    def ndcg10(self) -> float:
        return self.report.means["ndcg@10"]


@dataclass
class BeirRun:
    """A whole run: the ingest, each mode, and the echo."""

    name: str
    documents: int
    chunks: int
    queries: int
    ingest_s: float
    open_s: float
    embedder: str | None
    reranker: str | None
    rerank_depth: int
    modes: list[ModeResult]
    echo: EchoReport | None

    @property
    def ok(self) -> bool:
        """No citation failed, in the ranked results or in the echo."""
        return all(m.citations.failed == 0 for m in self.modes) and (
            self.echo is None or self.echo.ok
        )


async def evaluate_mode(
    searcher: Searcher,
    queries: Mapping[str, str],
    qrels: Mapping[str, Mapping[str, int]],
    mode: RunMode,
    *,
    top_k: int,
    base_dir: Path,
    depth: int = 100,
) -> ModeResult:
    """Rank documents for every query in ``mode``, time a top-10 pass, verify the top ten."""
    search_mode, rerank = search_args(mode)
    qpass = await rank_queries(
        searcher, queries, mode=search_mode, top_k=top_k, depth=depth, rerank=rerank
    )
    k10 = await time_queries(searcher, queries, mode=search_mode, rerank=rerank)
    tally = VerifyTally()
    for best in qpass.ranked.values():
        await verify_results(best[:10], base_dir, tally)
    return ModeResult(
        mode=mode,
        report=evaluate({q: qrels[q] for q in queries}, qpass.rankings, DEFAULT_MEASURES),
        top_k=top_k,
        latencies_ms=qpass.latencies_ms,
        latencies_k10_ms=k10,
        short_queries=qpass.short_queries,
        citations=tally,
    )


async def run_modes(
    dataset: BeirDataset,
    modes: Sequence[RunMode],
    *,
    name: str = "beir",
    embedder: EmbeddingProtocol | None = None,
    reranker: RerankerProtocol | None = None,
    limit_queries: int | None = None,
    depth: int = 100,
    rerank_depth: int = 100,
    echo: bool = True,
    echo_top_k: int = 10,
    workdir: Path | None = None,
) -> BeirRun:
    """Ingest ``dataset`` once and evaluate each of ``modes`` on it.

    Dense modes need ``embedder``; ``hybrid+rerank`` needs ``reranker`` and
    fetches ``rerank_depth`` chunks, all reordered by the cross-encoder (the
    other modes fetch enough chunks to rank ``depth`` documents).
    """
    dense = any(m != "bm25" for m in modes)
    if dense and embedder is None:
        raise ValueError("dense, hybrid and hybrid+rerank need an embedder")
    if "hybrid+rerank" in modes and reranker is None:
        raise ValueError("hybrid+rerank needs a reranker")
    embedder = embedder if dense else None
    with work_dir(workdir) as root:
        queries = dataset.judged_queries(limit_queries)
        retrieval = RetrievalConfig(rerank_depth=rerank_depth)
        results: list[ModeResult] = []
        echo_report: EchoReport | None = None
        async with ingest_dataset(
            dataset, root, retrieval=retrieval, embedder=embedder, reranker=reranker
        ) as ing:
            for mode in modes:
                top_k = (
                    rerank_depth
                    if mode == "hybrid+rerank"
                    else chunk_top_k(ing.chunks, ing.documents, depth)
                )
                result = await evaluate_mode(
                    ing.collection,
                    queries,
                    dataset.qrels,
                    mode,
                    top_k=top_k,
                    base_dir=ing.collection.base_dir,
                    depth=depth,
                )
                results.append(result)
                print(f"{name} {mode}: nDCG@10 {result.ndcg10:.4f}", flush=True)
            if echo:
                echo_report = await echo_collection(
                    ing.collection,
                    queries,
                    modes=modes,
                    tamper_dir=root / "tampered",
                    top_k=echo_top_k,
                )
    return BeirRun(
        name=name,
        documents=ing.documents,
        chunks=ing.chunks,
        queries=len(queries),
        ingest_s=ing.ingest_s,
        open_s=ing.open_s,
        embedder=embedder.model_name if embedder is not None else None,
        reranker=reranker.model_name if reranker is not None else None,
        rerank_depth=rerank_depth,
        modes=results,
        echo=echo_report,
    )


# --- recorded figures -----------------------------------------------------------------


def load_recorded(path: Path = RECORDED) -> dict[str, dict[str, dict[str, Any]]]:
    """``{dataset: {mode: {"ndcg@10": ..., ...}}}`` from the committed file (empty if none)."""
    if not path.exists():
        return {}
    data: dict[str, dict[str, dict[str, Any]]] = json.loads(path.read_text(encoding="utf-8"))
    return data


def record(run: BeirRun, path: Path = RECORDED) -> None:
    """Store this run's figures for its dataset, mode by mode; other entries stay."""
    data = load_recorded(path)
    entry = data.setdefault(run.name, {})
    stamp = {
        "queries": run.queries,
        "source": source_state(),
        "date": datetime.now(UTC).date().isoformat(),
    }
    for mode in run.modes:
        figures: dict[str, Any] = {k: round(v, 4) for k, v in mode.report.means.items()}
        entry[mode.mode] = {**figures, **stamp}
    path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n", encoding="utf-8")


def regressions(
    run: BeirRun,
    recorded: Mapping[str, Mapping[str, Mapping[str, Any]]],
    tolerance: float = TOLERANCE,
) -> list[str]:
    """Modes whose nDCG@10 fell more than ``tolerance`` below the recorded figure."""
    found: list[str] = []
    for mode in run.modes:
        figure = recorded.get(run.name, {}).get(mode.mode, {}).get("ndcg@10")
        if figure is not None and mode.ndcg10 < float(figure) - tolerance:
            found.append(
                f"{run.name} {mode.mode}: nDCG@10 {mode.ndcg10:.4f} is more than "
                f"{tolerance} below the recorded {float(figure):.4f}"
            )
    return found


# --- report and plot ------------------------------------------------------------------


def _ms(values: list[float]) -> str:
    return f"{percentile(values, 50):.1f} / {percentile(values, 95):.1f}"


def quality_rows(run: BeirRun) -> list[list[str]]:
    rows = []
    for r in run.modes:
        m = r.report.means
        rows.append(
            [
                r.mode,
                f"{m['ndcg@10']:.4f}",
                f"{m['recall@100']:.4f}",
                f"{m['mrr@10']:.4f}",
                f"{m['map@100']:.4f}",
                str(r.top_k),
                _ms(r.latencies_ms),
                _ms(r.latencies_k10_ms),
                f"{r.citations.verified}/{r.citations.verified + r.citations.failed}",
            ]
        )
    return rows


QUALITY_HEADER = [
    "mode",
    "nDCG@10",
    "Recall@100",
    "MRR@10",
    "MAP@100",
    "chunks fetched",
    "p50 / p95 ms at that depth",
    "p50 / p95 ms at top_k=10",
    "top-10 citations verified",
]


def _recorded_rows(
    run: BeirRun, recorded: Mapping[str, Mapping[str, Mapping[str, Any]]]
) -> list[list[str]]:
    rows = []
    for r in run.modes:
        entry = recorded.get(run.name, {}).get(r.mode)
        if entry is None:
            rows.append([r.mode, f"{r.ndcg10:.4f}", "not recorded", "–"])
            continue
        floor = float(entry["ndcg@10"]) - TOLERANCE
        verdict = "holds" if r.ndcg10 >= floor else "**below the floor**"
        rows.append([r.mode, f"{r.ndcg10:.4f}", f"{float(entry['ndcg@10']):.4f}", verdict])
    return rows


def render(
    run: BeirRun,
    *,
    recorded: Mapping[str, Mapping[str, Mapping[str, Any]]],
    plot: str | None,
) -> str:
    """The Markdown page for one run; ``plot`` is the image path relative to the page."""
    chunking, analyzer, retrieval = ChunkingConfig(), AnalyzerConfig(), RetrievalConfig()
    anchors = ANCHORS.get(run.name, [])
    lines = [
        f"# Retrieval quality: {run.name}",
        "",
        "Generated by `evals/beir_run.py`; do not edit by hand.",
        "",
        f"Command: `{command_line()}`",
        "",
        f"{run.documents} documents, each written as one file (title, blank line, text) and",
        f"ingested once with `groundkit.Collection` into {run.chunks} chunks",
        f"(`max_chars={chunking.max_chars}`, `overlap_chars={chunking.overlap_chars}`;",
        f"`{analyzer!r}`; BM25 k1={retrieval.bm25_k1}, b={retrieval.bm25_b}).",
        f"Embedder: {f'`{run.embedder}` (packaged copy, CPU)' if run.embedder else 'none'}.",
        "Every mode searches that one collection with the default `RetrievalConfig`",
        f"(hybrid: {retrieval.hybrid_fusion} fusion, BM25 weight {retrieval.hybrid_bm25_weight},"
        f" max(top_k, {retrieval.hybrid_candidates}) candidates from each side).",
        "Documents are ranked by their best chunk out of the chunks fetched; metrics are",
        f"trec_eval-style means over {run.queries} judged test queries (linear-gain nDCG).",
        "Latency is per `search` call, query embedding included; the top ten ranked",
        "documents' cited spans are read back with `check_citation`.",
        "",
        markdown_table(QUALITY_HEADER, quality_rows(run)),
        "",
    ]
    shallow = [f"{r.mode} {r.short_queries}" for r in run.modes if r.short_queries]
    if shallow:
        lines += [
            "Queries whose fetched chunks held fewer than 100 distinct documents: "
            + ", ".join(shallow)
            + ".",
            "",
        ]
    if plot is not None:
        lines += [f"![nDCG@10 per mode against published figures]({plot})", ""]
    if "hybrid+rerank" not in {r.mode for r in run.modes}:
        lines += [
            "**hybrid+rerank is not measured**: this run had no `--reranker`, and no trained",
            "cross-encoder weights are available offline where these figures were taken. The",
            "mode runs with `--reranker PATH`; the tests exercise it end to end with a tiny",
            "randomly initialised cross-encoder, which checks the plumbing, not ranking quality.",
            "",
        ]
    else:
        lines += [
            f"hybrid+rerank: `{run.reranker}` reorders the best {run.rerank_depth} hybrid chunks",
            "(its Recall@100 counts the documents among those chunks).",
            "",
        ]
    if anchors:
        lines += [
            "Published figures on the same split, for reference (drawn as lines in the plot;",
            "different systems and set-ups, not run here):",
            "",
            markdown_table(["system", "nDCG@10"], [[a, f"{v:.3f}"] for a, v in anchors]),
            "",
        ]
    lines += [
        "## Ingest",
        "",
        markdown_table(
            ["measure", "value"],
            [
                ["documents / chunks", f"{run.documents} / {run.chunks}"],
                [
                    "ingest (read, chunk, analyse"
                    + (", embed" if run.embedder else "")
                    + ", store)",
                    f"{run.ingest_s:.1f} s",
                ],
                ["first `Retriever` open after ingest", f"{run.open_s * 1000:.0f} ms"],
            ],
        ),
        "",
        "## Regression guard",
        "",
        "`evals/recorded.json` holds the figures recorded with `--record`; CI fails when",
        f"nDCG@10 falls more than {TOLERANCE} below them (`tests/evals/test_quality_guard.py`).",
        "",
        markdown_table(["mode", "nDCG@10 now", "recorded", "guard"], _recorded_rows(run, recorded)),
        "",
    ]
    if run.echo is not None:
        lines += [
            "## Citation echo",
            "",
            f"Every result of the top {run.echo.top_k} per query, in every mode above: its",
            "citation must resolve to exactly its content, and `fetch_chunk` must say `verified`",
            "(positive); then each cited file is copied with one character replaced inside every",
            "cited span, and the same citation checked against the copy must come back drifted,",
            "from `check_citation` and from `fetch_chunk` of the index opened on the copy",
            "(negative). Any failure is a bug.",
            "",
            markdown_table(["citation echo", "count"], echo_rows(run.echo)),
            "",
        ]
        if run.echo.failures:
            lines += ["Echo failures (first few):", ""]
            lines += [f"- {f}" for f in run.echo.failures]
            lines.append("")
    failed = [e for r in run.modes for e in r.citations.errors]
    if failed:
        lines += ["Citation failures in the ranked results (first few):", ""]
        lines += [f"- {e}" for e in failed]
        lines.append("")
    lines += ["Machine:", "", *machine_lines(), ""]
    return "\n".join(lines)


def write_plot(run: BeirRun, path: Path) -> None:
    """Bars of nDCG@10 per mode, with the dataset's published figures as reference lines."""
    modes = [(r.mode, r.ndcg10) for r in run.modes]
    plot_quality_ndcg(run.name, run.queries, modes, ANCHORS.get(run.name, []), path)


# --- command line ---------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    offline_models()
    parser = argparse.ArgumentParser(prog="python -m evals.beir_run", description=__doc__)
    parser.add_argument("--data", type=Path, default=default_scifact_dir())
    parser.add_argument("--name", default=None, help="dataset name (default: the folder's)")
    parser.add_argument(
        "--modes", default=None, help="comma-separated (default: bm25,dense,hybrid)"
    )
    parser.add_argument("--reranker", default=None, help="cross-encoder path for hybrid+rerank")
    parser.add_argument("--rerank-depth", type=int, default=100)
    parser.add_argument("--rerank-max-length", type=int, default=None)
    parser.add_argument("--embedder", default=DEFAULT_EMBEDDER)
    parser.add_argument("--limit-queries", type=int, default=None)
    parser.add_argument("--echo-top-k", type=int, default=10)
    parser.add_argument("--no-echo", action="store_true", help="skip the citation echo")
    parser.add_argument("--out", type=Path, default=None, help="write the Markdown page here")
    parser.add_argument("--plot", type=Path, default=None, help="PNG (default: img/ beside --out)")
    parser.add_argument("--record", action="store_true", help="write the figures as recorded")
    parser.add_argument("--recorded-file", type=Path, default=RECORDED)
    parser.add_argument("--check", action="store_true", help="exit 1 below recorded - 0.01")
    args = parser.parse_args(argv)

    try:
        modes = parse_modes(args.modes) if args.modes else parse_modes("bm25,dense,hybrid")
    except ValueError as exc:
        parser.error(str(exc))
    if args.reranker and args.modes is None:
        modes.append("hybrid+rerank")
    if "hybrid+rerank" in modes and not args.reranker:
        parser.error("hybrid+rerank needs --reranker PATH (a local cross-encoder)")
    if args.record and args.limit_queries is not None:
        parser.error("--record keeps figures over the whole query set; drop --limit-queries")
    dense = any(m != "bm25" for m in modes)
    embedder = SentenceTransformerEmbedder(args.embedder) if dense else None
    reranker = (
        CrossEncoderReranker(args.reranker, max_length=args.rerank_max_length)
        if args.reranker and "hybrid+rerank" in modes
        else None
    )
    name = args.name or args.data.resolve().name
    run = asyncio.run(
        run_modes(
            load_beir(args.data),
            modes,
            name=name,
            embedder=embedder,
            reranker=reranker,
            limit_queries=args.limit_queries,
            rerank_depth=args.rerank_depth,
            echo=not args.no_echo,
            echo_top_k=args.echo_top_k,
        )
    )
    print(markdown_table(QUALITY_HEADER, quality_rows(run)))
    if run.echo is not None:
        print(markdown_table(["citation echo", "count"], echo_rows(run.echo)))
        for failure in run.echo.failures:
            print(f"ECHO FAIL {failure}")
    for mode in run.modes:
        for error in mode.citations.errors:
            print(f"CITATION FAIL {mode.mode}: {error}")
    recorded = load_recorded(args.recorded_file)
    problems = regressions(run, recorded)
    for problem in problems:
        print(f"REGRESSION {problem}")
    if args.record:
        record(run, args.recorded_file)
        recorded = load_recorded(args.recorded_file)
        print(f"recorded {', '.join(m.mode for m in run.modes)} in {args.recorded_file}")
    if args.out is not None:
        plot = args.plot or args.out.parent / "img" / f"{args.out.stem}-ndcg.png"
        write_plot(run, plot)
        rel = os.path.relpath(plot, args.out.parent)
        args.out.parent.mkdir(parents=True, exist_ok=True)
        # Sections other evaluations wrote into the page (evidence) are kept.
        page = render(run, recorded=recorded, plot=Path(rel).as_posix()).rstrip("\n") + "\n"
        args.out.write_text(page + carried_sections(args.out), encoding="utf-8")
        print(f"wrote {args.out} and {plot}")
    if not run.ok:
        print("citation checks FAILED: see the failures above")
        return 1
    return 1 if args.check and problems else 0


if __name__ == "__main__":
    raise SystemExit(main())
