"""Dense and hybrid search through Collection: identity, lockstep vectors, repair."""

from __future__ import annotations

import asyncio
import os
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from groundkit import (
    Collection,
    ConfigurationError,
    EmbeddingProtocol,
    IndexIdentityError,
    RetrievalConfig,
    SentenceTransformerEmbedder,
    StorageError,
)
from groundkit.ingestion import Indexer
from groundkit.retrieval import Retriever
from groundkit.storage import SQLiteMetadataStore
from groundkit.storage.lancedb import LanceDBVectorStore
from groundkit.storage.location import metadata_path
from groundkit.utils.hashing import sha256_text
from tests.support import (
    CORPUS,
    QUERIES,
    SMALL_CHUNKS,
    ToyEmbedder,
    assert_all_verify,
    assert_highlighted,
    slow_dense_ingest,
    write_tree,
)

os.environ.setdefault("LANCEDB_LOG", "error")

HYBRID_STAGES = {"bm25_ms", "bm25_rows_ms", "candidates_ms", "hydrate_ms", "fusion_ms"}


async def open_dense(
    index_dir: Path, base: Path, embedder: EmbeddingProtocol | None = None
) -> Collection:
    return await Collection.open(
        index_dir, base_dir=base, chunking=SMALL_CHUNKS, embedder=embedder or ToyEmbedder()
    )


async def vector_chunk_ids(col: Collection) -> set[str]:
    assert col.vector_store is not None
    hits = await col.vector_store.query(np.ones(col.vector_store.dimensions), 10_000)
    return {h.chunk_id for h in hits}


async def stored_chunk_ids(col: Collection) -> set[str]:
    return {s.chunk_id async for batch in col.store.iter_chunks() for s in batch}


async def test_dense_and_hybrid_results_verify(index_dir: Path, corpus_dir: Path) -> None:
    col = await open_dense(index_dir, corpus_dir)
    try:
        report = await col.ingest(corpus_dir)
        assert report.embedded == len(CORPUS)
        assert await vector_chunk_ids(col) == await stored_chunk_ids(col)
        for mode in ("dense", "hybrid"):
            for query in QUERIES:
                response = await col.search(query, 5, mode=mode)
                assert response.metadata["stage"] == ("fusion" if mode == "hybrid" else "dense")
                stages = {"embed_ms", "vector_ms"} | (HYBRID_STAGES if mode == "hybrid" else set())
                assert set(response.metadata["timings_ms"]) == stages
                assert response.results
                assert all(r.score >= 0 for r in response.results)
                await assert_all_verify(response.results, corpus_dir)
                if mode == "dense":
                    assert all(r.highlights is None for r in response.results)
                else:
                    lexical = {r.chunk_id for r in (await col.search(query, 100)).results}
                    assert_highlighted(
                        [r for r in response.results if r.chunk_id in lexical], query, corpus_dir
                    )
                    others = [r for r in response.results if r.chunk_id not in lexical]
                    assert all(r.highlights == [] for r in others)
        again = await col.ingest(corpus_dir)
        assert again.embedded == 0 and again.unchanged == sorted(CORPUS)
    finally:
        await col.close()


async def test_replaced_and_pruned_documents_take_their_vectors(
    index_dir: Path, corpus_dir: Path
) -> None:
    col = await open_dense(index_dir, corpus_dir)
    try:
        await col.ingest(corpus_dir)
        (corpus_dir / "energy" / "wind.txt").write_text("Kites fly on windy beaches.\n", "utf-8")
        (corpus_dir / "kitchen" / "bread.txt").unlink()
        report = await col.ingest(corpus_dir)
        assert report.updated == ["energy/wind.txt"] and report.removed == ["kitchen/bread.txt"]
        assert report.embedded == 1
        assert await vector_chunk_ids(col) == await stored_chunk_ids(col)
        response = await col.search("kites beaches", 3, mode="dense")
        await assert_all_verify(response.results, corpus_dir)
        assert all(r.source != "kitchen/bread.txt" for r in response.results)
    finally:
        await col.close()


async def test_identity_mismatch_at_open_and_at_ingest(index_dir: Path, corpus_dir: Path) -> None:
    col = await open_dense(index_dir, corpus_dir)
    await col.ingest(corpus_dir)
    generation = await col.generation()
    store, vectors = col.store, col.vector_store
    assert vectors is not None
    other = ToyEmbedder(model_name="hash-other")
    with pytest.raises(IndexIdentityError, match="hash-64"):
        await Retriever.open(store, embedder=other, vector_store=vectors)
    indexer = Indexer(store, corpus_dir, embedder=other, vector_store=vectors)
    (corpus_dir / "new.txt").write_text("A brand new file.\n", encoding="utf-8")
    with pytest.raises(IndexIdentityError):
        await indexer.ingest(corpus_dir)
    assert await store.generation() == generation  # refused before any write
    await col.close()
    with pytest.raises(IndexIdentityError):
        await open_dense(index_dir, corpus_dir, ToyEmbedder(model_name="hash-other"))


async def test_a_missing_vector_side_degrades_to_bm25_and_ingest_rebuilds_it(
    index_dir: Path, corpus_dir: Path
) -> None:
    col = await open_dense(index_dir, corpus_dir)
    await col.ingest(corpus_dir)
    expected = await stored_chunk_ids(col)
    await col.close()
    shutil.rmtree(index_dir / "default.lance")
    col = await open_dense(index_dir, corpus_dir)
    try:
        bm25 = await col.search("solar", mode="bm25")
        for mode in ("dense", "hybrid"):
            response = await col.search("solar", mode=mode)
            # Said, not silent: BM25's results, with the reason in the metadata.
            assert response.mode == mode and response.metadata["stage"] == "bm25"
            assert "vector search unavailable" in response.metadata["degraded"]
            assert "0 rows" in response.metadata["degraded"]
            assert [r.chunk_id for r in response.results] == [r.chunk_id for r in bm25.results]
            await assert_all_verify(response.results, col.base_dir)
        report = await col.ingest(corpus_dir)
        assert report.unchanged and not report.added
        assert report.embedded == len(CORPUS)
        assert any("embedding them again" in note for note in report.repairs)
        assert await vector_chunk_ids(col) == expected
        dense = await col.search("solar", mode="dense")
        assert "degraded" not in dense.metadata and dense.metadata["stage"] == "dense"
    finally:
        await col.close()


async def test_vector_fallback_error_refuses_instead(index_dir: Path, corpus_dir: Path) -> None:
    col = await open_dense(index_dir, corpus_dir)
    await col.ingest(corpus_dir)
    await col.close()
    shutil.rmtree(index_dir / "default.lance")
    col = await Collection.open(
        index_dir,
        base_dir=corpus_dir,
        embedder=ToyEmbedder(),
        retrieval=RetrievalConfig(vector_fallback="error"),
    )
    try:
        with pytest.raises(StorageError, match=r"vector search unavailable.*ingest again"):
            await col.search("solar", mode="dense")
        assert (await col.search("solar", mode="bm25")).results
    finally:
        await col.close()


async def test_orphan_vectors_are_reconciled(index_dir: Path, corpus_dir: Path) -> None:
    col = await open_dense(index_dir, corpus_dir)
    try:
        await col.ingest(corpus_dir)
        assert col.vector_store is not None
        await col.vector_store.upsert_documents([("f" * 32, ["orphan-chunk"], np.ones((1, 64)))])
        assert "f" * 32 in await col.vector_store.document_ids()
        await col.ingest(corpus_dir)
        assert "f" * 32 not in await col.vector_store.document_ids()
        assert await vector_chunk_ids(col) == await stored_chunk_ids(col)
    finally:
        await col.close()


async def test_bm25_only_collection_gets_vectors_on_first_dense_ingest(
    index_dir: Path, corpus_dir: Path
) -> None:
    async with Collection.open(index_dir, base_dir=corpus_dir, chunking=SMALL_CHUNKS) as plain:
        await plain.ingest(corpus_dir)
    col = await open_dense(index_dir, corpus_dir)
    try:
        with pytest.raises(ConfigurationError, match="no vectors"):
            await col.search("solar", mode="dense")
        report = await col.ingest(corpus_dir)
        assert report.unchanged == sorted(CORPUS) and report.embedded == len(CORPUS)
        response = await col.search("solar panels", 3, mode="hybrid")
        await assert_all_verify(response.results, corpus_dir)
    finally:
        await col.close()


async def test_dense_needs_an_embedder(index_dir: Path, corpus_dir: Path) -> None:
    async with Collection.open(index_dir, base_dir=corpus_dir) as col:
        await col.ingest(corpus_dir)
        with pytest.raises(ConfigurationError, match="embedder"):
            await col.search("solar", mode="hybrid")


async def test_ingest_killed_with_sigkill_is_repaired(index_dir: Path, tmp_path: Path) -> None:
    base = tmp_path / "big"
    write_tree(
        base,
        {
            f"d{i:03}.txt": f"Document {i} talks about topic {i % 7} and item {i}.\n\n" * 3
            for i in range(200)
        },
    )
    # Killed mid-ingest: 200 files, embedding in slow batches of 8 chunks.
    await asyncio.to_thread(slow_dense_ingest, index_dir, base, 1.0, delay=0.05)
    store = await SQLiteMetadataStore.open(metadata_path(index_dir, "default"))
    try:
        assert await store.documents_missing_vectors(), "the kill must land mid-ingest"
    finally:
        await store.close()

    col = await open_dense(index_dir, base)
    try:
        report = await col.ingest(base)
        assert not report.failed
        assert await vector_chunk_ids(col) == await stored_chunk_ids(col)
        assert len(await stored_chunk_ids(col)) == 200 * 3
        for mode in ("bm25", "dense", "hybrid"):
            response = await col.search("topic 3 item", 20, mode=mode)
            assert response.results
            await assert_all_verify(response.results, base)
    finally:
        await col.close()


@pytest.fixture(scope="module")
def minilm() -> SentenceTransformerEmbedder:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    return SentenceTransformerEmbedder("all-MiniLM-L6-v2")


async def test_real_minilm_finds_a_paraphrase_bm25_misses(
    index_dir: Path, tmp_path: Path, minilm: SentenceTransformerEmbedder
) -> None:
    base = tmp_path / "docs"
    write_tree(
        base,
        {
            "cats.md": "Cats are small carnivorous mammals that purr when content.\n",
            "market.txt": "The stock market fell today as investors feared inflation.\n",
            "plants.txt": "Photosynthesis turns sunlight into chemical energy in leaves.\n",
        },
    )
    col = await open_dense(index_dir, base, minilm)
    try:
        await col.ingest(base)
        assert (await col.search("feline pets", mode="bm25")).results == []
        dense = await col.search("feline pets", 3, mode="dense")
        assert dense.results[0].source == "cats.md"
        hybrid = await col.search("feline pets", 3, mode="hybrid")
        assert hybrid.results[0].source == "cats.md"
        await assert_all_verify(dense.results + hybrid.results, base)
    finally:
        await col.close()


async def test_vector_table_lives_beside_the_sqlite_file(index_dir: Path, corpus_dir: Path) -> None:
    col = await open_dense(index_dir, corpus_dir)
    try:
        await col.ingest(corpus_dir)
        assert isinstance(col.vector_store, LanceDBVectorStore)
        assert (index_dir / "default.lance").is_dir()
        assert (index_dir / "default.sqlite3").is_file()
    finally:
        await col.close()


class RecordingEmbedder(ToyEmbedder):
    """Remembers every text it was asked to embed."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[str] = []

    async def embed_documents(self, texts: Sequence[str]) -> Any:
        self.seen.extend(texts)
        return await super().embed_documents(texts)


async def test_only_new_or_changed_chunks_are_embedded(index_dir: Path, tmp_path: Path) -> None:
    base = tmp_path / "docs"
    paragraphs = [f"Paragraph {i} is about subject {i} in some detail." for i in range(6)]
    write_tree(base, {"long.txt": "\n\n".join(paragraphs) + "\n", "other.txt": "Unrelated.\n"})
    embedder = RecordingEmbedder()
    col = await open_dense(index_dir, base, embedder)
    try:
        first = await col.ingest(base)
        stored_before = {s.content for b in [x async for x in col.store.iter_chunks()] for s in b}
        assert first.chunks_reused == 0
        assert first.chunks_embedded == len(embedder.seen) == len(set(embedder.seen))
        assert col.vector_store is not None
        before = await col.vector_store.vectors_by_content([sha256_text(t) for t in stored_before])
        embedder.seen.clear()
        # Change the last paragraph only: every earlier chunk keeps its text.
        edited = [*paragraphs[:-1], "The final paragraph now says something new."]
        (base / "long.txt").write_text("\n\n".join(edited) + "\n", encoding="utf-8")
        report = await col.ingest(base)
        assert report.updated == ["long.txt"] and report.embedded == 1
        stored = [s async for b in col.store.iter_chunks() for s in b if s.source == "long.txt"]
        new_texts = {s.content for s in stored} - stored_before
        assert new_texts and set(embedder.seen) == new_texts
        assert report.chunks_embedded == len(new_texts)
        assert report.chunks_reused == len(stored) - len(new_texts) > 0
        after = await col.vector_store.vectors_by_content([sha256_text(s.content) for s in stored])
        for s in stored:
            if s.content in stored_before:  # reused, not recomputed
                assert np.array_equal(after[sha256_text(s.content)], before[sha256_text(s.content)])
        assert await vector_chunk_ids(col) == await stored_chunk_ids(col)
        response = await col.search("subject 2 detail", 3, mode="dense")
        assert response.results
        await assert_all_verify(response.results, base)
    finally:
        await col.close()


async def test_renamed_file_reuses_its_vectors(index_dir: Path, tmp_path: Path) -> None:
    base = tmp_path / "docs"
    write_tree(base, {"a.txt": "Tides follow the moon.\n\nSpring tides are the strongest.\n"})
    embedder = RecordingEmbedder()
    col = await open_dense(index_dir, base, embedder)
    try:
        await col.ingest(base)
        embedder.seen.clear()
        (base / "a.txt").rename(base / "b.txt")
        report = await col.ingest(base)
        assert report.added == ["b.txt"] and report.removed == ["a.txt"]
        assert embedder.seen == [] and report.chunks_embedded == 0 and report.chunks_reused > 0
        assert await vector_chunk_ids(col) == await stored_chunk_ids(col)
    finally:
        await col.close()


async def test_a_fields_change_reuses_every_vector(index_dir: Path, tmp_path: Path) -> None:
    """A document re-stored for its fields alone takes its vectors back by chunk text."""
    base = tmp_path / "docs"
    write_tree(base, {"a.md": "---\nteam: a\n---\nTides follow the moon.\n\nNeap tides.\n"})
    embedder = RecordingEmbedder()
    async with Collection.open(index_dir, base_dir=base, embedder=embedder) as col:
        await col.ingest(base)
        embedder.seen.clear()
        report = await col.ingest(base, metadata={"team": "b"})
        assert (report.updated, embedder.seen, report.chunks_embedded) == (["a.md"], [], 0)
        assert report.chunks_reused > 0
        assert await vector_chunk_ids(col) == await stored_chunk_ids(col)
        [hit, *_] = (await col.search("moon tides", 3, mode="dense")).results
        assert hit.fields == {"team": "b"}


async def test_bulk_ingest_writes_in_groups_and_embeds_from_memory(
    index_dir: Path, tmp_path: Path
) -> None:
    base = tmp_path / "many"
    write_tree(base, {f"n{i:03}.txt": f"Note {i} on theme {i % 5}.\n" for i in range(120)})
    col = await open_dense(index_dir, base)
    reads = 0
    real = col.store.get_chunks_for_documents

    async def counting(document_ids: Any) -> Any:
        nonlocal reads
        reads += 1
        return await real(document_ids)

    col.store.get_chunks_for_documents = counting  # type: ignore[method-assign]
    try:
        report = await col.ingest(base)
        assert len(report.added) == 120 and report.embedded == 120
        assert report.generation < 120  # grouped transactions, not one per file
        assert reads == 0  # vectors came from the chunks in memory
        assert await col.store.documents_missing_vectors() == []
        assert await vector_chunk_ids(col) == await stored_chunk_ids(col)
    finally:
        await col.close()


async def test_embedder_for_builds_the_recorded_embedder_once(
    index_dir: Path, corpus_dir: Path
) -> None:
    asked: list[str] = []

    def factory(manifest: Any) -> ToyEmbedder:
        asked.append(manifest.model_name)
        return ToyEmbedder()

    # Unbound: the factory is never called and the collection opens without vectors.
    async with Collection.open(
        index_dir, base_dir=corpus_dir, embedder_for=factory, chunking=SMALL_CHUNKS
    ) as col:
        assert col.embedder is None and col.vector_store is None
        await col.ingest(corpus_dir)
    assert asked == []
    col = await open_dense(index_dir, corpus_dir)
    await col.ingest(corpus_dir)
    await col.close()
    # Bound: built from the manifest inside the open, and dense search works with it.
    async with Collection.open(index_dir, embedder_for=factory, create=False) as col:
        assert isinstance(col.embedder, ToyEmbedder) and col.vector_store is not None
        response = await col.search(QUERIES[0], 3, mode="dense")
        assert response.results
        await assert_all_verify(response.results, col.base_dir)
    assert asked == ["hash-64"]


async def test_embedder_for_that_builds_another_model_is_refused(
    index_dir: Path, corpus_dir: Path
) -> None:
    col = await open_dense(index_dir, corpus_dir)
    await col.ingest(corpus_dir)
    await col.close()
    with pytest.raises(IndexIdentityError, match="hash-64"):
        await Collection.open(index_dir, embedder_for=lambda m: ToyEmbedder(model_name="other"))
