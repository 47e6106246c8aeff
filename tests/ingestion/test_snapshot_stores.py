"""The SnapshotStore conformance suite, run against a local directory and S3 (moto)."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from groundkit.ingestion.snapshots import (
    LocalSnapshots,
    ObjectSnapshots,
    SnapshotStore,
    as_snapshot_store,
)
from groundkit.retrieval.citations import resolve_citation
from groundkit.utils.path_safety import PathEscapeError
from tests.s3_support import S3Server

DOC = "0123456789abcdef0123456789abcdef"
OTHER = "f" * 32
UNSAFE = ("../escape", "a/b", ".hidden", "x" * 200, "", DOC + ".partial")


@pytest.fixture(params=["local", "s3"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> SnapshotStore:
    if request.param == "local":
        made = as_snapshot_store(tmp_path / "snaps")
        assert isinstance(made, LocalSnapshots)
        return made
    s3: S3Server = request.getfixturevalue("s3_server")
    bucket = f"gk-{uuid.uuid4().hex[:12]}"
    s3.create_bucket(bucket)
    made = as_snapshot_store(f"s3://{bucket}/snaps", s3.storage_options)
    assert isinstance(made, ObjectSnapshots)
    return made


async def test_satisfies_the_protocol(store: SnapshotStore) -> None:
    assert isinstance(store, SnapshotStore)
    assert store.location.endswith("snaps")


async def test_write_read_match(store: SnapshotStore) -> None:
    assert not await store.matches(DOC, "text")
    with pytest.raises(FileNotFoundError):
        await store.read(DOC)
    await store.write(DOC, "Gezeiten – tidal\r\ntext 🌊")
    assert await store.read(DOC) == "Gezeiten – tidal\r\ntext 🌊".encode()
    assert await store.matches(DOC, "Gezeiten – tidal\r\ntext 🌊")
    await store.write(DOC, "second")
    assert await store.read(DOC) == b"second" and not await store.matches(DOC, "Gezeiten")


async def test_remove_stale_keeps_the_named(store: SnapshotStore) -> None:
    await store.write(DOC, "keep")
    await store.write(OTHER, "drop")
    assert await store.remove_stale([DOC]) == [OTHER]
    assert await store.read(DOC) == b"keep"
    assert await store.remove_stale([DOC]) == []


@pytest.mark.parametrize("bad", UNSAFE)
async def test_unsafe_ids_are_refused_everywhere(store: SnapshotStore, bad: str) -> None:
    with pytest.raises(PathEscapeError):
        await store.write(bad, "nope")
    with pytest.raises(PathEscapeError):
        await store.read(bad)


async def test_citations_read_through_the_store(store: SnapshotStore) -> None:
    from groundkit import Citation

    await store.write(DOC, "alpha beta gamma")
    citation = Citation(
        document_id=DOC,
        chunk_id="c",
        source="https://example.org/page",
        source_class="snapshot",
        extractor=None,
        start_offset=6,
        end_offset=10,
    )
    assert await resolve_citation(citation, Path("."), snapshot_dir=store) == "beta"
