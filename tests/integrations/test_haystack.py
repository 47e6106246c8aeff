"""The Haystack retriever component against the real haystack-ai package."""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import pytest
from haystack import Document, Pipeline
from haystack.components.converters import TextFileToDocument

import groundkit
import groundkit.sync as gks
from groundkit.integrations.haystack import (
    GroundkitRetriever,
    citation_of,
    records_from_documents,
)
from tests.integrations.conftest import build


def test_a_pipeline_returns_documents_that_verify(sync_collection: gks.SyncCollection) -> None:
    pipeline = Pipeline()
    pipeline.add_component("retriever", GroundkitRetriever(sync_collection, top_k=3))
    out = pipeline.run({"retriever": {"query": "black tea boiling"}})
    documents = out["retriever"]["documents"]
    assert isinstance(documents[0], Document)
    top = documents[0]
    assert top.meta["source"] == "tea/black.md"
    assert top.id == top.meta["chunk_id"] and top.score == top.meta["score"]
    citation = citation_of(top)
    assert top.content is not None
    assert (gks.check_citation(citation, top.content, sync_collection.base_dir)).ok
    assert sync_collection.fetch_chunk(citation.chunk_id).verification == "verified"
    # Per-run overrides: groundkit filters and top_k.
    narrowed = pipeline.run(
        {"retriever": {"query": "espresso", "top_k": 1, "filters": {"floor": 3}}}
    )["retriever"]["documents"]
    assert [citation_of(d).source for d in narrowed] == ["record://TCK-2"]


async def test_a_pipeline_run_async_on_an_async_collection(
    async_collection: groundkit.Collection,
) -> None:
    # Haystack 3 runs any pipeline asynchronously (2.x had AsyncPipeline for it).
    pipeline = Pipeline()
    pipeline.add_component("retriever", GroundkitRetriever(async_collection, top_k=2))
    out = await pipeline.run_async({"retriever": {"query": "kettle leaks"}})
    top = out["retriever"]["documents"][0]
    assert citation_of(top).source == "record://TCK-1"
    assert (await async_collection.fetch_chunk(top.id)).verification == "verified"


def test_a_converters_documents_are_ingested_as_records(tmp_path: Path) -> None:
    source = tmp_path / "runbook.txt"
    source.write_text("Restart the queue worker before the database.", encoding="utf-8")
    converted = TextFileToDocument().run(sources=[source])["documents"]
    records = records_from_documents(converted, fields=[])
    with gks.Collection.open(tmp_path / "idx", base_dir=tmp_path) as col:
        assert len(col.add_documents(records).added) == 1
        # Haystack ids derive from content and meta: converting again changes nothing.
        again = TextFileToDocument().run(sources=[source])["documents"]
        assert len(col.add_documents(records_from_documents(again, fields=[])).unchanged) == 1
        documents = GroundkitRetriever(col).run("queue worker")["documents"]
        assert col.fetch_chunk(citation_of(documents[0]).chunk_id).verification == "verified"


def test_a_pipeline_with_the_retriever_round_trips_through_yaml(
    sync_collection: gks.SyncCollection,
) -> None:
    pipeline = Pipeline()
    retriever = GroundkitRetriever(
        sync_collection, top_k=2, filters={"field": "meta.floor", "operator": "==", "value": 2}
    )
    pipeline.add_component("retriever", retriever)
    text = pipeline.dumps()
    # Where the collection is, never its contents.
    assert "kettle" not in text and str(sync_collection.aio.location.index_dir) in text
    loaded = Pipeline.loads(text)
    assert loaded.dumps() == text
    reopened = loaded.get_component("retriever")
    assert isinstance(reopened, GroundkitRetriever)
    try:
        documents = loaded.run({"retriever": {"query": "kettle leaks"}})["retriever"]["documents"]
        assert [citation_of(d).source for d in documents] == ["record://TCK-1"]
        assert sync_collection.fetch_chunk(documents[0].id).verification == "verified"
    finally:
        reopened.close()


def test_a_loaded_retriever_never_creates_a_collection(tmp_path: Path) -> None:
    data = {
        "type": "groundkit.integrations.haystack.GroundkitRetriever",
        "init_parameters": {"collection": {"index_dir": str(tmp_path / "nowhere"), "name": "x"}},
    }
    retriever = GroundkitRetriever.from_dict(data)
    with pytest.raises(groundkit.StorageError):
        retriever.run("anything")
    assert not (tmp_path / "nowhere").exists()
    with pytest.raises(groundkit.ConfigurationError, match="unknown key"):
        GroundkitRetriever.from_dict(
            {**data, "init_parameters": {"collection": {"name": "x", "password": "p"}}}
        )


def test_haystack_filters_are_translated_or_refused(sync_collection: gks.SyncCollection) -> None:
    retriever = GroundkitRetriever(sync_collection, top_k=5)
    either = {
        "operator": "OR",
        "conditions": [
            {"field": "meta.floor", "operator": "==", "value": 2},
            {"field": "meta.floor", "operator": "==", "value": 3},
        ],
    }
    found = retriever.run("kettle espresso", filters=either)["documents"]
    assert sorted(citation_of(d).source for d in found) == ["record://TCK-1", "record://TCK-2"]
    above = {"field": "meta.floor", "operator": ">", "value": 2}
    assert [
        citation_of(d).source for d in retriever.run("espresso", filters=above)["documents"]
    ] == ["record://TCK-2"]
    mixed = {
        "operator": "OR",
        "conditions": [
            {"field": "meta.floor", "operator": "==", "value": 2},
            {"field": "meta.source", "operator": "==", "value": "tea/black.md"},
        ],
    }
    with pytest.raises(groundkit.RetrievalError, match="operator 'OR'"):
        retriever.run("tea", filters=mixed)


@pytest.mark.parametrize(
    ("filters", "message"),
    [
        ({"field": "meta.x", "operator": "~~", "value": 1}, "unknown comparison operator '~~'"),
        ({"operator": "AND"}, "operator 'AND' needs 'conditions'"),
        ({"operator": "XOR", "conditions": []}, "unknown logical operator 'XOR'"),
        (
            {"operator": "AND", "conditions": [{"operator": "NAND", "conditions": []}]},
            "unknown logical operator 'NAND'",
        ),
        *(
            (
                {
                    "operator": "OR",
                    "conditions": [
                        {"field": "meta.floor", "operator": "in", "value": value},
                        {"field": "meta.floor", "operator": "==", "value": 9},
                    ],
                },
                f"'in' on 'floor' takes a list of values, not {type(value).__name__}",
            )
            # A string was split into its characters and a dict read as its keys.
            for value in ("23", {"2": 1}, None, 5)
        ),
    ],
)
def test_a_malformed_haystack_filter_is_refused_in_haystacks_terms(
    sync_collection: gks.SyncCollection, filters: dict[str, object], message: str
) -> None:
    """Not read as groundkit conditions on fields called 'field' or 'operator'."""
    with pytest.raises(groundkit.InvalidQueryError, match=message):
        GroundkitRetriever(sync_collection).run("tea", filters=filters)


@pytest.mark.parametrize("filters", ["floor", 1, [], [("floor", 2)]])
def test_filters_that_are_not_a_mapping_are_refused_when_made(
    sync_collection: gks.SyncCollection, filters: object
) -> None:
    with pytest.raises(groundkit.InvalidQueryError, match="filters must be a mapping"):
        GroundkitRetriever(sync_collection, filters=filters)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "collection",
    [
        {"name": "x", "index_dir": 123},
        {"name": "x", "index_dir": [1, 2]},
        {"name": "x", "metadata_url": 5},
    ],
)
def test_a_pipeline_collection_of_the_wrong_type_is_a_configuration_error(
    collection: dict[str, object],
) -> None:
    data = {
        "type": "groundkit.integrations.haystack.GroundkitRetriever",
        "init_parameters": {"collection": collection},
    }
    with pytest.raises(groundkit.ConfigurationError, match="must be text"):
        GroundkitRetriever.from_dict(data)


async def test_a_loaded_pipeline_runs_asynchronously(
    async_collection: groundkit.Collection,
) -> None:
    pipeline = Pipeline()
    pipeline.add_component("retriever", GroundkitRetriever(async_collection, top_k=1))
    loaded = Pipeline.loads(pipeline.dumps())
    retriever: Any = loaded.get_component("retriever")
    try:
        out = await loaded.run_async({"retriever": {"query": "espresso descaling"}})
        assert citation_of(out["retriever"]["documents"][0]).source == "record://TCK-2"
    finally:
        retriever.close()


async def test_a_pipeline_never_holds_a_postgres_password(
    postgres_dsn: str, fresh: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A collection opened with a password in its PostgreSQL URL is searched as usual,
    but its retriever refuses to be written into a pipeline, saying where the password
    goes instead; opened that way, the pipeline is written, holds no password, and runs."""
    url = urlsplit(postgres_dsn)
    if not url.password:
        pytest.skip("the test server's DSN carries no password")
    build(tmp_path / "base")
    async with groundkit.Collection.open(
        name=fresh, metadata_url=postgres_dsn, base_dir=tmp_path / "base"
    ) as col:
        await col.ingest(tmp_path / "base")
        retriever = GroundkitRetriever(col, top_k=1)
        found = await retriever.run_async("green tea degrees")
        assert citation_of(found["documents"][0]).source == "tea/green.md"
        pipeline = Pipeline()
        pipeline.add_component("retriever", retriever)
        for write in (retriever.to_dict, pipeline.dumps, pipeline.to_dict):
            with pytest.raises(groundkit.ConfigurationError) as refused:
                write()
            message = str(refused.value)
            assert "password" in message and "PostgreSQL URL" in message
            assert "PGPASSWORD" in message and "~/.pgpass" in message
            assert url.password not in message
    # What the message says to do: the URL without its password, the password in PGPASSWORD.
    bare = urlunsplit(url._replace(netloc=url.netloc.replace(f":{url.password}@", "@", 1)))
    assert urlsplit(bare).password is None
    monkeypatch.setenv("PGPASSWORD", url.password)
    async with groundkit.Collection.open(name=fresh, metadata_url=bare) as col:
        pipeline = Pipeline()
        pipeline.add_component("retriever", GroundkitRetriever(col, top_k=1))
        text = pipeline.dumps()
    assert url.password not in text and bare in text
    loaded = Pipeline.loads(text)
    reopened: Any = loaded.get_component("retriever")
    try:
        out = await loaded.run_async({"retriever": {"query": "espresso descaling"}})
        assert citation_of(out["retriever"]["documents"][0]).source == "coffee/espresso.md"
    finally:
        reopened.close()


@pytest.mark.parametrize(
    "data",
    [None, "retriever", {"init_parameters": "collection"}, {"init_parameters": [1, 2]}],
)
def test_a_serialised_retriever_of_the_wrong_shape_is_a_configuration_error(data: Any) -> None:
    with pytest.raises(groundkit.ConfigurationError, match="init_parameters"):
        GroundkitRetriever.from_dict(data)


def test_helpers_given_something_other_than_documents_raise_groundkits_errors() -> None:
    wrong: object
    for wrong in (None, "text", {"meta": {}}):
        with pytest.raises(groundkit.RetrievalError, match="takes a Haystack Document"):
            citation_of(wrong)  # type: ignore[arg-type]
    for documents in (None, 5, "text", Document(content="x")):
        with pytest.raises(groundkit.IngestionError, match="list of Haystack Documents"):
            records_from_documents(documents)  # type: ignore[arg-type]
    with pytest.raises(groundkit.IngestionError, match="item 0 is a dict"):
        records_from_documents([{"content": "x"}])  # type: ignore[list-item]
