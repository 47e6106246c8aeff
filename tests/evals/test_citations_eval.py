"""evals.citations on a tiny folder of the same shape: the answers it builds and their figures."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from evals import citations
from tests.evals.beir_data import DOCS, write_beir


def test_runs_on_any_folder_with_the_same_files(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = write_beir(tmp_path / "tiny")
    claims = {
        "q2": ("d2", "SUPPORT", "Emperor penguins dive below five hundred metres to hunt."),
        # The best hit not judged relevant to q3 is d4, through "penguins".
        "q3": (
            "d3",
            "SUPPORT",
            "Ash clouds from eruptions ground aircraft for days, penguins too.",
        ),
        "q1": ("d1", "CONTRADICT", "Stripes on zebras deter biting flies."),
    }
    with (root / "evidence-test.jsonl").open("w", encoding="utf-8") as fh:
        for claim_id, (doc_id, label, claim) in claims.items():
            spans = [[0, len(DOCS[doc_id][1])]]
            row = {"claim_id": claim_id, "claim": claim, "doc_id": doc_id, "label": label}
            fh.write(json.dumps({**row, "rationale_spans": spans}) + "\n")
    page = tmp_path / "quality.md"
    page.write_text("# Quality\n\nkept\n", encoding="utf-8")
    assert citations.main(["--embedder", "", "--out", str(page), "--data", str(root)]) == 0
    written = page.read_text(encoding="utf-8")
    assert written.startswith("# Quality\n\nkept\n")
    assert "<!-- section:citations -->" in written
    # Both gold answers supported; the noise (d4) read as support for nothing, so each
    # two-citation answer is supported with exactly its noise citation irrelevant.
    assert "| terms | gold | 2 | 1.000 | 1.0 | 1.000 | 1.0 |" in written
    assert "| terms | gold + noise | 1 | 1.000 | 1.0 | 0.500 | 0.5 |" in written
    assert "| terms | noise + gold | 1 | 1.000 | 1.0 | 0.500 | 0.5 |" in written
    assert "| terms | noise | 1 | 0.000 | 0.0 | 0.000 | 0.0 |" in written
    # Similarity is not entailment: the contradicting abstract shares the claim's words.
    assert "| terms | contradicting | 1 | 1.000 | 0.0 | 1.000 | 0.0 |" in written
    assert "| terms | 2 | 1.000 |" in written
    assert "3 (claim, abstract) pairs of `tiny/evidence-test.jsonl`" in capsys.readouterr().out
