"""Evidence spans: the sentences of a hit that answer the query, as exact source offsets."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from groundkit import (
    Collection,
    Evidence,
    EvidenceSpan,
    RetrievalResult,
    SearchMode,
    SentenceTransformerEmbedder,
    check_quote,
)
from groundkit import sync as gks
from groundkit.retrieval import load_evidence
from tests.support import write_tree

TEA = (
    "Tea is a drink enjoyed worldwide. Some people add milk. "
    "Green tea lowers blood pressure in adults, a trial found. "
    "Black tea wants boiling water and four minutes of steeping.\n"
)
OTHER = "Coffee is roasted. Espresso is pulled under pressure in about 25 seconds.\n"


@pytest.fixture
async def col(tmp_path: Path) -> AsyncIterator[Collection]:
    base = tmp_path / "corpus"
    write_tree(base, {"notes/tea.txt": "Intro line.\n\n" + TEA, "coffee.txt": OTHER})
    async with Collection.open(tmp_path / "index", base_dir=base) as opened:
        await opened.ingest(base)
        yield opened


def source_text(col: Collection, result: RetrievalResult) -> str:
    return (col.base_dir / result.source).read_text(encoding="utf-8")


async def test_bm25_evidence_is_the_best_sentence_as_exact_source_offsets(col: Collection) -> None:
    response = await col.search("does green tea lower blood pressure")
    top = response.results[0]
    assert top.source == "notes/tea.txt"
    assert isinstance(top.evidence, Evidence)
    assert not top.evidence.resolved  # nothing computed until read
    spans = list(top.evidence)
    assert top.evidence.resolved
    assert 1 <= len(spans) <= 3
    best = spans[0]
    assert best.method == "terms"
    assert best.text == "Green tea lowers blood pressure in adults, a trial found."
    assert source_text(col, top)[best.start_offset : best.end_offset] == best.text
    assert [s.score for s in spans] == sorted((s.score for s in spans), reverse=True)
    assert all(s.score > 0 for s in spans)  # a sentence with no query term is no evidence
    check = await check_quote(best.text, top, col.base_dir)
    assert check.ok and (check.start_offset, check.end_offset) == (
        best.start_offset,
        best.end_offset,
    )


async def test_rarer_terms_weigh_more_than_common_ones(col: Collection) -> None:
    # "tea" is in both of the chunk's top candidates; "steeping" only in one.
    response = await col.search("tea steeping")
    top = response.results[0]
    assert top.evidence is not None
    assert top.evidence[0].text.startswith("Black tea wants boiling water")


async def test_evidence_serialises_and_round_trips(col: Collection) -> None:
    response = await col.search("green tea blood pressure")
    top = response.results[0]
    dumped = top.model_dump(mode="json")
    assert dumped["evidence"][0]["text"].startswith("Green tea lowers")
    again = RetrievalResult.model_validate_json(top.model_dump_json())
    assert again.evidence == top.evidence
    assert isinstance(again.evidence, Evidence)
    assert again == top


def test_evidence_span_validation() -> None:
    with pytest.raises(ValueError, match="length does not match"):
        EvidenceSpan(start_offset=0, end_offset=3, text="ab", score=1.0, method="terms")
    with pytest.raises(ValueError, match="finite"):
        EvidenceSpan(start_offset=0, end_offset=2, text="ab", score=float("nan"), method="terms")


@pytest.fixture(scope="module")
def minilm() -> SentenceTransformerEmbedder:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    return SentenceTransformerEmbedder("all-MiniLM-L6-v2")


@pytest.fixture
async def dense(tmp_path: Path, minilm: SentenceTransformerEmbedder) -> AsyncIterator[Collection]:
    base = tmp_path / "corpus"
    write_tree(base, {"tea.txt": TEA, "coffee.txt": OTHER})
    async with Collection.open(tmp_path / "index", base_dir=base, embedder=minilm) as opened:
        await opened.ingest(base)
        yield opened


async def test_dense_and_hybrid_evidence_use_the_embedder(dense: Collection) -> None:
    # No word of the query is in the answer sentence: only the embedder can find it.
    query = "which beverage reduces hypertension"
    modes: tuple[tuple[SearchMode, str], ...] = (("dense", "embedding"), ("hybrid", "hybrid"))
    for mode, method in modes:
        response = await dense.search(query, mode=mode)
        tea = next(r for r in response.results if r.source == "tea.txt")
        await load_evidence(response.results)  # worked out off the event loop
        assert tea.evidence is not None and tea.evidence.resolved
        best = tea.evidence[0]
        assert best.method == method
        assert best.text.startswith("Green tea lowers blood pressure")
        assert TEA[best.start_offset : best.end_offset] == best.text
        assert len(tea.evidence) == 3


async def test_reading_evidence_inside_a_coroutine_works_without_load(
    dense: Collection, minilm: SentenceTransformerEmbedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    response = await dense.search("which beverage reduces hypertension", mode="dense")
    batches: list[int] = []
    original = minilm.embed_documents

    async def counting(texts):  # type: ignore[no-untyped-def]
        batches.append(len(texts))
        return await original(texts)

    monkeypatch.setattr(minilm, "embed_documents", counting)
    tea = next(r for r in response.results if r.source == "tea.txt")
    other = next(r for r in response.results if r.source != "tea.txt")
    assert tea.evidence is not None and other.evidence is not None
    assert tea.evidence[0].text.startswith("Green tea lowers")  # computed here, on a worker loop
    assert other.evidence[0].text.startswith("Espresso")
    # One batch held every sentence of every result of the response.
    assert batches == [6]


async def test_the_search_embeds_the_query_once(
    dense: Collection, minilm: SentenceTransformerEmbedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[str] = []
    original = minilm.embed_query

    async def counting(text: str):  # type: ignore[no-untyped-def]
        calls.append(text)
        return await original(text)

    monkeypatch.setattr(minilm, "embed_query", counting)
    response = await dense.search("which beverage reduces hypertension", mode="hybrid")
    await load_evidence(response.results)
    assert calls == ["which beverage reduces hypertension"]


def test_sync_api_reads_dense_evidence(tmp_path: Path, minilm: SentenceTransformerEmbedder) -> None:
    base = tmp_path / "corpus"
    write_tree(base, {"tea.txt": TEA, "coffee.txt": OTHER})
    with gks.Collection.open(tmp_path / "index", base_dir=base, embedder=minilm) as col:
        col.ingest(base)
        response = col.search("which beverage reduces hypertension", mode="dense")
    tea = next(r for r in response.results if r.source == "tea.txt")
    assert tea.evidence is not None
    assert tea.evidence[0].text.startswith("Green tea lowers")


def test_asyncio_run_after_the_loop_closed(
    tmp_path: Path, minilm: SentenceTransformerEmbedder
) -> None:
    base = tmp_path / "corpus"
    write_tree(base, {"tea.txt": TEA})

    async def search() -> list[RetrievalResult]:
        async with Collection.open(tmp_path / "index", base_dir=base, embedder=minilm) as c:
            await c.ingest(base)
            return list((await c.search("hypertension beverage", mode="dense")).results)

    results = asyncio.run(search())
    assert results[0].evidence is not None
    assert results[0].evidence[0].method == "embedding"
