"""The synthetic collections of part 2: generated, ingested with ``HashEmbedder``, cached.

Each size lives in ``<workdir>/synthetic-<size>/`` (corpus files, queries, the
index and ``meta.json``). A collection is reused while its fingerprint (cache
version, schema, corpus spec, analyzer, embedder, ANN threshold, query count)
still matches; ``fresh`` rebuilds it.
"""

from __future__ import annotations

import json
import shutil
import time
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path

from evals.bench_util import Timers, reusable_cache, time_method
from evals.hybrid.common import log
from evals.hybrid.embedders import HashEmbedder
from evals.synthetic import BENCH_CHUNKING, SyntheticSpec, generate, size_label
from evals.synthetic import write_corpus as write_synthetic
from groundkit import Collection, IngestProgress
from groundkit.lexical import Analyzer
from groundkit.storage.lancedb import DEFAULT_ANN_THRESHOLD
from groundkit.storage.sqlite import SCHEMA_VERSION

__all__ = ["Prepared", "prepare_synthetic"]

_CACHE_VERSION = f"1;schema={SCHEMA_VERSION}"


@dataclass(frozen=True)
class Prepared:
    """The cached synthetic collection and how it was made."""

    name: str
    root: Path
    chunks: int
    files: int
    ingest_s: float
    docs_phase_s: float
    vector_s: dict[str, float]
    ingested_at: str
    cached: bool = False


def _fingerprint(spec: SyntheticSpec, n_queries: int) -> str:
    embedder = HashEmbedder()
    return (
        f"{_CACHE_VERSION}:{spec.fingerprint()}:{Analyzer().identity}:"
        f"{embedder.provider}/{embedder.model_name}:{DEFAULT_ANN_THRESHOLD}:{n_queries}"
    )


async def prepare_synthetic(workdir: Path, passages: int, n_queries: int, fresh: bool) -> Prepared:
    """Generate and ingest the synthetic corpus with ``HashEmbedder`` vectors, or reuse it."""
    spec = SyntheticSpec(passages=passages)
    name = f"synthetic-{size_label(passages)}"
    root = workdir / name
    meta_path = root / "meta.json"
    fingerprint = _fingerprint(spec, n_queries)
    if not fresh and (meta := reusable_cache(meta_path, fingerprint, root / "index")) is not None:
        return Prepared(root=root, cached=True, **meta["prepared"])
    if root.exists():
        shutil.rmtree(root)
    root.mkdir(parents=True)
    log(f"part 2: generating {name}")
    corpus = generate(spec, n_queries)
    write_synthetic(corpus, root / "corpus")
    (root / "queries.json").write_text(json.dumps(corpus.queries), encoding="utf-8")
    log(f"part 2: ingesting {name} with HashEmbedder vectors")
    embedder = HashEmbedder()
    async with Collection.open(
        root / "index", "bench", base_dir=root, chunking=BENCH_CHUNKING, embedder=embedder
    ) as col:
        assert col.vector_store is not None
        timers = Timers()
        time_method(embedder, "embed_documents", timers, "embed_documents (hash)")
        time_method(col.vector_store, "upsert_documents", timers, "vector upsert")
        time_method(col.vector_store, "optimize", timers, "vector optimize")
        last = 0.0

        def progress(event: IngestProgress) -> None:
            nonlocal last
            if event.stage == "read":  # when the last file was read
                last = time.perf_counter()

        started = time.perf_counter()
        report = await col.ingest(root / "corpus", progress=progress)
        ingest_s = time.perf_counter() - started
        if report.failed:
            raise RuntimeError(f"ingest failed for {len(report.failed)} files")
        chunks = await col.store.chunk_count()
    prepared = Prepared(
        name=name,
        root=root,
        chunks=chunks,
        files=len(report.added),
        ingest_s=ingest_s,
        docs_phase_s=last - started,
        vector_s=dict(timers.seconds),
        ingested_at=datetime.now(UTC).isoformat(timespec="seconds"),
    )
    fields = {k: v for k, v in asdict(prepared).items() if k not in ("root", "cached")}
    meta_path.write_text(json.dumps({"fingerprint": fingerprint, "prepared": fields}), "utf-8")
    return prepared
