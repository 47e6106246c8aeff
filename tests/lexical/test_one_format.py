"""One on-disk format, whether or not the compiled kernel is installed.

The kernel (``groundkit.lexical._kernel``) only makes searches faster: the files a
collection writes must not depend on it, and files written on one side must open,
search and catch up on the other exactly as on the side that wrote them. These tests
pin that for the vocabulary pack's lookup (Python against the kernel against a
dictionary), for the packs and manifest a run of writes leaves, and for collections
that change sides between writes, in one process and across processes.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

import groundkit.storage.sqlite as sqlite_store
from groundkit import Collection
from groundkit.lexical import bm25, live
from groundkit.lexical.live import LiveIndex
from groundkit.lexical.vocabulary import VocabularyPack, find_terms, vocabulary_arrays
from groundkit.storage.segments import LocalSegments
from groundkit.storage.sqlite import SQLiteMetadataStore
from groundkit.testing.conformance.helpers import make_document
from tests.lexical.kernels import lexical_path, numpy_only
from tests.services import REPO_ROOT
from tests.support import CORPUS, SMALL_CHUNKS, write_tree

# -- the lookup ---------------------------------------------------------------------

# Few letters, so terms share prefixes and are prefixes of each other; several bytes
# long in UTF-8 (two, three, four), a NUL and the largest one-byte code point too.
_LETTERS = "ab\x00\x7féß日本🚀"
_TERMS = st.one_of(st.text(alphabet=_LETTERS, max_size=5), st.text(max_size=10))


def _lookups() -> list[Any]:
    """``find_terms`` in Python, and the kernel's where it was built (where it was not,
    the Python one is still checked against a dictionary; the tests below that switch
    sides skip, or fail on CI)."""
    kernel = bm25._kernel
    return [find_terms] if kernel is None else [find_terms, kernel.find_terms]


@settings(max_examples=200, deadline=None)
@given(
    vocabulary=st.dictionaries(_TERMS, st.integers(1, 2**62), max_size=50),
    extra=st.lists(_TERMS, max_size=15),
)
@example(vocabulary={}, extra=["", "a", "日"])
@example(vocabulary={"a": 3, "ab": 1, "abc": 2, "b": 4}, extra=["aa", "abcd", "", "c"])
def test_python_finds_what_the_kernel_finds(vocabulary: dict[str, int], extra: list[str]) -> None:
    terms = list(vocabulary)
    arrays = vocabulary_arrays(vocabulary)
    pack = VocabularyPack.of(arrays, max(vocabulary.values(), default=0), {"name": "voc"})
    # Every term, its prefixes, and the terms one character longer.
    probes = [*terms, *extra]
    probes += [t[:k] for t in terms for k in range(len(t))]
    probes += [t + c for t in terms[:10] for c in ("a", "\x00", "日")]
    text, starts, ids = arrays["text"], arrays["starts"], arrays["ids"]
    for lookup in _lookups():
        assert lookup(text, starts, ids, probes) == [vocabulary.get(t, 0) for t in probes]
    expected = {t: vocabulary[t] for t in probes if t in vocabulary}
    assert pack.find(probes) == expected
    assert pack.find(probes, kernel=bm25._kernel) == expected


def test_both_lookups_refuse_arrays_that_do_not_fit() -> None:
    arrays = vocabulary_arrays({"ant": 1, "bee": 2, "cat": 3})
    text, starts, ids = arrays["text"], arrays["starts"], arrays["ids"]
    damaged = [
        (text[:-1], starts, ids),  # the text ends before the last term
        (text, starts[:-1], ids),  # one start too few
        (text, np.array([0, 3, 99, 9], dtype=np.int64), ids),  # a term past the end
        (text, np.array([0, 5, 3, 9], dtype=np.int64), ids),  # a term ending before it starts
    ]
    for lookup in _lookups():
        for args in damaged:
            with pytest.raises(ValueError):
                lookup(*args, ["bee"])
        with pytest.raises(TypeError):
            lookup(text, starts, ids, [b"bee"])
        with pytest.raises(UnicodeEncodeError):
            lookup(text, starts, ids, ["\ud800"])


# -- a run of writes, as data ---------------------------------------------------------

_Op = tuple[str, Any]

PHASE_1: list[_Op] = [
    ("ingest", None),
    (
        "add",
        [
            {"id": "r1", "text": "Kettles boil water; a kettle switches off at the boil."},
            {"id": "r2", "text": "Straße und Brücke: die Brücke über den Fluss."},
            {"id": "r3", "text": "東京の天気は晴れです。富士山が見える。"},
            {"id": "r4", "text": "Crème brûlée needs a blowtorch; crème anglaise does not."},
        ],
    ),
    ("add", [{"id": "r1", "text": "Kettles want descaling monthly; the kettle boils water."}]),
    ("delete", ["r4"]),
]

PHASE_2: list[_Op] = [
    ("add", [{"id": "r5", "text": "A zephyr blows over the fjord; zephyrs are gentle winds."}]),
    ("add", [{"id": "r2", "text": "Die Brücke ist neu gebaut, die Straße gesperrt."}]),
    ("delete", ["r3"]),
    ("add", [{"id": "r6", "text": "Solar kettle: boiling fjord water with sunlight."}]),
    ("optimize", None),
    ("add", [{"id": "r7", "text": "A quokka smiles; quokkas live on Rottnest."}]),
]

# Words of every phase, words of phase 2 only (a reader must learn their ids), words
# nothing holds, and words whose documents were deleted or changed.
QUERIES = [
    "kettle boil water",
    "Brücke Straße",
    "東京",
    "crème brûlée",
    "zephyr fjord",
    "solar panels electricity",
    "quokka",
    "boiling water tea",
    "nothingholdsthisword",
    "fjord kettle solar wind",
]


async def _settle(col: Collection) -> None:
    """Wait for a merge the last write started (so runs do the same writes in turn)."""
    merging = col._merging
    if merging is not None:
        await merging


async def _apply(col: Collection, base: Path, ops: Sequence[_Op]) -> None:
    for op, arg in ops:
        if op == "ingest":
            assert not (await col.ingest(base)).failed
        elif op == "add":
            await col.add_documents(arg)
        elif op == "delete":
            await col.delete(records=arg)
        else:
            await col.optimize()
        await _settle(col)


async def _ranking(col: Collection) -> list[list[list[Any]]]:
    """Every query's top results, as JSON would carry them (so a child's compare equal)."""
    out = []
    for query in QUERIES:
        response = await col.search(query, top_k=6)
        out.append(
            [
                [r.source, r.chunk_id, r.chunk_index, r.start_offset, r.end_offset, r.score]
                for r in response.results
            ]
        )
    parsed: list[list[list[Any]]] = json.loads(json.dumps(out))
    return parsed


@asynccontextmanager
async def _opened(index: Path, base: Path) -> AsyncIterator[Collection]:
    async with Collection.open(index, base_dir=base, chunking=SMALL_CHUNKS) as col:
        yield col


def _pack_used(col: Collection) -> None:
    """The collection's lexical index came from its files, vocabulary pack included."""
    index = col._live
    assert index is not None and index.rebuilt_because is None
    assert index._pack is not None


@pytest.fixture
def base(tmp_path: Path) -> Path:
    root = tmp_path / "corpus"
    write_tree(root, dict(CORPUS))
    return root


async def _reference(tmp_path: Path, base: Path, compiled: bool) -> list[Any]:
    """Rankings after phase 1 and after phase 2 in a collection that never switched."""
    with lexical_path(compiled):
        async with _opened(tmp_path / f"reference-{compiled}", base) as col:
            await _apply(col, base, PHASE_1)
            first = await _ranking(col)
            await _apply(col, base, PHASE_2)
            return [first, await _ranking(col)]


# -- the files ------------------------------------------------------------------------


class _SteppingClock:
    """The store's ``time`` module with a clock that steps one second a call from a
    fixed moment: two runs of the same writes stamp their versions alike, so the
    segments (which keep when each version became current) can be compared byte for
    byte."""

    def __init__(self) -> None:
        self.now = 1_700_000_000.0

    def time(self) -> float:
        self.now += 1.0
        return self.now

    def __getattr__(self, name: str) -> Any:
        return getattr(time, name)


def _files_of(index: Path) -> tuple[dict[str, Any], list[tuple[str, bytes]]]:
    """The manifest with its random parts left out (the collection's uid; pack names
    cut to their kind), and each pack's bytes by kind, in manifest order."""
    (directory,) = index.glob("*.segments")
    manifest = json.loads((directory / "manifest.json").read_text(encoding="utf-8"))
    packs: list[tuple[str, bytes]] = []

    def plain(value: Any) -> Any:
        if isinstance(value, dict):
            out = {k: plain(v) for k, v in value.items()}
            if {"name", "bytes", "xxh3"} <= value.keys():
                kind = value["name"].split("-")[0]
                packs.append((kind, (directory / f"{value['name']}.pack").read_bytes()))
                out["name"] = kind
            return out
        if isinstance(value, list):
            return [plain(v) for v in value]
        return value

    manifest.pop("uid")
    manifest.pop("body_xxh3")  # of the body with the random parts in
    normalized = plain(manifest)
    return normalized, packs


async def _written(
    index: Path, base: Path, compiled: bool, monkeypatch: pytest.MonkeyPatch
) -> list[tuple[dict[str, Any], list[tuple[str, bytes]]]]:
    """The files after each write of both phases, on one side."""
    with monkeypatch.context() as patched, lexical_path(compiled):
        patched.setattr(sqlite_store, "time", _SteppingClock())
        assert (bm25.kernel_module() is not None) == compiled
        seen = []
        async with _opened(index, base) as col:
            for op in [*PHASE_1, *PHASE_2]:
                await _apply(col, base, [op])
                seen.append(_files_of(index))
        return seen


async def test_the_same_writes_leave_the_same_files_with_or_without_the_kernel(
    tmp_path: Path, base: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A small rewrite threshold: the merge of phase 2 writes a new vocabulary pack too.
    monkeypatch.setattr(live, "_TAIL_REWRITE", 1)
    compiled = await _written(tmp_path / "compiled", base, True, monkeypatch)
    numpy = await _written(tmp_path / "numpy", base, False, monkeypatch)
    assert len(compiled) == len(numpy) == len(PHASE_1) + len(PHASE_2)
    for step, ((manifest_c, packs_c), (manifest_n, packs_n)) in enumerate(
        zip(compiled, numpy, strict=True)
    ):
        assert manifest_c == manifest_n, f"manifests differ after write {step}"
        assert [k for k, _ in packs_c] == [k for k, _ in packs_n]
        for (kind, raw_c), (_, raw_n) in zip(packs_c, packs_n, strict=True):
            assert raw_c == raw_n, f"{kind} packs differ after write {step}"
        kinds = [k for k, _ in packs_c]
        assert kinds[-1] == "voc" and kinds.count("voc") == 1, kinds
    # Not a vacuous comparison: overlays were written, and a merge wrote a second pack.
    assert any("ov" in [k for k, _ in packs] for _, packs in compiled)
    vocabularies = {json.dumps(m["vocabulary"]) for m, _ in compiled}
    assert len(vocabularies) >= 2


async def test_files_without_a_vocabulary_pack_gain_one_without_the_kernel(
    tmp_path: Path,
) -> None:
    # As a writer without the kernel left them before packs were written either way.
    store = await SQLiteMetadataStore.open(tmp_path / "c.sqlite3")
    try:
        await store.replace_documents([make_document("a.txt", ["ant bee", "çà 日本"])])
        files = LocalSegments(tmp_path / "c.segments")
        with numpy_only():
            first = await LiveIndex.open(store, files)
            await first.commit()
            manifest_path = files.directory / "manifest.json"
            manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
            del manifest["vocabulary"]
            await files.write_manifest(manifest)
            reopened = await LiveIndex.open(store, files)
            assert reopened.rebuilt_because is None and reopened._pack is not None
            again = json.loads(manifest_path.read_text(encoding="utf-8"))
            assert again["vocabulary"]["pack"] == reopened._pack.entry
            wanted = ["ant", "bee", "çà", "日本"]
            assert await reopened.term_ids([*wanted, "absent"]) == await store.term_ids(wanted)
    finally:
        await store.close()


# -- changing sides -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("writer", "reader"),
    [
        pytest.param(True, False, id="compiled-then-numpy"),
        pytest.param(False, True, id="numpy-then-compiled"),
    ],
)
async def test_a_collection_changes_sides_in_one_process(
    tmp_path: Path, base: Path, writer: bool, reader: bool
) -> None:
    expected = await _reference(tmp_path, base, compiled=True)
    assert await _reference(tmp_path, base, compiled=False) == expected
    index = tmp_path / "switched"
    with lexical_path(writer):
        async with _opened(index, base) as col:
            await _apply(col, base, PHASE_1)
    with lexical_path(reader):
        async with _opened(index, base) as searcher:
            assert await _ranking(searcher) == expected[0]
            _pack_used(searcher)
            # Another writer on the same files; the searcher catches up at its search.
            async with _opened(index, base) as other:
                await _apply(other, base, PHASE_2)
            assert await _ranking(searcher) == expected[1]
        async with _opened(index, base) as fresh:
            assert await _ranking(fresh) == expected[1]
            _pack_used(fresh)


_CHILD = "import sys; from tests.lexical.test_one_format import child; child(sys.argv[1:])"


def child(argv: list[str]) -> None:
    """A process on one side (``compiled`` or ``numpy``, set before anything opens):
    opens the collection, ranks, runs phase 2, ranks again, and prints what it saw."""
    index, base, side = Path(argv[0]), Path(argv[1]), argv[2]
    bm25._USE_KERNEL = side == "compiled"

    async def run() -> dict[str, Any]:
        async with _opened(index, base) as col:
            before = await _ranking(col)
            _pack_used(col)
            await _apply(col, base, PHASE_2)
            return {
                "kernel": bm25.kernel_module() is not None,
                "before": before,
                "after": await _ranking(col),
            }

    print(json.dumps(asyncio.run(run())))


def _run_child(index: Path, base: Path, side: str) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-c", _CHILD, str(index), str(base), side],
        cwd=REPO_ROOT,
        env={**os.environ, "PYTHONPATH": f"{REPO_ROOT / 'src'}{os.pathsep}{REPO_ROOT}"},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    seen: dict[str, Any] = json.loads(done.stdout.splitlines()[-1])
    return seen


@pytest.mark.parametrize("side", ["numpy", "compiled"])
async def test_a_collection_changes_sides_across_processes(
    tmp_path: Path, base: Path, side: str
) -> None:
    # This process writes phase 1 on one side and keeps a searcher open; a child on
    # the other side opens the files, searches, writes phase 2; then this searcher
    # catches up from the child's writes, and a fresh open reads its files.
    here = side != "compiled"
    expected = await _reference(tmp_path, base, compiled=True)
    index = tmp_path / "shared"
    with lexical_path(here):
        async with _opened(index, base) as col:
            await _apply(col, base, PHASE_1)
        async with _opened(index, base) as searcher:
            assert await _ranking(searcher) == expected[0]
            seen = await asyncio.to_thread(_run_child, index, base, side)
            assert seen["kernel"] == (side == "compiled")
            assert seen["before"] == expected[0]
            assert seen["after"] == expected[1]
            assert await _ranking(searcher) == expected[1]
        async with _opened(index, base) as fresh:
            assert await _ranking(fresh) == expected[1]
            _pack_used(fresh)
