"""A tiny BEIR-format folder the evals tests write to disk, and the SciFact location."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from evals.beir import BeirDataset, load_beir
from evals.machine import default_scifact_dir

DOCS = {
    "d1": ("Zebra stripes", "Stripes on zebras deter biting flies. " * 4),
    "d2": ("Penguin diving", "Emperor penguins dive below five hundred metres to hunt."),
    "d3": ("Volcano ash", "Ash clouds from eruptions ground aircraft for days. " * 3),
    "d4": ("Mixed", "Penguins and volcanoes rarely meet in the wild."),
}
QUERIES = {"q1": "why do zebras have stripes flies", "q2": "how deep penguins dive", "q3": "x"}
QRELS = {"q1": {"d1": 1}, "q2": {"d2": 2, "d4": 0}, "q3": {"d3": 1}}


def write_beir(root: Path) -> Path:
    """Write the tiny corpus, queries and test qrels under ``root``; returns ``root``."""
    (root / "qrels").mkdir(parents=True)
    with (root / "corpus.jsonl").open("w", encoding="utf-8") as fh:
        for doc_id, (title, text) in DOCS.items():
            fh.write(json.dumps({"_id": doc_id, "title": title, "text": text}) + "\n")
    with (root / "queries.jsonl").open("w", encoding="utf-8") as fh:
        for qid, text in QUERIES.items():
            fh.write(json.dumps({"_id": qid, "text": text}) + "\n")
    lines = ["query-id\tcorpus-id\tscore"]
    lines += [f"{q}\t{d}\t{g}" for q, rel in QRELS.items() for d, g in rel.items()]
    (root / "qrels" / "test.tsv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return root


def scifact_or_skip() -> BeirDataset:
    """SciFact from beside the clone; in CI (``CI`` set) a missing copy fails, never skips."""
    data_dir = default_scifact_dir()
    if not (data_dir / "corpus.jsonl").exists():
        assert not os.environ.get("CI"), f"SciFact data missing in CI at {data_dir}"
        pytest.skip(f"SciFact data not found at {data_dir}")
    return load_beir(data_dir)
