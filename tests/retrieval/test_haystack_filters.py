"""Haystack's filter syntax in groundkit form: what translates, and what is refused with
the operator named (no Haystack needed: the syntax is plain data)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from groundkit.errors import RetrievalError
from groundkit.retrieval.filters import from_haystack, is_haystack_filter, parse_filters


def _cmp(field: str, operator: str, value: Any) -> dict[str, Any]:
    return {"field": field, "operator": operator, "value": value}


@pytest.mark.parametrize(
    ("haystack", "groundkit"),
    [
        (_cmp("meta.team", "==", "infra"), {"team": {"eq": "infra"}}),
        (_cmp("meta.team", "!=", "infra"), {"team": {"ne": "infra"}}),
        (_cmp("meta.year", ">", 2020), {"year": {"gt": 2020}}),
        (_cmp("meta.year", ">=", 2020), {"year": {"gte": 2020}}),
        (_cmp("meta.year", "<", 2020), {"year": {"lt": 2020}}),
        (_cmp("meta.year", "<=", 2020), {"year": {"lte": 2020}}),
        (_cmp("meta.team", "in", ["a", "b"]), {"team": {"in": ["a", "b"]}}),
        (_cmp("meta.team", "not in", ["a"]), {"team": {"nin": ["a"]}}),
        (_cmp("team", "==", "a"), {"team": {"eq": "a"}}),
        (_cmp("meta.source", "==", "a.md"), {"source": {"eq": "a.md"}}),
        (_cmp("meta.owner", "==", None), {"owner": {"exists": False}}),
        (_cmp("meta.owner", "!=", None), {"owner": {"exists": True}}),
        (
            {
                "operator": "AND",
                "conditions": [
                    _cmp("meta.year", ">=", 2020),
                    _cmp("meta.year", "<", 2024),
                    {"operator": "AND", "conditions": [_cmp("meta.team", "==", "a")]},
                ],
            },
            {"year": {"gte": 2020, "lt": 2024}, "team": {"eq": "a"}},
        ),
        (
            {
                "operator": "OR",
                "conditions": [_cmp("meta.team", "==", "a"), _cmp("meta.team", "in", ["b", "a"])],
            },
            {"team": {"in": ["a", "b"]}},
        ),
        ({"operator": "NOT", "conditions": [_cmp("meta.team", "==", "a")]}, {"team": {"ne": "a"}}),
        (
            {"operator": "NOT", "conditions": [_cmp("meta.team", "not in", ["a"])]},
            {"team": {"in": ["a"]}},
        ),
    ],
)
def test_translated(haystack: dict[str, Any], groundkit: dict[str, Any]) -> None:
    assert is_haystack_filter(haystack)
    assert from_haystack(haystack) == groundkit
    assert parse_filters(groundkit) is not None  # a filter groundkit accepts


@pytest.mark.parametrize(
    ("haystack", "named"),
    [
        (
            {"operator": "OR", "conditions": [_cmp("meta.a", "==", 1), _cmp("meta.b", "==", 2)]},
            "operator 'OR'",
        ),
        (
            {"operator": "OR", "conditions": [_cmp("meta.a", ">", 1), _cmp("meta.a", "<", 0)]},
            "operator 'OR'",
        ),
        ({"operator": "NOT", "conditions": [_cmp("meta.a", ">", 1)]}, "operator 'NOT'"),
        (
            {"operator": "NOT", "conditions": [_cmp("meta.a", "==", 1), _cmp("meta.b", "==", 2)]},
            "operator 'NOT'",
        ),
        (_cmp("content", "==", "x"), "not on its content"),
        (
            {"operator": "AND", "conditions": [_cmp("meta.a", ">", 1), _cmp("meta.a", ">", 2)]},
            "two 'gt' conditions on 'a'",
        ),
        ({"operator": "AND", "conditions": [{"team": "a"}]}, "each condition is"),
    ],
)
def test_refused_with_the_operator_and_the_groundkit_form(
    haystack: dict[str, Any], named: str
) -> None:
    with pytest.raises(RetrievalError, match=named) as caught:
        from_haystack(haystack)
    assert "{" in str(caught.value)  # the groundkit form, or the shape expected


def test_parse_filters_shows_the_groundkit_form_of_a_haystack_filter() -> None:
    with pytest.raises(RetrievalError) as caught:
        parse_filters(_cmp("meta.team", "==", "infra"))
    message = str(caught.value)
    assert "Haystack's syntax" in message and '{"team": {"eq": "infra"}}' in message
    # groundkit's own filters are not taken for Haystack's.
    assert not is_haystack_filter({"field": "x", "operator": "eq"})
    assert not is_haystack_filter({"team": "infra"})


@given(
    st.recursive(
        st.just(_cmp("meta.a", "==", 1)),
        lambda c: st.fixed_dictionaries(
            {
                "operator": st.sampled_from(["AND", "OR", "NOT"]),
                "conditions": st.lists(c, max_size=3),
            }
        ),
        max_leaves=30,
    )
)
def test_any_nesting_translates_or_is_refused_as_retrieval_error(tree: dict[str, Any]) -> None:
    try:
        out = from_haystack(tree)
    except RetrievalError:
        return
    parse_filters(out)  # whatever translates is a valid groundkit filter or a RetrievalError
