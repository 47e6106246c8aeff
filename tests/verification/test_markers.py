"""Citation markers: every form, with exact offsets."""

from __future__ import annotations

import re

import pytest

from groundkit.errors import RetrievalError
from groundkit.verification.markers import CallerPattern, find_markers, marker_pattern


def labels(
    text: str, pattern: re.Pattern[str] | CallerPattern | None = None
) -> list[tuple[str, ...]]:
    found = find_markers(text) if pattern is None else find_markers(text, pattern)
    for m in found:
        assert text[m.start : m.end].strip()
    return [m.labels for m in found]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Tea lowers risk [2].", [("2",)]),
        ("Tea lowers risk [1, 3].", [("1", "3")]),
        ("Tea lowers risk [1;3]", [("1", "3")]),
        ("Tea lowers risk [2-4].", [("2", "3", "4")]),
        ("Tea lowers risk [2–4, 7].", [("2", "3", "4", "7")]),
        ("Tea lowers risk[^1].", [("1",)]),
        ("Tea lowers risk[^tea-study].", [("tea-study",)]),
        ("茶可以降低风险【1】。", [("1",)]),
        ("茶可以降低风险【1，2】。", [("1", "2")]),
        ("Adjacent [1][2] markers.", [("1",), ("2",)]),
        ("Repeated [1, 1] label.", [("1",)]),
        ("No markers here.", []),
        ("A list [a] or [ 1 ] is not a marker.", []),
        ("[01] counts as 1.", [("1",)]),
        ("Past ten [12345].", [("12345",)]),
        ("Far past [99999999999999999999999].", [("99999999999999999999999",)]),
        ("Many digits [" + "9" * 5000 + "].", [("9" * 5000,)]),
        ("A long range [1-99999999999999999999].", [("1-99999999999999999999",)]),
    ],
)
def test_default_forms(text: str, expected: list[tuple[str, ...]]) -> None:
    assert labels(text) == expected


def test_offsets_are_exact() -> None:
    text = "Tea [1] and coffee [2, 3]."
    found = find_markers(text)
    assert [text[m.start : m.end] for m in found] == ["[1]", "[2, 3]"]


def test_a_huge_range_is_kept_as_written_and_not_expanded() -> None:
    assert labels("Odd [1-999].") == [("1-999",)]
    assert labels("Backwards [5-2].") == [("5-2",)]


def test_caller_pattern() -> None:
    pattern = marker_pattern(r"\(source: ([\w, ]+)\)")
    assert labels("Tea helps (source: a, b).", pattern) == [("a", "b")]
    whole = marker_pattern(r"<<\w+>>")
    assert labels("Tea <<x>> helps.", whole) == [("<<x>>",)]


def test_bad_caller_pattern_is_a_retrieval_error() -> None:
    with pytest.raises(RetrievalError, match="not a valid regular expression"):
        marker_pattern("([")
    with pytest.raises(RetrievalError, match=r"str or re\.Pattern"):
        marker_pattern(3)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "pattern",
    [
        *(r"(?R)", r"\[(\d+(?R)?)\]", r"(a(?1)?b)", r"(a(?-1)?)", r"(?+1)(a)"),
        *(r"(?P<x>a(?&x)?)", r"(?P<x>a(?P>x)?)", r"[x](?0)"),
    ],
)
def test_a_recursive_caller_pattern_is_refused(pattern: str) -> None:
    """Matching ``(?R)`` made ``regex`` allocate some 600 MB and raise a bare
    ``MemoryError`` before its time limit: a pattern that calls itself or a group is
    refused when it is compiled, with the other bad patterns."""
    with pytest.raises(RetrievalError, match="recursive patterns are refused"):
        marker_pattern(pattern)


@pytest.mark.parametrize(
    "pattern", [r"\(?R\)(\d)", r"[(?R)]+\[(\d)\]", r"[]?(R)](\d)", r"(?:x)?\[(\d)\]"]
)
def test_a_call_only_in_an_escape_or_a_class_is_not_recursion(pattern: str) -> None:
    compiled = marker_pattern(pattern)
    assert isinstance(compiled, CallerPattern)
