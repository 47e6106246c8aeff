"""evals.evidence on a tiny folder of the same shape: any such folder runs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from evals import evidence
from tests.evals.beir_data import DOCS, write_beir


def test_inside_means_within_one_rationale() -> None:
    assert evidence.inside((5, 10), [(0, 10)])
    assert not evidence.inside((5, 11), [(0, 10), (11, 20)])


def test_hit_needs_half_of_the_shorter_span() -> None:
    assert evidence.hit((0, 10), [(5, 30)])  # 5 of the shorter 10
    assert not evidence.hit((0, 10), [(6, 30)])
    assert not evidence.hit((0, 10), [(10, 20)])
    assert evidence.hit((10, 12), [(0, 100)])


def test_choose_thresholds() -> None:
    support = [0.9, 0.8, 0.7, 0.6, 0.5]
    irrelevant = [0.55, 0.4, 0.3, 0.2, 0.1]
    picked = evidence.choose_thresholds(support, irrelevant)
    assert picked is not None
    best, weak = picked
    assert best == 0.5  # the gap is 0.8 at 0.5 and at 0.6: the lower one is kept
    assert weak <= best
    assert evidence.choose_thresholds(support, []) is None


def test_runs_on_any_folder_with_the_same_files(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = write_beir(tmp_path / "tiny")
    text = DOCS["d2"][1]
    rows = [
        {
            "claim_id": "q2",
            "claim": "Penguins dive five hundred metres deep.",
            "doc_id": "d2",
            "label": "SUPPORT",
            "rationale_spans": [[0, len(text)]],
        },
        {
            "claim_id": "q1",
            "claim": "Zebra stripes deter biting flies.",
            "doc_id": "d1",
            "label": "CONTRADICT",
            "rationale_spans": [[0, 38]],
        },
    ]
    for name in ("evidence-test.jsonl", "evidence-train.jsonl"):
        (root / name).write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    page = tmp_path / "quality.md"
    page.write_text("# Quality\n\nkept\n", encoding="utf-8")
    assert evidence.main(["--data", str(root), "--embedder", "", "--out", str(page)]) == 0
    written = page.read_text(encoding="utf-8")
    assert written.startswith("# Quality\n\nkept\n")
    assert "<!-- section:evidence -->" in written
    # Both tops are gold, and lie inside their rationale: the titles are passed over.
    assert "| terms | 1.000 | 1.000 | 1.000 |" in written
    # The first sentence is the title now: never inside a rationale.
    assert "| first sentence | 0.000 | 0.000 |" in written
    assert "| test | terms | SUPPORT | 1 |" in written
    assert "| train | terms | SUPPORT | 1 |" in written
    assert "embedding" not in written.split("### Answer checks")[1].split("Machine")[0]
    assert (
        "2 (claim, cited abstract) pairs of `tiny/evidence-test.jsonl`" in capsys.readouterr().out
    )
