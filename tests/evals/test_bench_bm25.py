"""evals.bench_bm25 end to end on a tiny synthetic corpus, and its page pieces alone."""

from __future__ import annotations

from pathlib import Path

import pytest

from evals import bench_bm25
from evals.bench_bm25 import Measured, Prepared, _scale_section, _targets
from evals.bm25_workers import LIVE_FOLDER

pytest.importorskip("bm25s")
pytest.importorskip("tantivy")
pytest.importorskip("rank_bm25")


def test_runs_end_to_end_at_a_tiny_size(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "benchmarks.md"
    kept = "<!-- section:other -->\n## kept\n<!-- /section:other -->\n"
    out.write_text("# old page\n\n" + kept, encoding="utf-8")
    code = bench_bm25.main(
        [
            "--sizes", "300", "--queries", "6", "--repeat", "1", "--writes", "2",
            "--rank-bm25-queries", "3", "--probe-mb", "8", "--rounds", "2",
            "--workdir", str(tmp_path / "work"), "--out", str(out),
        ]
    )  # fmt: skip
    assert code == 0
    page = out.read_text(encoding="utf-8")
    assert page.startswith("# BM25 benchmarks")
    assert page.endswith(kept)  # another benchmark's section survives
    for heading in ("Build, open and query:", "Memory (MB):", "One-document write"):
        assert heading in page
    rows = [line for line in page.splitlines() if line.startswith("| ")]
    for system in ("groundkit", "bm25s", "tantivy", "tantivy_text", "rank_bm25"):
        assert any(r.startswith(f"| {system} | ") for r in rows), system
    # Each system's queries were timed in two serving processes, taking turns (rank-bm25:
    # one, its build being its open).
    assert any(r.startswith("| groundkit | ") and "| 6 × 2 |" in r for r in rows)
    assert any(r.startswith("| rank_bm25 | ") and "× 1 |" in r for r in rows)
    # No phase failed, in any table (single writes failing are counted, not fatal).
    assert "failed:" not in page, capsys.readouterr().err[-2000:]
    assert "- two groundkit processes open the collection at once" in page
    assert "- groundkit open ≤ 0.5 s (target for 1M chunks)" in page
    assert "- groundkit search p50 ≤ 2× tantivy (its top 10 row ids only)" in page
    assert "- groundkit search p50 ≤ 2× tantivy returning each hit's stored text" in page
    assert "- groundkit RSS after open ≤ 0.5 × 2,191 MB" in page
    # The files the write test added are gone from the corpus; bm25s and both tantivy
    # indexes each keep one saved index, the one the open and serve phases used.
    root = tmp_path / "work" / "synthetic-300"
    assert not (root / "corpus" / LIVE_FOLDER).exists()
    saved = sorted(p.name for p in (root / "saved").iterdir())
    assert saved == ["bm25s", "tantivy", "tantivy_text"]


def _measured(system: str, scale: float) -> Measured:
    return Measured(
        system,
        build_s=2.0 * scale,
        open_cold_s=0.4 * scale,
        open_warm_s=0.1 * scale,
        cold_ok=True,
        p50_ms=1.0 * scale,
        p95_ms=2.0 * scale,
        queries=10,
        peak_mb=200.0 * scale,
        before={"VmRSS": 50.0},
        opened={"VmRSS": 100.0 * scale, "RssAnon": 60.0, "RssFile": 40.0, "RssShmem": 0.0},
        add_ms=[50.0, 80.0] if system == "groundkit" else None,
        edit_ms=[60.0, 90.0] if system == "groundkit" else None,
        write_attempts=4,
    )


def test_targets_and_scale_section(tmp_path: Path) -> None:
    results = [_measured("groundkit", 1.0), _measured("bm25s", 2.0), _measured("tantivy", 1.0)]
    results.append(_measured("tantivy_text", 0.4))
    lines = _targets(results, rss=True)
    assert "- groundkit first build ≤ 1.5× bm25s analyse+index: 0.50× → met" in lines
    assert "- groundkit search p50 ≤ 2× tantivy (its top 10 row ids only): 1.00× → met" in lines
    assert any(
        "tantivy returning each hit's stored text" in t and "2.50× → **missed**" in t for t in lines
    )
    assert any(t.startswith("- groundkit open ≤ 0.5 s") and "cold 0.400 s" in t for t in lines)
    assert any("write → visible" in t and t.endswith("→ met") for t in lines)
    results[0].write_failures = ["add 1: StorageError: boom"]
    assert any("1 of 4 writes failed → **missed**" in t for t in _targets(results))

    def prepared(chunks: int) -> Prepared:
        return Prepared(f"synthetic-{chunks}", tmp_path, chunks, 1, 1.0, 1.0, 10, "2025")

    png = tmp_path / "img" / "bm25-scale.png"
    section = _scale_section([(prepared(1000), results), (prepared(10_000), results)], png)
    assert section[0] == "## Against corpus size"
    assert png.is_file()
