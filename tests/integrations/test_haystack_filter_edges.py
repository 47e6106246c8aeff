"""Edges of Haystack filters: an OR is translated only where groundkit's ``in`` means the
same (never wider, never with a value dropped), within the size bounds; a run's empty
filters keep the component's, as Haystack's retrievers do; and records_from_* refuse
key arguments of the wrong type in groundkit's words."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from haystack import Document as HaystackDocument
from haystack.document_stores.types.filter_policy import FilterPolicy, apply_filter_policy
from langchain_core.documents import Document as LangChainDocument
from llama_index.core.schema import TextNode

import groundkit.sync as gks
from groundkit.errors import InvalidInputError, InvalidQueryError, RetrievalError
from groundkit.integrations import haystack as hs
from groundkit.integrations import langchain as lc
from groundkit.integrations import llama_index as li
from groundkit.retrieval.filters import (
    MAX_FILTER_LIST,
    MAX_FILTER_VALUES,
    from_haystack,
    parse_filters,
)


def _cmp(field: str, operator: str, value: Any) -> dict[str, Any]:
    return {"field": field, "operator": operator, "value": value}


def _or(*conditions: dict[str, Any]) -> dict[str, Any]:
    return {"operator": "OR", "conditions": list(conditions)}


def _and(*conditions: dict[str, Any]) -> dict[str, Any]:
    return {"operator": "AND", "conditions": list(conditions)}


def _not(*conditions: dict[str, Any]) -> dict[str, Any]:
    return {"operator": "NOT", "conditions": list(conditions)}


@pytest.fixture
def tagged(tmp_path: Path) -> Iterator[gks.SyncCollection]:
    with gks.Collection.open(tmp_path / "idx", base_dir=tmp_path) as col:
        col.add_documents(
            [
                {
                    "id": "both",
                    "text": "Refunds policy one.",
                    "fields": {"tags": ["legal", "finance"]},
                },
                {"id": "legal-only", "text": "Refunds policy two.", "fields": {"tags": ["legal"]}},
                {"id": "hr-only", "text": "Refunds policy three.", "fields": {"tags": ["hr"]}},
                {"id": "flag", "text": "Refunds policy four.", "fields": {"x": True}},
                {"id": "one", "text": "Refunds policy five.", "fields": {"x": 1}},
            ]
        )
        yield col


# --- an AND (or NOT) under OR is refused, never flattened into a wider ``in`` ---

_WIDENING = [
    # (legal AND finance) OR marketing: flattened, it matched legal-only documents too.
    _or(
        _and(_cmp("meta.tags", "==", "legal"), _cmp("meta.tags", "==", "finance")),
        _cmp("meta.tags", "==", "marketing"),
    ),
    # team in [infra, ops] AND team == infra, under OR: flattened, it let ops through.
    _or(_and(_cmp("meta.team", "in", ["infra", "ops"]), _cmp("meta.team", "==", "infra"))),
    _or(_and(_cmp("meta.team", "==", "infra")), _cmp("meta.team", "==", "ops")),
    _or(_not(_cmp("meta.team", "==", "infra")), _cmp("meta.team", "==", "ops")),
    _or(_or(_and(_cmp("meta.team", "==", "a"), _cmp("meta.team", "==", "b")))),
]


@pytest.mark.parametrize("haystack", _WIDENING)
def test_an_and_or_not_under_or_is_refused(haystack: dict[str, Any]) -> None:
    with pytest.raises(RetrievalError, match="operator 'OR'") as caught:
        from_haystack(haystack)
    assert "under 'OR'" in str(caught.value)


@pytest.mark.parametrize(
    ("haystack", "groundkit"),
    [
        # An OR of ==/in on one field under OR is the same OR: still one ``in``.
        (
            _or(
                _or(_cmp("meta.team", "==", "a"), _cmp("team", "in", ["b", "a"])),
                _cmp("meta.team", "==", "c"),
            ),
            {"team": {"in": ["a", "b", "c"]}},
        ),
        (
            _not(_or(_cmp("meta.team", "==", "a"), _cmp("meta.team", "==", "b"))),
            {"team": {"nin": ["a", "b"]}},
        ),
        (
            _and(_or(_cmp("meta.team", "==", "a"), _cmp("meta.team", "==", "b"))),
            {"team": {"in": ["a", "b"]}},
        ),
    ],
)
def test_or_of_the_same_one_field_form_still_translates(
    haystack: dict[str, Any], groundkit: dict[str, Any]
) -> None:
    assert from_haystack(haystack) == groundkit
    assert parse_filters(groundkit) is not None


def test_the_component_refuses_an_or_over_an_and(tagged: gks.SyncCollection) -> None:
    widening = _WIDENING[0]
    with pytest.raises(InvalidQueryError, match="operator 'OR'"):
        hs.GroundkitRetriever(tagged).run("refunds", filters=widening)
    with pytest.raises(InvalidQueryError, match="operator 'OR'"):
        hs.GroundkitRetriever(tagged, filters=widening)
    # The AND alone still narrows: a document tagged legal and finance.
    both = _and(_cmp("meta.tags", "==", "legal"), _cmp("meta.tags", "in", ["finance"]))
    documents = hs.GroundkitRetriever(tagged).run("refunds", filters=both)["documents"]
    assert [d.meta["source"] for d in documents] == ["record://both"]


# --- the OR's values: bounded while collected, each kept once by type and value ---


def _equals(values: list[Any], field: str = "meta.team") -> dict[str, Any]:
    return _or(*(_cmp(field, "==", v) for v in values))


@pytest.mark.parametrize(
    ("haystack", "bound"),
    [
        (_equals([f"v{i % 3}" for i in range(MAX_FILTER_VALUES + 10)]), MAX_FILTER_VALUES),
        (_equals([f"v{i}" for i in range(MAX_FILTER_LIST + 1)]), MAX_FILTER_LIST),
        (
            _or(_cmp("meta.team", "in", [f"v{i}" for i in range(MAX_FILTER_LIST + 1)])),
            MAX_FILTER_LIST,
        ),
        (_or(_cmp("meta.team", "in", [f"v{i}" for i in range(200_000)])), MAX_FILTER_VALUES),
        (_cmp("meta.team", "in", tuple(range(200_000))), MAX_FILTER_VALUES),
        (
            _or(
                _cmp("meta.team", "in", [f"a{i}" for i in range(600)]),
                _cmp("meta.team", "in", [f"b{i}" for i in range(600)]),
            ),
            MAX_FILTER_LIST,
        ),
    ],
)
def test_a_huge_or_is_refused_with_the_bound_it_crossed(
    haystack: dict[str, Any], bound: int
) -> None:
    with pytest.raises(InvalidQueryError, match=f"more than {bound} "):
        from_haystack(haystack)


def test_an_or_at_the_list_bound_translates_and_parses() -> None:
    values = [f"v{i}" for i in range(MAX_FILTER_LIST)]
    out = from_haystack(_equals(values))
    assert out == {"team": {"in": values}}
    assert parse_filters(out) is not None


def test_duplicates_are_kept_once_in_first_seen_order() -> None:
    # Far more conditions than distinct values: the bound is on distinct values.
    repeated = [f"v{i % 3}" for i in range(MAX_FILTER_LIST * 2)]
    haystack = _or(
        _equals(repeated),
        _cmp("meta.team", "in", ["v2", "v9", "v0", "v9"]),
    )
    assert from_haystack(haystack) == {"team": {"in": ["v0", "v1", "v2", "v9"]}}
    # 1 and 1.0 are the same number to groundkit's ``in``: kept once.
    assert from_haystack(_equals([1, 1.0, 2], "meta.n")) == {"n": {"in": [1, 2]}}


@pytest.mark.parametrize(
    "values",
    [[True, 1], [1, True], [False, 0], [1, "1"], [0.0, False]],
)
def test_an_or_mixing_value_types_is_refused_never_dropped(values: list[Any]) -> None:
    # groundkit's own {"x": {"in": values}} is refused for mixing types; so is this.
    with pytest.raises(InvalidQueryError, match="mixes value types"):
        parse_filters({"x": {"in": values}})
    with pytest.raises(InvalidQueryError, match=r"'x'.*mixes value types"):
        from_haystack(_equals(values, "meta.x"))
    with pytest.raises(InvalidQueryError, match=r"'x'.*mixes value types"):
        from_haystack(_or(_cmp("meta.x", "in", values[:1]), _cmp("meta.x", "==", values[1])))


def test_an_or_holding_a_non_scalar_value_is_refused() -> None:
    with pytest.raises(InvalidQueryError, match=r"'x'.*not a str, finite number or bool"):
        from_haystack(_or(_cmp("meta.x", "in", [["a"]]), _cmp("meta.x", "==", "b")))


def test_the_component_refuses_true_or_one(tagged: gks.SyncCollection) -> None:
    haystack = _equals([True, 1], "meta.x")
    with pytest.raises(InvalidQueryError, match="mixes value types"):
        hs.GroundkitRetriever(tagged).run("refunds", filters=haystack)
    # Each alone is taken, and finds its own document.
    for value, source in ((True, "record://flag"), (1, "record://one")):
        found = hs.GroundkitRetriever(tagged).run("refunds", filters=_equals([value], "meta.x"))
        assert [d.meta["source"] for d in found["documents"]] == [source]


# --- a run's empty filters keep the component's (Haystack's REPLACE policy) ---

_INIT = _cmp("meta.floor", "==", 3)


def _sources(documents: list[HaystackDocument]) -> list[str]:
    return sorted(str(d.meta["source"]) for d in documents)


@pytest.mark.parametrize("runtime", [None, {}, _cmp("meta.floor", "==", 2), {"floor": 2}, _and()])
async def test_run_filters_follow_haystacks_replace_policy(
    sync_collection: gks.SyncCollection, runtime: dict[str, Any] | None
) -> None:
    component = hs.GroundkitRetriever(sync_collection, filters=_INIT)
    expected = _sources(
        hs.GroundkitRetriever(sync_collection).run(
            "espresso kettle tea",
            filters=apply_filter_policy(FilterPolicy.REPLACE, _INIT, runtime),
        )["documents"]
    )
    ran = _sources(component.run("espresso kettle tea", filters=runtime)["documents"])
    ran_async = _sources(
        (await component.run_async("espresso kettle tea", filters=runtime))["documents"]
    )
    assert ran == ran_async == expected
    if not runtime:
        assert ran == ["record://TCK-2"]  # the component's own filter


def test_empty_run_filters_without_component_filters_filter_nothing(
    sync_collection: gks.SyncCollection,
) -> None:
    component = hs.GroundkitRetriever(sync_collection)
    assert _sources(component.run("espresso kettle tea", filters={})["documents"]) == _sources(
        component.run("espresso kettle tea")["documents"]
    )


# --- records_from_*: id_key= and fields= of the wrong type, in groundkit's words ---

_CONVERTERS: list[tuple[str, Callable[..., Any], Any]] = [
    (
        "records_from_documents",
        lc.records_from_documents,
        LangChainDocument(page_content="x", id="1", metadata={"k": "a"}),
    ),
    (
        "records_from_documents",
        hs.records_from_documents,
        HaystackDocument(content="x", id="1", meta={"k": "a"}),
    ),
    ("records_from_nodes", li.records_from_nodes, TextNode(text="x", id_="1", metadata={"k": "a"})),
]


@pytest.mark.parametrize(("name", "convert", "document"), _CONVERTERS)
@pytest.mark.parametrize("id_key", [["k"], {"k": 1}, 5, ("k",)])
def test_an_id_key_that_is_not_a_str_is_refused(
    name: str, convert: Callable[..., Any], document: Any, id_key: object
) -> None:
    with pytest.raises(InvalidInputError, match=rf"{name}: id_key= .* a str") as caught:
        convert([document], id_key=id_key)
    assert type(id_key).__name__ in str(caught.value)
    with pytest.raises(InvalidInputError, match="id_key="):
        convert([], id_key=id_key)  # checked before any document is looked at
    assert [r.id for r in convert([document], id_key="k")] == ["a"]


@pytest.mark.parametrize(("name", "convert", "document"), _CONVERTERS)
@pytest.mark.parametrize("fields", [5, "k", {"k"}, ["k", ["k"]], [None]])
def test_fields_that_are_not_a_list_of_keys_are_refused(
    name: str, convert: Callable[..., Any], document: Any, fields: object
) -> None:
    with pytest.raises(InvalidInputError, match=f"{name}: fields= is a list of metadata keys"):
        convert([document], fields=fields)
    assert convert([document], fields=("k",))[0].fields == {"k": "a"}
