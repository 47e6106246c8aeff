"""What scoring a clearance's corpus with its own statistics costs (adr/0052).

Generates the seeded synthetic corpus (``evals.synthetic``), deals its files into
four folders and ingests them with a sensitivity label each (two public, one
internal, one restricted: a public caller reads about half the chunks), BM25 only.
Then it times the same queries, interleaved (each query under every setting in
turn, the first setting rotating), on one collection opened two ways:

- ``none``: no clearance, no filter;
- ``filter``: no clearance, ``filters={"sensitivity": "public"}`` (the same chunks
  returned, scored with every document's statistics: what a clearance cost before);
- ``clearance``: ``clearance="public"``, scored with the cleared corpus's statistics,
  its per-term counts kept between searches (what a caller normally meets);
- ``clearance, cold``: the same with those counts dropped before every search, so
  each query term's cleared postings are counted again (the first search naming it).

And the index's own search (``BM25Index.search_ids``) under the clearance's mask,
with every document's statistics, with the corpus's, and with the corpus's counted
afresh: what the statistics alone add. ``x base`` is against ``none`` for the
searches and against ``index: mask only`` for the index.

    python -m evals.bench_clearance_stats --chunks 50k
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

from evals.stats import percentile
from evals.synthetic import BENCH_CHUNKING, SyntheticSpec, generate, parse_size
from groundkit import Collection
from groundkit.lexical import Analyzer
from groundkit.lexical.bm25 import CURRENT
from groundkit.retrieval import Retriever

__all__ = ["main"]

_LABELS = ("public", "public", "internal", "restricted")


async def _ingest(files: dict[str, str], root: Path, index: Path) -> int:
    for i, text in enumerate(files.values()):
        path = root / str(i % len(_LABELS)) / f"p{i:07d}.txt"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    async with Collection.open(index, "bench", base_dir=root, chunking=BENCH_CHUNKING) as col:
        for n, label in enumerate(_LABELS):
            report = await col.ingest(root / str(n), metadata={"sensitivity": label})
            if report.failed:
                raise RuntimeError(f"{len(report.failed)} files failed")
        return await col.store.chunk_count()


def _forget_counts(retriever: Retriever) -> None:
    """Drop the cleared corpus's kept per-term counts (a measurement aid only)."""
    scope = retriever._scope
    if scope is not None and scope[1].corpus is not None:
        scope[1].corpus._df.clear()


async def _measure(index: Path, queries: list[str], rounds: int) -> dict[str, list[float]]:
    async with (
        Collection.open(index, "bench") as plain,
        Collection.open(index, "bench", clearance="public") as cleared,
    ):
        none, public = await plain.retriever(), await cleared.retriever()
        settings: list[tuple[str, Retriever, dict[str, Any] | None, bool]] = [
            ("none", none, None, False),
            ("filter", none, {"sensitivity": "public"}, False),
            ("clearance", public, None, False),
            ("clearance, cold", public, None, True),
        ]
        samples: dict[str, list[float]] = {name: [] for name, *_ in settings}
        samples.update({name: [] for name in _KERNEL_SETTINGS})
        for _, retriever, flt, _ in settings:  # warm-up: masks built, caches filled
            for query in queries:
                await retriever.search(query, 10, filters=flt)
        for _ in range(rounds):
            for n, query in enumerate(queries):
                # Each query's settings in turn, starting from a different one each time,
                # so none is always the first to touch the postings.
                turn = n % len(settings)
                for name, retriever, flt, cold in settings[turn:] + settings[:turn]:
                    if cold:
                        _forget_counts(retriever)
                    started = time.perf_counter()
                    await retriever.search(query, 10, filters=flt)
                    samples[name].append((time.perf_counter() - started) * 1000)
        await _index_level(public, queries, rounds, samples)
    return samples


# The index alone, the clearance's mask on every call: global statistics against the
# corpus's (kept, and counted again each time).
_KERNEL_SETTINGS = ("index: mask only", "index: corpus", "index: corpus, cold")


async def _index_level(
    retriever: Retriever, queries: list[str], rounds: int, samples: dict[str, list[float]]
) -> None:
    scope = retriever._scope
    assert scope is not None and scope[1].corpus is not None
    index, corpus = scope[0], scope[1].corpus
    analyzer = Analyzer()
    asked = []
    for query in queries:
        ids = await retriever.lexical.term_ids(analyzer.terms(query))
        asked.append(Counter(ids.values()))
    views = {
        "index: mask only": CURRENT,
        "index: corpus": CURRENT.within(corpus),
        "index: corpus, cold": CURRENT.within(corpus),
    }
    for _ in range(rounds):
        for n, wanted in enumerate(asked):
            turn = n % len(views)
            names = list(views)
            for name in names[turn:] + names[:turn]:
                if name.endswith("cold"):
                    corpus._df.clear()
                started = time.perf_counter()
                index.search_ids(wanted, 10, mask=corpus.mask, view=views[name])
                samples[name].append((time.perf_counter() - started) * 1000)


async def _run(args: argparse.Namespace) -> None:
    size = parse_size(args.chunks)
    work = Path(tempfile.mkdtemp(prefix="clearance-stats-"))
    try:
        corpus = generate(SyntheticSpec(passages=size), args.queries)
        chunks = await _ingest(corpus.files, work / "corpus", work / "index")
        samples = await _measure(work / "index", corpus.queries, args.rounds)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    base = percentile(samples["none"], 50)
    print(f"{chunks:,} chunks, {len(corpus.queries)} queries x {args.rounds} rounds, top_k 10")
    print(f"{'setting':<22}{'p50 ms':>9}{'p95 ms':>9}{'x base':>9}")
    for name, values in samples.items():
        if name == _KERNEL_SETTINGS[0]:
            base = percentile(values, 50)
        p50, p95 = percentile(values, 50), percentile(values, 95)
        print(f"{name:<22}{p50:>9.3f}{p95:>9.3f}{p50 / base:>9.2f}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chunks", default="50k", help="corpus size (default 50k)")
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    asyncio.run(_run(parser.parse_args(argv)))


if __name__ == "__main__":
    main()
