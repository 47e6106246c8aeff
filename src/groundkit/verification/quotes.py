"""Is a quoted passage really in the span its citation points at, as the source reads now?

An answer that quotes its sources can be checked mechanically: the quote must
lie inside the cited span, and the source must still hold the text the span
was indexed with, judged as ``check_citation`` judges it (at the cited offsets,
or ``moved`` elsewhere). Quotes and spans are compared after a fixed,
documented normalisation (``normalize_quote``), so typography an LLM tends to
change (curly quotes, dashes, line breaks) does not fail a faithful quote,
while any change of words, digits, letters or their case still does.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TypedDict, Unpack

from groundkit.config import DEFAULT_MAX_FILE_BYTES
from groundkit.contracts import (
    Citation,
    FetchResult,
    QuoteCheck,
    QuoteVerdict,
    RetrievalResult,
    checked_citation,
)
from groundkit.errors import InvalidQueryError, RetrievalError
from groundkit.storage.snapshots import SnapshotLocation
from groundkit.utils.path_safety import base_directory
from groundkit.verification.anchoring import Anchor, composes
from groundkit.verification.sources import (
    check_read_options,
    read_source,
    slice_span,
    source_key,
)
from groundkit.verification.verdict import KEPT_COPY_NOTE, deprecated_alias, judge, locate

__all__ = [
    "Locator",
    "QuoteChecker",
    "QuoteOptions",
    "check_quote",
    "matched_prefix",
    "normalize_quote",
    "verify_quote",
]

Cited = RetrievalResult | FetchResult | Citation

_QUOTE_FORMS: dict[int, str] = {}
for _chars, _plain in (
    ("\u2018\u2019\u201a\u201b\u2032\u2039\u203a\uff07", "'"),
    ("\u201c\u201d\u201e\u201f\u2033\u00ab\u00bb\uff02", '"'),
    ("\u2010\u2011\u2012\u2013\u2014\u2015\u2212\ufe58\ufe63\uff0d", "-"),
    ("\u2026", "..."),
    # Invisible: soft hyphen, zero-width space/non-joiner/joiner, word joiner, BOM.
    ("\u00ad\u200b\u200c\u200d\u2060\ufeff", ""),
):
    _QUOTE_FORMS.update({ord(c): _plain for c in _chars})


def normalize_quote(text: str) -> str:
    """The form quotes and spans are compared in.

    1. Unicode NFC (composed accents), applied to each character together with
       what composes with it: the combining marks that follow it, and the Hangul
       jamo and Indic vowel signs that compose backwards.
    2. Single quotes and primes ``‘ ’ ‚ ‛ ′ ‹ › ＇`` become ``'``; double quotes
       ``“ ” „ ‟ ″ « » ＂`` become ``"``; hyphens, dashes and minus signs
       (U+2010-U+2015, U+2212, U+FE58, U+FE63, U+FF0D) become ``-``; ``…``
       becomes ``...``; soft hyphens, zero-width characters and BOMs vanish.
    3. Every run of whitespace (``str.isspace``) becomes one space, and leading
       and trailing whitespace is dropped.

    Nothing else changes: case, digits, letters and other punctuation must match.
    """
    if text.isascii():  # steps 1 and 2 change no ASCII character
        return " ".join(text.split())
    return _normalized(text)[0]


def _clusters(text: str) -> list[tuple[int, int]]:
    """``(start, end)`` of each character with what composes with it under NFC: the
    combining marks after it, and the starters that compose backwards (Hangul vowels and
    final consonants, some Indic vowel signs), so decomposed Korean reads as composed."""
    out: list[tuple[int, int]] = []
    for i, char in enumerate(text):
        if out and (
            unicodedata.combining(char)
            or (ord(char) >= 0x0900 and composes(text[out[-1][0] : i], char))
        ):
            out[-1] = (out[-1][0], i + 1)
        else:
            out.append((i, i + 1))
    return out


def _normalized(text: str) -> tuple[str, list[tuple[int, int]]]:
    """``normalize_quote(text)`` and, per output character, the ``text`` range it came from."""
    if unicodedata.is_normalized("NFC", text):
        pieces = [(text[i], i, i + 1) for i in range(len(text))]
    else:
        pieces = []
        for start, end in _clusters(text):
            pieces.extend((c, start, end) for c in unicodedata.normalize("NFC", text[start:end]))
    chars: list[str] = []
    origin: list[tuple[int, int]] = []
    for char, start, end in pieces:
        if char.isspace():
            if chars and chars[-1] == " ":
                origin[-1] = (origin[-1][0], end)
            else:
                chars.append(" ")
                origin.append((start, end))
            continue
        for out in char.translate(_QUOTE_FORMS):
            chars.append(out)
            origin.append((start, end))
    if chars and chars[0] == " ":
        del chars[0], origin[0]
    if chars and chars[-1] == " ":
        del chars[-1], origin[-1]
    return "".join(chars), origin


def _cited(cited: Cited, content: str | None) -> tuple[Citation, str]:
    if not isinstance(cited, Citation | RetrievalResult | FetchResult):
        raise InvalidQueryError(
            f"a quote is checked against a RetrievalResult, FetchResult or Citation, not "
            f"{type(cited).__name__}"
        )
    if content is not None and not isinstance(content, str):
        raise InvalidQueryError(f"content= must be a str, not {type(content).__name__}")
    if isinstance(cited, Citation):
        if content is None:
            raise InvalidQueryError(
                "a bare Citation carries no text to compare with its source; pass content= "
                "(the text it was indexed with) or the RetrievalResult / FetchResult itself"
            )
        # A citation made by ``model_copy(update=...)`` skipped the model's checks: a
        # negative offset would slice from the end and pass, as ``check_citation`` refuses.
        return checked_citation(cited), content
    if content is not None:
        raise InvalidQueryError("content= is only for a bare Citation; a result carries its own")
    return cited.citation, cited.content


def _shown(text: str, limit: int = 60) -> str:
    return repr(text if len(text) <= limit else text[: limit - 1] + "…")


# How a checker finds where a span's text went: ``locate``, or a collection's own
# (which reads its indexed context to tell repeated text apart).
Locator = Callable[[str, Citation, str], Awaitable[Anchor | None]]


async def _locate(content: str, citation: Citation, text: str) -> Anchor | None:
    return locate(content, citation, text)


# How a checker reads a cited source whole: ``read_source`` under its options, or a
# collection's own (which also refuses a source its clearance may not read).
Reader = Callable[[Citation], Awaitable[str]]


class QuoteChecker:
    """Checks quotes against citations, reading (or extracting) each source once.

    For many quotes over the same results, as an answer's test does; a checker
    holds what it read, so make a new one to see later edits of the sources.
    Each cited span is judged once (``span_verdict``), by ``verdict.judge`` like
    every other entry point.
    """

    def __init__(
        self,
        allowed_base_dir: Path | str,
        *,
        snapshot_dir: SnapshotLocation | None = None,
        max_bytes: int | None = DEFAULT_MAX_FILE_BYTES,
        locator: Locator | None = None,
        reader: Reader | None = None,
    ) -> None:
        self.allowed_base_dir = base_directory(allowed_base_dir, "allowed_base_dir")
        check_read_options(snapshot_dir, max_bytes)
        self.snapshot_dir = snapshot_dir
        self.max_bytes = max_bytes
        self._locator = locator or _locate
        self._reader = reader
        self._sources: dict[tuple[str, str, str | None, str], str | RetrievalError] = {}
        self._verdicts: dict[tuple[Citation, str], FetchResult] = {}
        # Each span's normalised form, made once however many quotes are looked up in it.
        self._normal: dict[str, tuple[str, list[tuple[int, int]]]] = {}

    async def _source(self, citation: Citation) -> str:
        key = source_key(citation)
        if key not in self._sources:
            try:
                self._sources[key] = (
                    await self._reader(citation)
                    if self._reader is not None
                    else await read_source(
                        citation,
                        self.allowed_base_dir,
                        snapshot_dir=self.snapshot_dir,
                        max_bytes=self.max_bytes,
                    )
                )
            except RetrievalError as exc:
                self._sources[key] = exc
        found = self._sources[key]
        if isinstance(found, RetrievalError):
            raise found
        return found

    async def span(self, citation: Citation) -> str:
        """The cited span as the source reads now; raises like ``resolve_citation``."""
        return slice_span(await self._source(citation), citation)

    async def span_verdict(self, cited: Cited, *, content: str | None = None) -> FetchResult:
        """The verdict on the cited span itself, as ``check_citation`` gives it (once per
        citation and text: later calls reuse it)."""
        citation, expected = _cited(cited, content)
        key = (citation, expected)
        if key not in self._verdicts:
            try:
                text = await self._source(citation)
            except RetrievalError as exc:
                self._verdicts[key] = judge(expected, citation, None, exc)
            else:
                anchor = await self._locator(expected, citation, text)
                self._verdicts[key] = judge(expected, citation, text, None, anchor)
        return self._verdicts[key]

    async def check(self, quote: str, cited: Cited, *, content: str | None = None) -> QuoteCheck:
        """The verdict on one quote; see ``check_quote``."""
        if not isinstance(quote, str):
            raise InvalidQueryError(f"the quote must be a str, not {type(quote).__name__}")
        citation, expected = _cited(cited, content)
        span = await self.span_verdict(citation, content=expected)
        return self.check_read(quote, citation, expected, span)

    def _normalized(self, text: str) -> tuple[str, list[tuple[int, int]]]:
        found = self._normal.get(text)
        if found is None:
            found = self._normal[text] = _normalized(text)
        return found

    def check_read(
        self, quote: str, citation: Citation, expected: str, span: FetchResult
    ) -> QuoteCheck:
        """``check`` once the span is judged (``span``, from ``span_verdict``): CPU work
        only, so a caller checking many quotes can run it off the event loop."""
        wanted = normalize_quote(quote)

        def verdict(
            name: QuoteVerdict, detail: str, found: tuple[int, int] | None = None
        ) -> QuoteCheck:
            start, end = (None, None) if found is None else found
            if span.read_from == "kept copy" and KEPT_COPY_NOTE not in detail:
                detail += KEPT_COPY_NOTE
            return QuoteCheck(
                quote=quote,
                verdict=name,
                detail=detail,
                citation=citation,
                start_offset=start,
                end_offset=end,
                read_from=span.read_from,
            )

        where = f"{citation.source!r} [{citation.start_offset}:{citation.end_offset}]"
        if span.verification == "unresolvable":
            return verdict("unresolvable", span.detail)
        if span.verification == "drifted":
            indexed = "is" if wanted and wanted in self._normalized(expected)[0] else "is not"
            return verdict(
                "drifted",
                f"{span.detail} (the quote {indexed} in the indexed text); re-ingest and re-check",
            )
        moved = span.verification == "moved"
        if not wanted:
            return verdict("not_in_span", "the quote is empty (nothing but whitespace)")
        # The span's text is intact (at the cited offsets, or moved): the quote is looked
        # for in it and located in the source as it reads now.
        text, origin = self._normalized(expected)
        at = _find_whole(text, wanted)
        if at < 0:
            also = f" (the span itself moved: {span.detail})" if moved else ""
            return verdict("not_in_span", f"not in {where}; {_closest(wanted, text)}{also}")
        base = span.current_start_offset if moved else citation.start_offset
        assert base is not None
        found = (base + origin[at][0], base + origin[at + len(wanted) - 1][1])
        if moved:
            return verdict(
                "moved",
                f"found in the text of {where}, which is intact at "
                f"{span.current_start_offset}..{span.current_end_offset} now (moved since it "
                f"was indexed); the quote is at {found[0]}..{found[1]}",
                found,
            )
        return verdict("verified", f"found in {where} at {found[0]}..{found[1]}", found)


def _is_mark(char: str) -> bool:
    return unicodedata.category(char).startswith("M")


def _find_whole(text: str, wanted: str) -> int:
    """Where ``wanted`` is in ``text`` (both normalised) without splitting a character
    from its combining marks, or -1. A mark with no precomposed form stays separate
    under NFC ("ọ̀", "x̣", Indic vowel signs), so a plain substring match would take
    a quote without the mark, or a mark alone, for the marked letter."""
    at = text.find(wanted)
    while at >= 0:
        end = at + len(wanted)
        if not (at > 0 and _is_mark(text[at])) and not (end < len(text) and _is_mark(text[end])):
            return at
        at = text.find(wanted, at + 1)
    return -1


def matched_prefix(quote: str, span: str) -> int:
    """How many leading characters of ``quote`` the ``span`` contains, both normalised."""
    return _prefix(normalize_quote(quote), normalize_quote(span))


def _prefix(wanted: str, text: str) -> int:
    lo, hi = 0, len(wanted)
    while lo < hi:  # binary search: every prefix of a contained prefix is contained too
        mid = (lo + hi + 1) // 2
        if wanted[:mid] in text:
            lo = mid
        else:
            hi = mid - 1
    return lo


def _closest(wanted: str, text: str) -> str:
    """Where the quote parts from the span: its longest prefix the span contains."""
    lo = _prefix(wanted, text)
    if lo < 3:
        return f"the span has no part of it ({_shown(wanted)})"
    at = text.find(wanted[:lo])
    return (
        f"the span matches its first {lo} characters ({_shown(wanted[:lo])}), then reads "
        f"{_shown(text[at + lo : at + lo + 30], 40)} where the quote has "
        f"{_shown(wanted[lo : lo + 30], 40)}"
    )


class QuoteOptions(TypedDict, total=False):
    """Keywords of ``check_quote`` and ``verify_quote``."""

    # <index_dir>/<collection>.snapshots: needed for URL (``snapshot``) citations.
    snapshot_dir: SnapshotLocation | None
    # The text a bare ``Citation`` was indexed with (results carry their own).
    content: str | None
    # The read cap the collection ingested with (``IngestConfig.max_file_bytes``).
    max_bytes: int | None


def _checker(allowed_base_dir: Path | str, options: QuoteOptions) -> QuoteChecker:
    return QuoteChecker(
        allowed_base_dir,
        snapshot_dir=options.get("snapshot_dir"),
        max_bytes=options.get("max_bytes", DEFAULT_MAX_FILE_BYTES),
    )


async def check_quote(
    quote: str, cited: Cited, allowed_base_dir: Path | str, **options: Unpack[QuoteOptions]
) -> QuoteCheck:
    """Check ``quote`` against a cited span, reading its source now; never raises for
    a source problem.

    ``cited`` is a ``RetrievalResult`` or ``FetchResult``, or a ``Citation``
    with ``content=`` (the text it was indexed with). The span is judged as
    ``check_citation`` judges it, and the quote looked for in it (compared after
    ``normalize_quote``): ``verified`` when the span reads as indexed and holds
    the quote (``start_offset``/``end_offset`` say where, in source offsets);
    ``moved`` when the span's text is intact elsewhere in the source now and
    holds the quote (the offsets are where the quote is now); ``not_in_span``
    when the span's text is intact but does not hold it; ``drifted`` when the
    source no longer holds the indexed text; ``unresolvable`` when the source
    cannot be read. ``snapshot_dir`` is needed for URL and record citations.
    """
    return await _checker(allowed_base_dir, options).check(
        quote, cited, content=options.get("content")
    )


async def quote_holds(
    quote: str, cited: Cited, allowed_base_dir: Path | str, **options: Unpack[QuoteOptions]
) -> bool:
    """True when ``quote`` is in the cited span and the span verifies (``check_quote``
    says ``verified``). A source that cannot be checked raises ``RetrievalError`` with
    ``verdict="unresolvable"`` (or ``"drifted"`` when it is now shorter than the span),
    as ``verify_quote`` always did."""
    citation, expected = _cited(cited, options.get("content"))
    checker = _checker(allowed_base_dir, options)
    await checker.span(citation)  # an unreadable or too short source raises, as it always did
    return (await checker.check(quote, citation, content=expected)).ok


verify_quote = deprecated_alias(
    quote_holds, "verify_quote", "check_quote(quote, cited, base_dir).ok"
)
