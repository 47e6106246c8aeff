"""Metadata filters over document fields: parsed once, checked, evaluated per document.

A filter is ``{field: {op: value, ...}, ...}``; every condition must hold.
``{field: value}`` is short for ``{field: {"eq": value}}``. Conditions are
decided per document (on its fields) and applied to chunks as a mask, so a
filter narrows the candidates before ranking and never after it
(adr/0020-filters.md).

``source`` is not a field: it names the document's own source (its path relative
to the base directory, or its URL), and takes ``eq``, ``ne``, ``in``, ``nin``,
``prefix`` (``"docs/"``) and ``glob`` (``"docs/**/*.md"``: ``*`` and ``?`` stay
within one path segment, ``**`` crosses them). ``prefix`` applies to text fields
as well.

A document lacking the field matches no operator but ``{"exists": False}``;
a list-valued field matches when any element does (``ne`` and ``nin``: when
none does). Values compare only with values of the same kind: ``str``,
number (``int`` or ``float``) or ``bool``.

Haystack's filter syntax (``{"field": "meta.team", "operator": "==", "value":
"infra"}``, and ``AND`` / ``OR`` / ``NOT`` over ``conditions``) is translated by
``from_haystack`` where it has a groundkit form, and refused naming the operator
where it has none; ``parse_filters`` refuses it with the groundkit form spelled out.

A filter is small by nature, so its size is bounded before anything else looks
at it: at most ``MAX_FILTER_DEPTH`` levels of nesting (the deepest valid filter
is ``{field: {op: [values]}}``), ``MAX_FILTER_CONDITIONS`` conditions,
``MAX_FILTER_LIST`` values in one list, ``MAX_FILTER_VALUES`` values and
``MAX_FILTER_CHARS`` characters of names and text in all. The check walks the
input without recursion and stops at the first bound it crosses, so a filter
nested thousands of levels deep, or a list of millions of values, costs no more
than a valid one and is refused with the bound it broke.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Literal

from groundkit.contracts import FIELD_NAME_PATTERN, SOURCE_FIELD, FieldScalar, FieldValue
from groundkit.errors import InvalidQueryError
from groundkit.utils.text import describe_unencodable

__all__ = [
    "FILTER_OPERATORS",
    "MAX_FILTER_CHARS",
    "MAX_FILTER_CONDITIONS",
    "MAX_FILTER_DEPTH",
    "MAX_FILTER_LIST",
    "MAX_FILTER_VALUES",
    "SOURCE_OPERATORS",
    "Condition",
    "Filter",
    "field_kinds",
    "from_haystack",
    "is_haystack_filter",
    "kind_of",
    "meant_for_haystack",
    "parse_filters",
]

Kind = Literal["str", "number", "bool"]
FILTER_OPERATORS = (
    "eq",
    "ne",
    "in",
    "nin",
    "gt",
    "gte",
    "lt",
    "lte",
    "between",
    "exists",
    "prefix",
    "glob",
)
# What ``source`` (the document's path or URL) takes.
SOURCE_OPERATORS = ("eq", "ne", "in", "nin", "prefix", "glob")
_ORDERED = frozenset({"gt", "gte", "lt", "lte", "between"})
_TEXT_ONLY = frozenset({"prefix", "glob"})

# The filter mapping, a field's operators, an operand list: nothing valid nests deeper.
MAX_FILTER_DEPTH = 3
# (field, operator) pairs; each one is evaluated against every document's fields.
MAX_FILTER_CONDITIONS = 64
# Values in one ``in`` / ``nin`` list.
MAX_FILTER_LIST = 1024
# Entries in the whole filter: names, operators, operands and list items.
MAX_FILTER_VALUES = 4096
# Characters of field names, operators and text values in the whole filter.
MAX_FILTER_CHARS = 65_536
# What the size walk descends into; anything else is a leaf, judged by the parser.
_CONTAINERS = (Mapping, list, tuple, set, frozenset)


def kind_of(value: object) -> Kind | None:
    """The comparison kind of a scalar, or None for anything that is not one."""
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "number"
    if isinstance(value, float):
        return "number" if math.isfinite(value) else None
    if isinstance(value, str):
        return "str"
    return None


@dataclass(frozen=True, slots=True)
class Condition:
    """One operator on one field; ``values`` holds its operand(s), already checked."""

    field: str
    op: str
    values: tuple[FieldScalar, ...]
    kind: Kind | None  # None for ``exists``
    pattern: GlobMatcher | None = None  # ``glob``, compiled

    def matches(self, fields: Mapping[str, FieldValue], source: str | None = None) -> bool:
        if self.field == SOURCE_FIELD:
            if source is None:
                return False  # a source that is not known is never let through
            items: list[FieldScalar] = [source]
        else:
            if self.op == "exists":
                return (self.field in fields) is self.values[0]
            if self.field not in fields:
                return False
            value = fields[self.field]
            items = [
                v
                for v in (value if isinstance(value, list) else [value])
                if kind_of(v) == self.kind
            ]
        op, operands = self.op, self.values
        if op == "prefix":
            return any(str(v).startswith(str(o)) for v in items for o in operands)
        if op == "glob":
            assert self.pattern is not None
            return any(self.pattern.fullmatch(str(v)) for v in items)
        if op in ("eq", "in"):
            return any(v == o for v in items for o in operands)
        if op in ("ne", "nin"):
            return not any(v == o for v in items for o in operands)
        bound = operands[0]
        if op == "gt":
            return any(v > bound for v in items)  # type: ignore[operator]
        if op == "gte":
            return any(v >= bound for v in items)  # type: ignore[operator]
        if op == "lt":
            return any(v < bound for v in items)  # type: ignore[operator]
        if op == "lte":
            return any(v <= bound for v in items)  # type: ignore[operator]
        low, high = operands
        return any(low <= v <= high for v in items)  # type: ignore[operator]


@dataclass(frozen=True, slots=True)
class Filter:
    """AND of conditions; ``key`` is a canonical spelling, for caching and logs."""

    conditions: tuple[Condition, ...]
    key: str

    @property
    def fields(self) -> frozenset[str]:
        return frozenset(c.field for c in self.conditions if c.field != SOURCE_FIELD)

    @property
    def needs_source(self) -> bool:
        """Whether a condition is on the document's source rather than its fields."""
        return any(c.field == SOURCE_FIELD for c in self.conditions)

    def matches(self, fields: Mapping[str, FieldValue], source: str | None = None) -> bool:
        """Whether a document with ``fields`` (and ``source``) passes every condition;
        a condition on the source fails when ``source`` is not given."""
        return all(c.matches(fields, source) for c in self.conditions)

    def check_schema(self, kinds: Mapping[str, frozenset[Kind]]) -> None:
        """Refuse a field no document has, or a value no document's field can equal.

        ``kinds`` is what ``field_kinds`` gives for the searchable documents; a field
        with no kind (only empty lists stored under it) takes a value of any kind.
        """
        for c in self.conditions:
            if c.field == SOURCE_FIELD:
                continue  # every document has one
            if c.field not in kinds:
                known = ", ".join(sorted(kinds)[:20]) or "none"
                raise InvalidQueryError(
                    f"filter on unknown field {c.field!r}; fields in this collection: {known}"
                )
            held = kinds[c.field]
            # A field whose values are all empty lists holds no kind: any value may be
            # compared with it, and matches as the operator does on an empty list.
            if c.kind is not None and held and c.kind not in held:
                have = " or ".join(sorted(held))
                raise InvalidQueryError(
                    f"filter {c.field!r} {c.op}: a {c.kind} value for a field holding {have}"
                )


def field_kinds(documents: Iterable[Mapping[str, FieldValue]]) -> dict[str, frozenset[Kind]]:
    """``{field: kinds of its values}`` over ``documents`` (list elements included)."""
    seen: dict[str, set[Kind]] = {}
    for fields in documents:
        for name, value in fields.items():
            bucket = seen.setdefault(name, set())
            for item in value if isinstance(value, list) else [value]:
                kind = kind_of(item)
                if kind is not None:
                    bucket.add(kind)
    return {name: frozenset(kinds) for name, kinds in seen.items()}


def parse_filters(filters: object) -> Filter | None:
    """A checked ``Filter`` from the user's mapping; None for no filter.

    ``InvalidQueryError`` names the first problem: a non-mapping, a bad field
    name, an unknown operator, or an operand of the wrong shape or type.
    """
    if filters is None:
        return None
    if not isinstance(filters, Mapping):
        raise InvalidQueryError(
            f"filters must be a mapping of field to conditions, not {type(filters).__name__}"
        )
    _check_size(filters)
    if is_haystack_filter(filters):
        raise InvalidQueryError(
            "these filters are in Haystack's syntax; groundkit's form of them is "
            f"{json.dumps(from_haystack(filters))} (the Haystack retriever translates them)"
        )
    conditions: list[Condition] = []
    for name in sorted(filters, key=str):
        if not isinstance(name, str) or not FIELD_NAME_PATTERN.fullmatch(name):
            raise InvalidQueryError(f"filter field name {name!r} is not a valid field name")
        spec = filters[name]
        if not isinstance(spec, Mapping):
            spec = {"eq": spec}
        if not spec:
            raise InvalidQueryError(f"filter {name!r} has no conditions")
        for op in sorted(spec, key=str):
            conditions.append(_condition(name, op, spec[op]))
            if len(conditions) > MAX_FILTER_CONDITIONS:
                raise InvalidQueryError(
                    f"filters hold more than {MAX_FILTER_CONDITIONS} conditions; "
                    "use in/nin lists rather than one condition per value"
                )
    if not conditions:
        return None
    key = json.dumps([[c.field, c.op, list(c.values)] for c in conditions], separators=(",", ":"))
    return Filter(tuple(conditions), key)


def _condition(name: str, op: object, operand: object) -> Condition:
    if op not in FILTER_OPERATORS:
        raise InvalidQueryError(
            f"filter {name!r}: unknown operator {op!r}; use one of {', '.join(FILTER_OPERATORS)}"
        )
    assert isinstance(op, str)
    where = f"filter {name!r} {op}"
    if name == SOURCE_FIELD and op not in SOURCE_OPERATORS:
        raise InvalidQueryError(
            f"{where}: source (the document's path or URL) takes {', '.join(SOURCE_OPERATORS)}"
        )
    if op == "glob" and name != SOURCE_FIELD:
        raise InvalidQueryError(f"{where}: glob applies to source; use prefix or eq for a field")
    if op in _TEXT_ONLY:
        if not isinstance(operand, str) or not operand:
            raise InvalidQueryError(f"{where}: takes a non-empty string, not {operand!r}")
        if name == SOURCE_FIELD:
            _stored_form(operand, where, prefix=op == "prefix")
        pattern = glob_pattern(operand) if op == "glob" else None
        return Condition(name, op, (operand,), "str", pattern)
    if op == "exists":
        if not isinstance(operand, bool):
            raise InvalidQueryError(f"{where}: takes true or false, not {operand!r}")
        return Condition(name, op, (operand,), None)
    if op in ("in", "nin", "between"):
        if not isinstance(operand, list | tuple):
            raise InvalidQueryError(f"{where}: takes a list, not {type(operand).__name__}")
        if not operand or len(operand) > MAX_FILTER_LIST:
            raise InvalidQueryError(
                f"{where}: takes 1 to {MAX_FILTER_LIST} values, got {len(operand)}"
            )
        values = tuple(_scalar(v, where) for v in operand)
        kinds = {kind_of(v) for v in values}
        if len(kinds) > 1:
            raise InvalidQueryError(f"{where}: mixes value types; keep one type")
        if op == "between" and len(values) != 2:
            raise InvalidQueryError(f"{where}: takes [low, high], got {len(values)} values")
    else:
        values = (_scalar(operand, where),)
    kind = kind_of(values[0])
    if name == SOURCE_FIELD and kind != "str":
        raise InvalidQueryError(f"{where}: a source is text, not {values[0]!r}")
    if name == SOURCE_FIELD:
        for value in values:
            _stored_form(str(value), where, prefix=op == "prefix")
    if op in _ORDERED and kind == "bool":
        raise InvalidQueryError(f"{where}: true and false have no order")
    if op == "between" and values[0] > values[1]:  # type: ignore[operator]
        raise InvalidQueryError(f"{where}: low {values[0]!r} is above high {values[1]!r}")
    return Condition(name, op, values, kind)


def _stored_form(value: str, where: str, *, prefix: bool) -> None:
    """Refuse a source path no document can have: sources are stored relative to the
    base directory, '/'-separated, with no '.', '..' or empty segments, so
    ``./docs/a.md`` or ``docs//a.md`` would match nothing (or, negated, everything)
    without a word. URLs and record sources (``scheme://``) are taken as written."""
    if "://" in value:
        return
    segments = value.split("/")
    if prefix and len(segments) > 1 and segments[-1] == "":
        segments.pop()  # "docs/": a prefix may end at a separator
    if any(s in ("", ".", "..") for s in segments):
        spelled = "/".join(s for s in segments if s not in ("", "."))
        spelled += "/" if prefix and value.endswith("/") else ""
        relative = not value.startswith("/") and ".." not in segments
        hint = f" (written {spelled!r})" if spelled and relative else ""
        raise InvalidQueryError(
            f"{where}: {value!r} is not how a source is stored: relative to the base "
            "directory, '/'-separated, with no '.', '..' or empty parts, e.g. 'docs/a.md'"
            f"{hint}"
        )


def glob_pattern(glob: str) -> GlobMatcher:
    """A matcher for a path glob: ``*`` and ``?`` within one segment, ``**`` across
    segments (``docs/**/*.md`` matches ``docs/a.md`` and ``docs/x/y/a.md``), ``[abc]``
    a character class; case-sensitive, whole-string. A class that cannot be read is an
    ``InvalidQueryError`` naming the glob, never a regex error."""
    return GlobMatcher(glob)


# Glob tokens: a one-character test (a literal, ``?`` or a class), ``*`` (``[^/]*``),
# ``**`` (``.*``) or ``**/`` (``(?:.*/)?``: zero or more whole directories).
_ONE, _STAR, _STARS, _DIRS = "one", "star", "stars", "dirs"
_Token = tuple[str, str]  # (kind, the regex of a one-character test)


def _glob_tokens(glob: str) -> list[_Token]:
    """``glob`` as tokens, with every run of adjacent wildcards merged into the one or
    two tokens it stands for, so that no run can make the matcher's work grow."""
    out: list[_Token] = []
    i = 0
    while i < len(glob):
        char = glob[i]
        if glob.startswith("**/", i):
            token, i = (_DIRS, ""), i + 3
        elif glob.startswith("**", i):
            token, i = (_STARS, ""), i + 2
        elif char == "*":
            token, i = (_STAR, ""), i + 1
        elif char == "?":
            token, i = (_ONE, "[^/]"), i + 1
        elif char == "[":
            pattern, i = _glob_class(glob, i)
            token = (_ONE, pattern)
        else:
            token, i = (_ONE, re.escape(char)), i + 1
        _push_token(out, token)
    return out


def _push_token(out: list[_Token], token: _Token) -> None:
    """Append ``token``, merging it with the wildcards before it where the two match
    the same strings as one: ``.*`` absorbs any wildcard next to it, ``[^/]*[^/]*`` is
    ``[^/]*``, ``(?:.*/)?(?:.*/)?`` is ``(?:.*/)?`` and ``(?:.*/)?[^/]*`` is ``.*``. What
    is left is at most ``[^/]*(?:.*/)?`` between two one-character tests."""
    kind = token[0]
    while kind != _ONE and out and out[-1][0] != _ONE:
        last = out[-1][0]
        if last == _STARS:
            return
        if kind == _STARS or (last, kind) == (_DIRS, _STAR):
            kind = _STARS
        elif last != kind:  # [^/]* then (?:.*/)?: no single token matches both
            break
        out.pop()
    out.append((kind, token[1]))


# Bounds of a glob's cache of steps: state sets kept, characters kept per state set.
_DFA_ROWS = 4096
_DFA_ROW_CHARS = 256


class GlobMatcher:
    """A glob compiled to a bit-parallel automaton: one bit per place in the pattern,
    all the places a text could have reached advanced together, one character at a
    time. The work is linear in the text whatever the pattern (a backtracking regex is
    exponential in the number of ``*`` for a text that almost matches, and cannot be
    interrupted). A glob with at most one wildcard, which cannot backtrack more than
    once per character, runs as that regex."""

    __slots__ = (
        "_accept",
        "_cache",
        "_classes",
        "_dirs",
        "_literal",
        "_no_slash",
        "_regex",
        "_rows",
        "_skip",
        "_stars_any",
        "_stars_ns",
        "_start",
        "glob",
    )

    def __init__(self, glob: str) -> None:
        self.glob = glob
        tokens = _glob_tokens(glob)
        wildcards = sum(kind != _ONE for kind, _ in tokens)
        self._regex: re.Pattern[str] | None = None
        if wildcards <= 1:
            self._regex = re.compile("".join(_token_regex(t) for t in tokens), re.DOTALL)
            return  # no automaton needed
        # States 0..n: bit i is "the first i steps are matched". ``**/`` takes two steps,
        # ``.*`` then ``/``, and may be skipped whole.
        self._literal: dict[str, int] = {}
        self._no_slash = 0  # ``?``: any character but '/'
        classes: dict[str, int] = {}
        self._stars_any = self._stars_ns = 0  # where a state loops on a character
        self._skip = self._dirs = 0  # states a wildcard (one step) or ``**/`` (two) skips
        step = 0
        for kind, test in tokens:
            step += 1
            bit = 1 << step
            if kind == _ONE:
                if len(test) == 1 or (test.startswith("\\") and len(test) == 2):
                    char = test[-1]
                    self._literal[char] = self._literal.get(char, 0) | bit
                elif test == "[^/]":
                    self._no_slash |= bit
                else:
                    classes[test] = classes.get(test, 0) | bit
                continue
            self._skip |= bit >> 1
            if kind == _STAR:
                self._stars_ns |= bit
            else:
                self._stars_any |= bit
            if kind == _DIRS:
                self._dirs |= bit >> 1
                step += 1
                self._literal["/"] = self._literal.get("/", 0) | (bit << 1)
        self._classes = [(re.compile(test, re.DOTALL), mask) for test, mask in classes.items()]
        self._accept = 1 << step
        self._cache: dict[str, tuple[int, int]] = {}
        self._start = self._close(1)
        # Steps already taken, by state set then character: the automaton made
        # deterministic as texts need it (about 3.5 times fewer operations per character
        # on paths), bounded so that a pattern with many state sets cannot grow it without end.
        self._rows: dict[int, dict[str, int]] = {}

    def __eq__(self, other: object) -> bool:
        # As compiled regexes compared: two parses of one filter give equal conditions.
        return isinstance(other, GlobMatcher) and other.glob == self.glob

    def __hash__(self) -> int:
        return hash(self.glob)

    def __repr__(self) -> str:
        return f"GlobMatcher({self.glob!r})"

    def _masks(self, char: str) -> tuple[int, int]:
        """The states ``char`` can move into, and those that loop on it."""
        masks = self._cache.get(char)
        if masks is None:
            move = self._literal.get(char, 0)
            loop = self._stars_any
            if char != "/":
                move |= self._no_slash
                loop |= self._stars_ns
            for pattern, mask in self._classes:
                if pattern.fullmatch(char) is not None:
                    move |= mask
            masks = (move, loop)
            if len(self._cache) < 4096:
                self._cache[char] = masks
        return masks

    def _close(self, states: int) -> int:
        """``states`` with every state a wildcard lets the match skip to (wildcards
        come at most two in a row, so this settles in a few rounds)."""
        while True:
            more = states | ((states & self._skip) << 1) | ((states & self._dirs) << 2)
            if more == states:
                return states
            states = more

    def fullmatch(self, text: str) -> bool:
        """Whether the glob matches all of ``text``."""
        if self._regex is not None:
            return self._regex.fullmatch(text) is not None
        rows, states = self._rows, self._start
        for char in text:
            row = rows.get(states)
            if row is None:
                row = {} if len(rows) >= _DFA_ROWS else rows.setdefault(states, {})
            after = row.get(char)
            if after is None:
                move, loop = self._masks(char)
                after = self._close(((states << 1) & move) | (states & loop))
                if len(row) < _DFA_ROW_CHARS:
                    row[char] = after
            states = after
            if not states:
                return False
        return bool(states & self._accept)


def _token_regex(token: _Token) -> str:
    kind, test = token
    return {_STAR: "[^/]*", _STARS: ".*", _DIRS: "(?:.*/)?"}.get(kind, test)


_POSIX_CLASS = re.compile(r"\[([:=.])[^\]]*\1$")


def _glob_class(glob: str, start: int) -> tuple[str, int]:
    """The regex for the class opening at ``glob[start]`` and the index after it.

    As in fnmatch, ``!`` first negates and a ``]`` first (after any ``!``) is a member;
    every other member is literal, so ``[[]`` matches ``[``. Ranges must run upwards.
    POSIX classes (``[[:alpha:]]``) are refused rather than read as a set of characters."""
    where = f"filter 'source' glob {glob!r}"
    j = start + 1
    negate = glob.startswith("!", j)
    first = j + 1 if negate else j
    end = glob.find("]", first + 1 if glob.startswith("]", first) else first)
    if end < 0:
        raise InvalidQueryError(
            f"{where}: the '[' at character {start} opens a class no ']' closes; "
            "write [[] to match a '[' itself"
        )
    body = glob[first:end]
    if _POSIX_CLASS.search(body):
        raise InvalidQueryError(
            f"{where}: POSIX classes such as [:alpha:] are not supported; "
            "list the characters instead, as in [a-zA-Z]"
        )
    members: list[str] = []
    k = 0
    while k < len(body):
        if k + 2 < len(body) and body[k + 1] == "-":
            low, high = body[k], body[k + 2]
            if low > high:
                raise InvalidQueryError(
                    f"{where}: the range {low}-{high} runs backwards; write {high}-{low}"
                )
            members.append(f"{re.escape(low)}-{re.escape(high)}")
            k += 3
        else:
            members.append(re.escape(body[k]))
            k += 1
    return "[" + ("^" if negate else "") + "".join(members) + "]", end + 1


def _scalar(value: object, where: str) -> FieldScalar:
    if kind_of(value) is None:
        raise InvalidQueryError(f"{where}: {value!r} is not a str, finite number or bool")
    return value  # type: ignore[return-value]


def _check_size(filters: Mapping[object, object]) -> None:
    """Refuse a filter beyond the size bounds, and text UTF-8 cannot encode.

    Iterative, and bounded by the limits it enforces: every container's length
    is added before its items are looked at, so the walk stops within
    ``MAX_FILTER_VALUES`` steps whatever the input. A container nested deeper
    than ``MAX_FILTER_DEPTH`` is refused before anything (a message's ``repr``
    included) could recurse into it.
    """
    entries = 0
    chars = 0
    # (item, depth of the container holding it, the top-level field it sits under)
    stack: list[tuple[object, int, str | None]] = [(filters, 0, None)]
    while stack:
        item, depth, field = stack.pop()
        if isinstance(item, str):
            chars += len(item)
            if chars > MAX_FILTER_CHARS:
                raise InvalidQueryError(
                    f"filters hold more than {MAX_FILTER_CHARS} characters of names and text"
                )
            what = "a filter field name" if field is None else f"filter {field!r}: a name or value"
            problem = describe_unencodable(item, what)
            if problem is not None:
                raise InvalidQueryError(problem)
            continue
        if not isinstance(item, _CONTAINERS):
            continue
        if depth >= MAX_FILTER_DEPTH:
            raise InvalidQueryError(
                f"filters nest more than {MAX_FILTER_DEPTH} levels deep; "
                "a filter is {field: value} or {field: {op: value or [values]}}"
            )
        size = len(item)
        entries += size
        if entries > MAX_FILTER_VALUES:
            raise InvalidQueryError(
                f"filters hold more than {MAX_FILTER_VALUES} names and values in all"
            )
        if isinstance(item, Mapping):
            for key in item:
                # Pushed after its value, so a key is judged before what sits under it.
                under = (key if isinstance(key, str) else None) if depth == 0 else field
                stack.append((item[key], depth + 1, under))
                stack.append((key, depth + 1, None if depth == 0 else field))
        else:
            stack.extend((member, depth + 1, field) for member in item)


# Haystack comparison operators and groundkit's; ``None`` as the value is about presence.
_HAYSTACK_COMPARISONS = {
    "==": "eq",
    "!=": "ne",
    ">": "gt",
    ">=": "gte",
    "<": "lt",
    "<=": "lte",
    "in": "in",
    "not in": "nin",
}
# NOT of one comparison, where the negation has a groundkit operator.
_NEGATED = {"eq": "ne", "ne": "eq", "in": "nin", "nin": "in"}
_HAYSTACK_LOGIC = ("AND", "OR", "NOT")
# Haystack Document attributes that are not metadata: groundkit filters on fields only.
_DOCUMENT_ATTRIBUTES = frozenset(
    {"id", "content", "embedding", "sparse_embedding", "score", "blob"}
)


def is_haystack_filter(filters: object) -> bool:
    """Whether ``filters`` is Haystack's syntax: a comparison or a logical condition."""
    if not isinstance(filters, Mapping):
        return False
    keys = set(filters)
    operator = filters.get("operator")
    if keys == {"field", "operator", "value"}:
        return operator in _HAYSTACK_COMPARISONS
    if keys == {"operator", "conditions"}:
        return operator in _HAYSTACK_LOGIC and isinstance(filters["conditions"], list | tuple)
    return False


_HAYSTACK_KEYS = frozenset({"field", "operator", "value", "conditions"})


def meant_for_haystack(filters: object) -> bool:
    """Whether ``filters`` was written in Haystack's syntax, well formed or not: a
    mapping of Haystack's keys only whose ``operator`` is text. groundkit's own form
    gives a field's condition as a value or a mapping of operators, so a malformed
    Haystack filter (an unknown operator, ``conditions`` left out) is refused in
    Haystack's terms instead of being read as conditions on fields called
    ``operator`` and ``field``."""
    return (
        isinstance(filters, Mapping)
        and "operator" in filters
        and isinstance(filters["operator"], str)
        and set(filters) <= _HAYSTACK_KEYS
    )


def from_haystack(filters: Mapping[str, object]) -> dict[str, object]:
    """groundkit's form of a Haystack filter; ``InvalidQueryError`` naming the Haystack
    operator for what groundkit cannot express.

    A comparison on ``meta.x`` (or ``x``) is a condition on field ``x``; ``AND``
    merges its conditions; ``OR`` of ``==`` / ``in`` on one field (an ``OR`` of those
    under it too) is ``in`` of all their values, each kept once; ``NOT`` of one
    ``==``, ``!=``, ``in`` or ``not in`` is its opposite (a document without the field
    then matches neither). ``== None`` / ``!= None`` are ``exists``. An ``AND`` or
    ``NOT`` under ``OR`` is refused, never flattened into the ``in`` (that would widen
    the filter), and so are values of more than one type (``True`` and ``1``).

    The walk is bounded as ``parse_filters``'s is: at most ``MAX_FILTER_VALUES``
    conditions and list values in all (a list's length counted before its items are
    looked at) and ``MAX_FILTER_LIST`` distinct values in an ``OR``, so a huge filter
    is refused before it costs more than a valid one. ``parse_filters`` checks the
    translation as it checks any filter.
    """
    budget = _Budget()
    out: dict[str, dict[str, object]] = {}
    for field, op, value in _haystack_conditions(filters, 0, budget):
        ops = out.setdefault(field, {})
        if op in ops and ops[op] != value:
            raise InvalidQueryError(
                f"Haystack filter: two {op!r} conditions on {field!r}; a groundkit filter "
                f"holds one per field and operator, as {{{field!r}: {{{op!r}: ...}}}}"
            )
        ops[op] = value
    return dict(out)


class _Budget:
    """What a Haystack filter's translation may still look at: its conditions and the
    values in its lists, ``MAX_FILTER_VALUES`` in all."""

    __slots__ = ("left",)

    def __init__(self) -> None:
        self.left = MAX_FILTER_VALUES

    def take(self, count: int) -> None:
        self.left -= count
        if self.left < 0:
            raise InvalidQueryError(
                f"Haystack filter: holds more than {MAX_FILTER_VALUES} conditions and values "
                f"in all; a groundkit filter holds at most {MAX_FILTER_CONDITIONS} conditions "
                f"and {MAX_FILTER_LIST} values in one in/nin list"
            )


_OR_FORM = (
    "Haystack filter operator 'OR' has a groundkit form only over '==' and 'in' "
    "on one field, {field: {'in': [values]}}; groundkit filters AND their conditions"
)


def _haystack_node(node: object, depth: int, budget: _Budget) -> Mapping[str, object]:
    """``node`` as a well-formed Haystack condition (counted against ``budget``), or
    ``InvalidQueryError`` saying what is wrong with it."""
    if depth > MAX_FILTER_DEPTH * 4:
        raise InvalidQueryError(
            f"Haystack filter: conditions nest at most {MAX_FILTER_DEPTH * 4} levels deep"
        )
    if isinstance(node, Mapping) and meant_for_haystack(node) and not is_haystack_filter(node):
        raise InvalidQueryError(_haystack_problem(node))
    if not is_haystack_filter(node):
        raise InvalidQueryError(
            "Haystack filter: each condition is {'field': 'meta.x', 'operator': '==', "
            "'value': ...} or {'operator': 'AND', 'conditions': [...]}, at most "
            f"{MAX_FILTER_DEPTH * 4} levels deep; got {_short(node)}"
        )
    assert isinstance(node, Mapping)
    budget.take(1)
    return node


def _haystack_conditions(
    node: object, depth: int, budget: _Budget
) -> list[tuple[str, str, object]]:
    """The AND-ed (field, operator, value) triples a Haystack filter node stands for."""
    checked = _haystack_node(node, depth, budget)
    operator = checked["operator"]
    if "field" in checked:
        return [_haystack_comparison(checked["field"], str(operator), checked["value"], budget)]
    if operator == "OR":
        gathered = _OrValues()
        gathered.gather(checked, depth, budget)
        if gathered.field is None:
            raise InvalidQueryError(f"{_OR_FORM}; this 'OR' holds no condition")
        return [(gathered.field, "in", gathered.values)]
    children = checked["conditions"]
    assert isinstance(children, list | tuple)
    conditions = [c for child in children for c in _haystack_conditions(child, depth + 1, budget)]
    if operator == "AND":
        return conditions
    if len(conditions) == 1 and conditions[0][1] in _NEGATED:
        field, op, value = conditions[0]
        return [(field, _NEGATED[op], value)]
    if len(conditions) == 1 and conditions[0][1] == "exists":
        field, _, value = conditions[0]
        return [(field, "exists", not value)]
    raise InvalidQueryError(
        "Haystack filter operator 'NOT' has a groundkit form only over one '==', '!=', "
        "'in' or 'not in' condition: {field: {'ne': value}} or {field: {'nin': [values]}}"
    )


class _OrValues:
    """The field and values of an ``OR`` of ``==`` / ``in`` on one field, each value
    kept once by its kind and value (``True`` and ``1`` are not the same value here)."""

    def __init__(self) -> None:
        self.field: str | None = None
        self.kind: Kind | None = None
        self.values: list[object] = []
        self._seen: set[tuple[Kind, object]] = set()

    def gather(self, node: Mapping[str, object], depth: int, budget: _Budget) -> None:
        """Add the values of ``node``'s conditions (an ``OR`` already checked)."""
        children = node["conditions"]
        assert isinstance(children, list | tuple)
        for child in children:
            checked = _haystack_node(child, depth + 1, budget)
            if "field" not in checked:
                if checked["operator"] == "OR":  # the same values, one level down
                    self.gather(checked, depth + 1, budget)
                    continue
                raise InvalidQueryError(
                    f"{_OR_FORM}; an {checked['operator']!r} under 'OR' has none (its "
                    "conditions are not the OR of their values)"
                )
            field, op, value = _haystack_comparison(
                checked["field"], str(checked["operator"]), checked["value"], budget
            )
            if op not in ("eq", "in") or (self.field is not None and field != self.field):
                raise InvalidQueryError(_OR_FORM)
            self.field = field
            if op == "in" and not isinstance(value, list):
                # Iterated as it is, a string became its characters, a dict its keys.
                raise InvalidQueryError(
                    f"Haystack filter operator 'in' on {field!r} takes a list of values, "
                    f"not {type(value).__name__}"
                )
            for item in value if isinstance(value, list) else [value]:
                self._add(field, item)

    def _add(self, field: str, value: object) -> None:
        kind = kind_of(value)
        where = (
            f"Haystack filter operator 'OR' on {field!r} (groundkit's {{{field!r}: {{'in': ...}}}})"
        )
        if kind is None:
            raise InvalidQueryError(f"{where}: {_short(value)} is not a str, finite number or bool")
        if self.kind is not None and kind != self.kind:
            raise InvalidQueryError(
                f"{where}: mixes value types ({self.kind} and {kind}); keep one type"
            )
        self.kind = kind
        key = (kind, value)
        if key in self._seen:
            return
        self._seen.add(key)
        self.values.append(value)
        if len(self.values) > MAX_FILTER_LIST:
            raise InvalidQueryError(
                f"{where}: more than {MAX_FILTER_LIST} distinct values; an 'in' list takes "
                f"1 to {MAX_FILTER_LIST} values"
            )


def _haystack_problem(node: Mapping[str, object]) -> str:
    """What is wrong with a filter written in Haystack's syntax, in its terms."""
    operator = node["operator"]
    if "field" in node:
        if operator not in _HAYSTACK_COMPARISONS:
            return (
                f"Haystack filter: unknown comparison operator {operator!r}; Haystack's are "
                f"{', '.join(repr(o) for o in _HAYSTACK_COMPARISONS)}"
            )
        return "Haystack filter: a comparison is {'field': ..., 'operator': ..., 'value': ...}"
    if operator not in _HAYSTACK_LOGIC:
        return (
            f"Haystack filter: unknown logical operator {operator!r}; Haystack's are "
            f"{', '.join(repr(o) for o in _HAYSTACK_LOGIC)}, each with 'conditions'"
        )
    return (
        f"Haystack filter: operator {operator!r} needs 'conditions', a list of conditions, "
        "and nothing else"
    )


def _haystack_comparison(
    field: object, operator: str, value: object, budget: _Budget
) -> tuple[str, str, object]:
    if isinstance(value, _CONTAINERS):
        budget.take(len(value))  # before anything walks it
    if not isinstance(field, str):
        raise InvalidQueryError(f"Haystack filter: field must be a str, not {_short(field)}")
    name = field.removeprefix("meta.")
    if name == field and name in _DOCUMENT_ATTRIBUTES:
        raise InvalidQueryError(
            f"Haystack filter on {field!r}: groundkit filters on a document's fields and "
            "source ({'<field>': value}, written 'meta.<field>' in Haystack), not on its "
            f"{field}; search with a query for its content"
        )
    op = _HAYSTACK_COMPARISONS[operator]
    if value is None and op in ("eq", "ne"):
        return name, "exists", op == "ne"
    if isinstance(value, tuple):
        value = list(value)
    return name, op, value


def _short(value: object) -> str:
    if isinstance(value, _CONTAINERS):  # never a repr that could descend without bound
        return f"a {type(value).__name__} of {len(value)}"
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."
