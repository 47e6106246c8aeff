"""Which sentences of a hit answer the query: evidence spans, computed when read.

A chunk of 1,600 characters is a poor thing to show as support; the sentence
inside it that carries the answer is what a reader (or an answer check) wants.
Every result of a search gets deferred evidence: nothing is split or scored
until ``result.evidence`` is read.

- ``terms``: each sentence scores the sum, over the query's terms it holds, of
  the term's weight in the query times its BM25 idf in the collection, with
  BM25's saturation of repeats and no length normalisation (a longer sentence
  that holds more of the query is better evidence, not a diluted one).
- ``embedding``: cosine similarity of each sentence and the query under the
  collection's embedder. The sentences of all results of one response are
  embedded in one batch, the first time any of them is read.
- ``hybrid``: both, each standardised over the chunk's sentences, summed with
  weights 0.7 (terms) and 0.3 (embedding), fitted on claim-verification training
  pairs (``python -m evals.evidence``).

Evidence is body text (``body_spans``): headings, title lines and front matter
are never evidence while the chunk has other sentences.

``evals/evidence.py`` measures each against the gold rationale sentences of a
claim-verification set (docs/quality.md); adr/0042-evidence-spans.md says why
these choices.
"""

from __future__ import annotations

import asyncio
import math
import re
import threading
from collections import Counter
from collections.abc import Callable, Coroutine, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np
import numpy.typing as npt

from groundkit.contracts import EvidenceMethod, EvidenceSpan, RetrievalResult
from groundkit.lexical.analyzer import Analyzer
from groundkit.lexical.bm25 import CURRENT, BM25Index, View
from groundkit.providers import checked
from groundkit.providers.protocols import EmbeddingProtocol
from groundkit.utils.sentences import sentence_spans

__all__ = [
    "EVIDENCE_LIMIT",
    "HYBRID_TERMS_WEIGHT",
    "EvidenceBatch",
    "body_spans",
    "load_evidence",
    "query_weights",
    "rank_evidence",
    "term_scores",
]

# At most this many sentences per result.
EVIDENCE_LIMIT = 3
# The terms side's share of a hybrid evidence score (the embedding side has the rest);
# fitted on the train pairs of evals/evidence.py (top sentence inside a rationale).
HYBRID_TERMS_WEIGHT = 0.7
# BM25's saturation of a term repeated within one sentence.
_K1 = 1.2

T = TypeVar("T")
Span = tuple[int, int]

# A Markdown ATX heading line, and a setext underline.
_ATX = re.compile(r"[ \t]{0,3}#{1,6}(?:[ \t]|$)")
_SETEXT = re.compile(r"\n[ \t]{0,3}(?:=+|-{2,})[ \t]*$")
_LIST_ITEM = re.compile(r"[ \t]*(?:[-*+\u2022]|\d{1,3}[.)])\s")
# What ends a line of prose: a sentence ender, then closing quotes or brackets.
_PROSE_END = re.compile(r"[.!?\u2026:;\u3002\uff01\uff1f][\"'\u201d\u2019\u00bb)\]}]*$")
_FRONT_MATTER = re.compile(r"(?:---|\+\+\+)[ \t]*\n.*?\n(?:---|\+\+\+|\.\.\.)[ \t]*(?:\n|$)", re.S)
# A title line longer than this many words is read as prose that lost its full stop.
_TITLE_WORDS = 30


def body_spans(content: str, spans: Sequence[Span]) -> list[Span]:
    """The sentences of ``content`` that are body text, headings cut off.

    A heading, a title line or a front-matter block states a topic, not a
    finding: shown as evidence it quotes the document's name back at the
    query. Dropped: Markdown headings (a heading line opening a sentence is cut
    from it), setext-underlined lines, a front-matter block at the start, and a
    line standing alone (a line break or the chunk's edge on both sides) that
    does not end like a sentence and is not a list item. When nothing is left,
    the sentences are kept as they were: a chunk of headings only is its own
    evidence.
    """
    front = _FRONT_MATTER.match(content)
    skip = front.end() if front else 0
    out: list[Span] = []
    for a, b in spans:
        if b <= skip:
            continue
        a, cut = max(a, skip), False
        while a < b and _ATX.match(content, a):
            cut = True
            line_end = content.find("\n", a, b)
            if line_end < 0:
                a = b
                break
            a = line_end + 1
            while a < b and content[a].isspace():
                a += 1
        if a >= b or _SETEXT.search(content, a, b):
            continue
        text = content[a:b]
        alone = (a == 0 or content[a - 1] == "\n") and (b == len(content) or content[b] == "\n")
        if (
            alone
            and not cut
            and "\n" not in text
            and not _PROSE_END.search(text.rstrip())
            and not _LIST_ITEM.match(text)
            and len(text.split()) <= _TITLE_WORDS
        ):
            continue
        out.append((a, b))
    return out or list(spans)


def term_scores(
    analyzer: Analyzer, sentences: Sequence[str], weights: Mapping[str, float]
) -> list[float]:
    """Each sentence's terms score: query-term weight x idf, repeats saturated."""
    out: list[float] = []
    for sentence in sentences:
        counts = Counter(t for t in analyzer.terms(sentence) if t in weights)
        score = 0.0
        for term in sorted(counts):
            tf = counts[term]
            score += weights[term] * (tf * (_K1 + 1.0)) / (tf + _K1)
        out.append(score)
    return out


def _standardised(values: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    spread = float(values.std())
    if not math.isfinite(spread) or spread == 0.0:
        return np.zeros_like(values)
    out: npt.NDArray[np.float64] = (values - values.mean()) / spread
    return out


def rank_evidence(
    content: str,
    base: int,
    spans: Sequence[Span],
    scores: Sequence[float],
    method: EvidenceMethod,
    *,
    positive_only: bool = False,
    limit: int = EVIDENCE_LIMIT,
) -> list[EvidenceSpan]:
    """The best ``limit`` sentences, best first; equal scores keep text order."""
    order = sorted(range(len(spans)), key=lambda i: (-scores[i], i))
    out: list[EvidenceSpan] = []
    for i in order[:limit]:
        if positive_only and scores[i] <= 0.0:
            break
        a, b = spans[i]
        out.append(
            EvidenceSpan.model_construct(
                start_offset=base + a,
                end_offset=base + b,
                text=content[a:b],
                score=float(scores[i]),
                method=method,
            )
        )
    return out


def query_weights(
    index: BM25Index, terms: Sequence[str], ids: Mapping[str, int], view: View = CURRENT
) -> dict[str, float]:
    """Each query term's weight: its count in the query times its BM25 idf in ``view``
    of ``index`` (``ids`` maps terms to store ids; a term with none, or that no
    document of the view holds, weighs nothing)."""
    counts = Counter(t for t in terms if t in ids)
    idf = index.idf(index.lookup(Counter({ids[t]: n for t, n in counts.items()})), view)
    return {t: n * idf[ids[t]] for t, n in counts.items() if ids[t] in idf}


@dataclass
class _Prepared:
    spans: list[Span]
    terms: list[float]


class EvidenceBatch:
    """The evidence of one response's results, worked out together on first read.

    ``weights`` gives the query terms' weights (read when first needed, so a
    search whose evidence is never read never looks the terms up). Term scores
    are computed per result; with an embedder, the sentences of
    every result are embedded in one call, so reading the evidence of ten
    results costs one batch, not ten.
    """

    def __init__(
        self,
        analyzer: Analyzer,
        weights: Callable[[], Mapping[str, float]],
        *,
        embedder: EmbeddingProtocol | None = None,
        query_vector: npt.NDArray[np.float32] | None = None,
        home: asyncio.AbstractEventLoop | None = None,
        hybrid: bool = False,
    ) -> None:
        self._analyzer = analyzer
        self._weights_of = weights
        self._embedder = embedder if query_vector is not None else None
        self._vector = query_vector
        self._home = home
        self._hybrid = hybrid
        self._contents: list[tuple[str, int]] = []
        self._done: list[list[EvidenceSpan]] | None = None
        self._lock = threading.Lock()

    def add(self, content: str, base: int) -> int:
        """Register a result's content; returns its slot."""
        self._contents.append((content, base))
        return len(self._contents) - 1

    def evidence(self, slot: int) -> list[EvidenceSpan]:
        with self._lock:
            if self._done is None:
                self._done = self._compute()
            return self._done[slot]

    def _compute(self) -> list[list[EvidenceSpan]]:
        weights = self._weights_of()
        prepared: list[_Prepared] = []
        for content, _ in self._contents:
            spans = body_spans(content, sentence_spans(content))
            texts = [content[a:b] for a, b in spans]
            prepared.append(_Prepared(spans, term_scores(self._analyzer, texts, weights)))
        if self._embedder is None or self._vector is None:
            return [
                rank_evidence(c, base, p.spans, p.terms, "terms", positive_only=True)
                for (c, base), p in zip(self._contents, prepared, strict=True)
            ]
        sentences = [
            c[a:b] for (c, _), p in zip(self._contents, prepared, strict=True) for a, b in p.spans
        ]
        embedder, width = self._embedder, len(self._vector)
        rows = _blocking(
            lambda: checked.documents(embedder, sentences, for_query=True, width=width),
            self._home,
        )
        cosines = np.asarray(rows, dtype=np.float64) @ np.asarray(self._vector, dtype=np.float64)
        out: list[list[EvidenceSpan]] = []
        at = 0
        for (content, base), p in zip(self._contents, prepared, strict=True):
            cos = cosines[at : at + len(p.spans)]
            at += len(p.spans)
            if self._hybrid:
                fused = HYBRID_TERMS_WEIGHT * _standardised(np.asarray(p.terms)) + (
                    1.0 - HYBRID_TERMS_WEIGHT
                ) * _standardised(cos)
                out.append(rank_evidence(content, base, p.spans, fused.tolist(), "hybrid"))
            else:
                out.append(rank_evidence(content, base, p.spans, cos.tolist(), "embedding"))
        return out


def _blocking(
    make: Callable[[], Coroutine[Any, Any, T]], home: asyncio.AbstractEventLoop | None
) -> T:
    """Run an embedder coroutine to completion from synchronous code.

    On the loop the search ran on when that loop is running in another thread
    (the sync API's case, and ``load_evidence``'s), so the embedder's clients
    stay on their loop; otherwise (read inside a coroutine of that loop, which
    cannot wait for itself, or after it closed) on a fresh loop in a worker.
    """
    try:
        running: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
    except RuntimeError:
        running = None
    if home is not None and home.is_running() and running is not home:
        return asyncio.run_coroutine_threadsafe(make(), home).result()
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="groundkit-evidence") as pool:
        return pool.submit(lambda: asyncio.run(make())).result()


async def load_evidence(results: Sequence[RetrievalResult]) -> None:
    """Work out the results' evidence in a worker thread, without blocking the loop.

    Reading ``result.evidence`` inside a coroutine computes it then and there;
    for embedding or hybrid evidence that is a model call. Await this first to
    have it computed off the event loop instead.
    """

    def read() -> None:
        for result in results:
            if result.evidence is not None:
                len(result.evidence)

    await asyncio.to_thread(read)
