"""``groundkit.testing``: assert in your own tests that an answer is grounded in its results.

Importing it needs nothing beyond groundkit's own core: ``assert_grounded`` and
``assert_answer_grounded`` raise a plain ``AssertionError`` subclass, so they work in
any test runner, or none. The fixtures live in ``groundkit.testing.plugin``, the pytest
plugin registered through the ``pytest11`` entry point (``-p no:groundkit`` turns it
off), which pytest loads wherever groundkit is installed. What it offers:

- ``assert_grounded(answer_quotes, results, base_dir=...)``: every quote must
  lie inside a result's span, and that span must still read as indexed, now.
  A failure raises ``NotGroundedError`` (an ``AssertionError``) whose message
  names each quote that failed and why: not found in the span, span drifted,
  source unresolvable, or a cited chunk missing from the results.
- ``check_grounded``: the same check, awaited, returning one ``GroundedQuote``
  per quote instead of raising.
- The ``grounded`` fixture: ``assert_grounded`` with ``base_dir`` and
  ``snapshot_dir`` taken from the ini options ``groundkit_base_dir`` and
  ``groundkit_snapshot_dir`` (relative to the ini file; default: the rootdir
  and none), plus the ``groundkit_base_dir`` and ``groundkit_snapshot_dir``
  fixtures themselves.

- ``assert_answer_grounded(answer, results, base_dir=...)``: the whole answer,
  markers and all, through ``verify_answer``; fails naming each sentence whose
  verdict is a problem (uncited, unsupported, misquoted, dangling, drifted...),
  and the ``grounded_answer`` fixture with the directories bound.

- ``groundkit.testing.adversarial``: the adversarial citation suite (fabricated,
  spliced, misattributed, tampered and stale citations, look-alike and invisible
  characters, marker games), each case with the verdict it must get;
  ``run_adversarial`` runs it through your embedder and check options.

A quote is a string, grounded when any result holds it, or a ``(quote,
chunk_id)`` pair, grounded only by that chunk. Only groundkit's own core is
imported: no model, vector store or extractor library.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from groundkit.contracts import (
    ANSWER_PROBLEMS,
    AnswerReport,
    FetchResult,
    QuoteCheck,
    RetrievalResult,
    SearchResponse,
)
from groundkit.errors import InvalidQueryError, NotGroundedError
from groundkit.providers.protocols import EmbeddingProtocol
from groundkit.storage.snapshots import SnapshotLocation
from groundkit.verification.answers import AnswerChecker
from groundkit.verification.quotes import QuoteChecker, matched_prefix, normalize_quote

__all__ = [
    "AnswerGrounding",
    "GroundedQuote",
    "Grounding",
    "NotGroundedError",
    "assert_answer_grounded",
    "assert_grounded",
    "check_grounded",
]

AnswerQuote = str | tuple[str, str]
Results = SearchResponse | Iterable[RetrievalResult | FetchResult]

_PROBLEMS = {
    "not_in_span": "not found in the cited span",
    "moved": "span moved (its text is intact elsewhere in the source; re-ingest)",
    "drifted": "span drifted",
    "unresolvable": "source unresolvable",
}


@dataclass(frozen=True)
class GroundedQuote:
    """How one quote of an answer fared.

    ``check`` is the decisive ``QuoteCheck`` (the one that verified it, or the
    most telling failure); None when no result could be checked for it.
    ``problem`` is None when the quote is grounded, else one readable line.
    """

    number: int
    quote: str
    chunk_id: str | None
    check: QuoteCheck | None
    problem: str | None

    @property
    def ok(self) -> bool:
        return self.problem is None


def _results(results: Results) -> list[RetrievalResult | FetchResult]:
    if isinstance(results, SearchResponse):
        return list(results.results)
    if isinstance(results, str | bytes) or not isinstance(results, Iterable):
        raise InvalidQueryError(
            f"results must be a SearchResponse or the results the answer was given, "
            f"not {type(results).__name__}"
        )
    listed = list(results)
    for position, result in enumerate(listed):
        if not isinstance(result, RetrievalResult | FetchResult):
            raise InvalidQueryError(
                f"results[{position}] is a {type(result).__name__}, not a RetrievalResult "
                "or FetchResult"
            )
    return listed


def _quotes(answer_quotes: Iterable[AnswerQuote]) -> list[tuple[str, str | None]]:
    """The quotes as ``(quote, chunk id or None)``; ``InvalidQueryError`` for anything
    else. A bare string is refused, not taken character by character: each character
    would be found somewhere, and the check would pass on a made-up quote."""
    if isinstance(answer_quotes, str | bytes):
        raise InvalidQueryError(
            "answer_quotes is a list of quotes, not one string: pass [quote] (or "
            "[(quote, chunk_id)]); a string would be read one character at a time"
        )
    if not isinstance(answer_quotes, Iterable):
        raise InvalidQueryError(
            f"answer_quotes must be a list of quotes, not {type(answer_quotes).__name__}"
        )
    out: list[tuple[str, str | None]] = []
    for number, item in enumerate(answer_quotes, start=1):
        if isinstance(item, str):
            quote, chunk_id = item, None
        elif (
            isinstance(item, tuple | list)
            and len(item) == 2
            and isinstance(item[0], str)
            and isinstance(item[1], str)
        ):
            quote, chunk_id = item[0], item[1]
        else:
            raise InvalidQueryError(
                f"quote {number} must be a str or a (quote, chunk_id) pair of str, "
                f"not {type(item).__name__}"
            )
        if not quote.strip():
            raise InvalidQueryError(f"quote {number} is empty: an empty quote proves nothing")
        out.append((quote, chunk_id))
    return out


def _problem(check: QuoteCheck) -> str:
    return f"{_PROBLEMS[check.verdict]}: {check.detail}"


async def _one(
    checker: QuoteChecker,
    number: int,
    item: tuple[str, str | None],
    results: Sequence[RetrievalResult | FetchResult],
) -> GroundedQuote:
    quote, chunk_id = item
    if chunk_id is not None:
        cited = [r for r in results if r.citation.chunk_id == chunk_id]
        if not cited:
            problem = f"cites chunk {chunk_id!r}, which is not among the {len(results)} results"
            return GroundedQuote(number, quote, chunk_id, None, problem)
        check = await checker.check(quote, cited[0])
        return GroundedQuote(number, quote, chunk_id, check, None if check.ok else _problem(check))
    if not results:
        return GroundedQuote(number, quote, None, None, "there are no results to ground it in")
    failures: list[QuoteCheck] = []
    for result in results:
        check = await checker.check(quote, result)
        if check.ok:
            return GroundedQuote(number, quote, None, check, None)
        failures.append(check)
    # A broken span whose indexed text held the quote says more than "not found".
    wanted = normalize_quote(quote)
    for check, result in zip(failures, results, strict=True):
        if check.verdict != "not_in_span" and wanted and wanted in normalize_quote(result.content):
            return GroundedQuote(number, quote, None, check, _problem(check))
    problem = f"not found in any of the {len(results)} results"
    # Point at the span that came closest, so the message shows where the quote went wrong.
    nearest = max(zip(failures, results, strict=True), key=lambda f: _reach(quote, *f))
    if _reach(quote, *nearest) >= _NEAREST_MIN:
        return GroundedQuote(
            number, quote, None, nearest[0], f"{problem}; nearest: {nearest[0].detail}"
        )
    return GroundedQuote(number, quote, None, None, problem)


# A shared prefix shorter than this is chance ("the "), not a near miss worth showing.
_NEAREST_MIN = 8


def _reach(quote: str, check: QuoteCheck, result: RetrievalResult | FetchResult) -> int:
    return matched_prefix(quote, result.content) if check.verdict == "not_in_span" else -1


async def check_grounded(
    answer_quotes: Iterable[AnswerQuote],
    results: Results,
    *,
    base_dir: Path | str,
    snapshot_dir: SnapshotLocation | None = None,
) -> list[GroundedQuote]:
    """One ``GroundedQuote`` per quote, in order; each source is read once."""
    return await _grounded(_quotes(answer_quotes), _results(results), base_dir, snapshot_dir)


async def _grounded(
    quotes: list[tuple[str, str | None]],
    listed: list[RetrievalResult | FetchResult],
    base_dir: Path | str,
    snapshot_dir: SnapshotLocation | None,
) -> list[GroundedQuote]:
    checker = QuoteChecker(base_dir, snapshot_dir=snapshot_dir)
    return [
        await _one(checker, number, item, listed) for number, item in enumerate(quotes, start=1)
    ]


def _shown(quote: str) -> str:
    flat = " ".join(quote.split())
    return repr(flat if len(flat) <= 80 else flat[:79] + "…")


def failure_message(outcomes: Sequence[GroundedQuote], result_count: int) -> str | None:
    """The assertion message for ``outcomes``, or None when every quote is grounded."""
    failed = [o for o in outcomes if not o.ok]
    if not outcomes:
        return "the answer has no quotes to check"
    if not failed:
        return None
    lines = [f"{len(failed)} of {len(outcomes)} quotes not grounded in the {result_count} results:"]
    for outcome in failed:
        cited = f" (chunk {outcome.chunk_id})" if outcome.chunk_id else ""
        lines.append(f"  quote {outcome.number} {_shown(outcome.quote)}{cited}")
        lines.append(f"    {outcome.problem}")
    return "\n".join(lines)


def _run(coroutine_factory: Any) -> Any:
    """Run a coroutine to completion from synchronous code, inside a running loop or not."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coroutine_factory())
    # Called from async code (an async test): the running loop cannot be
    # re-entered, so the check gets its own loop in a worker thread.
    box: dict[str, Any] = {}

    def work() -> None:
        try:
            box["value"] = asyncio.run(coroutine_factory())
        except BaseException as exc:
            box["error"] = exc

    thread = threading.Thread(target=work, name="groundkit-assert-grounded")
    thread.start()
    thread.join()
    if "error" in box:
        raise box["error"]
    return box["value"]


def assert_grounded(
    answer_quotes: Iterable[AnswerQuote],
    results: Results,
    *,
    base_dir: Path | str,
    snapshot_dir: SnapshotLocation | None = None,
) -> list[GroundedQuote]:
    """Fail unless every quote lies in a result's span that still reads as indexed.

    ``results`` is a ``SearchResponse`` or the results (or fetched chunks)
    the answer was given. Raises ``NotGroundedError`` listing each failed
    quote and why; an answer with no quotes fails too. Works from plain and
    async tests alike; returns the outcomes when all is well.
    """
    __tracebackhide__ = True
    quotes = _quotes(answer_quotes)
    listed = _results(results)
    outcomes: list[GroundedQuote] = _run(lambda: _grounded(quotes, listed, base_dir, snapshot_dir))
    message = failure_message(outcomes, len(listed))
    if message is not None:
        raise NotGroundedError(message)
    return outcomes


@dataclass(frozen=True)
class Grounding:
    """``assert_grounded`` with the directories bound (the ``grounded`` fixture)."""

    base_dir: Path
    snapshot_dir: SnapshotLocation | None = None

    def __call__(
        self, answer_quotes: Iterable[AnswerQuote], results: Results
    ) -> list[GroundedQuote]:
        __tracebackhide__ = True
        return assert_grounded(
            answer_quotes, results, base_dir=self.base_dir, snapshot_dir=self.snapshot_dir
        )

    async def check(
        self, answer_quotes: Iterable[AnswerQuote], results: Results
    ) -> list[GroundedQuote]:
        """The outcomes without asserting (for async tests that inspect them)."""
        return await check_grounded(
            answer_quotes, results, base_dir=self.base_dir, snapshot_dir=self.snapshot_dir
        )


def assert_answer_grounded(
    answer: str,
    results: SearchResponse | Sequence[RetrievalResult],
    *,
    base_dir: Path | str,
    snapshot_dir: SnapshotLocation | None = None,
    embedder: EmbeddingProtocol | None = None,
    markers: Mapping[str, str] | None = None,
    allow: Iterable[str] = (),
    supported_threshold: float | None = None,
    weak_threshold: float | None = None,
) -> AnswerReport:
    """Fail unless every sentence of ``answer`` is grounded in the results it cites.

    Runs ``verify_answer``; raises ``NotGroundedError`` naming each sentence
    whose verdict is a problem (``ANSWER_PROBLEMS``) and why, except verdicts
    listed in ``allow`` (``allow={"weak"}``, say). An answer with no sentence
    that cites anything fails too. Returns the report when all is well.
    """
    __tracebackhide__ = True
    allowed = set(allow)
    unknown = allowed - set(ANSWER_PROBLEMS)
    if unknown:
        raise InvalidQueryError(f"allow= names verdicts that are not problems: {sorted(unknown)}")
    checker = AnswerChecker(
        base_dir,
        snapshot_dir=snapshot_dir,
        embedder=embedder,
        supported_threshold=supported_threshold,
        weak_threshold=weak_threshold,
    )
    report: AnswerReport = _run(lambda: checker.check(answer, results, markers=markers))
    failing = [
        f"  sentence {i + 1} [{s.verdict}] {s.text.strip()!r}: {s.detail}"
        for i, s in enumerate(report.sentences)
        if s.verdict in ANSWER_PROBLEMS and s.verdict not in allowed
    ]
    if not any(s.markers for s in report.sentences):
        failing.append("  the answer cites nothing: it has no citation marker")
    if failing:
        raise NotGroundedError(
            f"{len(failing)} problem(s) in an answer of {len(report.sentences)} sentence(s):\n"
            + "\n".join(failing)
        )
    return report


@dataclass(frozen=True)
class AnswerGrounding:
    """``assert_answer_grounded`` with the directories bound (``grounded_answer``)."""

    base_dir: Path
    snapshot_dir: SnapshotLocation | None = None

    def __call__(
        self,
        answer: str,
        results: SearchResponse | Sequence[RetrievalResult],
        **options: Any,
    ) -> AnswerReport:
        __tracebackhide__ = True
        return assert_answer_grounded(
            answer, results, base_dir=self.base_dir, snapshot_dir=self.snapshot_dir, **options
        )
