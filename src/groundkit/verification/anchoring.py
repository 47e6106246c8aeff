"""Where an indexed span went: re-anchoring a citation whose offsets no longer hold it.

A source edited above a cited passage shifts it without changing a word. The
indexed text is then looked for in the source as it reads now, the way a W3C
Web Annotation ``TextQuoteSelector`` (exact text, with a short prefix and
suffix) is re-attached:

- found exactly once, or more than once with exactly one occurrence whose
  surroundings match the indexed context best: ``moved``, with its new offsets;
- found several times with nothing to tell them apart: ``ambiguous`` (reported,
  never guessed);
- found only once both are put in Unicode NFC (the source was re-encoded, NFC to
  NFD say), near the old offsets: ``renormalized``, with where the canonically
  equivalent text is now.
  Offsets count code points, so this is not the indexed text at new offsets and
  the verdict calls it drifted, giving the reason;
- not found: ``drifted``, with the closest passage near the old offsets and its
  similarity (rapidfuzz's normalised Indel ratio, 0 to 1), for a person to review.
"""

from __future__ import annotations

import unicodedata
from bisect import bisect_left, bisect_right
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import accumulate
from typing import Literal, Protocol

from rapidfuzz import fuzz

from groundkit.utils.letters import composes, inside_letter

__all__ = [
    "CONTEXT_CHARS",
    "MAX_COMPARED_CHARS",
    "MAX_OCCURRENCES",
    "Anchor",
    "ChunkIndex",
    "composes",
    "reanchor",
    "splits",
]

# How much text either side of a span serves as its context.
CONTEXT_CHARS = 32
# At most this many exact occurrences are weighed against each other.
MAX_OCCURRENCES = 1000
# Characters allowed between a context and the span (chunks skip blank lines).
_SLACK = 16
# The closest passage is looked for within this many characters of the old span.
_SCAN_CHARS = 65_536
# Up to this coarse step (spans under 2,048 characters) the best coarse window is
# refined at every offset around it; beyond, by halving the step.
_EXHAUSTIVE_STEP = 255
# Each comparison costs the product of the lengths: a span longer than the largest chunk
# (``ChunkingConfig.max_chars``' bound; a hand-made citation or receipt can be any length)
# gets no closest passage, where looking for one would take minutes or hours.
MAX_COMPARED_CHARS = 100_000


@dataclass(frozen=True, slots=True)
class Anchor:
    """The outcome of looking for a span's indexed text in the current source."""

    outcome: Literal["moved", "ambiguous", "renormalized", "drifted"]
    # Where the text is now (moved), its canonically equivalent form (renormalized), or
    # the closest passage (drifted); None if ambiguous.
    start: int | None
    end: int | None
    similarity: float | None
    occurrences: int


class _Indexed(Protocol):
    @property
    def content(self) -> str: ...
    @property
    def start_offset(self) -> int: ...
    @property
    def end_offset(self) -> int: ...


class ChunkIndex:
    """A document version's chunks sorted by where they start, so the indexed text
    around a span is found in about log time: checking every chunk of a long document
    whose text is now repeated asks for each chunk's context, and reading every chunk
    each time made that quadratic."""

    def __init__(self, chunks: Sequence[_Indexed]) -> None:
        order = sorted(range(len(chunks)), key=lambda i: chunks[i].start_offset)
        self._chunks = [chunks[i] for i in order]
        # Each chunk's place in ``chunks``: equal candidates go to the first, as there.
        self._rank = order
        self._starts = [c.start_offset for c in self._chunks]
        # The furthest end of the chunks up to each one (sorted by start).
        self._reach = list(accumulate((c.end_offset for c in self._chunks), max))

    def context(self, start: int, end: int) -> tuple[str, str]:
        """The indexed text nearest before ``start`` and after ``end`` (up to
        ``CONTEXT_CHARS`` each), from the chunks: neighbours overlap the span or sit
        just beside it. Before: the chunk whose text reaches closest to ``start``, the
        longer slice on a tie; after: the chunk whose text resumes soonest at or after
        ``end``, the first given on a tie."""
        return self._prefix(start), self._suffix(end)

    def _prefix(self, start: int) -> str:
        # The candidates start before ``start``; the best ends latest (up to ``start``),
        # then reaches back furthest (up to CONTEXT_CHARS). Equal ones slice the same
        # text, so which is taken does not matter.
        best: tuple[int, int, int] | None = None  # stop, lo, position
        for k in range(bisect_left(self._starts, start) - 1, -1, -1):
            reach = min(self._reach[k], start)
            if best is not None and (
                reach < best[0] or (reach == best[0] and best[0] - best[1] == CONTEXT_CHARS)
            ):
                break  # nothing from here down can do better
            c = self._chunks[k]
            stop = min(c.end_offset, start)
            lo = max(c.start_offset, stop - CONTEXT_CHARS)
            if best is None or stop > best[0] or (stop == best[0] and lo < best[1]):
                best = (stop, lo, k)
        if best is None:
            return ""
        stop, lo, k = best
        a = self._chunks[k].start_offset
        return self._chunks[k].content[lo - a : stop - a]

    def _suffix(self, end: int) -> str:
        # A chunk over ``end`` starts its suffix at ``end``; the first such (in the
        # given order) is taken, else the first of those starting soonest after ``end``.
        pick: int | None = None
        k = bisect_right(self._starts, end) - 1
        while k >= 0 and self._reach[k] > end:
            if self._chunks[k].end_offset > end and (
                pick is None or self._rank[k] < self._rank[pick]
            ):
                pick = k
            k -= 1
        if pick is None:
            first = bisect_right(self._starts, end)
            if first == len(self._chunks):
                return ""
            last = bisect_right(self._starts, self._starts[first])
            pick = min(range(first, last), key=lambda i: self._rank[i])
        c = self._chunks[pick]
        a, b = c.start_offset, c.end_offset
        begin = max(a, end)
        return c.content[begin - a : min(b, begin + CONTEXT_CHARS) - a]


def reanchor(
    text: str,
    content: str,
    start: int,
    *,
    prefix: str | None = None,
    suffix: str | None = None,
) -> Anchor:
    """Find ``content`` (indexed at ``start``) in ``text``, the source as it reads now."""
    if not content:
        return Anchor("drifted", None, None, None, 0)
    found: list[int] = []
    at = text.find(content)
    while at >= 0 and len(found) < MAX_OCCURRENCES:
        found.append(at)
        at = text.find(content, at + 1)
    # An occurrence whose next character composes with it ("a" in "a" + U+0323), or
    # whose first one joins the letter before it, is part of other letters: not the
    # indexed text. The nearest such is the closest passage, with its letters whole.
    whole = [p for p in found if not splits(text, p, p + len(content))]
    if found and not whole:
        return _split_anchor(text, content, min(found, key=lambda p: abs(p - start)))
    found = whole
    if len(found) == 1:
        return Anchor("moved", found[0], found[0] + len(content), 1.0, 1)
    if found:
        scores = [_context_score(text, p, p + len(content), prefix, suffix) for p in found]
        best = max(scores)
        winners = [p for p, s in zip(found, scores, strict=True) if s == best]
        if best > 0 and len(winners) == 1:
            return Anchor("moved", winners[0], winners[0] + len(content), 1.0, len(found))
        return Anchor("ambiguous", None, None, None, len(found))
    equivalent = _canonically_equal(text, content, start)
    if equivalent is not None:
        a, b = equivalent
        similar = (
            None
            if len(content) > MAX_COMPARED_CHARS
            else round(fuzz.ratio(content, text[a:b]) / 100.0, 4)
        )
        return Anchor("renormalized", a, b, similar, 1)
    lo, hi, similarity = _closest(text, content, start)
    return Anchor("drifted", lo, hi, similarity, 0)


def _context_score(text: str, start: int, end: int, prefix: str | None, suffix: str | None) -> int:
    """How much of the indexed context is found right around an occurrence: the
    prefix just before it and the suffix just after (a little slack for the
    whitespace between chunks)."""
    score = 0
    if prefix and prefix in text[max(0, start - len(prefix) - _SLACK) : start]:
        score += len(prefix)
    if suffix and suffix in text[end : end + len(suffix) + _SLACK]:
        score += len(suffix)
    return score


def splits(text: str, start: int, end: int) -> bool:
    """Whether ``text[start:end]`` cuts a letter from what composes with it: the character
    after it joins its last one, or its first joins the one before it (SPEC 5.5: a mark
    belongs to the letter before it). Whitespace and the text's ends are boundaries:
    chunks start after whitespace, so a mark there starts a span."""
    return (start < end and inside_letter(text, end, start)) or inside_letter(text, start)


def _split_anchor(text: str, content: str, at: int) -> Anchor:
    """``drifted`` for text found only inside other letters ("no" in "nö", a mark added
    after it): the closest passage is the letters holding it, so less than fully similar."""
    lo, hi = at, at + len(content)
    while lo < hi and inside_letter(text, hi, lo):
        hi += 1
    while inside_letter(text, lo):
        lo -= 1
    similar = (
        None
        if len(content) > MAX_COMPARED_CHARS
        else round(fuzz.ratio(content, text[lo:hi]) / 100.0, 4)
    )
    return Anchor("drifted", lo, hi, similar, 0)


def _nfc_origins(text: str) -> tuple[str, list[int], list[int]]:
    """``text`` in NFC and, per character of it, the ``text`` range it comes from (the
    run of characters that composed into it)."""
    out: list[str] = []
    starts: list[int] = []
    ends: list[int] = []
    cluster = 0
    for i in range(1, len(text) + 1):
        if i < len(text) and composes(text[cluster:i], text[i]):
            continue
        for char in unicodedata.normalize("NFC", text[cluster:i]):
            out.append(char)
            starts.append(cluster)
            ends.append(i)
        cluster = i
    return "".join(out), starts, ends


def _canonically_equal(text: str, content: str, start: int) -> tuple[int, int] | None:
    """Where ``text`` holds ``content`` in another Unicode normalization form (the
    occurrence nearest ``start``, within the window ``_closest`` scans), or None; only
    looked for when either is not NFC, and mapped back only once it is found."""
    if unicodedata.is_normalized("NFC", text) and unicodedata.is_normalized("NFC", content):
        return None
    wanted = unicodedata.normalize("NFC", content)
    # Decomposing can lengthen a character several times (Hangul, stacked accents).
    lo = max(0, start - _SCAN_CHARS)
    window = text[lo : start + 4 * len(content) + _SCAN_CHARS]
    if not wanted or wanted not in unicodedata.normalize("NFC", window):
        return None
    composed, starts, ends = _nfc_origins(window)
    best: tuple[int, int] | None = None
    at = composed.find(wanted)
    seen = 0
    while at >= 0 and seen < MAX_OCCURRENCES:
        here = (lo + starts[at], lo + ends[at + len(wanted) - 1])
        if best is None or abs(here[0] - start) < abs(best[0] - start):
            best = here
        seen += 1
        at = composed.find(wanted, at + 1)
    return best


def _closest(text: str, content: str, start: int) -> tuple[int | None, int | None, float | None]:
    """The window of ``len(content)`` characters near ``start`` most like ``content``."""
    if not text:
        return None, None, 0.0
    width = len(content)
    if width > MAX_COMPARED_CHARS:
        return None, None, None
    lo = max(0, start - _SCAN_CHARS)
    hi = min(len(text), start + width + _SCAN_CHARS)
    if hi - lo <= width:
        return lo, hi, fuzz.ratio(content, text[lo:hi]) / 100.0
    step = max(1, width // 8)

    def score(i: int) -> float:
        return float(fuzz.ratio(content, text[i : i + width]))

    last = hi - width
    best_at, best = lo, -1.0
    for i in range(lo, last + 1, step):
        s = score(i)
        if s > best:
            best_at, best = i, s
    if step <= _EXHAUSTIVE_STEP:
        # Refine around the best coarse window, one character at a time.
        for i in range(max(lo, best_at - step), min(last, best_at + step) + 1):
            s = score(i)
            if s > best:
                best_at, best = i, s
        return best_at, best_at + width, round(best / 100.0, 4)
    # A long span: every offset between two coarse windows would cost a comparison of
    # the span's length each (cubic in it); halve the step instead, moving to the
    # better side each time.
    while step > 1:
        step //= 2
        centre = best_at
        for i in (centre - step, centre + step):
            if lo <= i <= last:
                s = score(i)
                if s > best:
                    best_at, best = i, s
    return best_at, best_at + width, round(best / 100.0, 4)
