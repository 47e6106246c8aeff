"""The worker processes of ``evals.bench_bm25``: one system, one phase, one JSON line.

    python -m evals.bench_bm25 --worker SYSTEM --phase PHASE --dir ROOT [--repeat N] ...

``ROOT`` is a corpus prepared by ``bench_bm25`` (the ingested collection under
``index/``, ``texts.json``, ``rows.json``, ``queries.json``). Each phase runs in a
fresh process, so the memory figures it prints are that phase's own:

* ``build``: the index from scratch. groundkit: its segment directory emptied, then
  ``Retriever.open(store, segments=...)``, which rebuilds the segments from the terms
  stored at ingest and saves them (the one-off *first build*, done once). bm25s:
  analyse + ``index`` (``repeat`` times), then ``save`` of the last one, timed apart.
  tantivy: analyse + index into a fresh on-disk index directory, committed
  (``repeat`` times; the last one stays).
* ``open``: the saved index opened ``repeat`` times *cold* (its files dropped from
  the page cache first, see ``evals.pagecache``) and ``repeat`` times *warm*.
* ``serve``: one warm open, memory after it, then the timed queries.
* ``pair``: ``serve`` in two processes at once, which take their memory figures
  together (``bench_bm25`` tells both when).
* ``writes``: one new document, then an edit of it, each timed until a search sees it.
* ``all`` (rank-bm25, which has no saved form): build, memory, queries.
"""

from __future__ import annotations

import asyncio
import gc
import json
import shutil
import sys
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from evals.pagecache import evict, resident_share, warm
from evals.procmem import mappings_under, memory_snapshot
from evals.synthetic import BENCH_CHUNKING
from groundkit import ChunkingConfig
from groundkit.lexical import Analyzer

__all__ = ["COLLECTION", "PHASES", "SYSTEMS", "WARMUP", "K", "run_worker", "saved_dir"]

SYSTEMS = ("groundkit", "bm25s", "tantivy", "tantivy_text", "rank_bm25")
PHASES = ("build", "open", "serve", "pair", "writes", "all")
COLLECTION = "bench"
K = 10
WARMUP = 5
# Where ``writes`` puts the files it adds, under the corpus; removed when it ends.
LIVE_FOLDER = "_bench_live"
_VISIBLE_TIMEOUT_S = 30.0
_TANTIVY_BUILD_HEAP = 256_000_000
_TANTIVY_WRITER_HEAP = 50_000_000

# One timed query: (milliseconds, row numbers of the hits).
TimedSearch = Callable[[str], tuple[float, list[int]]]


def saved_dir(root: Path, system: str) -> Path:
    """Where a system's saved index for corpus ``root`` lives (bm25s, tantivy)."""
    return root / "saved" / system


def _index_dir(root: Path) -> Path:
    return root / "index"


def _queries(root: Path, limit: int) -> list[str]:
    queries: list[str] = json.loads((root / "queries.json").read_text(encoding="utf-8"))
    return queries[:limit]


def _texts(root: Path) -> list[str]:
    texts: list[str] = json.loads((root / "texts.json").read_text(encoding="utf-8"))
    return texts


def _dir_mb(directory: Path) -> float:
    return sum(p.stat().st_size for p in directory.rglob("*") if p.is_file()) / 1e6


def _timed_queries(
    search: TimedSearch, queries: Sequence[str], warmup: int = WARMUP
) -> tuple[list[float], list[list[int]]]:
    """Per-query latency in ms and the returned row numbers, after ``warmup`` queries."""
    for q in queries[:warmup]:
        search(q)
    lat: list[float] = []
    tops: list[list[int]] = []
    for q in queries:
        ms, top = search(q)
        lat.append(ms)
        tops.append(top)
    return lat, tops


def _clock(search: Callable[[str], Sequence[int]]) -> TimedSearch:
    def timed(q: str) -> tuple[float, list[int]]:
        started = time.perf_counter()
        top = search(q)
        elapsed = (time.perf_counter() - started) * 1000
        return elapsed, [int(r) for r in top]

    return timed


def _repeat(
    build: Callable[[], Any], repeat: int, reset: Callable[[], None] | None = None
) -> tuple[Any, list[float]]:
    """``build()`` ``repeat`` times, each timed after the previous result is freed and
    ``reset`` (untimed) has run; the last result and the times."""
    built: Any = None
    times: list[float] = []
    for _ in range(repeat):
        built = None
        gc.collect()
        if reset is not None:
            reset()
        started = time.perf_counter()
        built = build()
        times.append(time.perf_counter() - started)
    return built, times


# An opener returns the open index (whatever keeps it alive) and the seconds it took.
Opener = Callable[[], tuple[Any, float]]


def _open_cycles(
    open_once: Opener,
    close: Callable[[Any], None],
    files: Callable[[], list[Path]],
    watch: Path,
    repeat: int,
) -> dict[str, Any]:
    """``repeat`` cold opens (``files`` evicted first), then ``repeat`` warm ones.

    Before each cold open it records how much of the files is still cached
    (``mincore``) and whether an earlier open left any of them mapped (mapped pages
    cannot be evicted): the report only calls the number cold when both are nil."""
    cold: list[float] = []
    warm: list[float] = []
    resident: list[float | None] = []
    mapped = 0
    for _ in range(repeat):
        gc.collect()
        mapped = max(mapped, mappings_under(watch)[0])
        paths = files()
        evict(paths)
        resident.append(resident_share(paths))
        handle, elapsed = open_once()
        cold.append(elapsed)
        close(handle)
        del handle
    for _ in range(repeat):
        gc.collect()
        handle, elapsed = open_once()
        warm.append(elapsed)
        close(handle)
        del handle
    known = [r for r in resident if r is not None]
    return {
        "open_cold_s": cold,
        "open_warm_s": warm,
        "resident_after_evict": max(known) if known and len(known) == len(resident) else None,
        "mapped_before_cold": mapped,
    }


def _serve(
    open_once: Opener,
    search_of: Callable[[Any], TimedSearch],
    queries: Sequence[str],
    watch: Path,
    files: Callable[[], list[Path]],
    pause: Callable[[], None] | None = None,
) -> dict[str, Any]:
    """One open, memory before and after it, the timed queries, memory after them
    (after ``pause``, which the ``pair`` phase uses to measure with its twin).

    The queries are timed warm: every file of the saved index (``files``) is read
    once first, so the page cache holds what a server answering queries would have
    cached. The open phase's cold opens leave most of it evicted; without this, a
    system whose search reads a large file (groundkit's rows) would be timed on the
    disk instead of on its search."""
    warm(files())
    gc.collect()
    before = memory_snapshot(watch)
    handle, elapsed = open_once()
    gc.collect()
    opened = memory_snapshot(watch)
    lat, tops = _timed_queries(search_of(handle), queries)
    if pause is not None:
        pause()
    after = memory_snapshot(watch)
    return {
        "open_s": elapsed,
        "latency_ms": lat,
        "top": tops,
        "memory_before": before,
        "memory_open": opened,
        "memory_queries": after,
    }


def _token() -> str:
    """A made-up word no corpus holds (letters only, so every analyzer keeps it whole)."""
    return "zq" + "".join(chr(ord("a") + int(c, 16)) for c in uuid.uuid4().hex[:12])


def _live_text(token: str, n: int) -> str:
    return f"Benchmark write number {n}. It carries the marker {token} and some plain words.\n"


# -- groundkit -----------------------------------------------------------------


def _gk_segments(root: Path) -> Any:
    from groundkit.storage.location import StoreLocation

    segments = StoreLocation.resolve(COLLECTION, index_dir=_index_dir(root)).segments()
    assert segments is not None  # a local collection always has a segment directory
    return segments


def _gk_sqlite(root: Path) -> Path:
    from groundkit.storage.location import metadata_path

    return metadata_path(_index_dir(root), COLLECTION)


def _gk_files(root: Path) -> list[Path]:
    """What a cold open must find on disk: SQLite with its WAL, every pack, the manifest."""
    sqlite = _gk_sqlite(root)
    seg = _gk_segments(root).directory
    packs = sorted(seg.glob("*.pack"))
    return [sqlite, Path(f"{sqlite}-wal"), Path(f"{sqlite}-shm"), seg / "manifest.json", *packs]


def _gk_chunking(root: Path) -> ChunkingConfig:
    return BENCH_CHUNKING if root.name.startswith("synthetic") else ChunkingConfig()


async def _gk_open(root: Path, *, saved: bool = True) -> tuple[Any, Any, float]:
    """Store and ``Retriever`` opened on the persisted segments, and the seconds it took
    (both together: what a process does to start searching)."""
    from groundkit.retrieval import Retriever
    from groundkit.storage import SQLiteMetadataStore

    segments = _gk_segments(root)
    if saved and not (segments.directory / "manifest.json").is_file():
        raise RuntimeError("no saved segments: the build phase runs first")
    started = time.perf_counter()
    store = await SQLiteMetadataStore.open(_gk_sqlite(root), create=False)
    try:
        retriever = await Retriever.open(store, segments=segments)
    except BaseException:
        await store.close()
        raise
    elapsed = time.perf_counter() - started
    if retriever.lexical.rebuilt_because is not None:
        await store.close()
        raise RuntimeError(f"the saved segments were not used: {retriever.lexical.rebuilt_because}")
    return store, retriever, elapsed


def _gk_worker(root: Path, phase: str, repeat: int, max_queries: int, writes: int) -> Any:
    loop = asyncio.new_event_loop()
    try:
        return _gk_phase(loop, root, phase, repeat, max_queries, writes)
    finally:
        loop.close()


def _gk_phase(
    loop: asyncio.AbstractEventLoop,
    root: Path,
    phase: str,
    repeat: int,
    max_queries: int,
    writes: int,
) -> dict[str, Any]:
    run = loop.run_until_complete
    if phase == "build":
        return run(_gk_build(root))
    if phase == "writes":
        return run(_gk_writes(root, writes))

    def open_once() -> tuple[Any, float]:
        store, retriever, elapsed = run(_gk_open(root))
        return (store, retriever), elapsed

    def close(handle: Any) -> None:
        run(handle[0].close())

    if phase == "open":
        return _open_cycles(open_once, close, lambda: _gk_files(root), _index_dir(root), repeat)
    hits: list[list[tuple[str, int]]] = []

    def search_of(handle: Any) -> TimedSearch:
        retriever = handle[1]
        # A small collection's rows, read in the background after a first answer, are
        # read here, so every timed query of a serving process finds them in memory.
        run(retriever.preload())

        async def timed(q: str) -> tuple[float, list[int]]:
            started = time.perf_counter()
            response = await retriever.search(q, K)
            elapsed = (time.perf_counter() - started) * 1000
            hits.append([(r.source, r.chunk_index) for r in response.results])
            return elapsed, []

        return lambda q: run(timed(q))

    pause = _pair_pause if phase == "pair" else None
    served = _serve(
        open_once,
        search_of,
        _queries(root, max_queries),
        _index_dir(root),
        lambda: _gk_files(root),
        pause,
    )
    # Hits go back as (source, chunk index); the parent turns them into row numbers. A
    # million-row lookup table here would count in this process's memory, and it is
    # the benchmark's, not groundkit's.
    served["top_hits"] = hits[-len(served["top"]) :] if served["top"] else []
    served["top"] = None
    return served


def _pair_pause() -> None:
    """Say this twin is open and has searched, then wait until both may measure."""
    print("READY", flush=True)
    sys.stdin.readline()


async def _gk_build(root: Path) -> dict[str, Any]:
    segments = _gk_segments(root)
    await segments.clear()
    gc.collect()
    store, retriever, elapsed = await _gk_open(root, saved=False)
    try:
        live = retriever.lexical
        if not live.persisted or not (segments.directory / "manifest.json").is_file():
            raise RuntimeError("the first open did not save its segments")
        return {
            "build_s": [elapsed],
            "segments": live.segment_count,
            "disk_mb": _dir_mb(segments.directory),
            "sqlite_mb": _gk_sqlite(root).stat().st_size / 1e6,
        }
    finally:
        await store.close()


async def _gk_visible(
    col: Any, source: str, token: str, started: float, gone: str | None = None
) -> float:
    """Search until ``token`` finds ``source`` (and ``gone`` no longer does); the ms
    since ``started``. A write that never shows is an error, not a slow number."""
    while True:
        found = any(r.source == source for r in (await col.search(token, K)).results)
        stale = gone is not None and any(
            r.source == source for r in (await col.search(gone, K)).results
        )
        if found and not stale:
            return (time.perf_counter() - started) * 1000
        if time.perf_counter() - started > _VISIBLE_TIMEOUT_S:
            raise RuntimeError(f"a write to {source} was not visible after {_VISIBLE_TIMEOUT_S} s")
        await asyncio.sleep(0.001)


async def _gk_forget(col: Any, folder: Path) -> None:
    """Remove the files ``writes`` added, from the collection first, then from disk."""
    if not folder.exists():
        return
    added = sorted(str(p) for p in folder.glob("*.txt"))
    if added:
        await col.delete(sources=added)
    await asyncio.to_thread(shutil.rmtree, folder)


async def _gk_writes(root: Path, writes: int) -> dict[str, Any]:
    """``writes`` new one-chunk files, each written, ingested and searched for until it
    shows; then each of them edited (its marker replaced) the same way, until the new
    marker finds it and the old one does not. A ``Collection`` stays open throughout,
    as in a long-lived application, so its background merges run between the writes.

    A write that raises, or never shows, is recorded in ``failed`` and the loop goes
    on: the report counts it as a write that did not become visible. At the end
    (untimed) ``optimize`` waits for a merge in flight, then what was added is
    deleted from the collection and from disk."""
    from groundkit import Collection

    folder = root / "corpus" / LIVE_FOLDER
    chunking = _gk_chunking(root)
    failed: list[str] = []
    async with Collection.open(
        _index_dir(root), COLLECTION, base_dir=root, chunking=chunking
    ) as col:
        await _gk_forget(col, folder)  # leftovers of an interrupted run
        for q in _queries(root, WARMUP):
            await col.search(q, K)  # the live index open and warm
        folder.mkdir(parents=True)
        added: list[tuple[Path, str]] = []
        add_ms: list[float] = []
        edit_ms: list[float] = []

        async def timed_write(path: Path, token: str, n: int, gone: str | None) -> float | None:
            source = path.relative_to(root).as_posix()
            started = time.perf_counter()
            try:
                path.write_text(_live_text(token, n), encoding="utf-8")
                await col.ingest(path)
                return await _gk_visible(col, source, token, started, gone=gone)
            except Exception as exc:
                kind = "edit" if gone else "add"
                failed.append(f"{kind} {n}: {type(exc).__name__}: {exc}")
                return None

        try:
            for n in range(writes):
                path, token = folder / f"w{n:03d}.txt", _token()
                ms = await timed_write(path, token, n, None)
                if ms is not None:
                    add_ms.append(ms)
                    added.append((path, token))
            for n, (path, old) in enumerate(added):
                ms = await timed_write(path, _token(), n, old)
                if ms is not None:
                    edit_ms.append(ms)
        finally:
            await col.optimize()
            await _gk_forget(col, folder)
        remaining = await _gk_live_leftovers(col)
    if remaining:
        raise RuntimeError(f"{remaining} added documents were left in the collection")
    return {"add_ms": add_ms, "edit_ms": edit_ms, "failed": failed, "attempted": 2 * writes}


async def _gk_live_leftovers(col: Any) -> int:
    marker = f"/{LIVE_FOLDER}/"
    return len([r async for r in col.store.iter_documents() if marker in f"/{r.source}"])


# -- bm25s ---------------------------------------------------------------------


def _bm25s_worker(root: Path, phase: str, repeat: int, max_queries: int, writes: int) -> Any:
    import bm25s

    target = saved_dir(root, "bm25s")
    analyzer = Analyzer()
    if phase == "build":
        texts = _texts(root)
        tokenize_s: list[float] = []

        def build() -> Any:
            started = time.perf_counter()
            tokens = [analyzer.terms(t) for t in texts]
            tokenize_s.append(time.perf_counter() - started)
            model = bm25s.BM25(k1=1.5, b=0.75, method="lucene")
            model.index(tokens, show_progress=False)
            return model

        model, times = _repeat(build, repeat)
        shutil.rmtree(target, ignore_errors=True)
        started = time.perf_counter()
        model.save(str(target), show_progress=False)
        saved = time.perf_counter() - started
        return {
            "build_s": times,
            "tokenize_s": tokenize_s,
            "save_s": [saved],
            "disk_mb": _dir_mb(target),
        }

    def open_once() -> tuple[Any, float]:
        started = time.perf_counter()
        model = bm25s.BM25.load(str(target), mmap=True, show_progress=False)
        return model, time.perf_counter() - started

    files = lambda: sorted(p for p in target.iterdir() if p.is_file())  # noqa: E731
    if phase == "open":
        return _open_cycles(open_once, lambda _: None, files, target, repeat)

    def search_of(model: Any) -> TimedSearch:
        def search(q: str) -> Sequence[int]:
            docs, scores = model.retrieve([analyzer.terms(q)], k=K, show_progress=False)
            return [int(d) for d, s in zip(docs[0], scores[0], strict=True) if s > 0]

        return _clock(search)

    return _serve(open_once, search_of, _queries(root, max_queries), target, files)


# -- tantivy -------------------------------------------------------------------


def _tantivy_query(tantivy: Any, schema: Any, terms: Sequence[str]) -> Any:
    """A boolean OR of one term query per analysed term."""
    return tantivy.Query.boolean_query(
        [(tantivy.Occur.Should, tantivy.Query.term_query(schema, "body", t)) for t in terms]
    )


def _tantivy_worker(root: Path, phase: str, repeat: int, max_queries: int, writes: int) -> Any:
    return _tantivy_phase(root, phase, repeat, max_queries, writes, with_text=False)


def _tantivy_text_worker(root: Path, phase: str, repeat: int, max_queries: int, writes: int) -> Any:
    """tantivy storing each chunk's text, and a query returning it with the row: what a
    search that shows its results has to do (groundkit's results carry their text)."""
    return _tantivy_phase(root, phase, repeat, max_queries, writes, with_text=True)


def _tantivy_phase(
    root: Path, phase: str, repeat: int, max_queries: int, writes: int, *, with_text: bool
) -> Any:
    import tantivy

    target = saved_dir(root, "tantivy_text" if with_text else "tantivy")
    analyzer = Analyzer()
    if phase == "build":
        return _tantivy_build(tantivy, root, target, repeat, with_text=with_text)
    if phase == "writes":
        return _tantivy_writes(tantivy, target, writes)

    def open_once() -> tuple[Any, float]:
        started = time.perf_counter()
        index = tantivy.Index.open(str(target))
        searcher = index.searcher()
        return (index, searcher), time.perf_counter() - started

    files = lambda: sorted(p for p in target.iterdir() if p.is_file())  # noqa: E731
    if phase == "open":
        return _open_cycles(open_once, lambda _: None, files, target, repeat)

    def search_of(handle: Any) -> TimedSearch:
        index, searcher = handle
        schema = index.schema

        def search(q: str) -> Sequence[int]:
            query = _tantivy_query(tantivy, schema, analyzer.terms(q))
            hits = searcher.search(query, K, count=False).hits
            if with_text:
                docs = [searcher.doc(address) for _, address in hits]
                texts = [bytes(d["text"][0]).decode("utf-8") for d in docs]
                assert len(texts) == len(hits)
                return [int(d["row"][0]) for d in docs]
            return [int(v) for v in searcher.fast_field_values("row", [a for _, a in hits])]

        return _clock(search)

    return _serve(open_once, search_of, _queries(root, max_queries), target, files)


def _tantivy_build(
    tantivy: Any, root: Path, target: Path, repeat: int, *, with_text: bool = False
) -> dict[str, Any]:
    texts = _texts(root)
    analyzer = Analyzer()
    # ``row`` is indexed as well as fast, so ``writes`` can delete a document by it; with
    # ``with_text`` each document also stores its chunk text, and ``row``, for fetching.
    builder = (
        tantivy.SchemaBuilder()
        .add_text_field("body", tokenizer_name="whitespace", index_option="freq")
        .add_integer_field("row", fast=True, indexed=True, stored=with_text)
    )
    if with_text:
        builder = builder.add_bytes_field("text", stored=True, indexed=False)
    schema = builder.build()
    tokenize_s: list[float] = []

    def reset() -> None:
        shutil.rmtree(target, ignore_errors=True)
        target.mkdir(parents=True)

    def build() -> Any:
        started = time.perf_counter()
        bodies = [" ".join(analyzer.terms(t)) for t in texts]
        tokenize_s.append(time.perf_counter() - started)
        index = tantivy.Index(schema, path=str(target))
        writer = index.writer(heap_size=_TANTIVY_BUILD_HEAP, num_threads=1)
        for row, body in enumerate(bodies):
            if with_text:
                stored = texts[row].encode("utf-8")
                writer.add_document(tantivy.Document(body=body, row=row, text=stored))
            else:
                writer.add_document(tantivy.Document(body=body, row=row))
        writer.commit()
        writer.wait_merging_threads()
        index.reload()
        return index

    _, times = _repeat(build, repeat, reset)
    return {"build_s": times, "tokenize_s": tokenize_s, "disk_mb": _dir_mb(target)}


def _tantivy_writes(tantivy: Any, target: Path, writes: int) -> dict[str, Any]:
    """The same write and edit as groundkit's: ``add_document`` (``delete`` by row
    first, for an edit), ``commit``, ``reload``, a fresh searcher, a search. One writer
    stays open throughout; the added rows are deleted again at the end."""
    index = tantivy.Index.open(str(target))
    schema = index.schema
    analyzer = Analyzer()
    first_row = index.searcher().num_docs
    writer = index.writer(heap_size=_TANTIVY_WRITER_HEAP, num_threads=1)

    def rows_for(token: str) -> set[int]:
        searcher = index.searcher()
        hits = searcher.search(_tantivy_query(tantivy, schema, analyzer.terms(token)), K).hits
        return {int(v) for v in searcher.fast_field_values("row", [a for _, a in hits])}

    def visible(row: int, token: str, started: float, gone: str | None = None) -> float:
        while True:
            if row in rows_for(token) and (gone is None or row not in rows_for(gone)):
                return (time.perf_counter() - started) * 1000
            if time.perf_counter() - started > _VISIBLE_TIMEOUT_S:
                raise RuntimeError(f"tantivy row {row} was not visible in time")
            index.reload()

    def put(row: int, token: str, n: int) -> None:
        body = " ".join(analyzer.terms(_live_text(token, n)))
        writer.add_document(tantivy.Document(body=body, row=row))
        writer.commit()
        index.reload()

    add_ms: list[float] = []
    edit_ms: list[float] = []
    tokens: list[str] = []
    try:
        for n in range(writes):
            token, started = _token(), time.perf_counter()
            put(first_row + n, token, n)
            add_ms.append(visible(first_row + n, token, started))
            tokens.append(token)
        for n, old in enumerate(tokens):
            token, started = _token(), time.perf_counter()
            writer.delete_documents_by_term("row", first_row + n)
            put(first_row + n, token, n)
            edit_ms.append(visible(first_row + n, token, started, gone=old))
    finally:
        for n in range(len(tokens)):
            writer.delete_documents_by_term("row", first_row + n)
        writer.commit()
        writer.wait_merging_threads()
    return {"add_ms": add_ms, "edit_ms": edit_ms, "failed": [], "attempted": 2 * writes}


# -- rank-bm25 -----------------------------------------------------------------


def _rank_bm25_worker(root: Path, phase: str, repeat: int, max_queries: int, writes: int) -> Any:
    import numpy as np
    from rank_bm25 import BM25Okapi

    texts = _texts(root)
    analyzer = Analyzer()
    before = memory_snapshot()
    tokenize_s: list[float] = []

    def build() -> Any:
        started = time.perf_counter()
        tokens = [analyzer.terms(t) for t in texts]
        tokenize_s.append(time.perf_counter() - started)
        return BM25Okapi(tokens, k1=1.5, b=0.75)

    model, times = _repeat(build, 1)
    opened = memory_snapshot()

    def search(q: str) -> Sequence[int]:
        scores = model.get_scores(analyzer.terms(q))
        top = np.argpartition(-scores, K)[:K]
        return [int(i) for i in top[np.argsort(-scores[top])] if scores[i] > 0]

    lat, tops = _timed_queries(_clock(search), _queries(root, max_queries), warmup=1)
    return {
        "build_s": times,
        "tokenize_s": tokenize_s,
        "latency_ms": lat,
        "top": tops,
        "memory_before": before,
        "memory_open": opened,
        "memory_queries": memory_snapshot(),
    }


_WORKERS: dict[str, Callable[[Path, str, int, int, int], Any]] = {
    "groundkit": _gk_worker,
    "bm25s": _bm25s_worker,
    "tantivy": _tantivy_worker,
    "tantivy_text": _tantivy_text_worker,
    "rank_bm25": _rank_bm25_worker,
}


def run_worker(
    system: str, phase: str, root: Path, repeat: int, max_queries: int, writes: int
) -> dict[str, Any]:
    """The result of one phase of one system (its process's peak RSS is added on print)."""
    result: dict[str, Any] = _WORKERS[system](root, phase, repeat, max_queries, writes)
    return result
