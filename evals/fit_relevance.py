"""Fit the relevance calibration of an embedding model, and check it on held-out queries.

python -m evals.fit_relevance [--data DIR] [--backend torch|onnx-int8] [--out docs/quality.md]

The SciFact corpus is ingested once with the packaged all-MiniLM-L6-v2. The curve
is fitted on the SciFact *training* claims (``evidence-train.jsonl``): each claim's
top ten dense chunks, relevant when the chunk belongs to an abstract the claim
cites. It is checked on the 300 *test* queries (``qrels/test.tsv``), none of which
took part in the fit, and on queries the corpus cannot answer: everyday questions
from other domains and random letter strings, written by this script. The fitted
constants are printed; ``groundkit/retrieval/relevance.py`` carries them.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import random
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from evals.beir import BeirDataset, doc_id, ingest_dataset, load_beir, offline_models
from evals.machine import command_line, default_scifact_dir, machine_lines, write_section
from groundkit import Collection, RetrievalConfig, SearchMode, SentenceTransformerEmbedder
from groundkit.config import RelevanceCalibration
from groundkit.contracts import RetrievalResult
from groundkit.retrieval.relevance import BUILT_IN_CALIBRATIONS, fit_relevance

THRESHOLDS: tuple[float | str, ...] = ("auto", 0.3, 0.5, 0.7)
MODES: tuple[SearchMode, ...] = ("dense", "hybrid")

# Questions from other domains: a scientific-abstract corpus holds no answer to them.
OFF_TOPIC = (
    "how do I bake sourdough bread at home",
    "best football team in europe this season",
    "cheap flights from paris to rome in may",
    "lyrics of a famous pop song from the nineties",
    "how to change a flat tyre on a bicycle",
    "what time does the supermarket close on sunday",
    "install python on a windows laptop",
    "recipe for a chocolate cake without eggs",
    "who won the world cup in 1998",
    "weather forecast for tomorrow in london",
    "how many players are on a basketball team",
    "rent an apartment near the city centre",
    "plot summary of a detective novel",
    "how to tie a bow tie",
    "best hiking trails in the alps",
    "convert a pdf to a word document",
    "how long to boil an egg",
    "learn to play the guitar chords",
    "tax deduction for a home office",
    "train timetable between two towns",
)


def gibberish(count: int, seed: int = 7) -> list[str]:
    """Strings of random letters, two to five 'words' each, the same every run."""
    rng = random.Random(seed)
    letters = "abcdefghijklmnopqrstuvwxyz"
    return [
        " ".join(
            "".join(rng.choice(letters) for _ in range(rng.randint(3, 9)))
            for _ in range(rng.randint(2, 5))
        )
        for _ in range(count)
    ]


def training_claims(path: Path) -> dict[str, tuple[str, set[str]]]:
    """Each training claim with the abstracts it cites."""
    claims: dict[str, tuple[str, set[str]]] = {}
    with path.open(encoding="utf-8") as fh:
        for line in fh:
            if line.strip():
                row = json.loads(line)
                claims.setdefault(row["claim_id"], (row["claim"], set()))[1].add(row["doc_id"])
    return claims


@dataclass
class Judged:
    """Cosines of judged results and whether each was relevant."""

    cosines: list[float] = field(default_factory=list)
    relevant: list[bool] = field(default_factory=list)

    def add(self, results: list[RetrievalResult], cited: set[str]) -> None:
        for r in results:
            assert r.scores is not None and r.scores.vector is not None
            self.cosines.append(r.scores.vector)
            self.relevant.append(doc_id(r) in cited)


async def judged(col: Collection, queries: Mapping[str, tuple[str, set[str]]]) -> Judged:
    out = Judged()
    for text, cited in queries.values():
        out.add((await col.search(text, 10, mode="dense")).results, cited)
    return out


def reliability(calibration: RelevanceCalibration, data: Judged) -> list[str]:
    """A reliability table (predicted against observed, by bins), with ECE and Brier."""
    predicted = np.array([calibration.relevance(c) for c in data.cosines])
    observed = np.array(data.relevant, dtype=np.float64)
    edges = np.linspace(0.0, 1.0, 6)
    rows = [
        "| predicted relevance | results | mean predicted | observed relevant |",
        "|---|---|---|---|",
    ]
    ece = 0.0
    for low, high in itertools.pairwise(edges):
        inside = (predicted >= low) & ((predicted < high) | (high == 1.0))
        n = int(inside.sum())
        if n:
            mean_p, mean_o = float(predicted[inside].mean()), float(observed[inside].mean())
            ece += n / len(predicted) * abs(mean_p - mean_o)
            rows.append(f"| {low:.1f}-{high:.1f} | {n} | {mean_p:.3f} | {mean_o:.3f} |")
    brier = float(np.mean((predicted - observed) ** 2))
    base = float(np.mean((observed.mean() - observed) ** 2))
    rows += [
        "",
        f"Expected calibration error {ece:.3f}; Brier score {brier:.3f} "
        f"(a constant guess of the base rate scores {base:.3f}).",
    ]
    return rows


@dataclass
class CutTally:
    relevant_before: int = 0
    relevant_kept: int = 0
    other_before: int = 0
    other_kept: int = 0
    answered_empty: int = 0
    answerable: int = 0
    unanswerable_empty: int = 0
    unanswerable: int = 0


async def cut_rows(
    index: Path,
    embedder: SentenceTransformerEmbedder,
    calibration: RelevanceCalibration,
    test: Mapping[str, tuple[str, set[str]]],
    unanswerable: list[str],
) -> list[str]:
    rows = [
        "| mode | min_relevance | relevant top-10 results kept | other results kept | "
        "test queries left with nothing | unanswerable queries left with nothing |",
        "|---|---|---|---|---|---|",
    ]
    base = RetrievalConfig(relevance_calibration=calibration)
    for mode in MODES:
        async with Collection.open(index, "beir", embedder=embedder, retrieval=base) as col:
            uncut = {q: (await col.search(t, 10, mode=mode)).results for q, (t, _) in test.items()}
        for threshold in THRESHOLDS:
            config = base.model_copy(update={"min_relevance": threshold})
            tally = CutTally()
            async with Collection.open(index, "beir", embedder=embedder, retrieval=config) as col:
                for qid, (text, cited) in test.items():
                    kept = {r.chunk_id for r in (await col.search(text, 10, mode=mode)).results}
                    tally.answerable += 1
                    tally.answered_empty += not kept
                    for r in uncut[qid]:
                        if doc_id(r) in cited:
                            tally.relevant_before += 1
                            tally.relevant_kept += r.chunk_id in kept
                        else:
                            tally.other_before += 1
                            tally.other_kept += r.chunk_id in kept
                for text in unanswerable:
                    tally.unanswerable += 1
                    tally.unanswerable_empty += not (await col.search(text, 10, mode=mode)).results
            rows.append(
                f"| {mode} | {threshold} | "
                f"{tally.relevant_kept / tally.relevant_before:.3f} "
                f"({tally.relevant_kept}/{tally.relevant_before}) | "
                f"{tally.other_kept / tally.other_before:.3f} | "
                f"{tally.answered_empty}/{tally.answerable} | "
                f"{tally.unanswerable_empty}/{tally.unanswerable} |"
            )
    return rows


def test_queries(data: BeirDataset) -> dict[str, tuple[str, set[str]]]:
    return {q: (t, set(data.qrels[q])) for q, t in data.judged_queries().items()}


async def run(args: argparse.Namespace) -> list[str]:
    data = load_beir(args.data)
    train = training_claims(args.data / "evidence-train.jsonl")
    test = test_queries(data)
    unanswerable = [*OFF_TOPIC, *gibberish(20)]
    embedder = (
        SentenceTransformerEmbedder("all-MiniLM-L6-v2", backend="onnx", quantize="int8")
        if args.backend == "onnx-int8"
        else SentenceTransformerEmbedder("all-MiniLM-L6-v2")
    )
    with tempfile.TemporaryDirectory(prefix="groundkit-relevance-") as tmp:
        root = Path(tmp)
        async with ingest_dataset(data, root, embedder=embedder) as ingested:
            fit_data = await judged(ingested.collection, train)
            check_data = await judged(ingested.collection, test)
            chunks = ingested.chunks
        fitted = fit_relevance(
            fit_data.cosines, fit_data.relevant, fitted_on="SciFact training claims"
        )
        identity = (embedder.provider, embedder.model_name, embedder.dimensions)
        shipped = BUILT_IN_CALIBRATIONS.get(identity)
        print(
            f"fitted: slope={fitted.slope!r} intercept={fitted.intercept!r} floor={fitted.floor!r}"
        )
        calibration = shipped or fitted
        cuts = await cut_rows(root / "index", embedder, calibration, test, unanswerable)
    shipped_line = (
        f"The built-in calibration for `{identity[1]}` ({identity[0]}) is slope "
        f"{shipped.slope:.4f}, intercept {shipped.intercept:.4f}, floor {shipped.floor:.3f}; "
        "the tables below use it."
        if shipped is not None
        else "This model has no built-in calibration; the tables below use the fit above."
    )
    return [
        "## Relevance calibration",
        "",
        f"Command: `{command_line()}`",
        "",
        f"SciFact's 5,183 abstracts in {chunks} chunks, embedded with `{identity[1]}` "
        f"(provider `{identity[0]}`). The logistic curve P(relevant | cosine) is fitted on the "
        f"{len(train)} SciFact training claims (their top 10 dense chunks, {len(fit_data.cosines)} "
        "judged results; relevant = a chunk of an abstract the claim cites) and checked on the "
        f"{len(test)} test queries, which took no part in the fit. Unanswerable queries: "
        f"{len(OFF_TOPIC)} everyday questions from other domains and 20 random letter strings "
        "(evals/fit_relevance.py).",
        "",
        f"Fit: slope {fitted.slope:.4f}, intercept {fitted.intercept:.4f}, so relevance 0.5 "
        f"sits at cosine {fitted.cosine_at(0.5):.3f}; the floor (99% of the relevant training "
        f"results at or above it) is cosine {fitted.floor:.3f}. {shipped_line}",
        "",
        f"Reliability on the test queries' top 10 dense results ({len(check_data.cosines)}):",
        "",
        *reliability(calibration, check_data),
        "",
        "What a cut costs and what it saves, on the top 10 of each query (a result is relevant "
        "when its abstract is judged relevant for the query):",
        "",
        *cuts,
        "",
        "Machine:",
        "",
        *machine_lines(),
    ]


def main(argv: list[str] | None = None) -> int:
    offline_models()
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--data", type=Path, default=default_scifact_dir())
    parser.add_argument("--backend", choices=("torch", "onnx-int8"), default="torch")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    lines = asyncio.run(run(args))
    if args.out is not None:
        write_section(args.out, f"relevance-{args.backend}", lines)
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
