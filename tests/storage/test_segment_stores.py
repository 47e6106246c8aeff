"""The pack stores of the lexical index: the shipped conformance suite on a local
directory and on S3 (moto), what is particular to the object store and its cache,
and a shared collection whose lexical index lives in the object store."""

from __future__ import annotations

import logging
import sys
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import xxhash

from groundkit import Collection
from groundkit.contracts import PackCheck
from groundkit.errors import ConfigurationError, StorageError, kind_of
from groundkit.lexical.live import LiveIndex
from groundkit.storage.location import StoreLocation
from groundkit.storage.object_segments import CACHE_DIR_ENV, ObjectSegments, default_cache_root
from groundkit.storage.segments import LocalSegments, pack_names
from groundkit.storage.snapshots import object_filesystem
from groundkit.storage.sqlite import SQLiteMetadataStore
from groundkit.testing.conformance import PackStoreConformance
from groundkit.testing.conformance.helpers import make_document
from groundkit.testing.conformance.segments import META, make_arrays
from tests.s3_support import S3Server
from tests.support import CORPUS, SMALL_CHUNKS, write_tree


def _new_bucket(s3_server: S3Server) -> str:
    name = f"gk-{uuid.uuid4().hex[:12]}"
    s3_server.create_bucket(name)
    return name


def _object(store: ObjectSegments, options: dict[str, str], name: str) -> tuple[Any, str]:
    """A pyarrow filesystem of its own and the key of ``name`` under ``store``'s prefix."""
    fs, root = object_filesystem(store.location, options)
    return fs, f"{root}/{name}"


def _get(store: ObjectSegments, options: dict[str, str], name: str) -> bytes:
    fs, key = _object(store, options, name)
    with fs.open_input_stream(key) as stream:
        return bytes(stream.read())


def _put(store: ObjectSegments, options: dict[str, str], name: str, data: bytes) -> None:
    fs, key = _object(store, options, name)
    with fs.open_output_stream(key) as stream:
        stream.write(data)


class TestLocalSegmentsConformance(PackStoreConformance):
    @pytest.fixture
    def pack_store(self, tmp_path: Path) -> LocalSegments:
        return LocalSegments(tmp_path / "c.segments")

    async def stored_bytes(self, pack_store: LocalSegments, name: str) -> bytes:
        return (pack_store.directory / f"{name}.pack").read_bytes()

    async def replace_stored(self, pack_store: LocalSegments, name: str, data: bytes) -> None:
        (pack_store.directory / f"{name}.pack").write_bytes(data)

    async def replace_manifest(self, pack_store: LocalSegments, data: bytes) -> None:
        (pack_store.directory / "manifest.json").write_bytes(data)


class TestObjectSegmentsConformance(PackStoreConformance):
    options: dict[str, str]

    @pytest.fixture
    def pack_store(self, s3_server: S3Server, tmp_path: Path) -> ObjectSegments:
        self.options = s3_server.storage_options
        uri = f"s3://{_new_bucket(s3_server)}/groundkit/c.segments"
        return ObjectSegments(uri, self.options, cache_root=tmp_path / "cache")

    async def stored_bytes(self, pack_store: ObjectSegments, name: str) -> bytes:
        return _get(pack_store, self.options, f"{name}.pack")

    async def replace_stored(self, pack_store: ObjectSegments, name: str, data: bytes) -> None:
        _put(pack_store, self.options, f"{name}.pack", data)
        (pack_store.cache_dir / f"{name}.pack").unlink(missing_ok=True)

    async def replace_manifest(self, pack_store: ObjectSegments, data: bytes) -> None:
        _put(pack_store, self.options, "manifest.json", data)


# -- the object store and its cache -------------------------------------------------------


@pytest.fixture
def uri(s3_server: S3Server) -> str:
    return f"s3://{_new_bucket(s3_server)}/groundkit/c.segments"


def _store(uri: str, s3_server: S3Server, cache: Path, **kwargs: Any) -> ObjectSegments:
    return ObjectSegments(uri, s3_server.storage_options, cache_root=cache, **kwargs)


def _cached(store: ObjectSegments) -> list[str]:
    return sorted(p.name for p in store.cache_dir.iterdir()) if store.cache_dir.is_dir() else []


async def test_an_empty_cache_downloads_and_checks(
    uri: str, s3_server: S3Server, tmp_path: Path
) -> None:
    writer = _store(uri, s3_server, tmp_path / "writer")
    entry = await writer.write_pack("seg-1", make_arrays(), META)
    assert _cached(writer) == ["seg-1.pack"]  # written locally first, then uploaded
    reader = _store(uri, s3_server, tmp_path / "reader")
    assert reader.cache_dir != writer.cache_dir and _cached(reader) == []
    arrays, meta = await reader.load_pack(entry)
    assert meta == META and arrays["grid"].tolist() == make_arrays()["grid"].tolist()
    assert _cached(reader) == ["seg-1.pack"]
    cached = (reader.cache_dir / "seg-1.pack").read_bytes()
    assert len(cached) == entry["bytes"] and xxhash.xxh3_64_hexdigest(cached) == entry["xxh3"]


async def test_a_cached_copy_is_checked_at_every_load(
    uri: str, s3_server: S3Server, tmp_path: Path
) -> None:
    """Packs cached from an object store keep no record of past checks (each use
    touches them): the pack check runs at every load, and its refusal is raised."""
    entry = await _store(uri, s3_server, tmp_path / "cache").write_pack(
        "seg-1", make_arrays(), META
    )
    ran: list[int] = []
    counted = PackCheck("counted", lambda arrays: ran.append(len(arrays)))
    for _ in range(2):
        store = _store(uri, s3_server, tmp_path / "cache")  # a new process, the same cache
        arrays, meta = await store.load_checked_pack(entry, counted)
        assert meta == META and arrays["vi8"].tolist() == make_arrays()["vi8"].tolist()
    assert ran == [len(make_arrays())] * 2

    def refuse(arrays: Any) -> None:
        raise ValueError("does not fit")

    with pytest.raises(ValueError, match="does not fit"):
        await _store(uri, s3_server, tmp_path / "cache").load_checked_pack(
            entry, PackCheck("refuse", refuse)
        )


async def test_a_damaged_cached_copy_is_downloaded_again(
    uri: str, s3_server: S3Server, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store = _store(uri, s3_server, tmp_path / "cache")
    entry = await store.write_pack("seg-1", make_arrays(), META)
    path = store.cache_dir / "seg-1.pack"
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))
    with caplog.at_level(logging.WARNING, logger="groundkit.storage"):
        arrays, meta = await store.load_pack(entry)
    assert meta == META and arrays["vi8"].tolist() == make_arrays()["vi8"].tolist()
    assert "downloaded again" in caplog.text
    assert xxhash.xxh3_64_hexdigest(path.read_bytes()) == entry["xxh3"]


@pytest.mark.parametrize("damage", ["flipped", "truncated", "longer"])
async def test_a_damaged_object_is_refused_and_never_cached(
    uri: str, s3_server: S3Server, tmp_path: Path, damage: str
) -> None:
    writer = _store(uri, s3_server, tmp_path / "writer")
    entry = await writer.write_pack("seg-1", make_arrays(), META)
    data = _get(writer, s3_server.storage_options, "seg-1.pack")
    if damage == "flipped":
        data = data[:-1] + bytes([data[-1] ^ 0x80])
    elif damage == "truncated":
        data = data[:-64]
    else:
        data = data + b"\0" * 64
    _put(writer, s3_server.storage_options, "seg-1.pack", data)
    reader = _store(uri, s3_server, tmp_path / "reader")
    with pytest.raises(StorageError, match=r"seg-1\.pack"):
        await reader.load_pack(entry)
    assert _cached(reader) == []  # no temporary file left, nothing mapped
    # The writer's own cached copy is intact and still serves.
    assert (await writer.load_pack(entry))[1] == META


async def test_a_manifest_that_is_not_an_object_is_a_storage_error(
    uri: str, s3_server: S3Server, tmp_path: Path
) -> None:
    store = _store(uri, s3_server, tmp_path / "cache")
    for raw in (b"[1, 2]", b"{not json", b""):
        _put(store, s3_server.storage_options, "manifest.json", raw)
        with pytest.raises(StorageError, match=r"manifest\.json"):
            await store.read_manifest()


async def test_packs_the_stored_manifest_names_are_never_removed(
    uri: str, s3_server: S3Server, tmp_path: Path
) -> None:
    store = _store(uri, s3_server, tmp_path / "cache", grace_seconds=0.0)
    a = await store.write_pack("seg-a", make_arrays(), {})
    b = await store.write_pack("seg-b", make_arrays(), {})
    await store.write_pack("seg-c", make_arrays(), {})
    # Another host's writer has since saved a manifest naming b; this one keeps a.
    await store.write_manifest({"generation": 2, "parts": [{"segment": b, "overlay": None}]})
    assert await store.remove_unreferenced([a["name"]]) == 1
    listed = s3_server.keys(uri.split("/")[2])
    keys = sorted(k.rsplit("/", 1)[1] for k in listed if not k.endswith("/"))
    assert keys == ["manifest.json", "seg-a.pack", "seg-b.pack"]


async def test_nothing_is_removed_while_the_stored_manifest_is_unreadable(
    uri: str, s3_server: S3Server, tmp_path: Path
) -> None:
    store = _store(uri, s3_server, tmp_path / "cache", grace_seconds=0.0)
    await store.write_pack("seg-a", make_arrays(), {})
    _put(store, s3_server.storage_options, "manifest.json", b"{damaged")
    assert await store.remove_unreferenced([]) == 0
    assert await store.load_pack(await store.write_pack("seg-b", {}, {})) == ({}, {})


async def test_the_cache_keeps_what_the_manifest_names(
    uri: str, s3_server: S3Server, tmp_path: Path
) -> None:
    writer = _store(uri, s3_server, tmp_path / "writer")
    old = await writer.write_pack("seg-old", make_arrays(), {})
    new = await writer.write_pack("seg-new", make_arrays(), {})
    reader = _store(uri, s3_server, tmp_path / "reader", grace_seconds=0.0)
    await reader.load_pack(old)
    await reader.load_pack(new)
    assert _cached(reader) == ["seg-new.pack", "seg-old.pack"]
    await writer.write_manifest({"generation": 5, "parts": [{"segment": new, "overlay": None}]})
    assert (await reader.read_manifest() or {})["generation"] == 5
    assert _cached(reader) == ["seg-new.pack"]
    # Young files stay with the default grace period, named or not.
    await writer.write_manifest({"generation": 6, "parts": []})
    assert _cached(writer) == ["seg-new.pack", "seg-old.pack"]


async def test_clear_and_drop_remove_the_prefix_and_the_cache(
    uri: str, s3_server: S3Server, tmp_path: Path
) -> None:
    bucket = uri.split("/")[2]
    store = _store(uri, s3_server, tmp_path / "cache")
    entry = await store.write_pack("seg-1", make_arrays(), {})
    await store.write_manifest({"parts": [{"segment": entry}]})
    await store.clear()
    assert not [k for k in s3_server.keys(bucket) if not k.endswith("/")]
    assert _cached(store) == []
    await store.write_pack("seg-2", make_arrays(), {})
    await store.drop()
    assert not [k for k in s3_server.keys(bucket) if "c.segments" in k]
    assert not store.cache_dir.exists()
    await store.drop()  # dropping what is gone is fine


def test_the_cache_directory(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv(CACHE_DIR_ENV, str(tmp_path / "given"))
    one = ObjectSegments("s3://b/p/a.segments")
    assert one.cache_dir.parent == tmp_path / "given" / "segments"
    assert ObjectSegments("s3://b/p/a.segments/").cache_dir == one.cache_dir
    assert ObjectSegments("s3://b/p/b.segments").cache_dir != one.cache_dir
    elsewhere = ObjectSegments("s3://b/p/a.segments", {"aws_endpoint": "http://minio:9000"})
    assert elsewhere.cache_dir != one.cache_dir
    assert default_cache_root({"XDG_CACHE_HOME": "/var/cache/me"}) == Path(
        "/var/cache/me/groundkit"
    )
    assert default_cache_root({"XDG_CACHE_HOME": "relative"}) == Path.home() / ".cache/groundkit"
    assert default_cache_root({}) == Path.home() / ".cache" / "groundkit"


async def test_errors_name_no_credentials(tmp_path: Path) -> None:
    from tests.services import free_port

    options = {
        "aws_endpoint": f"http://127.0.0.1:{free_port()}",
        "aws_region": "us-east-1",
        "aws_access_key_id": "AKIAEXAMPLEKEYID",
        "aws_secret_access_key": "s3cr3t-do-not-print",
    }
    store = ObjectSegments("s3://gk-nowhere/p/c.segments", options, cache_root=tmp_path)
    for attempt in (
        store.read_manifest(),
        store.write_pack("seg-1", {"x": np.zeros(3, np.int64)}, {}),
        store.load_pack({"name": "seg-1", "bytes": 10, "xxh3": "0" * 16}),
        store.remove_unreferenced([]),
    ):
        with pytest.raises(StorageError) as caught:
            await attempt
        text = str(caught.value)
        assert "s3://gk-nowhere/p/c.segments" in text and "endpoint" in text
        assert "s3cr3t" not in text and "AKIAEXAMPLEKEYID" not in text
        assert isinstance(caught.value, OSError) and kind_of(caught.value) == "StorageError"
    assert not list(store.cache_dir.glob("*.pack*")) and not list(store.cache_dir.glob(".*"))
    # A message that echoes a secret has it blanked.
    echoed = store._reason(OSError("denied for AKIAEXAMPLEKEYID / s3cr3t-do-not-print"))
    assert "AKIA" not in echoed and "s3cr3t" not in echoed and "***" in echoed


async def test_a_failed_upload_leaves_no_cached_pack(s3_server: S3Server, tmp_path: Path) -> None:
    missing = f"s3://gk-missing-{uuid.uuid4().hex[:8]}/p/c.segments"
    store = _store(missing, s3_server, tmp_path / "cache")
    with pytest.raises(StorageError, match="cannot write"):
        await store.write_pack("seg-1", make_arrays(), {})
    assert not list(store.cache_dir.glob("*.pack*")) and not list(store.cache_dir.glob(".*"))


def test_without_pyarrow_it_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pyarrow", None)
    with pytest.raises(ConfigurationError, match=r"groundkit\[dense\]"):
        ObjectSegments("s3://b/p/c.segments")


def test_store_location_picks_the_pack_store(tmp_path: Path) -> None:
    shared = StoreLocation.resolve(
        "c",
        metadata_url="postgresql://u@db/x",
        storage_uri="s3://bucket/prefix/",
        storage_options={"aws_region": "eu-west-1"},
    )
    on_s3 = shared.segments()
    assert isinstance(on_s3, ObjectSegments) and on_s3.location == "s3://bucket/prefix/c.segments"
    mounted = StoreLocation.resolve("c", metadata_url="postgresql://u@db/x", storage_uri=tmp_path)
    assert isinstance(mounted.segments(), LocalSegments)
    local = StoreLocation.resolve("c", index_dir=tmp_path)
    assert isinstance(local.segments(), LocalSegments)
    assert StoreLocation.resolve("c", metadata_url="postgresql://u@db/x").segments() is None


# -- the live index over the object store ------------------------------------------------------


async def _rankings(live: LiveIndex, term_ids: list[int]) -> list[Any]:
    out = []
    for i in range(len(term_ids)):
        wanted = Counter(term_ids[i : i + 3])
        out.append(live.index.search_ids(wanted, 5))
    return out


async def test_a_live_index_opens_from_the_object_store(
    uri: str, s3_server: S3Server, tmp_path: Path
) -> None:
    store = await SQLiteMetadataStore.open(tmp_path / "c.sqlite3")
    try:
        writer_files = _store(uri, s3_server, tmp_path / "writer")
        writer = await LiveIndex.open(store, writer_files)
        for i in range(6):
            text = [f"tidal turbine {i} solar", f"panel wind {i % 3} tidal"]
            await store.replace_documents([make_document(f"s{i}.txt", text)])
            await writer.commit()
        await store.delete_documents(["s2.txt"])
        await writer.commit()
        reader_files = _store(uri, s3_server, tmp_path / "reader")
        reader = await LiveIndex.open(store, reader_files)
        assert reader.rebuilt_because is None and reader.persisted
        named = {p.name for p in reader_files.cache_dir.glob("*.pack")}
        assert named and named <= {p.name for p in writer_files.cache_dir.glob("*.pack")}
        ids = sorted((await store.vocabulary()).values())
        fresh = await LiveIndex.open(store, None)
        assert await _rankings(reader, ids) == await _rankings(fresh, ids)
        # A damaged object (and no good cached copy) is rebuilt from, never used.
        victim = sorted(named)[0]
        data = _get(reader_files, s3_server.storage_options, victim)
        _put(reader_files, s3_server.storage_options, victim, data[:-1])
        third = await LiveIndex.open(store, _store(uri, s3_server, tmp_path / "third"))
        assert third.rebuilt_because is not None
        assert await _rankings(third, ids) == await _rankings(fresh, ids)
    finally:
        await store.close()


async def test_a_shared_collection_keeps_its_lexical_index_in_the_object_store(
    postgres_dsn: str,
    fresh: str,
    s3_server: S3Server,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    bucket = _new_bucket(s3_server)
    for key, value in s3_server.environment.items():
        monkeypatch.setenv(key, value)
    base = tmp_path / "corpus"
    write_tree(base, dict(CORPUS))
    storage = f"s3://{bucket}/groundkit"
    monkeypatch.setenv(CACHE_DIR_ENV, str(tmp_path / "writer-cache"))
    opened = Collection.open(
        name=fresh,
        metadata_url=postgres_dsn,
        storage_uri=storage,
        base_dir=base,
        chunking=SMALL_CHUNKS,
    )
    async with opened as col:
        report = await col.ingest(base)
        assert not report.failed and report.added
    prefix = f"groundkit/{fresh}.segments/"
    keys = [k for k in s3_server.keys(bucket) if k.startswith(prefix)]
    assert f"{prefix}manifest.json" in keys and any(k.endswith(".pack") for k in keys)

    # Another host: an empty cache of its own.
    monkeypatch.setenv(CACHE_DIR_ENV, str(tmp_path / "reader-cache"))
    location = StoreLocation.resolve(fresh, metadata_url=postgres_dsn, storage_uri=storage)
    stores = await location.open(create=False)
    try:
        assert isinstance(stores.segments, ObjectSegments)
        live = await LiveIndex.open(stores.metadata, stores.segments)
        assert live.rebuilt_because is None and live.persisted
        cached = {p.name for p in stores.segments.cache_dir.glob("*.pack")}
        manifest = await stores.segments.read_manifest()
        assert cached == {f"{name}.pack" for name in pack_names(manifest)}
        ids = sorted((await stores.metadata.vocabulary()).values())[:40]
        rebuilt = await LiveIndex.open(stores.metadata, None)
        assert await _rankings(live, ids) == await _rankings(rebuilt, ids)
    finally:
        await stores.close()

    queries = ["solar panels electricity", "wind farms", "tidal", "Gezeiten"]
    caplog.set_level(logging.WARNING, logger="groundkit.lexical")
    async with Collection.open(name=fresh, metadata_url=postgres_dsn, storage_uri=storage) as col:
        from_packs = [await col.search(q, 5) for q in queries]
    assert "rebuilt" not in caplog.text
    async with Collection.open(name=fresh, metadata_url=postgres_dsn) as in_memory:
        rebuilt_results = [await in_memory.search(q, 5) for q in queries]
    for got, want in zip(from_packs, rebuilt_results, strict=True):
        assert [(r.chunk_id, r.score) for r in got.results] == [
            (r.chunk_id, r.score) for r in want.results
        ]
    assert any(r.results for r in from_packs)

    await location.drop()
    assert not [k for k in s3_server.keys(bucket) if k.startswith(prefix)]
