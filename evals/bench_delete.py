"""What one ``Collection.delete`` costs as the collection grows.

    python -m evals.bench_delete [--sizes 1000,10000] [--deletes 30] [--erase]

Each size is a folder of that many small text files, ingested (BM25 only) into a fresh
local collection. Then ``--deletes`` documents are deleted one call each, by source,
and each call is timed (the lookup, the transaction, the lexical index's commit). With
``--erase`` one more document is deleted with ``erase=True`` and timed on its own: an
erase rewrites the collection's files, so it is expected to grow with the collection.
The script uses the public API only, so it runs against an older groundkit too
(``PYTHONPATH=<its src>``), for a before/after comparison.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from pathlib import Path

from groundkit import Collection

__all__ = ["main"]

_WORDS = [
    "harbour",
    "crane",
    "ledger",
    "quokka",
    "meadow",
    "river",
    "espresso",
    "kettle",
    "lantern",
    "orchard",
    "copper",
    "glacier",
    "tundra",
    "falcon",
    "willow",
    "saffron",
    "basalt",
    "cobalt",
    "ember",
    "fjord",
]


def _write_corpus(root: Path, size: int) -> list[str]:
    root.mkdir(parents=True)
    sources = []
    for i in range(size):
        words = [_WORDS[(i * 7 + k * 3) % len(_WORDS)] for k in range(12)]
        name = f"d{i:06d}.txt"
        (root / name).write_text(f"Document {i} tag{i}. " + " ".join(words) + ".\n")
        sources.append(f"docs/{name}")
    return sources


async def _measure(size: int, deletes: int, erase: bool) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        sources = _write_corpus(base / "docs", size)
        async with Collection.open(base / "idx", base_dir=base) as col:
            await col.ingest(base / "docs")
            await col.search("harbour", top_k=1)  # the lexical index is open, as in use
            step = max(1, size // (deletes + 1))
            timings: list[float] = []
            for source in sources[step::step][:deletes]:
                start = time.perf_counter()
                report = await col.delete(sources=[source])
                timings.append(time.perf_counter() - start)
                assert report.deleted == [source], report
            out = {
                "median_ms": statistics.median(timings) * 1000,
                "max_ms": max(timings) * 1000,
            }
            if erase:
                start = time.perf_counter()
                await col.delete(sources=[sources[0]], erase=True)
                out["erase_ms"] = (time.perf_counter() - start) * 1000
        return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="1000,10000")
    parser.add_argument("--deletes", type=int, default=30)
    parser.add_argument("--erase", action="store_true")
    args = parser.parse_args(argv)
    print("| documents | delete median (ms) | delete max (ms) | erase (ms) |")
    print("|---:|---:|---:|---:|")
    for size in (int(s) for s in args.sizes.split(",")):
        found = asyncio.run(_measure(size, args.deletes, args.erase))
        erased = f"{found['erase_ms']:.0f}" if "erase_ms" in found else "-"
        print(f"| {size} | {found['median_ms']:.1f} | {found['max_ms']:.1f} | {erased} |")


if __name__ == "__main__":
    main()
