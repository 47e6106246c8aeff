"""Filter parsing, per-document matching and the schema check (no store involved)."""

from __future__ import annotations

from typing import Any

import pytest

from groundkit import FILTER_OPERATORS, RetrievalError
from groundkit.retrieval.filters import field_kinds, parse_filters

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
        assert parse_filters({"team": {op: operands.get(op, "a")}}) is not None


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
