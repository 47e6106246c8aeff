"""Document fields: the front matter subset, value rules, PDF dates, extractor info."""

from __future__ import annotations

import datetime as dt
import math

import pytest

from groundkit import IngestionError
from groundkit.ingestion.fields import (
    check_fields,
    extraction_fields,
    front_matter_fields,
    parse_field_value,
    pdf_date,
)

FRONT = """---
title: Tea notes   # a comment
year: 2024
rating: 4.5
draft: false
published: 2024-03-01
tags: [tea, "green, loose", 'o''clock']
authors:
  - Ann
  - "Bob \\"B\\" O\\u00e9"

# a blank line and a comment inside
empty: ""
url: https://example.com/a#b
---
# Tea notes

Body text.
"""


def test_front_matter_subset() -> None:
    assert front_matter_fields(FRONT) == {
        "authors": ["Ann", 'Bob "B" Oé'],
        "draft": False,
        "empty": "",
        "published": "2024-03-01",
        "rating": 4.5,
        "tags": ["tea", "green, loose", "o'clock"],
        "title": "Tea notes",
        "url": "https://example.com/a#b",
        "year": 2024,
    }


@pytest.mark.parametrize(
    "text",
    [
        "# No front matter\n\ntitle: x\n",
        "---\ntitle: x\n\nA thematic break with no closing fence.\n",
        "Text first\n---\ntitle: x\n---\n",
        "",
        "---",
    ],
)
def test_no_front_matter(text: str) -> None:
    assert front_matter_fields(text) == {}


def test_front_matter_variants() -> None:
    assert front_matter_fields("\ufeff---\r\na: 1\r\n...\r\nbody\r\n") == {"a": 1}
    assert front_matter_fields("---  \nb: [ ]\n---\n") == {"b": []}
    assert front_matter_fields("---\n---\nbody\n") == {}
    assert front_matter_fields("---\nn: -3\nf: 1e3\ns: 1.2.3\nt: TRUE\n---\n") == {
        "f": 1000.0,
        "n": -3,
        "s": "1.2.3",
        "t": True,
    }


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        ("a:\n  b: c", "line 3: indented line outside a list"),
        ("a: x\n  b: c", "line 3: indented line outside a list"),
        ("a: null", "line 2: null is not a field value"),
        ("a: ~", "null is not a field value"),
        ("a:", "line 2: field 'a' has no value"),
        ("a: 1\na: 2", "line 3: field 'a' appears twice"),
        ("1a: x", "field name '1a' is not allowed"),
        ("a b: x", "field name 'a b' is not allowed"),
        ("a: 'open", "no closing '"),
        ("a: b: c", "needs quotes"),
        ("a: [x, [y]]", "nested lists or mappings"),
        ("a: {b: 1}", "needs quotes"),
        ("a: |", "needs quotes"),
        ("a: &anchor 1", "needs quotes"),
        ("a: .inf", "not a finite number"),
        ("a: 0x1F", "in decimal"),
        ("- x", "needs a 'key:' line above it"),
        ("a: [1, x]", "mixes value types"),
        ("a: 'x' extra", "text after the closing quote"),
        ("a: [x, y", "closing ']'"),
        ("a: [x] y", "text after the closing ']'"),
        ("a:\n  -", "empty list item"),
        ("a:\n  - - x", "nested lists"),
        ("a:b", "expected 'key: value'"),
        ("just text", "expected 'key: value'"),
        ('a: "bad \\q escape"', "JSON escapes"),
        ("a: [x #c]", "starts a comment"),
    ],
)
def test_front_matter_errors(body: str, reason: str) -> None:
    with pytest.raises(IngestionError, match="^.*" + _escaped(reason)):
        front_matter_fields(f"---\n{body}\n---\ntext\n")


def _escaped(text: str) -> str:
    import re

    return re.escape(text)


def test_error_names_the_file_line() -> None:
    with pytest.raises(IngestionError, match=r"^line 4: "):
        front_matter_fields("---\na: 1\n# comment\nb: null\n---\n")


def test_check_fields_normalises() -> None:
    class Text(str):
        pass

    checked = check_fields({"b": (1, 2), "a": Text("x"), "c": 2.5, "d": True}, "here")
    assert checked == {"a": "x", "b": [1, 2], "c": 2.5, "d": True}
    assert list(checked) == ["a", "b", "c", "d"]
    assert type(checked["a"]) is str


@pytest.mark.parametrize(
    ("fields", "reason"),
    [
        ({"a": None}, "leave the key out"),
        ({"a": dt.date(2024, 1, 1)}, "ISO 8601"),
        ({"a": {"b": 1}}, "nested mappings"),
        ({"a": {1, 2}}, "type set"),
        ({"a": math.nan}, "not a finite number"),
        ({"a": 2**63}, "64-bit"),
        ({"a": [1, "x"]}, "mixes value types"),
        ({"a": [True, 1]}, "mixes value types"),
        ({"a": [[1]]}, "type list"),
        ({"": 1}, "field name '' is not allowed"),
        ({"a.b": 1}, "not allowed"),
        ({1: 1}, "field name 1 is not allowed"),
    ],
)
def test_check_fields_refuses(fields: dict[object, object], reason: str) -> None:
    with pytest.raises(IngestionError, match=f"^here: .*{_escaped(reason)}"):
        check_fields(fields, "here")


def test_check_fields_needs_a_mapping() -> None:
    with pytest.raises(IngestionError, match="must be a mapping"):
        check_fields([("a", 1)], "here")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("2024", 2024),
        ('"2024"', "2024"),
        ("[a, b]", ["a", "b"]),
        ("true", True),
        ("0.5", 0.5),
        ("2024-03-01", "2024-03-01"),
        ("plain words", "plain words"),
    ],
)
def test_parse_field_value(text: str, value: object) -> None:
    assert parse_field_value(text) == value


@pytest.mark.parametrize(
    ("raw", "iso"),
    [
        ("D:20240301123005Z", "2024-03-01T12:30:05+00:00"),
        ("D:20240301123005Z00'00'", "2024-03-01T12:30:05+00:00"),
        ("D:20240301123005+02'00'", "2024-03-01T12:30:05+02:00"),
        ("D:20240301123005-05'30", "2024-03-01T12:30:05-05:30"),
        ("D:2024", "2024-01-01T00:00:00"),
        ("20240301", "2024-03-01T00:00:00"),
    ],
)
def test_pdf_date(raw: str, iso: str) -> None:
    assert pdf_date(raw) == iso


@pytest.mark.parametrize("raw", ["D:20241301", "yesterday", "D:2024-03-01", ""])
def test_pdf_date_refuses(raw: str) -> None:
    with pytest.raises(ValueError):
        pdf_date(raw)


def test_extraction_fields() -> None:
    html = extraction_fields(
        "  The   Title ",
        {"description": "About\ntea.", "author": "Ann", "keywords": "tea, green ,, loose"},
    )
    assert html == {
        "author": "Ann",
        "description": "About tea.",
        "keywords": ["tea", "green", "loose"],
        "title": "The Title",
    }
    pdf = extraction_fields(
        None,
        {"title": "Report", "subject": " ", "creation_date": "D:20240301123005+01'00'"},
    )
    assert pdf == {"created": "2024-03-01T12:30:05+01:00", "title": "Report"}
    assert extraction_fields(None, {}) == {}
    with pytest.raises(IngestionError, match="CreationDate is not a valid PDF date"):
        extraction_fields(None, {"creation_date": "D:20241340"})
