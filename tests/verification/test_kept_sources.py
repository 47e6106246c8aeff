"""Kept sources: a file's extracted text kept with the collection, compressed and named
by its hash, so a host without the file verifies against it and says so
(adr/0062-kept-sources.md).

Real files, a real PDF, real SQLite; the shared case on the test PostgreSQL and the
moto S3 server.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import time
import uuid
import zlib
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from groundkit import (
    Collection,
    IngestConfig,
    RetrievalResult,
    check_citation,
    check_receipts,
)
from groundkit.cli import main as grk_main
from groundkit.storage.snapshots import (
    KEPT_SUFFIX,
    ORPHAN_GRACE_SECONDS,
    KeptCopyError,
    ObjectSnapshots,
    kept_name,
    pack_kept,
    unpack_kept,
)
from groundkit.utils.hashing import sha256_text
from tests.s3_support import S3Server
from tests.sources import make_pdf
from tests.support import ToyEmbedder

NOTES = "Kettles boil water at sea level.\n\nOolong leaves unfurl slowly in warm water.\n"
KEEP = IngestConfig(keep_sources=True)


def kept_files(index: Path) -> list[Path]:
    folder = index / "default.snapshots"
    return sorted(folder.glob(f"*{KEPT_SUFFIX}")) if folder.is_dir() else []


async def oolong(col: Collection) -> RetrievalResult:
    for hit in (await col.search("oolong leaves unfurl", top_k=5)).results:
        if "Oolong" in hit.content:
            return hit
    raise AssertionError("no oolong hit")


@settings(max_examples=200, deadline=None)
@given(
    text=st.text(st.characters(exclude_categories=["Cs"]), max_size=400),
    at=st.integers(min_value=0),
    flip=st.integers(min_value=1, max_value=255),
)
def test_a_copy_reads_back_as_its_text_or_not_at_all(text: str, at: int, flip: int) -> None:
    """The text a copy's name promises, or ``KeptCopyError``: a damaged copy never reads
    as another text."""
    name = kept_name("d" * 32, sha256_text(text))
    packed = pack_kept(text)
    assert unpack_kept(packed, name) == text
    damaged = bytearray(packed)
    damaged[at % len(damaged)] ^= flip
    with contextlib.suppress(KeptCopyError):
        assert unpack_kept(bytes(damaged), name) == text
    with pytest.raises(KeptCopyError):
        unpack_kept(packed, kept_name("d" * 32, sha256_text(text + "x")))


async def test_a_deleted_file_verifies_against_its_kept_copy_and_says_so(tmp_path: Path) -> None:
    base, index = tmp_path / "base", tmp_path / "index"
    base.mkdir()
    (base / "notes.md").write_text(NOTES, encoding="utf-8")
    async with Collection.open(index, base_dir=base, ingest=KEEP) as col:
        assert not (await col.ingest(base)).failed
        (copy,) = kept_files(index)
        # Named by the text's hash, compressed: the text is not readable in the file.
        assert copy.name == kept_name(copy.name.split(".")[0], sha256_text(NOTES))
        assert b"Oolong" not in copy.read_bytes()
        assert zlib.decompress(copy.read_bytes()).decode() == NOTES
        hit = await oolong(col)
        live = await col.verify(hit)
        assert (live.verification, live.read_from) == ("verified", "file")
        (base / "notes.md").unlink()
        kept = await col.verify(hit)
        assert (kept.verification, kept.read_from) == ("verified", "kept copy")
        assert "kept copy" in kept.detail
        report = await col.verify_all()
        assert report.ok and report.kept_copy == report.verified > 0
        # The standalone check, given the snapshot store, reads the same copy.
        alone = await check_citation(hit.citation, hit.content, base, snapshot_dir=col.snapshots)
        assert (alone.verification, alone.read_from) == ("verified", "kept copy")


async def test_a_file_that_is_there_is_read_not_its_copy(tmp_path: Path) -> None:
    """Drift detection stays: an edited file is judged as it reads now."""
    base, index = tmp_path / "base", tmp_path / "index"
    base.mkdir()
    (base / "notes.md").write_text(NOTES, encoding="utf-8")
    async with Collection.open(index, base_dir=base, ingest=KEEP) as col:
        await col.ingest(base)
        hit = await oolong(col)
        (base / "notes.md").write_text(NOTES.replace("slowly", "quickly"), encoding="utf-8")
        edited = await col.verify(hit)
        assert (edited.verification, edited.read_from) == ("drifted", "file")
        (base / "notes.md").write_text("Moved down.\n\n" + NOTES, encoding="utf-8")
        moved = await col.verify(hit)
        assert (moved.verification, moved.read_from) == ("moved", "file")
        # Replaced by bytes it cannot read as text: unresolvable, not the copy's verdict.
        (base / "notes.md").write_bytes(NOTES.encode("utf-16"))
        other = await col.verify(hit)
        assert other.verification == "unresolvable" and other.read_from is None


@pytest.mark.parametrize(
    "damage",
    [
        pytest.param(lambda data: data[: len(data) // 2], id="truncated"),
        pytest.param(lambda data: b"garbage" + data, id="not zlib"),
        pytest.param(lambda data: pack_kept(NOTES.replace("slowly", "quickly")), id="other text"),
        pytest.param(lambda data: zlib.compress(b"\xff\xfe not utf-8"), id="not UTF-8"),
        pytest.param(None, id="removed"),
    ],
)
async def test_a_damaged_or_missing_copy_is_unresolvable_with_a_reason(
    tmp_path: Path, damage: Any
) -> None:
    base, index = tmp_path / "base", tmp_path / "index"
    base.mkdir()
    (base / "notes.md").write_text(NOTES, encoding="utf-8")
    async with Collection.open(index, base_dir=base, ingest=KEEP) as col:
        await col.ingest(base)
        hit = await oolong(col)
        (base / "notes.md").unlink()
        (copy,) = kept_files(index)
        if damage is None:
            copy.unlink()
        else:
            copy.write_bytes(damage(copy.read_bytes()))
        checks = [
            await col.verify(hit),
            await col.fetch_chunk(hit.chunk_id),
            await check_citation(hit.citation, hit.content, base, snapshot_dir=col.snapshots),
        ]
        for result in checks:
            assert result.verification == "unresolvable", result.detail
            assert result.read_from is None
            assert "No such file" in result.detail
            if damage is not None:
                assert "its kept copy is not used" in result.detail
        report = await col.verify_all()
        assert report.unresolvable > 0 and report.verified == 0 and report.kept_copy == 0


async def test_copies_are_content_addressed_and_follow_the_rows(tmp_path: Path) -> None:
    base, index = tmp_path / "base", tmp_path / "index"
    base.mkdir()
    (base / "notes.md").write_text(NOTES, encoding="utf-8")
    (base / "other.md").write_text("Green tea is brewed at eighty degrees.\n", encoding="utf-8")
    async with Collection.open(index, base_dir=base, ingest=KEEP) as col:
        await col.ingest(base)
        first = {p.name: p.stat().st_ino for p in kept_files(index)}
        assert len(first) == 2
        # Unchanged: nothing rewritten (same files, same inodes).
        assert len((await col.ingest(base)).unchanged) == 2
        assert {p.name: p.stat().st_ino for p in kept_files(index)} == first
        # Changed text: a new copy; the replaced one goes (no row names it).
        (base / "notes.md").write_text(NOTES + "\nA third paragraph.\n", encoding="utf-8")
        assert (await col.ingest(base)).updated == ["notes.md"]
        second = {p.name for p in kept_files(index)}
        assert len(second) == 2 and len(second & set(first)) == 1
        assert any(sha256_text(NOTES + "\nA third paragraph.\n") in n for n in second)
        # A file removed from the folder: its row and its copy go at the next ingest.
        (base / "other.md").unlink()
        assert (await col.ingest(base)).removed == ["other.md"]
        assert len(kept_files(index)) == 1
        # A plain delete takes the copy with the document.
        await col.delete(sources=["notes.md"])
        assert kept_files(index) == []


async def test_keeping_sources_later_keeps_the_unchanged_files_too(tmp_path: Path) -> None:
    base, index = tmp_path / "base", tmp_path / "index"
    base.mkdir()
    (base / "notes.md").write_text(NOTES, encoding="utf-8")
    async with Collection.open(index, base_dir=base) as col:
        await col.ingest(base)
        assert kept_files(index) == []
    async with Collection.open(index, base_dir=base, ingest=KEEP) as col:
        assert (await col.ingest(base)).unchanged == ["notes.md"]
        assert len(kept_files(index)) == 1
        # A copy damaged on disk is replaced by the next ingest, not trusted.
        (copy,) = kept_files(index)
        copy.write_bytes(b"damaged")
        await col.ingest(base)
        assert zlib.decompress(copy.read_bytes()).decode() == NOTES


async def test_an_orphan_copy_is_swept_only_after_the_grace_period(tmp_path: Path) -> None:
    """A copy no row names may be another writer's, before its commit: kept while young."""
    base, index = tmp_path / "base", tmp_path / "index"
    base.mkdir()
    (base / "notes.md").write_text(NOTES, encoding="utf-8")
    async with Collection.open(index, base_dir=base, ingest=KEEP) as col:
        await col.ingest(base)
        folder = index / "default.snapshots"
        young = folder / kept_name("0" * 32, "ab" * 32)
        old = folder / kept_name("1" * 32, "cd" * 32)
        young.write_bytes(pack_kept("in flight"))
        old.write_bytes(pack_kept("left by a crash"))
        past = time.time() - ORPHAN_GRACE_SECONDS - 60
        os.utime(old, (past, past))
        await col.optimize()
        assert young.exists() and not old.exists()
        assert len(kept_files(index)) == 2  # notes.md's and the young one


async def test_a_pdf_verifies_from_its_kept_extracted_text(tmp_path: Path) -> None:
    pytest.importorskip("pypdf")
    base, index = tmp_path / "base", tmp_path / "index"
    base.mkdir()
    (base / "report.pdf").write_bytes(make_pdf(["Photovoltaic panels.", "Oolong leaves unfurl."]))
    async with Collection.open(index, base_dir=base, ingest=KEEP) as col:
        await col.ingest(base)
        hit = await oolong(col)
        assert hit.citation.source_class == "extracted"
        (base / "report.pdf").unlink()
        result = await col.fetch_chunk(hit.chunk_id)
        assert (result.verification, result.read_from) == ("verified", "kept copy")


def grk(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    from contextlib import redirect_stdout

    with redirect_stdout(out):
        code = grk_main(list(argv))
    return code, out.getvalue()


def test_grk_ingest_keep_sources_and_verify_without_the_files(tmp_path: Path) -> None:
    base, index = tmp_path / "base", tmp_path / "index"
    base.mkdir()
    (base / "notes.md").write_text(NOTES, encoding="utf-8")
    common = ["--index-dir", str(index), "--base-dir", str(base)]
    assert grk("ingest", str(base), "--keep-sources", *common)[0] == 0
    assert len(kept_files(index)) == 1
    code, out = grk("search", "oolong leaves", *common, "--json")
    hit = json.loads(out)["results"][0]
    (base / "notes.md").unlink()
    code, out = grk("fetch", hit["citation"]["chunk_id"], *common)
    assert code == 0 and "verified (kept copy)" in out, out
    code, out = grk("verify", *common)
    assert code == 0 and "read from kept copies" in out, out
    code, out = grk("verify", *common, "--json")
    report = json.loads(out)
    assert report["kept_copy"] == report["verified"] > 0


async def test_a_receipt_is_checked_against_the_kept_copy(tmp_path: Path) -> None:
    base, index = tmp_path / "base", tmp_path / "index"
    base.mkdir()
    (base / "notes.md").write_text(NOTES, encoding="utf-8")
    async with Collection.open(index, base_dir=base, ingest=KEEP) as col:
        await col.ingest(base)
        hit = await oolong(col)
        receipt = hit.to_annotation()
        (base / "notes.md").unlink()
        (result,) = await check_receipts([receipt], base, snapshot_dir=col.snapshots)
        assert (result.verification, result.read_from) == ("verified", "kept copy")
        (without,) = await check_receipts([receipt], base)
        assert without.verification == "unresolvable"


@pytest.fixture
def bucket(s3_server: S3Server, monkeypatch: pytest.MonkeyPatch) -> str:
    name = f"gk-{uuid.uuid4().hex[:12]}"
    s3_server.create_bucket(name)
    for key, value in s3_server.environment.items():
        monkeypatch.setenv(key, value)
    return name


async def test_a_second_host_without_the_files_verifies_from_object_storage(
    postgres_dsn: str, fresh: str, bucket: str, s3_server: S3Server, tmp_path: Path
) -> None:
    base = tmp_path / "writer"
    base.mkdir()
    (base / "notes.md").write_text(NOTES, encoding="utf-8")
    storage = f"s3://{bucket}/groundkit"
    shared: dict[str, Any] = {
        "name": fresh,
        "metadata_url": postgres_dsn,
        "storage_uri": storage,
        "embedder": ToyEmbedder(),
    }
    async with Collection.open(**shared, base_dir=base, ingest=KEEP) as col:
        assert not (await col.ingest(base)).failed
        hit = await oolong(col)
        assert (await col.verify(hit)).read_from == "file"
    keys = [k for k in s3_server.keys(bucket) if k.endswith(KEPT_SUFFIX)]
    assert len(keys) == 1 and keys[0].startswith(f"groundkit/{fresh}.snapshots/")
    # Another host: its own base directory, which lacks the files.
    reader = tmp_path / "reader"
    reader.mkdir()
    async with Collection.open(**shared, base_dir=reader) as col:
        assert col.base_dir == reader.resolve()
        result = await col.verify(hit)
        assert (result.verification, result.read_from) == ("verified", "kept copy")
        fetched = await col.fetch_chunk(hit.chunk_id)
        assert (fetched.verification, fetched.read_from) == ("verified", "kept copy")
        report = await col.verify_all()
        assert report.ok and report.kept_copy == report.verified > 0
        # Deleted by this host: the copy goes from the bucket too.
        await col.delete(sources=["notes.md"])
    assert [k for k in s3_server.keys(bucket) if k.endswith(KEPT_SUFFIX)] == []


async def test_a_store_that_cannot_keep_bytes_is_refused_before_anything_is_read(
    tmp_path: Path,
) -> None:
    from groundkit import ConfigurationError
    from groundkit.ingestion.indexer import Indexer
    from groundkit.storage import SQLiteMetadataStore
    from tests.storage.memory_stores import MemorySnapshots

    store = await SQLiteMetadataStore.open(tmp_path / "m.sqlite3")
    try:
        with pytest.raises(ConfigurationError, match="stores bytes"):
            Indexer(store, tmp_path, ingest=KEEP, snapshot_dir=MemorySnapshots())
        with pytest.raises(ConfigurationError, match="snapshot store"):
            Indexer(store, tmp_path, ingest=KEEP)
    finally:
        await store.close()


async def test_an_unchanged_ingest_checks_object_store_copies_with_one_listing(
    postgres_dsn: str,
    fresh: str,
    bucket: str,
    s3_server: S3Server,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """No copy is read back per file; one whose listed size is not what its text packs to
    is written again."""
    base = tmp_path / "writer"
    base.mkdir()
    (base / "notes.md").write_text(NOTES, encoding="utf-8")
    (base / "other.md").write_text("Green tea is brewed at eighty degrees.\n", encoding="utf-8")
    storage = f"s3://{bucket}/groundkit"
    reads: list[str] = []
    listings: list[int] = []
    read, sizes = ObjectSnapshots.read, ObjectSnapshots.sizes

    async def counted_read(self: ObjectSnapshots, name: str) -> bytes:
        reads.append(name)
        return await read(self, name)

    async def counted_sizes(self: ObjectSnapshots) -> dict[str, int]:
        listings.append(1)
        return await sizes(self)

    monkeypatch.setattr(ObjectSnapshots, "read", counted_read)
    monkeypatch.setattr(ObjectSnapshots, "sizes", counted_sizes)
    shared: dict[str, Any] = {
        "name": fresh,
        "metadata_url": postgres_dsn,
        "storage_uri": storage,
        "embedder": ToyEmbedder(),
    }
    async with Collection.open(**shared, base_dir=base, ingest=KEEP) as col:
        assert not (await col.ingest(base)).failed
        reads.clear()
        listings.clear()
        assert len((await col.ingest(base)).unchanged) == 2
        assert reads == [] and listings == [1]
        (key,) = [
            k for k in s3_server.keys(bucket) if k.endswith(KEPT_SUFFIX) and sha256_text(NOTES) in k
        ]
        store = ObjectSnapshots(f"s3://{bucket}/{key.rsplit('/', 1)[0]}", s3_server.storage_options)
        name = key.rsplit("/", 1)[1]
        await store.write_bytes(name, b"damaged")
        assert len((await col.ingest(base)).unchanged) == 2
        assert unpack_kept(await read(store, name), name) == NOTES
        hit = await oolong(col)
    async with Collection.open(**shared, base_dir=tmp_path) as col:
        result = await col.verify(hit)
        assert (result.verification, result.read_from) == ("verified", "kept copy")
