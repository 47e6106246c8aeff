"""The live lexical index equals a fresh rebuild, whatever happened to the corpus.

A writer commits after every write, a reader only refreshes, a third index is
opened anew from the files each time; all three must rank like an index built
from scratch from the store (same keys, same scores, same tie flags), for the
current corpus and for the corpus as it stood at any earlier moment. Damaged,
missing or foreign index files are detected and rebuilt, never used.
"""

from __future__ import annotations

import json
import random
import time
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from groundkit.lexical.bm25 import CURRENT, View
from groundkit.lexical.live import LiveIndex
from groundkit.storage.segments import LocalSegments
from groundkit.storage.sqlite import SQLiteMetadataStore
from groundkit.testing.conformance.helpers import make_document

WORDS = ["ant", "bee", "cat", "dog", "eel", "fox", "gnu"]
QUERIES = [
    ["ant"],
    ["bee", "cat"],
    ["dog", "dog", "eel"],
    ["fox", "gnu", "ant", "bee"],
    ["gnu"],
    ["new1", "ant"],  # words that appear only later: a reader must learn their ids
    ["new2", "new3"],
]


async def _ranking(live: LiveIndex, view: View = CURRENT, k: int = 5) -> list[Any]:
    out = []
    for query in QUERIES:
        ids = await live.term_ids(query)
        wanted = Counter(ids[t] for t in query if t in ids)
        for prune in (True, False):
            out.append(live.index.search_ids(wanted, k, view=view, prune=prune))
    return out


async def _fresh(store: SQLiteMetadataStore) -> LiveIndex:
    return await LiveIndex.open(store, None)


def _text(rng: random.Random) -> list[str]:
    words = [*WORDS, f"new{rng.randrange(4)}"]  # now and then a word no chunk had yet
    return [" ".join(rng.choices(words, k=rng.randint(1, 6))) for _ in range(rng.randint(1, 3))]


async def _apply(store: SQLiteMetadataStore, rng: random.Random, op: str, n_sources: int) -> None:
    source = f"s{rng.randrange(n_sources)}.txt"
    if op == "delete":
        await store.delete_documents([source])
    elif op == "purge":
        await store.purge_versions(rng.randint(0, 1))
    else:
        keep = rng.choice([None, None, 0, 1])
        items = [make_document(source, _text(rng))]
        if op == "batch":
            other = f"s{rng.randrange(n_sources)}.txt"
            if other != source:
                items.append(make_document(other, _text(rng)))
        await store.replace_documents(items, keep_versions=keep)


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SQLiteMetadataStore]:
    opened = await SQLiteMetadataStore.open(tmp_path / "c.sqlite3")
    yield opened
    await opened.close()


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    seed=st.integers(0, 2**32 - 1),
    ops=st.lists(
        st.sampled_from(["write", "write", "batch", "delete", "purge", "merge"]), max_size=14
    ),
)
async def test_live_equals_a_fresh_rebuild(
    tmp_path_factory: Any, seed: int, ops: list[str]
) -> None:
    rng = random.Random(seed)
    root = tmp_path_factory.mktemp("live")
    store = await SQLiteMetadataStore.open(root / "c.sqlite3")
    files = LocalSegments(root / "c.segments")
    try:
        writer = await LiveIndex.open(store, files)
        reader = await LiveIndex.open(store, files)
        moments: list[float] = []
        for op in ops:
            if op == "merge":
                await writer.merge(everything=rng.random() < 0.5)
            else:
                await _apply(store, rng, op, n_sources=4)
                await writer.commit()
            moments.append(time.time())
            await reader.refresh()
            reopened = await LiveIndex.open(store, files)
            assert reopened.rebuilt_because is None
            fresh = await _fresh(store)
            expected = await _ranking(fresh)
            assert await _ranking(writer) == expected
            assert await _ranking(reader) == expected
            assert await _ranking(reopened) == expected
        for moment in moments:
            view = View(moment)
            fresh = await _fresh(store)
            assert await _ranking(writer, view) == await _ranking(fresh, view)
    finally:
        await store.close()


async def _populate(store: SQLiteMetadataStore, files: LocalSegments) -> LiveIndex:
    rng = random.Random(7)
    live = await LiveIndex.open(store, files)
    for i in range(12):
        await store.replace_documents([make_document(f"s{i % 5}.txt", _text(rng))])
        await live.commit()
    return live


def _packs(directory: Path) -> list[Path]:
    return sorted(directory.glob("*.pack"))


@pytest.mark.parametrize("damage", ["truncate", "flip", "remove", "manifest", "foreign"])
async def test_damaged_index_files_are_rebuilt(
    tmp_path: Path, store: SQLiteMetadataStore, damage: str
) -> None:
    files = LocalSegments(tmp_path / "c.segments")
    live = await _populate(store, files)
    expected = await _ranking(live)
    manifest_path = files.directory / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    target = files.directory / f"{manifest['parts'][0]['segment']['name']}.pack"
    if damage == "truncate":
        target.write_bytes(target.read_bytes()[:-17])
    elif damage == "flip":
        data = bytearray(target.read_bytes())
        data[len(data) // 2] ^= 0x40
        target.write_bytes(bytes(data))
    elif damage == "remove":
        target.unlink()
    elif damage == "manifest":
        manifest_path.write_text("{ not json")
    else:
        manifest["uid"] = "another-collection"
        manifest_path.write_text(json.dumps(manifest))
    reopened = await LiveIndex.open(store, files)
    assert reopened.rebuilt_because is not None
    assert await _ranking(reopened) == expected
    # The rebuild was saved: the next open loads it.
    again = await LiveIndex.open(store, files)
    assert again.rebuilt_because is None and again.persisted
    assert await _ranking(again) == expected


async def test_files_newer_than_the_store_are_not_trusted(
    tmp_path: Path, store: SQLiteMetadataStore
) -> None:
    files = LocalSegments(tmp_path / "c.segments")
    await _populate(store, files)
    manifest_path = files.directory / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    manifest["generation"] += 100  # as if the store had been restored from an older backup
    manifest_path.write_text(json.dumps(manifest))
    reopened = await LiveIndex.open(store, files)
    assert reopened.rebuilt_because is not None and "newer" in reopened.rebuilt_because
    assert await _ranking(reopened) == await _ranking(await _fresh(store))


async def test_a_pruned_log_behind_an_old_manifest_means_a_rebuild(
    tmp_path: Path, store: SQLiteMetadataStore
) -> None:
    files = LocalSegments(tmp_path / "c.segments")
    await _populate(store, files)
    old = (files.directory / "manifest.json").read_text()
    await store.replace_documents([make_document("s0.txt", ["ant bee"])])
    await store.prune_changes(await store.generation())
    (files.directory / "manifest.json").write_text(old)
    reopened = await LiveIndex.open(store, files)
    assert reopened.rebuilt_because is not None and "log" in reopened.rebuilt_because
    assert await _ranking(reopened) == await _ranking(await _fresh(store))


async def test_a_reader_catches_up_without_rebuilding(
    tmp_path: Path, store: SQLiteMetadataStore
) -> None:
    files = LocalSegments(tmp_path / "c.segments")
    writer = await _populate(store, files)
    reader = await LiveIndex.open(store, files)
    base = reader.index.views[0].segment
    await store.replace_documents([make_document("s1.txt", ["gnu gnu fox"])])
    await writer.commit()
    change = await reader.refresh()
    assert not change.rebuilt
    # The segments already loaded are the very same objects: nothing was rebuilt.
    assert any(v.segment is base for v in reader.index.views)
    assert await _ranking(reader) == await _ranking(await _fresh(store))


async def test_a_remembered_vocabulary_follows_new_terms_without_asking_the_store(
    tmp_path: Path, store: SQLiteMetadataStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    files = LocalSegments(tmp_path / "c.segments")
    writer = await _populate(store, files)
    reader = await LiveIndex.open(store, files)
    asked: list[list[str]] = []
    real = store.term_ids

    async def counting(terms: Any) -> dict[str, int]:
        asked.append(list(terms))
        return await real(terms)

    monkeypatch.setattr(store, "term_ids", counting)
    # The whole vocabulary is in memory: a word in no chunk costs no store lookup.
    assert await reader.term_ids(["ant", "zebra"]) == {"ant": (await real(["ant"]))["ant"]}
    assert asked == []
    await store.replace_documents([make_document("z.txt", ["zebra ant"])])
    await writer.commit()
    # Not caught up yet: the word is in no segment this reader searches.
    assert await reader.term_ids(["zebra"]) == {}
    await reader.refresh()
    zebra = await reader.term_ids(["zebra"])
    assert zebra == await real(["zebra"]) and asked == []
    hits = reader.index.search_ids(Counter(zebra.values()), 5)
    rows = await store.get_chunks_by_keys([key for key, _, _ in hits])
    assert [row.source for row in rows.values()] == ["z.txt"]


async def test_merge_drops_removed_chunks_and_keeps_past_versions(
    tmp_path: Path, store: SQLiteMetadataStore
) -> None:
    files = LocalSegments(tmp_path / "c.segments")
    live = await _populate(store, files)
    await store.delete_documents(["s2.txt"])
    await live.commit()
    before = live.segment_count
    assert before > 1
    moment = time.time()
    expected_now = await _ranking(live)
    expected_then = await _ranking(live, View(moment))
    assert await live.merge(everything=True)
    assert live.segment_count == 1
    view = live.index.views[0]
    assert view.removed == 0
    assert await _ranking(live) == expected_now
    assert await _ranking(live, View(moment)) == expected_then
    reopened = await LiveIndex.open(store, files)
    assert reopened.segment_count == 1 and reopened.rebuilt_because is None
    assert await _ranking(reopened) == expected_now


async def test_unreferenced_packs_are_swept_after_the_grace_period(
    tmp_path: Path, store: SQLiteMetadataStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    import groundkit.storage.segments as segments

    files = LocalSegments(tmp_path / "c.segments")
    live = await _populate(store, files)
    assert len(_packs(files.directory)) > 2
    monkeypatch.setattr(segments, "_GRACE_SECONDS", 0.0)
    await live.merge(everything=True)
    manifest = json.loads((files.directory / "manifest.json").read_text())
    named = {p["segment"]["name"] for p in manifest["parts"]}
    named |= {p["overlay"]["name"] for p in manifest["parts"] if p["overlay"]}
    named.add(manifest["vocabulary"]["pack"]["name"])
    assert {p.stem for p in _packs(files.directory)} == named


@pytest.mark.parametrize(
    ("docs", "fits"),
    [([], True), ([2], True), ([0, 3, 1], True), ([1, 3, 1], False), ([2, 2], False)],
)
def test_an_overlay_naming_a_document_twice_does_not_fit(docs: list[int], fits: bool) -> None:
    """An overlay retires each of its segment's documents at most once."""
    from groundkit.lexical.live import _view_from_overlay
    from groundkit.lexical.segment import build_segment

    n = 4
    segment = build_segment(
        np.arange(n, dtype=np.int64),
        np.arange(n + 1, dtype=np.int64),
        np.zeros(n, dtype=np.int32),
        np.ones(n, dtype=np.int32),
        np.arange(n * 3, dtype=np.uint64).reshape(n, 3),
        np.zeros(n, dtype=np.float64),
    )
    arrays = {
        "docs": np.asarray(docs, dtype=np.int64),
        "valid_to": np.full(len(docs), 5.0),
        "df_terms": np.zeros(0, np.int64),
        "df_counts": np.zeros(0, np.int64),
    }
    if fits:
        view = _view_from_overlay(segment, arrays)
        assert int(np.isfinite(view.valid_to).sum()) == len(docs)
    else:
        with pytest.raises(ValueError, match="does not fit"):
            _view_from_overlay(segment, arrays)
