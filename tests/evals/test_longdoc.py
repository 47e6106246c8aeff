"""evals.longdoc: long files built from a BEIR folder, scored at the span level."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from evals import longdoc
from evals.beir import load_beir
from groundkit import RetrievalResult
from tests.evals.beir_data import DOCS, write_beir


def _hit(source: str, start: int, end: int, text: str) -> RetrievalResult:
    return RetrievalResult(
        content=text[start:end],
        score=1.0,
        document_id="x",
        chunk_id=f"{start}",
        chunk_index=0,
        source=source,
        source_class="text",
        extractor=None,
        start_offset=start,
        end_offset=end,
    )


def test_sections_are_exact_and_grouped_by_seed(tmp_path: Path) -> None:
    data = load_beir(write_beir(tmp_path / "tiny"))
    corpus = longdoc.build_corpus(data, 3, seed=1)
    assert len(corpus.files) == 2  # 4 documents, 3 to a file
    seen = []
    for name, text in corpus.files.items():
        for start, end, doc_id in zip(
            corpus.starts[name], corpus.ends[name], corpus.owners[name], strict=True
        ):
            title, body = DOCS[doc_id]
            assert text[start:end] == f"## {title}\n\n{body.strip()}\n"
            seen.append(doc_id)
    assert sorted(seen) == sorted(DOCS)
    again = longdoc.build_corpus(data, 3, seed=1)
    assert again == corpus
    assert longdoc.build_corpus(data, 3, seed=2).owners != corpus.owners or len(DOCS) < 3


def test_each_abstract_counts_once_at_its_best_chunk(tmp_path: Path) -> None:
    data = load_beir(write_beir(tmp_path / "tiny"))
    corpus = longdoc.build_corpus(data, 4, seed=1)
    ((name, text),) = corpus.files.items()
    owners, starts, ends = corpus.owners[name], corpus.starts[name], corpus.ends[name]
    first, second = owners[0], owners[1]
    hits = [
        _hit(name, starts[0], ends[0] - 5, text),  # inside the first section
        _hit(name, starts[0] + 2, ends[0], text),  # the same abstract again: no credit
        _hit(name, ends[0] - 3, starts[1] + 10, text),  # straddles into the second
    ]
    ranking, precision, context = longdoc.score_query(corpus, hits, {first: 1, second: 2})
    assert ranking == [first, "-1", second]
    assert precision == 1.0 - 1 / sum(h.end_offset - h.start_offset for h in hits)  # the gap
    assert context == precision  # no passages: the chunks are what is read
    ranking, precision, context = longdoc.score_query(corpus, hits, {})
    assert ranking == ["-0", "-1", "-2"] and precision == 0.0 == context


def test_runs_on_any_beir_folder(tmp_path: Path) -> None:
    root = write_beir(tmp_path / "tiny")
    out, js = tmp_path / "page.md", tmp_path / "figures.json"
    code = longdoc.main(
        [
            "--data",
            str(root),
            "--docs-per-file",
            "2",
            "--configs",
            "fixed,structure,sentence",
            "--out",
            str(out),
            "--json",
            str(js),
        ]
    )
    assert code == 0
    page = out.read_text(encoding="utf-8")
    assert "<!-- section:longdoc-2 -->" in page and "| fixed 1600 (overlap 200) | bm25 |" in page
    figures = json.loads(js.read_text(encoding="utf-8"))
    assert set(figures) == {
        "fixed 1600 (overlap 200) / bm25",
        "structure 1600 / bm25",
        "structure 1600 + mmr 0.7 / bm25",
        "structure 1600 + lost-in-the-middle / bm25",
        "sentence / bm25",
        "sentence + expand parent / bm25",
    }
    keys = {"ndcg@10", "recall@100", "citation_precision", "context_precision"}
    assert all(set(v) == keys for v in figures.values())
    # Passages hold their sentence: never less of the relevant text than the citation.
    assert figures["sentence + expand parent / bm25"]["recall@100"] > 0


def test_plot_draws_every_configuration(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    from evals import longdoc_plot

    figures = {
        "fixed 1600 (overlap 200) / bm25": {"ndcg@10": 0.6, "citation_precision": 0.1},
        "structure 1600 / bm25": {"ndcg@10": 0.7, "citation_precision": 0.2},
        "structure 1600 / hybrid": {"ndcg@10": 0.75, "citation_precision": 0.2},
    }
    js = tmp_path / "L.json"
    js.write_text(json.dumps(figures), encoding="utf-8")
    assert longdoc_plot.load_figures(js)["structure 1600"]["hybrid"]["ndcg@10"] == 0.75
    out = tmp_path / "plot.svg"
    assert longdoc_plot.main(["--json", f"20={js}", "--out", str(out)]) == 0
    svg = out.read_text(encoding="utf-8")
    assert "<svg" in svg and "structure 1600" in svg
    again = tmp_path / "again.svg"
    longdoc_plot.main(["--json", f"20={js}", "--out", str(again)])
    assert again.read_bytes() == out.read_bytes()  # same figures, same file
