"""Sentence boundaries as exact offsets: the unit evidence and answer checks work in.

Boundaries are found in one left-to-right pass over the text, so every sentence
is a slice ``text[start:end]`` by construction (nothing is located afterwards
by searching for its words). A Latin ender (``.``, ``!``, ``?``, ``…``), with any
closing quotes or brackets after it, ends a sentence when whitespace follows
and the next sentence does not begin in lower case; a full stop after a known
abbreviation, a single capital (an initial) or inside a number does not. CJK
enders (``。！？``) end a sentence with no space after them. A blank line, or a
line break before a Markdown heading or list item, always ends one.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from itertools import pairwise

__all__ = ["sentence_spans", "sentence_tiles"]

Span = tuple[int, int]

_CLOSERS = "\"'\u201d\u2019\u00bb)\\]}\u300d\u300f\uff09\u3011\u3015"
# A run of Latin or CJK enders, then closing quotes or brackets.
_ENDER = re.compile(rf"(?:[.!?\u2026]+|[\u3002\uff01\uff1f\uff0e]+)[{_CLOSERS}]*")
_CJK_ENDERS = frozenset("\u3002\uff01\uff1f\uff0e")
_WORD_BEFORE = re.compile(r"([^\W\d_][\w.]*)$")
_BREAK = re.compile(r"\n[ \t]*\n|\n(?=[ \t]*(?:#{1,6}\s|[-*+]\s|\d{1,3}[.)]\s))")

# Words a full stop follows without ending the sentence (lowercase, no final dot).
_ABBREVIATIONS = frozenset(
    (
        "al",
        "approx",
        "art",
        "assn",
        "ca",
        "cf",
        "ch",
        "col",
        "cols",
        "co",
        "corp",
        "dept",
        "dr",
        "e.g",
        "eq",
        "eqs",
        "esp",
        "est",
        "etc",
        "ed",
        "eds",
        "fig",
        "figs",
        "gen",
        "gov",
        "i.e",
        "inc",
        "incl",
        "jr",
        "ltd",
        "mr",
        "mrs",
        "ms",
        "mt",
        "no",
        "nos",
        "op",
        "p",
        "pp",
        "ph.d",
        "pl",
        "prof",
        "ref",
        "refs",
        "resp",
        "rev",
        "sec",
        "sect",
        "sr",
        "st",
        "ser",
        "suppl",
        "tab",
        "vol",
        "vols",
        "vs",
        "viz",
        "jan",
        "feb",
        "mar",
        "apr",
        "jun",
        "jul",
        "aug",
        "sep",
        "sept",
        "oct",
        "nov",
        "dec",
        "u.s",
        "u.k",
        "u.n",
        "e.u",
    )
)


def sentence_tiles(text: str) -> list[Span]:
    """``(start, end)`` of each sentence, whitespace after it included.

    The tiles cover ``text`` exactly: the first starts at 0, each starts where
    the previous ended and the last ends at ``len(text)`` (no tiles for ``""``).
    """
    if not text:
        return []
    cuts = _cuts(text)
    bounds = [0, *cuts, len(text)]
    return [(a, b) for a, b in pairwise(bounds) if b > a]


def sentence_spans(text: str) -> list[Span]:
    """Each sentence's ``(start, end)`` without surrounding whitespace; blank tiles dropped."""
    out: list[Span] = []
    for start, end in sentence_tiles(text):
        piece = text[start:end]
        stripped = piece.strip()
        if not stripped:
            continue
        lead = len(piece) - len(piece.lstrip())
        out.append((start + lead, start + lead + len(stripped)))
    return out


def _cuts(text: str) -> list[int]:
    """Offsets where a new sentence starts (strictly inside the text), sorted."""
    found: set[int] = set()
    skip = _Skipper(text)
    for match in _BREAK.finditer(text):
        found.add(skip(match.end()))
    for match in _ENDER.finditer(text):
        cut = _boundary_after(text, match, skip)
        if cut is not None:
            found.add(cut)
    n = len(text)
    return sorted(c for c in found if 0 < c < n)


class _Skipper:
    """Where the whitespace run at an offset ends; each run is scanned once, so a
    text of blank lines (a break match every two characters) stays linear."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.run = (0, 0)  # the last run scanned: [start, end), end a non-space or the text's end

    def __call__(self, at: int) -> int:
        start, end = self.run
        if start <= at <= end:
            return end
        text, n, stop = self.text, len(self.text), at
        while stop < n and text[stop].isspace():
            stop += 1
        self.run = (at, stop)
        return stop


def _boundary_after(text: str, match: re.Match[str], skip: Callable[[int], int]) -> int | None:
    """Where the next sentence starts after this ender, or None when it is not a boundary."""
    start, end = match.span()
    run = match.group()
    if run[0] in _CJK_ENDERS:
        return skip(end)
    if end < len(text) and not text[end].isspace():
        return None  # "3.5", "e.g.,", "example.com", "?!" inside a token
    following = skip(end)
    if following >= len(text):
        return None  # nothing after it: the text's end is the boundary
    if run.rstrip(_CLOSERS) == "." and _not_a_full_stop(text, start):
        return None
    nxt = text[following]
    if nxt.islower():
        return None  # "approx. three", "fig. a": a sentence rarely starts in lower case
    return following


def _not_a_full_stop(text: str, dot: int) -> bool:
    """Whether the single ``.`` at ``dot`` closes an abbreviation or an initial."""
    word = _WORD_BEFORE.search(text, max(0, dot - 16), dot)
    if word is None:
        return False
    token = word.group(1)
    if len(token) == 1 and token.isupper():
        return True  # an initial: "J. Smith", "A. thaliana"
    return token.lower().rstrip(".") in _ABBREVIATIONS
