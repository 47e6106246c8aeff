"""The BEIR loader and BM25 run end to end on a tiny corpus, and the synthetic generator."""

from __future__ import annotations

from pathlib import Path

import pytest

from evals.beir import load_beir, parse_modes, rank_documents, run_bm25, search_args
from evals.synthetic import BENCH_CHUNKING, SyntheticSpec, generate, write_corpus
from groundkit import ChunkingConfig
from groundkit.ingestion import chunk_spans
from tests.evals.beir_data import write_beir


def test_load_beir(tmp_path: Path) -> None:
    write_beir(tmp_path)
    data = load_beir(tmp_path)
    assert data.corpus["d2"][0] == "Penguin diving"
    assert data.qrels["q2"] == {"d2": 2, "d4": 0}
    assert list(data.judged_queries(limit=2)) == ["q1", "q2"]


async def test_run_bm25_ranks_documents_and_verifies_citations(tmp_path: Path) -> None:
    write_beir(tmp_path / "data")
    data = load_beir(tmp_path / "data")
    result = await run_bm25(
        data,
        chunking=ChunkingConfig(max_chars=64, overlap_chars=8),
        depth=10,
        verify="all",
        workdir=tmp_path / "work",
    )
    assert result.chunks > result.documents == 4  # documents were split
    assert result.rankings["q1"][0] == "d1"
    assert result.rankings["q2"][0] == "d2"
    for ranking in result.rankings.values():
        assert len(ranking) == len(set(ranking))
    assert result.verified > 0
    assert result.verify_failed == 0
    assert result.report.queries == 3
    assert result.report.per_query["q3"]["ndcg@10"] == 0.0  # "x" matches nothing


def test_rank_documents_keeps_first_chunk_per_source() -> None:
    class _R:
        def __init__(self, source: str) -> None:
            self.source = source

    ranked = rank_documents([_R("a"), _R("b"), _R("a"), _R("c")], 2)  # type: ignore[list-item]
    assert [r.source for r in ranked] == ["a", "b"]


def test_synthetic_corpus_is_deterministic_with_one_chunk_per_passage(tmp_path: Path) -> None:
    spec = SyntheticSpec(passages=400, seed=7)
    first, second = generate(spec, queries=20), generate(spec, queries=20)
    assert first == second
    assert write_corpus(first, tmp_path) == 400
    for text in first.files.values():
        assert len(chunk_spans(text, BENCH_CHUNKING)) == text.count("\n\n") + 1
    assert any("\u4e00" <= ch <= "\u9fff" for text in first.files.values() for ch in text)
    assert all(2 <= len(q.split()) <= 5 for q in first.queries)


def test_modes_parse_in_order_once_and_map_to_search_arguments() -> None:
    assert parse_modes("hybrid, bm25,hybrid") == ["hybrid", "bm25"]
    assert search_args("hybrid+rerank") == ("hybrid", True)
    assert search_args("dense") == ("dense", False)
    with pytest.raises(ValueError, match="no mode"):
        parse_modes(" , ")
    with pytest.raises(ValueError, match="sparse"):
        parse_modes("bm25,sparse")
