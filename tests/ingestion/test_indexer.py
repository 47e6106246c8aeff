"""Indexer: add, update, skip unchanged, prune under the root, report failures."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from groundkit import (
    AnalyzerConfig,
    ChunkingConfig,
    ConfigurationError,
    IndexIdentityError,
    IngestConfig,
    IngestionError,
    IngestProgress,
)
from groundkit.contracts import Document
from groundkit.ingestion import Indexer, LoaderProtocol, LocalExecutor
from groundkit.lexical import Analyzer
from groundkit.storage import SQLiteMetadataStore
from groundkit.storage.names import document_id_for
from groundkit.testing.conformance.helpers import document_by_source, document_sources
from tests.support import CORPUS, SMALL_CHUNKS, write_tree


@pytest.fixture
def indexer(store: SQLiteMetadataStore, corpus_dir: Path) -> Indexer:
    return Indexer(store, corpus_dir, chunking=SMALL_CHUNKS)


async def test_first_ingest_adds_everything(
    indexer: Indexer, store: SQLiteMetadataStore, corpus_dir: Path
) -> None:
    report = await indexer.ingest(corpus_dir)
    assert report.added == sorted(CORPUS)
    assert (report.updated, report.unchanged, report.removed, report.failed) == ([], [], [], [])
    assert report.changed
    # Documents are written in groups, one transaction (and generation) per group.
    assert 1 <= report.generation == await store.generation() <= len(CORPUS)
    assert await document_sources(store) == sorted(CORPUS)
    assert await store.get_analyzer() == Analyzer().identity
    for source in CORPUS:
        record = await document_by_source(store, source)
        assert record is not None
        assert record.document_id == document_id_for(source)
        assert record.chunk_count >= 1
    # Every stored chunk is an exact slice of its file as it is on disk.
    async for batch in store.iter_chunks():
        for stored in batch:
            text = CORPUS[stored.document.source]
            assert text[stored.chunk.start_offset : stored.chunk.end_offset] == stored.chunk.content


async def test_unchanged_reingest_writes_nothing(
    indexer: Indexer, store: SQLiteMetadataStore, corpus_dir: Path
) -> None:
    await indexer.ingest(corpus_dir)
    generation = await store.generation()
    report = await indexer.ingest(corpus_dir)
    assert report.unchanged == sorted(CORPUS)
    assert (report.added, report.updated, report.removed) == ([], [], [])
    assert not report.changed
    assert report.generation == generation == await store.generation()


async def test_changed_file_is_updated(
    indexer: Indexer, store: SQLiteMetadataStore, corpus_dir: Path
) -> None:
    await indexer.ingest(corpus_dir)
    generation = await store.generation()
    old = await document_by_source(store, "kitchen/tea.rst")
    (corpus_dir / "kitchen" / "tea.rst").write_text("Oolong tea is partly oxidised.\n", "utf-8")
    report = await indexer.ingest(corpus_dir)
    assert report.updated == ["kitchen/tea.rst"]
    assert len(report.unchanged) == len(CORPUS) - 1
    assert await store.generation() == generation + 1
    new = await document_by_source(store, "kitchen/tea.rst")
    assert old is not None and new is not None
    assert new.document_id == old.document_id
    assert new.content_hash != old.content_hash
    assert new.chunk_count == 1


async def test_deleted_file_is_pruned(
    indexer: Indexer, store: SQLiteMetadataStore, corpus_dir: Path
) -> None:
    await indexer.ingest(corpus_dir)
    chunks_before = await store.chunk_count()
    bread = await document_by_source(store, "kitchen/bread.txt")
    assert bread is not None
    (corpus_dir / "kitchen" / "bread.txt").unlink()
    report = await indexer.ingest(corpus_dir)
    assert report.removed == ["kitchen/bread.txt"]
    assert await document_by_source(store, "kitchen/bread.txt") is None
    assert await store.chunk_count() == chunks_before - bread.chunk_count


def _unlistable(monkeypatch: pytest.MonkeyPatch, folder: Path) -> None:
    """Listing ``folder`` is refused as the OS refuses it without permission (which root,
    running the tests, would ignore)."""
    refused = os.path.realpath(folder)
    listing = os.scandir

    def scandir(path: Any = ".") -> Any:
        if os.fspath(path) == refused:
            raise PermissionError(13, "Permission denied", refused)
        return listing(path)

    monkeypatch.setattr(os, "scandir", scandir)


async def test_a_folder_that_cannot_be_listed_fails_alone_and_keeps_its_documents(
    store: SQLiteMetadataStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    base = tmp_path / "base"
    write_tree(
        base,
        {"open/a.md": "alpha", "locked/b.md": "bravo", "locked/deep/c.md": "charlie"},
    )
    indexer = Indexer(store, base)
    await indexer.ingest(base)
    write_tree(base, {"open/new.md": "delta"})
    _unlistable(monkeypatch, base / "locked")
    report = await indexer.ingest(base)
    assert report.added == ["open/new.md"]
    assert [(f.source, f.reason) for f in report.failed] == [
        (
            "locked",
            "cannot list this folder (Permission denied); the documents stored from under "
            "it are kept as they were",
        )
    ]
    assert report.removed == []
    assert await document_sources(store) == [
        "locked/b.md",
        "locked/deep/c.md",
        "open/a.md",
        "open/new.md",
    ]
    monkeypatch.undo()
    # Listed again, the folder's files are unchanged and one deleted meanwhile is pruned.
    (base / "locked" / "deep" / "c.md").unlink()
    again = await indexer.ingest(base)
    assert again.failed == [] and again.removed == ["locked/deep/c.md"]


async def test_the_root_that_cannot_be_listed_fails_the_ingest(
    store: SQLiteMetadataStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    base = tmp_path / "base"
    write_tree(base, {"a.md": "alpha"})
    indexer = Indexer(store, base)
    await indexer.ingest(base)
    _unlistable(monkeypatch, base)
    with pytest.raises(IngestionError, match="cannot scan"):
        await indexer.ingest(base)
    monkeypatch.undo()
    assert await document_sources(store) == ["a.md"]


async def test_prune_stays_under_the_ingested_root(
    store: SQLiteMetadataStore, tmp_path: Path
) -> None:
    base = tmp_path / "base"
    write_tree(
        base,
        {
            "a/one.txt": "first file",
            "ab/two.txt": "second file",
            "b/three.txt": "third",
            "top.txt": "t",
        },
    )
    indexer = Indexer(store, base)
    await indexer.ingest(base)
    for rel in ("ab/two.txt", "b/three.txt", "top.txt"):
        (base / rel).unlink()
    report = await indexer.ingest(base / "a")
    # "ab/" shares a prefix with "a" but is a sibling: nothing outside a/ is touched.
    assert report.removed == []
    assert report.unchanged == ["a/one.txt"]
    assert await document_sources(store) == [
        "a/one.txt",
        "ab/two.txt",
        "b/three.txt",
        "top.txt",
    ]
    report = await indexer.ingest(base)
    assert report.removed == ["ab/two.txt", "b/three.txt", "top.txt"]


async def test_single_file_ingest_prunes_nothing(
    indexer: Indexer, store: SQLiteMetadataStore, corpus_dir: Path
) -> None:
    await indexer.ingest(corpus_dir)
    (corpus_dir / "energy" / "wind.txt").unlink()
    report = await indexer.ingest(corpus_dir / "energy" / "solar.md")
    assert report.unchanged == ["energy/solar.md"]
    assert report.removed == []
    assert "energy/wind.txt" in await document_sources(store)


async def test_bad_files_are_reported_and_do_not_stop_the_rest(
    store: SQLiteMetadataStore, tmp_path: Path
) -> None:
    base = tmp_path / "base"
    write_tree(
        base,
        {
            "a_good.txt": "good text here",
            "b_latin1.txt": "caf\xe9".encode("latin-1"),
            "c_empty.txt": b"",
            "d_blank.md": b"  \n\n\t ",
            "e_big.txt": "word " * 100,
            "f_good.md": "more good text",
        },
    )
    indexer = Indexer(store, base, ingest=IngestConfig(max_file_bytes=200))
    report = await indexer.ingest(base)
    assert report.added == ["a_good.txt", "f_good.md"]
    reasons = {f.source: f.reason for f in report.failed}
    assert list(reasons) == ["b_latin1.txt", "c_empty.txt", "d_blank.md", "e_big.txt"]
    assert "UTF-8" in reasons["b_latin1.txt"]
    assert "empty" in reasons["c_empty.txt"]
    assert "empty" in reasons["d_blank.md"]
    assert "exceeds" in reasons["e_big.txt"]
    assert await document_sources(store) == ["a_good.txt", "f_good.md"]


async def test_file_that_breaks_keeps_previous_version(
    indexer: Indexer, store: SQLiteMetadataStore, corpus_dir: Path
) -> None:
    await indexer.ingest(corpus_dir)
    before = await document_by_source(store, "energy/wind.txt")
    (corpus_dir / "energy" / "wind.txt").write_bytes(b"\xff\xfe broken")
    report = await indexer.ingest(corpus_dir)
    assert [f.source for f in report.failed] == ["energy/wind.txt"]
    assert report.removed == []
    assert await document_by_source(store, "energy/wind.txt") == before


async def test_skipped_and_progress(store: SQLiteMetadataStore, tmp_path: Path) -> None:
    base = tmp_path / "base"
    write_tree(base, {"a.txt": "a text", "b.md": "b text", "c.csv": b"1,2", "d.png": b"\x89PNG"})
    calls: list[IngestProgress] = []
    report = await Indexer(store, base).ingest(base, progress=calls.append)
    assert report.skipped == 2
    read = [(p.done, p.total) for p in calls if p.stage == "read"]
    assert read == [(1, 2), (2, 2)]
    assert [(p.stage, p.done, p.total) for p in calls if p.stage == "discover"] == [
        ("discover", 2, 2)
    ]
    # Each stage ends finished, counts never go down.
    for stage in {p.stage for p in calls}:
        mine = [p for p in calls if p.stage == stage]
        assert mine[-1].finished
        assert [p.done for p in mine] == sorted(p.done for p in mine)
    assert not any(p.stage in ("model", "embed") for p in calls)


async def test_outside_base_refused(
    indexer: Indexer, store: SQLiteMetadataStore, tmp_path: Path
) -> None:
    write_tree(tmp_path, {"elsewhere/x.txt": "x"})
    with pytest.raises(IngestionError, match="outside"):
        await indexer.ingest(tmp_path / "elsewhere")
    with pytest.raises(IngestionError, match="outside"):
        await indexer.ingest(tmp_path / "elsewhere" / "x.txt")
    assert await store.generation() == 0


async def test_symlink_to_outside_refused(
    indexer: Indexer, corpus_dir: Path, tmp_path: Path
) -> None:
    write_tree(tmp_path, {"elsewhere/x.txt": "x"})
    (corpus_dir / "escape").symlink_to(tmp_path / "elsewhere", target_is_directory=True)
    with pytest.raises(IngestionError, match="outside"):
        await indexer.ingest(corpus_dir / "escape")


async def test_missing_path(indexer: Indexer, corpus_dir: Path) -> None:
    with pytest.raises(IngestionError, match="does not exist"):
        await indexer.ingest(corpus_dir / "nope")


async def test_a_path_the_system_cannot_look_up(indexer: Indexer, corpus_dir: Path) -> None:
    # A name longer than the file system allows: os.stat raises ENAMETOOLONG.
    with pytest.raises(IngestionError, match="cannot be looked up: File name too long"):
        await indexer.ingest(corpus_dir / ("x" * 300))


async def test_relative_path_resolves_against_cwd(
    indexer: Indexer, corpus_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(corpus_dir)
    report = await indexer.ingest("energy")
    assert report.added == ["energy/solar.md", "energy/wind.txt"]


async def test_analyzer_change_refused(store: SQLiteMetadataStore, corpus_dir: Path) -> None:
    await Indexer(store, corpus_dir).ingest(corpus_dir / "energy")
    other = Indexer(store, corpus_dir, analyzer=Analyzer(AnalyzerConfig(stem_language=None)))
    with pytest.raises(IndexIdentityError):
        await other.ingest(corpus_dir)


async def test_base_dir_is_real_path(
    store: SQLiteMetadataStore, corpus_dir: Path, tmp_path: Path
) -> None:
    link = tmp_path / "corpus-link"
    link.symlink_to(corpus_dir, target_is_directory=True)
    indexer = Indexer(store, link)
    assert indexer.base_dir == Path(os.path.realpath(corpus_dir))
    report = await indexer.ingest(link / "kitchen")
    assert report.added == ["kitchen/bread.txt", "kitchen/tea.rst"]


async def test_a_symlinked_folder_inside_the_base_prunes_and_keeps_like_its_target(
    indexer: Indexer, store: SQLiteMetadataStore, corpus_dir: Path
) -> None:
    # Its files are named by their real paths, so ingesting through the link must
    # find them unchanged, and prune those deleted, as ingesting the folder does.
    (corpus_dir / "pantry").symlink_to(corpus_dir / "kitchen", target_is_directory=True)
    first = await indexer.ingest(corpus_dir / "kitchen")
    assert first.added == ["kitchen/bread.txt", "kitchen/tea.rst"]
    generation = await store.generation()
    again = await indexer.ingest(corpus_dir / "pantry")
    assert (again.added, again.unchanged) == ([], ["kitchen/bread.txt", "kitchen/tea.rst"])
    one = await indexer.ingest(corpus_dir / "pantry" / "tea.rst")
    assert (one.added, one.unchanged) == ([], ["kitchen/tea.rst"])
    assert await store.generation() == generation
    (corpus_dir / "kitchen" / "bread.txt").unlink()
    pruned = await indexer.ingest(corpus_dir / "pantry")
    assert (pruned.removed, pruned.unchanged) == (["kitchen/bread.txt"], ["kitchen/tea.rst"])
    assert "kitchen/bread.txt" not in await document_sources(store)


async def test_chunking_config_is_used(store: SQLiteMetadataStore, corpus_dir: Path) -> None:
    indexer = Indexer(store, corpus_dir, chunking=ChunkingConfig(max_chars=40, overlap_chars=0))
    await indexer.ingest(corpus_dir)
    async for batch in store.iter_chunks():
        assert all(len(s.chunk.content) <= 40 for s in batch)


class UpperCaseNotesLoader:
    """A second real loader: reads ``.notes`` files and records a metadata tag."""

    def accepts(self, path: Path) -> bool:
        return path.suffix == ".notes"

    async def load(self, path: Path, *, base_dir: Path) -> Document:
        source = path.relative_to(base_dir).as_posix()
        return Document(
            document_id=document_id_for(source),
            source=source,
            content=path.read_text(encoding="utf-8"),
            metadata={"loader": "notes"},
        )


async def test_an_executor_refuses_a_custom_loader(
    store: SQLiteMetadataStore, tmp_path: Path
) -> None:
    base = tmp_path / "base"
    write_tree(base, {"x.notes": "field notes about herons"})
    loader = UpperCaseNotesLoader()
    indexer = Indexer(store, base, loader=loader, ingest=IngestConfig(extensions=(".notes",)))
    with pytest.raises(ConfigurationError, match="UpperCaseNotesLoader"):
        await indexer.ingest(base, executor=LocalExecutor())
    assert await document_sources(store) == []
    assert await store.get_analyzer() is None  # refused before the collection is bound


async def test_custom_loader(store: SQLiteMetadataStore, tmp_path: Path) -> None:
    base = tmp_path / "base"
    write_tree(base, {"x.notes": "field notes about herons"})
    loader = UpperCaseNotesLoader()
    assert isinstance(loader, LoaderProtocol)
    indexer = Indexer(store, base, loader=loader, ingest=IngestConfig(extensions=(".notes",)))
    report = await indexer.ingest(base)
    assert report.added == ["x.notes"]
    record = await document_by_source(store, "x.notes")
    assert record is not None and record.metadata == {"loader": "notes"}
