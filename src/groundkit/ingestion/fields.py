"""Document fields: typed, descriptive metadata that filters can rely on.

Fields come from a Markdown file's front matter, a PDF's document info, an
HTML page's ``<title>`` and ``<meta>`` tags, or the caller
(``Collection.ingest(path, metadata=...)``). They are stored with the document
under ``metadata["fields"]``, apart from the keys groundkit records for itself,
so no user key can shadow the page offsets citations depend on
(adr/0016-document-fields.md).

A value is a ``str``, ``int`` (64-bit), finite ``float`` or ``bool``, or a list
of one of those types; dates are ISO 8601 strings. Anything else given by the
caller is refused with an ``IngestionError`` naming the key, never dropped.

Front matter is what static-site tools write (Jekyll, Hugo, MkDocs, Obsidian):
YAML between ``---`` lines, parsed by PyYAML, or TOML between ``+++`` lines
(Hugo), parsed by ``tomllib``. The YAML resolver is groundkit's own, so values
keep the meaning they were written with: only ``true``/``false`` are booleans
(``no`` and ``on`` stay text), a number whose digits a float or an int would
lose stays text (``1.10``, ``007``), and dates stay text unless tagged
``!!timestamp``. A field that cannot be a field (a nested mapping, a tag
groundkit does not know, a list of lists) is skipped and named in a note; the
rest of the file, body included, is indexed (adr/0031-front-matter.md). Only a
``sensitivity`` label that cannot be read fails the file: skipping it would
make a labelled document public.
"""

from __future__ import annotations

import datetime as dt
import math
import re
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from dataclasses import field as dc_field
from typing import Any

import yaml

from groundkit.contracts import (
    FIELD_NAME_PATTERN,
    SENSITIVITY_FIELD,
    SENSITIVITY_LEVELS,
    SOURCE_FIELD,
    FieldScalar,
    FieldValue,
)
from groundkit.errors import IngestionError, InvalidInputError
from groundkit.utils.text import describe_unencodable

__all__ = [
    "MAX_FRONT_MATTER_CHARS",
    "FrontMatter",
    "check_fields",
    "extraction_fields",
    "front_matter_fields",
    "parse_field_value",
    "pdf_date",
    "read_front_matter",
]

_INT_LIMIT = 2**63


def _scalar(value: object, key: str, where: str) -> FieldScalar:
    if isinstance(value, bool):
        return value
    if isinstance(value, str):
        problem = describe_unencodable(value, f"{where}: field {key!r}")
        if problem is not None:
            # A PDF's info strings can hold a broken UTF-16 pair, say.
            raise InvalidInputError(problem)
        # A str subclass (pypdf's, a ``(str, Enum)`` member) stored as the plain text
        # it holds: ``str()`` of an enum member is its name ('Team.INFRA'), not its value.
        return str.__str__(value)
    if isinstance(value, int):
        # Likewise an ``IntEnum`` member (or another int subclass) is stored as its int.
        number = int.__int__(value)
        if not -_INT_LIMIT <= number < _INT_LIMIT:
            raise InvalidInputError(f"{where}: field {key!r} is outside the 64-bit integer range")
        return number
    if isinstance(value, float):
        real = float.__float__(value)
        if not math.isfinite(real):
            raise InvalidInputError(f"{where}: field {key!r} is not a finite number")
        return real
    if value is None:
        hint = "leave the key out instead"
    elif isinstance(value, dt.date | dt.datetime | dt.time):
        hint = "give dates as ISO 8601 strings (value.isoformat())"
    elif isinstance(value, Mapping):
        hint = "nested mappings are not fields; flatten them into separate keys"
    else:
        hint = "use a str, int, float, bool or a list of one of those"
    raise InvalidInputError(
        f"{where}: field {key!r} has a value of type {type(value).__name__}; {hint}"
    )


def check_fields(fields: Mapping[Any, object], where: str) -> dict[str, FieldValue]:
    """A validated copy of ``fields`` with sorted keys; ``IngestionError`` on the first problem.

    ``where`` (a source, or "metadata argument") starts every message.
    """
    if not isinstance(fields, Mapping):
        raise InvalidInputError(f"{where}: fields must be a mapping, not {type(fields).__name__}")
    out: dict[str, FieldValue] = {}
    for key in fields:
        if isinstance(key, tuple | frozenset):
            # Named by type: str() of a deeply nested key would recurse without end.
            raise InvalidInputError(
                f"{where}: a field name must be a string, not a {type(key).__name__}"
            )
    for key in sorted(fields, key=str):
        if not isinstance(key, str) or not FIELD_NAME_PATTERN.fullmatch(key):
            raise InvalidInputError(
                f"{where}: field name {key!r} is not allowed; use 1-64 letters, digits, '_' "
                "or '-', starting with a letter or '_'"
            )
        if key == SOURCE_FIELD:
            raise InvalidInputError(
                f"{where}: field name {key!r} is reserved: filters use it for the "
                "document's own source (its path or URL); choose another name"
            )
        value = fields[key]
        if isinstance(value, list | tuple):
            items = [_scalar(item, key, where) for item in value]
            if len({type(item) for item in items}) > 1:
                raise InvalidInputError(
                    f"{where}: field {key!r} mixes value types in one list; keep one type"
                )
            out[key] = items
        else:
            out[key] = _scalar(value, key, where)
    label = out.get(SENSITIVITY_FIELD)
    if label is not None and label not in SENSITIVITY_LEVELS:
        # A label outside the scale could be neither shown nor hidden correctly.
        raise InvalidInputError(
            f"{where}: field {SENSITIVITY_FIELD!r} is {label!r}; use one of "
            f"{', '.join(SENSITIVITY_LEVELS)}"
        )
    return out


# -- front matter ----------------------------------------------------------------

# Front matter longer than this is not parsed; its fields are skipped with a note. A page's
# metadata is a few hundred bytes, and a parser should not be handed megabytes of it.
MAX_FRONT_MATTER_CHARS = 256 * 1024

_YAML_FENCE = re.compile(r"---[ \t]*")
_YAML_CLOSE = re.compile(r"(?:---|\.\.\.)[ \t]*")
_TOML_FENCE = re.compile(r"\+\+\+[ \t]*")
# A label that cannot be read must fail the file, not leave it public: looked for by line
# when the front matter as a whole cannot be parsed.
_LABEL_LINE = re.compile(rf"^[ \t]*['\"]?{SENSITIVITY_FIELD}['\"]?[ \t]*[:=]", re.MULTILINE)
_FLOAT_DIGITS = 15  # a float keeps at most this many significant decimal digits
_WHAT_FIELDS_HOLD = "fields hold text, numbers, booleans or lists of one of them"


@dataclass(frozen=True, slots=True)
class FrontMatter:
    """The fields a file's front matter gives, and one note per field it passed over."""

    fields: dict[str, FieldValue] = dc_field(default_factory=dict)
    notes: tuple[str, ...] = ()


class _Unreadable:
    """A value YAML read but a field cannot hold (an unknown tag)."""

    def __init__(self, why: str) -> None:
        self.why = why


_ABSENT = object()  # null: the same as leaving the key out

# groundkit's own tags for what plain (unquoted) scalars resolve to; the standard
# ``!!int``, ``!!float``, ``!!bool``, ``!!timestamp`` tags keep PyYAML's constructors,
# so a value its author typed explicitly is read the way YAML says.
_TAG = "tag:groundkit.dev,2024:"
_BOOL_TAG, _INT_TAG, _FLOAT_TAG, _NULL_TAG = (_TAG + k for k in ("bool", "int", "float", "null"))

_SafeLoader: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class _Loader(_SafeLoader):  # type: ignore[valid-type,misc]
    """PyYAML's safe loader with a resolver that keeps plain values as written.

    Plain scalars become: a bool only for ``true``/``false`` (any case YAML 1.2 allows),
    null only for ``null``/``~``/nothing, an int for decimal digits without a leading
    zero, a float for a decimal whose written digits a float keeps (``4.5``, ``1e3``, but
    not ``1.10``, ``2.0`` or 17 digits), and text for everything else: ``no``, ``on``,
    ``007``, ``0x1F``, ``2024-03-01``, ``.inf``. No implicit timestamps, no sexagesimal.
    """

    yaml_implicit_resolvers: dict[Any, Any] = {}  # noqa: RUF012  (PyYAML's class registry)


_Loader.add_implicit_resolver(
    _BOOL_TAG, re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF")
)
# Merge keys (``<<: *defaults``), which PyYAML expands when flattening a mapping.
_Loader.add_implicit_resolver("tag:yaml.org,2002:merge", re.compile(r"^(?:<<)$"), ["<"])
_Loader.add_implicit_resolver(
    _NULL_TAG, re.compile(r"^(?:~|null|Null|NULL|)$"), ["~", "n", "N", ""]
)
_Loader.add_implicit_resolver(
    _INT_TAG, re.compile(r"^[-+]?(?:0|[1-9][0-9]*)$"), list("-+0123456789")
)
_Loader.add_implicit_resolver(
    _FLOAT_TAG,
    re.compile(
        r"^[-+]?(?:(?:(?:0|[1-9][0-9]*)?\.[0-9]*[1-9])(?:[eE][-+]?[0-9]+)?"
        r"|(?:0|[1-9][0-9]*)[eE][-+]?[0-9]+)$"
    ),
    list("-+.0123456789"),
)


def _construct_bool(loader: yaml.SafeLoader, node: yaml.Node) -> bool:
    return str(loader.construct_scalar(node)).lower() == "true"  # type: ignore[arg-type]


def _construct_null(loader: yaml.SafeLoader, node: yaml.Node) -> None:
    return None


def _construct_int(loader: yaml.SafeLoader, node: yaml.Node) -> int | str:
    text = str(loader.construct_scalar(node))  # type: ignore[arg-type]
    value = int(text)
    # Beyond 64 bits a field cannot hold it as a number; the digits are kept as text.
    return value if -_INT_LIMIT <= value < _INT_LIMIT else text


def _construct_float(loader: yaml.SafeLoader, node: yaml.Node) -> float | str:
    text = str(loader.construct_scalar(node))  # type: ignore[arg-type]
    mantissa = re.split(r"[eE]", text)[0].lstrip("+-").replace(".", "").lstrip("0")
    if len(mantissa) > _FLOAT_DIGITS:
        return text  # a float would round it
    return float(text)


def _construct_unknown(loader: yaml.SafeLoader, node: yaml.Node) -> _Unreadable:
    return _Unreadable(f"has the tag {node.tag!r}, which groundkit does not read")


_Loader.add_constructor(_BOOL_TAG, _construct_bool)
_Loader.add_constructor(_NULL_TAG, _construct_null)
_Loader.add_constructor(_INT_TAG, _construct_int)
_Loader.add_constructor(_FLOAT_TAG, _construct_float)
_Loader.add_constructor(None, _construct_unknown)


def _yaml_problem(exc: BaseException, first_line: int) -> str:
    """A YAML error in one line, its line counted in the file."""
    if isinstance(exc, yaml.MarkedYAMLError) and exc.problem_mark is not None:
        problem = exc.problem or exc.context or "cannot be parsed"
        return f"line {first_line + exc.problem_mark.line}: {' '.join(str(problem).split())}"
    return " ".join(str(exc).split()) or type(exc).__name__


def _field_value(value: object, node: yaml.Node | None, key: str) -> object:
    """``value`` as a field value, ``_ABSENT`` for null; ``ValueError`` says why it cannot be."""
    if value is None:
        return _ABSENT
    if isinstance(value, dt.datetime | dt.date | dt.time):
        return value.isoformat()
    if isinstance(value, bool | int | float | str):
        return _scalar(value, key, "front matter")
    if isinstance(value, list):
        if any(isinstance(item, list | dict | set | _Unreadable | bytes) for item in value):
            raise ValueError("holds nested lists or mappings")
        items = [
            item.isoformat() if isinstance(item, dt.datetime | dt.date | dt.time) else item
            for item in value
            if item is not None
        ]
        if len(items) != len(value):
            raise ValueError("holds an empty (null) item; give every item a value")
        if len({kind_of_value(item) for item in items}) > 1:
            written = _written_items(node)
            if written is None:
                raise ValueError("mixes value types in one list")
            items = written  # as written: ``[2024, news]`` is a list of text
        return [_scalar(item, key, "front matter") for item in items]
    if isinstance(value, dict):
        raise ValueError(f"is a mapping (nested fields are not stored; {_WHAT_FIELDS_HOLD})")
    if isinstance(value, _Unreadable):
        raise ValueError(value.why)
    raise ValueError(f"is a {type(value).__name__} ({_WHAT_FIELDS_HOLD})")


def kind_of_value(value: object) -> str:
    """``str``, ``number`` or ``bool``: the kinds a list may not mix."""
    if isinstance(value, bool):
        return "bool"
    return "number" if isinstance(value, int | float) else type(value).__name__


def _written_items(node: yaml.Node | None) -> list[FieldScalar] | None:
    """The items of a sequence of plain scalars as their text, or None."""
    if not isinstance(node, yaml.SequenceNode):
        return None
    items = [item for item in node.value if isinstance(item, yaml.ScalarNode)]
    if len(items) != len(node.value):
        return None
    return [str(item.value) for item in items]


def _split_front_matter(text: str) -> tuple[str, str, int] | None:
    """``(syntax, block, file line of its first line)`` of a leading front matter block.

    YAML between ``---`` and ``---`` (or ``...``), TOML between ``+++`` lines; a block
    without its closing line is not front matter (a thematic break, say).
    """
    start = 1 if text.startswith("\ufeff") else 0
    end = text.find("\n", start)
    if end < 0:
        return None
    opening = text[start:end].rstrip("\r")
    if _YAML_FENCE.fullmatch(opening):
        syntax, close = "yaml", _YAML_CLOSE
    elif _TOML_FENCE.fullmatch(opening):
        syntax, close = "toml", _TOML_FENCE
    else:
        return None
    lines: list[str] = []
    for raw in text[end + 1 :].split("\n"):
        line = raw.rstrip("\r")
        if close.fullmatch(line):
            return syntax, "\n".join(lines), 2
        lines.append(line)
    return None


def read_front_matter(text: str) -> FrontMatter:
    """The fields of a leading front matter block, and notes on what was passed over.

    Each note is one line, ``line N: field 'x' ...`` (N counted in the file). A field
    that cannot be a field is skipped and noted; front matter that cannot be parsed at
    all gives no fields and one note. Raises ``IngestionError`` only when the
    ``sensitivity`` label is present but cannot be read: without it the document
    would be public.
    """
    found = _split_front_matter(text)
    if found is None:
        return FrontMatter()
    syntax, block, first_line = found
    if len(block) > MAX_FRONT_MATTER_CHARS:
        return _unparsed(block, f"front matter is longer than {MAX_FRONT_MATTER_CHARS} characters")
    if syntax == "toml":
        return _toml_front_matter(block)
    return _yaml_front_matter(block, first_line)


def _unparsed(block: str, why: str) -> FrontMatter:
    if _LABEL_LINE.search(block):
        raise IngestionError(
            f"{why}, and it names a {SENSITIVITY_FIELD!r} label that therefore cannot be "
            "read; fix the front matter"
        )
    return FrontMatter({}, (f"{why}; no fields read from it",))


class _Collector:
    """Gathers fields and notes; a problem with the label fails the file."""

    def __init__(self) -> None:
        self.fields: dict[str, FieldValue] = {}
        self.notes: list[str] = []
        self._lines: dict[str, int | None] = {}

    def add(self, key: object, line: int | None, value: Callable[[], object]) -> None:
        where = f"line {line}: " if line is not None else ""
        if not isinstance(key, str) or not FIELD_NAME_PATTERN.fullmatch(key):
            self.notes.append(
                f"{where}key {str(key)!r} is not a field name (1-64 letters, digits, '_' or "
                "'-', starting with a letter or '_'); skipped"
            )
            return
        if key == SOURCE_FIELD:
            self.notes.append(
                f"{where}field {key!r} is skipped: 'source' is the document's own location "
                "(filters use it); rename the field"
            )
            return
        try:
            got = value()
        except (IngestionError, ValueError) as exc:
            reason = str(exc).removeprefix(f"front matter: field {key!r} ")
            self._skip(key, where, reason)
            return
        except Exception as exc:  # a constructor PyYAML runs on an explicitly tagged value
            self._skip(key, where, f"cannot be read ({type(exc).__name__})")
            return
        if key in self.fields or key in self._lines:
            before = self._lines.get(key)
            self.notes.append(
                f"{where}field {key!r} is given again"
                + (f" (first on line {before})" if before is not None else "")
                + "; the last value is kept"
            )
        self._lines[key] = line
        if got is _ABSENT:
            self.fields.pop(key, None)
            return
        self.fields[key] = got  # type: ignore[assignment]

    def _skip(self, key: str, where: str, reason: str) -> None:
        if key == SENSITIVITY_FIELD:
            raise IngestionError(
                f"{where}field {key!r} {reason}; a label that cannot be read is never "
                "skipped (the document would be public)"
            )
        self.notes.append(f"{where}field {key!r} {reason}; skipped")

    def result(self) -> FrontMatter:
        try:
            fields = check_fields(self.fields, "front matter")
        except IngestionError as exc:  # the label's value (the one check left)
            raise IngestionError(str(exc).removeprefix("front matter: ")) from None
        return FrontMatter(fields, tuple(self.notes))


def _yaml_front_matter(block: str, first_line: int) -> FrontMatter:
    loader = _Loader(block)
    try:
        try:
            root = loader.get_single_node()
            if isinstance(root, yaml.MappingNode):
                loader.flatten_mapping(root)  # merge keys (<<: *defaults)
        except yaml.YAMLError as exc:
            return _unparsed(
                block, f"front matter is not valid YAML ({_yaml_problem(exc, first_line)})"
            )
        if root is None:
            return FrontMatter()
        if not isinstance(root, yaml.MappingNode):
            return _unparsed(block, "front matter is not a mapping of keys to values")
        if _expanded_chars(root, MAX_FRONT_MATTER_CHARS) > MAX_FRONT_MATTER_CHARS:
            return _unparsed(
                block,
                f"front matter repeats its anchors (*aliases) to more than "
                f"{MAX_FRONT_MATTER_CHARS} characters",
            )
        collector = _Collector()
        for key_node, value_node in root.value:
            line = first_line + key_node.start_mark.line
            key: object = key_node.value if isinstance(key_node, yaml.ScalarNode) else key_node
            if not isinstance(key_node, yaml.ScalarNode):
                key = "<a mapping or list>"

            def construct(node: yaml.Node = value_node, name: object = key) -> object:
                value = loader.construct_object(node, deep=True)
                return _field_value(value, node, str(name))

            collector.add(key, line, construct)
        return collector.result()
    finally:
        loader.dispose()


def _expanded_chars(root: yaml.Node, limit: int) -> int:
    """The characters ``root``'s scalars add up to once every alias is expanded (as the
    fields would be built), counted to just past ``limit``; past it for a recursive one.

    The block's own length is capped, but an alias costs a few bytes and repeats its
    anchor's whole value: a 100 KB block listing one 100 KB anchor a thousand times
    made 100 MB of fields. Each node is sized once (aliases share their node), without
    recursion (nesting may be deep)."""
    sizes: dict[int, int] = {}
    on_path: set[int] = set()
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, children_done = stack.pop()
        key = id(node)
        if isinstance(node, yaml.ScalarNode):
            sizes[key] = len(str(node.value))
            continue
        children = _child_nodes(node)
        if not children_done:
            if key in sizes:
                continue
            on_path.add(key)
            stack.append((node, True))
            for child in children:
                if id(child) in on_path:
                    return limit + 1  # an anchor inside its own value: no end to it
                if id(child) not in sizes:
                    stack.append((child, False))
            continue
        on_path.discard(key)
        sizes[key] = min(limit + 1, 1 + sum(sizes[id(child)] for child in children))
    return sizes[id(root)]


def _child_nodes(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.MappingNode):
        return [part for pair in node.value for part in pair]
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    return []


def _toml_front_matter(block: str) -> FrontMatter:
    try:
        data = tomllib.loads(block)
    except tomllib.TOMLDecodeError as exc:
        return _unparsed(block, f"front matter is not valid TOML ({' '.join(str(exc).split())})")
    except RecursionError:
        # tomllib reads nested arrays and inline tables by recursion, without a limit
        # of its own: deep nesting was a RecursionError out of the whole ingest.
        return _unparsed(block, "front matter is TOML nested too deeply to read")
    collector = _Collector()
    for key, value in data.items():

        def convert(v: object = value, k: str = key) -> object:
            return _field_value(v, None, k)

        collector.add(key, None, convert)
    return collector.result()


def front_matter_fields(text: str) -> dict[str, FieldValue]:
    """The fields of ``text``'s front matter (``read_front_matter`` without the notes)."""
    return read_front_matter(text).fields


def parse_field_value(text: str, where: str = "value") -> FieldValue:
    """A value as front matter would read it after ``key:``: a flow list ``[...]`` or one
    scalar, typed by the same rules (``2024`` a number, ``"2024"`` and ``1.10`` text).

    How ``grk ingest --meta key=value`` and ``grk search --where`` type their values.
    ``IngestionError`` (starting with ``where``) for an empty or null value, a mapping,
    a nested list or anything a field cannot hold.
    """
    if not text.strip():
        raise IngestionError(f"{where}: empty value")
    loader = _Loader(text)
    try:
        try:
            node = loader.get_single_node()
        except yaml.YAMLError as exc:
            problem = _yaml_problem(exc, 1).removeprefix("line 1: ")
            raise IngestionError(f"{where}: cannot read the value ({problem}); quote it") from None
        if isinstance(node, yaml.MappingNode):
            raise IngestionError(
                f"{where}: a value containing ': ' reads as a mapping; quote the value"
            )
        try:
            value = _field_value(loader.construct_object(node, deep=True), node, where)
        except (IngestionError, ValueError) as exc:
            raise IngestionError(f"{where}: {exc}") from None
        except Exception as exc:
            raise IngestionError(f"{where}: cannot read the value ({type(exc).__name__})") from None
    finally:
        loader.dispose()
    if value is _ABSENT:
        raise IngestionError(f"{where}: null is not a field value; leave the key out")
    return value  # type: ignore[return-value]


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
