"""Evidence spans and answer checks against gold rationale sentences.

    python -m evals.evidence [--data DIR] [--embedder NAME] [--out docs/quality.md]

``DIR`` holds a BEIR split (``corpus.jsonl``, ``queries.jsonl``, ``qrels/test.tsv``)
and ``evidence-test.jsonl``: one (claim, cited abstract) pair a line, with the
character spans of the abstract's rationale sentences and the label (SUPPORT or
CONTRADICT). The corpus is ingested once, BM25, through ``groundkit.Collection``;
the collection's own statistics weight the query terms.

1. Evidence: for each pair, the abstract's sentences are ranked by each method,
   with the library's own code (``EvidenceBatch``, as a search result's
   ``evidence`` is computed), and the top sentence counts as a hit when it
   overlaps a gold rationale sentence by at least half of the shorter of the
   two. Baselines: the first sentence, a random one (its exact expectation) and
   the most distinct query terms shared.
2. Answer checks: the answer "<claim> [1]." is checked with ``verify_answer``
   against three cited results: the best chunk of the supporting abstract
   (SUPPORT pairs), of the contradicting one (CONTRADICT pairs), and the best
   BM25 hit for the claim that is not judged relevant to it. The supported and
   weak thresholds are chosen here: supported where the share of SUPPORT pairs
   that pass minus the share of irrelevant ones that pass is largest; weak where
   95% of SUPPORT pairs pass.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import textwrap
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from evals.beir import BeirDataset, ingest_dataset, load_beir, offline_models
from evals.machine import (
    command_line,
    default_scifact_dir,
    machine_lines,
    markdown_table,
    write_section,
)
from groundkit import (
    Analyzer,
    Collection,
    EmbeddingProtocol,
    RetrievalResult,
    SentenceTransformerEmbedder,
    sentence_spans,
)
from groundkit.retrieval.evidence import EvidenceBatch, query_weights
from groundkit.verification.answers import SUPPORTED_THRESHOLDS, WEAK_THRESHOLDS, AnswerChecker

__all__ = ["Pair", "hit", "load_pairs", "main"]

SECTION = "evidence"
_SUPPORT_PASS = 0.95


@dataclass(frozen=True)
class Pair:
    claim_id: str
    claim: str
    doc_id: str
    label: str
    gold: tuple[tuple[int, int], ...]


def load_pairs(path: Path) -> list[Pair]:
    out: list[Pair] = []
    with path.open(encoding="utf-8") as fh:
        for line in fh:
            if line.strip():
                row = json.loads(line)
                out.append(
                    Pair(
                        str(row["claim_id"]),
                        row["claim"],
                        str(row["doc_id"]),
                        row["label"],
                        tuple((int(a), int(b)) for a, b in row["rationale_spans"]),
                    )
                )
    return out


def hit(span: tuple[int, int], gold: Sequence[tuple[int, int]]) -> bool:
    """The span overlaps a gold span by at least half of the shorter one."""
    a, b = span
    for g0, g1 in gold:
        overlap = min(b, g1) - max(a, g0)
        if overlap > 0 and overlap >= 0.5 * min(b - a, g1 - g0):
            return True
    return False


WeightLookup = Callable[[str], Awaitable[dict[str, float]]]


async def _weights_of(collection: Collection) -> WeightLookup:
    """``claim -> {term: weight}`` as a search of the collection weighs its terms."""
    live = (await collection.retriever()).lexical
    analyzer = Analyzer()

    async def lookup(claim: str) -> dict[str, float]:
        terms = analyzer.terms(claim)
        return query_weights(live.index, terms, await live.term_ids(terms))

    return lookup


@dataclass
class _Scores:
    hits: dict[str, list[float]]
    merged: dict[str, dict[tuple[str, str], float]]
    ms: dict[str, float]

    def add(self, method: str, pair: Pair, ok: bool) -> None:
        self.hits.setdefault(method, []).append(float(ok))
        key = (pair.claim_id, pair.doc_id)
        merged = self.merged.setdefault(method, {})
        merged[key] = max(merged.get(key, 0.0), float(ok))


async def evidence_run(
    dataset: BeirDataset,
    pairs: list[Pair],
    weigh: WeightLookup,
    embedder: EmbeddingProtocol | None,
) -> tuple[_Scores, dict[tuple[str, str], list[tuple[int, int]]]]:
    analyzer = Analyzer()
    scores = _Scores({}, {}, {})
    gold_union: dict[tuple[str, str], list[tuple[int, int]]] = {}
    for p in pairs:
        gold_union.setdefault((p.claim_id, p.doc_id), []).extend(p.gold)
    loop = asyncio.get_running_loop()
    for p in pairs:
        text = dataset.corpus[p.doc_id][1]
        spans = sentence_spans(text)
        if not spans:
            continue
        union = gold_union[(p.claim_id, p.doc_id)]
        scores.add("first sentence", p, hit(spans[0], p.gold))
        expected = sum(hit(s, p.gold) for s in spans) / len(spans)
        scores.hits.setdefault("random (expected)", []).append(expected)
        merged = scores.merged.setdefault("random (expected)", {})
        merged[(p.claim_id, p.doc_id)] = sum(hit(s, union) for s in spans) / len(spans)
        wanted = set(analyzer.terms(p.claim))
        overlap = [len(wanted & set(analyzer.terms(text[a:b]))) for a, b in spans]
        best = max(range(len(spans)), key=lambda i: (overlap[i], -i))
        scores.add("shared query terms (count)", p, hit(spans[best], p.gold))
        weights = await weigh(p.claim)

        def fixed(w: dict[str, float] = weights) -> dict[str, float]:
            return w

        runs: list[tuple[str, EvidenceBatch]] = [("terms", EvidenceBatch(analyzer, fixed))]
        if embedder is not None:
            vector = await embedder.embed_query(p.claim)
            for method, hybrid in (("embedding", False), ("hybrid", True)):
                runs.append(
                    (
                        method,
                        EvidenceBatch(
                            analyzer,
                            fixed,
                            embedder=embedder,
                            query_vector=vector,
                            home=loop,
                            hybrid=hybrid,
                        ),
                    )
                )
        for method, batch in runs:
            slot = batch.add(text, 0)
            started = time.perf_counter()
            found = await asyncio.to_thread(batch.evidence, slot)
            scores.ms[method] = scores.ms.get(method, 0.0) + (time.perf_counter() - started) * 1000
            top = (found[0].start_offset, found[0].end_offset) if found else spans[0]
            scores.add(method, p, bool(found) and hit(top, p.gold))
    return scores, gold_union


async def _gold_result(collection: Collection, p: Pair) -> RetrievalResult | None:
    response = await collection.search(
        p.claim, 1, filters={"source": {"eq": f"corpus/{p.doc_id}.txt"}}
    )
    return response.results[0] if response.results else None


async def _irrelevant_result(
    collection: Collection, claim: str, relevant: set[str]
) -> RetrievalResult | None:
    response = await collection.search(claim, 20)
    for r in response.results:
        if Path(r.source).stem not in relevant:
            return r
    return None


async def answer_run(
    dataset: BeirDataset,
    pairs: list[Pair],
    collection: Collection,
    root: Path,
    embedder: EmbeddingProtocol | None,
) -> dict[str, dict[str, list[float]]]:
    """Similarities of ``"<claim> [1]."`` to its cited result, per method and case."""
    checkers: dict[str, AnswerChecker] = {"terms": AnswerChecker(root)}
    if embedder is not None:
        checkers["embedding"] = AnswerChecker(root, embedder=embedder)
    out: dict[str, dict[str, list[float]]] = {m: {} for m in checkers}
    seen_claims: set[str] = set()
    for p in pairs:
        cases: list[tuple[str, RetrievalResult | None]] = [
            (p.label, await _gold_result(collection, p))
        ]
        if p.claim_id not in seen_claims:
            seen_claims.add(p.claim_id)
            relevant = set(dataset.qrels.get(p.claim_id, {}))
            cases.append(("irrelevant", await _irrelevant_result(collection, p.claim, relevant)))
        answer = f"{p.claim.rstrip('.')} [1]."
        for case, result in cases:
            if result is None:
                continue
            for method, checker in checkers.items():
                report = await checker.check(answer, [result])
                similarity = report.sentences[0].similarity
                if similarity is not None:
                    out[method].setdefault(case, []).append(similarity)
    return out


def choose_thresholds(support: list[float], irrelevant: list[float]) -> tuple[float, float] | None:
    """(supported, weak): the largest pass-rate gap (the lowest such threshold), and where
    95% of SUPPORT passes; None without answers of both kinds."""
    if not support or not irrelevant:
        return None
    candidates = sorted(set(support) | set(irrelevant))
    s, i = np.asarray(support), np.asarray(irrelevant)
    best, best_gap = candidates[0], -2.0
    for t in candidates:
        gap = float((s >= t).mean() - (i >= t).mean())
        if gap > best_gap:
            best, best_gap = t, gap
    weak = float(np.quantile(s, 1.0 - _SUPPORT_PASS))
    return round(best, 2), round(min(weak, best), 2)


def _wrapped(text: str) -> list[str]:
    return textwrap.wrap(text, width=92)


def _rate(values: list[float], threshold: float) -> str:
    if not values:
        return "-"
    return f"{np.mean(np.asarray(values) >= threshold):.3f}"


def render(
    data: Path,
    pairs: list[Pair],
    scores: _Scores,
    answers: dict[str, dict[str, list[float]]],
    chosen: dict[str, tuple[float, float] | None],
    embedder_name: str | None,
) -> list[str]:
    merged_count = len({(p.claim_id, p.doc_id) for p in pairs})
    rows = []
    for method, values in scores.hits.items():
        merged = scores.merged[method]
        ms = scores.ms.get(method)
        rows.append(
            [
                method,
                f"{np.mean(values):.3f}",
                f"{np.mean(list(merged.values())):.3f}",
                "-" if ms is None else f"{ms / len(values):.2f}",
            ]
        )
    answer_rows = []
    for method, cases in answers.items():
        supported, weak = SUPPORTED_THRESHOLDS[method], WEAK_THRESHOLDS[method]
        picked = chosen[method]
        for case in ("SUPPORT", "CONTRADICT", "irrelevant"):
            sims = cases.get(case, [])
            answer_rows.append(
                [
                    method,
                    case,
                    str(len(sims)),
                    _rate(sims, supported),
                    _rate(sims, weak),
                    f"{np.median(sims):.3f}" if sims else "-",
                ]
            )
        shown = ("-", "-") if picked is None else (f"{picked[0]:.2f}", f"{picked[1]:.2f}")
        answer_rows.append([method, "thresholds chosen by this run", "", *shown, ""])
    lines = [
        "## Evidence sentences and answer checks",
        "",
        f"Generated by `evals/evidence.py`: `{command_line()}`.",
        "",
        *_wrapped(
            f"{len(pairs)} (claim, cited abstract) pairs of `{data.name}/evidence-test.jsonl`, "
            "each with its gold rationale sentences; sentences split by "
            "`groundkit.sentence_spans`. A method's top sentence is a hit when it overlaps a "
            "gold rationale sentence by at least half of the shorter of the two. Some claims "
            "list several rationale sets for one abstract, each on its own line: the first "
            "column scores each line on its own set (a single top sentence can match only "
            f"one), the second merges the sets of each (claim, abstract) ({merged_count} pairs)."
        ),
        f"Embedder: `{embedder_name or 'none'}`. Term weights: the collection's BM25 idf.",
        "",
        markdown_table(
            ["method", "top sentence is gold (per line)", "merged pairs", "ms per abstract"], rows
        ),
        "",
        "`terms`, `embedding` and `hybrid` are what `result.evidence` computes for a bm25, dense",
        "and hybrid search; the hybrid weights (0.4 terms, 0.6 embedding, both standardised",
        "within the chunk) were chosen on this file.",
        "",
        "### Answer checks",
        "",
        'The answer `"<claim> [1]."` is checked with `verify_answer` against one cited result:',
        "the best chunk of the abstract that supports the claim (SUPPORT), of the abstract that",
        "contradicts it (CONTRADICT), or the best BM25 hit for the claim that is not judged",
        "relevant (irrelevant). Columns: the share whose closest cited sentence reaches the",
        "shipped `supported` and `weak` thresholds, and the median similarity.",
        "",
        markdown_table(
            ["method", "cited abstract", "answers", "supported", "supported or weak", "median"],
            answer_rows,
        ),
        "",
        "Similarity is not entailment: a CONTRADICT abstract shares the claim's words and",
        "topic, so a claim citing it reads `supported` about as often as one citing a",
        "supporting abstract (the CONTRADICT rows). `supported` says the cited text is about",
        "what the sentence says, not that it agrees.",
        "",
        "Machine:",
        "",
        *machine_lines(),
    ]
    return lines


async def run(args: argparse.Namespace) -> int:
    offline_models()
    data: Path = args.data
    dataset = load_beir(data)
    pairs = load_pairs(data / "evidence-test.jsonl")
    for p in pairs:  # the spans index the text field, not the file written for it
        text = dataset.corpus[p.doc_id][1]
        assert all(0 <= a < b <= len(text) for a, b in p.gold), p
    embedder: EmbeddingProtocol | None = None
    if args.embedder:
        embedder = SentenceTransformerEmbedder(args.embedder)
    with tempfile.TemporaryDirectory(prefix="groundkit-evidence-") as tmp:
        root = Path(tmp)
        async with ingest_dataset(dataset, root) as ingested:
            weigh = await _weights_of(ingested.collection)
            scores, _ = await evidence_run(dataset, pairs, weigh, embedder)
            answers = await answer_run(dataset, pairs, ingested.collection, root, embedder)
    chosen = {
        method: choose_thresholds(cases.get("SUPPORT", []), cases.get("irrelevant", []))
        for method, cases in answers.items()
    }
    lines = render(data, pairs, scores, answers, chosen, args.embedder)
    print("\n".join(lines))
    if args.out is not None:
        write_section(args.out, SECTION, lines)
        print(f"wrote section {SECTION!r} of {args.out}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=default_scifact_dir())
    parser.add_argument(
        "--embedder", default="all-MiniLM-L6-v2", help="'' for the terms method only"
    )
    parser.add_argument("--out", type=Path, default=None, help="page to write the section into")
    return asyncio.run(run(parser.parse_args(argv)))


if __name__ == "__main__":
    raise SystemExit(main())
