"""Document fields: typed, descriptive metadata that filters can rely on.

Fields come from a Markdown file's front matter, a PDF's document info, an
HTML page's ``<title>`` and ``<meta>`` tags, or the caller
(``Collection.ingest(path, metadata=...)``). They are stored with the document
under ``metadata["fields"]``, apart from the keys groundkit records for itself,
so no user key can shadow the page offsets citations depend on
(adr/0016-document-fields.md).

A value is a ``str``, ``int`` (64-bit), finite ``float`` or ``bool``, or a list
of one of those types; dates are ISO 8601 strings. Anything else is refused
with an ``IngestionError`` naming the key, never dropped.

Front matter is read by a small parser written for this subset (section 2.8
of SPEC.md), not by a YAML library: a YAML feature outside it is an error, not
a value YAML would have read differently.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import re
from collections.abc import Mapping
from typing import Any

from groundkit.contracts import (
    FIELD_NAME_PATTERN,
    SENSITIVITY_FIELD,
    SENSITIVITY_LEVELS,
    FieldScalar,
    FieldValue,
)
from groundkit.errors import IngestionError
from groundkit.utils.text import describe_unencodable

__all__ = [
    "check_fields",
    "extraction_fields",
    "front_matter_fields",
    "parse_field_value",
    "pdf_date",
]

_INT_LIMIT = 2**63

_FENCE = re.compile(r"---[ \t]*")
_CLOSE = re.compile(r"(?:---|\.\.\.)[ \t]*")
_INT = re.compile(r"[-+]?[0-9]+")
_FLOAT = re.compile(r"[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?")
_NULLS = frozenset({"null", "Null", "NULL", "~"})
_BOOLS = {"true": True, "True": True, "TRUE": True, "false": False, "False": False, "FALSE": False}
# Plain values may not start with these: YAML gives them a meaning this subset lacks.
_INDICATORS = frozenset("&*!|>{}[]%@`,?")
_NOT_FINITE = re.compile(r"[-+]?\.(?:inf|Inf|INF|nan|NaN|NAN)")
_RADIX = re.compile(r"[-+]?0[xXoObB][0-9A-Fa-f_]+")
_COMMENT = re.compile(r"[ \t]#")


def _scalar(value: object, key: str, where: str) -> FieldScalar:
    if isinstance(value, bool):
        return value
    if isinstance(value, str):
        problem = describe_unencodable(value, f"{where}: field {key!r}")
        if problem is not None:
            # A PDF's info strings can hold a broken UTF-16 pair, say.
            raise IngestionError(problem)
        return str(value)  # a str subclass (pypdf's, say) stored as plain text
    if isinstance(value, int):
        if not -_INT_LIMIT <= value < _INT_LIMIT:
            raise IngestionError(f"{where}: field {key!r} is outside the 64-bit integer range")
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise IngestionError(f"{where}: field {key!r} is not a finite number")
        return value
    if value is None:
        hint = "leave the key out instead"
    elif isinstance(value, dt.date | dt.datetime | dt.time):
        hint = "give dates as ISO 8601 strings (value.isoformat())"
    elif isinstance(value, Mapping):
        hint = "nested mappings are not fields; flatten them into separate keys"
    else:
        hint = "use a str, int, float, bool or a list of one of those"
    raise IngestionError(
        f"{where}: field {key!r} has a value of type {type(value).__name__}; {hint}"
    )


def check_fields(fields: Mapping[Any, object], where: str) -> dict[str, FieldValue]:
    """A validated copy of ``fields`` with sorted keys; ``IngestionError`` on the first problem.

    ``where`` (a source, or "metadata argument") starts every message.
    """
    if not isinstance(fields, Mapping):
        raise IngestionError(f"{where}: fields must be a mapping, not {type(fields).__name__}")
    out: dict[str, FieldValue] = {}
    for key in fields:
        if isinstance(key, tuple | frozenset):
            # Named by type: str() of a deeply nested key would recurse without end.
            raise IngestionError(
                f"{where}: a field name must be a string, not a {type(key).__name__}"
            )
    for key in sorted(fields, key=str):
        if not isinstance(key, str) or not FIELD_NAME_PATTERN.fullmatch(key):
            raise IngestionError(
                f"{where}: field name {key!r} is not allowed; use 1-64 letters, digits, '_' "
                "or '-', starting with a letter or '_'"
            )
        value = fields[key]
        if isinstance(value, list | tuple):
            items = [_scalar(item, key, where) for item in value]
            if len({type(item) for item in items}) > 1:
                raise IngestionError(
                    f"{where}: field {key!r} mixes value types in one list; keep one type"
                )
            out[key] = items
        else:
            out[key] = _scalar(value, key, where)
    label = out.get(SENSITIVITY_FIELD)
    if label is not None and label not in SENSITIVITY_LEVELS:
        # A label outside the scale could be neither shown nor hidden correctly.
        raise IngestionError(
            f"{where}: field {SENSITIVITY_FIELD!r} is {label!r}; use one of "
            f"{', '.join(SENSITIVITY_LEVELS)}"
        )
    return out


# -- front matter ----------------------------------------------------------------


def _strip_comment(text: str) -> str:
    """Plain text without a trailing `` # comment`` (YAML needs the blank before ``#``)."""
    match = _COMMENT.search(text)
    return (text[: match.start()] if match else text).strip()


def _quoted(text: str, where: str) -> tuple[str, str]:
    """A leading quoted string's value and the text after its closing quote."""
    quote = text[0]
    i = 1
    while i < len(text):
        char = text[i]
        if quote == '"' and char == "\\":
            i += 2
            continue
        if char == quote:
            if quote == "'" and text[i + 1 : i + 2] == "'":
                i += 2  # '' is one quote inside single quotes
                continue
            break
        i += 1
    else:
        raise IngestionError(f"{where}: the quoted value has no closing {quote}")
    body, rest = text[1:i], text[i + 1 :]
    if quote == "'":
        return body.replace("''", "'"), rest
    try:
        value = json.loads(f'"{body}"', strict=False)
    except ValueError:
        raise IngestionError(
            f"{where}: cannot read the double-quoted value (only JSON escapes such as "
            '\\n, \\" and \\u00e9 are supported)'
        ) from None
    return str(value), rest


def _plain(text: str, where: str) -> FieldScalar:
    if not text:
        raise IngestionError(f"{where}: empty value")
    if text in _NULLS:
        raise IngestionError(f"{where}: null is not a field value; leave the key out")
    if text in _BOOLS:
        return _BOOLS[text]
    if _INT.fullmatch(text):
        return int(text)
    if _FLOAT.fullmatch(text):
        return float(text)
    if _NOT_FINITE.fullmatch(text):
        raise IngestionError(f"{where}: {text!r} is not a finite number; quote it")
    if _RADIX.fullmatch(text):
        raise IngestionError(f"{where}: write {text!r} in decimal, or quote it")
    if text[0] in _INDICATORS or text.startswith(("- ", ": ", "#")) or text == "-":
        raise IngestionError(
            f"{where}: a value starting with {text[0]!r} needs quotes in this subset"
        )
    if ": " in text or text.endswith(":"):
        raise IngestionError(f"{where}: a value containing ': ' needs quotes")
    if _COMMENT.search(text):
        raise IngestionError(f"{where}: ' #' starts a comment here; quote the value")
    return text


def _scalar_text(text: str, where: str) -> FieldScalar:
    """One scalar: quoted (always a string) or plain (typed by its spelling)."""
    text = text.strip()
    if text[:1] in ("'", '"'):
        value, rest = _quoted(text, where)
        if _strip_comment(" " + rest):
            raise IngestionError(f"{where}: text after the closing quote")
        return value
    return _plain(_strip_comment(text), where)


def _flow_list(text: str, where: str) -> list[FieldScalar]:
    """``[a, "b, c", 3]``: scalars separated by commas, no nesting."""
    items: list[FieldScalar] = []
    rest = text[1:].lstrip()
    if rest.startswith("]"):
        tail = rest[1:]
    else:
        while True:
            if rest[:1] in ("'", '"'):
                value, rest = _quoted(rest, where)
                items.append(value)
            else:
                match = re.match(r"[^,\]\[{}]*", rest)
                assert match is not None
                if rest[match.end() : match.end() + 1] in ("[", "{"):
                    raise IngestionError(f"{where}: nested lists or mappings in a list")
                items.append(_plain(match.group().strip(), where))
                rest = rest[match.end() :]
            rest = rest.lstrip()
            if rest.startswith(","):
                rest = rest[1:].lstrip()
                continue
            if rest.startswith("]"):
                tail = rest[1:]
                break
            raise IngestionError(f"{where}: a list needs a closing ']'")
    if _strip_comment(" " + tail):
        raise IngestionError(f"{where}: text after the closing ']'")
    return items


def parse_field_value(text: str, where: str = "value") -> FieldValue:
    """A value as written after ``key:``: a flow list ``[...]`` or one scalar.

    Also how ``grk ingest --meta key=value`` types its values. ``where`` starts
    any error message.
    """
    stripped = text.strip()
    if stripped.startswith("["):
        return _flow_list(stripped, where)
    return _scalar_text(stripped, where)


def _split_front_matter(text: str) -> tuple[list[str], int] | None:
    """The lines between the fences and the file line number of the first, or None."""
    start = 1 if text.startswith("\ufeff") else 0
    end = text.find("\n", start)
    if end < 0 or not _FENCE.fullmatch(text[start:end].rstrip("\r")):
        return None
    lines: list[str] = []
    for raw in text[end + 1 :].split("\n"):
        line = raw.rstrip("\r")
        if _CLOSE.fullmatch(line):
            return lines, 2
        lines.append(line)
    return None  # no closing fence: a thematic break, not front matter


_INDENTED = (
    "line {}: indented line outside a list (nested mappings and values spanning lines "
    "are not supported)"
)


def _block_items(lines: list[str], i: int, first: int) -> tuple[list[FieldScalar], int]:
    """``- item`` lines from ``lines[i]`` on; returns the items and the next line index."""
    items: list[FieldScalar] = []
    while i < len(lines):
        line = lines[i]
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            i += 1
            continue
        number = first + i
        if not (stripped == "-" or stripped.startswith("- ")):
            if line[0] in " \t":
                raise IngestionError(_INDENTED.format(number))
            break
        if stripped == "-":
            raise IngestionError(f"line {number}: empty list item")
        item = stripped[2:]
        if item.lstrip().startswith(("[", "- ")):
            raise IngestionError(f"line {number}: nested lists are not supported")
        items.append(_scalar_text(item, f"line {number}"))
        i += 1
    return items, i


def front_matter_fields(text: str) -> dict[str, FieldValue]:
    """Fields of a leading ``---`` block; ``{}`` when the text has none.

    Raises ``IngestionError`` ("line N: ...", counted from the top of the file)
    for anything outside the supported subset.
    """
    found = _split_front_matter(text)
    if found is None:
        return {}
    lines, first = found
    fields: dict[str, FieldValue] = {}
    i = 0
    while i < len(lines):
        line, number = lines[i], first + i
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            i += 1
            continue
        if line[0] in " \t":
            raise IngestionError(_INDENTED.format(number))
        if stripped == "-" or stripped.startswith("- "):
            raise IngestionError(f"line {number}: a list item needs a 'key:' line above it")
        key, colon, rest = line.partition(":")
        if not colon or (rest and rest[0] not in " \t"):
            raise IngestionError(f"line {number}: expected 'key: value'")
        key = key.strip()
        if not FIELD_NAME_PATTERN.fullmatch(key):
            raise IngestionError(
                f"line {number}: field name {key!r} is not allowed; use 1-64 letters, digits, "
                "'_' or '-', starting with a letter or '_'"
            )
        if key in fields:
            raise IngestionError(f"line {number}: field {key!r} appears twice")
        if _strip_comment(" " + rest):
            fields[key] = parse_field_value(rest, f"line {number}")
            i += 1
            continue
        items, i = _block_items(lines, i + 1, first)
        if not items:
            raise IngestionError(
                f"line {number}: field {key!r} has no value (null is not a field value)"
            )
        fields[key] = items
    return check_fields(fields, "front matter")


# -- PDF and HTML ----------------------------------------------------------------

_PDF_DATE = re.compile(
    r"(?:D:)?(\d{4})(\d{2})?(\d{2})?(\d{2})?(\d{2})?(\d{2})?"
    r"(?:(Z)(?:00'?(?:00'?)?)?|([+-])(\d{2})(?:'?(\d{2})'?)?)?"
)


def pdf_date(raw: str) -> str:
    """A PDF date (``D:YYYYMMDDHHmmSS+HH'mm'``, trailing parts optional) as ISO 8601.

    Missing parts take the defaults the PDF specification gives (month and day
    1, the rest 0); a time zone is kept when the date states one.
    """
    match = _PDF_DATE.fullmatch(raw.strip())
    if match is None:
        raise ValueError(f"{raw!r} is not a PDF date")
    year, month, day, hour, minute, second, zulu, sign, tz_hours, tz_minutes = match.groups()
    tz: dt.tzinfo | None = None
    if zulu:
        tz = dt.UTC
    elif sign:
        offset = dt.timedelta(hours=int(tz_hours), minutes=int(tz_minutes or 0))
        tz = dt.timezone(-offset if sign == "-" else offset)
    moment = dt.datetime(
        int(year),
        int(month or 1),
        int(day or 1),
        int(hour or 0),
        int(minute or 0),
        int(second or 0),
        tzinfo=tz,
    )
    return moment.isoformat()


def _text(value: str | None) -> str | None:
    if value is None:
        return None
    flat = " ".join(value.replace("\x00", " ").split())
    return flat or None


def extraction_fields(title: str | None, info: Mapping[str, str]) -> dict[str, FieldValue]:
    """Fields from what an extractor read besides the text.

    ``title`` (HTML ``<title>``, else PDF /Title), ``author``, ``subject`` (PDF),
    ``description`` (HTML), ``keywords`` (HTML, split on commas into a list) and
    ``created`` (PDF /CreationDate as ISO 8601). Whitespace runs become one
    space; empty values are left out. A creation date that does not parse
    raises ``IngestionError``.
    """
    fields: dict[str, FieldValue] = {}
    named = _text(title) or _text(info.get("title"))
    if named is not None:
        fields["title"] = named
    for name in ("author", "subject", "description"):
        value = _text(info.get(name))
        if value is not None:
            fields[name] = value
    parts = (_text(part) for part in info.get("keywords", "").split(","))
    keywords: list[FieldScalar] = [k for k in parts if k]
    if keywords:
        fields["keywords"] = keywords
    iso = _text(info.get("created"))
    if iso is not None:
        # Already ISO 8601 (DOCX/PPTX core properties), checked all the same.
        try:
            dt.datetime.fromisoformat(iso)
        except ValueError:
            raise IngestionError(
                "the document's creation date is not an ISO 8601 date; fix the file's "
                "properties, or ingest with IngestConfig(read_fields=False)"
            ) from None
        fields["created"] = iso
    raw = _text(info.get("creation_date"))
    if raw is not None:
        try:
            fields["created"] = pdf_date(raw)
        except ValueError as exc:
            raise IngestionError(
                f"document info CreationDate is not a valid PDF date ({exc}); fix the "
                "file's info, or ingest with IngestConfig(read_fields=False)"
            ) from None
    return fields
