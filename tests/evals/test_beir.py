"""The BEIR runner end to end on a tiny corpus, the synthetic generator, and the SciFact bar."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from evals.beir import BeirDataset, load_beir, rank_documents, run_bm25
from evals.machine import default_scifact_dir
from evals.synthetic import BENCH_CHUNKING, SyntheticSpec, generate, write_corpus
from groundkit import ChunkingConfig, chunk_spans

_DOCS = {
    "d1": ("Zebra stripes", "Stripes on zebras deter biting flies. " * 4),
    "d2": ("Penguin diving", "Emperor penguins dive below five hundred metres to hunt."),
    "d3": ("Volcano ash", "Ash clouds from eruptions ground aircraft for days. " * 3),
    "d4": ("Mixed", "Penguins and volcanoes rarely meet in the wild."),
}
_QUERIES = {"q1": "why do zebras have stripes flies", "q2": "how deep penguins dive", "q3": "x"}
_QRELS = {"q1": {"d1": 1}, "q2": {"d2": 2, "d4": 0}, "q3": {"d3": 1}}


def _write_beir(root: Path) -> None:
    (root / "qrels").mkdir(parents=True)
    with (root / "corpus.jsonl").open("w", encoding="utf-8") as fh:
        for doc_id, (title, text) in _DOCS.items():
            fh.write(json.dumps({"_id": doc_id, "title": title, "text": text}) + "\n")
    with (root / "queries.jsonl").open("w", encoding="utf-8") as fh:
        for qid, text in _QUERIES.items():
            fh.write(json.dumps({"_id": qid, "text": text}) + "\n")
    lines = ["query-id\tcorpus-id\tscore"]
    lines += [f"{q}\t{d}\t{g}" for q, rel in _QRELS.items() for d, g in rel.items()]
    (root / "qrels" / "test.tsv").write_text("\n".join(lines) + "\n", encoding="utf-8")


def test_load_beir(tmp_path: Path) -> None:
    _write_beir(tmp_path)
    data = load_beir(tmp_path)
    assert data.corpus["d2"][0] == "Penguin diving"
    assert data.qrels["q2"] == {"d2": 2, "d4": 0}
    assert list(data.judged_queries(limit=2)) == ["q1", "q2"]


async def test_run_bm25_ranks_documents_and_verifies_citations(tmp_path: Path) -> None:
    _write_beir(tmp_path / "data")
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


@pytest.mark.slow
async def test_scifact_bm25_meets_the_quality_bar() -> None:
    data_dir = default_scifact_dir()
    if not (data_dir / "corpus.jsonl").exists():
        # CI always has shared/ beside the clone: a missing copy there is a failure.
        assert not os.environ.get("CI"), f"SciFact data missing in CI at {data_dir}"
        pytest.skip(f"SciFact data not found at {data_dir}")
    data: BeirDataset = load_beir(data_dir)
    result = await run_bm25(data, verify="ranked", latency_pass=False)
    assert result.report.queries == 300
    assert result.verify_failed == 0
    assert result.report.means["ndcg@10"] >= 0.687
