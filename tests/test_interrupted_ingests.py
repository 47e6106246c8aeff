"""What a failed or interrupted ingest leaves: the documents it wrote whole (text and
rows, one transaction a group), none half-written, no collection at all after a first
ingest that stored nothing; and text still without vectors is counted, said by dense and
hybrid answers and listings, and completed by the next ingest."""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from groundkit import ChunkingConfig, Collection, IngestionError, StorageError
from groundkit.cli import main as grk
from groundkit.extraction.html import HtmlExtractor
from groundkit.service import CollectionRegistry
from groundkit.service.server import CollectionList, ListedCollection, compact_text
from groundkit.storage.snapshots import LocalSnapshots
from tests.services import REPO_ROOT
from tests.support import ToyEmbedder, write_tree

CHUNKS = ChunkingConfig(max_chars=80, overlap_chars=20)
FILES = {
    f"d{i:02}.txt": f"Document {i} about the harbour.\n\n"
    + "".join(f"Paragraph {j} of document {i} on tides and cranes.\n\n" for j in range(3))
    for i in range(10)
}


def _open(index: Path, base: Path, embedder: Any = None) -> Any:
    return Collection.open(
        index, base_dir=base, embedder=embedder or ToyEmbedder(), chunking=CHUNKS
    )


class _Failing:
    """Replaces ``owner.name`` so its ``nth`` call raises ``error`` (before doing anything)."""

    def __init__(self, owner: Any, name: str, nth: int, error: BaseException) -> None:
        self.calls = 0
        original = getattr(owner, name)

        async def hook(*args: Any, **kwargs: Any) -> Any:
            self.calls += 1
            if self.calls == nth:
                raise error
            return await original(*args, **kwargs)

        setattr(owner, name, hook)


async def _chunk_counts(col: Collection) -> dict[str, int]:
    return {r.source: r.chunk_count async for r in col.store.iter_documents()}


async def _complete_counts(tmp_path: Path, base: Path) -> dict[str, int]:
    """Chunks per source after an ingest that was not interrupted."""
    async with _open(tmp_path / "reference", base) as col:
        await col.ingest(base)
        return await _chunk_counts(col)


async def test_a_store_failing_midway_keeps_whole_documents_only(tmp_path: Path) -> None:
    base, index = tmp_path / "base", tmp_path / "index"
    write_tree(base, FILES)
    complete = await _complete_counts(tmp_path, base)
    async with _open(index, base) as col:
        col._indexer._write_batch = 8  # about two documents a transaction
        _Failing(col.store, "replace_documents", 3, StorageError("the disk is full"))
        with pytest.raises(StorageError, match="disk is full"):
            await col.ingest(base)
        stored = await _chunk_counts(col)
        # The groups committed before the failure, each document with all its chunks.
        assert stored and len(stored) < len(FILES)
        assert all(stored[s] == complete[s] for s in stored)
        assert sorted(stored) == sorted(FILES)[: len(stored)]
        assert (await col.verify_all()).ok
        # Their vectors were never written: dense answers say so, with the count.
        chunks = await col.store.chunk_count()
        for mode in ("dense", "hybrid"):
            response = await col.search("tides and cranes", 5, mode=mode)
            assert f"{chunks} chunks have no vectors yet" in response.metadata["degraded"]
        assert "degraded" not in (await col.search("tides", 5)).metadata
    async with _open(index, base) as col:
        report = await col.ingest(base)  # completes it: the rest, and every vector
        assert len(report.added) == len(FILES) - len(stored)
        assert report.chunks_embedded == sum(complete.values())
        assert await _chunk_counts(col) == complete
        response = await col.search("tides and cranes", 5, mode="dense")
        assert response.results and "degraded" not in response.metadata


async def test_records_failing_midway_keep_whole_records_only(tmp_path: Path) -> None:
    index = tmp_path / "index"
    records = [
        {"id": f"t{i}", "text": f"Ticket {i}: the kettle on floor {i} leaks."} for i in range(8)
    ]
    async with Collection.open(index) as col:
        await col.add_documents(records[:1])
        col._indexer._write_batch = 2
        _Failing(col.store, "replace_documents", 2, StorageError("the disk is full"))
        with pytest.raises(StorageError):
            await col.add_documents(records[1:])
        stored = {r.source async for r in col.store.iter_documents()}
        assert stored == {"record://t0", "record://t1", "record://t2"}
        report = await col.verify_all()
        assert report.ok and report.verified == 3
        hits = (await col.search("kettle leaks", 10)).results
        assert {h.source for h in hits} == stored
        assert (await col.add_documents(records)).added == [f"record://t{i}" for i in range(3, 8)]
        assert (await col.verify_all()).verified == 8


def _extractor_that_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    """The HTML extractor fails on pages marked DAMAGED (its own error) or BROKEN (an
    unexpected one, as a library bug would raise)."""
    original = HtmlExtractor._run

    def run(self: HtmlExtractor, data: bytes, charset: str | None) -> Any:
        if b"DAMAGED" in data:
            raise IngestionError("cannot parse HTML: damaged")
        if b"BROKEN" in data:
            raise RuntimeError("the parser fell over")
        return original(self, data, charset)

    monkeypatch.setattr(HtmlExtractor, "_run", run)


def _pages(marked: dict[int, str]) -> dict[str, str]:
    return {
        f"p{i:02}.html": f"<html><body><h1>Page {i}</h1><p>{marked.get(i, '')} Harbour "
        f"page {i} on tides and cranes, and the ferry.</p></body></html>"
        for i in range(8)
    }


async def test_an_extractor_failing_on_a_file_fails_that_file_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _extractor_that_fails(monkeypatch)
    base, index = tmp_path / "base", tmp_path / "index"
    write_tree(base, _pages({3: "DAMAGED"}))
    async with _open(index, base) as col:
        report = await col.ingest(base)
        assert [f.source for f in report.failed] == ["p03.html"]
        assert "damaged" in report.failed[0].reason
        assert len(report.added) == 7 and "p03.html" not in await _chunk_counts(col)
        assert (await col.verify_all()).ok


async def test_an_extractor_raising_midway_keeps_the_documents_written_before(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _extractor_that_fails(monkeypatch)
    base, index = tmp_path / "base", tmp_path / "index"
    write_tree(tmp_path / "whole", _pages({}))
    complete = await _complete_counts(tmp_path, tmp_path / "whole")
    write_tree(base, _pages({5: "BROKEN"}))
    async with _open(index, base) as col:
        col._indexer._write_batch = 3  # a transaction every page or two
        with pytest.raises(RuntimeError, match="fell over"):
            await col.ingest(base)
        stored = await _chunk_counts(col)
        # The groups committed before page 5 failed the run, each page whole; a page
        # still waiting for its group was not written at all.
        assert stored and sorted(stored) == sorted(_pages({}))[: len(stored)]
        assert len(stored) <= 5 and all(stored[s] == complete[s] for s in stored)
        assert (await col.verify_all()).ok
        response = await col.search("harbour ferry", 10, mode="dense")
        assert "no vectors yet" in response.metadata["degraded"]
    monkeypatch.undo()
    async with _open(index, base) as col:
        report = await col.ingest(base)
        assert report.unchanged == sorted(stored)
        assert len(report.added) == 8 - len(stored)
        assert (await col.verify_all()).ok
        assert "degraded" not in (await col.search("harbour ferry", 10, mode="hybrid")).metadata


async def test_a_failed_first_ingest_leaves_no_collection(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    base, index = tmp_path / "base", tmp_path / "index"
    write_tree(base, FILES)
    # A dense first ingest binds the embedder, then fails at its first write.
    async with _open(index, base) as col:
        _Failing(col.store, "replace_documents", 1, StorageError("the disk is full"))
        with pytest.raises(StorageError):
            await col.ingest(base)
    assert not index.exists()
    # Records whose text cannot be stored are not stored either.
    async with Collection.open(index) as col:
        assert isinstance(col.snapshots, LocalSnapshots)

        async def refuse(name: str, content: str) -> None:
            raise OSError(28, "No space left on device")

        monkeypatch.setattr(col.snapshots, "write", refuse)
        report = await col.add_documents([{"id": "a", "text": "Alpha."}, {"id": "b", "text": "B."}])
        assert report.added == [] and len(report.failed) == 2
        assert "No space left on device" in report.failed[0].reason
        assert await col.store.chunk_count() == 0
    assert not index.exists()
    # An index directory that was there before stays, and so does its other content.
    index.mkdir()
    (index / "notes.txt").write_text("mine", encoding="utf-8")
    async with _open(index, base) as col:
        _Failing(col.store, "replace_documents", 1, StorageError("the disk is full"))
        with pytest.raises(StorageError):
            await col.ingest(base)
    assert sorted(p.name for p in index.iterdir()) == ["notes.txt"]


async def test_a_first_ingest_that_stores_nothing_removes_every_directory_it_made(
    tmp_path: Path,
) -> None:
    base = tmp_path / "base"
    write_tree(base, {"bad.txt": b"caf\xe9\n"})  # not UTF-8: the one file fails
    index = tmp_path / "x" / "y" / "z"
    async with Collection.open(index, base_dir=base) as col:
        assert [f.source for f in (await col.ingest(base)).failed] == ["bad.txt"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["base"]
    # Only what the open made: a parent that was there before stays.
    (tmp_path / "x").mkdir()
    async with Collection.open(index, base_dir=base) as col:
        assert (await col.ingest(base)).failed
    assert list((tmp_path / "x").iterdir()) == []


class _Stalled(ToyEmbedder):
    """Says when it is first asked for vectors, then never answers (until cancelled)."""

    def __init__(self) -> None:
        super().__init__()
        self.started = asyncio.Event()

    async def embed_documents(self, texts: Any) -> Any:
        self.started.set()
        await asyncio.Event().wait()


async def test_a_cancelled_first_dense_ingest_is_counted_said_and_completed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base, index = tmp_path / "base", tmp_path / "index"
    write_tree(base, FILES)
    stalled = _Stalled()
    async with _open(index, base, stalled) as col:
        task = asyncio.create_task(col.ingest(base))
        await asyncio.wait_for(stalled.started.wait(), 120)
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        chunks = await col.store.chunk_count()
        assert chunks > 0  # the text was stored, whole
        dense = await col.search("tides and cranes", 5, mode="dense")
        assert dense.results == []
        assert f"{chunks} chunks have no vectors yet" in dense.metadata["degraded"]
        hybrid = await col.search("tides and cranes", 5, mode="hybrid")
        assert hybrid.results and "no vectors yet" in hybrid.metadata["degraded"]
    registry = CollectionRegistry(index)
    try:
        info = await registry.describe("default")
    finally:
        await registry.close()
    assert info.vectors_missing == chunks
    listed = CollectionList(collections=[ListedCollection.of(info)])  # list_collections
    assert f"vectors missing: {chunks}" in compact_text(listed)
    assert await asyncio.to_thread(grk, ["collections", "--index-dir", str(index)]) == 0
    assert f"vectors missing: {chunks} chunks" in capsys.readouterr().out
    # The next ingest, with no file changed, completes the vectors.
    async with _open(index, base) as col:
        report = await col.ingest(base)
        assert len(report.unchanged) == len(FILES) and report.chunks_embedded == chunks
        dense = await col.search("tides and cranes", 5, mode="dense")
        assert dense.results and "degraded" not in dense.metadata
    assert await asyncio.to_thread(grk, ["collections", "--index-dir", str(index), "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)["collections"][0]
    assert listed["vectors_missing"] == 0


# ``grk`` with a model that answers nothing: says when it was first asked, then waits.
_GRK_STALLED = textwrap.dedent(
    """
    import asyncio, faulthandler, signal, sys
    import groundkit.cli as cli

    faulthandler.register(signal.SIGUSR1, all_threads=True)  # the test asks where it hangs
    import groundkit.providers.local as local
    from tests.support import ToyEmbedder

    class Stalled(ToyEmbedder):
        def __init__(self, name, **settings):  # settings: --backend's, not used here
            super().__init__(model_name=name)

        async def embed_documents(self, texts):
            print("embedding", flush=True)
            await asyncio.Event().wait()

    local.SentenceTransformerEmbedder = Stalled  # what --embedder NAME builds
    sys.exit(cli.main(sys.argv[1:]))
    """
)


async def test_ctrl_c_during_a_first_dense_grk_ingest(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    base, index = tmp_path / "base", tmp_path / "index"
    write_tree(base, FILES)
    args = ["--index-dir", str(index), "--base-dir", str(base)]
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        _GRK_STALLED,
        "ingest",
        str(base),
        *args,
        "--embedder",
        "hash-64",
        cwd=REPO_ROOT,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        # A test run started in the background ignores SIGINT, and a child inherits that.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    assert proc.stdout is not None
    line = b""
    while line.strip() != b"embedding":
        line = await asyncio.wait_for(proc.stdout.readline(), 120)
        assert line, "grk ended before it embedded anything"
    proc.send_signal(signal.SIGINT)
    try:
        _, err = await asyncio.wait_for(proc.communicate(), 120)
    except TimeoutError:
        # Where every thread of grk stands, then it is stopped: the failure says why.
        proc.send_signal(signal.SIGUSR1)
        await asyncio.sleep(2)
        proc.kill()
        _, err = await proc.communicate()
        pytest.fail("grk did not exit within 120 s of SIGINT:\n" + err.decode(errors="replace"))
    assert proc.returncode == 130, err
    assert b"interrupted" in err and b"Traceback" not in err

    # This process builds the toy embedder the collection recorded.
    monkeypatch.setattr(
        "groundkit.providers.factory.require_embedder_for_manifest",
        lambda manifest, **_: ToyEmbedder(manifest.dimensions, manifest.model_name),
    )
    search = ["search", "tides and cranes", "--mode", "dense", "--json", *args]
    assert await asyncio.to_thread(grk, search) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out)["results"] == []
    assert "no vectors yet" in captured.err
    assert await asyncio.to_thread(grk, ["collections", *args]) == 0
    assert "vectors missing:" in capsys.readouterr().out
    assert await asyncio.to_thread(grk, ["ingest", str(base), *args, "-q"]) == 0
    capsys.readouterr()
    assert await asyncio.to_thread(grk, search) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out)["results"] and "warning" not in captured.err
    assert await asyncio.to_thread(grk, ["collections", *args]) == 0
    assert "vectors missing" not in capsys.readouterr().out
