"""The grk command line, driven in-process and once as a real subprocess."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from groundkit.cli import main


@pytest.fixture
def corpus(tmp_path: Path) -> Path:
    root = tmp_path / "corpus"
    (root / "sub").mkdir(parents=True)
    (root / "a.md").write_text(
        "Cats are small carnivorous mammals.\n\nDogs bark loudly at night.\n", encoding="utf-8"
    )
    (root / "sub" / "b.txt").write_text(
        "The stock market fell today. Investors worry about inflation.\n", encoding="utf-8"
    )
    return root


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def common(tmp_path: Path) -> list[str]:
    return ["--index-dir", str(tmp_path / "idx"), "--base-dir", str(tmp_path)]


def test_ingest_search_fetch_verify_round_trip(
    tmp_path: Path, corpus: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = run(capsys, "ingest", str(corpus), *common(tmp_path), "--json")
    assert code == 0
    report = json.loads(out)
    assert report["added"] == ["corpus/a.md", "corpus/sub/b.txt"]
    assert report["failed"] == []

    code, out, _ = run(capsys, "search", "inflation market", *common(tmp_path), "--json")
    assert code == 0
    payload = json.loads(out)
    assert payload["mode"] == "bm25"
    assert payload["total_results"] == 1
    hit = payload["results"][0]
    assert hit["citation"]["source"] == "corpus/sub/b.txt"
    assert set(hit) >= {"content", "score", "citation", "evidence", "heading_path"}
    assert set(hit["citation"]) >= {"chunk_id", "start_offset", "end_offset", "version"}
    assert "highlights" not in hit  # --full adds them
    code, out, _ = run(capsys, "search", "inflation market", *common(tmp_path), "--json", "--full")
    full = json.loads(out)["results"][0]
    assert [full["content"][a:b] for a, b in full["highlights"]] == ["market", "inflation"]
    chunk_id = hit["citation"]["chunk_id"]

    code, out, _ = run(capsys, "fetch", chunk_id, *common(tmp_path), "--json")
    assert code == 0
    assert json.loads(out)["verification"] == "verified"

    code, out, _ = run(capsys, "verify", *common(tmp_path))
    assert code == 0
    assert out.startswith("verified 2, moved 0, drifted 0, unresolvable 0")

    (corpus / "sub" / "b.txt").write_text("The stock market rose.\n", encoding="utf-8")
    code, out, _ = run(capsys, "verify", *common(tmp_path), "--json")
    assert code == 1
    result = json.loads(out)
    assert result["drifted"] == 1
    assert result["problems"][0]["citation"]["source"] == "corpus/sub/b.txt"
    code, _, _ = run(capsys, "fetch", chunk_id, *common(tmp_path))
    assert code == 1


def test_human_search_output_shows_source_offsets_and_snippet(
    tmp_path: Path, corpus: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run(capsys, "ingest", str(corpus), *common(tmp_path))
    code, out, _ = run(capsys, "search", "dogs", *common(tmp_path))
    assert code == 0
    assert "corpus/a.md [0:" in out
    assert "Dogs bark loudly at night." in out


def test_failed_file_gives_exit_1_and_a_reason(
    tmp_path: Path, corpus: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (corpus / "bad.txt").write_bytes(b"\xff\xfe not utf-8")
    code, out, _ = run(capsys, "ingest", str(corpus), *common(tmp_path))
    assert code == 1
    assert "failed 1" in out
    assert "not valid UTF-8" in out


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["search", "   "], "non-empty"),
        (["search", "x", "--top-k", "0"], "--top-k must be"),
        (["search", "x", "--mode", "dense"], "grk ingest PATH --embedder MODEL"),
        (["fetch", "no-such-chunk"], "no chunk"),
    ],
)
def test_errors_are_one_line_and_exit_2(
    tmp_path: Path,
    corpus: Path,
    capsys: pytest.CaptureFixture[str],
    argv: list[str],
    needle: str,
) -> None:
    run(capsys, "ingest", str(corpus), *common(tmp_path))
    code, _, err = run(capsys, *argv, *common(tmp_path))
    assert code == 2
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("grk: error:")
    assert needle in lines[0]
    assert "Traceback" not in err


def test_ingest_meta_sets_typed_fields(
    tmp_path: Path, corpus: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["ingest", str(corpus), *common(tmp_path), "--meta", "year=2024"]
    argv += ["--meta", 'code="007"', "--meta", "tags=[a, b]", "--meta", "draft=false"]
    code, _, _ = run(capsys, *argv)
    assert code == 0
    code, out, _ = run(capsys, "search", "inflation", *common(tmp_path), "--json")
    assert code == 0
    fields = json.loads(out)["results"][0]["fields"]
    assert fields == {"code": "007", "draft": False, "tags": ["a", "b"], "year": 2024}


@pytest.mark.parametrize(
    ("meta", "needle"),
    [
        (["novalue"], "expected KEY=VALUE"),
        (["=1"], "expected KEY=VALUE"),
        (["a=1", "a=2"], "'a' is given twice"),
        (["a=null"], "--meta a: null is not a field value"),
        (["a="], "--meta a: empty value"),
        (["a=[1, [x]]"], "nested lists"),
        (["a=b: c"], "reads as a mapping"),
        (["source=x"], "reserved"),
        (["bad key=1"], "not allowed"),
    ],
)
def test_bad_meta_is_a_usage_error(
    tmp_path: Path,
    corpus: Path,
    capsys: pytest.CaptureFixture[str],
    meta: list[str],
    needle: str,
) -> None:
    options = [part for item in meta for part in ("--meta", item)]
    code, _, err = run(capsys, "ingest", str(corpus), *common(tmp_path), *options)
    assert code == 2
    assert err.startswith("grk: error:") and needle in err
    assert not (tmp_path / "idx" / "default.sqlite3").exists()


def test_search_reads_a_collection_made_with_other_analyzer_settings(
    tmp_path: Path, corpus: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # grk has no analyzer options: it searches with the analyzer the collection is
    # bound to (it was refused as bound to another analyzer).
    import groundkit.sync as gks
    from groundkit import AnalyzerConfig

    settings = AnalyzerConfig(stem_language=None, stopwords=False)
    with gks.Collection.open(tmp_path / "idx", base_dir=tmp_path, analyzer=settings) as col:
        col.ingest(corpus)
    code, out, err = run(capsys, "search", "the", *common(tmp_path), "--json")
    assert code == 0, err
    assert [r["citation"]["source"] for r in json.loads(out)["results"]] == ["corpus/sub/b.txt"]


def test_missing_collection_is_reported(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "search", "x", "--index-dir", str(tmp_path / "none"))
    assert code == 2
    assert "grk ingest" in err


def test_console_script_runs_as_a_subprocess(tmp_path: Path, corpus: Path) -> None:
    grk = Path(sys.executable).with_name("grk")
    assert grk.exists(), "the grk console script is installed with the package"
    env = {**os.environ, "PYTHONIOENCODING": "utf-8"}
    idx = str(tmp_path / "idx")
    done = subprocess.run(
        [str(grk), "ingest", str(corpus), "--index-dir", idx, "--base-dir", str(tmp_path), "-q"],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    done = subprocess.run(
        [str(grk), "search", "cats", "--index-dir", idx, "--json"],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["results"][0]["citation"]["source"] == "corpus/a.md"


def test_embedder_is_recorded_and_reused(
    tmp_path: Path, corpus: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("sentence_transformers")  # the CLI reports a missing extra as exit 2
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    args = common(tmp_path)
    code, out, _ = run(capsys, "ingest", str(corpus), *args, "--embedder", "all-MiniLM-L6-v2")
    assert code == 0, out
    code, out, _ = run(capsys, "search", "feline pets", *args, "--mode", "dense", "--json")
    assert code == 0
    payload = json.loads(out)
    assert payload["metadata"]["stage"] == "dense"
    assert payload["results"][0]["citation"]["source"] == "corpus/a.md"
    (corpus / "c.txt").write_text("Kittens chase balls of yarn.\n", encoding="utf-8")
    code, out, _ = run(capsys, "ingest", str(corpus), *args, "--json")  # no --embedder
    assert code == 0
    assert json.loads(out)["embedded"] == 1
    code, out, _ = run(capsys, "search", "young cats playing", *args, "--mode", "hybrid", "--json")
    assert code == 0
    assert json.loads(out)["metadata"]["stage"] == "fusion"
    code, out, _ = run(capsys, "verify", *args)
    assert code == 0
