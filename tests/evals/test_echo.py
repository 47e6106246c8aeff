"""The citation echo passes on honest results and fails on each kind of broken one."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Unpack

import pytest

from evals import echo
from evals.beir import ingest_dataset, load_beir
from evals.echo import echo_collection, run_echo, tamper_copy
from groundkit import Collection, FetchResult, RetrievalResult, SearchRequest, SearchResponse
from groundkit.retrieval.request import SearchOptions
from tests.evals.beir_data import QUERIES, write_beir
from tests.support import ToyEmbedder


def _result(source: str, start: int, content: str) -> RetrievalResult:
    return RetrievalResult(
        content=content,
        score=1.0,
        document_id=f"doc:{source}",
        chunk_id=f"{source}@{start}",
        chunk_index=0,
        source=source,
        source_class="text",
        extractor=None,
        start_offset=start,
        end_offset=start + len(content),
    )


def test_tamper_copy_changes_every_span_once_and_keeps_lengths(tmp_path: Path) -> None:
    base, dest = tmp_path / "base", tmp_path / "dest"
    (base / "sub").mkdir(parents=True)
    text = "abxdefxhij ümlaut 漢字 end"
    (base / "sub" / "a.txt").write_text(text, encoding="utf-8")
    (base / "untouched.txt").write_text("never cited", encoding="utf-8")
    # (2,5) and (1,6) share the midpoint 3; (2,3) is one character, an "x".
    spans = [(2, 5), (1, 6), (2, 3), (18, 20), (0, len(text))]
    results = [_result("sub/a.txt", s, text[s:e]) for s, e in spans]
    files, written = tamper_copy(base, [*results, results[0]], dest)
    assert (files, written) == (1, len(spans))
    tampered = (dest / "sub" / "a.txt").read_text(encoding="utf-8")
    assert len(tampered) == len(text)
    for s, e in spans:
        assert tampered[s:e] != text[s:e], (s, e)
    assert tampered[2] == "y"  # an "x" becomes "y", never "x" again
    assert not (dest / "untouched.txt").exists()
    assert (base / "sub" / "a.txt").read_text(encoding="utf-8") == text


def test_tamper_copy_refuses_a_source_outside_the_base(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="relative"):
        tamper_copy(tmp_path, [_result("../escape.txt", 0, "abc")], tmp_path / "dest")


async def test_echo_passes_for_bm25_and_hybrid(tmp_path: Path) -> None:
    data = load_beir(write_beir(tmp_path / "data"))
    report = await run_echo(
        data, modes=["bm25", "hybrid"], embedder=ToyEmbedder(), workdir=tmp_path / "work"
    )
    assert report.ok, report.failures
    assert report.queries == len(QUERIES)
    assert report.per_mode["bm25"] > 0 and report.per_mode["hybrid"] > 0
    assert report.results == sum(report.per_mode.values())
    assert report.echoed == report.drift_detected == report.results
    assert report.tampered_files > 0 and report.tampered_spans > 0
    # The sources the collection reads were left alone.
    assert (
        (tmp_path / "work" / "corpus" / "d2.txt")
        .read_text(encoding="utf-8")
        .startswith("Penguin diving")
    )


async def test_echo_fails_when_a_citation_points_one_character_off(tmp_path: Path) -> None:
    data = load_beir(write_beir(tmp_path / "data"))
    root = tmp_path / "work"
    async with ingest_dataset(data, root) as ing:
        real_search = ing.collection.search

        async def shifted(
            query: str | SearchRequest, top_k: int | None = None, **kw: Unpack[SearchOptions]
        ) -> SearchResponse:
            response = await real_search(query, top_k, **kw)
            moved = [
                r.model_copy(
                    update={"start_offset": r.start_offset + 1, "end_offset": r.end_offset + 1}
                )
                for r in response.results
            ]
            return response.model_copy(update={"results": moved})

        ing.collection.search = shifted  # type: ignore[method-assign]
        report = await echo_collection(
            ing.collection, data.queries, modes=["bm25"], tamper_dir=root / "tampered"
        )
    assert report.results > 0
    assert report.echoed == 0
    assert report.failure_count >= report.results
    assert not report.ok
    assert "other text" in report.failures[0]


async def test_echo_fails_when_the_tampered_copy_is_not_changed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def copy_unchanged(base: Path, results: Any, dest: Path) -> tuple[int, int]:
        sources = {r.source for r in results}
        for source in sources:
            (dest / source).parent.mkdir(parents=True, exist_ok=True)
            (dest / source).write_bytes((base / source).read_bytes())
        return len(sources), 0

    monkeypatch.setattr(echo, "tamper_copy", copy_unchanged)
    data = load_beir(write_beir(tmp_path / "data"))
    report = await run_echo(data, modes=["bm25"], workdir=tmp_path / "work")
    assert report.echoed == report.results > 0
    assert report.drift_detected == 0
    assert not report.ok
    assert "unnoticed" in report.failures[0]


async def test_echo_fails_when_the_tampered_file_is_missing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(echo, "tamper_copy", lambda base, results, dest: (0, 0))
    data = load_beir(write_beir(tmp_path / "data"))
    report = await run_echo(data, modes=["bm25"], workdir=tmp_path / "work")
    assert report.drift_detected == 0 and not report.ok
    assert "unresolvable" in report.failures[0]


def test_echo_command_exit_codes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    data = write_beir(tmp_path / "data")
    assert echo.main(["--data", str(data), "--modes", "bm25", "--limit-queries", "2"]) == 0
    out = capsys.readouterr().out
    assert "| queries | 2 |" in out
    monkeypatch.setattr(echo, "tamper_copy", lambda base, results, dest: (0, 0))
    assert echo.main(["--data", str(data), "--modes", "bm25"]) == 1
    assert "FAILED" in capsys.readouterr().out
    with pytest.raises(SystemExit) as exc:
        echo.main(["--data", str(data), "--modes", "hybrid+rerank"])
    assert exc.value.code == 2


async def test_echo_fails_when_fetch_chunk_misses_the_drift(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_fetch = Collection.fetch_chunk

    async def always_verified(self: Collection, chunk_id: str) -> FetchResult:
        fetched = await real_fetch(self, chunk_id)
        return fetched.model_copy(update={"verification": "verified"})

    monkeypatch.setattr(Collection, "fetch_chunk", always_verified)
    data = load_beir(write_beir(tmp_path / "data"))
    report = await run_echo(data, modes=["bm25"], workdir=tmp_path / "work")
    assert report.echoed == report.results > 0
    assert report.drift_detected == 0 and not report.ok
    assert "fetch_chunk against the tampered copy says verified" in report.failures[0]
