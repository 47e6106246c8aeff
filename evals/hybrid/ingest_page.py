"""Part 1's page section: the ingest against the floor, where its time goes, its profile."""

from __future__ import annotations

import statistics

from evals.bench_util import verdict
from evals.hybrid.common import BATCH_SIZE
from evals.hybrid.ingest import IngestResult
from evals.machine import markdown_table

__all__ = ["ingest_section"]


def ingest_section(r: IngestResult) -> tuple[list[str], list[str]]:
    """Markdown for part 1 and its target lines."""
    floor = statistics.median(r.encode_s)
    ingest = statistics.median(r.dense_s)
    ratio = ingest / floor
    best = min(r.dense_s) / min(r.encode_s)
    plural = "s" if len(r.groups) != 1 else ""
    groups = f"{len(r.groups)} call{plural} of " + "/".join(str(n) for n in r.groups) + " chunks"
    rows: list[list[str]] = []
    for i, seconds in enumerate(r.encode_s):
        rows.append([f"`SentenceTransformer.encode`, run {i + 1}", f"{seconds:.1f}",
                     f"{seconds / floor:.3f}×"])  # fmt: skip
        if i < len(r.direct_s):
            rows.append([f"`SentenceTransformerEmbedder.embed_documents` alone, run {i + 1}",
                         f"{r.direct_s[i]:.1f}", f"{r.direct_s[i] / floor:.3f}×"])  # fmt: skip
        if i < len(r.dense_s):
            rows.append([f"`Collection.ingest` with `SentenceTransformerEmbedder`, run {i + 1}",
                         f"{r.dense_s[i]:.1f}", f"{r.dense_s[i] / floor:.3f}×"])  # fmt: skip
    rows += [
        ["**floor** = median of the encode runs", f"{floor:.1f}", "1.000×"],
        ["**dense ingest** = median of the ingest runs", f"{ingest:.1f}", f"**{ratio:.3f}×**"],
        ["`Collection.ingest` BM25 only (reference)", f"{r.bm25_s:.1f}",
         f"{r.bm25_s / floor:.3f}×"],
    ]  # fmt: skip
    if r.grouped_s is not None:
        rows.append([f"diagnostic: `encode` in the Indexer's groups ({groups})",
                     f"{r.grouped_s:.1f}", f"{r.grouped_s / floor:.3f}×"])  # fmt: skip
    names = ("embed_documents", "SQLite document writes", "vector upsert",
             "vector reuse lookups", "SQLite vector marks", "SQLite chunk reads (repair)",
             "vector optimize")  # fmt: skip
    breakdown: list[list[str]] = []

    def part(label: str, values: list[float], calls: int) -> None:
        mean = statistics.mean(values)
        breakdown.append([label, *(f"{v:.2f}" for v in values), f"{mean / ingest:.1%}",
                          f"{mean / floor:.3f}×", str(calls) if calls else "–"])  # fmt: skip

    for n in names:
        if n in r.timers[0].seconds:
            label = f"`{n}`" if n == "embed_documents" else n
            part(label, [t.seconds.get(n, 0.0) for t in r.timers], r.timers[0].calls[n])
    rest = [total - sum(t.seconds.values()) for total, t in zip(r.dense_s, r.timers, strict=True)]
    part("rest: read, chunk, analyse, loop, prune, orphan check", rest, 0)
    run_cols = [f"run {i + 1} s" for i in range(len(r.dense_s))]
    rest_mean = statistics.mean(rest)
    embed = statistics.mean(t.seconds.get("embed_documents", 0.0) for t in r.timers)
    stores_s = statistics.mean(
        sum(v for k, v in t.seconds.items() if k != "embed_documents") for t in r.timers
    )
    tok = r.tokens
    pf = r.profile
    profile_rows = [
        [f"`{name}`", f"{calls:,}", f"{own:.2f}", f"{own / pf.profiled_s:.1%}", f"{cum:.2f}"]
        for name, calls, own, cum in pf.top
    ]
    targets = [
        f"- dense ingest ≤ 1.1× `SentenceTransformer.encode` on the same chunk texts: "
        f"{ratio:.3f}× (median ingest / median encode; fastest / fastest {best:.3f}×) "
        f"→ {verdict(ratio <= 1.1)}"
    ]
    if r.grouped_s is None:
        grouped_note = "the Indexer made one call, so its padding is the floor's"
    else:
        grouped_note = (
            f"timed with the floor's model, those calls take {r.grouped_s / floor - 1:+.1%}"
            " against the floor"
        )
    lines = [
        "## 1. Dense ingest against the model floor",
        "",
        f"The first {r.documents:,} SciFact abstracts (file order), one file per document as",
        f"`evals/beir.py` writes them: {r.chunks:,} chunks, {r.chars / 1e6:.2f} M characters,",
        "default chunking. The floor is `SentenceTransformer.encode` on exactly the chunk texts",
        "groundkit stored (read back from the BM25-only collection), with the packaged",
        f"all-MiniLM-L6-v2, `batch_size={BATCH_SIZE}`, `normalize_embeddings=True`, one call. The",
        "ingest uses `SentenceTransformerEmbedder('all-MiniLM-L6-v2')` (same packaged model,",
        "same batch size) into a fresh index. Both models were loaded and had embedded one",
        "warm-up string before any timing. The steps alternate (encode; the embedder's own",
        "`embed_documents` on the same texts outside any ingest, a diagnostic; ingest into a",
        "fresh index; repeat; a last encode), so drift from other work on the machine lands",
        "on all of them; the ratio uses the medians.",
        f"Load average when timing started: {r.load_before}.",
        "",
        markdown_table(["step", "seconds", "× floor"], rows),
        "",
        *targets,
        "",
        "### Where the ingest's time goes",
        "",
        "Timers wrapped around these methods in the ingest runs (a few microseconds a call);",
        "share and × floor use the mean of the runs:",
        "",
        markdown_table(["part", *run_cols, "share of ingest", "× floor", "calls"], breakdown),
        "",
        f"- ingest − floor = {ingest - floor:.1f} s, of which: `embed_documents` beyond the "
        f"floor {embed - floor:.1f} s ({embed / floor - 1:+.1%}); SQLite and LanceDB writes "
        f"and lookups {stores_s:.1f} s ({stores_s / floor:.1%} of the floor); reading, "
        f"chunking and analysing the files and the rest {rest_mean:.1f} s "
        f"({rest_mean / floor:.1%}).",
        "- padding: sentence-transformers sorts texts by length within one call only, so",
        "  spreading them over several calls pads more. Tokens the model runs:",
        f"  {tok['text']:,} without padding, {tok['one call']:,} in one call,",
        f"  {tok['indexer groups']:,} in the Indexer's {groups} "
        f"({tok['indexer groups'] / tok['one call'] - 1:+.1%}); {grouped_note}.",
        f"- stored vectors against the floor's: max 1 − cos = {r.max_cosine_gap:.1e} "
        "(same model, same texts)",
        "",
        "Profile of the same ingest without the model (cProfile; a fresh index, the",
        "embedder replaying the floor's vectors, `asyncio.to_thread` run inline so chunking,",
        "analysis and reads are seen; SQL runs on aiosqlite's thread, so the loop's wait",
        f"for it shows as `poll`). Wall {pf.wall_s:.1f} s under the profiler;",
        f"{pf.sqlite_calls:,} round trips to aiosqlite's thread (statements, fetches, commits:",
        f"one `put_nowait` each) for {pf.documents:,} documents, "
        f"{pf.sqlite_calls / pf.documents:.1f} a document. Top {len(pf.top)} functions by own",
        "time (for a coroutine cProfile counts every resumption as a call):",
        "",
        markdown_table(["function", "calls", "own s", "own share", "cumulative s"], profile_rows),
        "",
    ]
    return lines, targets
