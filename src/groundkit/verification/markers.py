"""Citation markers in an answer: ``[1]``, ``[1, 3]``, ``[2-4]``, ``[^1]``, ``【1】``.

A marker names results by label: a number is the 1-based rank of a result in
the list the answer was written from; a footnote label (``[^src]``) or any
label a caller's own pattern captures is looked up in a mapping the caller
gives. Markers are found with their exact offsets in the answer, so a report
can point at each one.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from groundkit.errors import RetrievalError

__all__ = ["DEFAULT_MARKER_PATTERN", "Marker", "find_markers", "marker_pattern"]

# A numeric list ("1, 3", "2-4", "1;2"), in square or lenticular brackets, or a footnote.
_ONE = r"\d{1,4}(?:\s*[-\u2013]\s*\d{1,4})?"
_NUMBERS = rf"{_ONE}(?:\s*[,;\uff0c\u3001]\s*{_ONE})*"
DEFAULT_MARKER_PATTERN = re.compile(
    rf"\[\^(?P<foot>[A-Za-z0-9_.:-]{{1,64}})\]"
    rf"|\[(?P<num>{_NUMBERS})\]|\u3010(?P<cjk>{_NUMBERS})\u3011"
)
_SPLIT = re.compile(r"\s*[,;\uff0c\u3001]\s*")
_RANGE = re.compile(r"(\d+)\s*[-\u2013]\s*(\d+)")
# A range longer than this is a typo or an attack, not a citation.
_MAX_RANGE = 50


@dataclass(frozen=True, slots=True)
class Marker:
    """One marker: where it is in the answer and the labels it names, in order."""

    start: int
    end: int
    labels: tuple[str, ...]


def marker_pattern(pattern: str | re.Pattern[str] | None) -> re.Pattern[str]:
    """The compiled pattern markers are found with (``None``: the default forms)."""
    if pattern is None:
        return DEFAULT_MARKER_PATTERN
    if isinstance(pattern, re.Pattern):
        return pattern
    if not isinstance(pattern, str):
        raise RetrievalError(
            f"marker_pattern must be a str or re.Pattern, not {type(pattern).__name__}"
        )
    try:
        return re.compile(pattern)
    except re.error as exc:
        raise RetrievalError(f"marker_pattern is not a valid regular expression: {exc}") from None


def find_markers(answer: str, pattern: re.Pattern[str] = DEFAULT_MARKER_PATTERN) -> list[Marker]:
    """Every marker of ``answer``, in order.

    With a caller's pattern, its first group (or the whole match when it has
    none) holds the labels, split on commas and semicolons.
    """
    out: list[Marker] = []
    for match in pattern.finditer(answer):
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
            labels.append(str(int(part)))
            continue
        lo, hi = int(ranged.group(1)), int(ranged.group(2))
        if hi < lo or hi - lo >= _MAX_RANGE:
            labels.append(part)  # not a range that names results: reported as dangling
            continue
        labels.extend(str(n) for n in range(lo, hi + 1))
    return tuple(dict.fromkeys(labels))
