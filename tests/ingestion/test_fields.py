"""Document fields: the front matter subset, value rules, PDF dates, extractor info."""

from __future__ import annotations

import datetime as dt
import math
import re

import pytest

from groundkit import IngestionError
from groundkit.ingestion.fields import (
    MAX_FRONT_MATTER_CHARS,
    check_fields,
    extraction_fields,
    front_matter_fields,
    parse_field_value,
    pdf_date,
    read_front_matter,
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
    ("value", "read"),
    [
        # Only true/false are booleans: the YAML 1.1 words stay what they say.
        ("no", "no"),
        ("on", "on"),
        ("Yes", "Yes"),
        ("false", False),
        # Numbers keep their written digits or stay text.
        ("1.10", "1.10"),
        ("2.0", "2.0"),
        ("4.5", 4.5),
        ("-0.25", -0.25),
        ("1.5e-3", 0.0015),
        ("007", "007"),
        ("0x1F", "0x1F"),
        ("12345678901234567890123", "12345678901234567890123"),
        ("3.14159265358979323846", "3.14159265358979323846"),
        (".inf", ".inf"),
        # Dates are text unless tagged.
        ("2024-03-01", "2024-03-01"),
        ("2024-03-01 10:00:00 +0100", "2024-03-01 10:00:00 +0100"),
        ("!!timestamp 2024-03-01", "2024-03-01"),
        ("!!timestamp 2024-03-01T10:00:00Z", "2024-03-01T10:00:00+00:00"),
        ("!!float 1.10", 1.1),
        ("!!str 2024", "2024"),
        ("!!bool yes", True),
        ('"[[Linked note]]"', "[[Linked note]]"),
        ("https://example.com/a#b", "https://example.com/a#b"),
        ("a # comment", "a"),
        ("[2024, news]", ["2024", "news"]),
        ("&anchor 1", 1),
    ],
)
def test_values_keep_what_was_written(value: str, read: object) -> None:
    front = read_front_matter(f"---\nkey: {value}\n---\ntext\n")
    assert front.fields == {"key": read}
    assert front.notes == ()


def test_block_scalars_nesting_and_empty_values() -> None:
    front = read_front_matter(
        "---\n"
        "description: >\n  Folded\n  lines.\n"
        "note: |\n  kept\n  as is\n"
        "aliases:\n"
        "cssclasses: ~\n"
        "defaults: &d {layout: post}\n"
        "<<: *d\n"
        "tags:\n  - a\n  - b\n"
        "---\n"
    )
    assert front.fields == {
        "description": "Folded lines.\n",
        "layout": "post",
        "note": "kept\nas is\n",
        "tags": ["a", "b"],
    }
    # Null is the same as leaving the key out; the mapping is skipped and noted.
    assert front.notes == (
        "line 10: field 'defaults' is a mapping (nested fields are not stored; fields hold "
        "text, numbers, booleans or lists of one of them); skipped",
    )


@pytest.mark.parametrize(
    ("body", "note"),
    [
        ("author:\n  name: Ann\n  url: x", "line 3: field 'author' is a mapping"),
        ("a: [x, [y]]", "line 3: field 'a' holds nested lists or mappings; skipped"),
        ("a: !include other.yml", "line 3: field 'a' has the tag '!include'"),
        ("a: !!binary aGVsbG8=", "line 3: field 'a' is a bytes"),
        ("a: !!timestamp yesterday", "line 3: field 'a' cannot be read"),
        ("a: !!float .inf", "line 3: field 'a' is not a finite number; skipped"),
        ("a:\n  -\n  - x", "line 3: field 'a' holds an empty (null) item"),
        ("1a: x", "line 3: key '1a' is not a field name"),
        ("a b: x", "line 3: key 'a b' is not a field name"),
        ("source: wiki", "line 3: field 'source' is skipped: 'source' is the document's own"),
        ("a: 1\na: 2", "line 4: field 'a' is given again (first on line 3); the last value"),
        ("a: 'open", "front matter is not valid YAML (line 3:"),
        ("a: b: c", "front matter is not valid YAML (line 3: mapping values are not allowed"),
        ("just text", "front matter is not valid YAML (line 4: could not find expected ':')"),
        ("- x", "front matter is not valid YAML (line 3: did not find expected key)"),
    ],
)
def test_what_cannot_be_a_field_is_noted_not_fatal(body: str, note: str) -> None:
    front = read_front_matter(f"---\nkeep: 1\n{body}\n---\ntext\n")
    assert len(front.notes) == 1
    assert front.notes[0].startswith(note), front.notes
    if "no fields read" not in front.notes[0] and "not valid YAML" not in front.notes[0]:
        assert front.fields.get("keep") == 1


@pytest.mark.parametrize("body", ["just text", "- a\n- b", "42"])
def test_front_matter_that_is_not_a_mapping_gives_no_fields(body: str) -> None:
    front = read_front_matter(f"---\n{body}\n---\ntext\n")
    assert front.fields == {}
    assert front.notes == (
        "front matter is not a mapping of keys to values; no fields read from it",
    )


def test_front_matter_repeating_an_anchor_past_the_cap_is_noted() -> None:
    # A flat list of aliases to one long anchor: small to write, huge once expanded.
    anchor = "x" * 100_000
    body = f"big: &a {anchor}\nmany: [{', '.join(['*a'] * 1000)}]\ntitle: kept?"
    front = read_front_matter(f"---\n{body}\n---\ntext\n")
    assert front.fields == {}
    assert "anchors" in front.notes[0] and str(MAX_FRONT_MATTER_CHARS) in front.notes[0]
    # Aliases within the cap are read as before, a shared one counted at each use.
    few = read_front_matter(f"---\nbig: &a {'y' * 1000}\nmany: [*a, *a]\n---\ntext\n")
    assert few.fields["many"] == ["y" * 1000] * 2
    with pytest.raises(IngestionError, match="sensitivity"):
        read_front_matter(f"---\nsensitivity: internal\n{body}\n---\ntext\n")


@pytest.mark.parametrize(
    "body",
    [
        "sensitivity: secret",
        "sensitivity:\n  level: internal",
        "sensitivity: [internal, public]",
        "title: 'open\nsensitivity: internal",
    ],
)
def test_a_label_that_cannot_be_read_fails_the_file(body: str) -> None:
    with pytest.raises(IngestionError, match="sensitivity"):
        read_front_matter(f"---\n{body}\n---\ntext\n")


def test_toml_front_matter() -> None:
    front = read_front_matter(
        "+++\ntitle = 'Hugo page'\ndate = 2024-03-01T10:00:00Z\ndraft = false\n"
        "tags = ['a', 'b']\nweight = 10\n[params]\nx = 1\n+++\nbody\n"
    )
    assert front.fields == {
        "date": "2024-03-01T10:00:00+00:00",
        "draft": False,
        "tags": ["a", "b"],
        "title": "Hugo page",
        "weight": 10,
    }
    assert front.notes == (
        "field 'params' is a mapping (nested fields are not stored; fields hold text, "
        "numbers, booleans or lists of one of them); skipped",
    )
    bad = read_front_matter("+++\ntitle = \n+++\nbody\n")
    assert bad.fields == {}
    assert bad.notes[0].startswith("front matter is not valid TOML")


@pytest.mark.parametrize("value", ["[" * 5000 + "]" * 5000, "{b = " * 5000 + "1" + "}" * 5000])
def test_deeply_nested_toml_is_noted(value: str) -> None:
    front = read_front_matter(f"+++\ntitle = 'kept?'\na = {value}\n+++\nbody\n")
    assert front.fields == {}
    [note] = front.notes
    assert note == "front matter is TOML nested too deeply to read; no fields read from it"
    # A label it holds cannot be read, so the file fails rather than going public.
    with pytest.raises(IngestionError, match="sensitivity"):
        read_front_matter(f"+++\nsensitivity = 'secret'\na = {value}\n+++\nbody\n")


def test_oversized_front_matter_is_noted() -> None:
    body = "a: " + "x" * (MAX_FRONT_MATTER_CHARS + 1)
    front = read_front_matter(f"---\n{body}\n---\ntext\n")
    assert front.fields == {}
    assert "longer than" in front.notes[0]


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
        ({"source": "wiki"}, "reserved"),
    ],
)
def test_check_fields_refuses(fields: dict[object, object], reason: str) -> None:
    with pytest.raises(IngestionError, match=f"^here: .*{re.escape(reason)}"):
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
        ("1.10", "1.10"),
        ("no", "no"),
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
