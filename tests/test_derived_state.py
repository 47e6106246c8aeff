"""The lexical index files are checked against the store, never trusted beyond it.

Each case damages the files a collection keeps beside its store the way a hand edit,
a hostile user or a crash would, with every checksum made to match where the format
has one, and asks for the same ranking a collection rebuilt from the store gives: a
manifest that leaves a segment out, names one twice or states the wrong key range;
arrays out of range behind a valid checksum; a pack cut short under a process that
has it mapped; files that cannot be written at all (the write is kept, and said to
be unsaved, typed). No case may end in a wrong result, an untyped error or a dead
process.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import json
import os
import shutil
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from groundkit import Collection, StorageError
from groundkit.lexical import bm25
from groundkit.lexical.vocabulary import VocabularyPack
from groundkit.storage import segments
from groundkit.storage.segments import manifest_bytes, write_pack_file

TOPICS = ("tide pools and kelp", "granite ridge trails", "orchard harvest notes", "tea kettles")
QUERIES = ("kelp tide", "granite trails", "harvest", "kettles tea", "Marker0003x", "entry item")


def _batch(round_: int) -> list[dict[str, str]]:
    return [
        {
            "id": f"r{round_}-{i}",
            "text": " ".join(
                f"Entry {i}.{p} about {TOPICS[(i + p + round_) % 4]}, item {i * 7 + p}"
                f" Marker{round_:03d}{i}x."
                for p in range(3)
            ),
        }
        for i in range(12)
    ]


async def _write(index: Path, base: Path, rounds: range) -> None:
    """One write per round: each leaves a segment of its own."""
    async with Collection.open(index, base_dir=base) as col:
        for round_ in rounds:
            await col.add_documents(_batch(round_))


async def _ranking(col: Collection) -> list[list[tuple[str, float]]]:
    out = []
    for query in QUERIES:
        response = await col.search(query, 10)
        out.append([(r.chunk_id, round(r.score, 9)) for r in response.results])
    return out


async def _rebuilt_because(col: Collection) -> str | None:
    return (await col.retriever()).lexical.rebuilt_because


def _files(index: Path) -> Path:
    (directory,) = index.glob("*.segments")
    return directory


def _manifest(index: Path) -> dict[str, Any]:
    raw = json.loads((_files(index) / "manifest.json").read_text(encoding="utf-8"))
    raw.pop("body_xxh3", None)
    return dict(raw)


def _save_manifest(index: Path, manifest: dict[str, Any]) -> None:
    """Write ``manifest`` with a matching checksum: an edit by someone who knows the format."""
    (_files(index) / "manifest.json").write_bytes(manifest_bytes(manifest))


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Path]]:
    """A collection of four segments (four writes), never merged, and its rankings."""
    root = tmp_path_factory.mktemp("derived")
    base, index = root / "base", root / "index"
    base.mkdir()
    asyncio.run(_write(index, base, range(4)))
    assert len(_manifest(index)["parts"]) == 4
    yield index, base


@pytest.fixture(scope="module")
def expected(written: tuple[Path, Path]) -> list[list[tuple[str, float]]]:
    """The rankings of the same store with no index files: a rebuild."""
    index, base = written
    fresh = index.parent / "fresh"
    shutil.copytree(index, fresh)
    shutil.rmtree(_files(fresh))

    async def rank() -> list[list[tuple[str, float]]]:
        async with Collection.open(fresh, base_dir=base) as col:
            return await _ranking(col)

    ranking = asyncio.run(rank())
    assert all(ranking), ranking
    return ranking


@pytest.fixture
def copy(written: tuple[Path, Path], tmp_path: Path) -> tuple[Path, Path]:
    index, base = written
    shutil.copytree(index, tmp_path / "index")
    return tmp_path / "index", base


def _drop_largest(manifest: dict[str, Any]) -> None:
    manifest["parts"].remove(max(manifest["parts"], key=lambda e: e["segment"]["bytes"]))


def _name_one_twice(manifest: dict[str, Any]) -> None:
    manifest["parts"].append(manifest["parts"][0])


def _zero_max_key(manifest: dict[str, Any]) -> None:
    manifest["max_key"] = 0


def _understate(manifest: dict[str, Any]) -> None:
    _drop_largest(manifest)
    manifest["live_chunks"] = sum(1 for _ in manifest["parts"])  # no longer what it holds


EDITS = {
    "a part left out": _drop_largest,
    "a part named twice": _name_one_twice,
    "max_key 0": _zero_max_key,
    "a part left out, count edited": _understate,
}


def _fifo(path: Path) -> None:
    os.mkfifo(path)


def _endless(path: Path) -> None:
    path.symlink_to("/dev/zero")


def _oversized(path: Path) -> None:
    with path.open("wb") as out:  # sparse: no disk is taken
        out.truncate(segments.MANIFEST_MAX_BYTES + 1)


NOT_A_MANIFEST = {"a FIFO": _fifo, "a link to /dev/zero": _endless, "too large": _oversized}


async def _served_then_saved(
    index: Path, base: Path, expected: list[list[tuple[str, float]]], *, flagged: bool = True
) -> None:
    """The damaged index is rebuilt from the store and answers as before (``flagged``:
    the open says why), and the rebuild is saved: the next open has nothing to repair."""
    async with Collection.open(index, base_dir=base) as col:
        assert await _ranking(col) == expected
        if flagged:
            assert await _rebuilt_because(col)
        await col.add_documents([{"id": "late", "text": "a later kettle note"}])
    async with Collection.open(index, base_dir=base) as col:
        assert await _rebuilt_because(col) is None


@pytest.mark.parametrize("what", sorted(NOT_A_MANIFEST))
async def test_a_manifest_that_is_no_small_regular_file_is_rebuilt_not_read(
    copy: tuple[Path, Path], expected: list[list[tuple[str, float]]], what: str
) -> None:
    # Read whole, a FIFO blocks the open for good and /dev/zero never ends (memory grows
    # until the machine gives out): the manifest is read as a bounded regular file.
    index, base = copy
    manifest = _files(index) / "manifest.json"
    manifest.unlink()
    NOT_A_MANIFEST[what](manifest)
    await _served_then_saved(index, base, expected)


@pytest.mark.parametrize("kind", ["seg", "voc"])
async def test_a_fifo_in_place_of_a_pack_is_rebuilt_not_waited_on(
    copy: tuple[Path, Path], expected: list[list[tuple[str, float]]], kind: str
) -> None:
    # Opened for reading, a FIFO waits for a writer: every open of the collection hung.
    index, base = copy
    pack = sorted(_files(index).glob(f"{kind}-*.pack"))[0]
    pack.unlink()
    os.mkfifo(pack)
    await _served_then_saved(index, base, expected, flagged=False)


@pytest.mark.parametrize("edit", sorted(EDITS))
async def test_a_manifest_that_disagrees_with_the_store_is_rebuilt(
    copy: tuple[Path, Path], expected: list[list[tuple[str, float]]], edit: str
) -> None:
    index, base = copy
    manifest = _manifest(index)
    EDITS[edit](manifest)
    _save_manifest(index, manifest)
    async with Collection.open(index, base_dir=base) as col:
        assert await _ranking(col) == expected
        assert await _rebuilt_because(col)
        await col.add_documents([{"id": "late", "text": "a later kettle note"}])
    # The rebuild was saved: the next process starts from it, nothing to repair.
    async with Collection.open(index, base_dir=base) as col:
        assert await _rebuilt_because(col) is None
        assert [h[:10] for h in await _ranking(col)] != []


async def test_a_manifest_edited_without_its_checksum_is_rebuilt(
    copy: tuple[Path, Path], expected: list[list[tuple[str, float]]]
) -> None:
    index, base = copy
    path = _files(index) / "manifest.json"
    raw = json.loads(path.read_text(encoding="utf-8"))
    _drop_largest(raw)  # body_xxh3 left as it was
    path.write_text(json.dumps(raw), encoding="utf-8")
    async with Collection.open(index, base_dir=base) as col:
        assert await _ranking(col) == expected
        assert "checksum" in (await _rebuilt_because(col) or "")


async def _damage_postings(index: Path) -> None:
    """Rewrite the largest segment with its term ids past the vocabulary of the
    segment, as a pack with a valid checksum, and name it in the manifest."""
    directory = _files(index)
    manifest = _manifest(index)
    part = max(manifest["parts"], key=lambda e: e["segment"]["bytes"])
    files = segments.LocalSegments(directory)
    arrays, meta = await files.load_pack(part["segment"])
    damaged = {k: np.array(v) for k, v in arrays.items()}
    key = "docs" if "docs" in damaged else sorted(damaged)[0]
    damaged[key] = damaged[key] + np.asarray(10**6, dtype=damaged[key].dtype)
    part["segment"] = write_pack_file(directory, "seg-damaged", damaged, meta)
    _save_manifest(index, manifest)


async def test_arrays_out_of_range_behind_a_valid_checksum_are_rebuilt(
    copy: tuple[Path, Path], expected: list[list[tuple[str, float]]]
) -> None:
    index, base = copy
    await _damage_postings(index)
    async with Collection.open(index, base_dir=base) as col:
        assert await _ranking(col) == expected
        assert await _rebuilt_because(col)
    async with Collection.open(index, base_dir=base) as col:
        assert await _rebuilt_because(col) is None  # the rebuild replaced the files
        assert await _ranking(col) == expected


async def test_damage_found_by_a_search_rebuilds_and_answers(
    copy: tuple[Path, Path],
    expected: list[list[tuple[str, float]]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Damage only the search itself can see (the kernel's checks, say): the search
    rebuilds the index from the store and answers from it, and so do the next ones."""
    index, base = copy
    async with Collection.open(index, base_dir=base) as col:
        await col.search("kelp", 3)
        damaged = (await col.retriever()).lexical.index
        real = bm25.BM25Index.search_ids

        def search_ids(self: bm25.BM25Index, *args: Any, **kwargs: Any) -> Any:
            if self is damaged:
                raise StorageError("a posting of the index points past its segment")
            return real(self, *args, **kwargs)

        monkeypatch.setattr(bm25.BM25Index, "search_ids", search_ids)
        assert await _ranking(col) == expected
        assert "points past" in (await _rebuilt_because(col) or "")
    monkeypatch.undo()
    async with Collection.open(index, base_dir=base) as col:
        assert await _rebuilt_because(col) is None
        assert await _ranking(col) == expected


async def test_a_damaged_manifest_adopted_from_another_writer_is_caught(
    copy: tuple[Path, Path],
) -> None:
    """A long-lived reader adopts the manifest another process saved after its write;
    that manifest leaves a part out: the reader's count check rebuilds instead."""
    index, base = copy
    async with Collection.open(index, base_dir=base) as reader:
        await _ranking(reader)
        await _write(index, base, range(4, 5))
        # Left out consistently: the count it states is cut by the part's documents.
        manifest = _manifest(index)
        part = max(manifest["parts"], key=lambda e: e["segment"]["bytes"])
        _, meta = await segments.LocalSegments(_files(index)).load_pack(part["segment"])
        manifest["parts"].remove(part)
        manifest["live_chunks"] -= meta["docs"]
        _save_manifest(index, manifest)
        got = await _ranking(reader)
        assert "current chunks" in (await _rebuilt_because(reader) or "")
    fresh = index.parent / "fresh"
    shutil.copytree(index, fresh)
    shutil.rmtree(_files(fresh))
    async with Collection.open(fresh, base_dir=base) as col:
        assert got == await _ranking(col)


_TRUNCATE = textwrap.dedent(
    """
    import asyncio, json, os, sys
    from pathlib import Path
    from groundkit import Collection
    from groundkit.lexical import live

    live._PACK_CHECK_INTERVAL = 0.0
    index, base = Path(sys.argv[1]), Path(sys.argv[2])
    queries = json.loads(sys.argv[3])

    async def main():
        async with Collection.open(index, base_dir=base) as col:
            before = [[r.chunk_id for r in (await col.search(q, 10)).results] for q in queries]
            (files,) = index.glob("*.segments")
            manifest = json.loads((files / "manifest.json").read_text())
            for part in manifest["parts"]:
                path = files / (part["segment"]["name"] + ".pack")
                os.truncate(path, 4096)  # in place, under this process's mapping
            after = [[r.chunk_id for r in (await col.search(q, 10)).results] for q in queries]
            print(json.dumps({"same": before == after,
                              "why": (await col.retriever()).lexical.rebuilt_because}))

    asyncio.run(main())
    """
)


def test_a_pack_cut_short_under_a_mapping_is_rebuilt_not_a_crash(
    copy: tuple[Path, Path],
) -> None:
    index, base = copy
    done = subprocess.run(
        [sys.executable, "-c", _TRUNCATE, str(index), str(base), json.dumps(QUERIES)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, (done.returncode, done.stderr[-2000:])
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert found["same"] and "changed on disk" in found["why"]


# -- files that cannot be written ---------------------------------------------------------


async def test_a_manifest_that_cannot_be_replaced_keeps_the_write(
    copy: tuple[Path, Path],
) -> None:
    index, base = copy
    path = _files(index) / "manifest.json"
    path.unlink()
    path.mkdir()
    async with Collection.open(index, base_dir=base) as col:
        report = await col.add_documents([{"id": "kept", "text": "Keptmarker about kettles"}])
        assert report.added == ["record://kept"]
        assert report.notices and "not saved" in report.notices[0]
        assert str(path) in report.notices[0]
        hits = (await col.search("Keptmarker", 3)).results
        assert [h.source for h in hits] == ["record://kept"]
        assert (await col.verify_all()).ok
    path.rmdir()
    async with Collection.open(index, base_dir=base) as col:
        hits = (await col.search("Keptmarker", 3)).results
        assert [h.source for h in hits] == ["record://kept"]
        assert (await col.verify(hits[0])).verification == "verified"


async def test_a_full_disk_keeps_the_write_and_says_so(
    copy: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    index, base = copy

    def full(*args: Any, **kwargs: Any) -> int:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    async with Collection.open(index, base_dir=base) as col:
        monkeypatch.setattr(segments, "_write_atomically", full)
        report = await col.add_documents([{"id": "full", "text": "Fullmarker about kettles"}])
        assert report.added == ["record://full"]
        assert len(report.notices) == 1 and "no space left" in report.notices[0]
        assert [h.source for h in (await col.search("Fullmarker", 3)).results] == ["record://full"]
        monkeypatch.undo()
        # The next write saves everything, the unsaved segment included.
        report = await col.add_documents([{"id": "next", "text": "Nextmarker"}])
        assert report.notices == []
    async with Collection.open(index, base_dir=base) as col:
        assert await _rebuilt_because(col) is None
        assert [h.source for h in (await col.search("Fullmarker", 3)).results] == ["record://full"]


@contextlib.contextmanager
def _read_only(directory: Path) -> Iterator[bool]:
    """``directory`` made read-only: a read-only bind mount for root (which permissions
    do not stop; yields True), permissions for anyone else (False); skipped where neither
    can be done."""
    if os.geteuid() != 0:
        directory.chmod(0o555)
        try:
            yield False
        finally:
            directory.chmod(0o755)
        return
    mount = shutil.which("mount")
    steps = [["--bind", str(directory), str(directory)], ["-o", "remount,ro,bind", str(directory)]]
    if mount is None or subprocess.run([mount, *steps[0]], capture_output=True).returncode:
        pytest.skip("no read-only mount possible here (mount needs CAP_SYS_ADMIN)")
    try:
        if subprocess.run([mount, *steps[1]], capture_output=True).returncode:
            pytest.skip("no read-only remount possible here")
        yield True
    finally:
        subprocess.run(["umount", str(directory)], check=True)


def test_a_read_only_index_directory_is_searched_and_never_written(tmp_path: Path) -> None:
    """On a read-only filesystem the collection is searched in place and an ingest is a
    clear error; a directory only this user may not write is a clear error for both
    (tests/storage/test_read_only_media.py covers the read-only mount in depth)."""
    base, index = tmp_path / "base", tmp_path / "ro" / "index"
    base.mkdir()
    (base / "a.txt").write_text("tea kettles whistle", encoding="utf-8")
    grk = [sys.executable, "-m", "groundkit.cli"]
    first = subprocess.run(
        [*grk, "ingest", str(base), "--index-dir", str(index), "-q"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert first.returncode == 0, first.stderr
    (base / "b.txt").write_text("coffee grinders hum", encoding="utf-8")
    with _read_only(index.parent) as mounted:
        for command in (["ingest", str(base)], ["search", "tea"]):
            done = subprocess.run(
                [*grk, *command, "--index-dir", str(index)],
                capture_output=True,
                text=True,
                cwd=tmp_path,
            )
            if mounted and command[0] == "search":
                assert done.returncode == 0, done
                assert "a.txt" in done.stdout
                continue
            assert done.returncode == 2, done
            assert "Traceback" not in done.stderr
            assert "read-only" in done.stderr or "not writable" in done.stderr
            assert "rebuild" not in done.stderr  # nothing is damaged: no advice to start anew


@contextlib.contextmanager
def _small_filesystem(directory: Path) -> Iterator[None]:
    """A 4 MiB tmpfs on ``directory`` (root only; skipped where it cannot be mounted)."""
    mount = shutil.which("mount")
    directory.mkdir(parents=True)
    if os.geteuid() != 0 or mount is None:
        pytest.skip("no tmpfs mount possible here (mount needs root)")
    made = subprocess.run(
        [mount, "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(directory)], capture_output=True
    )
    if made.returncode:
        pytest.skip("no tmpfs mount possible here (mount needs CAP_SYS_ADMIN)")
    try:
        yield
    finally:
        subprocess.run(["umount", str(directory)], check=True)


def test_a_full_disk_is_not_damage_and_nothing_is_moved_aside(tmp_path: Path) -> None:
    """With no room beside its file, SQLite cannot make its log files and calls it a disk
    I/O error. That is no damage: the collection must not be offered (or put) aside for a
    rebuild, and it serves again once there is room."""
    disk = tmp_path / "disk"
    grk = [sys.executable, "-m", "groundkit.cli"]
    with _small_filesystem(disk):
        base, index = disk / "base", disk / "index"
        base.mkdir()
        for i in range(30):
            (base / f"n{i}.md").write_text(f"note {i} about tea and water\n", encoding="utf-8")

        def run(*command: str) -> subprocess.CompletedProcess[str]:
            return subprocess.run(
                [*grk, *command, "--index-dir", str(index)],
                capture_output=True,
                text=True,
                cwd=disk,
            )

        assert run("ingest", str(base), "-q").returncode == 0
        files = sorted(p.name for p in index.iterdir())
        filler = disk / "filler"
        with filler.open("wb", buffering=0) as out, contextlib.suppress(OSError):
            while True:
                out.write(b"\0" * 65536)
        for command in (("search", "tea"), ("ingest", str(base), "--rebuild", "-q")):
            done = run(*command)
            assert done.returncode == 2, done
            assert "full filesystem" in done.stderr and "not damaged" in done.stderr, done
            assert "Traceback" not in done.stderr
            assert "rebuild" not in done.stderr.replace("--rebuild", "")
        # Nothing moved aside (SQLite may have begun its log files).
        left = sorted(p.name for p in index.iterdir())
        assert set(files) <= set(left) and not [n for n in left if "damaged" in n], left
        filler.unlink()
        found = run("search", "tea")
        assert found.returncode == 0 and "note" in found.stdout, found


async def test_a_vocabulary_that_fails_a_search_is_rebuilt_with_the_index(
    copy: tuple[Path, Path],
    expected: list[list[tuple[str, float]]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    index, base = copy
    async with Collection.open(index, base_dir=base) as col:
        await col.search("kelp", 3)
        live_index = (await col.retriever()).lexical
        assert live_index._pack is not None
        damaged = live_index._pack

        def find(self: VocabularyPack, *args: Any, **kwargs: Any) -> Any:
            if self is damaged:
                raise StorageError("the vocabulary pack holds an offset past its end")
            return real(self, *args, **kwargs)

        real = VocabularyPack.find
        monkeypatch.setattr(VocabularyPack, "find", find)
        live_index._terms.clear()
        assert await _ranking(col) == expected
        assert "vocabulary" in (await _rebuilt_because(col) or "")
        assert live_index._pack is not damaged  # written anew by the rebuild's save


async def test_an_overlay_that_overstates_its_removed_documents_is_rebuilt(
    copy: tuple[Path, Path],
) -> None:
    index, base = copy
    async with Collection.open(index, base_dir=base) as col:
        await col.delete(records=["r0-1", "r1-2"])
        truth = await _ranking(col)
    manifest = _manifest(index)
    files = segments.LocalSegments(_files(index))
    part = next(p for p in manifest["parts"] if p["overlay"] is not None)
    arrays, meta = await files.load_pack(part["overlay"])
    counts = np.array(arrays["df_counts"]) + 1000  # more than the segment holds
    damaged = {**{k: np.array(v) for k, v in arrays.items()}, "df_counts": counts}
    part["overlay"] = write_pack_file(_files(index), "ov-damaged", damaged, meta)
    _save_manifest(index, manifest)
    async with Collection.open(index, base_dir=base) as col:
        assert await _ranking(col) == truth
        assert "removed document counts" in (await _rebuilt_because(col) or "")
