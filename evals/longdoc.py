"""Retrieval over long documents: abstracts concatenated into Markdown files, scored by span.

    python -m evals.longdoc --data DIR [--docs-per-file N] [--seed S]
                            [--modes bm25,dense,hybrid] [--configs fixed,structure,...]
                            [--out docs/quality-longdoc.md] [--json FILE]

``DIR`` is any BEIR-format folder. Its documents are shuffled with ``--seed`` and
written ``N`` to a file, each under a ``## <title>`` heading, so a relevant passage
is one section of a long file, as in a handbook or a report. The folder is
ingested with ``groundkit.Collection`` once per chunker configuration
(``CONFIGS``), and every judged query is searched in each mode, plain and with
the search-time steps the configuration lists (passages, MMR, reordering, query
variants from a glossary of the corpus's own abbreviations).

Scoring is at the span level. The chunks come back in rank order; a chunk is
relevant when it overlaps the section of a relevant abstract that no earlier
chunk already covered (each abstract counts once, at its best chunk), so nDCG@10
and Recall@100 are taken over the chunk ranking. *Citation precision* is the share
of the top ten chunks' characters that lie inside a relevant abstract's section:
what a reader of the cited spans is actually shown. With ``expand`` the
citation is still the small chunk; *context precision* is the same share over
the passages returned around the top ten.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import tempfile
import time
from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from evals.beir import BeirDataset, load_beir, offline_models
from evals.glossary import abbreviation_glossary
from evals.machine import command_line, default_scifact_dir, machine_lines, markdown_table
from evals.metrics import evaluate
from groundkit import (
    ChunkingConfig,
    Collection,
    EmbeddingProtocol,
    GlossaryRewriter,
    RetrievalResult,
    SearchMode,
    SentenceTransformerEmbedder,
)

__all__ = ["CONFIGS", "LongCorpus", "build_corpus", "main", "score_query"]

# Chunks fetched per query: enough for 100 distinct abstracts in all but a few queries.
FETCH = 300


@dataclass(frozen=True)
class Variant:
    """A search-time step run on top of a configuration's plain searches."""

    label: str
    options: dict[str, Any]
    modes: tuple[SearchMode, ...] | None = None  # None: every mode of the run


@dataclass(frozen=True)
class Setup:
    """One chunker configuration (one ingest) and the variants searched on it."""

    label: str
    chunking: ChunkingConfig
    variants: tuple[Variant, ...] = field(default=())
    # Search with a GlossaryRewriter of the corpus's own abbreviations (evals/glossary.py).
    glossary: bool = False


_BM25: tuple[SearchMode, ...] = ("bm25",)
CONFIGS: dict[str, Setup] = {
    "fixed": Setup("fixed 1600 (overlap 200)", ChunkingConfig(strategy="fixed")),
    "fixed-800": Setup(
        "fixed 800 (overlap 100)",
        ChunkingConfig(strategy="fixed", max_chars=800, overlap_chars=100),
    ),
    "structure": Setup(
        "structure 1600",
        ChunkingConfig(strategy="structure"),
        (
            Variant("+ mmr 0.7", {"mmr": 0.7}, _BM25),
            Variant("+ lost-in-the-middle", {"reorder": "lost-in-the-middle"}, _BM25),
        ),
    ),
    "structure-mmr": Setup(
        "structure 1600",
        ChunkingConfig(strategy="structure"),
        (Variant("+ mmr 0.7", {"mmr": 0.7}),),
    ),
    "structure-rewrite": Setup(
        "structure 1600",
        ChunkingConfig(strategy="structure"),
        (Variant("+ rewrite (corpus abbreviations)", {"rewrite": True}),),
        glossary=True,
    ),
    "structure-ctx": Setup(
        "structure 1600 + contextual", ChunkingConfig(strategy="structure", contextual=True)
    ),
    "sentence": Setup(
        "sentence",
        ChunkingConfig(strategy="sentence"),
        (Variant("+ expand parent", {"expand": "parent"}),),
    ),
    "sentence-ctx": Setup(
        "sentence + contextual",
        ChunkingConfig(strategy="sentence", contextual=True),
        (
            Variant("+ expand window", {"expand": "window"}),
            Variant("+ expand parent", {"expand": "parent"}),
        ),
    ),
}


@dataclass(frozen=True)
class LongCorpus:
    """Files of concatenated abstracts and where each abstract's section lies."""

    files: dict[str, str]  # relative path -> text
    # per file: section starts (ascending), and the abstract id of each section
    starts: dict[str, list[int]]
    owners: dict[str, list[str]]
    ends: dict[str, list[int]]

    def overlaps(self, source: str, start: int, end: int) -> list[tuple[str, int]]:
        """``(abstract id, characters shared)`` for every section ``[start, end)`` touches."""
        starts, ends, owners = self.starts[source], self.ends[source], self.owners[source]
        out: list[tuple[str, int]] = []
        i = max(0, bisect_right(starts, start) - 1)
        while i < len(starts) and starts[i] < end:
            shared = min(end, ends[i]) - max(start, starts[i])
            if shared > 0:
                out.append((owners[i], shared))
            i += 1
        return out


def build_corpus(dataset: BeirDataset, docs_per_file: int, seed: int) -> LongCorpus:
    """The dataset's documents, shuffled with ``seed``, ``docs_per_file`` to a Markdown file."""
    ids = sorted(dataset.corpus)
    random.Random(seed).shuffle(ids)
    files: dict[str, str] = {}
    starts: dict[str, list[int]] = {}
    ends: dict[str, list[int]] = {}
    owners: dict[str, list[str]] = {}
    for n in range(0, len(ids), docs_per_file):
        name = f"long/file-{n // docs_per_file:05d}.md"
        parts: list[str] = []
        at = 0
        starts[name], ends[name], owners[name] = [], [], []
        for doc_id in ids[n : n + docs_per_file]:
            title, text = dataset.corpus[doc_id]
            heading = " ".join((title or doc_id).split())
            section = f"## {heading}\n\n{text.strip()}\n"
            starts[name].append(at)
            ends[name].append(at + len(section))
            owners[name].append(doc_id)
            parts.append(section + "\n")
            at += len(section) + 1
        files[name] = "".join(parts)
    return LongCorpus(files, starts, owners, ends)


def score_query(
    corpus: LongCorpus, results: Sequence[RetrievalResult], relevant: dict[str, int]
) -> tuple[list[str], float, float]:
    """The chunk ranking as ids for the metrics (a credited abstract, or a filler that
    counts as not relevant), and the top ten's citation and context precision."""
    credited: set[str] = set()
    ranking: list[str] = []
    inside = total = 0
    context_inside = context_total = 0
    for rank, r in enumerate(results):
        touched = corpus.overlaps(r.source, r.start_offset, r.end_offset)
        fresh = [d for d, _ in touched if relevant.get(d, 0) > 0 and d not in credited]
        if fresh:
            best = max(fresh, key=lambda d: (relevant[d], d))
            credited.add(best)
            ranking.append(best)
        else:
            ranking.append(f"-{rank}")
        if rank < 10:
            total += r.end_offset - r.start_offset
            inside += sum(n for d, n in touched if relevant.get(d, 0) > 0)
            start, end = (
                (r.context.start_offset, r.context.end_offset)
                if r.context is not None
                else (r.start_offset, r.end_offset)
            )
            context_total += end - start
            context_inside += sum(
                n for d, n in corpus.overlaps(r.source, start, end) if relevant.get(d, 0) > 0
            )
    precision = inside / total if total else 0.0
    return ranking, precision, (context_inside / context_total if context_total else 0.0)


@dataclass
class _Row:
    config: str
    mode: str
    ndcg: float
    recall: float
    precision: float
    context_precision: float
    chunks: int
    ingest_s: float
    ms_per_query: float


async def _run_setup(
    dataset: BeirDataset,
    corpus: LongCorpus,
    setup: Setup,
    modes: list[SearchMode],
    embedder: EmbeddingProtocol | None,
    limit: int | None,
) -> list[_Row]:
    queries = dataset.judged_queries(limit)
    rows: list[_Row] = []
    with tempfile.TemporaryDirectory(prefix="groundkit-longdoc-") as tmp:
        root = Path(tmp)
        for rel, text in corpus.files.items():
            path = root / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
        rewriter = (
            GlossaryRewriter(abbreviation_glossary(corpus.files.values()))
            if setup.glossary
            else None
        )
        async with Collection.open(
            root / "index",
            "longdoc",
            base_dir=root,
            chunking=setup.chunking,
            embedder=embedder,
            rewriter=rewriter,
        ) as col:
            started = time.perf_counter()
            report = await col.ingest(root / "long")
            ingest_s = time.perf_counter() - started
            if report.failed:
                raise RuntimeError(f"{len(report.failed)} files failed: {report.failed[:2]}")
            chunks = await col.store.chunk_count()
            plain = Variant("", {})
            for variant in (plain, *setup.variants):
                for mode in modes:
                    if variant.modes is not None and mode not in variant.modes:
                        continue
                    rankings: dict[str, list[str]] = {}
                    precisions: list[float] = []
                    contexts: list[float] = []
                    began = time.perf_counter()
                    for qid, text in queries.items():
                        response = await col.search(text, FETCH, mode=mode, **variant.options)
                        ranking, precision, context = score_query(
                            corpus, response.results, dataset.qrels[qid]
                        )
                        rankings[qid] = ranking
                        precisions.append(precision)
                        contexts.append(context)
                    per_query = (time.perf_counter() - began) * 1000 / max(1, len(queries))
                    qrels = {q: dataset.qrels[q] for q in queries}
                    means = evaluate(qrels, rankings, (("ndcg", 10), ("recall", 100))).means
                    rows.append(
                        _Row(
                            f"{setup.label} {variant.label}".strip(),
                            mode,
                            means["ndcg@10"],
                            means["recall@100"],
                            sum(precisions) / len(precisions) if precisions else 0.0,
                            sum(contexts) / len(contexts) if contexts else 0.0,
                            chunks,
                            ingest_s,
                            per_query,
                        )
                    )
    return rows


def render(data: Path, docs_per_file: int, seed: int, corpus: LongCorpus, rows: list[_Row]) -> str:
    table = markdown_table(
        [
            "configuration",
            "mode",
            "nDCG@10",
            "Recall@100",
            "citation precision",
            "context precision",
            "chunks",
            "ingest s",
            "ms / query",
        ],
        [
            [
                r.config,
                r.mode,
                f"{r.ndcg:.4f}",
                f"{r.recall:.4f}",
                f"{r.precision:.3f}",
                f"{r.context_precision:.3f}",
                str(r.chunks),
                f"{r.ingest_s:.1f}",
                f"{r.ms_per_query:.1f}",
            ]
            for r in rows
        ],
    )
    lines = [
        f"## {data.name}, {docs_per_file} abstracts per file",
        "",
        f"Command: `{command_line()}`",
        "",
        f"{len(corpus.files)} Markdown files of up to {docs_per_file} abstracts each (seed "
        f"{seed}), each abstract a `## title` section. Span-level scoring: a chunk counts "
        "once for the first relevant abstract it overlaps that no earlier chunk covered; "
        f"{FETCH} chunks fetched per query; citation precision is the share of the top ten "
        "chunks' characters inside a relevant abstract, context precision the same share "
        "over the passages returned with them (the chunks themselves without `expand`). "
        "Rows marked `+` add a search-time step to the plain searches of the row above.",
        "",
        table,
        "",
        "Machine:",
        "",
        *machine_lines(),
        "",
    ]
    return "\n".join(lines)


async def run(args: argparse.Namespace) -> int:
    offline_models()
    dataset = load_beir(args.data)
    corpus = build_corpus(dataset, args.docs_per_file, args.seed)
    modes: list[SearchMode] = args.modes
    embedder: EmbeddingProtocol | None = None
    if any(m != "bm25" for m in modes):
        embedder = SentenceTransformerEmbedder(args.embedder)
    rows: list[_Row] = []
    for name in args.configs.split(","):
        if name not in CONFIGS:
            raise SystemExit(f"unknown configuration {name!r}; choose from {', '.join(CONFIGS)}")
        setup = CONFIGS[name]
        rows += await _run_setup(dataset, corpus, setup, modes, embedder, args.limit_queries)
        print(f"done: {setup.label}", flush=True)
    page = render(args.data, args.docs_per_file, args.seed, corpus, rows)
    print(page)
    if args.out is not None:
        from evals.machine import write_section

        write_section(args.out, f"longdoc-{args.docs_per_file}", page.splitlines())
        print(f"wrote section longdoc-{args.docs_per_file} of {args.out}")
    if args.json is not None:
        data = {
            f"{r.config} / {r.mode}": {
                "ndcg@10": r.ndcg,
                "recall@100": r.recall,
                "citation_precision": r.precision,
                "context_precision": r.context_precision,
            }
            for r in rows
        }
        args.json.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=default_scifact_dir())
    parser.add_argument("--docs-per-file", type=int, default=20)
    parser.add_argument("--seed", type=int, default=13)
    parser.add_argument("--modes", default="bm25")
    parser.add_argument(
        "--configs",
        default="fixed,structure,structure-ctx,sentence-ctx",
        help=f"chunker configurations, from: {', '.join(CONFIGS)}",
    )
    parser.add_argument("--embedder", default="all-MiniLM-L6-v2")
    parser.add_argument("--limit-queries", type=int, default=None)
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    if args.docs_per_file < 1:
        parser.error("--docs-per-file must be at least 1")
    args.modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    unknown = [m for m in args.modes if m not in ("bm25", "dense", "hybrid")]
    if unknown or not args.modes:
        parser.error(f"--modes takes bm25, dense and hybrid, not {unknown or args.modes}")
    return asyncio.run(run(args))


if __name__ == "__main__":
    raise SystemExit(main())
