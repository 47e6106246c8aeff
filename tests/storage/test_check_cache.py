"""The check cache: a pack that passed its checksum and its segment check, unchanged
since, is not read whole again by the next process; any change is checked again.

Each ``LocalSegments`` made here stands for a new process (it reads the record afresh).
File times move by clock ticks, so a change made to provoke a new check is repeated
until the file's ctime has really moved (a condition, not a timing).
"""

from __future__ import annotations

import asyncio
import os
import shutil
import stat
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from groundkit import Collection, StorageError
from groundkit.contracts import CheckedPackStore, PackCheck
from groundkit.lexical import segment as segment_module
from groundkit.lexical.bm25 import BM25Index, SegmentView
from groundkit.lexical.live import SEGMENT_CHECK
from groundkit.lexical.segment import Segment, build_segment, order_key, segment_from_arrays
from groundkit.storage import check_cache, segments
from groundkit.storage.check_cache import CHECKSUM, CheckCache, stamp_of
from groundkit.storage.segments import LocalSegments, manifest_bytes

Counts = Counter[str]


@pytest.fixture(autouse=True)
def settled(monkeypatch: pytest.MonkeyPatch) -> None:
    """Packs written by a test are seconds old at most: record them all the same."""
    monkeypatch.setattr(check_cache, "SETTLED_NS", 0)


@pytest.fixture
def counts(monkeypatch: pytest.MonkeyPatch) -> Counts:
    """How many packs were read for their checksum, and segments checked whole."""
    seen: Counts = Counter()
    read, damage = segments.read_checksum, segment_module.segment_damage

    def counted_read(handle: Any) -> str:
        seen["checksum"] += 1
        return read(handle)

    def counted_damage(seg: Segment) -> str | None:
        seen["segment"] += 1
        return damage(seg)

    monkeypatch.setattr(segments, "read_checksum", counted_read)
    monkeypatch.setattr(segment_module, "segment_damage", counted_damage)
    return seen


def _segment(docs: list[list[int]]) -> Segment:
    offsets, term_ids, tfs = [0], [], []
    for doc in docs:
        for term, tf in sorted(Counter(doc).items()):
            term_ids.append(term)
            tfs.append(tf)
        offsets.append(len(term_ids))
    order = [order_key(f"{i:064x}", 0, f"d{i}") for i in range(len(docs))]
    return build_segment(
        np.arange(1, len(docs) + 1, dtype=np.int64),
        np.asarray(offsets, dtype=np.int64),
        np.asarray(term_ids, dtype=np.int32),
        np.asarray(tfs, dtype=np.int32),
        np.asarray(order, dtype=np.uint64).reshape(len(docs), 3),
        np.zeros(len(docs), dtype=np.float64),
    )


DOCS = [[1, 2, 2, 3], [2, 4], [1, 5, 5, 5], [3, 4, 6], [6, 6, 1]]


async def _written(directory: Path) -> tuple[Path, dict[str, Any]]:
    entry = await LocalSegments(directory).write_pack(
        "seg-1", _segment(DOCS).arrays(), {"docs": len(DOCS)}
    )
    return directory / "seg-1.pack", entry


def _load(directory: Path, entry: dict[str, Any]) -> dict[str, Any]:
    """The pack loaded and checked by a new store, as a new process would."""
    arrays, _ = asyncio.run(LocalSegments(directory).load_checked_pack(entry, SEGMENT_CHECK))
    return arrays


def _changed(path: Path, change: Callable[[], None]) -> None:
    """Run ``change`` until the file's ctime has moved (file times move by ticks)."""
    before = path.stat().st_ctime_ns
    for _ in range(1000):
        change()
        if path.stat().st_ctime_ns != before:
            return
        time.sleep(0.002)
    raise AssertionError("the file's ctime never moved")


def _rewrite(path: Path, data: bytes) -> None:
    """``data`` written over the file in place (same inode), its mtime set back."""
    kept = path.stat()

    def change() -> None:
        with open(path, "r+b") as handle:
            handle.write(data)
        os.utime(path, ns=(kept.st_atime_ns, kept.st_mtime_ns))

    _changed(path, change)
    assert path.stat().st_mtime_ns == kept.st_mtime_ns and path.stat().st_ino == kept.st_ino


def _flipped(path: Path) -> bytes:
    data = bytearray(path.read_bytes())
    data[-1] ^= 0x01
    return bytes(data)


# -- what is skipped -----------------------------------------------------------------------


def test_a_second_open_reads_no_pack_whole(tmp_path: Path, counts: Counts) -> None:
    _, entry = asyncio.run(_written(tmp_path / "c.segments"))
    first = _load(tmp_path / "c.segments", entry)
    assert counts == {"checksum": 1, "segment": 1}
    second = _load(tmp_path / "c.segments", entry)
    assert counts == {"checksum": 1, "segment": 1}  # nothing read whole again
    assert all(np.array_equal(first[k], second[k]) for k in first)
    assert isinstance(LocalSegments(tmp_path), CheckedPackStore)


def test_a_plain_load_remembers_the_checksum_only(tmp_path: Path, counts: Counts) -> None:
    directory = tmp_path / "c.segments"
    _, entry = asyncio.run(_written(directory))
    asyncio.run(LocalSegments(directory).load_pack(entry))
    asyncio.run(LocalSegments(directory).load_pack(entry))
    assert counts == {"checksum": 1}
    _load(directory, entry)  # the segment check was never passed: run now, not the checksum
    _load(directory, entry)
    assert counts == {"checksum": 1, "segment": 1}


def test_another_check_is_run_on_a_remembered_file(tmp_path: Path, counts: Counts) -> None:
    directory = tmp_path / "c.segments"
    _, entry = asyncio.run(_written(directory))
    _load(directory, entry)
    ran: list[str] = []
    newer = PackCheck("segment-2", lambda arrays: ran.append("segment-2"))
    for _ in range(2):
        asyncio.run(LocalSegments(directory).load_checked_pack(entry, newer))
    assert ran == ["segment-2"] and counts["checksum"] == 1


def test_a_failed_check_is_not_remembered(tmp_path: Path, counts: Counts) -> None:
    directory = tmp_path / "c.segments"
    arrays = {k: np.array(v) for k, v in _segment(DOCS).arrays().items()}
    arrays["tfs"][0] = 0  # a posting of frequency 0: refused by the segment check
    entry = asyncio.run(LocalSegments(directory).write_pack("seg-1", arrays, {}))
    for _ in range(2):
        with pytest.raises(ValueError, match="frequency of 0"):
            _load(directory, entry)
    assert counts == {"checksum": 2, "segment": 2}


# -- what is checked again -----------------------------------------------------------------


def _renamed_over(path: Path, data: bytes) -> None:
    """``data`` renamed over the file: a new inode under the same name."""
    twin = path.with_name("twin")
    twin.write_bytes(data)
    os.replace(twin, path)


@pytest.mark.parametrize(
    "change", [_rewrite, _renamed_over], ids=["same size in place, mtime kept", "renamed over"]
)
def test_a_changed_pack_is_checked_again(
    tmp_path: Path, counts: Counts, change: Callable[[Path, bytes], None]
) -> None:
    directory = tmp_path / "c.segments"
    path, entry = asyncio.run(_written(directory))
    _load(directory, entry)
    change(path, path.read_bytes())  # the same bytes: checked again, and pass
    _load(directory, entry)
    assert counts == {"checksum": 2, "segment": 2}
    change(path, _flipped(path))  # other bytes: found
    with pytest.raises(StorageError, match="does not match its checksum"):
        _load(directory, entry)


def test_a_truncated_pack_is_refused(tmp_path: Path) -> None:
    directory = tmp_path / "c.segments"
    path, entry = asyncio.run(_written(directory))
    _load(directory, entry)
    with open(path, "r+b") as handle:
        handle.truncate(entry["bytes"] - 64)
    with pytest.raises(StorageError, match="cut short or replaced"):
        _load(directory, entry)


def test_another_expected_checksum_is_checked_again(tmp_path: Path, counts: Counts) -> None:
    directory = tmp_path / "c.segments"
    _, entry = asyncio.run(_written(directory))
    _load(directory, entry)
    with pytest.raises(StorageError, match="does not match its checksum"):
        _load(directory, {**entry, "xxh3": "0" * 16})
    assert counts["checksum"] == 2


# -- the record itself -----------------------------------------------------------------------


def _record(directory: Path) -> Path:
    return CheckCache(directory).path


@pytest.mark.parametrize(
    "damage",
    [
        pytest.param(lambda raw: raw[: len(raw) // 2], id="cut short"),
        pytest.param(lambda raw: raw.replace(b'"segment-1"', b'"segment-9"'), id="edited"),
        pytest.param(lambda raw: b"\x00" * len(raw), id="zeroed"),
        pytest.param(lambda raw: b"[]", id="not a record"),
    ],
)
def test_a_damaged_record_is_ignored_and_written_anew(
    tmp_path: Path, counts: Counts, damage: Callable[[bytes], bytes]
) -> None:
    directory = tmp_path / "c.segments"
    _, entry = asyncio.run(_written(directory))
    _load(directory, entry)
    record = _record(directory)
    record.write_bytes(damage(record.read_bytes()))
    _load(directory, entry)
    assert counts == {"checksum": 2, "segment": 2}
    _load(directory, entry)  # rewritten whole by the full check
    assert counts == {"checksum": 2, "segment": 2}
    assert stat.S_IMODE(record.stat().st_mode) == 0o600


def test_a_fifo_in_place_of_the_record_is_ignored_not_waited_on(
    tmp_path: Path, counts: Counts
) -> None:
    # Opened for reading, a FIFO waits for a writer: every open of the collection hung.
    directory = tmp_path / "c.segments"
    _, entry = asyncio.run(_written(directory))
    _load(directory, entry)
    record = _record(directory)
    record.unlink()
    os.mkfifo(record, 0o600)
    _load(directory, entry)
    assert counts == {"checksum": 2, "segment": 2}
    assert stat.S_ISREG(record.stat().st_mode)  # replaced by the record written anew


def test_a_record_others_can_write_is_ignored(tmp_path: Path, counts: Counts) -> None:
    directory = tmp_path / "c.segments"
    _, entry = asyncio.run(_written(directory))
    _load(directory, entry)
    _record(directory).chmod(0o666)
    _load(directory, entry)
    assert counts == {"checksum": 2, "segment": 2}


def test_a_record_of_another_index_vouches_for_nothing(tmp_path: Path, counts: Counts) -> None:
    first, second = tmp_path / "a.segments", tmp_path / "b.segments"
    _, entry = asyncio.run(_written(first))
    _load(first, entry)
    shutil.copytree(first, second)
    _record(second).parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(_record(first), _record(second))  # a's record where b's would be
    _load(second, entry)
    assert counts == {"checksum": 2, "segment": 2}
    stamp = stamp_of((first / "seg-1.pack").stat())
    assert CheckCache(second).passed("seg-1", stamp, entry["xxh3"]) == frozenset()
    assert CHECKSUM in CheckCache(first).passed("seg-1", stamp, entry["xxh3"])


def test_an_unwritable_cache_directory_checks_every_time(
    tmp_path: Path, counts: Counts, monkeypatch: pytest.MonkeyPatch
) -> None:
    blocked = tmp_path / "not-a-directory"
    blocked.write_text("a file where the cache directory would be", encoding="utf-8")
    monkeypatch.setenv("GROUNDKIT_CACHE_DIR", str(blocked))
    directory = tmp_path / "c.segments"
    _, entry = asyncio.run(_written(directory))
    for _ in range(3):
        _load(directory, entry)
    assert counts == {"checksum": 3, "segment": 3}


def test_the_default_cache_directory_holds_the_record(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("GROUNDKIT_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    directory = tmp_path / "c.segments"
    _, entry = asyncio.run(_written(directory))
    _load(directory, entry)
    (record,) = (tmp_path / "xdg" / "groundkit" / "checks").iterdir()
    assert record == _record(directory)
    assert stat.S_IMODE(record.parent.stat().st_mode) == 0o700


def test_a_file_changed_just_now_is_not_remembered(
    tmp_path: Path, counts: Counts, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Within a clock tick of the last write, a write in place may leave the file's
    times as they were: such a file is checked again at the next open."""
    monkeypatch.setattr(check_cache, "SETTLED_NS", 3600 * 10**9)
    directory = tmp_path / "c.segments"
    _, entry = asyncio.run(_written(directory))
    _load(directory, entry)
    _load(directory, entry)
    assert counts == {"checksum": 2, "segment": 2}


def test_the_record_is_bounded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(check_cache, "MAX_PACKS", 3)
    monkeypatch.setattr(check_cache, "MAX_FILES", 2)
    root = tmp_path / "cache"
    cache = CheckCache(tmp_path / "a", root=root)
    stamp = stamp_of(tmp_path.stat())
    for i in range(5):
        assert cache.record(f"seg-{i}", stamp, "x", [CHECKSUM])
    fresh = CheckCache(tmp_path / "a", root=root)
    assert [bool(fresh.passed(f"seg-{i}", stamp, "x")) for i in range(5)] == [
        False,
        False,
        True,
        True,
        True,
    ]
    # A file of someone else's in the folder is never counted or removed.
    (root / "checks" / "notes.txt").write_text("mine", encoding="utf-8")
    for other in ("b", "c", "d"):
        CheckCache(tmp_path / other, root=root).record("seg-0", stamp, "x", [CHECKSUM])
    assert len(list(cache.path.parent.glob("*.json"))) == 2
    assert (root / "checks" / "notes.txt").read_text(encoding="utf-8") == "mine"


def test_a_linked_checks_folder_is_never_written_through(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(check_cache, "MAX_FILES", 1)
    victim = tmp_path / "victim"
    victim.mkdir(mode=0o700)
    for i in range(3):
        (victim / f"file{i}").write_text(str(i), encoding="utf-8")
    root = tmp_path / "cache"
    root.mkdir()
    (root / "checks").symlink_to(victim, target_is_directory=True)
    cache = CheckCache(tmp_path / "idx", root=root)
    stamp = stamp_of(tmp_path.stat())
    assert not cache.record("seg-0", stamp, "x", [CHECKSUM])
    assert sorted(p.name for p in victim.iterdir()) == ["file0", "file1", "file2"]
    assert CheckCache(tmp_path / "idx", root=root).passed("seg-0", stamp, "x") == frozenset()
    # A record put there by whoever made the link is not read through it either.
    real = CheckCache(tmp_path / "idx", root=tmp_path / "real")
    assert real.record("seg-0", stamp, "x", [CHECKSUM])
    shutil.copy(real.path, victim / real.path.name)
    assert CheckCache(tmp_path / "idx", root=root).passed("seg-0", stamp, "x") == frozenset()


# -- a collection --------------------------------------------------------------------------


async def _ranking(index: Path, base: Path) -> list[list[tuple[str, float]]]:
    async with Collection.open(index, base_dir=base, create=False) as col:
        return [
            [(r.chunk_id, r.score) for r in (await col.search(query, 5)).results]
            for query in ("kettle tea", "granite", "harvest orchard notes", "pools")
        ]


def _notes(base: Path) -> None:
    base.mkdir(parents=True)
    for i, topic in enumerate(("tea kettles", "granite ridge", "orchard harvest", "tide pools")):
        lines = [f"Note {i}.{p} on {topic}, entry {i * 5 + p}." for p in range(12)]
        (base / f"n{i}.md").write_text("\n\n".join(lines), encoding="utf-8")


@pytest.fixture
def collection_files(tmp_path: Path) -> Iterator[tuple[Path, Path]]:
    base, index = tmp_path / "base", tmp_path / "index"
    _notes(base)

    async def ingest() -> None:
        async with Collection.open(index, base_dir=base) as col:
            await col.ingest(base)

    asyncio.run(ingest())
    yield index, base


def test_a_collection_reopened_reads_no_pack_whole_and_ranks_alike(
    collection_files: tuple[Path, Path], counts: Counts, monkeypatch: pytest.MonkeyPatch
) -> None:
    index, base = collection_files
    first = asyncio.run(_ranking(index, base))
    assert counts["checksum"] >= 2 and counts["segment"] >= 1  # a segment, a vocabulary
    counts.clear()
    assert asyncio.run(_ranking(index, base)) == first
    assert counts == {}
    blocked = index.parent / "blocked"
    blocked.write_text("a file where the cache directory would be", encoding="utf-8")
    monkeypatch.setenv("GROUNDKIT_CACHE_DIR", str(blocked))
    assert asyncio.run(_ranking(index, base)) == first  # no cache at all: the same


def test_a_collection_pack_damaged_after_a_clean_open_is_rebuilt(
    collection_files: tuple[Path, Path],
) -> None:
    index, base = collection_files
    first = asyncio.run(_ranking(index, base))
    (directory,) = index.glob("*.segments")
    manifest = segments.parse_manifest((directory / "manifest.json").read_bytes(), "m")
    path = directory / f"{manifest['parts'][0]['segment']['name']}.pack"
    _rewrite(path, _flipped(path))

    async def reopened() -> str | None:
        async with Collection.open(index, base_dir=base, create=False) as col:
            await col.search("kettle", 3)
            return (await col.retriever()).lexical.rebuilt_because

    assert "checksum" in (asyncio.run(reopened()) or "")
    assert asyncio.run(_ranking(index, base)) == first
    (directory / "manifest.json").write_bytes(manifest_bytes(manifest))  # the damaged one
    assert "checksum" in (asyncio.run(reopened()) or "")  # found again: never remembered


# -- the same results, with and without ------------------------------------------------------


@settings(max_examples=40, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    docs=st.lists(st.lists(st.integers(1, 12), min_size=1, max_size=20), min_size=1, max_size=60),
    queries=st.lists(st.lists(st.integers(1, 14), min_size=1, max_size=4), min_size=1, max_size=5),
)
def test_a_remembered_pack_searches_as_a_checked_one(
    tmp_path_factory: pytest.TempPathFactory,
    docs: list[list[int]],
    queries: list[list[int]],
) -> None:
    directory = tmp_path_factory.mktemp("hyp") / "c.segments"
    seg = _segment(docs)
    entry = asyncio.run(LocalSegments(directory).write_pack("seg-1", seg.arrays(), {}))
    checked = segment_from_arrays(_load(directory, entry))
    remembered = segment_from_arrays(_load(directory, entry), checked=True)
    assert CheckCache(directory).passed(
        "seg-1", stamp_of((directory / "seg-1.pack").stat()), entry["xxh3"]
    ) == {CHECKSUM, SEGMENT_CHECK.name}
    indexes = [BM25Index([SegmentView.fresh(s)]) for s in (seg, checked, remembered)]
    for query in queries:
        wanted = Counter(query)
        results = [index.search_ids(wanted, 5) for index in indexes]
        assert results[0] == results[1] == results[2]


def test_a_remembered_pack_is_mapped_without_filling_its_page_tables(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A pack just read whole has its pages in memory: mapped populated. A remembered one
    may not be read at all: mapped as is, its pages faulted in as searches touch them."""
    populated: list[bool] = []
    real = segments._map_open_pack

    def recorded(fd: int, path: Path, size: int, *, populate: bool = True) -> Any:
        populated.append(populate)
        return real(fd, path, size, populate=populate)

    monkeypatch.setattr(segments, "_map_open_pack", recorded)
    directory = tmp_path / "c.segments"
    _, entry = asyncio.run(_written(directory))
    first, second = _load(directory, entry), _load(directory, entry)
    assert populated == [True, False]
    assert all(np.array_equal(first[k], second[k]) for k in first)


def test_a_cache_location_that_cannot_be_a_path_checks_every_time(
    tmp_path: Path, counts: Counts
) -> None:
    directory = tmp_path / "c.segments"
    _, entry = asyncio.run(_written(directory))
    for _ in range(2):
        store = LocalSegments(directory, check_root=Path("no\0where"))
        asyncio.run(store.load_checked_pack(entry, SEGMENT_CHECK))
    assert counts == {"checksum": 2, "segment": 2}


def test_settled_is_judged_by_the_clock_before_the_stamp(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Checks that took long do not make a file that changed just before its stamp
    # look settled: the clock read before the stamp decides.
    monkeypatch.setattr(check_cache, "SETTLED_NS", 1_000_000_000)
    cache = CheckCache(tmp_path / "idx", root=tmp_path / "cache")
    old = stamp_of(tmp_path.stat())
    stamp = check_cache.FileStamp(
        old.device, old.inode, old.size, old.mtime_ns, time.time_ns() - 5_000_000_000
    )
    assert not cache.record("seg-0", stamp, "x", [CHECKSUM], seen_ns=stamp.ctime_ns + 10)
    assert cache.record("seg-0", stamp, "x", [CHECKSUM], seen_ns=stamp.ctime_ns + 2_000_000_000)
