"""SciFact regression guards (slow): the recorded figures must hold within 0.01.

The BM25 guard is the fast one CI leans on: one BM25-only ingest of the full
corpus, all 300 test queries, and the citation echo on the first 50 queries
of the same collection. The dense and hybrid guard embeds the corpus with the
packaged MiniLM, so it takes minutes; it also carries the project's absolute
bars, so a lowered record cannot hide a regression below them.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from evals.beir import DEFAULT_EMBEDDER, VerifyTally, chunk_top_k, ingest_dataset
from evals.beir_run import TOLERANCE, evaluate_mode, load_recorded, run_modes
from evals.echo import echo_collection
from groundkit import SentenceTransformerEmbedder
from tests.evals.beir_data import scifact_or_skip

# The absolute bars: bm25 matches bm25s's published 0.687; hybrid reaches 0.72.
BARS = {"bm25": 0.687, "dense": 0.645, "hybrid": 0.72}


def _recorded(mode: str) -> float:
    entry = load_recorded().get("scifact", {}).get(mode)
    assert entry is not None, f"no recorded SciFact {mode} figure in evals/recorded.json"
    assert entry["queries"] == 300, "the recorded figure must cover all test queries"
    figure = float(entry["ndcg@10"])
    assert figure >= BARS[mode], f"the recorded {mode} figure {figure} is below the bar"
    return figure


@pytest.mark.slow
async def test_scifact_bm25_holds_its_recorded_ndcg_and_echoes(tmp_path: Path) -> None:
    data = scifact_or_skip()
    floor = _recorded("bm25") - TOLERANCE
    queries = data.judged_queries()
    async with ingest_dataset(data, tmp_path) as ing:
        result = await evaluate_mode(
            ing.collection,
            queries,
            data.qrels,
            "bm25",
            top_k=chunk_top_k(ing.chunks, ing.documents, 100),
            base_dir=ing.collection.base_dir,
        )
        echo = await echo_collection(
            ing.collection,
            data.judged_queries(50),
            modes=["bm25"],
            tamper_dir=tmp_path / "tampered",
        )
    assert result.report.queries == 300
    assert result.ndcg10 >= floor, f"bm25 nDCG@10 {result.ndcg10:.4f} < floor {floor:.4f}"
    assert result.ndcg10 >= BARS["bm25"]
    assert result.citations == VerifyTally(verified=result.citations.verified)
    assert echo.ok, echo.failures
    assert echo.queries == 50 and echo.results >= 450


@pytest.mark.slow
@pytest.mark.timeout(3600)  # embeds all of SciFact on the CPU
async def test_scifact_dense_and_hybrid_hold_their_recorded_ndcg(tmp_path: Path) -> None:
    data = scifact_or_skip()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    floors = {mode: _recorded(mode) - TOLERANCE for mode in ("dense", "hybrid")}
    run = await run_modes(
        data,
        ["dense", "hybrid"],
        name="scifact",
        embedder=SentenceTransformerEmbedder(DEFAULT_EMBEDDER),
        workdir=tmp_path,
    )
    assert run.ok, run.echo
    for mode in run.modes:
        assert mode.ndcg10 >= floors[mode.mode], (mode.mode, mode.ndcg10, floors[mode.mode])
        assert mode.ndcg10 >= BARS[mode.mode], (mode.mode, mode.ndcg10)
