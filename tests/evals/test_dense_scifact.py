"""SciFact dense and hybrid through the real pipeline meet the project's bars (slow)."""

from __future__ import annotations

import os

import pytest

from evals.beir import load_beir
from evals.dense_scifact import run
from evals.machine import default_scifact_dir
from groundkit import RetrievalConfig


@pytest.mark.slow
async def test_scifact_dense_and_hybrid_meet_the_bars() -> None:
    data_dir = default_scifact_dir()
    if not (data_dir / "corpus.jsonl").exists():
        assert not os.environ.get("CI"), f"SciFact data missing in CI at {data_dir}"
        pytest.skip(f"SciFact data not found at {data_dir}")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    settings = [
        ("dense", "dense", RetrievalConfig()),
        ("hybrid", "hybrid", RetrievalConfig()),
    ]
    results, _, _ = await run(load_beir(data_dir), None, settings)
    by_label = {r.label: r for r in results}
    assert by_label["dense"].means["ndcg@10"] >= 0.645
    assert by_label["hybrid"].means["ndcg@10"] >= 0.72
    assert all(r.failed == 0 and r.verified > 0 for r in results)
