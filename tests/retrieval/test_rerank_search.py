"""rerank=True through Collection: the cross-encoder reorders the mode's candidates."""

from __future__ import annotations

from pathlib import Path

import pytest

from groundkit import (
    Collection,
    CrossEncoderReranker,
    RerankerNotConfiguredError,
)
from tests.retrieval.conftest import TinyCrossEncoders, reranked_collection
from tests.support import QUERIES, assert_all_verify


async def test_rerank_reorders_candidates_and_citations_hold(
    index_dir: Path, corpus_dir: Path, tiny_cross_encoders: TinyCrossEncoders
) -> None:
    reranker = CrossEncoderReranker(str(tiny_cross_encoders.single))
    async with reranked_collection(index_dir, corpus_dir, reranker) as col:
        for mode in ("bm25", "dense", "hybrid"):
            for query in QUERIES:
                plain = await col.search(query, 8, mode=mode)
                ranked = await col.search(query, 3, mode=mode, rerank=True)
                assert ranked.metadata["stage"] == "rerank"
                assert len(ranked.results) == min(3, len(plain.results))
                assert {r.chunk_id for r in ranked.results} <= {r.chunk_id for r in plain.results}
                scores = [r.score for r in ranked.results]
                assert scores == sorted(scores, reverse=True)
                assert all(0.0 <= s <= 1.0 for s in scores)
                await assert_all_verify(ranked.results, corpus_dir)
                # Reordering keeps each result's highlights (none for dense hits).
                before = {r.chunk_id: r.highlights for r in plain.results}
                assert all(r.highlights == before[r.chunk_id] for r in ranked.results)


async def test_rerank_without_a_reranker_is_refused(index_dir: Path, corpus_dir: Path) -> None:
    async with Collection.open(index_dir, base_dir=corpus_dir) as col:
        await col.ingest(corpus_dir)
        with pytest.raises(RerankerNotConfiguredError, match="reranker"):
            await col.search("solar", rerank=True)
