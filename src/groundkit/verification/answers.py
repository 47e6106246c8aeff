"""Check an answer written from search results, sentence by sentence.

An LLM answer cites results with markers ("... lowers risk [2].") and may
quote them. ``verify_answer`` finds the markers, splits the answer into
sentences carrying them, re-reads every cited span from its source (the span
must still be what was indexed), checks each quoted passage inside the spans
its sentence cites, and compares each unquoted sentence with the closest
sentence of the results it cites. Each sentence gets one verdict:

- ``quoted``: every passage it quotes is inside a span it cites, and that span verifies;
- ``supported`` / ``weak`` / ``unsupported``: no quote; its closest cited sentence is
  at least ``supported_threshold`` similar, at least ``weak_threshold``, or less;
- ``contradicted``: it would be ``supported`` or ``weak``, but the claim judge
  (``claim_judge``; by default ``RuleClaimJudge``: numbers, negation, direction
  words) finds its closest cited sentences contradict it; the detail says why;
- ``misquoted``: a quoted passage is in none of the spans it cites;
- ``uncited``: a claim with no marker; ``no_claim``: too short, a question or a
  lead-in ("Here is what I found:"), so nothing to check;
- ``dangling``: a marker names no result;
- ``drifted`` / ``unresolvable``: none of the spans it cites still holds its indexed text.

The report also gives ALCE's citation recall and precision (``attribution.py``),
with these verdicts as the support judgement.

A cited span is judged once, as ``check_citation`` judges it, and the report's
``citations`` lists those verdicts: a span whose text ``moved`` intact still
supports its sentences (their verdicts are as if it had not moved), and
``citations`` says where its text is now.

Similarity is not entailment: a sentence that contradicts its source while
sharing its words, in a way the claim judge does not see, reads as
``supported``. The thresholds and how often that happens are measured
(``python -m evals.evidence``; docs/quality.md). Headings, titles and front
matter are never compared with: evidence is body text.
"""

from __future__ import annotations

import asyncio
import heapq
import re
from bisect import bisect_left, bisect_right
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Literal, TypeVar

import numpy as np

from groundkit.config import DEFAULT_MAX_FILE_BYTES
from groundkit.contracts import (
    ANSWER_PROBLEMS,
    AnswerReport,
    AnswerSentence,
    AnswerVerdict,
    Citation,
    EvidenceMethod,
    EvidenceSpan,
    FetchResult,
    MultiSearchResponse,
    QuoteCheck,
    RetrievalResult,
    SearchResponse,
)
from groundkit.errors import GroundkitError, InvalidQueryError, RetrievalError
from groundkit.lexical.analyzer import Analyzer
from groundkit.providers import checked
from groundkit.providers.protocols import EmbeddingProtocol
from groundkit.retrieval.evidence import body_spans, rank_evidence
from groundkit.storage.snapshots import SnapshotLocation
from groundkit.utils.sentences import sentence_spans
from groundkit.utils.text import describe_unencodable
from groundkit.verification.attribution import (
    SUPPORTING,
    citation_scores,
    first_relevance,
    relevance_of,
)
from groundkit.verification.claims import (
    EVIDENCE_SENTENCES,
    INLINE_CHARS,
    ClaimJudge,
    ClaimJudgement,
    ClaimPair,
    RuleClaimJudge,
)
from groundkit.verification.markers import CallerPattern, Marker, find_markers
from groundkit.verification.markers import marker_pattern as compile_markers
from groundkit.verification.quotes import Locator, QuoteChecker, Reader

__all__ = ["SUPPORTED_THRESHOLDS", "WEAK_THRESHOLDS", "AnswerChecker", "verify_answer"]

Cited = SearchResponse | MultiSearchResponse | Sequence[RetrievalResult]

# Fitted on the train pairs of ``python -m evals.evidence`` (docs/quality.md): a
# claim citing the abstract that supports it against one citing an abstract
# retrieved for it that is not relevant, body sentences only.
SUPPORTED_THRESHOLDS: dict[str, float] = {"embedding": 0.68, "terms": 0.44}
WEAK_THRESHOLDS: dict[str, float] = {"embedding": 0.52, "terms": 0.22}

# Quoted passages: straight, curly and guillemet double quotes, CJK corner brackets,
# each opener with its closer; a straight quote also ends at a line break.
_QUOTE_MARKS = {
    '"': '"',
    "\u201c": "\u201d",
    "\u00ab": "\u00bb",
    "\u300c": "\u300d",
    "\u300e": "\u300f",
}
_OPENER = re.compile("[" + "".join(_QUOTE_MARKS) + "]")
_MAX_QUOTE = 4000
_WORD = re.compile(r"[^\W_]+")
# A sentence with fewer words than this, and no marker, states nothing to check.
_MIN_CLAIM_WORDS = 4
_MAX_ANSWER_CHARS = 200_000
_EXCERPT = 48
# ALCE precision weighs at most this many distinct intact citations of a sentence (each
# alone, and the rest without it): more is over-citation, and bounds the judge's batch.
MAX_WEIGHED_CITATIONS = 20


_Resolver = Callable[[str], int | None]
T = TypeVar("T")


async def _cpu(off_loop: bool, work: Callable[[], T]) -> T:
    """``work()``, in a worker thread when ``off_loop`` (else inline)."""
    return await asyncio.to_thread(work) if off_loop else work()


@dataclass
class _Sentence:
    start: int
    end: int
    markers: list[Marker] = field(default_factory=list)
    quotes: list[tuple[int, int]] = field(default_factory=list)
    # Every label of its markers in order, and the result each names (None: none).
    labels: list[str] = field(default_factory=list)
    positions: list[int | None] = field(default_factory=list)

    def cited(self, intact: Mapping[int, FetchResult]) -> list[int]:
        """The results it cites whose text the source still holds (verified or moved),
        once each, in marker order."""
        return list(dict.fromkeys(p for p in self.positions if p is not None and _holds(intact[p])))


def _holds(span: FetchResult) -> bool:
    return span.verification in ("verified", "moved")


@dataclass(frozen=True)
class _Near:
    """What a subset's check needs of its closest cited sentences: the score of the best
    and the sentences its judge reads."""

    claim: str
    score: float
    sentences: tuple[str, ...]


@dataclass(frozen=True)
class _Closest:
    """A claim, its closest cited sentence and score, and the sentences its judge reads."""

    claim: str
    best: EvidenceSpan
    score: float
    sentences: tuple[str, ...]
    # Each cited result's best few sentences, best first: ``(-score, cited order,
    # sentence, result)``. A subset of the citations ranks as this list without the rest.
    ranked: tuple[tuple[float, int, int, int], ...] = ()


class AnswerChecker:
    """Checks answers against the results they cite, reading each source once."""

    def __init__(
        self,
        allowed_base_dir: Path | str,
        *,
        snapshot_dir: SnapshotLocation | None = None,
        max_bytes: int | None = DEFAULT_MAX_FILE_BYTES,
        embedder: EmbeddingProtocol | None = None,
        analyzer: Analyzer | None = None,
        supported_threshold: float | None = None,
        weak_threshold: float | None = None,
        locator: Locator | None = None,
        claim_judge: ClaimJudge | None = None,
        reader: Reader | None = None,
    ) -> None:
        if claim_judge is not None and not isinstance(claim_judge, ClaimJudge):
            raise RetrievalError(
                "claim_judge must be a ClaimJudge (a name and an async judge(pairs)), "
                f"not {type(claim_judge).__name__}"
            )
        # A model name where the object belongs failed deep inside with AttributeError.
        if embedder is not None and not callable(getattr(embedder, "embed_documents", None)):
            raise RetrievalError(
                "embedder must be an embedder (an object with async embed_documents(texts)), "
                f"not {type(embedder).__name__}"
            )
        if analyzer is not None and not callable(getattr(analyzer, "terms", None)):
            raise RetrievalError(
                f"analyzer must be an Analyzer (groundkit.lexical), not {type(analyzer).__name__}"
            )
        self._claim_judge: ClaimJudge = claim_judge or RuleClaimJudge(analyzer)
        self._quotes = QuoteChecker(
            allowed_base_dir,
            snapshot_dir=snapshot_dir,
            max_bytes=max_bytes,
            locator=locator,
            reader=reader,
        )
        self._embedder = embedder
        self._analyzer = analyzer or Analyzer()
        self.method: Literal["embedding", "terms"] = (
            "embedding" if embedder is not None else "terms"
        )
        supported = (
            SUPPORTED_THRESHOLDS[self.method]
            if supported_threshold is None
            else supported_threshold
        )
        weak = WEAK_THRESHOLDS[self.method] if weak_threshold is None else weak_threshold
        for name, value in (("supported_threshold", supported), ("weak_threshold", weak)):
            if (
                isinstance(value, bool)
                or not isinstance(value, int | float)
                or not -1.0 <= value <= 1.0
            ):
                raise RetrievalError(f"{name} must be a number from -1 to 1, got {value!r}")
        if weak > supported:
            raise RetrievalError(
                f"weak_threshold ({weak}) must not be above supported_threshold ({supported})"
            )
        self.supported_threshold = float(supported)
        self.weak_threshold = float(weak)

    async def check(
        self,
        answer: str,
        cited: Cited,
        *,
        markers: Mapping[str, str] | None = None,
        marker_pattern: str | re.Pattern[str] | None = None,
    ) -> AnswerReport:
        """The report on ``answer``; see ``verify_answer``."""
        results = _results_of(cited)
        _check_answer(answer)
        pattern = compile_markers(marker_pattern)
        resolve = _resolver(results, markers)
        # Scanning and judging are CPU work on up to 200,000 characters: they run in
        # a worker thread, so the event loop serves other requests meanwhile. A
        # caller's pattern always does (it may run up to its time limit).
        off = len(answer) > INLINE_CHARS
        sentences = await _cpu(
            off or isinstance(pattern, CallerPattern),
            lambda: _read_answer(answer, pattern, resolve),
        )
        named = sorted({p for s in sentences for p in s.positions if p is not None})
        # Each cited span judged once (the verdict every entry point gives).
        intact = {p: await self._quotes.span_verdict(results[p]) for p in named}
        _same_passage_once(sentences, results, named)
        closest, spans = await self._closest(answer, results, sentences, intact)
        judged = await self._claims(closest)
        made = await _cpu(
            off, lambda: self._report(answer, results, sentences, intact, closest, judged)
        )
        # ALCE precision: only a supported sentence citing several results has subsets
        # to weigh; they rank from its own comparison, and only judge pairs not yet read
        # go to the claim judge (a second batch).
        weighed = [
            i
            for i, (s, sentence) in enumerate(zip(sentences, made.sentences, strict=True))
            if sentence.verdict in SUPPORTING and len(s.cited(intact)) > 1
        ]
        subsets = (
            await _cpu(
                off,
                lambda: self._subset_closest(results, sentences, intact, closest, spans, weighed),
            )
            if weighed
            else []
        )
        judged_subsets = await self._claims(
            {n: near for n, (_, _, _, near) in enumerate(subsets) if near is not None},
            judged_by=(closest, judged),
        )
        return await _cpu(
            off,
            lambda: self._attribute(
                answer, results, made, sentences, intact, subsets, judged_subsets
            ),
        )

    def _report(
        self,
        answer: str,
        results: list[RetrievalResult],
        sentences: list[_Sentence],
        intact: Mapping[int, FetchResult],
        closest: Mapping[int, _Closest],
        judged: Mapping[int, ClaimJudgement],
    ) -> AnswerReport:
        citations = [r.citation for r in results]  # made once, not once per sentence
        out = [
            self._judge(answer, results, s, intact, closest.get(i), judged.get(i), citations)
            for i, s in enumerate(sentences)
        ]
        counts = Counter(s.verdict for s in out)
        problems = [
            f"sentence {i + 1} ({s.verdict}): {_excerpt(s.text)}: {s.detail}"
            for i, s in enumerate(out)
            if s.verdict in ANSWER_PROBLEMS
        ]
        return AnswerReport(
            sentences=out,
            counts={verdict: counts[verdict] for verdict in sorted(counts)},
            problems=problems,
            method=self.method,
            supported_threshold=self.supported_threshold,
            weak_threshold=self.weak_threshold,
            citations=list(intact.values()),  # in result order: named was sorted
            claim_judge=self._claim_judge.name,
        )

    def _subset_closest(
        self,
        results: list[RetrievalResult],
        sentences: list[_Sentence],
        intact: Mapping[int, FetchResult],
        closest: Mapping[int, _Closest],
        spans: Mapping[int, list[tuple[int, int]]],
        weighed: list[int],
    ) -> list[tuple[int, bool, int, _Near | None]]:
        """``(sentence, alone, result, closest)`` for each subset ALCE precision weighs of
        the ``weighed`` sentences: each usable result alone (``alone`` true) and the
        others without it. A quoted sentence needs no closest. An unquoted one's subset
        ranks as the sentence's own ranking without the other results (each result's
        best few are there), so nothing is compared again: a result alone is its own
        entries, the others without it the first ``2 * EVIDENCE_SENTENCES`` entries
        less its own. Work per sentence is linear in the results it cites."""
        out: list[tuple[int, bool, int, _Near | None]] = []
        for i in weighed:
            usable = sentences[i].cited(intact)[:MAX_WEIGHED_CITATIONS]
            parent = closest.get(i)
            if parent is None:  # quoted
                out.extend((i, kind, u, None) for u in usable for kind in (True, False))
                continue
            own: dict[int, list[tuple[float, int, int, int]]] = {}
            for entry in parent.ranked:
                own.setdefault(entry[3], []).append(entry)
            weighed_here = set(usable)
            head = [e for e in parent.ranked if e[3] in weighed_here][: 2 * EVIDENCE_SENTENCES]
            texts: dict[tuple[int, int], str] = {}
            for u in usable:
                for kind, top in (
                    (True, own.get(u, [])[:EVIDENCE_SENTENCES]),
                    (False, [e for e in head if e[3] != u][:EVIDENCE_SENTENCES]),
                ):
                    out.append((i, kind, u, _near(parent.claim, top, results, spans, texts)))
        return out

    def _attribute(
        self,
        answer: str,
        results: list[RetrievalResult],
        report: AnswerReport,
        sentences: list[_Sentence],
        intact: Mapping[int, FetchResult],
        subsets: list[tuple[int, bool, int, _Near | None]],
        judged: Mapping[int, ClaimJudgement],
    ) -> AnswerReport:
        """``report`` with each sentence's ``relevant`` and the citation recall and
        precision (``attribution.py``): a subset supports a sentence when the same check,
        run as if the sentence cited only it, says ``quoted`` or ``supported``."""
        citations = [r.citation for r in results]
        alone: dict[int, dict[int, bool]] = {}
        without: dict[int, dict[int, bool]] = {}
        holders: dict[int, list[set[int]]] = {}  # per quoted sentence, who holds each quote
        for n, (i, kind, u, near) in enumerate(subsets):
            s = sentences[i]
            if s.quotes:
                if i not in holders:
                    holders[i] = [
                        {
                            r
                            for r in s.cited(intact)[:MAX_WEIGHED_CITATIONS]
                            if self._quote(answer, a, b, s, results, [r], citations, intact).found
                        }
                        for a, b in s.quotes
                    ]
                # Each quote held by a result of the subset: by u, or by one but u.
                held = all((u in h) if kind else bool(h - {u}) for h in holders[i])
            else:
                held = near is not None and self._supports(near, judged.get(n))
            (alone if kind else without).setdefault(i, {})[u] = held
        out = list(report.sentences)
        for i, (s, sentence) in enumerate(zip(sentences, out, strict=True)):
            # The rest already have their final ``relevant`` (``first_relevance``).
            if sentence.verdict in SUPPORTING and len(sentence.cited) > 1:
                cited = list(dict.fromkeys(p for p in s.positions if p is not None))
                # Past the cap a sentence is weighed as if it cited its first ones only
                # (ALCE's script keeps three): the others count, never as relevant.
                usable = s.cited(intact)[:MAX_WEIGHED_CITATIONS]
                by_itself = alone.get(i, dict.fromkeys(usable, True))  # one usable: it is all
                others = without.get(i, dict.fromkeys(usable, False))
                flags = relevance_of(sentence.verdict, cited, usable, by_itself, others)
                out[i] = sentence.model_copy(update={"relevant": flags})
        recall, precision = citation_scores(out)
        return report.model_copy(
            update={"sentences": out, "citation_recall": recall, "citation_precision": precision}
        )

    def _supports(self, near: _Near, judged: ClaimJudgement | None) -> bool:
        """Whether ``_judge`` says ``supported`` for an unquoted sentence this close."""
        if judged is not None and judged.contradicted and near.score >= self.weak_threshold:
            return False
        return near.score >= self.supported_threshold

    async def _claims(
        self,
        closest: Mapping[int, _Closest] | Mapping[int, _Near],
        *,
        judged_by: tuple[Mapping[int, _Closest], Mapping[int, ClaimJudgement]] | None = None,
    ) -> dict[int, ClaimJudgement]:
        """The claim judge's reading of each sentence close enough to be supported or weak.
        With ``judged_by`` (the sentences' own closest and judgements), a pair read there
        or twice here is asked once: a subset's closest sentences are mostly its
        sentence's own (judges are deterministic, so the reading is the same)."""
        order = [i for i, c in closest.items() if c.score >= self.weak_threshold]
        if not order:
            return {}
        wanted = {i: ClaimPair(_tidy(closest[i].claim), closest[i].sentences) for i in order}
        if judged_by is None:
            pairs = [wanted[i] for i in order]
            return dict(zip(order, await self._ask(pairs), strict=True))
        before, readings = judged_by
        known = {
            ClaimPair(_tidy(before[i].claim), before[i].sentences): j for i, j in readings.items()
        }
        pairs = [p for p in dict.fromkeys(wanted.values()) if p not in known]
        if pairs:
            known.update(zip(pairs, await self._ask(pairs), strict=True))
        return {i: known[wanted[i]] for i in order}

    async def _ask(self, pairs: list[ClaimPair]) -> list[ClaimJudgement]:
        """The claim judge's judgements of ``pairs``, checked: one ``ClaimJudgement`` each."""
        judge = self._claim_judge
        try:
            got = await judge.judge(pairs)
        except GroundkitError:
            raise
        except Exception as exc:
            raise RetrievalError(
                f"the claim judge {judge.name!r} failed ({type(exc).__name__}); it must raise "
                "groundkit errors only"
            ) from None
        if not isinstance(got, list) or len(got) != len(pairs):
            raise RetrievalError(
                f"the claim judge {judge.name!r} returned "
                f"{len(got) if isinstance(got, list) else type(got).__name__} judgements "
                f"for {len(pairs)} claims"
            )
        for j in got:
            if not isinstance(j, ClaimJudgement):
                raise RetrievalError(
                    f"the claim judge {judge.name!r} returned a {type(j).__name__}, "
                    "not a ClaimJudgement"
                )
            # The reason goes into the report, which must stay writable as JSON.
            unwritable = (
                f"a judgement whose reason is a {type(j.reason).__name__}, not a str"
                if not isinstance(j.reason, str)
                else describe_unencodable(j.reason, "a judgement whose reason")
            )
            if unwritable is not None:
                raise RetrievalError(f"the claim judge {judge.name!r} returned {unwritable}")
        return got

    async def _closest(
        self,
        answer: str,
        results: list[RetrievalResult],
        sentences: list[_Sentence],
        intact: Mapping[int, FetchResult],
    ) -> tuple[dict[int, _Closest], dict[int, list[tuple[int, int]]]]:
        """Each cited, unquoted sentence's closest body sentences in its intact results,
        and the body sentences of each result compared."""
        claims: dict[int, str] = {}
        cited_by: dict[int, list[int]] = {}
        for i, s in enumerate(sentences):
            if s.quotes:
                continue
            usable = s.cited(intact)
            if usable:
                claims[i] = _cut(answer, s.start, s.end, s.markers)
                cited_by[i] = usable
        if not claims:
            return {}, {}
        used = sorted({r for rs in cited_by.values() for r in rs})
        spans = {
            r: body_spans(results[r].content, sentence_spans(results[r].content)) for r in used
        }
        off = len(answer) > INLINE_CHARS
        if self._embedder is None:
            by_terms = await _cpu(
                off, lambda: self._closest_by_terms(results, claims, cited_by, used, spans)
            )
            return by_terms, spans
        order = list(claims)
        texts = [claims[i] for i in order]
        keys = [(r, k) for r in used for k in range(len(spans[r]))]
        texts += [results[r].content[slice(*spans[r][k])] for r, k in keys]
        rows = np.asarray(
            await checked.documents(self._embedder, texts, for_query=True), dtype=np.float64
        )

        def best() -> dict[int, _Closest]:
            out: dict[int, _Closest] = {}
            claim_rows = {i: rows[n] for n, i in enumerate(order)}
            at = len(order)
            sentence_rows: dict[int, np.ndarray] = {}
            for r in used:
                sentence_rows[r] = rows[at : at + len(spans[r])]
                at += len(spans[r])
            for i, rs in cited_by.items():
                scores = [
                    (sentence_rows[r] @ claim_rows[i]).tolist() if spans[r] else [] for r in rs
                ]
                found = _closest_of(claims[i], results, rs, spans, scores, "embedding")
                if found is not None:
                    out[i] = found
            return out

        return await _cpu(off, best), spans

    def _closest_by_terms(
        self,
        results: list[RetrievalResult],
        claims: Mapping[int, str],
        cited_by: Mapping[int, list[int]],
        used: list[int],
        spans: Mapping[int, list[tuple[int, int]]],
    ) -> dict[int, _Closest]:
        out: dict[int, _Closest] = {}
        terms = {
            r: [set(self._analyzer.terms(results[r].content[a:b])) for a, b in spans[r]]
            for r in used
        }
        for i, rs in cited_by.items():
            wanted = set(self._analyzer.terms(claims[i]))
            scores = [
                [len(wanted & held) / len(wanted) if wanted else 0.0 for held in terms[r]]
                for r in rs
            ]
            found = _closest_of(claims[i], results, rs, spans, scores, "terms")
            if found is not None:
                out[i] = found
        return out

    def _judge(
        self,
        answer: str,
        results: list[RetrievalResult],
        s: _Sentence,
        intact: Mapping[int, FetchResult],
        near: _Closest | None,
        judged: ClaimJudgement | None,
        citations: Sequence[Citation],
    ) -> AnswerSentence:
        labels, positions = s.labels, s.positions
        cited = [citations[i] for i in dict.fromkeys(p for p in positions if p is not None)]

        def verdict(
            name: AnswerVerdict,
            detail: str,
            quotes: Sequence[QuoteCheck] = (),
            best: tuple[EvidenceSpan, float] | None = None,
        ) -> AnswerSentence:
            return AnswerSentence(
                start_offset=s.start,
                end_offset=s.end,
                text=answer[s.start : s.end],
                verdict=name,
                detail=detail,
                markers=labels,
                cited=cited,
                quotes=list(quotes),
                evidence=None if best is None else best[0],
                similarity=None if best is None else best[1],
                relevant=first_relevance(name, len(cited)),
            )

        if not s.markers:
            if _is_claim(answer, s):
                return verdict("uncited", "a claim with no citation marker")
            return verdict("no_claim", "nothing to check (too short, a question or a lead-in)")
        dangling = [label for label, p in zip(labels, positions, strict=True) if p is None]
        if dangling:
            return verdict(
                "dangling",
                f"marker {', '.join(repr(d) for d in dangling)} names no result "
                f"(there are {len(results)}; numbers count from 1)",
            )
        usable = s.cited(intact)
        if not usable:
            problems = [intact[p] for p in positions if p is not None]
            worst: AnswerVerdict = (
                "drifted" if any(e.verification == "drifted" for e in problems) else "unresolvable"
            )
            return verdict(worst, "; ".join(dict.fromkeys(e.detail for e in problems)))
        if s.quotes:
            checks = [
                self._quote(answer, a, b, s, results, usable, citations, intact)
                for a, b in s.quotes
            ]
            failed = [c for c in checks if not c.found]
            if failed:
                shown = ", ".join(_excerpt(c.quote) for c in failed)
                return verdict("misquoted", f"quoted {shown}, which no span it cites holds", checks)
            return verdict(
                "quoted", f"all {len(checks)} quoted passage(s) found in the cited spans", checks
            )
        if near is None:
            return verdict("unsupported", "the cited results have no sentence to compare with")
        closest = (near.best, near.score)
        score = near.score
        shown = f"{score:.2f} ({self.method})"
        if judged is not None and judged.contradicted and score >= self.weak_threshold:
            reason = judged.reason or f"{self._claim_judge.name} reads a contradiction"
            return verdict(
                "contradicted",
                f"{reason} (closest cited sentence scores {shown})",
                best=closest,
            )
        if score >= self.supported_threshold:
            return verdict("supported", f"closest cited sentence scores {shown}", best=closest)
        if score >= self.weak_threshold:
            return verdict(
                "weak",
                f"closest cited sentence scores {shown}, below {self.supported_threshold:.2f}",
                best=closest,
            )
        return verdict(
            "unsupported",
            f"closest cited sentence scores {shown}, below {self.weak_threshold:.2f}",
            best=closest,
        )

    def _quote(
        self,
        answer: str,
        start: int,
        end: int,
        s: _Sentence,
        results: list[RetrievalResult],
        usable: list[int],
        citations: Sequence[Citation],
        intact: Mapping[int, FetchResult],
    ) -> QuoteCheck:
        """The quote ``answer[start:end]`` checked as written, then with the markers inside
        it cut out, against each span it may come from; the first that holds it wins,
        else the first span's verdict stands. The spans it may come from are judged
        already (``intact``), so this is CPU work only."""
        quote = answer[start:end]
        plain = _cut(answer, start, end, s.markers)
        first: QuoteCheck | None = None
        for candidate in dict.fromkeys([quote, plain]):
            for r in usable:
                content = results[r].content
                check = self._quotes.check_read(candidate, citations[r], content, intact[r])
                if check.found:
                    return check.model_copy(update={"quote": quote})
                first = first or check
        assert first is not None
        return first.model_copy(update={"quote": quote})


async def verify_answer(
    answer: str,
    cited: Cited,
    allowed_base_dir: Path | str,
    *,
    markers: Mapping[str, str] | None = None,
    marker_pattern: str | re.Pattern[str] | None = None,
    embedder: EmbeddingProtocol | None = None,
    analyzer: Analyzer | None = None,
    snapshot_dir: SnapshotLocation | None = None,
    max_bytes: int | None = DEFAULT_MAX_FILE_BYTES,
    supported_threshold: float | None = None,
    weak_threshold: float | None = None,
    claim_judge: ClaimJudge | None = None,
) -> AnswerReport:
    """Check every sentence of ``answer`` against the results it cites.

    ``cited`` is the response (or list of results) the answer was written from;
    marker ``[n]`` means its n-th result. ``markers`` maps other labels
    (``[^a]``, or what ``marker_pattern``'s first group captures) to chunk ids.
    ``marker_pattern`` (a regex, replacing the default forms) runs with a time
    limit: one that backtracks without bound raises ``RetrievalError``.
    With an ``embedder`` unquoted sentences are compared with cited sentences by
    cosine similarity, else by the share of their terms the cited sentence holds.
    Sources are read from ``allowed_base_dir`` (and ``snapshot_dir`` for URLs and
    records), once each. A sentence close enough to be supported or weak is then
    read by ``claim_judge`` against its closest cited sentences (default:
    ``RuleClaimJudge``, numbers, negation and direction words) and reads
    ``contradicted`` when the judge finds a contradiction. Never raises for a
    source problem: that is a verdict.
    """
    checker = AnswerChecker(
        allowed_base_dir,
        snapshot_dir=snapshot_dir,
        max_bytes=max_bytes,
        embedder=embedder,
        analyzer=analyzer,
        supported_threshold=supported_threshold,
        weak_threshold=weak_threshold,
        claim_judge=claim_judge,
    )
    return await checker.check(answer, cited, markers=markers, marker_pattern=marker_pattern)


# -- pieces ------------------------------------------------------------------------


def _results_of(cited: object) -> list[RetrievalResult]:
    if isinstance(cited, SearchResponse | MultiSearchResponse):
        return list(cited.results)
    if isinstance(cited, Sequence) and not isinstance(cited, str | bytes):
        results = list(cited)
        for r in results:
            if not isinstance(r, RetrievalResult):
                raise RetrievalError(
                    f"cited results must be RetrievalResult objects, found {type(r).__name__}"
                )
        return results
    raise RetrievalError(
        "verify_answer takes the SearchResponse (or list of results) the answer was "
        f"written from, not {type(cited).__name__}"
    )


def _check_answer(answer: object) -> None:
    if not isinstance(answer, str):
        raise RetrievalError(f"the answer must be a str, not {type(answer).__name__}")
    if len(answer) > _MAX_ANSWER_CHARS:
        raise RetrievalError(
            f"the answer is {len(answer)} characters; at most {_MAX_ANSWER_CHARS} are checked"
        )
    problem = describe_unencodable(answer, "the answer")
    if problem is not None:
        raise RetrievalError(problem)


# A rank longer than this names no result of any list (and int() refuses thousands of digits).
_MAX_RANK_DIGITS = 18


def _resolver(results: list[RetrievalResult], markers: Mapping[str, str] | None) -> _Resolver:
    by_chunk: dict[str, int] = {}
    for i, r in enumerate(results):
        by_chunk.setdefault(r.chunk_id, i)
    if markers is not None and not isinstance(markers, Mapping):
        raise RetrievalError(f"markers must map labels to chunk ids, not {type(markers).__name__}")
    mapping = dict(markers or {})
    for label, chunk_id in mapping.items():
        if not isinstance(label, str) or not isinstance(chunk_id, str):
            raise InvalidQueryError(
                f"markers must map labels (str) to chunk ids (str); {label!r} maps to a "
                f"{type(chunk_id).__name__}"
                if isinstance(label, str)
                else f"markers must map labels (str) to chunk ids (str), not a "
                f"{type(label).__name__} label"
            )

    def resolve(label: str) -> int | None:
        if label in mapping:
            return by_chunk.get(mapping[label])
        if label.isdecimal() and len(label) <= _MAX_RANK_DIGITS:
            n = int(label)
            return n - 1 if 1 <= n <= len(results) else None
        return None

    return resolve


def _read_answer(
    answer: str, pattern: re.Pattern[str] | CallerPattern, resolve: _Resolver
) -> list[_Sentence]:
    """The answer's sentences with their markers, quotes, labels and the results named."""
    sentences = _sentences(answer, find_markers(answer, pattern))
    for s in sentences:
        s.labels = [label for m in s.markers for label in m.labels]
        s.positions = [resolve(label) for label in s.labels]
    return sentences


def _sentences(answer: str, markers: list[Marker]) -> list[_Sentence]:
    """The answer's sentences, each with the markers and quotes it carries.

    Markers are blanked out before splitting (so "risk.[2] Next" splits after
    the marker) and a marker between two sentences belongs to the one before
    it: a marker follows what it supports. A quote the splitter cut in two
    joins its pieces back into one sentence. Sentences, markers and quotes are
    all in text order, so each is placed by a binary search, never a rescan.
    """
    pieces, at = [], 0
    for m in markers:
        pieces += [answer[at : m.start], " " * (m.end - m.start)]
        at = m.end
    blanked = "".join([*pieces, answer[at:]])
    quotes = _find_quotes(answer)
    spans = _join_quoted(_split_lead_ins(blanked, sentence_spans(blanked)), quotes)
    sentences = [_Sentence(a, b) for a, b in spans]
    starts = [a for a, _ in spans]
    for m in markers:
        if not sentences:
            sentences.append(_Sentence(m.start, m.end))
            starts.append(m.start)
        # The last sentence starting at or before it (sentences never overlap).
        s = sentences[max(bisect_right(starts, m.start) - 1, 0)]
        s.markers.append(m)
        s.start, s.end = min(s.start, m.start), max(s.end, m.end)
    starts = [s.start for s in sentences]
    for qa, qb in quotes:
        i = bisect_right(starts, qa) - 1
        if i >= 0 and qb <= sentences[i].end:
            sentences[i].quotes.append((qa, qb))
    return sentences


def _find_quotes(answer: str) -> list[tuple[int, int]]:
    """``(start, end)`` of each quoted passage's text, in order; blank ones left out.

    A passage runs from an opening mark to the first closing mark after it, of
    1 to 4,000 characters (a straight quote also stops at a line break), and the
    search resumes after it. The next closing mark is found by binary search in
    the sorted offsets of each mark, so an answer of lone openers stays linear.
    """
    stops = {
        mark: [m.start() for m in re.finditer(mark, answer)]
        for mark in (*_QUOTE_MARKS.values(), "\n")
    }
    out: list[tuple[int, int]] = []
    resume = 0
    for opener in _OPENER.finditer(answer):
        at = opener.start()
        if at < resume:
            continue
        mark = opener.group()
        close = _next(stops[_QUOTE_MARKS[mark]], at)
        if close is None or not 1 < close - at <= _MAX_QUOTE + 1:
            continue
        if mark == '"' and (line := _next(stops["\n"], at)) is not None and line < close:
            continue
        if answer[at + 1 : close].strip():
            out.append((at + 1, close))
        resume = close + 1
    return out


def _next(offsets: list[int], after: int) -> int | None:
    """The first of the sorted ``offsets`` past ``after``."""
    i = bisect_right(offsets, after)
    return offsets[i] if i < len(offsets) else None


def _join_quoted(
    spans: list[tuple[int, int]], quotes: list[tuple[int, int]]
) -> list[tuple[int, int]]:
    """The sentence ``spans`` with the ones each quote overlaps joined into one (both
    lists in order): one pass, the sentences a quote overlaps being a run at the end
    of what was kept so far."""
    out: list[tuple[int, int]] = []
    i = 0
    for qa, qb in quotes:
        while i < len(spans) and spans[i][0] < qb:
            out.append(spans[i])
            i += 1
        j = len(out)
        while j > 0 and out[j - 1][1] > qa:
            j -= 1
        if len(out) - j > 1:
            out[j:] = [(out[j][0], out[-1][1])]
    out.extend(spans[i:])
    return out


# A lead-in ("Here is what I found:") before a capital or a line break is a sentence
# of its own in an answer; in a source, "Results: Tea helped" stays one sentence.
_LEAD_IN = re.compile(r":[ \t]*\n\s*|:[ \t]+(?=[A-Z\u00c0-\u00de])")


def _split_lead_ins(text: str, spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for a, b in spans:
        start = a
        for m in _LEAD_IN.finditer(text, a, b):
            out.append((start, m.start() + 1))
            start = m.end()
        if start < b:
            out.append((start, b))
    return out


def _cut(text: str, start: int, end: int, markers: Sequence[Marker]) -> str:
    """``text[start:end]`` without the markers inside it (``markers`` in text order),
    whitespace runs made one space. The space before a marker goes with it unless a word
    follows: "preliminary [1]." reads "preliminary.", as the quoted source wrote it."""
    out, at = [], start
    for m in markers[bisect_left(markers, start, key=_start_of) :]:
        if m.start >= end:
            break
        if m.end <= end:
            before = text[at : m.start]
            after = text[m.end : m.end + 1]
            out.append(before if after.isalnum() else before.rstrip())
            at = m.end
    out.append(text[at:end])
    return " ".join("".join(out).split())


def _start_of(marker: Marker) -> int:
    return marker.start


def _is_claim(answer: str, s: _Sentence) -> bool:
    text = answer[s.start : s.end].strip()
    if text.endswith(("?", ":", "\uff1f", "\uff1a")):
        return False
    return len(_WORD.findall(text)) >= _MIN_CLAIM_WORDS


def _closest_of(
    claim: str,
    results: list[RetrievalResult],
    cited: list[int],
    spans: Mapping[int, list[tuple[int, int]]],
    scores: list[list[float]],
    method: EvidenceMethod,
) -> _Closest | None:
    """The claim's best ``EVIDENCE_SENTENCES`` cited sentences, best first (a tie goes to
    the result cited first, then to the earlier sentence).

    Only the best few of each result are ranked, and only the best is made a span: one
    claim is compared with every sentence it cites, and a sort of them all adds up.
    """
    ranked: list[tuple[float, int, int, int]] = []  # (-score, cited order, sentence, result)
    for n, (r, row) in enumerate(zip(cited, scores, strict=True)):
        for k in heapq.nsmallest(EVIDENCE_SENTENCES, range(len(row)), key=lambda k: (-row[k], k)):
            ranked.append((-float(row[k]), n, k, r))
    ranked.sort()
    found = _ranked_closest(claim, results, spans, ranked[:EVIDENCE_SENTENCES], method)
    return None if found is None else replace(found, ranked=tuple(ranked))


def _ranked_closest(
    claim: str,
    results: list[RetrievalResult],
    spans: Mapping[int, list[tuple[int, int]]],
    top: Sequence[tuple[float, int, int, int]],
    method: EvidenceMethod,
) -> _Closest | None:
    """The ``_Closest`` whose best cited sentences are ``top`` (ranked entries, best first)."""
    if not top:
        return None
    _, _, k, r = top[0]
    (best,) = rank_evidence(
        results[r].content, results[r].start_offset, [spans[r][k]], [-top[0][0]], method, limit=1
    )
    texts = tuple(" ".join(results[r].content[slice(*spans[r][k])].split()) for _, _, k, r in top)
    return _Closest(claim, best, best.score, texts)


def _near(
    claim: str,
    top: Sequence[tuple[float, int, int, int]],
    results: list[RetrievalResult],
    spans: Mapping[int, list[tuple[int, int]]],
    texts: dict[tuple[int, int], str],
) -> _Near | None:
    """The subset check's view of ranked entries ``top`` (best first); ``texts`` keeps
    each sentence's text, made once however many subsets rank it."""
    if not top:
        return None
    for _, _, k, r in top:
        if (r, k) not in texts:
            texts[(r, k)] = " ".join(results[r].content[slice(*spans[r][k])].split())
    return _Near(claim, -top[0][0], tuple(texts[(r, k)] for _, _, k, r in top))


def _same_passage_once(
    sentences: list[_Sentence], results: list[RetrievalResult], named: list[int]
) -> None:
    """Make each sentence name the first cited of results that are the same passage (a
    chunk id given twice): cited twice, a passage counts once and is compared once."""
    first: dict[tuple[str, str, int, int, str], int] = {}
    canon = {}
    for p in named:
        r = results[p]
        canon[p] = first.setdefault(
            (r.chunk_id, r.source, r.start_offset, r.end_offset, r.content), p
        )
    if len(first) == len(named):
        return
    for s in sentences:
        s.positions = [None if p is None else canon[p] for p in s.positions]


_SPACE_BEFORE_PUNCT = re.compile(r"\s+(?=[.,;:!?](?:\s|$))")


def _tidy(claim: str) -> str:
    """A claim as a judge reads it: no space left before punctuation where a marker was."""
    return _SPACE_BEFORE_PUNCT.sub("", claim)


def _excerpt(text: str) -> str:
    flat = " ".join(text.split())
    return repr(flat if len(flat) <= _EXCERPT else flat[: _EXCERPT - 1] + "\u2026")
