"""A benchmark's cached corpus is reused only while its store is at this groundkit's schema."""

from __future__ import annotations

import json
import sqlite3
from contextlib import closing
from pathlib import Path

import pytest

from evals.bench_bm25 import prepare_synthetic
from evals.bench_util import reusable_cache, stored_schema_current
from groundkit.storage.sqlite import SCHEMA_VERSION


def _set_schema(path: Path, version: int) -> None:
    with closing(sqlite3.connect(path)) as conn, conn:
        conn.execute("UPDATE state SET schema_version = ? WHERE id = 1", (version,))


def test_a_cache_whose_store_moved_to_another_schema_is_ingested_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = prepare_synthetic(tmp_path, 200, 4, fresh=False)
    assert not first.cached
    store = first.root / "index" / "bench.sqlite3"
    assert stored_schema_current(first.root / "index", "bench")
    # A work directory given relative to where the benchmark runs.
    monkeypatch.chdir(tmp_path)
    assert stored_schema_current(first.root.relative_to(tmp_path) / "index", "bench")
    assert prepare_synthetic(tmp_path, 200, 4, fresh=False).cached

    # What a groundkit with a newer schema leaves behind once it has opened the cache:
    # the fingerprint still matches, the file no longer opens here.
    _set_schema(store, SCHEMA_VERSION + 1)
    assert not stored_schema_current(first.root / "index", "bench")
    again = prepare_synthetic(tmp_path, 200, 4, fresh=False)
    assert not again.cached
    assert stored_schema_current(again.root / "index", "bench")
    assert again.chunks == first.chunks

    # The meta file decides too: another fingerprint, or none at all, is not reused.
    meta_path = again.root / "meta.json"
    index = again.root / "index"
    fingerprint = json.loads(meta_path.read_text(encoding="utf-8"))["fingerprint"]
    assert reusable_cache(meta_path, fingerprint, index) is not None
    assert reusable_cache(meta_path, fingerprint + "x", index) is None
    assert reusable_cache(again.root / "absent.json", fingerprint, index) is None


def test_a_missing_or_unreadable_store_is_not_current(tmp_path: Path) -> None:
    assert not stored_schema_current(tmp_path, "bench")
    (tmp_path / "bench.sqlite3").write_bytes(b"not a database" * 100)
    assert not stored_schema_current(tmp_path, "bench")
