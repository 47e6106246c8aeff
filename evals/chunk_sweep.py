"""Chunk budget sweep on SciFact, plus tokenisation reference runs.

    python -m evals.chunk_sweep [--data DIR] [--budgets 400,800,1200,1600,2400,4000]
                                [--limit-queries N] [--no-reference] [--out FILE]

For each ``max_chars`` (overlap = budget // 8) the SciFact BM25 evaluation is run
through groundkit, documents ranked by their best chunk. A final row keeps
every document whole (one chunk per abstract). The reference section compares
analyzer variants and bm25s at document level, to explain gaps to the published
bm25s figure.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from collections.abc import Callable
from pathlib import Path

from evals.beir import DEFAULT_MEASURES, BeirDataset, RunResult, document_text, load_beir, run_bm25
from evals.machine import command_line, default_scifact_dir, machine_lines, markdown_table
from evals.metrics import Report, evaluate, paired_randomization_test
from evals.plots import plot_chunk_sweep
from groundkit import AnalyzerConfig, ChunkingConfig
from groundkit.lexical import Analyzer

__all__ = ["bm25s_document_run", "main", "plot_link"]

# Longer than any SciFact abstract (the longest is ~10k characters).
WHOLE_DOCUMENT = 20_000
Tokenizer = Callable[[list[str]], list[list[str]]]


def _analyzer_tokenizer(config: AnalyzerConfig) -> Tokenizer:
    analyzer = Analyzer(config)
    return lambda texts: [analyzer.terms(t) for t in texts]


def _bm25s_tokenizer() -> Tokenizer:
    import bm25s
    import Stemmer

    stemmer = Stemmer.Stemmer("english")

    def tokenize(texts: list[str]) -> list[list[str]]:
        out = bm25s.tokenize(
            texts, stopwords="en", stemmer=stemmer, return_ids=False, show_progress=False
        )
        return [list(doc) for doc in out]

    return tokenize


def bm25s_document_run(
    dataset: BeirDataset, tokenize: Tokenizer, limit_queries: int | None = None
) -> Report:
    """bm25s (Lucene BM25, k1=1.5, b=0.75) over whole documents with ``tokenize``."""
    import bm25s

    ids = list(dataset.corpus)
    texts = [document_text(*dataset.corpus[i]) for i in ids]
    retriever = bm25s.BM25(k1=1.5, b=0.75, method="lucene")
    retriever.index(tokenize(texts), show_progress=False)
    queries = dataset.judged_queries(limit_queries)
    rankings: dict[str, list[str]] = {}
    for qid, tokens in zip(queries, tokenize(list(queries.values())), strict=True):
        if not any(t in retriever.vocab_dict for t in tokens):
            rankings[qid] = []
            continue
        docs, scores = retriever.retrieve([tokens], k=100, show_progress=False, n_threads=1)
        rankings[qid] = [ids[int(d)] for d, s in zip(docs[0], scores[0], strict=True) if s > 0]
    return evaluate({q: dataset.qrels[q] for q in queries}, rankings, DEFAULT_MEASURES)


def _versus(report: Report, baseline: Report | None) -> list[str]:
    """Δ nDCG@10 against ``baseline`` and the paired randomization p-value."""
    if baseline is None:
        return ["–", "–"]
    queries = sorted(baseline.per_query)
    ours = [report.per_query[q]["ndcg@10"] for q in queries]
    theirs = [baseline.per_query[q]["ndcg@10"] for q in queries]
    delta = report.means["ndcg@10"] - baseline.means["ndcg@10"]
    p = paired_randomization_test(ours, theirs)
    return [f"{delta:+.4f}", "<0.001" if p < 0.001 else f"{p:.3f}"]


def _row(
    label: str, chunking: ChunkingConfig, result: RunResult, baseline: Report | None
) -> list[str]:
    m = result.report.means
    return [
        label,
        str(chunking.overlap_chars),
        str(result.chunks),
        f"{result.chunks / result.documents:.2f}",
        f"{m['ndcg@10']:.4f}",
        *_versus(result.report, baseline),
        f"{m['recall@100']:.4f}",
        f"{m['mrr@10']:.4f}",
        f"{m['map@100']:.4f}",
        f"{result.ingest_s:.1f}",
        f"{result.p50_ms:.1f}",
        f"{result.verified}/{result.verified + result.verify_failed}",
    ]


def _report_row(label: str, report: Report, baseline: Report | None) -> list[str]:
    m = report.means
    return [
        label,
        f"{m['ndcg@10']:.4f}",
        *_versus(report, baseline),
        f"{m['recall@100']:.4f}",
        f"{m['mrr@10']:.4f}",
    ]


def plot_link(path: str) -> str:
    """The page's line showing the plot, ``path`` relative to the page."""
    return f"![nDCG@10 against max_chars, the whole-document run as a reference line]({path})"


SWEEP_HEADER = [
    "max_chars",
    "overlap",
    "chunks",
    "chunks/doc",
    "nDCG@10",
    "Δ vs whole doc",
    "p",
    "Recall@100",
    "MRR@10",
    "MAP@100",
    "ingest s",
    "p50 ms (top_k chunks)",
    "citations ok",
]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m evals.chunk_sweep", description=__doc__)
    parser.add_argument("--data", type=Path, default=default_scifact_dir())
    parser.add_argument("--budgets", default="400,800,1200,1600,2400,4000")
    parser.add_argument("--limit-queries", type=int, default=None)
    parser.add_argument("--no-reference", action="store_true", help="skip the reference runs")
    parser.add_argument("--out", type=Path, default=None, help="write a Markdown report here")
    args = parser.parse_args(argv)

    dataset = load_beir(args.data)
    budgets = [int(b) for b in args.budgets.split(",") if b.strip()]
    runs: list[tuple[str, ChunkingConfig, RunResult]] = []
    started = time.perf_counter()
    for budget in [WHOLE_DOCUMENT, *budgets]:
        overlap = 0 if budget == WHOLE_DOCUMENT else budget // 8
        chunking = ChunkingConfig(max_chars=budget, overlap_chars=overlap)
        result = asyncio.run(run_bm25(dataset, chunking=chunking, limit_queries=args.limit_queries))
        label = "whole document" if budget == WHOLE_DOCUMENT else str(budget)
        runs.append((label, chunking, result))
        print(f"{label}: nDCG@10 {result.report.means['ndcg@10']:.4f}", flush=True)
    whole = runs[0][2].report
    rows = [_row(label, c, r, whole) for label, c, r in [*runs[1:], runs[0]]]
    sweep = markdown_table(SWEEP_HEADER, rows)

    reference = ""
    if not args.no_reference:
        ref_rows: list[list[str]] = []
        min2 = AnalyzerConfig(min_token_chars=2)
        for label, chunking, analyzer in [
            ("groundkit, default chunking, min_token_chars=2", ChunkingConfig(), min2),
            (
                "groundkit, whole document, min_token_chars=2",
                ChunkingConfig(max_chars=WHOLE_DOCUMENT, overlap_chars=0),
                min2,
            ),
        ]:
            result = asyncio.run(
                run_bm25(
                    dataset,
                    chunking=chunking,
                    analyzer=analyzer,
                    limit_queries=args.limit_queries,
                    latency_pass=False,
                )
            )
            ref_rows.append(_report_row(label, result.report, whole))
            print(" | ".join(ref_rows[-1]), flush=True)
        for label, tokenizer in [
            (
                "bm25s, whole document, groundkit Analyzer tokens",
                _analyzer_tokenizer(AnalyzerConfig()),
            ),
            ("bm25s, whole document, Analyzer min_token_chars=2", _analyzer_tokenizer(min2)),
            (
                "bm25s, whole document, bm25s tokenizer + PyStemmer + en stop words",
                _bm25s_tokenizer(),
            ),
        ]:
            report = bm25s_document_run(dataset, tokenizer, args.limit_queries)
            ref_rows.append(_report_row(label, report, whole))
            print(" | ".join(ref_rows[-1]), flush=True)
        reference = markdown_table(
            ["run", "nDCG@10", "Δ vs whole doc", "p", "Recall@100", "MRR@10"], ref_rows
        )

    print()
    print(sweep)
    if reference:
        print()
        print(reference)
    print(f"\n(total {time.perf_counter() - started:.0f} s)")
    if args.out is not None:
        png = args.out.parent / "img" / f"{args.out.stem}-ndcg.png"
        points = [(c.max_chars, r.report.means["ndcg@10"]) for _, c, r in runs[1:]]
        plot_chunk_sweep(points, whole.means["ndcg@10"], png)
        text = [
            "# SciFact chunk-budget sweep (BM25)",
            "",
            "Generated by `evals/chunk_sweep.py`; do not edit by hand.",
            "",
            f"Command: `{command_line()}`",
            "",
            "Documents ranked by their best chunk; overlap = max_chars // 8. Metrics are",
            "trec_eval-style means over the judged test queries. *Δ vs whole doc* compares",
            "nDCG@10 with the one-chunk-per-abstract run; *p* is a two-sided paired",
            "randomization test on per-query nDCG@10 (10,000 sign flips).",
            "",
            sweep,
            "",
            plot_link(f"{png.parent.name}/{png.name}"),
            "",
        ]
        if reference:
            text += ["Reference runs:", "", reference, ""]
        text += ["Machine:", "", *machine_lines(), ""]
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text("\n".join(text), encoding="utf-8")
        print(f"wrote {args.out} and {png}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
