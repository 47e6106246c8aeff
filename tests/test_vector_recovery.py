"""The vector side follows the text: killed ingests and repairs, other processes' writes,
and what the CLI and the MCP server say when the vectors are unavailable."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import shutil
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from groundkit import ChunkingConfig, Collection, IngestionError, RetrievalError
from groundkit.cli import main as grk
from groundkit.service import CollectionRegistry
from groundkit.storage import SQLiteMetadataStore
from tests.service.test_server import connected
from tests.services import REPO_ROOT
from tests.support import ToyEmbedder, assert_all_verify, slow_dense_ingest, write_tree

CHUNKS = ChunkingConfig(max_chars=80, overlap_chars=20)
SEEDS = {f"seed-{i}.txt": f"Seed note {i} about the harbour.\n" for i in range(8)}


def open_toy(index: Path, base: Path) -> contextlib.AbstractAsyncContextManager[Collection]:
    """``Collection.open`` with the toy embedder and small chunks these tests share."""
    return Collection.open(index, base_dir=base, embedder=ToyEmbedder(), chunking=CHUNKS)


def _run_ingest(index: Path, base: Path, kill_after: float | None) -> bool:
    return slow_dense_ingest(index, base, kill_after, delay=0.1, write_batch=8)


def _files(round_: int, rng: random.Random) -> dict[str, str]:
    return {
        f"d{i:03}.txt": (
            f"Document {i} of round {round_ if rng.random() < 0.3 else 0} on topic {i % 7}.\n\n"
        )
        * 3
        for i in range(120)
    }


async def test_sigkill_at_random_points_of_ingests_and_repairs_is_repaired_by_one_ingest(
    tmp_path: Path,
) -> None:
    rng = random.Random(20261201)
    base, index = tmp_path / "base", tmp_path / "index"
    cut_short = 0
    for round_ in range(6):
        write_tree(base, _files(round_, rng))
        for stale in sorted(base.glob("d*.txt"))[rng.randrange(100, 120) :]:
            stale.unlink()  # some documents go, so orphans and deletions happen too
        if round_ in (2, 4) and (index / "default.lance").exists():
            # Lose the vectors: the next (killed) run is a repair.
            shutil.rmtree(index / "default.lance")
        await asyncio.to_thread(_run_ingest, index, base, rng.uniform(0.2, 1.5))
        cut_short += bool(await _unconfirmed(index))
    assert cut_short >= 2, "most kills must land while vectors are being written"
    write_tree(base, _files(9, rng))
    assert await asyncio.to_thread(_run_ingest, index, base, None)

    async with open_toy(index, base) as col:
        assert col.vector_store is not None
        inventory = await col.vector_store.inventory()
        rows = [row async for batch in col.store.iter_chunks() for row in batch]
        assert inventory == {row.chunk_id: row.document_id for row in rows}
        assert await col.store.documents_missing_vectors() == []
        for mode in ("bm25", "dense", "hybrid"):
            response = await col.search("topic 3 document", 20, mode=mode)
            assert response.results and "degraded" not in response.metadata
            await assert_all_verify(response.results, base)
    assert await asyncio.to_thread(grk, ["verify", "--index-dir", str(index)]) == 0


async def _unconfirmed(index: Path) -> list[str]:
    """Documents the last (killed) run left without confirmed vectors."""
    if not (index / "default.sqlite3").exists():
        return []
    store = await SQLiteMetadataStore.open(index / "default.sqlite3", create=False)
    try:
        return await store.documents_missing_vectors()
    finally:
        await store.close()


_WRITER = textwrap.dedent(
    """
    import asyncio, sys
    from pathlib import Path
    from groundkit import Collection, ChunkingConfig
    from tests.support import ToyEmbedder

    async def main():
        index, base, rounds = Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3])
        for r in range(rounds):
            (base / f"live-{r:02d}.txt").write_text(
                f"Live note {r} about the harbour crane number {r}.\\n", encoding="utf-8")
            if r and r % 3 == 0:
                (base / f"live-{r - 2:02d}.txt").unlink()
            chunks = ChunkingConfig(max_chars=80, overlap_chars=20)
            opened = Collection.open(index, base_dir=base, embedder=ToyEmbedder(), chunking=chunks)
            async with opened as col:
                await col.ingest(base)
            await asyncio.sleep(0.05)

    asyncio.run(main())
    """
)


async def test_a_long_lived_collection_sees_another_processes_vectors(tmp_path: Path) -> None:
    base, index = tmp_path / "base", tmp_path / "index"
    write_tree(base, SEEDS)
    async with open_toy(index, base) as col:
        await col.ingest(base)
        writer = await asyncio.create_subprocess_exec(
            sys.executable, "-c", _WRITER, str(index), str(base), "12", cwd=REPO_ROOT
        )
        served = 0
        while writer.returncode is None:
            for mode in ("dense", "hybrid"):
                response = await col.search("harbour crane note", 5, mode=mode)
                assert len(response.results) == 5, response.metadata
                # Never a fall-back to BM25; a note on chunks the writer has not embedded
                # yet is what a search between its text and its vectors should say.
                assert "no vectors yet" in response.metadata.get("degraded", "no vectors yet")
                for result in response.results:
                    try:
                        checked = await col.fetch_chunk(result.chunk_id)
                    except RetrievalError as exc:
                        # The writer's ingest removed the document since this search ran.
                        assert exc.verdict == "unresolvable"
                        assert not (base / result.source).exists()
                        continue
                    if checked.verification == "verified":
                        served += 1
                    else:  # deleted by the writer since this search ran
                        assert not (base / result.source).exists()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(writer.wait(), 0.02)
        assert writer.returncode == 0
        assert served > 0
        # After the last write, the newest document is found by dense search at once.
        response = await col.search(
            "Live note 11 about the harbour crane number 11.", 1, mode="dense"
        )
        assert response.results[0].source == "live-11.txt"
        assert response.metadata["stale_dropped"] == 0


# Ingests the base directory each time it reads a line, then answers "done": another
# process whose writes land exactly where the test asks for them.
_WRITER_ON_CUE = textwrap.dedent(
    """
    import asyncio, sys
    from pathlib import Path
    from groundkit import Collection, ChunkingConfig
    from tests.support import ToyEmbedder

    async def main():
        index, base = Path(sys.argv[1]), Path(sys.argv[2])
        chunks = ChunkingConfig(max_chars=80, overlap_chars=20)
        print("ready", flush=True)
        while sys.stdin.readline().strip() == "ingest":
            opened = Collection.open(index, base_dir=base, embedder=ToyEmbedder(), chunking=chunks)
            async with opened as col:
                await col.ingest(base)
            print("done", flush=True)

    asyncio.run(main())
    """
)
# Only turns a hang into a failure; the writer usually answers in well under a second.
_CUE_TIMEOUT = 300.0


class _WriterOnCue:
    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self._proc = proc

    @classmethod
    async def start(cls, index: Path, base: Path) -> _WriterOnCue:
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-c",
            _WRITER_ON_CUE,
            str(index),
            str(base),
            cwd=REPO_ROOT,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
        )
        writer = cls(proc)
        await writer._expect("ready")
        return writer

    async def ingest(self) -> None:
        """Ingest in the other process and wait until its commits are all made."""
        assert self._proc.stdin is not None
        self._proc.stdin.write(b"ingest\n")
        await self._proc.stdin.drain()
        await self._expect("done")

    async def _expect(self, word: str) -> None:
        assert self._proc.stdout is not None
        line = await asyncio.wait_for(self._proc.stdout.readline(), _CUE_TIMEOUT)
        assert line.decode().strip() == word, f"the writer said {line!r}"

    async def stop(self) -> None:
        if self._proc.returncode is None:
            assert self._proc.stdin is not None
            self._proc.stdin.close()
            try:
                await asyncio.wait_for(self._proc.wait(), _CUE_TIMEOUT)
            except TimeoutError:
                self._proc.kill()
                await self._proc.wait()
        assert self._proc.returncode == 0


async def _served_densely(col: Collection, query: str) -> str:
    """The source of the top dense result; fails if the search fell back to BM25."""
    response = await col.search(query, 1, mode="dense")
    assert "degraded" not in response.metadata, response.metadata["degraded"]
    assert response.metadata["stage"] == "dense"
    return response.results[0].source


async def test_vectors_another_process_commits_during_the_check_are_not_a_loss(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each interleaving of a reader's vector check with another process's commits is
    forced, not waited for: the reader serves the committed state, never BM25 for a
    loss that is only a write it read half of."""
    base, index = tmp_path / "base", tmp_path / "index"
    write_tree(base, SEEDS)
    async with open_toy(index, base) as col:
        await col.ingest(base)
    writer = await _WriterOnCue.start(index, base)
    try:
        async with open_toy(index, base) as col:
            assert col.vector_store is not None
            vectors, store = col.vector_store, col.store

            # 1. The handle opened before the other process wrote; the first search
            # checks the vector side afterwards.
            write_tree(base, {"crane-a.txt": "Crane alpha lifts containers at the quay.\n"})
            await writer.ingest()
            assert await _served_densely(col, "Crane alpha lifts containers") == "crane-a.txt"

            # 2. The other process stores and confirms vectors right after this handle
            # moved to the table's latest version.
            write_tree(base, {"crane-b.txt": "Crane bravo stacks boxes on the ship.\n"})
            await writer.ingest()  # the next search sees the store moved and checks again
            moved = vectors.refresh
            cues = ["crane-c.txt"]

            async def refresh_then_another_write() -> None:
                await moved()
                if cues:
                    write_tree(base, {cues.pop(): "Crane charlie waits for the tide.\n"})
                    await writer.ingest()

            monkeypatch.setattr(vectors, "refresh", refresh_then_another_write)
            assert await _served_densely(col, "Crane bravo stacks boxes") == "crane-b.txt"
            assert not cues, "the other process's write did not land during the check"
            monkeypatch.undo()
            assert await _served_densely(col, "Crane charlie waits for the tide") == "crane-c.txt"

            # 3. The other process deletes a document (its confirmation, then its rows)
            # right after this reader counted the confirmations.
            (base / "crane-d.txt").write_text("Crane delta rusts in the yard.\n", "utf-8")
            await writer.ingest()
            counted = store.confirmed_vector_count
            deletions = [base / "crane-a.txt", base / "crane-d.txt"]

            async def count_then_a_deletion() -> int:
                found = await counted()
                if deletions:
                    for path in deletions:
                        path.unlink()
                    deletions.clear()
                    await writer.ingest()
                return found

            monkeypatch.setattr(store, "confirmed_vector_count", count_then_a_deletion)
            assert await _served_densely(col, "Crane bravo stacks boxes") == "crane-b.txt"
            assert not deletions, "the other process's deletion did not land during the check"
            monkeypatch.undo()
            top = await col.search("Crane delta rusts in the yard", 10, mode="dense")
            assert "degraded" not in top.metadata
            assert {r.source for r in top.results}.isdisjoint({"crane-a.txt", "crane-d.txt"})
    finally:
        await writer.stop()


async def test_mcp_search_says_when_it_answers_from_bm25(tmp_path: Path) -> None:
    base, index = tmp_path / "base", tmp_path / "index"
    write_tree(
        base, {"a.txt": "Kelp forests shelter fish.\n", "b.txt": "Granite weathers slowly.\n"}
    )
    async with Collection.open(index, base_dir=base, embedder=ToyEmbedder()) as col:
        await col.ingest(base)
    shutil.rmtree(index / "default.lance")
    registry = CollectionRegistry(
        index, embedder_for=lambda m: ToyEmbedder(m.dimensions, m.model_name)
    )
    async with connected(registry) as client:
        result = await client.call_tool("search", {"query": "kelp fish", "mode": "hybrid"})
        assert not result.is_error
        data: dict[str, Any] = result.structured_content or {}
        assert data["stage"] == "bm25" and data["results"]
        assert "vector search unavailable" in data["degraded"]


@pytest.fixture(scope="module")
def minilm_index(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("cli")
    base = root / "docs"
    write_tree(
        base,
        {
            "tea.md": "Green tea is brewed at about 80 degrees.\n",
            "coffee.md": "Espresso is pressed through finely ground coffee.\n",
            "bread.md": "Sourdough rises slowly overnight.\n",
        },
    )
    return root, base


def test_cli_dense_search_after_the_vectors_were_deleted(
    minilm_index: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    root, base = minilm_index
    index = root / "idx"
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    args = ["--index-dir", str(index), "--base-dir", str(base)]
    assert grk(["ingest", str(base), *args, "--embedder", "all-MiniLM-L6-v2", "-q"]) == 0
    capsys.readouterr()
    shutil.rmtree(index / "default.lance")
    assert grk(["ingest", str(base), *args]) == 0  # repairs: embeds everything again
    out = capsys.readouterr().out
    assert "repaired:" in out and "embedding them again" in out
    assert grk(["search", "tea", "--mode", "dense", "--json", *args]) == 0
    captured = capsys.readouterr()
    assert "warning" not in captured.err
    assert json.loads(captured.out)["results"][0]["citation"]["source"] == "tea.md"

    shutil.rmtree(index / "default.lance")
    assert grk(["search", "tea", "--mode", "dense", *args]) == 0
    captured = capsys.readouterr()
    assert "tea.md" in captured.out
    assert "grk: warning:" in captured.err and "BM25 only" in captured.err
    assert "Traceback" not in captured.err
    assert grk(["search", "tea", "--mode", "hybrid", "--json", *args]) == 0
    captured = capsys.readouterr()
    assert "BM25 only" in json.loads(captured.out)["metadata"]["degraded"]


class _FullDisk(ToyEmbedder):
    """Fails every embedding call, as a vector write fails when the disk fills."""

    async def embed_documents(self, texts: Any) -> Any:
        raise OSError(28, "No space left on device")


async def test_a_vector_table_never_finished_is_rebuilt(tmp_path: Path) -> None:
    base, index = tmp_path / "base", tmp_path / "index"
    write_tree(base, {f"n{i}.txt": f"Note {i} on tide pools.\n" for i in range(5)})
    col = await Collection.open(index, base_dir=base, embedder=_FullDisk())
    try:
        # The embedder's own error, typed (providers/checked.py).
        with pytest.raises(IngestionError, match="No space left on device"):
            await col.ingest(base)
    finally:
        await col.close()
    # What a create cut short by a full disk leaves: a table directory LanceDB cannot open.
    (index / "default.lance" / "data").mkdir(parents=True)
    (index / "default.lance" / "data" / "partial.lance").write_bytes(b"\x00" * 100)
    async with Collection.open(index, base_dir=base, embedder=ToyEmbedder()) as col:
        degraded = await col.search("tide pools", 3, mode="hybrid")
        assert degraded.results  # BM25 works throughout
        report = await col.ingest(base)
        assert report.embedded == 5 and report.repairs
        assert list(index.glob("default.lance.damaged-*"))
        dense = await col.search("tide pools", 3, mode="dense")
        assert dense.results and "degraded" not in dense.metadata


def test_cli_refuses_an_emptied_or_damaged_collection_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base, index = tmp_path / "base", tmp_path / "index"
    write_tree(base, {"a.txt": "Alpha secretword beta.\n"})
    args = ["--index-dir", str(index), "--base-dir", str(base)]
    assert grk(["ingest", str(base), *args, "-q"]) == 0
    capsys.readouterr()
    assert grk(["search", "alpha", "--json", *args]) == 0
    chunk_id = json.loads(capsys.readouterr().out)["results"][0]["citation"]["chunk_id"]
    database = index / "default.sqlite3"
    import sqlite3

    with sqlite3.connect(database) as conn:
        conn.execute("UPDATE chunks SET end_offset = end_offset + 5")
    conn.close()
    capsys.readouterr()
    for command in (["search", "alpha"], ["verify"], ["fetch", chunk_id]):
        assert grk([*command, *args]) == 2
        err = capsys.readouterr().err
        assert err.startswith("grk: error:") and "damaged offsets" in err
        assert "Traceback" not in err and "secretword" not in err
    for leftover in index.glob("default.sqlite3*"):
        leftover.unlink()
    database.write_bytes(b"")
    for command in (["search", "alpha"], ["verify"], ["ingest", str(base)]):
        assert grk([*command, *args]) == 2
        err = capsys.readouterr().err
        assert "empty (0 bytes)" in err and "Traceback" not in err
    assert grk(["ingest", str(base), *args, "--rebuild"]) == 0
    assert "repaired: the metadata store was damaged" in capsys.readouterr().out
    assert grk(["verify", *args]) == 0


async def test_a_damaged_tables_notice_names_the_reason_not_lances_internals(
    tmp_path: Path,
) -> None:
    """Lance's error names its crate's source file and dumps the bytes it read (which
    may be stored data); the notice keeps only the reason."""
    base, index = tmp_path / "base", tmp_path / "index"
    write_tree(base, {"a.txt": "Alpha kettle text.", "b.txt": "Beta tea text."})
    async with Collection.open(index, base_dir=base, embedder=ToyEmbedder()) as col:
        await col.ingest(base)
    for version in (index / "default.lance" / "_versions").iterdir():
        version.write_bytes(b"secretword\n")
    async with Collection.open(index, base_dir=base, embedder=ToyEmbedder()) as col:
        notice = (await col.search("kettle", 3, mode="dense")).metadata["degraded"]
    assert notice.startswith("vector search unavailable, results are BM25 only")
    assert "secretword" not in notice and ".rs" not in notice and "cargo" not in notice


def test_lance_error_lines_lose_source_paths_and_byte_dumps() -> None:
    from groundkit.storage.lancedb import _first_line

    raised = Exception(
        'lance error: LanceError(IO): does not have sufficient data, len: 8, bytes: b"a\\"b\\n", '
        "/root/.cargo/registry/src/index.crates.io-0/lance-io-0.13.0/src/utils.rs:26:9\nnext"
    )
    assert _first_line(raised) == (
        "lance error: LanceError(IO): does not have sufficient data, len: 8, bytes: …"
    )
    assert _first_line(Exception("Table 'x' was not found")) == "Table 'x' was not found"
    assert _first_line(Exception("")) == "Exception"
