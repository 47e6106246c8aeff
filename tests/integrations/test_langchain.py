"""The LangChain retriever against the real langchain-core package."""

from __future__ import annotations

import asyncio
import json
import threading
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import pytest
from langchain_core.documents import Document
from langchain_core.runnables import RunnableLambda

import groundkit
import groundkit.sync as gks
from groundkit import ConfigurationError, IngestionError, InvalidQueryError, RetrievalError
from groundkit.integrations.langchain import (
    CITATION_KEY,
    GroundkitRetriever,
    citation_of,
    records_from_documents,
)


def test_invoke_returns_documents_that_round_trip_to_verified_citations(
    sync_collection: gks.SyncCollection,
) -> None:
    retriever = GroundkitRetriever(collection=sync_collection, top_k=2)
    docs = retriever.invoke("boiling water four minutes")
    assert isinstance(docs[0], Document)
    top = docs[0]
    assert top.metadata["source"] == "tea/black.md"
    assert top.id == top.metadata["chunk_id"]
    citation = citation_of(top)
    assert isinstance(citation, groundkit.Citation)
    assert citation.source == "tea/black.md"
    assert (gks.check_citation(citation, top.page_content, sync_collection.base_dir)).ok
    assert sync_collection.fetch_chunk(citation.chunk_id).verification == "verified"
    # Metadata survives JSON (a document sent over the wire, stored, reloaded).
    revived = Document(**json.loads(json.dumps(top.model_dump())))
    assert citation_of(revived) == citation


def test_records_verify_through_the_retriever(sync_collection: gks.SyncCollection) -> None:
    retriever = GroundkitRetriever(collection=sync_collection, filters={"floor": 2})
    (doc,) = retriever.invoke("kettle leaks")
    citation = citation_of(doc)
    assert (citation.source, citation.source_class) == ("record://TCK-1", "record")
    assert doc.metadata["fields"] == {"floor": 2}
    assert gks.check_citation(
        citation, doc.page_content, sync_collection.base_dir, snapshot_dir=sync_collection.snapshots
    ).ok


def test_invoke_takes_top_k_and_filters_and_refuses_the_rest(
    sync_collection: gks.SyncCollection,
) -> None:
    # LangChain drops an invoke keyword the retriever's method does not take: a filter
    # given to invoke searched unfiltered, without a word.
    retriever = GroundkitRetriever(collection=sync_collection, top_k=4)
    everything = retriever.invoke("espresso")
    assert {d.metadata["source"] for d in everything} == {"coffee/espresso.md", "record://TCK-2"}
    (record,) = retriever.invoke("espresso", filters={"floor": 3})
    assert record.metadata["source"] == "record://TCK-2"
    assert len(retriever.invoke("espresso", top_k=1)) == 1
    # An empty filter keeps the retriever's own, as Haystack's filter policy does.
    scoped = GroundkitRetriever(collection=sync_collection, filters={"floor": 3})
    assert scoped.invoke("espresso", filters={}) == scoped.invoke("espresso") == [record]
    with pytest.raises(InvalidQueryError, match="takes top_k and filters, not 'k'"):
        retriever.invoke("kettle", k=1)
    with pytest.raises(InvalidQueryError):
        retriever.invoke("kettle", filters={"floor": {"$bogus": 2}})
    with pytest.raises(InvalidQueryError):
        retriever.invoke("kettle", top_k="1")


async def test_ainvoke_takes_the_same_options(async_collection: groundkit.Collection) -> None:
    retriever = GroundkitRetriever(collection=async_collection, top_k=3)
    assert len(await retriever.ainvoke("espresso", top_k=1)) == 1
    with pytest.raises(InvalidQueryError, match="not 'mode'"):
        await retriever.ainvoke("espresso", mode="dense")


async def test_ainvoke_on_an_async_collection(async_collection: groundkit.Collection) -> None:
    retriever = GroundkitRetriever(collection=async_collection, top_k=3, mode="bm25")
    docs = await retriever.ainvoke("espresso")
    assert {d.metadata["source"] for d in docs} == {"coffee/espresso.md", "record://TCK-2"}
    for doc in docs:
        fetched = await async_collection.fetch_chunk(citation_of(doc).chunk_id)
        assert fetched.verification == "verified"
        assert fetched.content == doc.page_content


async def test_a_sync_invoke_on_the_collections_own_loop_says_use_ainvoke(
    async_collection: groundkit.Collection,
) -> None:
    retriever = GroundkitRetriever(collection=async_collection)
    with pytest.raises(ConfigurationError, match="await the async API"):
        retriever.invoke("tea")


def test_batch_and_chains_run_from_langchains_threads(
    sync_collection: gks.SyncCollection,
) -> None:
    retriever = GroundkitRetriever(collection=sync_collection, top_k=1)
    batched = retriever.batch(["green tea", "espresso machine", "kettle"])
    assert [d[0].metadata["source"] for d in batched] == [
        "tea/green.md",
        "record://TCK-2",
        "record://TCK-1",
    ]

    def sources(docs: list[Document]) -> list[str]:
        return [citation_of(d).source for d in docs]

    chain = retriever | RunnableLambda(sources)
    assert chain.invoke("coffee") == ["coffee/espresso.md"]


def test_errors_are_groundkits(sync_collection: gks.SyncCollection) -> None:
    with pytest.raises(RetrievalError, match="empty"):
        GroundkitRetriever(collection=sync_collection).invoke("  ")
    with pytest.raises(RetrievalError, match="carries no groundkit citation"):
        citation_of(Document(page_content="x"))
    with pytest.raises(RetrievalError, match="not a valid groundkit citation"):
        citation_of(Document(page_content="x", metadata={CITATION_KEY: {"source": "x"}}))
    with pytest.raises(ConfigurationError, match=r"needs a groundkit\.Collection"):
        GroundkitRetriever(collection="not a collection").invoke("tea")


def test_a_loaders_documents_are_ingested_as_records(tmp_path: Path) -> None:
    loaded = [
        Document(
            id="kb-1",
            page_content="Rotate the API keys every ninety days.",
            metadata={"team": "security", "page": 1},
        ),
        Document(page_content="Backups run nightly.", metadata={"doc_id": "kb-2", "page": 2}),
    ]
    with pytest.raises(IngestionError, match="LangChain document 1 has no id"):
        records_from_documents(loaded)
    records = records_from_documents(loaded[:1])
    assert records[0].id == "kb-1" and records[0].fields == {"team": "security", "page": 1}
    keyed = records_from_documents(loaded[1:], id_key="doc_id", fields=["page"])
    assert keyed[0].id == "kb-2" and keyed[0].fields == {"page": 2}
    with gks.Collection.open(tmp_path / "idx", base_dir=tmp_path) as col:
        assert col.add_documents([*records, *keyed]).added == ["record://kb-1", "record://kb-2"]
        assert col.add_documents(records).unchanged == ["record://kb-1"]
        (doc,) = GroundkitRetriever(collection=col, top_k=1).invoke("api keys rotate")
        assert doc.metadata["fields"] == {"page": 1, "team": "security"}
        assert col.fetch_chunk(citation_of(doc).chunk_id).verification == "verified"


def test_an_expanded_search_carries_its_passage(sync_collection: gks.SyncCollection) -> None:
    """The passage expand= asks for reaches the document's metadata; the text stays the
    cited chunk, so the citation still verifies."""
    plain = GroundkitRetriever(collection=sync_collection, top_k=2).invoke("boiling water")
    assert plain[0].metadata["context"] is None
    docs = GroundkitRetriever(collection=sync_collection, top_k=2, expand="window").invoke(
        "boiling water"
    )
    context = docs[0].metadata["context"]
    assert context["kind"] == "window"
    assert docs[0].page_content in context["content"]
    assert docs[0].metadata["chunk_id"] in context["chunk_ids"]
    base = sync_collection.base_dir
    source = (base / docs[0].metadata["source"]).read_text(encoding="utf-8")
    assert source[context["start_offset"] : context["end_offset"]] == context["content"]
    assert gks.check_citation(citation_of(docs[0]), docs[0].page_content, base).ok


@pytest.mark.parametrize(
    ("options", "message"),
    [({"mode": "xx"}, "mode"), ({"top_k": 0}, "top_k"), ({"mmr": 2.0}, "mmr")],
)
def test_bad_options_are_refused_where_the_retriever_is_made(
    sync_collection: gks.SyncCollection, options: dict[str, object], message: str
) -> None:
    with pytest.raises(InvalidQueryError, match=message):
        GroundkitRetriever(collection=sync_collection, **options)


@pytest.mark.parametrize(
    "options",
    [{"k": 2}, {"search_kwargs": {"top_k": 2}}, {"topk": 2}, {"top_k": 2, "filter": {"a": 1}}],
)
def test_an_option_the_retriever_does_not_have_is_refused_not_ignored(
    sync_collection: gks.SyncCollection, options: dict[str, object]
) -> None:
    """LangChain's models drop unknown keywords; a ``k=2`` must not search with four."""
    with pytest.raises(InvalidQueryError, match="GroundkitRetriever has no option") as info:
        GroundkitRetriever(collection=sync_collection, **options)
    assert "top_k is LangChain's k" in str(info.value)
    # LangChain's own fields are still taken.
    made = GroundkitRetriever(collection=sync_collection, tags=["kb"], metadata={"a": 1})
    assert made.tags == ["kb"]


def test_helpers_given_something_other_than_documents_raise_groundkits_errors() -> None:
    """``None``, a dict or a bare string is named, not met with an AttributeError."""
    wrong: object
    for wrong in (None, {"metadata": {}}, "text"):
        with pytest.raises(RetrievalError, match="citation_of takes a LangChain Document"):
            citation_of(wrong)  # type: ignore[arg-type]
    for documents in (None, 5, "text", Document(page_content="x")):
        with pytest.raises(IngestionError, match="takes a list of LangChain Documents"):
            records_from_documents(documents)  # type: ignore[arg-type]
    with pytest.raises(IngestionError, match="item 1 is a dict, not a LangChain Document"):
        records_from_documents([Document(id="a", page_content="x"), {"page_content": "y"}])  # type: ignore[list-item]
    titled = Document(id="a", page_content="x", metadata={"title": "T"})
    with pytest.raises(IngestionError, match="fields= is a list of metadata keys"):
        records_from_documents([titled], fields="title")  # type: ignore[arg-type]
    assert records_from_documents([titled], fields=["title"])[0].fields == {"title": "T"}


@pytest.mark.timeout(120)
def test_a_sync_invoke_whose_apps_loop_stops_raises_instead_of_hanging(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # An application runs its loop in a thread and opened the collection there; a
    # worker thread uses the sync retriever; the app stops its loop as the call starts.
    (tmp_path / "base").mkdir()
    (tmp_path / "base" / "tea.md").write_text("Green tea is brewed at 80 degrees.\n", "utf-8")
    loop = asyncio.new_event_loop()
    app = threading.Thread(target=loop.run_forever, daemon=True)
    app.start()

    async def opened() -> groundkit.Collection:
        col = await groundkit.Collection.open(tmp_path / "idx", base_dir=tmp_path / "base")
        await col.ingest(tmp_path / "base")
        return col

    col = asyncio.run_coroutine_threadsafe(opened(), loop).result()
    retriever = GroundkitRetriever(collection=col)
    assert [d.metadata["source"] for d in retriever.invoke("tea")] == ["tea.md"]
    start = gks._start

    def stopping_start(coroutine: Any, future: Future[Any]) -> None:
        asyncio.get_running_loop().stop()  # the app shuts its loop down meanwhile
        start(coroutine, future)  # type: ignore[arg-type]

    monkeypatch.setattr(gks, "_start", stopping_start)
    outcome: list[BaseException] = []

    def worker() -> None:
        try:
            retriever.invoke("tea")
        except BaseException as exc:
            outcome.append(exc)

    # A daemon: a call that never returns fails through the timeout, not the run's exit.
    waiting = threading.Thread(target=worker, daemon=True)
    waiting.start()
    waiting.join()
    (error,) = outcome
    assert isinstance(error, ConfigurationError), error
    assert "owns this groundkit object stopped" in str(error)
    app.join()
    monkeypatch.undo()
    loop.run_until_complete(col.close())
    loop.close()
