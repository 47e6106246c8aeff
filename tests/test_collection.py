"""Acceptance tests through the public Collection API on real files."""

from __future__ import annotations

import functools
import os
import random
import shutil
import threading
from pathlib import Path
from typing import Any

import pytest

from groundkit import (
    AnalyzerConfig,
    Citation,
    Collection,
    ConfigurationError,
    IndexIdentityError,
    IngestConfig,
    IngestionError,
    RetrievalError,
    StorageError,
    check_citation,
    resolve_citation,
)
from groundkit.config import MAX_TOP_K
from groundkit.storage import StoreLocation
from groundkit.testing.conformance.helpers import document_sources
from tests.support import CORPUS, QUERIES, SMALL_CHUNKS, assert_all_verify, write_tree


async def test_every_result_verifies(ingested: Collection) -> None:
    checked = 0
    for query in QUERIES:
        response = await ingested.search(query, 20)
        assert response.results, query
        checked += await assert_all_verify(response.results, ingested.base_dir)
        for result in response.results:
            fetched = await ingested.fetch_chunk(result.chunk_id)
            assert fetched.verification == "verified"
            assert fetched.content == result.content
            assert fetched.citation == result.citation
    assert checked > len(QUERIES)
    report = await ingested.verify_all()
    assert report.ok
    assert report.verified == await ingested.store.chunk_count()
    assert report.problems == []


async def _chunks_of(col: Collection, source: str) -> list[str]:
    return [
        s.chunk.chunk_id
        async for batch in col.store.iter_chunks()
        for s in batch
        if s.document.source == source
    ]


async def test_edited_source_drifts(ingested: Collection, corpus_dir: Path) -> None:
    ids = await _chunks_of(ingested, "energy/solar.md")
    path = corpus_dir / "energy" / "solar.md"
    path.write_text(path.read_text("utf-8").replace("Solar", "Lunar"), "utf-8")
    verdicts = [(await ingested.fetch_chunk(i)).verification for i in ids]
    assert "drifted" in verdicts
    assert set(verdicts) <= {"drifted", "verified"}
    report = await ingested.verify_all()
    assert not report.ok
    assert report.drifted == verdicts.count("drifted")
    assert report.unresolvable == 0
    assert {p.citation.source for p in report.problems} == {"energy/solar.md"}


async def test_inserted_prefix_moves_every_chunk(ingested: Collection, corpus_dir: Path) -> None:
    ids = await _chunks_of(ingested, "kitchen/tea.rst")
    path = corpus_dir / "kitchen" / "tea.rst"
    path.write_text("Preface. " + path.read_text("utf-8"), "utf-8")
    for chunk_id in ids:
        result = await ingested.fetch_chunk(chunk_id)
        # The text is intact, nine characters further on: moved, not verified.
        assert result.verification == "moved" and not result.ok
        assert "kitchen/tea.rst" in result.detail
        assert result.current_start_offset == result.citation.start_offset + len("Preface. ")
    report = await ingested.verify_all()
    assert report.moved == len(ids) and not report.ok


async def test_truncated_source_drifts(ingested: Collection, corpus_dir: Path) -> None:
    ids = await _chunks_of(ingested, "energy/wind.txt")
    assert len(ids) > 1
    (corpus_dir / "energy" / "wind.txt").write_text("Wind", "utf-8")
    assert {(await ingested.fetch_chunk(i)).verification for i in ids} == {"drifted"}
    report = await ingested.verify_all()
    assert report.drifted == len(ids)


async def test_deleted_source_unresolvable(ingested: Collection, corpus_dir: Path) -> None:
    ids = await _chunks_of(ingested, "notes/东京.txt")
    (corpus_dir / "notes" / "东京.txt").unlink()
    for chunk_id in ids:
        assert (await ingested.fetch_chunk(chunk_id)).verification == "unresolvable"
    report = await ingested.verify_all()
    assert (report.unresolvable, report.drifted) == (len(ids), 0)
    assert report.verified == await ingested.store.chunk_count() - len(ids)


async def test_unknown_chunk_id(ingested: Collection) -> None:
    with pytest.raises(RetrievalError) as info:
        await ingested.fetch_chunk("no-such-chunk")
    assert info.value.verdict == "unresolvable"


@pytest.mark.parametrize("outside", ["../outside.txt", "ABSOLUTE"])
async def test_citation_outside_base_unresolvable(
    ingested: Collection, tmp_path: Path, outside: str
) -> None:
    target = tmp_path / "outside.txt"
    target.write_text("secret text outside the corpus", "utf-8")
    source = str(target) if outside == "ABSOLUTE" else outside
    citation = Citation(
        document_id="d",
        chunk_id="c",
        source=source,
        source_class="text",
        extractor=None,
        start_offset=0,
        end_offset=6,
    )
    with pytest.raises(RetrievalError) as info:
        await resolve_citation(citation, ingested.base_dir)
    assert info.value.verdict == "unresolvable"
    result = await check_citation(citation, "secret", ingested.base_dir)
    assert result.verification == "unresolvable" and "refused" in result.detail


async def test_unchanged_reingest(ingested: Collection, corpus_dir: Path) -> None:
    generation = await ingested.generation()
    report = await ingested.ingest(corpus_dir)
    assert await ingested.generation() == generation
    assert report.generation == generation
    assert report.unchanged == sorted(CORPUS)
    assert not report.changed


async def test_deleted_file_pruned_from_search(ingested: Collection, corpus_dir: Path) -> None:
    before = await ingested.search("sourdough bread")
    assert before.results[0].source == "kitchen/bread.txt"
    count = await ingested.store.chunk_count()
    (corpus_dir / "kitchen" / "bread.txt").unlink()
    report = await ingested.ingest(corpus_dir)
    assert report.removed == ["kitchen/bread.txt"]
    assert await ingested.store.chunk_count() < count
    after = await ingested.search("sourdough bread")
    assert all(r.source != "kitchen/bread.txt" for r in after.results)
    assert after.metadata["stale_dropped"] == 0


async def test_subfolder_ingest_leaves_siblings(ingested: Collection, corpus_dir: Path) -> None:
    shutil.rmtree(corpus_dir / "kitchen")
    report = await ingested.ingest(corpus_dir / "energy")
    assert report.removed == []
    assert "kitchen/tea.rst" in await document_sources(ingested.store)
    assert (await ingested.search("green tea")).results[0].source == "kitchen/tea.rst"


async def test_bad_files_do_not_stop_ingest(tmp_path: Path) -> None:
    base = tmp_path / "base"
    write_tree(
        base,
        {
            "bad.txt": b"\xc3\x28 invalid",
            "empty.md": b"",
            "huge.txt": "giant " * 50,
            "ok.txt": "a perfectly fine heron document",
        },
    )
    opener = Collection.open(
        tmp_path / "idx", base_dir=base, ingest=IngestConfig(max_file_bytes=100)
    )
    async with opener as col:
        report = await col.ingest(base)
        assert report.added == ["ok.txt"]
        assert [(f.source, bool(f.reason)) for f in report.failed] == [
            ("bad.txt", True),
            ("empty.md", True),
            ("huge.txt", True),
        ]
        assert (await col.search("heron")).results[0].source == "ok.txt"


async def test_moved_corpus_and_index_still_verify(tmp_path: Path) -> None:
    project = tmp_path / "project"
    corpus = project / "data" / "corpus"
    write_tree(corpus, dict(CORPUS))
    async with Collection.open(project / ".index", base_dir=corpus, chunking=SMALL_CHUNKS) as col:
        await col.ingest(corpus)
        expected = {q: (await col.search(q)).results for q in QUERIES}

    moved = tmp_path / "elsewhere" / "renamed"
    moved.parent.mkdir()
    shutil.move(project, moved)
    assert not project.exists()

    async with Collection.open(moved / ".index") as col:
        assert col.base_dir == Path(os.path.realpath(moved / "data" / "corpus"))
        for query, results in expected.items():
            again = (await col.search(query)).results
            assert [r.citation for r in again] == [r.citation for r in results]
            assert await assert_all_verify(again, col.base_dir) == len(results)
        assert (await col.verify_all()).ok


async def test_long_lived_collection_sees_its_writes(
    ingested: Collection, corpus_dir: Path
) -> None:
    assert (await ingested.search("heron")).results == []
    write_tree(corpus_dir, {"birds/heron.md": "The grey heron waits motionless in shallow water."})
    await ingested.ingest(corpus_dir)
    found = (await ingested.search("heron")).results
    assert [r.source for r in found] == ["birds/heron.md"]
    await assert_all_verify(found, ingested.base_dir)
    (corpus_dir / "birds" / "heron.md").write_text("Egrets are smaller white herons.", "utf-8")
    await ingested.ingest(corpus_dir / "birds")
    updated = (await ingested.search("egret")).results
    assert updated and updated[0].source == "birds/heron.md"
    await assert_all_verify(updated, ingested.base_dir)


async def test_open_by_await_and_async_with(index_dir: Path, corpus_dir: Path) -> None:
    col = await Collection.open(index_dir, "mine", base_dir=corpus_dir)
    try:
        await col.ingest(corpus_dir / "energy")
        assert col.name == "mine"
    finally:
        await col.close()
    async with Collection.open(index_dir, "mine") as again:
        assert again.base_dir == Path(os.path.realpath(corpus_dir))
        assert (await again.search("solar")).results
    assert (index_dir / "mine.sqlite3").exists()


async def test_new_collection_defaults_base_to_cwd(
    tmp_path: Path, corpus_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(corpus_dir)
    async with Collection.open(tmp_path / "idx") as col:
        assert col.base_dir == Path(os.path.realpath(corpus_dir))
        report = await col.ingest("kitchen")
        assert report.added == ["kitchen/bread.txt", "kitchen/tea.rst"]


@pytest.mark.parametrize("query", ["", "   \n"])
async def test_empty_query_refused(ingested: Collection, query: str) -> None:
    with pytest.raises(RetrievalError):
        await ingested.search(query)


@pytest.mark.parametrize("top_k", [0, MAX_TOP_K + 1, True, "3"])
async def test_bad_top_k_refused(ingested: Collection, top_k: object) -> None:
    with pytest.raises(RetrievalError, match="top_k"):
        await ingested.search("solar", top_k)  # type: ignore[arg-type]


async def test_unknown_mode_refused(ingested: Collection) -> None:
    with pytest.raises(RetrievalError, match="mode"):
        await ingested.search("solar", mode="fuzzy")  # type: ignore[arg-type]


@pytest.mark.parametrize("mode", ["dense", "hybrid"])
async def test_dense_modes_need_configuration(ingested: Collection, mode: str) -> None:
    with pytest.raises(ConfigurationError):
        await ingested.search("solar", mode=mode)  # type: ignore[arg-type]


async def test_query_without_known_terms(ingested: Collection) -> None:
    response = await ingested.search("xylophone quasar")
    assert response.results == []
    assert response.total_results == 0


async def test_same_corpus_same_ranking(tmp_path: Path, corpus_dir: Path) -> None:
    rankings = []
    for name in ("first", "second"):
        async with Collection.open(
            tmp_path / f"index-{name}", base_dir=corpus_dir, chunking=SMALL_CHUNKS
        ) as col:
            await col.ingest(corpus_dir)
            rankings.append(
                [
                    [
                        (r.chunk_id, r.source, r.start_offset, r.end_offset, r.score)
                        for r in (await col.search(q, 50)).results
                    ]
                    for q in [*QUERIES, "the water and the wind"]
                ]
            )
    assert rankings[0] == rankings[1]


async def test_ingest_outside_base_refused(ingested: Collection, tmp_path: Path) -> None:
    write_tree(tmp_path, {"outside/x.txt": "outside"})
    with pytest.raises(IngestionError):
        await ingested.ingest(tmp_path / "outside")
    with pytest.raises(IngestionError):
        await ingested.ingest(ingested.base_dir / ".." / "outside")


async def test_other_analyzer_settings_refused(index_dir: Path, ingested: Collection) -> None:
    async with Collection.open(index_dir, analyzer=AnalyzerConfig(stopwords=False)) as other:
        with pytest.raises(IndexIdentityError):
            await other.search("solar")
        with pytest.raises(IndexIdentityError):
            await other.ingest(other.base_dir)


async def test_a_collection_opened_without_settings_keeps_its_analyzer(tmp_path: Path) -> None:
    """Opened without ``analyzer=``, a collection made with other settings is analysed
    as it is bound to: it was refused (IndexIdentityError), so ``grk``, the MCP server
    and ``search_collections`` beside another collection could not search it."""
    from groundkit import search_collections

    base = tmp_path / "corpus"
    write_tree(base, {"a.md": "The kettles are on.\n", "b.md": "The kettle.\n"})
    settings = AnalyzerConfig(stem_language=None, stopwords=False)
    async with Collection.open(tmp_path / "idx", "plain", base_dir=base, analyzer=settings) as col:
        await col.ingest(base)
        made = [(r.chunk_id, r.score) for r in (await col.search("the kettle", 5)).results]
    assert len(made) == 2  # "the" is a term here
    async with Collection.open(tmp_path / "idx", "stemmed", base_dir=base) as other:
        await other.ingest(base)
    async with (
        Collection.open(tmp_path / "idx", "plain") as plain,
        Collection.open(tmp_path / "idx", "stemmed") as stemmed,
    ):
        again = [(r.chunk_id, r.score) for r in (await plain.search("the kettle", 5)).results]
        assert again == made
        assert (await plain.ingest(base)).unchanged == ["a.md", "b.md"]
        both = await search_collections([plain, stemmed], "kettles", 5)
        assert both.failures == []
        assert sorted((r.collection, r.source) for r in both.results) == [
            ("plain", "a.md"),
            ("stemmed", "a.md"),
            ("stemmed", "b.md"),
        ]
        with pytest.raises(IndexIdentityError):
            async with Collection.open(tmp_path / "idx", "plain", analyzer=AnalyzerConfig()) as c:
                await c.search("kettle")


async def test_a_collection_keeps_the_analyzer_version_it_was_built_with(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A collection made by an earlier analyzer version opens, searches and grows with
    that version's terms; a new collection gets the current one."""
    import groundkit.collection as collection_module
    from groundkit.lexical import Analyzer

    base = tmp_path / "base"
    write_tree(base, {"hindi.txt": "हिन्दी भारत की एक भाषा है", "other.txt": "हाथी नदी में दौड़ा"})
    # An earlier groundkit: version 1 cut words at their vowel signs.
    monkeypatch.setattr(collection_module, "Analyzer", functools.partial(Analyzer, version=1))
    async with Collection.open(tmp_path / "old", base_dir=base) as col:
        await col.ingest(base)
    monkeypatch.undo()
    async with Collection.open(tmp_path / "old", base_dir=base) as col:
        # Letters split off the query match the other text too, as they always did.
        assert {r.source for r in (await col.search("हिन्दी")).results} == {
            "hindi.txt",
            "other.txt",
        }
        write_tree(base, {"more.txt": "हिन्दी"})
        assert (await col.ingest(base)).added == ["more.txt"]
        assert "more.txt" in {r.source for r in (await col.search("हिन्दी")).results}
        assert (await col.store.get_analyzer() or "").startswith("groundkit-analyzer/1;")
    async with Collection.open(tmp_path / "new", base_dir=base) as col:
        await col.ingest(base)
        assert (await col.store.get_analyzer() or "").startswith("groundkit-analyzer/2;")
        assert {r.source for r in (await col.search("हिन्दी")).results} == {
            "hindi.txt",
            "more.txt",
        }


async def test_bad_collection_name(index_dir: Path) -> None:
    with pytest.raises(ConfigurationError):
        await Collection.open(index_dir, "../escape")


def _worker_threads() -> set[threading.Thread]:
    return {t for t in threading.enumerate() if "_connection_worker_thread" in t.name}


async def test_random_documents_round_trip(tmp_path: Path) -> None:
    # Seeded noise: mixed scripts, CRLF, tabs, emoji, odd spacing; every hit must verify.
    rng = random.Random(1234)
    alphabet = [
        "alpha",
        "Beta",
        "gamma.",
        "δέλτα",
        "東京",
        "大学。",
        "😀",
        "\r\n",
        "\n\n",
        "\t",
        "  ",
        "x!",
    ]
    base = tmp_path / "base"
    texts = {f"r/{i}.txt": " ".join(rng.choices(alphabet, k=rng.randint(1, 400))) for i in range(8)}
    write_tree(base, texts)
    async with Collection.open(tmp_path / "idx", base_dir=base, chunking=SMALL_CHUNKS) as col:
        report = await col.ingest(base)
        assert len(report.added) + len(report.failed) == len(texts)
        for query in ("alpha", "beta gamma", "δέλτα", "東京", "大学 alpha"):
            await assert_all_verify((await col.search(query, 200)).results, col.base_dir)
        assert (await col.verify_all()).ok


async def test_bad_analyzer_settings_leak_nothing(index_dir: Path, corpus_dir: Path) -> None:
    before = _worker_threads()
    with pytest.raises(ConfigurationError, match="klingon"):
        await Collection.open(
            index_dir, base_dir=corpus_dir, analyzer=AnalyzerConfig(stem_language="klingon")
        )
    # The store opened for the attempt must have been closed again.
    assert _worker_threads() - before == set()


async def test_open_without_create_refuses_a_missing_collection(tmp_path: Path) -> None:
    index = tmp_path / "idx"
    with pytest.raises(StorageError, match="no collection 'nothing'"):
        await Collection.open(index, "nothing", create=False)
    assert not index.exists() or not any(index.iterdir())
    location = StoreLocation.resolve("nothing", index_dir=index)
    assert not await location.exists()
    with pytest.raises(StorageError, match="ingest"):
        await Collection.open(location=location, create=False)


async def test_location_lists_and_opens_collections(tmp_path: Path) -> None:
    base = tmp_path / "docs"
    base.mkdir()
    (base / "a.txt").write_text("alpha beta\n", encoding="utf-8")
    index = tmp_path / "idx"
    for name in ("zeta", "alpha"):
        async with Collection.open(index, name, base_dir=base) as col:
            await col.ingest(base)
    (index / "not a collection.sqlite3").write_text("", encoding="utf-8")
    location = StoreLocation.resolve("alpha", index_dir=index)
    assert await location.list_collections() == ["alpha", "zeta"]
    assert await location.exists() and await location.with_name("zeta").exists()
    stores = await location.open(create=False)
    try:
        assert await stores.metadata.chunk_count() == 1
        assert stores.vectors is None
    finally:
        await stores.close()
    async with Collection.open(location=location.with_name("zeta"), create=False) as col:
        assert col.name == "zeta"
        assert (await col.search("alpha", 1)).results[0].source == "a.txt"


def test_every_open_keyword_is_explained_in_its_docstring() -> None:
    import inspect

    doc = inspect.getdoc(Collection.open) or ""
    keywords = [p for p in inspect.signature(Collection.open).parameters if p != "cls"]
    assert len(keywords) >= 19
    assert [k for k in keywords if f"``{k}``" not in doc and f"``{k}=" not in doc] == []


@pytest.mark.parametrize(
    "doubled",
    [
        {"index_dir": "elsewhere"},
        {"name": "other"},
        {"metadata_url": "postgresql://localhost/db"},
        {"storage_uri": "s3://bucket/prefix"},
        {"storage_options": {"region": "x"}},
    ],
)
async def test_location_beside_the_arguments_it_replaces_is_refused(
    tmp_path: Path, doubled: dict[str, Any]
) -> None:
    from groundkit import InvalidSettingError

    location = StoreLocation.resolve("notes", index_dir=tmp_path / "idx")
    with pytest.raises(InvalidSettingError, match=f"leave out {next(iter(doubled))}"):
        await Collection.open(location=location, **doubled)
    assert not (tmp_path / "idx").exists()
    assert not (tmp_path / "elsewhere").exists()


@pytest.mark.parametrize("name", ["clearance", "embedder", "reranker", "rewriter"])
async def test_what_open_fixes_cannot_be_assigned_after(tmp_path: Path, name: str) -> None:
    async with Collection.open(tmp_path / "idx", base_dir=tmp_path, clearance="internal") as col:
        with pytest.raises(ConfigurationError, match=f"open it again with .*{name}="):
            setattr(col, name, None)
        assert col.clearance == "internal"
