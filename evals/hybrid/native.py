"""The anchor of part 2: LanceDB's own FTS and FTS + vector hybrid over the same data.

The table holds the chunk texts and the vectors groundkit stored; the latency
loop and the memory workers both search it through ``native_search``.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path
from typing import Any

from evals.hybrid.embedders import HashEmbedder
from groundkit import Collection
from groundkit.storage import LanceDBVectorStore

__all__ = ["NATIVE_FTS", "NATIVE_HYBRID", "NATIVE_TABLE", "build_native_table", "native_search"]

NATIVE_FTS = "anchor: LanceDB native FTS"
NATIVE_HYBRID = "anchor: LanceDB native hybrid (FTS + vector, RRF)"
NATIVE_TABLE = "native"


async def build_native_table(col: Collection, workdir: Path) -> tuple[Any, float, str]:
    """LanceDB's own hybrid stack over the same chunk texts and vectors: an anchor.

    One table of (chunk_id, text, vector) with LanceDB's native FTS index
    (English stemming and stop words, its BM25) and an IVF_SQ cosine index.
    Returns the table, build seconds (table + both indexes) and a note on what
    was built.
    """
    import lancedb
    import pyarrow as pa
    from lancedb.index import FTS, IvfSq

    store = col.vector_store
    assert isinstance(store, LanceDBVectorStore)
    # Copy the vectors groundkit stored, read through the store's raw table.
    vectors = await store.table.query().select(["chunk_id", "vector"]).to_arrow()
    texts = {s.chunk_id: s.content async for batch in col.store.iter_chunks() for s in batch}
    ids = [str(c) for c in vectors["chunk_id"].to_pylist()]
    data = pa.table(
        {
            "chunk_id": pa.array(ids, pa.string()),
            "text": pa.array([texts[c] for c in ids], pa.string()),
            "vector": vectors["vector"],
        }
    )
    shutil.rmtree(workdir, ignore_errors=True)
    started = time.perf_counter()
    db = await lancedb.connect_async(str(workdir))
    table = await db.create_table(NATIVE_TABLE, data=data)
    await table.create_index("text", config=FTS(language="English"))
    ivf: Any = IvfSq(distance_type="cosine")  # accepted at run time; missing from the stub union
    await table.create_index("vector", config=ivf)
    build_s = time.perf_counter() - started
    note = (
        f"{len(ids):,} rows; FTS index (LanceDB native, English stemming and stop words) and "
        "IVF_SQ cosine index, default search settings; hybrid = `nearest_to(vector)"
        ".nearest_to_text(query)` with LanceDB's default RRF reranker"
    )
    return table, build_s, note


async def native_search(table: Any, embedder: HashEmbedder, q: str, *, hybrid: bool) -> Any:
    """The top 10 chunk ids for ``q`` (an Arrow table): FTS alone, or FTS + vector.

    The query vector is ``embedder``'s, as in groundkit's dense and hybrid rows.
    """
    if hybrid:
        query = table.query().nearest_to(embedder.embed_sync([q])[0]).nearest_to_text(q)
    else:
        query = table.query().nearest_to_text(q)
    return await query.select(["chunk_id"]).limit(10).to_arrow()
