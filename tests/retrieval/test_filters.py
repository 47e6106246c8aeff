"""Filter parsing, per-document matching and the schema check (no store involved)."""

from __future__ import annotations

import warnings
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from groundkit import RetrievalError
from groundkit.errors import InvalidQueryError
from groundkit.retrieval import FILTER_OPERATORS
from groundkit.retrieval.filters import (
    MAX_FILTER_CHARS,
    MAX_FILTER_CONDITIONS,
    MAX_FILTER_DEPTH,
    MAX_FILTER_LIST,
    MAX_FILTER_VALUES,
    field_kinds,
    parse_filters,
)

DOCS: list[dict[str, Any]] = [
    {"year": 2019, "team": "red", "tags": ["solar", "roof"], "draft": False},
    {"year": 2021, "team": "blue", "tags": ["solar"], "score": 0.5},
    {"year": 2023, "team": "red", "draft": True},
    {},
]


def matching(filters: Any) -> list[int]:
    flt = parse_filters(filters)
    assert flt is not None
    return [i for i, doc in enumerate(DOCS) if flt.matches(doc)]


@pytest.mark.parametrize(
    ("filters", "expected"),
    [
        ({"team": "red"}, [0, 2]),
        ({"team": {"eq": "red"}}, [0, 2]),
        ({"team": {"ne": "red"}}, [1]),  # a document without the field matches no ne
        ({"team": {"in": ["blue", "green"]}}, [1]),
        ({"team": {"nin": ["blue"]}}, [0, 2]),
        ({"year": {"gt": 2019}}, [1, 2]),
        ({"year": {"gte": 2019, "lt": 2023}}, [0, 1]),
        ({"year": {"lte": 2021}}, [0, 1]),
        ({"year": {"between": [2020, 2023]}}, [1, 2]),
        ({"year": {"between": [2021, 2021]}}, [1]),
        ({"score": {"gt": 0.25}}, [1]),
        ({"year": {"gt": 2020.5}}, [1, 2]),  # int and float are one kind
        ({"tags": "solar"}, [0, 1]),  # a list field matches when an element does
        ({"tags": {"in": ["roof", "wind"]}}, [0]),
        ({"tags": {"nin": ["roof"]}}, [1]),
        ({"tags": {"ne": "solar"}}, []),
        ({"draft": {"exists": True}}, [0, 2]),
        ({"draft": {"exists": False}}, [1, 3]),
        ({"draft": False}, [0]),
        ({"team": "red", "year": {"gt": 2020}}, [2]),  # AND across fields
        ({"team": "red", "draft": True, "year": {"lt": 2000}}, []),
    ],
)
def test_matching(filters: Any, expected: list[int]) -> None:
    assert matching(filters) == expected


def test_booleans_do_not_equal_numbers() -> None:
    flt = parse_filters({"draft": 1})
    assert flt is not None
    assert not flt.matches({"draft": True})
    assert parse_filters({"year": True}) is not None
    assert not parse_filters({"year": True}).matches({"year": 1})  # type: ignore[union-attr]


def test_empty_and_none_mean_no_filter() -> None:
    assert parse_filters(None) is None
    assert parse_filters({}) is None


def test_canonical_key_ignores_spelling_order() -> None:
    a = parse_filters({"year": {"lt": 5, "gt": 1}, "team": "x"})
    b = parse_filters({"team": {"eq": "x"}, "year": {"gt": 1, "lt": 5}})
    assert a is not None and b is not None and a.key == b.key


@pytest.mark.parametrize(
    ("filters", "needle"),
    [
        ("team=red", "must be a mapping"),
        ({"team": {"like": "r%"}}, "unknown operator 'like'"),
        ({"bad name": "x"}, "not a valid field name"),
        ({"team": {}}, "has no conditions"),
        ({"team": {"in": "red"}}, "takes a list"),
        ({"team": {"in": []}}, "takes 1 to"),
        ({"team": {"in": ["a", 1]}}, "mixes value types"),
        ({"year": {"between": [1]}}, "takes [low, high]"),
        ({"year": {"between": [5, 1]}}, "is above high"),
        ({"draft": {"gt": False}}, "no order"),
        ({"draft": {"exists": "yes"}}, "takes true or false"),
        ({"year": {"gt": None}}, "not a str, finite number or bool"),
        ({"year": {"gt": float("nan")}}, "not a str, finite number or bool"),
        ({"year": {"eq": [2019]}}, "not a str, finite number or bool"),
        ({"year": {"eq": {"nested": 1}}}, "not a str, finite number or bool"),
    ],
)
def test_malformed_filters_are_refused(filters: Any, needle: str) -> None:
    with pytest.raises(RetrievalError, match=None) as caught:
        parse_filters(filters)
    assert needle in str(caught.value)


def test_every_operator_is_accepted() -> None:
    operands: dict[str, Any] = {"in": ["a"], "nin": ["a"], "between": ["a", "b"], "exists": True}
    for op in FILTER_OPERATORS:
        name = "source" if op == "glob" else "team"  # glob is for sources only
        assert parse_filters({name: {op: operands.get(op, "a")}}) is not None


def test_schema_check_names_unknown_fields_and_wrong_types() -> None:
    kinds = field_kinds(DOCS)
    assert kinds["year"] == {"number"} and kinds["tags"] == {"str"}
    with pytest.raises(RetrievalError, match=r"unknown field 'colour'.*team"):
        parse_filters({"colour": "red"}).check_schema(kinds)  # type: ignore[union-attr]
    with pytest.raises(RetrievalError, match="a str value for a field holding number"):
        parse_filters({"year": {"gt": "2019"}}).check_schema(kinds)  # type: ignore[union-attr]
    with pytest.raises(RetrievalError, match="a number value for a field holding bool"):
        parse_filters({"draft": 0}).check_schema(kinds)  # type: ignore[union-attr]
    parse_filters({"draft": {"exists": False}}).check_schema(kinds)  # type: ignore[union-attr]


# -- size limits -------------------------------------------------------------


def nested(depth: int, leaf: object = 1) -> object:
    """``{"eq": {"eq": ... leaf}}``, ``depth`` mappings deep (built without recursion)."""
    value = leaf
    for _ in range(depth):
        value = {"eq": value}
    return value


def nested_list(depth: int) -> object:
    value: object = 1
    for _ in range(depth):
        value = [value]
    return value


def nested_tuple(depth: int) -> object:
    value: object = "a"
    for _ in range(depth):
        value = (value,)
    return value


@pytest.mark.parametrize(
    "filters",
    [
        {"team": nested(5000)},
        nested(5000),
        {"team": {"in": nested_list(5000)}},
        {nested_tuple(5000): 1},
        {"team": {"in": [[1]]}},  # one level too deep: lists hold values, not lists
    ],
    ids=["under-a-field", "at-the-top", "in-a-list", "in-a-key", "four-levels"],
)
def test_deep_filters_name_the_depth_limit(filters: Any) -> None:
    with pytest.raises(RetrievalError) as caught:
        parse_filters(filters)
    message = str(caught.value)
    assert f"more than {MAX_FILTER_DEPTH} levels deep" in message
    assert len(message) < 200  # the input is not echoed


def test_the_deepest_valid_filter_is_accepted() -> None:
    assert parse_filters({"team": {"in": ["red", "blue"]}}) is not None
    assert MAX_FILTER_DEPTH == 3


@pytest.mark.parametrize(
    ("filters", "needle"),
    [
        (
            {f"f{i}": 1 for i in range(MAX_FILTER_CONDITIONS + 1)},
            f"more than {MAX_FILTER_CONDITIONS} conditions",
        ),
        (
            {"year": {op: 1 for op in ("gt", "gte", "lt", "lte")}}
            | {f"f{i}": {"exists": True} for i in range(MAX_FILTER_CONDITIONS - 3)},
            f"more than {MAX_FILTER_CONDITIONS} conditions",
        ),
        (
            {"team": {"in": [str(i) for i in range(MAX_FILTER_LIST + 1)]}},
            f"takes 1 to {MAX_FILTER_LIST} values, got {MAX_FILTER_LIST + 1}",
        ),
        (
            {f"f{i}": {"in": list(range(1000))} for i in range(5)},
            f"more than {MAX_FILTER_VALUES} names and values",
        ),
        ({"team": {"in": list(range(10**6))}}, f"more than {MAX_FILTER_VALUES} names and values"),
        ({"team": "x" * (MAX_FILTER_CHARS + 1)}, f"more than {MAX_FILTER_CHARS} characters"),
    ],
    ids=["fields", "operators", "one-list", "all-lists", "huge-list", "characters"],
)
def test_size_limits_are_named(filters: Any, needle: str) -> None:
    with pytest.raises(RetrievalError) as caught:
        parse_filters(filters)
    assert needle in str(caught.value)
    assert len(str(caught.value)) < 200


def test_filters_at_the_limits_are_accepted() -> None:
    at_limit = {f"f{i}": 1 for i in range(MAX_FILTER_CONDITIONS)}
    assert len(parse_filters(at_limit).conditions) == MAX_FILTER_CONDITIONS  # type: ignore[union-attr]
    assert parse_filters({"team": {"in": list(range(MAX_FILTER_LIST))}}) is not None
    assert parse_filters({"team": "x" * (MAX_FILTER_CHARS - 4)}) is not None


@pytest.mark.parametrize(
    ("filters", "needle"),
    [
        ({"te\ud800am": "red"}, "a filter field name cannot be encoded as UTF-8"),
        ({"team": "r\udcffed"}, "filter 'team': a name or value cannot be encoded as UTF-8"),
        ({"team": {"in": ["blue", "r\ud800"]}}, "filter 'team': a name or value cannot be"),
        ({"team": {"e\ud800q": "red"}}, "filter 'team': a name or value cannot be encoded"),
    ],
)
def test_text_utf8_cannot_encode_is_refused(filters: Any, needle: str) -> None:
    with pytest.raises(RetrievalError) as caught:
        parse_filters(filters)
    assert needle in str(caught.value)
    assert "lone surrogate" in str(caught.value)


_json_like = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=5),
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(st.sampled_from([*FILTER_OPERATORS, "team", "x y"]), inner, max_size=4)
    ),
    max_leaves=40,
)


@given(st.one_of(_json_like, st.dictionaries(st.text(max_size=5), _json_like, max_size=4)))
def test_any_input_is_a_filter_or_a_retrieval_error(filters: Any) -> None:
    try:
        parse_filters(filters)
    except RetrievalError as exc:
        assert "\n" not in str(exc)


@pytest.mark.parametrize(
    ("glob", "source", "matches"),
    [
        ("docs/*.md", "docs/a.md", True),
        ("docs/*.md", "docs/x/a.md", False),
        ("docs/**/*.md", "docs/a.md", True),
        ("docs/**/*.md", "docs/x/y/a.md", True),
        ("docs/**", "docs/x/y/a.md", True),
        ("**/*.txt", "a.txt", True),
        ("**/*.txt", "deep/er/a.txt", True),
        ("?.md", "a.md", True),
        ("?.md", "ab.md", False),
        ("[ab].md", "b.md", True),
        ("[!ab].md", "b.md", False),
        ("notes/东京.txt", "notes/东京.txt", True),
        ("https://example.com/*", "https://example.com/page", True),
        ("*.MD", "a.md", False),  # case-sensitive, like the sources themselves
        ("a.(md)", "a.(md)", True),  # regex characters are literal
        ("[[]a.md", "[a.md", True),  # a '[' inside a class is a member
        ("[]a].md", "].md", True),  # so is a ']' first
        ("[a-].md", "-.md", True),  # and a '-' last
        ("[a&&b].md", "&.md", True),
    ],
)
def test_source_glob(glob: str, source: str, matches: bool) -> None:
    flt = parse_filters({"source": {"glob": glob}})
    assert flt is not None and flt.needs_source
    assert flt.matches({}, source) is matches
    # Without the source (not known), a source condition never lets a document through.
    assert flt.matches({}) is False


@pytest.mark.parametrize(
    ("glob", "reason"),
    [
        ("corpus/[z-a].md", "the range z-a runs backwards"),
        ("corpus/[!]", "opens a class no ']' closes"),
        ("corpus/[ab", "opens a class no ']' closes"),
        ("corpus/[[:alpha:]].md", "POSIX classes"),
    ],
)
def test_a_bad_glob_class_is_a_filter_error_naming_the_glob(glob: str, reason: str) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no FutureWarning from the regex compiler either
        with pytest.raises(InvalidQueryError, match="glob") as caught:
            parse_filters({"source": {"glob": glob}})
    assert repr(glob) in str(caught.value) and reason in str(caught.value)


@given(st.text(alphabet="ab[]!-^:&~|/*?\\", max_size=12))
def test_any_glob_is_a_pattern_or_a_filter_error(glob: str) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        try:
            parse_filters({"source": {"glob": glob}})
        except InvalidQueryError as exc:
            assert "\n" not in str(exc)


@pytest.mark.parametrize(
    ("condition", "spelled"),
    [
        ("./docs/a.md", "'docs/a.md'"),
        ({"ne": "docs//a.md"}, "'docs/a.md'"),
        ({"in": ["a.md", "docs/./b.md"]}, "'docs/b.md'"),
        ({"prefix": "./docs/"}, "'docs/'"),
        ({"glob": "./docs/**/*.md"}, "'docs/**/*.md'"),
        ({"nin": ["../a.md"]}, None),
        ("/srv/docs/a.md", None),
    ],
)
def test_a_source_no_document_can_have_is_refused(condition: object, spelled: str | None) -> None:
    # Sources are stored relative to the base directory without '.', '..' or empty
    # parts: such a value would match nothing (negated, everything) without a word.
    with pytest.raises(InvalidQueryError, match="not how a source is stored") as caught:
        parse_filters({"source": condition})
    if spelled is None:
        assert "written" not in str(caught.value)
    else:
        assert f"(written {spelled})" in str(caught.value)


def test_sources_as_stored_are_taken() -> None:
    for condition in (
        "docs/a.md",
        {"prefix": "docs/"},
        {"prefix": "do"},
        {"glob": "docs/**/*.md"},
        "https://example.org//a/./b",
        {"prefix": "record://"},
    ):
        assert parse_filters({"source": condition}) is not None


def test_prefix_on_fields_and_sources() -> None:
    flt = parse_filters({"tags": {"prefix": "ops"}, "source": {"prefix": "runbooks/"}})
    assert flt is not None
    assert flt.fields == frozenset({"tags"})
    assert flt.matches({"tags": ["misc", "ops-oncall"]}, "runbooks/a.md")
    assert not flt.matches({"tags": ["misc"]}, "runbooks/a.md")
    assert not flt.matches({"tags": ["ops"]}, "handbook/a.md")
    assert not flt.matches({"tags": [1, 2]}, "runbooks/a.md")
