"""grk's long-document options: chunkers bound at ingest, passages, diversity, glossaries."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from groundkit import ChunkingConfig
from tests.test_cli import common, run

GUIDE = """# Guide

The guide walks through the whole tool, one part at a time.

## Install

Run pip install groundkit to fetch the package. It needs Python 3.11 or later.
Check the installation with grk --version afterwards.

## Usage

Index a folder with grk ingest. Search it with grk search.
Every result names its source and offsets.
"""
CARDIOLOGY = """# Cardiology notes

Myocardial infarction follows a blocked coronary artery.
Aspirin is given early.
"""
GLOSSARY = """[synonyms]
"heart attack" = ["myocardial infarction"]

[[groups]]
terms = ["guide", "handbook"]
"""


@pytest.fixture
def docs(tmp_path: Path) -> Path:
    root = tmp_path / "docs"
    root.mkdir()
    (root / "guide.md").write_text(GUIDE, encoding="utf-8")
    (root / "cardiology.md").write_text(CARDIOLOGY, encoding="utf-8")
    return root


def one_error_line(err: str) -> str:
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    assert lines[0].startswith("grk: error:") and "Traceback" not in err
    return lines[0]


def search_json(capsys: pytest.CaptureFixture[str], tmp_path: Path, *argv: str) -> Any:
    code, out, err = run(capsys, "search", *argv, *common(tmp_path), "--json")
    assert code == 0, err
    return json.loads(out)


def test_chunker_options_bind_the_collection_and_a_conflicting_ingest_exits_2(
    tmp_path: Path, docs: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = run(capsys, "ingest", str(docs), "--chunker", "sentence", *common(tmp_path))
    assert code == 0, err
    hits = search_json(capsys, tmp_path, "aspirin")["results"]
    assert [h["content"] for h in hits] == ["Aspirin is given early."]

    code, _, err = run(capsys, "ingest", str(docs), "--chunker", "structure", *common(tmp_path))
    assert code == 2
    line = one_error_line(err)
    assert "'chunker/1:sentence:1600:0'" in line and "'chunker/1:structure:1600:200'" in line

    # Without chunking options the bound chunker is used: nothing changes.
    code, out, err = run(capsys, "ingest", str(docs), *common(tmp_path), "--json")
    assert code == 0, err
    assert json.loads(out)["unchanged"] == ["docs/cardiology.md", "docs/guide.md"]


def test_size_options_bind_and_unspecified_values_take_the_defaults(
    tmp_path: Path, docs: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    size = ["--collection", "sized"]
    code, _, err = run(
        capsys, "ingest", str(docs), "--chunk-chars", "400", *size, *common(tmp_path)
    )
    assert code == 0, err
    argv = ["ingest", str(docs), "--chunk-chars", "400", "--contextual", *size]
    code, _, err = run(capsys, *argv, *common(tmp_path))
    assert code == 2
    line = one_error_line(err)
    default = ChunkingConfig().strategy  # unspecified options take the library's defaults
    bound = f"'chunker/1:{default}:400:200'"
    assert bound in line and f"'chunker/1:{default}:400:200:contextual'" in line
    argv = ["ingest", str(docs), "--chunker", "fixed", "--chunk-overlap", "200", *size]
    code, _, err = run(capsys, *argv, *common(tmp_path))
    assert code == 2 and "'chunker/1:fixed:1600:200'" in one_error_line(err)


@pytest.mark.parametrize(
    ("options", "needle"),
    [
        (["--chunk-chars", "300"], "--chunk-chars 300 is less than twice the default overlap"),
        (["--chunk-chars", "400", "--chunk-overlap", "201"], "at most half of --chunk-chars"),
        (["--chunker", "sentence", "--chunk-overlap", "20"], "sentence chunks do not overlap"),
        (["--chunk-chars", "10"], "--chunk-chars must be from 32 to 100000, got 10"),
        (["--chunk-overlap", "-1"], "--chunk-overlap must be at least 0, got -1"),
    ],
)
def test_bad_chunking_options_exit_2_before_a_collection_is_made(
    tmp_path: Path,
    docs: Path,
    capsys: pytest.CaptureFixture[str],
    options: list[str],
    needle: str,
) -> None:
    code, _, err = run(capsys, "ingest", str(docs), *options, *common(tmp_path))
    assert code == 2
    assert needle in one_error_line(err)
    code, out, _ = run(capsys, "collections", *common(tmp_path))
    assert code == 0 and out.startswith("no collections")


@pytest.mark.parametrize("kind", ["parent", "window"])
def test_expanded_contexts_are_exact_slices_of_the_file(
    tmp_path: Path, docs: Path, capsys: pytest.CaptureFixture[str], kind: str
) -> None:
    run(capsys, "ingest", str(docs), "--chunker", "sentence", *common(tmp_path))
    payload = search_json(capsys, tmp_path, "python installation", "--expand", kind)
    assert payload["metadata"]["steps"] == [f"expand:{kind}"]
    top = payload["results"][0]
    assert top["citation"]["source"] == "docs/guide.md"
    assert top["heading_path"] == ["Guide", "Install"]
    text = (docs / "guide.md").read_text(encoding="utf-8")
    for hit in payload["results"]:
        context = hit["context"]
        assert context["kind"] == kind
        on_disk = (tmp_path / hit["citation"]["source"]).read_text(encoding="utf-8")
        assert on_disk[context["start_offset"] : context["end_offset"]] == context["content"]
        assert (
            context["start_offset"]
            <= hit["citation"]["start_offset"]
            <= hit["citation"]["end_offset"]
        )
        assert hit["citation"]["end_offset"] <= context["end_offset"]
        assert hit["citation"]["chunk_id"] in context["chunk_ids"]
    # The Install section, heading included, is the passage of the best hit.
    section = text[text.index("## Install") : text.index("## Usage")].rstrip()
    if kind == "parent":
        assert top["context"]["content"] == section
        # The heading and the sentence after it match too: folded in, not returned again.
        assert len(top["context"]["collapsed"]) == 2

    code, out, _ = run(capsys, "search", "python installation", "--expand", kind, *common(tmp_path))
    assert code == 0
    assert "     under: Guide > Install" in out
    span = top["context"]
    assert f"     {kind} [{span['start_offset']}:{span['end_offset']}]" in out
    if kind == "parent":
        assert "2 more hits folded in" in out


def test_json_results_carry_heading_path_and_context_keys(
    tmp_path: Path, docs: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run(capsys, "ingest", str(docs), *common(tmp_path))
    hit = search_json(capsys, tmp_path, "aspirin")["results"][0]
    assert hit["heading_path"] == ["Cardiology notes"]
    assert "context" not in hit  # only a search with --expand gives one


def test_mmr_and_reorder_are_taken(
    tmp_path: Path, docs: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run(capsys, "ingest", str(docs), "--chunker", "sentence", *common(tmp_path))
    plain = search_json(capsys, tmp_path, "grk search ingest")
    argv = ["grk search ingest", "--mmr", "0.5", "--reorder", "lost-in-the-middle"]
    payload = search_json(capsys, tmp_path, *argv)
    assert payload["metadata"]["steps"] == ["mmr:0.5", "reorder:lost-in-the-middle"]
    assert {h["citation"]["chunk_id"] for h in payload["results"]} <= {
        h["citation"]["chunk_id"] for h in plain["results"]
    }
    assert payload["results"]


def test_a_glossary_finds_a_synonym_and_lists_the_queries(
    tmp_path: Path, docs: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    glossary = tmp_path / "terms.toml"
    glossary.write_text(GLOSSARY, encoding="utf-8")
    run(capsys, "ingest", str(docs), *common(tmp_path))
    assert search_json(capsys, tmp_path, "heart attack")["results"] == []

    payload = search_json(capsys, tmp_path, "heart attack", "--glossary", str(glossary))
    assert payload["metadata"]["queries"] == ["heart attack", "myocardial infarction"]
    assert payload["results"][0]["citation"]["source"] == "docs/cardiology.md"

    code, out, _ = run(
        capsys, "search", "heart attack", "--glossary", str(glossary), *common(tmp_path)
    )
    assert code == 0
    assert out.splitlines()[0] == 'queries: "heart attack", "myocardial infarction"'
    assert "docs/cardiology.md" in out

    argv = ["search", "handbook", "--glossary", str(glossary), "--rewrites", "0"]
    code, out, _ = run(capsys, *argv, *common(tmp_path))
    assert code == 0
    assert out.splitlines()[0] == 'queries: "handbook" (the glossary has no rephrasing of it)'


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["--mmr", "1.5"], "--mmr is the relevance weight, a number from 0 to 1"),
        (["--mmr", "-0.1"], "got -0.1"),
        (["--mmr", "nan"], "got nan"),
        (["--rewrites", "2"], "--rewrites goes with --glossary FILE"),
        (["--glossary", "missing.toml"], "glossary file 'missing.toml' does not exist"),
        (["--collection", "default", "--collection", "other", "--expand", "parent"], "--expand"),
        (["--collection", "default", "--collection", "other", "--mmr", "0.5"], "one --collection"),
    ],
)
def test_bad_search_options_exit_2_with_one_line(
    tmp_path: Path,
    docs: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    argv: list[str],
    needle: str,
) -> None:
    monkeypatch.chdir(tmp_path)
    run(capsys, "ingest", str(docs), *common(tmp_path))
    run(capsys, "ingest", str(docs), "--collection", "other", *common(tmp_path))
    code, _, err = run(capsys, "search", "guide", *argv, *common(tmp_path))
    assert code == 2
    assert needle in one_error_line(err)


def test_an_mmr_that_is_not_a_number_is_a_usage_error(
    tmp_path: Path, docs: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run(capsys, "ingest", str(docs), *common(tmp_path))
    with pytest.raises(SystemExit) as stopped:
        run(capsys, "search", "guide", "--mmr", "lots", *common(tmp_path))
    assert stopped.value.code == 2
    assert "argument --mmr: invalid float value: 'lots'" in capsys.readouterr().err
