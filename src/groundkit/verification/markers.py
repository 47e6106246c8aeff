"""Citation markers in an answer: ``[1]``, ``[1, 3]``, ``[2-4]``, ``[^1]``, ``【1】``.

A marker names results by label: a number is the 1-based rank of a result in
the list the answer was written from; a footnote label (``[^src]``) or any
label a caller's own pattern captures is looked up in a mapping the caller
gives. Markers are found with their exact offsets in the answer, so a report
can point at each one.

The default forms are matched in time linear in the answer. A caller's pattern
can be written so that it backtracks for hours (``(a+)+b`` on a long run of
``a``), so it runs in the ``regex`` engine with a time limit for the whole
answer, with the interpreter lock released; past the limit the check stops with
a ``RetrievalError`` that says how to fix the pattern.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import regex

from groundkit.errors import RetrievalError

__all__ = [
    "DEFAULT_MARKER_PATTERN",
    "MARKER_PATTERN_TIMEOUT",
    "CallerPattern",
    "Marker",
    "find_markers",
    "marker_pattern",
]

# A numeric list ("1, 3", "2-4", "1;2"), in square or lenticular brackets, or a footnote.
# Any number of digits: a marker naming result 12345 of ten is dangling, not prose.
_ONE = r"\d+(?:\s*[-\u2013]\s*\d+)?"
_NUMBERS = rf"{_ONE}(?:\s*[,;\uff0c\u3001]\s*{_ONE})*"
DEFAULT_MARKER_PATTERN = re.compile(
    rf"\[\^(?P<foot>[A-Za-z0-9_.:-]{{1,64}})\]"
    rf"|\[(?P<num>{_NUMBERS})\]|\u3010(?P<cjk>{_NUMBERS})\u3011"
)
_SPLIT = re.compile(r"\s*[,;\uff0c\u3001]\s*")
_RANGE = re.compile(r"(\d+)\s*[-\u2013]\s*(\d+)")
# A range longer than this is a typo or an attack, not a citation.
_MAX_RANGE = 50
# Digits past this name no result any list holds; kept as written, never made an int
# (Python refuses to convert more than 4,300 digits).
_MAX_DIGITS = 18
# Seconds a caller's pattern may take over one answer (a sane one needs milliseconds
# for the longest answer checked), and the longest pattern taken.
MARKER_PATTERN_TIMEOUT = 1.0
_MAX_PATTERN_CHARS = 1000
# re's flags as regex spells them (their values differ for ASCII).
_FLAGS = ("IGNORECASE", "MULTILINE", "DOTALL", "VERBOSE", "ASCII", "UNICODE")


@dataclass(frozen=True, slots=True)
class Marker:
    """One marker: where it is in the answer and the labels it names, in order."""

    start: int
    end: int
    labels: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class CallerPattern:
    """A caller's marker pattern, compiled by ``regex`` and run with a time limit."""

    source: str
    compiled: Any  # regex.Pattern (the package ships no type information)
    timeout: float = MARKER_PATTERN_TIMEOUT

    @property
    def groups(self) -> int:
        return int(self.compiled.groups)

    def finditer(self, answer: str) -> list[re.Match[str]]:
        """Every match in ``answer``; a ``RetrievalError`` once they take longer than
        ``timeout`` seconds together."""
        try:
            return list(self.compiled.finditer(answer, timeout=self.timeout, concurrent=True))
        except (MemoryError, RecursionError) as exc:
            # ``regex`` can exhaust memory before the time limit (a pattern calling itself).
            raise RetrievalError(
                f"marker_pattern {self.source!r} ran out of memory on a {len(answer)}-character "
                f"answer ({type(exc).__name__}) and was stopped; write it without recursion"
            ) from None
        except TimeoutError:
            raise RetrievalError(
                f"marker_pattern {self.source!r} took more than {self.timeout:g} s on a "
                f"{len(answer)}-character answer and was stopped: it backtracks without "
                "bound. Write it without a repeat inside a repeat ((a+)+, (\\w+\\s?)*) or "
                'alternatives that match the same text ((a|a)*), e.g. r"\\(doc: (\\w+)\\)"'
            ) from None


def marker_pattern(
    pattern: str | re.Pattern[str] | None,
) -> re.Pattern[str] | CallerPattern:
    """The pattern markers are found with (``None``: the default forms); a caller's
    pattern, a ``str`` or a compiled ``re.Pattern``, is recompiled for ``regex``."""
    if pattern is None or pattern is DEFAULT_MARKER_PATTERN:
        return DEFAULT_MARKER_PATTERN
    flags = 0
    if isinstance(pattern, re.Pattern):
        source: object = pattern.pattern
        flags = sum(getattr(regex, f) for f in _FLAGS if pattern.flags & getattr(re, f))
    else:
        source = pattern
    if not isinstance(source, str):
        raise RetrievalError(
            f"marker_pattern must be a str or re.Pattern of str, not {type(pattern).__name__}"
            + (" of bytes" if isinstance(source, bytes) else "")
        )
    if len(source) > _MAX_PATTERN_CHARS:
        raise RetrievalError(
            f"marker_pattern is {len(source)} characters; a marker pattern may have at most "
            f"{_MAX_PATTERN_CHARS}"
        )
    called = _recursion(source)
    if called is not None:
        raise RetrievalError(
            f"marker_pattern {source!r} calls a pattern ({called}): recursive patterns are "
            "refused, since matching one can take all memory before its time limit"
        )
    try:
        return CallerPattern(source, regex.compile(source, flags))
    except (regex.error, ValueError, OverflowError, MemoryError, RecursionError) as exc:
        raise RetrievalError(f"marker_pattern is not a valid regular expression: {exc}") from None


# A call of a group or the whole pattern: (?R), (?0), (?1), (?+1), (?-1), (?&name), (?P>name).
_CALL = re.compile(r"\(\?(?:R|[+-]?\d+|&\w+|P>\w+)\)")


def _recursion(source: str) -> str | None:
    """The first call of a (sub)pattern in ``source``, outside escapes and character
    classes, or None. ``regex`` matches such a pattern by recursing, and ``(?R)`` alone
    allocates without bound (a bare ``MemoryError`` after some 600 MB)."""
    i, n = 0, len(source)
    while i < n:
        char = source[i]
        if char == "\\":
            i += 2
            continue
        if char == "[":
            i += 1
            if i < n and source[i] == "^":
                i += 1
            if i < n and source[i] == "]":
                i += 1  # a leading "]" is a member, not the end
            while i < n and source[i] != "]":
                i += 2 if source[i] == "\\" else 1
            i += 1
            continue
        if char == "(":
            called = _CALL.match(source, i)
            if called is not None:
                return called.group()
        i += 1
    return None


def find_markers(
    answer: str, pattern: re.Pattern[str] | CallerPattern = DEFAULT_MARKER_PATTERN
) -> list[Marker]:
    """Every marker of ``answer``, in order.

    With a caller's pattern, its first group (or the whole match when it has
    none) holds the labels, split on commas and semicolons. A bare
    ``re.Pattern`` runs as given, unbounded; ``marker_pattern`` makes the
    bounded form of one.
    """
    out: list[Marker] = []
    matches: Iterable[re.Match[str]] = pattern.finditer(answer)
    for match in matches:
        if match.end() == match.start():
            continue
        if pattern is DEFAULT_MARKER_PATTERN:
            foot = match.group("foot")
            labels = (
                (foot,) if foot is not None else _numbers(match.group("num") or match.group("cjk"))
            )
        else:
            raw = match.group(1) if pattern.groups else match.group()
            labels = tuple(p for p in _SPLIT.split(raw or "") if p)
        if labels:
            out.append(Marker(match.start(), match.end(), labels))
    return out


def _numbers(text: str) -> tuple[str, ...]:
    labels: list[str] = []
    for part in _SPLIT.split(text.strip()):
        ranged = _RANGE.fullmatch(part)
        if ranged is None:
            labels.append(str(int(part)) if len(part) <= _MAX_DIGITS else part)
            continue
        if max(len(ranged.group(1)), len(ranged.group(2))) > _MAX_DIGITS:
            labels.append(part)
            continue
        lo, hi = int(ranged.group(1)), int(ranged.group(2))
        if hi < lo or hi - lo >= _MAX_RANGE:
            labels.append(part)  # not a range that names results: reported as dangling
            continue
        labels.extend(str(n) for n in range(lo, hi + 1))
    return tuple(dict.fromkeys(labels))
