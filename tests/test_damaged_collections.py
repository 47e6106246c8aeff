"""Damage to any persisted file: a clear error or a correct (maybe degraded) search, then
one re-ingest repairs it.

Every kind of file a collection keeps is deleted, truncated or garbled in turn: the
SQLite file and its WAL and shared memory, and every kind of file LanceDB writes
(manifests, the version hint, data fragments, deletion files, transactions, index
files), the newest and the oldest of each. After each, opening and searching must
either raise a groundkit error (never another exception) or return results that
verify; and one ingest (with ``rebuild_damaged`` when the metadata file itself is
unreadable) must leave the vector ids equal to the chunk ids, every document
confirmed, every mode answering without a fallback, and every chunk verified.
"""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from groundkit import ChunkingConfig, Collection, GroundkitError, StorageError
from tests.support import ToyEmbedder, assert_all_verify, write_tree

CHUNKS = ChunkingConfig(max_chars=120, overlap_chars=0)
QUERIES = ("tide pools and kelp", "granite ridge", "orchard harvest")
TOPICS = ("tide pools and kelp", "granite ridge trails", "orchard harvest notes")
# Where each kind of file lives under the index directory, and whether it is one file.
KINDS = {
    "default.sqlite3": True,
    "default.sqlite3-wal": True,
    "default.sqlite3-shm": True,
    "default.lance/_versions/*.manifest": False,
    "default.lance/_versions/latest_version_hint.json": True,
    "default.lance/data/*": False,
    "default.lance/_deletions/*": False,
    "default.lance/_transactions/*": False,
    "default.lance/_indices/*/*": False,
}
HOW = ("delete", "truncate", "garble")
CASES = [
    (kind, which, how)
    for kind, single in KINDS.items()
    for which in (("only",) if single else ("newest", "oldest"))
    for how in HOW
]


def _corpus(round_: int) -> dict[str, str]:
    return {
        f"notes/{i:02d}.md": "\n\n".join(
            f"Entry {i}.{p} (round {round_}) about {TOPICS[(i + p) % 3]} and item {i * 7 + p}."
            for p in range(4)
        )
        for i in range(30)
    }


async def _open(index: Path, base: Path, *, rebuild: bool = False) -> Collection:
    return await Collection.open(
        index, base_dir=base, chunking=CHUNKS, embedder=ToyEmbedder(), rebuild_damaged=rebuild
    )


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Path]]:
    """A collection with several vector versions, a deletion file, an ANN index and a
    WAL not yet checkpointed (copied while the writer still had the file open)."""
    root = tmp_path_factory.mktemp("pristine")
    base, index, frozen = root / "base", root / "live", root / "frozen"

    async def build() -> None:
        write_tree(base, _corpus(0))
        col = await _open(index, base)
        try:
            await col.ingest(base)
            changed = _corpus(1)
            write_tree(base, {name: changed[name] for name in ("notes/03.md", "notes/04.md")})
            (base / "notes" / "29.md").unlink()
            await col.ingest(base)
            assert col.vector_store is not None
            col.vector_store.ann_threshold = 64  # type: ignore[attr-defined]
            await col.vector_store.optimize()
            write_tree(base, {"notes/late.md": "A late note on tide pools and kelp.\n"})
            (base / "notes" / "28.md").unlink()
            await col.ingest(base)  # rows beside the index, and a partial delete
            shutil.copytree(index, frozen)
        finally:
            await col.close()

    asyncio.run(build())
    yield frozen, base


def _target(index: Path, kind: str, which: str) -> Path | None:
    found = sorted(index.glob(kind), key=lambda p: (p.stat().st_mtime_ns, p.name))
    found = [p for p in found if p.is_file()]
    if not found:
        return None
    return found[0] if which == "oldest" else found[-1]


def _damage(path: Path, how: str) -> None:
    if how == "delete":
        path.unlink()
        return
    size = path.stat().st_size
    with open(path, "r+b") as handle:
        if how == "truncate":
            handle.truncate(size // 2)
        else:  # garble the middle, deterministically
            handle.seek(size // 2)
            handle.write(bytes((x * 37 + 11) % 256 for x in range(max(1, min(64, size // 4)))))


def test_the_pristine_collection_has_every_kind_of_file(pristine: tuple[Path, Path]) -> None:
    frozen, _ = pristine
    missing = [kind for kind in KINDS if _target(frozen, kind, "newest") is None]
    assert missing == []


async def _serve_or_refuse(col: Collection) -> None:
    """Every answer is a groundkit error, or results that are exactly what the store
    holds, whose verdicts are honest: a lost WAL can take the store back to before the
    last ingest, so a result may cite a file changed or deleted since (drifted or
    unresolvable), but never text the store does not hold, and verified only when the
    source still reads so."""
    for mode in ("bm25", "dense", "hybrid"):
        for query in QUERIES:
            try:
                response = await col.search(query, 8, mode=mode)
            except GroundkitError:
                continue
            for result in response.results:
                checked = await col.fetch_chunk(result.chunk_id)
                assert checked.content == result.content
                assert checked.citation == result.citation
                source = col.base_dir / result.source
                if checked.verification == "verified":
                    text = source.read_text(encoding="utf-8")
                    assert text[result.start_offset : result.end_offset] == result.content
                elif not source.exists():
                    assert checked.verification == "unresolvable"


async def _assert_repaired(col: Collection) -> None:
    assert col.vector_store is not None
    inventory = await col.vector_store.inventory()
    stored = {row.chunk_id: row.document_id async for b in col.store.iter_chunks() for row in b}
    assert inventory == stored
    assert await col.store.documents_missing_vectors() == []
    for mode in ("bm25", "dense", "hybrid"):
        for query in QUERIES:
            response = await col.search(query, 8, mode=mode)
            assert "degraded" not in response.metadata, (mode, response.metadata)
            assert response.results
            await assert_all_verify(response.results, col.base_dir)
    report = await col.verify_all()
    assert report.ok and report.verified == len(stored)


@pytest.mark.parametrize(("kind", "which", "how"), CASES)
async def test_damage_is_refused_or_served_correctly_then_repaired(
    pristine: tuple[Path, Path], tmp_path: Path, kind: str, which: str, how: str
) -> None:
    frozen, base = pristine
    index = tmp_path / "index"
    shutil.copytree(frozen, index)
    target = _target(index, kind, which)
    assert target is not None
    _damage(target, how)

    try:
        col = await _open(index, base)
    except GroundkitError:
        col = None  # a clear error: the metadata file is unreadable
    if col is not None:
        try:
            await _serve_or_refuse(col)
            try:
                report = await col.ingest(base)
            except GroundkitError:
                report = None  # damage only the integrity check can name
        finally:
            await col.close()
        if report is not None:
            assert not report.failed
            col = await _open(index, base)
            try:
                await _assert_repaired(col)
            finally:
                await col.close()
            return
    # The metadata file itself: one ingest with rebuild_damaged starts it anew. A deleted
    # one is made anew by the plain open, with a new collection uid: the vector table
    # stamped with the old uid is refused (it may be another collection's) until
    # rebuild_damaged takes it over.
    col = await _open(index, base, rebuild=True)
    try:
        report = await col.ingest(base)
        assert not report.failed
        if kind != "default.sqlite3" or how != "delete":
            assert report.repairs, "a rebuild must say what it did"
        await _assert_repaired(col)
    finally:
        await col.close()
    if kind != "default.sqlite3" or how != "delete":
        assert sorted(p.name for p in index.glob("default.sqlite3.damaged-*"))


@pytest.mark.parametrize("took", [0, 1])
async def test_a_refused_drop_says_whether_it_removed_anything(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, took: int
) -> None:
    """A folder the user may not write refuses its first removal: nothing went, and the
    message says so; a folder that loses some files first is said partly removed."""
    import errno

    from groundkit.storage import StoreLocation

    base, index = tmp_path / "base", tmp_path / "idx"
    write_tree(base, {"a.txt": "Alpha text."})
    async with Collection.open(index, base_dir=base) as col:
        await col.ingest(base)
    where = StoreLocation.resolve("default", index_dir=index)

    def refused(path: Any, *args: Any, **kwargs: Any) -> None:
        for inside in sorted(Path(path).rglob("*"))[::-1]:
            if took == 0:
                break
            if inside.is_file():
                inside.unlink()
                break
        raise OSError(errno.EACCES, "Permission denied")

    monkeypatch.setattr(shutil, "rmtree", refused)
    said = "nothing was removed" if took == 0 else "partly removed, run the drop again"
    with pytest.raises(StorageError, match=said):
        await where.drop()
    assert await where.exists()


async def test_a_drop_that_fails_leaves_the_collection_to_drop_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The metadata file goes last: a drop stopped on another file leaves a collection
    that still exists, and a second drop finishes it."""
    import errno

    from groundkit.storage import StoreLocation

    base, index = tmp_path / "base", tmp_path / "idx"
    write_tree(base, {"a.txt": "Alpha text."})
    async with Collection.open(index, base_dir=base, embedder=ToyEmbedder()) as col:
        await col.ingest(base)
    where = StoreLocation.resolve("default", index_dir=index)
    real_rmtree = shutil.rmtree

    def refused(path: Any, *args: Any, **kwargs: Any) -> None:
        if str(path).endswith(".lance"):
            raise OSError(errno.EROFS, "Read-only file system")
        real_rmtree(path, *args, **kwargs)

    monkeypatch.setattr(shutil, "rmtree", refused)
    with pytest.raises(StorageError, match="nothing was removed"):
        await where.drop()
    assert await where.exists()
    assert (index / "default.sqlite3").exists()
    monkeypatch.undo()
    await where.drop()
    assert not await where.exists()
    assert not [p.name for p in index.iterdir() if p.name.startswith("default")]
