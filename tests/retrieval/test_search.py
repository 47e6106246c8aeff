"""Retriever: validation, ranking, snapshots and stale hits."""

from __future__ import annotations

from pathlib import Path

import pytest

from groundkit import (
    AnalyzerConfig,
    ConfigurationError,
    Highlights,
    IndexIdentityError,
    RetrievalConfig,
    RetrievalError,
    RetrievalResult,
)
from groundkit.config import MAX_TOP_K
from groundkit.ingestion import Indexer
from groundkit.lexical import Analyzer
from groundkit.retrieval import Retriever
from groundkit.storage import SQLiteMetadataStore
from tests.support import QUERIES, SMALL_CHUNKS, assert_all_verify, assert_highlighted


@pytest.fixture
async def indexer(store: SQLiteMetadataStore, corpus_dir: Path) -> Indexer:
    indexer = Indexer(store, corpus_dir, chunking=SMALL_CHUNKS)
    report = await indexer.ingest(corpus_dir)
    assert report.added and not report.failed
    return indexer


@pytest.fixture
async def retriever(store: SQLiteMetadataStore, indexer: Indexer) -> Retriever:
    return await Retriever.open(store)


async def test_results_carry_verifiable_citations(retriever: Retriever, corpus_dir: Path) -> None:
    checked = 0
    for query in QUERIES:
        response = await retriever.search(query)
        assert response.results, query
        assert response.total_results == len(response.results)
        assert response.mode == "bm25"
        assert response.query == query
        checked += await assert_all_verify(response.results, corpus_dir)
    assert checked >= len(QUERIES)


async def test_results_carry_highlights(retriever: Retriever, corpus_dir: Path) -> None:
    for query in QUERIES:
        response = await retriever.search(query)
        assert_highlighted(response.results, query, corpus_dir)
    response = await retriever.search("Boiling the water for tea")
    top = response.results[0]
    assert top.source == "kitchen/tea.rst"
    marked = [top.content[a:b] for a, b in top.highlights or ()]
    assert "Boiling" in marked and "water" in marked and "the" not in marked


async def test_highlights_are_computed_on_first_use(retriever: Retriever) -> None:
    response = await retriever.search("electricity")
    highlights = [r.highlights for r in response.results]
    assert highlights and all(h is not None and not h.resolved for h in highlights)
    first = highlights[0]
    assert first is not None and len(first) == 1 and first.resolved
    # Serialising resolves the rest, and the JSON carries plain pairs.
    dumped = response.model_dump(mode="json")
    assert all(h is not None and h.resolved for h in highlights)
    assert dumped["results"][0]["highlights"] == [list(first[0])]


async def test_ranking(retriever: Retriever) -> None:
    response = await retriever.search("green tea boiling water")
    assert response.results[0].source == "kitchen/tea.rst"
    scores = [r.score for r in response.results]
    assert scores == sorted(scores, reverse=True)
    assert all(s > 0 for s in scores)


async def test_cjk_query(retriever: Retriever) -> None:
    response = await retriever.search("富士山")
    top = response.results[0]
    assert top.source == "notes/东京.txt"
    assert "富士山" in top.content
    assert [top.content[a:b] for a, b in top.highlights or ()] == ["富士山", "山"]


async def test_metadata(retriever: Retriever, store: SQLiteMetadataStore) -> None:
    response = await retriever.search("solar")
    meta = response.metadata
    assert meta["stage"] == "bm25"
    assert meta["generation"] == await store.generation() == retriever.generation
    assert meta["stale_dropped"] == 0
    assert meta["latency_ms"] >= 0


async def test_top_k(retriever: Retriever) -> None:
    everything = await retriever.search("the solar wind tea bread rocket", MAX_TOP_K)
    assert len(everything.results) > 3
    top3 = await retriever.search("the solar wind tea bread rocket", 3)
    assert top3.results == everything.results[:3]
    assert len((await retriever.search("solar", 1)).results) == 1


async def test_default_top_k_from_config(store: SQLiteMetadataStore, indexer: Indexer) -> None:
    retriever = await Retriever.open(store, RetrievalConfig(top_k=2))
    assert len((await retriever.search("solar wind tea rocket bread")).results) == 2


async def test_score_threshold_from_config(store: SQLiteMetadataStore, indexer: Indexer) -> None:
    loose = await Retriever.open(store)
    all_scores = [r.score for r in (await loose.search("solar wind tea", 50)).results]
    cut = sorted(all_scores)[len(all_scores) // 2]
    strict = await Retriever.open(store, RetrievalConfig(score_threshold=cut))
    kept = (await strict.search("solar wind tea", 50)).results
    assert kept and all(r.score >= cut for r in kept)
    assert len(kept) == sum(1 for s in all_scores if s >= cut) < len(all_scores)


async def test_bm25_parameters_reach_the_index(
    store: SQLiteMetadataStore, indexer: Indexer
) -> None:
    default = await Retriever.open(store)
    flat = await Retriever.open(store, RetrievalConfig(bm25_k1=0.0))
    a = [r.score for r in (await default.search("solar panels")).results]
    b = [r.score for r in (await flat.search("solar panels")).results]
    assert a != b


@pytest.mark.parametrize("query", ["", "   ", "\n\t", None, 42, "x" * 10_001])
async def test_bad_queries(retriever: Retriever, query: object) -> None:
    with pytest.raises(RetrievalError) as info:
        await retriever.search(query)  # type: ignore[arg-type]
    assert info.value.verdict is None


@pytest.mark.parametrize("top_k", [0, -1, MAX_TOP_K + 1, True, False, "3", 2.0])
async def test_bad_top_k(retriever: Retriever, top_k: object) -> None:
    with pytest.raises(RetrievalError, match="top_k"):
        await retriever.search("solar", top_k)  # type: ignore[arg-type]


async def test_max_top_k_accepted(retriever: Retriever) -> None:
    assert (await retriever.search("solar", MAX_TOP_K)).results


@pytest.mark.parametrize("mode", ["sparse", "BM25", "", None])
async def test_unknown_mode(retriever: Retriever, mode: object) -> None:
    with pytest.raises(RetrievalError, match="mode"):
        await retriever.search("solar", mode=mode)  # type: ignore[arg-type]


@pytest.mark.parametrize("mode", ["dense", "hybrid"])
async def test_modes_without_embedder(retriever: Retriever, mode: str) -> None:
    with pytest.raises(ConfigurationError, match="embedder"):
        await retriever.search("solar", mode=mode)  # type: ignore[arg-type]


@pytest.mark.parametrize("query", ["zebra unicorn", "the and of", "!!! ???"])
async def test_queries_without_known_terms(retriever: Retriever, query: str) -> None:
    response = await retriever.search(query)
    assert response.results == []
    assert response.total_results == 0


async def test_empty_store(store: SQLiteMetadataStore) -> None:
    retriever = await Retriever.open(store)
    assert retriever.size == 0
    assert (await retriever.search("anything")).results == []


async def test_foreign_analyzer_refused(store: SQLiteMetadataStore, indexer: Indexer) -> None:
    other = Analyzer(AnalyzerConfig(stopwords=False))
    with pytest.raises(IndexIdentityError):
        await Retriever.open(store, analyzer=other)


async def test_snapshot_drops_stale_hits(
    store: SQLiteMetadataStore, indexer: Indexer, corpus_dir: Path
) -> None:
    retriever = await Retriever.open(store)
    before = await retriever.search("offshore wind farms")
    assert before.results[0].source == "energy/wind.txt"
    generation = retriever.generation

    wind = corpus_dir / "energy" / "wind.txt"
    wind.write_text("Prelude added later.\n\n" + wind.read_text(encoding="utf-8"), encoding="utf-8")
    report = await indexer.ingest(corpus_dir)
    assert report.updated == ["energy/wind.txt"]

    after = await retriever.search("offshore wind farms")
    assert retriever.generation == generation  # still the old snapshot
    assert after.metadata["stale_dropped"] > 0
    assert all(r.source != "energy/wind.txt" for r in after.results)
    await assert_all_verify(after.results, corpus_dir)

    fresh = await Retriever.open(store)
    current = await fresh.search("offshore wind farms")
    assert current.metadata["stale_dropped"] == 0
    assert current.results[0].source == "energy/wind.txt"
    await assert_all_verify(current.results, corpus_dir)


async def test_snapshot_drops_deleted_documents(
    store: SQLiteMetadataStore, indexer: Indexer, corpus_dir: Path
) -> None:
    retriever = await Retriever.open(store)
    (corpus_dir / "kitchen" / "bread.txt").unlink()
    report = await indexer.ingest(corpus_dir)
    assert report.removed == ["kitchen/bread.txt"]
    response = await retriever.search("sourdough bread yeast")
    assert response.results == []
    assert response.metadata["stale_dropped"] > 0


async def _preloaded(retriever: Retriever) -> None:
    """Wait for the row preload a search started in the background."""
    assert await retriever.preload()
    assert retriever._rows is not None and retriever._preloading is None


async def test_open_reads_no_rows_and_an_answer_starts_the_preload(
    store: SQLiteMetadataStore, indexer: Indexer
) -> None:
    retriever = await Retriever.open(store)
    assert retriever._rows is None and retriever._preloading is None
    await retriever.search("tea")
    assert retriever._preloading is not None
    await _preloaded(retriever)
    assert retriever._rows is not None and len(retriever._rows) == retriever.size
    off = await Retriever.open(store, RetrievalConfig(preload_max_chunks=0))
    await off.search("tea")
    assert off._preloading is None and off._rows is None
    assert not await off.preload()


async def test_preload_reads_the_rows_without_a_search(
    store: SQLiteMetadataStore, indexer: Indexer
) -> None:
    retriever = await Retriever.open(store)
    assert await retriever.preload()
    assert retriever._rows is not None and len(retriever._rows) == retriever.size


async def test_close_stops_a_preload_still_running(
    store: SQLiteMetadataStore, indexer: Indexer
) -> None:
    retriever = await Retriever.open(store)
    first = await retriever.search("tea")
    task = retriever._preloading
    assert task is not None
    await retriever.close()
    assert task.cancelled() and retriever._preloading is None and retriever._rows is None
    again = await retriever.search("tea")  # still searches, from the store
    assert again.results == first.results


async def test_row_preload_gives_the_same_results(
    store: SQLiteMetadataStore, indexer: Indexer, corpus_dir: Path
) -> None:
    preloaded = await Retriever.open(store)
    from_db = await Retriever.open(store, RetrievalConfig(preload_max_chunks=0))
    # The first answer is joined to the store: the preload starts after it.
    first = await preloaded.search(QUERIES[0])
    assert first.results == (await from_db.search(QUERIES[0])).results
    await _preloaded(preloaded)
    for query in QUERIES:
        a, b = await preloaded.search(query), await from_db.search(query)
        assert a.results == b.results
        # The second search is served from cached result templates.
        again = await preloaded.search(query, top_k=3)
        assert again.results == a.results[:3]
        assert [r.score for r in again.results] == [r.score for r in b.results[:3]]
        await assert_all_verify(a.results, corpus_dir)
    assert preloaded._rows is not None  # every search above used the rows in memory


async def test_a_preload_running_through_writes_goes_on_and_ends_caught_up(
    store: SQLiteMetadataStore, indexer: Indexer, corpus_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Writes while the rows are being read do not stop the read (stopped, a collection
    written between searches would read them again after every answer and never keep
    them); it ends with the rows of the index as it then stands."""
    import asyncio

    retriever = await Retriever.open(store)
    await retriever.search("tea")
    task = retriever._preloading
    assert task is not None
    # Hold the preload at its first read until the writes below are done.
    gate, read = asyncio.Event(), store.get_chunks_by_keys

    async def held(keys: list[int]) -> object:
        await gate.wait()
        return await read(keys)

    monkeypatch.setattr(store, "get_chunks_by_keys", held)
    (corpus_dir / "new.txt").write_text("Fresh notes about copper kettles.\n", encoding="utf-8")
    (corpus_dir / "energy" / "wind.txt").write_text("Rewritten: turbines at sea.\n", "utf-8")
    (corpus_dir / "kitchen" / "bread.txt").unlink()
    await indexer.ingest(corpus_dir)
    assert await retriever.refresh()
    assert retriever._preloading is task and not task.done()
    gate.set()
    monkeypatch.setattr(store, "get_chunks_by_keys", read)
    await asyncio.wait([task])
    assert not task.cancelled() and retriever._rows is not None
    fresh = await Retriever.open(store)
    assert await fresh.preload()
    assert retriever._rows == fresh._rows
    response = await retriever.search("copper kettles")
    assert [r.source for r in response.results][:1] == ["new.txt"]
    await assert_all_verify(response.results, corpus_dir)


async def test_rows_catching_up_with_a_write_are_kept_but_not_used(
    store: SQLiteMetadataStore, indexer: Indexer, corpus_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """While rows in memory catch up with a refresh, searches read the store (the rows
    lack what the write added) and no second preload starts."""
    import asyncio

    retriever = await Retriever.open(store)
    await retriever.search("tea")
    await _preloaded(retriever)
    gate, entered, read = asyncio.Event(), asyncio.Event(), store.get_chunks_by_keys

    async def held(keys: list[int]) -> object:
        entered.set()
        await gate.wait()
        return await read(keys)

    (corpus_dir / "new.txt").write_text("Fresh notes about copper kettles.\n", encoding="utf-8")
    await indexer.ingest(corpus_dir)
    monkeypatch.setattr(store, "get_chunks_by_keys", held)
    refreshing = asyncio.create_task(retriever.refresh())
    await asyncio.wait_for(entered.wait(), 60)  # the catch-up is reading the new row
    assert not refreshing.done() and retriever._rows is not None
    monkeypatch.setattr(store, "get_chunks_by_keys", read)  # the search's own read
    response = await retriever.search("copper kettles")
    assert [r.source for r in response.results][:1] == ["new.txt"]
    assert retriever._preloading is None
    gate.set()
    assert await refreshing
    fresh = await Retriever.open(store)
    assert await fresh.preload()
    assert retriever._rows == fresh._rows and retriever._rows_at == retriever.generation


@pytest.mark.parametrize("preload", [0, 50_000])
async def test_stale_rows_never_served_with_or_without_preload(
    store: SQLiteMetadataStore, indexer: Indexer, corpus_dir: Path, preload: int
) -> None:
    retriever = await Retriever.open(store, RetrievalConfig(preload_max_chunks=preload))
    await retriever.search("offshore wind farms turbines")
    if preload:
        await _preloaded(retriever)
    wind = corpus_dir / "energy" / "wind.txt"
    wind.write_text("Rewritten: turbines at sea.\n", encoding="utf-8")
    await indexer.ingest(corpus_dir)
    response = await retriever.search("offshore wind farms turbines")
    assert all(r.source != "energy/wind.txt" for r in response.results)
    await assert_all_verify(response.results, corpus_dir)
    assert (retriever._rows is not None) == bool(preload)
    # Caught up, the rows in memory follow the write: the rewritten chunk, not the old.
    await retriever.refresh()
    response = await retriever.search("turbines at sea")
    assert [r.source for r in response.results][:1] == ["energy/wind.txt"]
    assert response.results[0].content.startswith("Rewritten")
    await assert_all_verify(response.results, corpus_dir)


@pytest.mark.parametrize("highlights", [None, [(0, 4)]])
@pytest.mark.parametrize("collection", [None, "docs"])
def test_unvalidated_result_equals_a_validated_one(
    highlights: list[tuple[int, int]] | None, collection: str | None
) -> None:
    from groundkit.retrieval.search import result_from_row
    from groundkit.storage.protocols import StoredChunk

    stored = StoredChunk(
        key=7,
        chunk_id="c",
        chunk_index=2,
        content="text",
        start_offset=10,
        end_offset=14,
        document_id="d",
        source="a.pdf",
        document_hash="h",
        ingested_at="2026-01-01T00:00:00+00:00",
        source_class="extracted",
        extractor="pypdf/9",
        metadata={"page_starts": [0, 12]},
    )
    deferred = None if highlights is None else Highlights.deferred(lambda: highlights)
    fast = result_from_row(stored, 2.5, deferred, collection)
    extra: dict[str, object] = {} if highlights is None else {"highlights": highlights}
    if collection is not None:
        extra["collection"] = collection
    checked = RetrievalResult(
        content="text",
        score=2.5,
        document_id="d",
        chunk_id="c",
        chunk_index=2,
        source="a.pdf",
        source_class="extracted",
        extractor="pypdf/9",
        start_offset=10,
        end_offset=14,
        metadata={"page_starts": [0, 12]},
        version=1,
        **extra,  # type: ignore[arg-type]
    )
    assert set(fast.__dict__) == set(RetrievalResult.model_fields)
    assert fast == checked
    assert fast.model_dump() == checked.model_dump()
    assert fast.model_dump_json() == checked.model_dump_json()
    assert fast.citation == checked.citation and fast.citation.page == 1
    assert fast.model_fields_set == checked.model_fields_set
    moved = fast.model_copy(update={"score": 1.0})
    assert moved.score == 1.0 and "score" in moved.model_fields_set
    assert fast.score == 2.5 and fast.model_fields_set == checked.model_fields_set
    assert fast.model_fields_set == checked.model_fields_set
    assert repr(fast) == repr(checked)
    with pytest.raises(AttributeError):
        fast.score = 1.0  # still frozen
