"""Evidence spans and answer checks against gold rationale sentences.

    python -m evals.evidence [--data DIR] [--embedder NAME] [--out docs/quality.md]

``DIR`` holds a BEIR split (``corpus.jsonl``, ``queries.jsonl``, ``qrels/test.tsv``),
``evidence-test.jsonl`` and (optionally) ``evidence-train.jsonl``: one (claim,
cited abstract) pair a line, with the character spans of the abstract's
rationale sentences and the label (SUPPORT or CONTRADICT). The corpus is
ingested once, BM25, through ``groundkit.Collection`` (each document a file:
title, blank line, text); the collection's own statistics weight the query terms.

1. Evidence: for each pair, the document's sentences (its title included, as
   the file holds it) are ranked by each method, with the library's own code
   (``EvidenceBatch``, as a search result's ``evidence`` is computed). The top
   sentence counts as a hit when it overlaps a gold rationale sentence by at
   least half of the shorter of the two, and, stricter, when it lies inside
   one (a title never does). Baselines: the first sentence, a random one (its
   exact expectation) and the most distinct query terms shared.
2. Answer checks: the answer "<claim> [1]." is checked with ``verify_answer``
   (its default claim judge) against three cited results: the best chunk of
   the supporting abstract (SUPPORT pairs), of the contradicting one
   (CONTRADICT pairs), and the best BM25 hit for the claim that is not judged
   relevant to it. The supported and weak thresholds are chosen on the train
   pairs only: supported where the share of SUPPORT pairs that pass minus the
   share of irrelevant ones that pass is largest; weak where 95% of SUPPORT
   pairs pass. Both files are reported; nothing is fitted to the test file.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import textwrap
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from evals.beir import BeirDataset, document_text, ingest_dataset, load_beir, offline_models
from evals.machine import (
    command_line,
    default_scifact_dir,
    machine_lines,
    markdown_table,
    write_section,
)
from groundkit import Collection, EmbeddingProtocol, RetrievalResult, SentenceTransformerEmbedder
from groundkit.lexical import Analyzer
from groundkit.retrieval.evidence import (
    HYBRID_TERMS_WEIGHT,
    EvidenceBatch,
    body_spans,
    query_weights,
    term_scores,
)
from groundkit.verification import sentence_spans
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


def inside(span: tuple[int, int], gold: Sequence[tuple[int, int]]) -> bool:
    """The span lies within one gold span."""
    a, b = span
    return any(g0 <= a and b <= g1 for g0, g1 in gold)


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
    within: dict[str, list[float]] = field(default_factory=dict)

    def add(self, method: str, pair: Pair, ok: bool, within: bool = False) -> None:
        self.within.setdefault(method, []).append(float(within))
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
    loop = asyncio.get_running_loop()
    texts: dict[str, str] = {}
    moved: list[Pair] = []
    for p in pairs:
        title, body = dataset.corpus[p.doc_id]
        text = texts[p.doc_id] = document_text(title, body)
        # The gold spans index the text field; the document holds the title first.
        shift = len(text) - len(body)
        gold = tuple((a + shift, b + shift) for a, b in p.gold)
        moved.append(Pair(p.claim_id, p.claim, p.doc_id, p.label, gold))
        gold_union.setdefault((p.claim_id, p.doc_id), []).extend(gold)
    for p in moved:
        text = texts[p.doc_id]
        spans = sentence_spans(text)
        if not spans:
            continue
        union = gold_union[(p.claim_id, p.doc_id)]
        scores.add("first sentence", p, hit(spans[0], p.gold), inside(spans[0], p.gold))
        expected = sum(hit(s, p.gold) for s in spans) / len(spans)
        scores.within.setdefault("random (expected)", []).append(
            sum(inside(s, p.gold) for s in spans) / len(spans)
        )
        scores.hits.setdefault("random (expected)", []).append(expected)
        merged = scores.merged.setdefault("random (expected)", {})
        merged[(p.claim_id, p.doc_id)] = sum(hit(s, union) for s in spans) / len(spans)
        wanted = set(analyzer.terms(p.claim))
        overlap = [len(wanted & set(analyzer.terms(text[a:b]))) for a, b in spans]
        best = max(range(len(spans)), key=lambda i: (overlap[i], -i))
        scores.add(
            "shared query terms (count)", p, hit(spans[best], p.gold), inside(spans[best], p.gold)
        )
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
            scores.add(
                method, p, bool(found) and hit(top, p.gold), bool(found) and inside(top, p.gold)
            )
    return scores, gold_union


_SWEEP = tuple(i / 10 for i in range(11))


def _standard(values: np.ndarray) -> np.ndarray:
    spread = float(values.std())
    return np.zeros_like(values) if spread == 0.0 else (values - values.mean()) / spread


async def hybrid_sweep(
    dataset: BeirDataset, pairs: list[Pair], weigh: WeightLookup, embedder: EmbeddingProtocol
) -> dict[float, float]:
    """For each terms weight of hybrid evidence, the share of lines whose top body sentence
    lies inside a rationale: how the shipped weight is chosen (on the train pairs)."""
    analyzer = Analyzer()
    hits: dict[float, list[bool]] = {w: [] for w in _SWEEP}
    for p in pairs:
        title, body = dataset.corpus[p.doc_id]
        text = document_text(title, body)
        shift = len(text) - len(body)
        gold = [(a + shift, b + shift) for a, b in p.gold]
        spans = body_spans(text, sentence_spans(text))
        if not spans:
            continue
        sentences = [text[a:b] for a, b in spans]
        terms = np.asarray(term_scores(analyzer, sentences, await weigh(p.claim)))
        rows = np.asarray(await embedder.embed_documents(sentences), dtype=np.float64)
        cosine = rows @ np.asarray(await embedder.embed_query(p.claim), dtype=np.float64)
        for w in _SWEEP:
            fused = w * _standard(terms) + (1.0 - w) * _standard(cosine)
            hits[w].append(inside(spans[int(np.argmax(fused))], gold))
    return {w: float(np.mean(v)) if v else 0.0 for w, v in hits.items()}


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


@dataclass(frozen=True)
class Checked:
    """One answer's similarity to its closest cited sentence, and whether the claim judge
    reads its two closest sentences as a contradiction (asked whatever the similarity, so
    the verdict can be worked out for any thresholds)."""

    similarity: float
    flagged: bool

    def verdict(self, thresholds: tuple[float, float]) -> str:
        """The verdict ``verify_answer`` gives at (supported, weak) thresholds."""
        supported, weak = thresholds
        if self.similarity >= weak and self.flagged:
            return "contradicted"
        if self.similarity >= supported:
            return "supported"
        return "weak" if self.similarity >= weak else "unsupported"


async def answer_run(
    dataset: BeirDataset,
    pairs: list[Pair],
    collection: Collection,
    root: Path,
    embedder: EmbeddingProtocol | None,
) -> dict[str, dict[str, list[Checked]]]:
    """``"<claim> [1]."`` checked against its cited result, per method and case."""
    # Thresholds at -1: every answer reaches the claim judge, and reads supported or
    # contradicted; the verdict at real thresholds follows from the similarity (Checked).
    checkers: dict[str, AnswerChecker] = {
        "terms": AnswerChecker(root, supported_threshold=-1.0, weak_threshold=-1.0)
    }
    if embedder is not None:
        checkers["embedding"] = AnswerChecker(
            root, embedder=embedder, supported_threshold=-1.0, weak_threshold=-1.0
        )
    out: dict[str, dict[str, list[Checked]]] = {m: {} for m in checkers}
    seen_claims: set[str] = set()
    cited_by: dict[str, set[str]] = {}
    for p in pairs:
        cited_by.setdefault(p.claim_id, set()).add(p.doc_id)
    for p in pairs:
        cases: list[tuple[str, RetrievalResult | None]] = [
            (p.label, await _gold_result(collection, p))
        ]
        if p.claim_id not in seen_claims:
            seen_claims.add(p.claim_id)
            # Judged relevant: the qrels (test claims) and every abstract a pair of the
            # claim cites (train claims have no qrels here).
            relevant = set(dataset.qrels.get(p.claim_id, {})) | cited_by.get(p.claim_id, set())
            cases.append(("irrelevant", await _irrelevant_result(collection, p.claim, relevant)))
        answer = f"{p.claim.rstrip('.')} [1]."
        for case, result in cases:
            if result is None:
                continue
            for method, checker in checkers.items():
                report = await checker.check(answer, [result])
                sentence = report.sentences[0]
                if sentence.similarity is not None:
                    out[method].setdefault(case, []).append(
                        Checked(sentence.similarity, sentence.verdict == "contradicted")
                    )
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


def _share(values: Sequence[bool]) -> str:
    return "-" if not values else f"{np.mean(np.asarray(values, dtype=float)):.3f}"


Thresholds = dict[str, tuple[float, float]]


def answer_rows(
    answers: dict[str, dict[str, list[Checked]]], split: str, thresholds: Thresholds
) -> list[list[str]]:
    """One row per method and cited case: how similarity alone and the full check read it."""
    rows = []
    for method, cases in answers.items():
        supported, weak = at = thresholds[method]
        for case in ("SUPPORT", "CONTRADICT", "irrelevant"):
            got = cases.get(case, [])
            sims = [c.similarity for c in got]
            rows.append(
                [
                    split,
                    method,
                    case,
                    str(len(got)),
                    _share([c.similarity >= supported for c in got]),
                    _share([c.verdict(at) == "supported" for c in got]),
                    _share([c.verdict(at) == "contradicted" for c in got]),
                    _share([c.similarity >= weak for c in got]),
                    f"{np.median(sims):.3f}" if sims else "-",
                ]
            )
    return rows


def _headline(
    answers: dict[str, dict[str, list[Checked]]], method: str, at: tuple[float, float]
) -> tuple[str, str, str]:
    """(CONTRADICT read supported by similarity alone, with the claim check, SUPPORT lost)."""
    cases = answers.get(method, {})
    contra = cases.get("CONTRADICT", [])
    support = cases.get("SUPPORT", [])
    return (
        _share([c.similarity >= at[0] for c in contra]),
        _share([c.verdict(at) == "supported" for c in contra]),
        _share([c.similarity >= at[0] and c.verdict(at) == "contradicted" for c in support]),
    )


def _sweep_lines(sweep: dict[float, float] | None) -> list[str]:
    if not sweep:
        return []
    best = max(sweep, key=lambda w: (sweep[w], -abs(w - HYBRID_TERMS_WEIGHT)))
    return [
        "The hybrid weight is fitted on the train pairs: the share of train lines whose top",
        "sentence lies inside a rationale, for each weight of the terms side (the embedding",
        f"side has the rest). Train picks {best:.1f}; groundkit ships {HYBRID_TERMS_WEIGHT:.1f}.",
        "",
        markdown_table(
            ["terms weight", *(f"{w:.1f}" for w in sweep)],
            [["train, top inside a rationale", *(f"{v:.3f}" for v in sweep.values())]],
        ),
        "",
    ]


def render(
    data: Path,
    pairs: list[Pair],
    scores: _Scores,
    answers: dict[str, dict[str, dict[str, list[Checked]]]],
    chosen: dict[str, tuple[float, float] | None],
    embedder_name: str | None,
    sweep: dict[float, float] | None = None,
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
                f"{np.mean(scores.within.get(method, [0.0])):.3f}",
                f"{np.mean(list(merged.values())):.3f}",
                "-" if ms is None else f"{ms / len(values):.2f}",
            ]
        )
    # Verdicts at the thresholds chosen on the train pairs (the shipped ones without them).
    used: Thresholds = {
        method: chosen.get(method) or (SUPPORTED_THRESHOLDS[method], WEAK_THRESHOLDS[method])
        for method in SUPPORTED_THRESHOLDS
    }
    checked = [row for split, runs in answers.items() for row in answer_rows(runs, split, used)]
    fitted = []
    for method in dict.fromkeys(m for runs in answers.values() for m in runs):
        picked = chosen.get(method)
        shown = ("-", "-") if picked is None else (f"{picked[0]:.2f}", f"{picked[1]:.2f}")
        fitted.append(
            [
                method,
                *shown,
                f"{SUPPORTED_THRESHOLDS[method]:.2f}",
                f"{WEAK_THRESHOLDS[method]:.2f}",
            ]
        )
    headline = [
        [split, method, *_headline(runs, method, used[method])]
        for split, runs in answers.items()
        for method in runs
    ]
    lines = [
        "## Evidence sentences and answer checks",
        "",
        f"Generated by `evals/evidence.py`: `{command_line()}`.",
        "",
        *_wrapped(
            f"{len(pairs)} (claim, cited abstract) pairs of `{data.name}/evidence-test.jsonl`, "
            "each with its gold rationale sentences; each document as its file holds it (title, "
            "blank line, abstract), sentences split by "
            "`groundkit.verification.sentence_spans`. A method's top sentence is a hit when it "
            "overlaps a gold rationale sentence by at least half of "
            "the shorter of the two; the stricter column counts it only when it lies inside a "
            "rationale (a title never does). Some claims list several rationale sets for one "
            "abstract, each on its own line: the first columns score each line on its own set "
            "(a single top sentence can match only one), the last merges the sets of each "
            f"(claim, abstract) ({merged_count} pairs)."
        ),
        f"Embedder: `{embedder_name or 'none'}`. Term weights: the collection's BM25 idf.",
        "",
        markdown_table(
            [
                "method",
                "top sentence is gold (per line)",
                "top sentence inside a rationale",
                "merged pairs",
                "ms per abstract",
            ],
            rows,
        ),
        "",
        "`terms`, `embedding` and `hybrid` are what `result.evidence` computes for a bm25, dense",
        "and hybrid search. Evidence is body text: a title, heading or front-matter line is",
        "never an evidence sentence when the chunk has body sentences, so the document's title",
        "line, often the sentence closest to the claim, is passed over.",
        "",
        *_sweep_lines(sweep),
        "### Answer checks",
        "",
        'The answer `"<claim> [1]."` is checked with `verify_answer` against one cited result:',
        "the best chunk of the abstract that supports the claim (SUPPORT), of the abstract that",
        "contradicts it (CONTRADICT), or the best BM25 hit for the claim that is not judged",
        "relevant (irrelevant). The default claim judge (`RuleClaimJudge`: numbers, negation,",
        "direction words) reads every sentence close enough to be supported or weak against its",
        "two closest cited sentences.",
        "",
        "Headline, fitted on the train pairs and reported on both (test is held out):",
        "",
        markdown_table(
            [
                "pairs",
                "method",
                "CONTRADICT read supported, similarity alone",
                "CONTRADICT read supported, with the claim check",
                "SUPPORT that lose supported (read contradicted)",
            ],
            headline,
        ),
        "",
        "Every case, at the thresholds chosen on the train pairs (below): the share that reaches",
        "`supported` by similarity, the share whose verdict is `supported` after the claim check,",
        "the share `contradicted`, the share reaching `weak`, and the median similarity.",
        "",
        markdown_table(
            [
                "pairs",
                "method",
                "cited abstract",
                "answers",
                "similar enough for supported",
                "verdict supported",
                "verdict contradicted",
                "supported or weak by similarity",
                "median",
            ],
            checked,
        ),
        "",
        "Thresholds chosen by this run on the train pairs (largest gap between SUPPORT and",
        "irrelevant; weak where 95% of SUPPORT passes) next to the shipped ones:",
        "",
        markdown_table(
            [
                "method",
                "supported (train)",
                "weak (train)",
                "supported (shipped)",
                "weak (shipped)",
            ],
            fitted,
        ),
        "",
        "The claim check finds contradictions a reader could point at: a number, a negation, a",
        "direction word. A CONTRADICT abstract that disagrees in other words (a different",
        "population, a hedged finding, a result about a neighbouring quantity) still shares the",
        "claim's words and topic, so it reads `supported`: `supported` says the cited text is",
        "about what the sentence says and no checked cue disagrees, not that it agrees.",
        "",
        "The other judges are not measured here: `EntailmentModelJudge` reads with the NLI model",
        "it is given and `ChatClaimJudge` with the chat model behind its endpoint, so each brings",
        "that model's quality (and cost). No model ships with groundkit, and no NLI weights were",
        "available offline where these figures were taken; the tests check their mechanics only.",
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
    train_file = data / "evidence-train.jsonl"
    train = load_pairs(train_file) if train_file.exists() else []
    for p in [*pairs, *train]:  # the spans index the text field, not the file written for it
        text = dataset.corpus[p.doc_id][1]
        assert all(0 <= a < b <= len(text) for a, b in p.gold), p
    embedder: EmbeddingProtocol | None = None
    if args.embedder:
        embedder = SentenceTransformerEmbedder(args.embedder)
    answers: dict[str, dict[str, dict[str, list[Checked]]]] = {}
    with tempfile.TemporaryDirectory(prefix="groundkit-evidence-") as tmp:
        root = Path(tmp)
        async with ingest_dataset(dataset, root) as ingested:
            weigh = await _weights_of(ingested.collection)
            sweep = (
                await hybrid_sweep(dataset, train, weigh, embedder)
                if embedder is not None and train
                else None
            )
            scores, _ = await evidence_run(dataset, pairs, weigh, embedder)
            if train:
                answers["train"] = await answer_run(
                    dataset, train, ingested.collection, root, embedder
                )
            answers["test"] = await answer_run(dataset, pairs, ingested.collection, root, embedder)
    fit = answers.get("train", {})
    chosen = {
        method: choose_thresholds(
            [c.similarity for c in fit.get(method, {}).get("SUPPORT", [])],
            [c.similarity for c in fit.get(method, {}).get("irrelevant", [])],
        )
        for method in SUPPORTED_THRESHOLDS
    }
    lines = render(data, pairs, scores, answers, chosen, args.embedder, sweep)
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
