"""The Haystack retriever component against the real haystack-ai package."""

from __future__ import annotations

from pathlib import Path

from haystack import Document, Pipeline
from haystack.components.converters import TextFileToDocument

import groundkit
import groundkit.sync as gks
from groundkit.integrations.haystack import (
    GroundkitRetriever,
    citation_of,
    records_from_documents,
)


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
