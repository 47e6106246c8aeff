"""The vocabulary pack: query terms found without asking the store, never wrongly.

The live index knows every term up to an id (a pack written beside the segments, plus
the terms written after it); a term it does not know is then in no segment. These
tests pin that lookups through it equal the store's, that a term no chunk holds costs
no store lookup, that new terms are followed, and that a damaged pack is not used.
"""

from __future__ import annotations

import json
import random
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from groundkit.lexical import live
from groundkit.lexical.live import LiveIndex
from groundkit.lexical.vocabulary import VocabularyPack, vocabulary_arrays
from groundkit.storage.segments import LocalSegments
from groundkit.storage.sqlite import SQLiteMetadataStore
from groundkit.testing.conformance.helpers import make_document
from tests.lexical.kernels import lexical_path, numpy_only

WORDS = ["ant", "bee", "çà", "日本", "straße", "z" * 40, "a", "ab"]


class _Counting:
    """A store's term lookups, counted."""

    def __init__(self, store: SQLiteMetadataStore) -> None:
        self.real = store.term_ids
        self.asked: list[list[str]] = []

    async def term_ids(self, terms: Any) -> dict[str, int]:
        self.asked.append(list(terms))
        return await self.real(terms)


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SQLiteMetadataStore]:
    opened = await SQLiteMetadataStore.open(tmp_path / "c.sqlite3")
    yield opened
    await opened.close()


async def _write(store: SQLiteMetadataStore, source: str, words: list[str]) -> None:
    await store.replace_documents([make_document(source, [" ".join(words)])])


async def _packed(store: SQLiteMetadataStore, files: LocalSegments, extra: list[str]) -> LiveIndex:
    """A collection of one file per word of ``WORDS`` (each with ``extra``), its
    segments and vocabulary pack saved in ``files``; the writer that saved them."""
    for i, word in enumerate(WORDS):
        await _write(store, f"s{i}.txt", [word, *extra])
    writer = await LiveIndex.open(store, files)
    await writer.commit()
    return writer


def test_a_pack_that_does_not_fit_is_refused() -> None:
    arrays = vocabulary_arrays({"a": 1, "b": 2})
    for name, value in (
        ("starts", np.array([0, 2, 1], dtype=np.int64)),
        ("ids", np.array([1, 9], dtype=np.int64)),
        ("text", np.zeros(5, dtype=np.uint8)),
    ):
        with pytest.raises(ValueError):
            VocabularyPack.of(dict(arrays, **{name: value}), 2, {"name": "voc"})


async def test_lookups_go_through_the_pack_not_the_store(
    tmp_path: Path, store: SQLiteMetadataStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    with lexical_path(True):
        files = LocalSegments(tmp_path / "c.segments")
        writer = await _packed(store, files, ["common"])
        manifest = json.loads((files.directory / "manifest.json").read_text())
        assert manifest["vocabulary"]["max_id"] == max((await store.vocabulary()).values())
        # A vocabulary too large to read whole at open: only the pack can answer.
        monkeypatch.setattr(live, "_TERM_CACHE", 2)
        counting = _Counting(store)
        monkeypatch.setattr(store, "term_ids", counting.term_ids)
        reader = await LiveIndex.open(store, files)
        expected = await counting.real([*WORDS, "common"])
        assert await reader.term_ids([*WORDS, "common", "absent", "日本語"]) == expected
        assert counting.asked == []
        # New words arrive: the reader follows them into its tail at its catch-up.
        await _write(store, "new.txt", ["newword", "ant"])
        await writer.commit()
        await reader.refresh()
        assert "newword" in await reader.term_ids(["newword"])
        assert counting.asked == []


async def test_a_damaged_pack_is_not_used_but_replaced(
    tmp_path: Path, store: SQLiteMetadataStore
) -> None:
    with lexical_path(True):
        files = LocalSegments(tmp_path / "c.segments")
        await _write(store, "a.txt", ["ant", "bee"])
        await LiveIndex.open(store, files)  # writes the segments and the pack
        manifest = json.loads((files.directory / "manifest.json").read_text())
        name = manifest["vocabulary"]["pack"]["name"]
        path = files.directory / f"{name}.pack"
        raw = bytearray(path.read_bytes())
        raw[-1] ^= 0xFF
        path.write_bytes(bytes(raw))
        reader = await LiveIndex.open(store, files)
        assert reader.rebuilt_because is None  # the segments are fine and used
        # The damaged pack was not used: the process that found it wrote a new one.
        assert reader._pack is not None and reader._pack.entry["name"] != name
        again = json.loads((files.directory / "manifest.json").read_text())
        assert again["vocabulary"]["pack"]["name"] == reader._pack.entry["name"]
        assert await reader.term_ids(["ant", "cat"]) == await store.term_ids(["ant"])
        later = await LiveIndex.open(store, files)
        assert later._pack is not None and later._pack.entry == reader._pack.entry


async def test_a_merge_writes_a_new_pack_once_the_tail_is_long(
    tmp_path: Path, store: SQLiteMetadataStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    with lexical_path(True):
        monkeypatch.setattr(live, "_TAIL_REWRITE", 3)
        files = LocalSegments(tmp_path / "c.segments")
        await _write(store, "a.txt", ["ant"])
        writer = await LiveIndex.open(store, files)
        first = writer._pack
        assert first is not None
        rng = random.Random(3)
        for i in range(6):
            await _write(store, f"n{i}.txt", [f"w{rng.randrange(10**6)}", f"v{i}"])
            await writer.commit()
        assert len(writer._tail) > 3
        assert await writer.merge(everything=True)
        assert writer._pack is not None and writer._pack.max_id > first.max_id
        assert writer._tail == {}
        vocabulary = await store.vocabulary()
        assert await writer.term_ids(list(vocabulary)) == vocabulary


async def test_without_the_kernel_the_pack_is_written_and_used(
    tmp_path: Path, store: SQLiteMetadataStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The pack does not depend on the kernel (tests/lexical/test_one_format.py
    # compares the files): found in Python, an absent term still costs no lookup.
    files = LocalSegments(tmp_path / "c.segments")
    with numpy_only():
        await _packed(store, files, ["common"])
        monkeypatch.setattr(live, "_TERM_CACHE", 2)
        counting = _Counting(store)
        monkeypatch.setattr(store, "term_ids", counting.term_ids)
        reader = await LiveIndex.open(store, files)
        assert reader._pack is not None
        expected = await counting.real([*WORDS, "common"])
        assert await reader.term_ids([*WORDS, "common", "absent", "日本語"]) == expected
        assert counting.asked == []


async def test_a_pack_opened_with_the_kernel_still_answers_once_it_is_switched_off(
    tmp_path: Path, store: SQLiteMetadataStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    with lexical_path(True):
        files = LocalSegments(tmp_path / "c.segments")
        await _packed(store, files, [])
        monkeypatch.setattr(live, "_TERM_CACHE", 2)
        reader = await LiveIndex.open(store, files)
        assert reader._pack is not None and reader._tail == {}
    counting = _Counting(store)
    monkeypatch.setattr(store, "term_ids", counting.term_ids)
    with numpy_only():
        # Read in Python now: the same ids, and "absent" proven without the store.
        assert await reader.term_ids([*WORDS, "absent"]) == await counting.real(WORDS)
        assert counting.asked == []
