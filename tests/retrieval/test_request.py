"""SearchRequest: the one place search options are defined, checked and described.

The pinning tests below fail when a field is added to SearchRequest and not to a
surface (the CLI, the MCP tools, the sync twin, the framework retrievers), when a
surface has an option SearchRequest lacks, or when their defaults or descriptions
disagree. A surface that leaves an option out, or shapes it its own way, says so in
an explicit exclusion list with the reason.
"""

from __future__ import annotations

import argparse
import inspect
import typing
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

import groundkit
import groundkit.sync
from groundkit import (
    Collection,
    ConfigurationError,
    RetrievalError,
    SearchRequest,
    search_collections,
)
from groundkit.cli import SEARCH_FLAGS, _parser
from groundkit.config import MAX_TOP_K, RetrievalConfig
from groundkit.retrieval.request import SearchOptions, _checked, name_options
from groundkit.retrieval.search import Retriever
from tests.support import CORPUS, SMALL_CHUNKS, write_tree

FIELDS = list(SearchRequest.model_fields)
OPTIONS = [name for name in FIELDS if name != "query"]


# -- the model ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("values", "needle"),
    [
        ({"query": ""}, "query must be a non-empty string"),
        ({"query": "   "}, "query must be a non-empty string"),
        ({"query": 3}, "query must be a non-empty string"),
        ({"query": "x" * 10_001}, "query is longer than 10000 characters"),
        ({"query": "tea \udcff"}, "the query"),
        ({"query": "tea", "top_k": 0}, f"top_k must be an integer from 1 to {MAX_TOP_K}"),
        ({"query": "tea", "top_k": MAX_TOP_K + 1}, "top_k must be an integer"),
        ({"query": "tea", "top_k": True}, "top_k must be an integer"),
        ({"query": "tea", "top_k": "5"}, "top_k must be an integer"),
        ({"query": "tea", "mode": "fuzzy"}, "unknown mode 'fuzzy'; choose one of bm25"),
        ({"query": "tea", "rerank": "yes"}, "rerank must be True or False"),
        ({"query": "tea", "rewrite": 1}, "rewrite must be True or False"),
        ({"query": "tea", "filters": {"team": {"zz": 1}}}, "unknown operator 'zz'"),
        ({"query": "tea", "filters": ["team"]}, "filter"),
        ({"query": "tea", "as_of": datetime(2026, 3, 1)}, "as_of must carry a time zone"),
        ({"query": "tea", "as_of": "yesterday"}, "as_of must be a datetime or an ISO 8601"),
        ({"query": "tea", "as_of": 1_700_000_000}, "as_of must be a datetime, got int"),
        (
            {"query": "tea", "as_of": datetime(2026, 3, 1, tzinfo=UTC), "mode": "dense"},
            "as_of searches in bm25 mode only",
        ),
        ({"query": "tea", "expand": "page"}, "expand must be one of parent, window"),
        ({"query": "tea", "mmr": 1.5}, "mmr is the relevance weight"),
        ({"query": "tea", "mmr": float("nan")}, "mmr is the relevance weight"),
        ({"query": "tea", "mmr": True}, "mmr is the relevance weight"),
        ({"query": "tea", "reorder": "middle"}, "reorder must be one of lost-in-the-middle"),
        ({"query": "tea", "topk": 3}, "unknown search option(s) 'topk'"),
    ],
)
def test_bad_options_are_retrieval_errors_naming_them(values: dict[str, Any], needle: str) -> None:
    with pytest.raises(RetrievalError) as caught:
        SearchRequest(**values)
    assert needle in str(caught.value)
    assert not isinstance(caught.value, ValidationError)
    with pytest.raises(RetrievalError):
        SearchRequest.model_validate(values)


def test_a_message_never_quotes_the_query() -> None:
    secret = "qqsecretqq " * 1000
    with pytest.raises(RetrievalError) as caught:
        SearchRequest(query=secret)
    assert "qqsecretqq" not in str(caught.value)


# Values of every kind, valid or not, for any option: a request is made, or refused
# with a RetrievalError; pydantic's ValidationError never escapes.
_ANY = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-5, 2 * MAX_TOP_K),
    st.floats(allow_nan=True),
    st.text(max_size=20),
    st.sampled_from(["bm25", "dense", "hybrid", "parent", "window", "lost-in-the-middle"]),
    st.dictionaries(st.text(max_size=5), st.integers(), max_size=2),
    st.lists(st.integers(), max_size=2),
    st.datetimes(timezones=st.sampled_from([UTC, timezone(timedelta(hours=2))])),
)


@given(st.dictionaries(st.sampled_from(OPTIONS), _ANY), st.text(max_size=30))
@settings(max_examples=300, deadline=None)
def test_any_values_give_a_request_or_a_retrieval_error(
    options: dict[str, Any], query: str
) -> None:
    try:
        request = SearchRequest(query=query, **options)
    except RetrievalError:
        return
    # What was accepted round-trips, and is the same request however it is read back.
    assert SearchRequest.model_validate(request.model_dump()) == request
    again = SearchRequest.model_validate(request.model_dump(mode="json"))
    assert again == request and hash(again) == hash(request)
    assert SearchRequest.model_validate_json(request.model_dump_json()) == request


@given(st.dictionaries(st.sampled_from(OPTIONS), _ANY), st.text(max_size=30))
@settings(max_examples=300, deadline=None)
def test_a_request_holds_what_validation_would_hold(options: dict[str, Any], query: str) -> None:
    """A request whose checked values pydantic would keep as they are is set without
    validating them again: it must be the very request validation gives."""
    try:
        request = SearchRequest(query=query, **options)
    except RetrievalError:
        return
    checked = _checked({"query": query, "top_k": None, **options})
    validated = SearchRequest.__pydantic_validator__.validate_python(checked)
    assert request.__dict__ == validated.__dict__
    assert [type(v) for v in request.__dict__.values()] == [
        type(v) for v in validated.__dict__.values()
    ]
    assert request.model_fields_set == validated.model_fields_set
    assert request.__pydantic_extra__ is None and request.__pydantic_private__ is None


class _Mode(str):
    pass


def test_values_of_subclasses_are_validated_into_their_fields_types() -> None:
    request = SearchRequest(query=_Mode("tea"), mode=_Mode("bm25"))  # type: ignore[arg-type]
    assert type(request.query) is str and type(request.mode) is str
    assert request == SearchRequest(query="tea")


def test_a_request_round_trips_through_json() -> None:
    request = SearchRequest(
        query="green tea",
        top_k=5,
        filters={"team": {"in": ["infra", "ops"]}},
        as_of=datetime(2026, 3, 1, 12, tzinfo=timezone(timedelta(hours=2))),
    )
    dumped = request.model_dump(mode="json")
    assert dumped["as_of"] == "2026-03-01T12:00:00+02:00"
    assert SearchRequest.model_validate(dumped) == request
    assert SearchRequest.model_validate_json(request.model_dump_json()) == request
    with pytest.raises(RetrievalError, match="not valid JSON"):
        SearchRequest.model_validate_json("{")
    with pytest.raises(RetrievalError, match="a mapping, not list"):
        SearchRequest.model_validate(["tea"])


def test_a_request_is_frozen_and_keeps_its_own_filters() -> None:
    filters: dict[str, Any] = {"team": {"in": ["infra"]}}
    request = SearchRequest(query="tea", filters=filters)
    filters["team"]["in"].append("ops")
    assert request.filters == {"team": {"in": ["infra"]}}
    with pytest.raises(AttributeError, match=r"frozen; request.replace\(top_k=...\)"):
        request.top_k = 3
    assert {request, SearchRequest(query="tea", filters={"team": {"in": ["infra"]}})} == {request}


def test_requests_equal_exactly_when_they_search_alike() -> None:
    # Equality was pydantic's (True == 1 in a filter) and the hash the JSON text's
    # (1 against 1.0, one instant in two zones), so equal requests hashed apart and
    # a filter on true equalled one on 1.
    moment = datetime(2026, 3, 1, 12, tzinfo=UTC)
    alike: list[tuple[dict[str, Any], dict[str, Any]]] = [
        ({"filters": {"n": 1}}, {"filters": {"n": 1.0}}),
        ({"filters": {"n": {"in": [1, 2]}}}, {"filters": {"n": {"in": (1.0, 2)}}}),
        ({"as_of": moment}, {"as_of": moment.astimezone(timezone(timedelta(hours=2)))}),
    ]
    for one, other in alike:
        a, b = SearchRequest(query="tea", **one), SearchRequest(query="tea", **other)
        assert a == b and hash(a) == hash(b) and len({a, b}) == 1
    unlike: list[tuple[dict[str, Any], dict[str, Any]]] = [
        ({"filters": {"n": True}}, {"filters": {"n": 1}}),
        ({"filters": {"n": 2**53 + 1}}, {"filters": {"n": float(2**53)}}),
        ({"as_of": moment}, {"as_of": moment + timedelta(microseconds=1)}),
    ]
    for one, other in unlike:
        assert SearchRequest(query="tea", **one) != SearchRequest(query="tea", **other)
    assert SearchRequest(query="tea").__eq__("tea") is NotImplemented


def test_replace_checks_the_changed_copy() -> None:
    request = SearchRequest(query="tea", mode="hybrid")
    assert request.replace(top_k=3) == SearchRequest(query="tea", mode="hybrid", top_k=3)
    with pytest.raises(RetrievalError, match="as_of searches in bm25 mode only"):
        request.replace(as_of=datetime(2026, 1, 1, tzinfo=UTC))
    assert request.mode == "hybrid" and request.top_k is None


def test_options_beside_a_request_are_refused() -> None:
    request = SearchRequest(query="tea")
    assert SearchRequest.of(request) is request
    assert SearchRequest.of("tea", 3, mode="dense") == SearchRequest(
        query="tea", top_k=3, mode="dense"
    )
    with pytest.raises(RetrievalError, match=r"beside a SearchRequest \(mode, top_k\)"):
        SearchRequest.of(request, 3, mode="dense")


def test_options_checked_without_a_query() -> None:
    assert SearchRequest.checked_options(mmr=1)["mmr"] == 1.0
    with pytest.raises(RetrievalError, match="top_k must be"):
        SearchRequest.checked_options(top_k=0)
    with pytest.raises(RetrievalError, match="given with each search"):
        SearchRequest.checked_options(query="tea")


def test_name_options_speaks_each_surfaces_names() -> None:
    with pytest.raises(RetrievalError) as caught:
        SearchRequest(query="tea", mode="dense", as_of=datetime(2026, 1, 1, tzinfo=UTC))
    assert str(caught.value).startswith("as_of searches in bm25 mode only")
    assert name_options(caught.value, SEARCH_FLAGS).startswith("--as-of searches in bm25")
    assert name_options(caught.value, SEARCH_FLAGS).endswith("not --mode dense")
    other = RetrievalError("unrelated, top_k")
    assert name_options(other, SEARCH_FLAGS) == "unrelated, top_k"


# -- pinning: every surface against the fields ----------------------------------


def test_the_keyword_options_are_the_fields() -> None:
    # SearchOptions types **options; query and top_k are positional parameters.
    assert set(SearchOptions.__annotations__) == set(FIELDS) - {"query", "top_k"}
    assert set(SearchRequest.SINGLE_COLLECTION) <= set(FIELDS)
    for name, field in SearchRequest.model_fields.items():
        assert field.description, f"{name} has no description"


def _takes_a_request(function: Callable[..., Any]) -> None:
    """``function(query: str | SearchRequest, top_k=None, **options: SearchOptions)``."""
    signature = inspect.signature(function)
    parameters = signature.parameters
    assert "SearchRequest" in str(parameters["query"].annotation), function
    assert parameters["top_k"].default is None, function
    options = parameters["options"]
    assert options.kind is inspect.Parameter.VAR_KEYWORD, function
    assert str(options.annotation) == "Unpack[SearchOptions]", function
    keywords = [p for p in parameters.values() if p.kind is inspect.Parameter.KEYWORD_ONLY]
    # Beside the options, a surface's own keywords: none may be a SearchRequest field.
    assert not {p.name for p in keywords} & set(FIELDS), function


@pytest.mark.parametrize(
    "function",
    [
        Collection.search,
        Retriever.search,
        search_collections,
        groundkit.sync.search_collections,
        groundkit.sync.SyncCollection.search,
    ],
    ids=["Collection", "Retriever", "search_collections", "sync-multi", "sync-collection"],
)
def test_python_surfaces_take_the_request_or_its_options(function: Callable[..., Any]) -> None:
    _takes_a_request(function)


def _search_parser() -> argparse.ArgumentParser:
    parser = _parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    found: argparse.ArgumentParser = sub.choices["search"]
    return found


# grk spells these options its own way; each is still the field it is named for.
_CLI_SHAPED = {
    "query": "the positional QUERY ('-' reads stdin)",
    "rerank": "--rerank takes the cross-encoder's name or path; given means rerank=True",
    "filters": "--where takes FIELD=VALUE / FIELD.OP=VALUE (or JSON), repeatable",
    "rewrite": "--glossary takes the glossary FILE; given means rewrite=True",
}


def test_the_cli_has_a_flag_for_every_field_with_its_default_and_description() -> None:
    assert set(SEARCH_FLAGS) == set(FIELDS)
    actions = {a.dest: a for a in _search_parser()._actions}
    flags = {option for a in actions.values() for option in a.option_strings}
    for name, flag in SEARCH_FLAGS.items():
        if name == "query":
            assert "query" in actions
            continue
        assert flag in flags, flag
        if name in _CLI_SHAPED:
            continue
        action = actions[name]
        field = SearchRequest.model_fields[name]
        assert action.default == field.default, name
        assert action.help is not None and action.help.startswith(field.description or "?")
    # Nothing among grk search's own options is a search option the model lacks.
    cli_only = {
        "glossary",  # the rewriter rewrite=True uses
        "rewrites",  # that rewriter's variant count
        "where",  # filters, parsed from grk's syntax
        "full",  # the output's shape, not the search
        "help",
    }
    commons = {a.dest for a in _parser()._actions}
    own = set(actions) - set(FIELDS) - commons - cli_only
    assert own <= {"collection", "verbose"}, own


# What each MCP tool adds beside the fields, and the fields it leaves out, with why.
# Beside the fields: where to search, and "full", the shape of the answer.
_MCP_EXTRA = {"search": {"collection", "full"}, "search_collections": {"collections", "full"}}
_MCP_LEFT_OUT = {
    "search": set(),
    # They rework one collection's ranking; a fused ranking is not one.
    "search_collections": set(SearchRequest.SINGLE_COLLECTION),
}
# The tools show a number a model can reason about where the field's default is
# "the collection's setting".
_MCP_DEFAULTS = {"top_k": 10}


async def test_the_mcp_tools_schemas_follow_the_fields(tmp_path: Path) -> None:
    pytest.importorskip("mcp")  # the lexical-only installs run this file without the extras
    from mcp import Client

    from groundkit.service import CollectionRegistry, build_server

    registry = CollectionRegistry(tmp_path)
    try:
        async with Client(build_server(registry)) as client:
            tools = {t.name: t for t in (await client.list_tools()).tools}
    finally:
        await registry.close()
    for tool in ("search", "search_collections"):
        schema = tools[tool].input_schema
        properties = schema["properties"]
        expected = set(FIELDS) - _MCP_LEFT_OUT[tool] | _MCP_EXTRA[tool]
        assert set(properties) == expected, tool
        for name in set(FIELDS) & set(properties):
            field = SearchRequest.model_fields[name]
            described = properties[name].get("description", "")
            assert described.startswith(field.description or "?"), (tool, name)
            if name == "query":
                assert "query" in schema["required"]
                continue
            assert properties[name].get("default") == _MCP_DEFAULTS.get(name, field.default), (
                tool,
                name,
            )


def test_the_langchain_retriever_has_every_option() -> None:
    pytest.importorskip("langchain_core")
    from groundkit.integrations.langchain import GroundkitRetriever

    fields = GroundkitRetriever.model_fields
    for name in OPTIONS:
        assert name in fields, name
        assert fields[name].description == SearchRequest.model_fields[name].description
        if name != "top_k":  # LangChain retrievers conventionally default to 4
            assert fields[name].default == SearchRequest.model_fields[name].default, name
    assert fields["top_k"].default == 4


_FRAMEWORK = {"llama_index": "llama_index.core", "haystack": "haystack"}


@pytest.mark.parametrize("module", ["llama_index", "haystack"])
def test_the_other_retrievers_take_the_options(module: str) -> None:
    import importlib

    pytest.importorskip(_FRAMEWORK[module])

    retriever = importlib.import_module(f"groundkit.integrations.{module}").GroundkitRetriever
    parameters = inspect.signature(retriever.__init__).parameters
    assert str(parameters["options"].annotation) == "Unpack[SearchOptions]"
    # top_k is their own (the framework's conventional default); the rest are the options.
    assert "top_k" in parameters
    own = {"self", "collection", "top_k", "options", "callback_manager"}
    assert not set(parameters) - own
    hints = typing.get_type_hints(SearchOptions)
    assert set(hints) == set(OPTIONS) - {"top_k"}


# -- each surface takes a request ------------------------------------------------


@pytest.fixture
async def docs(tmp_path: Path) -> AsyncIterator[Collection]:
    write_tree(tmp_path / "docs", dict(CORPUS))
    async with Collection.open(
        tmp_path / "index", "docs", base_dir=tmp_path / "docs", chunking=SMALL_CHUNKS
    ) as col:
        await col.ingest(col.base_dir)
        yield col


async def test_collection_search_takes_a_request(docs: Collection) -> None:
    request = SearchRequest(query="solar panels", top_k=2)
    by_request = await docs.search(request)
    by_keywords = await docs.search("solar panels", 2)
    assert [r.chunk_id for r in by_request.results] == [r.chunk_id for r in by_keywords.results]
    assert by_request.total_results == 2
    retriever = await docs.retriever()
    direct = await retriever.search(request)
    assert [r.chunk_id for r in direct.results] == [r.chunk_id for r in by_request.results]
    with pytest.raises(RetrievalError, match="beside a SearchRequest"):
        await docs.search(request, 3)


async def test_the_python_api_keeps_its_python_advice(docs: Collection) -> None:
    with pytest.raises(ConfigurationError, match=r"embedder=\.\.\."):
        await docs.search(SearchRequest(query="solar", mode="dense"))


async def test_search_collections_takes_a_request(tmp_path: Path, docs: Collection) -> None:
    write_tree(tmp_path / "more", {"tea.md": "Tea and solar panels.\n"})
    async with Collection.open(tmp_path / "index", "more", base_dir=tmp_path / "more") as more:
        await more.ingest(more.base_dir)
        request = SearchRequest(query="solar panels", top_k=3)
        fused = await search_collections([docs, more], request)
        assert fused.total_results == 3
        assert {r.collection for r in fused.results} == {"docs", "more"}
        same = await search_collections([docs, more], "solar panels", 3)
        assert [r.chunk_id for r in same.results] == [r.chunk_id for r in fused.results]
        for option in ({"expand": "window"}, {"mmr": 0.5}, {"rewrite": True}):
            with pytest.raises(RetrievalError, match="several collections together"):
                await search_collections([docs, more], request.replace(**option))


def test_the_sync_twin_takes_a_request(tmp_path: Path) -> None:
    write_tree(tmp_path / "docs", dict(CORPUS))
    with groundkit.sync.Collection.open(
        tmp_path / "index", base_dir=tmp_path / "docs", chunking=SMALL_CHUNKS
    ) as col:
        col.ingest(col.base_dir)
        request = SearchRequest(query="solar panels", top_k=2)
        assert col.search(request).total_results == 2
        fused = groundkit.sync.search_collections([col], request)
        assert [r.chunk_id for r in fused.results] == [
            r.chunk_id for r in col.search(request).results
        ]


async def test_a_retrievers_options_reach_the_search(docs: Collection) -> None:
    pytest.importorskip("llama_index.core")
    from groundkit.integrations.llama_index import GroundkitRetriever

    everywhere = await GroundkitRetriever(docs, top_k=3).aretrieve("solar panels")
    assert everywhere
    first = everywhere[0].node.metadata["source"]
    only = await GroundkitRetriever(
        docs, top_k=3, filters={"source": {"eq": first}}, reorder="lost-in-the-middle"
    ).aretrieve("solar panels")
    assert only and {n.node.metadata["source"] for n in only} == {first}
    with pytest.raises(RetrievalError, match="mmr is the relevance weight"):
        GroundkitRetriever(docs, mmr=2.0)


def test_the_old_checks_warn_and_still_check() -> None:
    from groundkit.retrieval import search

    with pytest.warns(DeprecationWarning, match="validate_request is deprecated"):
        assert search.validate_request("tea", None, "bm25", RetrievalConfig()) == 10
    with (
        pytest.warns(DeprecationWarning, match="validate_as_of is deprecated"),
        pytest.raises(RetrievalError, match="bm25 mode only"),
    ):
        search.validate_as_of(datetime(2026, 1, 1, tzinfo=UTC), "dense")


def test_a_mapping_without_a_query_is_refused_like_an_empty_one() -> None:
    with pytest.raises(RetrievalError, match="query must be a non-empty string"):
        SearchRequest.model_validate({"top_k": 3})
