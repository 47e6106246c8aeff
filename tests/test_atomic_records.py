"""A record (or URL snapshot) is visible only with its text: the text is stored first,
under a name its bytes decide, and the row naming it commits after. Killed writers at
every point of ``add_documents`` and a reader polling other processes' writes never
meet a visible record whose citation cannot be read back."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

from groundkit import ChunkingConfig, Collection
from groundkit.storage.snapshots import ORPHAN_GRACE_SECONDS, LocalSnapshots, text_name
from tests.services import REPO_ROOT
from tests.support import ToyEmbedder

CHUNKS = ChunkingConfig(max_chars=80, overlap_chars=20)
# The first batch, stored whole before any writer is killed.
SEED = [{"id": f"r{i}", "text": f"Seed record {i} about the harbour crane."} for i in range(6)]
# What the killed writer adds: three seed records changed, three unchanged, six new.
BATCH = [
    *({"id": f"r{i}", "text": f"Changed record {i} about the harbour tug."} for i in range(3)),
    *SEED[3:],
    *({"id": f"n{i}", "text": f"New record {i} about the harbour pilot."} for i in range(6)),
]

# Adds BATCH with one store method made to kill the process (os._exit, as kill -9
# does: nothing is flushed or closed) before or after its ``nth`` call.
_KILLED_WRITER = textwrap.dedent(
    """
    import asyncio, json, os, sys
    from pathlib import Path
    from groundkit import ChunkingConfig, Collection
    from tests.support import ToyEmbedder

    index, target, method, when, nth = sys.argv[1:6]
    batch = json.loads(sys.argv[6])

    def dying(owner, name):
        original = getattr(owner, name)
        calls = 0

        async def hook(*args, **kwargs):
            nonlocal calls
            calls += 1
            if calls == int(nth) and when == "before":
                os._exit(9)
            result = await original(*args, **kwargs)
            if calls == int(nth) and when == "after":
                os._exit(9)
            return result

        setattr(owner, name, hook)

    async def main():
        chunks = ChunkingConfig(max_chars=80, overlap_chars=20)
        col = await Collection.open(index, embedder=ToyEmbedder(), chunking=chunks)
        col._indexer._write_batch = 2  # several groups: some commit before the kill
        owners = {
            "texts": col._indexer._snapshots,
            "store": col.store,
            "vectors": col.vector_store,
        }
        dying(owners[target], method)
        await col.add_documents(batch)
        os._exit(3)  # the hook never fired: the test is wrong

    asyncio.run(main())
    """
)

# Where a writer can die: around each text write, each commit of rows, and while the
# vectors are written and confirmed.
KILL_POINTS = [
    ("texts", "write", "before", 1),
    ("texts", "write", "after", 1),
    ("texts", "write", "after", 4),
    ("store", "replace_documents", "before", 1),
    ("store", "replace_documents", "before", 2),
    ("store", "replace_documents", "after", 1),
    ("store", "replace_documents", "after", 3),
    ("vectors", "upsert_documents", "before", 1),
    ("vectors", "upsert_documents", "after", 1),
    ("store", "mark_vectors_stored_many", "after", 1),
]


def _open(index: Path) -> contextlib.AbstractAsyncContextManager[Collection]:
    return Collection.open(index, embedder=ToyEmbedder(), chunking=CHUNKS)


async def _every_visible_record_verifies(col: Collection) -> set[str]:
    """Every current chunk, and every result of a search in each mode, verifies;
    returns the sources found."""
    report = await col.verify_all()
    assert report.ok and report.unresolvable == 0, [p.detail for p in report.problems]
    found: set[str] = set()
    for mode in ("bm25", "dense", "hybrid"):
        response = await col.search("record about the harbour", 50, mode=mode)
        for result in response.results:
            checked = await col.verify(result)
            assert checked.verification == "verified", (mode, result.source, checked.detail)
            found.add(result.source)
    return found


@pytest.mark.parametrize(("target", "method", "when", "nth"), KILL_POINTS)
async def test_a_writer_killed_anywhere_leaves_every_visible_record_verified(
    tmp_path: Path, target: str, method: str, when: str, nth: int
) -> None:
    index = tmp_path / "index"
    async with _open(index) as col:
        await col.add_documents(SEED)
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        _KILLED_WRITER,
        str(index),
        target,
        method,
        when,
        str(nth),
        json.dumps(BATCH),
        cwd=REPO_ROOT,
    )
    assert await asyncio.wait_for(proc.wait(), 120) == 9
    # This process opens the collection anew, as any reader after the crash would.
    async with _open(index) as col:
        found = await _every_visible_record_verifies(col)
        assert {f"record://r{i}" for i in range(3, 6)} <= found  # untouched: still there
        # Each stored record is whole: its text is the seed's or the batch's, never a mix.
        wanted = {f"record://{r['id']}": r["text"] for r in BATCH}
        seeds = {f"record://{r['id']}": r["text"] for r in SEED}
        async for batch in col.store.iter_chunks():
            for row in batch:
                assert row.content in (wanted[row.source], seeds.get(row.source))
        # Adding the batch again completes it, texts, rows and vectors.
        report = await col.add_documents(BATCH)
        assert not report.failed
        assert await _every_visible_record_verifies(col) == set(wanted)
        response = await col.search("record about the harbour", 50, mode="dense")
        assert "degraded" not in response.metadata
        assert await col.store.documents_missing_vectors() == []


async def test_old_unnamed_texts_no_row_names_and_temp_files_are_swept_after_grace(
    tmp_path: Path,
) -> None:
    index = tmp_path / "index"
    async with Collection.open(index) as col:
        await col.add_documents(SEED[:2])
        assert isinstance(col.snapshots, LocalSnapshots)
        folder = col.snapshots.directory
        named = sorted(p.name for p in folder.iterdir())
        assert len(named) == 2 and all(len(n) == 32 + 1 + 64 for n in named)
    old = time.time() - ORPHAN_GRACE_SECONDS - 60
    orphans = {
        "a" * 32 + "." + "1" * 64: old,  # an interrupted write's text, long ago
        "b" * 32 + "." + "2" * 64 + ".0badc0ffee00.partial": old,
        "c" * 32 + "." + "3" * 64: time.time(),  # a writer in flight: kept
    }
    for name, when in orphans.items():
        (folder / name).write_text("orphan", encoding="utf-8")
        os.utime(folder / name, (when, when))
    # The writer's first write sweeps; so does optimize.
    async with Collection.open(index) as col:
        await col.add_documents([{"id": "late", "text": "A late record."}])
        names = {p.name for p in folder.iterdir()}
        assert "c" * 32 + "." + "3" * 64 in names
        assert not names & {
            "a" * 32 + "." + "1" * 64,
            "b" * 32 + "." + "2" * 64 + ".0badc0ffee00.partial",
        }
        young = folder / ("c" * 32 + "." + "3" * 64)
        os.utime(young, (old, old))
        await col.optimize()
        assert not young.exists()
        assert (await col.verify_all()).ok


async def test_texts_written_before_names_are_read_and_retired(tmp_path: Path) -> None:
    """A collection written by an earlier version keeps its texts under the bare
    document id: they are read as before, and go when the record is written again."""
    index = tmp_path / "index"
    async with Collection.open(index) as col:
        await col.add_documents(SEED[:2])
        assert isinstance(col.snapshots, LocalSnapshots)
        folder = col.snapshots.directory
        records = {r.source: r async for r in col.store.iter_documents()}
    for record in records.values():  # as an earlier version laid them out
        (folder / text_name(record.document_id, record.content_hash)).rename(
            folder / record.document_id
        )
    async with Collection.open(index) as col:
        assert (await col.verify_all()).ok
        hit = (await col.search("seed record 0", 1)).results[0]
        assert (await col.verify(hit)).verification == "verified"
        await col.add_documents([{"id": "r0", "text": "Record zero, rewritten."}])
        r0 = records["record://r0"]
        r1 = records["record://r1"]
        names = {p.name for p in folder.iterdir()}
        assert r1.document_id in names  # untouched: still read under its bare id
        assert r0.document_id not in names  # superseded by its named text
        assert (await col.verify_all()).ok


async def test_a_record_whose_text_is_missing_is_left_out_and_reported(tmp_path: Path) -> None:
    """What an earlier version's interrupted write (rows committed, text never written)
    leaves: the record is left out of results, reported, and verify says why."""
    index = tmp_path / "index"
    async with Collection.open(index) as col:
        await col.add_documents(SEED[:3])
        assert isinstance(col.snapshots, LocalSnapshots)
        folder = col.snapshots.directory
    (lost,) = folder.glob(f"{(await _document_id(index, 'record://r1'))}.*")
    lost.unlink()
    async with Collection.open(index) as col:
        response = await col.search("seed record harbour", 10)
        assert {r.source for r in response.results} == {"record://r0", "record://r2"}
        assert response.metadata["missing_text"] == 1
        report = await col.verify_all()
        assert report.unresolvable == 1
        assert "missing" in report.problems[0].detail
        written = await col.add_documents([{"id": "other", "text": "Another record."}])
        assert any("record://r1" in note for note in written.repairs), written.repairs
        # Adding the record again puts its text back.
        again = await col.add_documents([SEED[1]])
        assert again.unchanged == ["record://r1"]
        assert (await col.verify_all()).ok
    async with Collection.open(index) as col:
        response = await col.search("seed record harbour", 10)
        assert {f"record://r{i}" for i in range(3)} <= {r.source for r in response.results}
        assert "missing_text" not in response.metadata


async def _document_id(index: Path, source: str) -> str:
    async with Collection.open(index) as col:
        ids = {r.source: r.document_id async for r in col.store.iter_documents()}
    return ids[source]


# Adds and changes records round after round; its text store is slow, so a window
# between a row and its text (if there were one) would stay open for a while.
_BUSY_WRITER = textwrap.dedent(
    """
    import asyncio, sys
    from groundkit import Collection
    from groundkit.storage.snapshots import LocalSnapshots

    async def main():
        index, rounds = sys.argv[1], int(sys.argv[2])
        original = LocalSnapshots.write

        async def slow_write(self, name, content):
            await asyncio.sleep(0.02)
            await original(self, name, content)

        LocalSnapshots.write = slow_write
        async with Collection.open(index) as col:
            for r in range(rounds):
                batch = [
                    {"id": f"live-{r}-{i}", "text": f"Live record {r} {i} about the ferry."}
                    for i in range(4)
                ]
                batch += [
                    {"id": f"live-{r - 1}-{i}", "text": f"Live record {r - 1} {i}, revised, ferry."}
                    for i in range(2)
                    if r
                ]
                await col.add_documents(batch)
                if r == 0:
                    print("ready", flush=True)

    asyncio.run(main())
    """
)


async def test_a_reader_never_meets_a_record_without_its_text(tmp_path: Path) -> None:
    index = tmp_path / "index"
    async with Collection.open(index) as col:
        await col.add_documents([{"id": "seed", "text": "A seed record about the ferry."}])
    writer = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        _BUSY_WRITER,
        str(index),
        "40",
        cwd=REPO_ROOT,
        stdout=asyncio.subprocess.PIPE,
    )
    assert writer.stdout is not None
    assert (await asyncio.wait_for(writer.stdout.readline(), 120)).strip() == b"ready"
    checked: dict[str, int] = {}
    async with Collection.open(index) as col:
        while writer.returncode is None:
            response = await col.search("live record ferry", 20)
            for result in response.results:
                verdict = (await col.verify(result)).verification
                assert verdict != "unresolvable", result.source
                checked[verdict] = checked.get(verdict, 0) + 1
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(writer.wait(), 0.01)
        assert writer.returncode == 0
        assert checked.get("verified", 0) > 0
        assert (await col.verify_all()).ok


async def test_a_delete_racing_a_re_add_leaves_the_re_added_record_its_text(
    tmp_path: Path,
) -> None:
    """One writer deletes record x while another is adding it again, between storing
    its text and committing its row: the delete's sweep takes that text (written before
    the delete, named by no row yet), so the re-added record must put it back."""
    base = tmp_path / "base"
    base.mkdir()
    deleter = await Collection.open(tmp_path / "index", base_dir=base)
    adder = await Collection.open(tmp_path / "index", base_dir=base)
    try:
        await deleter.add_documents([{"id": "x", "text": "Racemarker first text"}])
        text_stored, go_on = asyncio.Event(), asyncio.Event()
        commit = adder.store.replace_documents

        async def held(*args: Any, **kwargs: Any) -> Any:
            text_stored.set()
            await go_on.wait()
            return await commit(*args, **kwargs)

        setattr(adder.store, "replace_documents", held)  # noqa: B010 (a method replaced)
        adding = asyncio.ensure_future(
            adder.add_documents([{"id": "x", "text": "Racemarker second text"}])
        )
        await text_stored.wait()
        await deleter.delete(records=["x"])
        go_on.set()
        report = await adding
        assert report.updated == ["record://x"] and report.repairs == []
    finally:
        await deleter.close()
        await adder.close()
    async with Collection.open(tmp_path / "index", base_dir=base) as col:
        found = (await col.search("Racemarker", 5)).results
        assert [r.content for r in found] == ["Racemarker second text"]
        assert (await col.verify(found[0])).verification == "verified"
        assert (await col.verify_all()).ok


async def test_a_stored_text_replaced_by_a_link_is_not_trusted_and_a_re_add_replaces_it(
    tmp_path: Path,
) -> None:
    """A link in the snapshot directory where a record's text belongs (out of the directory
    here) is no stored text: searches leave the record out instead of failing, and adding
    the record again writes its text in the link's place, leaving the target alone."""
    base = tmp_path / "base"
    base.mkdir()
    records = [
        {"id": f"r{i}", "text": f"Linkmarker {i} about the harbour crane."} for i in range(3)
    ]
    async with Collection.open(tmp_path / "index", base_dir=base) as col:
        await col.add_documents(records)
        found = (await col.search("Linkmarker 1", 1)).results[0]
    (stored,) = (tmp_path / "index" / "default.snapshots").glob(f"{found.document_id}.*")
    elsewhere = tmp_path / "elsewhere.txt"
    elsewhere.write_bytes(stored.read_bytes())
    stored.unlink()
    stored.symlink_to(elsewhere)
    async with Collection.open(tmp_path / "index", base_dir=base) as col:
        response = await col.search("Linkmarker", 5)
        assert response.metadata["missing_text"] == 1
        assert "record://r1" not in {r.source for r in response.results}
        report = await col.add_documents(records)
        assert report.unchanged == [f"record://r{i}" for i in range(3)] and not report.failed
        assert not stored.is_symlink()
        response = await col.search("Linkmarker", 5)
        assert len(response.results) == 3 and "missing_text" not in response.metadata
        assert (await col.verify_all()).ok
    assert elsewhere.read_bytes() == stored.read_bytes()
