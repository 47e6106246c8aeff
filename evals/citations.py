"""Citation recall and precision (ALCE) of the answer check, on answers with a known truth.

    python -m evals.citations [--data DIR] [--embedder NAME] [--out docs/quality.md]

``DIR`` is the folder ``evals.evidence`` reads (a BEIR split plus
``evidence-test.jsonl``). For each (claim, abstract) pair the answer is the
claim itself, so what it should score is known; it cites:

- ``gold``: the best chunk of the abstract that SUPPORTs the claim (ideal: recall 1,
  precision 1);
- ``gold + noise`` and ``noise + gold``: that chunk and the best BM25 hit for the claim
  not judged relevant to it (ideal: recall 1, precision 0.5, the noise irrelevant);
- ``noise``: the irrelevant hit alone (ideal: recall 0);
- ``contradicting``: the best chunk of an abstract that CONTRADICTs the claim (ideal
  for an entailment judge: recall 0; a similarity judge reads it as support).

Figures are ALCE's means over answers, an answer with no counted citation scoring
precision 0 as ALCE's script does.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from evals.beir import BeirDataset, ingest_dataset, load_beir, offline_models
from evals.evidence import Pair, _gold_result, _irrelevant_result, load_pairs
from evals.machine import (
    command_line,
    default_scifact_dir,
    machine_lines,
    markdown_table,
    write_section,
)
from groundkit import AnswerReport, Collection, RetrievalResult, SentenceTransformerEmbedder
from groundkit.providers.protocols import EmbeddingProtocol
from groundkit.verification.answers import AnswerChecker

__all__ = ["CASES", "Tally", "main"]

SECTION = "citations"
# (case, ideal recall, ideal precision)
CASES: tuple[tuple[str, float, float], ...] = (
    ("gold", 1.0, 1.0),
    ("gold + noise", 1.0, 0.5),
    ("noise + gold", 1.0, 0.5),
    ("noise", 0.0, 0.0),
    ("contradicting", 0.0, 0.0),
)


@dataclass
class Tally:
    """Per case, each answer's recall and precision; and how often a supported two-citation
    answer marks exactly its noise citation irrelevant."""

    recall: dict[str, list[float]] = field(default_factory=dict)
    precision: dict[str, list[float]] = field(default_factory=dict)
    noise_caught: list[float] = field(default_factory=list)

    def add(self, case: str, report: AnswerReport, noise_at: int | None = None) -> None:
        self.recall.setdefault(case, []).append(report.citation_recall or 0.0)
        self.precision.setdefault(case, []).append(report.citation_precision or 0.0)
        (sentence,) = report.sentences
        if noise_at is not None and sentence.verdict in ("quoted", "supported"):
            wanted = [i != noise_at for i in range(len(sentence.relevant))]
            self.noise_caught.append(float(sentence.relevant == wanted))


async def _cases(
    dataset: BeirDataset, collection: Collection, pairs: list[Pair]
) -> list[tuple[str, str, list[RetrievalResult], int | None]]:
    """``(case, claim, cited, position of the noise)`` for every answer to check."""
    out: list[tuple[str, str, list[RetrievalResult], int | None]] = []
    noise_of: dict[str, RetrievalResult | None] = {}
    for p in pairs:
        gold = await _gold_result(collection, p)
        if gold is None:
            continue
        if p.label == "CONTRADICT":
            out.append(("contradicting", p.claim, [gold], None))
            continue
        if p.claim_id not in noise_of:
            relevant = set(dataset.qrels.get(p.claim_id, {}))
            noise_of[p.claim_id] = await _irrelevant_result(collection, p.claim, relevant)
        noise = noise_of[p.claim_id]
        out.append(("gold", p.claim, [gold], None))
        if noise is not None:
            out.append(("gold + noise", p.claim, [gold, noise], 1))
            out.append(("noise + gold", p.claim, [noise, gold], 0))
            out.append(("noise", p.claim, [noise], None))
    return out


async def measure(
    dataset: BeirDataset,
    pairs: list[Pair],
    collection: Collection,
    root: Path,
    embedder: EmbeddingProtocol | None,
) -> dict[str, Tally]:
    checkers: dict[str, AnswerChecker] = {"terms": AnswerChecker(root)}
    if embedder is not None:
        checkers["embedding"] = AnswerChecker(root, embedder=embedder)
    tallies = {method: Tally() for method in checkers}
    for case, claim, cited, noise_at in await _cases(dataset, collection, pairs):
        markers = "".join(f"[{n}]" for n in range(1, len(cited) + 1))
        answer = f"{claim.rstrip('.')} {markers}."
        for method, checker in checkers.items():
            tallies[method].add(case, await checker.check(answer, cited), noise_at)
    return tallies


def _mean(values: list[float]) -> str:
    return f"{np.mean(values):.3f}" if values else "-"


def render(
    data: Path, pairs: list[Pair], tallies: dict[str, Tally], embedder: str | None
) -> list[str]:
    rows = []
    for method, tally in tallies.items():
        for case, ideal_recall, ideal_precision in CASES:
            recall = tally.recall.get(case, [])
            rows.append(
                [
                    method,
                    case,
                    str(len(recall)),
                    _mean(recall),
                    f"{ideal_recall:.1f}",
                    _mean(tally.precision.get(case, [])),
                    f"{ideal_precision:.1f}",
                ]
            )
    caught = [
        [method, str(len(t.noise_caught)), _mean(t.noise_caught)] for method, t in tallies.items()
    ]
    return [
        "## Citation recall and precision",
        "",
        f"Generated by `evals/citations.py`: `{command_line()}`.",
        "",
        f"{len(pairs)} (claim, abstract) pairs of `{data.name}/evidence-test.jsonl`. Each answer",
        'is the claim itself, `"<claim> [1]."` (or `[1][2]`), so its truth is known: it cites',
        "the best chunk of a supporting abstract (gold), the best BM25 hit for the claim that",
        "is not judged relevant (noise), both in either order, or the best chunk of a",
        "contradicting abstract. Recall and precision are ALCE's (SPEC.md 5.6a), means over",
        "answers, with the answer check's verdicts as the support judgement and its shipped",
        f"thresholds. Embedder: `{embedder or 'none'}`.",
        "",
        markdown_table(
            ["method", "cited", "answers", "recall", "ideal", "precision", "ideal"], rows
        ),
        "",
        "Among the two-citation answers judged supported, the share whose noise citation",
        "alone is marked irrelevant (the gold one relevant):",
        "",
        markdown_table(["method", "supported two-citation answers", "noise caught"], caught),
        "",
        "A similarity judge cannot tell a contradicting abstract from a supporting one (the",
        "`contradicting` row): precision and recall say whether the citations are about what",
        "the sentence says, not whether they agree with it.",
        "",
        "Machine:",
        "",
        *machine_lines(),
    ]


async def _tallies(data: Path, pairs: list[Pair], embedder_name: str) -> dict[str, Tally]:
    """SciFact ingested (BM25) in a temporary directory, and every answer checked."""
    dataset = load_beir(data)
    embedder = SentenceTransformerEmbedder(embedder_name) if embedder_name else None
    with tempfile.TemporaryDirectory(prefix="groundkit-citations-") as tmp:
        async with ingest_dataset(dataset, Path(tmp)) as ingested:
            return await measure(dataset, pairs, ingested.collection, Path(tmp), embedder)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=default_scifact_dir(), help="BEIR folder")
    parser.add_argument("--embedder", default="all-MiniLM-L6-v2", help="'' for terms only")
    parser.add_argument("--out", type=Path, help="the page whose 'citations' section to write")
    args = parser.parse_args(argv)
    offline_models()
    pairs = load_pairs(args.data / "evidence-test.jsonl")
    tallies = asyncio.run(_tallies(args.data, pairs, args.embedder))
    page = render(args.data, pairs, tallies, args.embedder or None)
    print("\n".join(page))
    if args.out:
        write_section(args.out, SECTION, page)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
