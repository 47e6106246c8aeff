"""The opt-in steps around ranking, end to end through ``Collection``.

Contextual index text finds a chunk by the headings above it while its content,
offsets, highlights and citation stay those of the exact slice; MMR picks among the
plain ranking's candidates (``mmr=1.0`` is that ranking); the lost-in-the-middle
reorder keeps the set and puts rank 1 first and rank 2 last; glossary rewriting
reaches a document only its synonym names. Every step is deterministic, across
processes too (adr/0046-structure-chunking.md).
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import textwrap
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from groundkit import (
    ChunkingConfig,
    Collection,
    ConfigurationError,
    GlossaryRewriter,
    RetrievalConfig,
    RetrievalError,
    RetrievalResult,
    check_citation,
)
from groundkit.lexical.analyzer import Analyzer
from groundkit.retrieval.diversity import cosine_similarity, lost_in_the_middle, mmr_order
from tests.support import ToyEmbedder, write_tree

CONTEXTUAL = ChunkingConfig(strategy="structure", max_chars=80, overlap_chars=0, contextual=True)
PLAIN = CONTEXTUAL.model_copy(update={"contextual": False})

HANDBOOK: dict[str, str] = {
    "install.md": (
        "# Installation\n\n"
        "## Linux\n\n"
        "Run the script as root on the server. Then restart the daemon service.\n"
        "Check the daemon log afterwards for errors.\n\n"
        "## Windows\n\n"
        "Double-click the package in the folder. Accept the prompt that appears.\n"
        "Reboot when the wizard asks you to do so.\n"
    ),
    "tuning.md": (
        "Tuning notes\r\n============\r\n\r\n"
        "Raise the cache size for large indexes. Lower it on small machines.\r\n\r\n"
        "Threads\r\n-------\r\n\r\n"
        "Two worker threads suit most laptops. Servers take one per core.\r\n"
    ),
}


def source_text(base: Path, source: str) -> str:
    return (base / source).read_bytes().decode("utf-8")


async def _ingested(
    root: Path, files: dict[str, str], chunking: ChunkingConfig, **options: Any
) -> Collection:
    base = root / "corpus"
    write_tree(base, files)
    col = await Collection.open(root / "index", base_dir=base, chunking=chunking, **options)
    report = await col.ingest(base)
    assert not report.failed and len(report.added) == len(files)
    return col


# --- contextual index text ---------------------------------------------------------


async def test_a_heading_term_finds_the_chunks_under_it(tmp_path: Path) -> None:
    contextual = await _ingested(tmp_path / "a", HANDBOOK, CONTEXTUAL)
    plain = await _ingested(tmp_path / "b", HANDBOOK, PLAIN)
    try:
        found = (await contextual.search("installation", 20)).results
        bare = (await plain.search("installation", 20)).results
        # Without the prefix only the heading's own chunk names the word.
        assert [r.content for r in bare] == ["# Installation"]
        under = [r for r in found if "installation" not in r.content.casefold()]
        assert len(under) >= 4
        assert all(r.heading_path[0] == "Installation" for r in found)
        assert {r.heading_path[-1] for r in under} == {"Linux", "Windows"}
        # "daemon" is in the content: found by both, the heading term only by one.
        linux = (await contextual.search("linux", 20)).results
        assert {r.heading_path[-1] for r in linux} == {"Linux"}
        assert len(linux) > 1
        assert (await plain.search("threads", 20)).results
        threads = (await contextual.search("tuning notes threads", 20)).results
        assert {r.source for r in threads} == {"tuning.md"}
    finally:
        await contextual.close()
        await plain.close()


@pytest.mark.parametrize("query", ["installation", "linux daemon", "windows prompt", "threads"])
async def test_results_stay_exact_slices_with_honest_highlights(tmp_path: Path, query: str) -> None:
    col = await _ingested(tmp_path, HANDBOOK, CONTEXTUAL)
    analyzer = Analyzer()
    wanted = set(analyzer.terms(query))
    try:
        results = (await col.search(query, 20)).results
        assert results
        for result in results:
            text = source_text(col.base_dir, result.source)
            assert text[result.start_offset : result.end_offset] == result.content
            assert (await check_citation(result.citation, result.content, col.base_dir)).ok
            assert (await col.verify(result)).ok
            assert (await col.verify(result.citation)).ok
            fetched = await col.fetch_chunk(result.chunk_id)
            assert fetched.ok and fetched.content == result.content
            highlights = list(result.highlights or ())
            in_content = bool(set(analyzer.terms(result.content)) & wanted)
            assert bool(highlights) == in_content
            for (a, b), (sa, sb) in zip(highlights, result.source_highlights, strict=True):
                assert 0 <= a < b <= len(result.content)
                assert result.start_offset <= sa < sb <= result.end_offset
                assert text[sa:sb] == result.content[a:b]
                assert set(analyzer.terms(result.content[a:b])) & wanted
        # What is stored is the slice, never the prefix it was indexed under.
        for document_id in {r.document_id for r in results}:
            chunks = (await col.store.get_chunks_for_documents([document_id]))[document_id]
            for chunk in chunks:
                text = source_text(col.base_dir, chunk.source)
                assert text[chunk.start_offset : chunk.end_offset] == chunk.content
                assert " > " not in chunk.content
        report = await col.verify_all()
        assert report.ok and report.verified == await col.store.chunk_count()
    finally:
        await col.close()


# --- MMR and reorder --------------------------------------------------------------

# Near-duplicate chunks so diversity has something to do.
REPEATS: dict[str, str] = {
    f"note{i}.md": (
        f"# Note {i}\n\n"
        + "The keeper lights the lamp at dusk. " * (1 + i % 3)
        + f"\n\nShip {i} passes the harbour light at night. Fog hides the keeper's tower.\n\n"
        + ("Bells ring in fog. " if i % 2 else "The lamp burns oil until dawn. ")
        + "\n"
    )
    for i in range(8)
}
QUERIES = ["keeper lamp", "fog light", "ship harbour night", "dawn"]


async def test_mmr_chooses_among_the_plain_candidates(tmp_path: Path) -> None:
    retrieval = RetrievalConfig(postprocess_candidates=30)
    col = await _ingested(
        tmp_path, REPEATS, ChunkingConfig(max_chars=80, overlap_chars=0), retrieval=retrieval
    )
    try:
        for query in QUERIES:
            candidates = (await col.search(query, retrieval.postprocess_candidates)).results
            ids = [r.chunk_id for r in candidates]
            assert len(ids) > 3
            for top_k in (1, 3, 5):
                plain = [r.chunk_id for r in (await col.search(query, top_k)).results]
                assert plain == ids[:top_k]
                for lam in (0.0, 0.3, 0.5, 0.9):
                    response = await col.search(query, top_k, mmr=lam)
                    picked = [r.chunk_id for r in response.results]
                    assert len(picked) == min(top_k, len(ids))
                    assert len(set(picked)) == len(picked)
                    assert set(picked) <= set(ids)
                    assert picked[0] == ids[0]  # nothing picked yet: relevance decides
                    assert response.metadata["steps"] == [f"mmr:{lam:g}"]
                    again = await col.search(query, top_k, mmr=lam)
                    assert [r.chunk_id for r in again.results] == picked
                    assert [r.score for r in again.results] == [r.score for r in response.results]
                relevance = await col.search(query, top_k, mmr=1.0)
                assert [r.chunk_id for r in relevance.results] == plain
                assert [r.score for r in relevance.results] == [
                    r.score for r in (await col.search(query, top_k)).results
                ]
    finally:
        await col.close()


# Three near-duplicates and one other text on the same subject.
NEAR_DUPLICATES = {
    "a.md": "The keeper lights the lamp at dusk every day.\n",
    "b.md": "The keeper lights the lamp at dusk every day!\n",
    "c.md": "The keeper lights the lamp at dusk every day?\n",
    "d.md": "A keeper in fog.\n",
}


async def test_mmr_spreads_over_near_duplicates(tmp_path: Path) -> None:
    col = await _ingested(tmp_path, NEAR_DUPLICATES, ChunkingConfig(max_chars=80, overlap_chars=0))
    try:
        plain = [r.source for r in (await col.search("keeper lamp dusk", 2)).results]
        diverse = [r.source for r in (await col.search("keeper lamp dusk", 2, mmr=0.3)).results]
        assert plain[1] != "d.md" and diverse[1] == "d.md"
    finally:
        await col.close()


class _Counting(ToyEmbedder):
    """Counts the passages it embeds (the query is embedded apart)."""

    def __init__(self) -> None:
        super().__init__()
        self.passages = 0

    async def embed_documents(self, texts: Sequence[str]) -> Any:
        self.passages += len(texts)
        return await super().embed_documents(texts)


@pytest.mark.parametrize("mode", ["dense", "hybrid"])
async def test_mmr_over_vectors_reads_the_stored_ones(tmp_path: Path, mode: str) -> None:
    # The candidates' vectors were computed at ingest; MMR reads them instead of running
    # the model again, and picks exactly what fresh vectors of the same texts pick.
    embedder = _Counting()
    chunking = ChunkingConfig(max_chars=80, overlap_chars=0)
    col = await _ingested(tmp_path, REPEATS, chunking, embedder=embedder)
    try:
        for query in QUERIES:
            embedder.passages = 0
            response = await col.search(query, 4, mode=mode, mmr=0.5)  # type: ignore[arg-type]
            assert embedder.passages == 0
            assert response.metadata["steps"] == ["mmr:0.5"]
            candidates = (await col.search(query, 50, mode=mode)).results  # type: ignore[arg-type]
            vectors = await ToyEmbedder().embed_documents([r.content for r in candidates])
            order = mmr_order(
                [r.score for r in candidates], cosine_similarity(vectors), lambda_=0.5, k=4
            )
            assert [r.chunk_id for r in response.results] == [candidates[i].chunk_id for i in order]
    finally:
        await col.close()


async def test_mmr_with_expand_keeps_passages_and_top_k(tmp_path: Path) -> None:
    col = await _ingested(tmp_path, REPEATS, ChunkingConfig(strategy="sentence", max_chars=80))
    try:
        for query in QUERIES:
            candidates = {r.chunk_id for r in (await col.search(query, 50)).results}
            response = await col.search(query, 3, expand="parent", mmr=0.5)
            assert 0 < len(response.results) <= 3
            assert response.metadata["steps"] == ["expand:parent", "mmr:0.5"]
            for result in response.results:
                assert result.chunk_id in candidates and result.context is not None
                text = source_text(col.base_dir, result.source)
                ctx = result.context
                assert text[ctx.start_offset : ctx.end_offset] == ctx.content
    finally:
        await col.close()


class _KeepOrder:
    """A reranker that keeps the order it is given, scoring it down from 1."""

    model_name = "keep-order"

    async def rerank(
        self, query: str, results: Sequence[RetrievalResult], top_k: int | None = None
    ) -> list[RetrievalResult]:
        kept = [r.model_copy(update={"score": 1.0 / (1 + i)}) for i, r in enumerate(results)]
        return kept if top_k is None else kept[:top_k]


async def test_rerank_leaves_expand_and_mmr_their_candidates(tmp_path: Path) -> None:
    # The reranker's list was cut to top_k before expand and MMR ran: passages that
    # folded several hits came back fewer than top_k, and MMR had nothing to choose.
    files = {
        **NEAR_DUPLICATES,
        # Its best hits are neighbours: their windows fold one another in.
        "long.txt": "".join(
            f"The {'copper kettle' if 10 <= i < 20 else 'pot'} boils on stove {i}. "
            for i in range(40)
        ),
    }
    col = await _ingested(
        tmp_path, files, ChunkingConfig(strategy="sentence", max_chars=80), reranker=_KeepOrder()
    )
    try:
        for top_k in (5, 3, 2):
            plain = await col.search("copper kettle stove", top_k, expand="window")
            ranked = await col.search("copper kettle stove", top_k, expand="window", rerank=True)
            assert len(plain.results) == len(ranked.results) == top_k
            assert [r.chunk_id for r in ranked.results] == [r.chunk_id for r in plain.results]
            assert [r.context for r in ranked.results] == [r.context for r in plain.results]
        diverse = await col.search("keeper lamp dusk", 2, mmr=0.3, rerank=True)
        assert diverse.metadata["stage"] == "rerank"
        assert [r.source for r in diverse.results][1] == "d.md"
    finally:
        await col.close()


async def test_lost_in_the_middle_keeps_the_set(tmp_path: Path) -> None:
    col = await _ingested(tmp_path, REPEATS, ChunkingConfig(max_chars=80, overlap_chars=0))
    try:
        for query in QUERIES:
            for top_k in (1, 2, 3, 6, 10):
                plain = (await col.search(query, top_k)).results
                moved = (await col.search(query, top_k, reorder="lost-in-the-middle")).results
                ids, order = [r.chunk_id for r in plain], [r.chunk_id for r in moved]
                assert sorted(order) == sorted(ids) and len(order) == len(ids)
                assert order == [r.chunk_id for r in lost_in_the_middle(plain)]
                assert order[0] == ids[0]
                if len(ids) >= 2:
                    assert order[-1] == ids[1]
                if len(ids) >= 4:
                    assert order[1] == ids[2] and order[-2] == ids[3]
                # With MMR first, the reorder is of what MMR chose.
                chosen = (await col.search(query, top_k, mmr=0.5)).results
                both = await col.search(query, top_k, mmr=0.5, reorder="lost-in-the-middle")
                assert [r.chunk_id for r in both.results] == [
                    r.chunk_id for r in lost_in_the_middle(chosen)
                ]
    finally:
        await col.close()


# --- rewriting --------------------------------------------------------------------

SYNONYMS: dict[str, str] = {
    "auto.md": "# Garage\n\nThe automobile needs new tyres before winter.\n",
    "bike.md": "# Shed\n\nThe bicycle needs new brakes before winter.\n",
}
GLOSSARY = GlossaryRewriter({"car": ["automobile", "motor vehicle"]})


async def test_a_synonym_reaches_a_document_the_query_does_not_name(tmp_path: Path) -> None:
    chunking = ChunkingConfig(max_chars=200, overlap_chars=0)
    col = await _ingested(tmp_path, SYNONYMS, chunking, rewriter=GLOSSARY)
    try:
        without = await col.search("car tyres", 5)
        assert [r.source for r in without.results] == ["auto.md"]  # by "tyres" only
        assert (await col.search("car", 5)).results == []
        response = await col.search("car", 5, rewrite=True)
        assert [r.source for r in response.results] == ["auto.md"]
        # The evidence is the sentence the variant found, not nothing.
        evidence = response.results[0].evidence
        assert evidence is not None
        assert [e.text for e in evidence] == ["The automobile needs new tyres before winter."]
        queries = response.metadata["queries"]
        assert queries[0] == "car" and "automobile" in queries
        assert len(queries) <= 1 + RetrievalConfig().max_rewrites
        # "steps" names the steps after ranking; rewriting shows in "queries".
        assert response.metadata.get("steps") in (None, ["rewrite"])
        mixed = await col.search("car", 5, rewrite=True, mmr=0.5)
        assert mixed.metadata["steps"] == ["rewrite", "mmr:0.5"]
        assert [r.chunk_id for r in mixed.results] == [r.chunk_id for r in response.results]
        for result in response.results:
            assert (await check_citation(result.citation, result.content, col.base_dir)).ok
        # No glossary term in the query: the query alone is searched.
        same = await col.search("bicycle", 5, rewrite=True)
        assert "queries" not in same.metadata
        assert [r.source for r in same.results] == ["bike.md"]
    finally:
        await col.close()


async def test_rewriting_ranks_alike_whatever_top_k(tmp_path: Path) -> None:
    # x.md is second for the query and for its variant, so fused it comes first; each
    # query was ranked only top_k deep, so with top_k=1 it was in neither list.
    files = {"a.md": "Alpha alpha alpha.\n", "b.md": "Beta beta beta.\n", "x.md": "Alpha, beta.\n"}
    rewriter = GlossaryRewriter({"alpha": ["beta"]})
    chunking = ChunkingConfig(max_chars=200, overlap_chars=0)
    col = await _ingested(tmp_path, files, chunking, rewriter=rewriter)
    try:
        whole = await col.search("alpha", 3, rewrite=True)
        assert whole.metadata["queries"] == ["alpha", "beta"]
        assert whole.results[0].source == "x.md"
        for top_k in (1, 2):
            first = await col.search("alpha", top_k, rewrite=True)
            assert [(r.chunk_id, r.score) for r in first.results] == [
                (r.chunk_id, r.score) for r in whole.results[:top_k]
            ]
    finally:
        await col.close()


async def test_rewrite_without_a_rewriter_is_a_configuration_error(tmp_path: Path) -> None:
    col = await _ingested(tmp_path, SYNONYMS, ChunkingConfig(max_chars=200, overlap_chars=0))
    try:
        with pytest.raises(ConfigurationError, match="rewrite=True needs a query rewriter"):
            await col.search("car", 5, rewrite=True)
        assert (await col.search("automobile", 5, rewrite=False)).results
    finally:
        await col.close()


class _Failing:
    identity = "failing:1"

    async def rewrite(self, query: str) -> list[str]:
        raise ValueError("the model is down")


class _Malformed:
    identity = "malformed:1"

    async def rewrite(self, query: str) -> Any:
        return "automobile"


class _Unsearchable:
    """Variants the query rules refuse: searched, they would break the response."""

    identity = "unsearchable:1"

    def __init__(self, variant: str) -> None:
        self.variant = variant

    async def rewrite(self, query: str) -> list[str]:
        return ["automobile", self.variant]


@pytest.mark.parametrize(
    ("rewriter", "message"),
    [
        (_Failing(), "'failing:1' failed: the model is down"),
        (_Malformed(), "list of strings"),
        (_Unsearchable("ca\ud800"), "'unsearchable:1' returned a bad query: variant 2.*surrogate"),
        (_Unsearchable("y" * 20_000), "variant 2 is longer than 10000 characters"),
    ],
)
async def test_a_broken_rewriter_surfaces_as_a_retrieval_error(
    tmp_path: Path, rewriter: Any, message: str
) -> None:
    chunking = ChunkingConfig(max_chars=200, overlap_chars=0)
    col = await _ingested(tmp_path, SYNONYMS, chunking, rewriter=rewriter)
    try:
        with pytest.raises(RetrievalError, match=message):
            await col.search("car", 5, rewrite=True)
        assert (await col.search("automobile", 5)).results  # without rewrite: fine
    finally:
        await col.close()


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("mmr", 1.5),
        ("mmr", -0.1),
        ("mmr", True),
        ("mmr", "x"),
        ("mmr", math.nan),
        ("mmr", math.inf),
        ("reorder", "reverse"),
        ("reorder", True),
        ("rewrite", "yes"),
        ("rewrite", 1),
        ("expand", "everything"),
    ],
)
async def test_bad_step_arguments_are_retrieval_errors(
    tmp_path: Path, option: str, value: Any
) -> None:
    chunking = ChunkingConfig(max_chars=200, overlap_chars=0)
    col = await _ingested(tmp_path, SYNONYMS, chunking, rewriter=GLOSSARY)
    try:
        with pytest.raises(RetrievalError, match=option):
            await col.search("automobile", 5, **{option: value})
    finally:
        await col.close()


# --- determinism across processes ---------------------------------------------------

_SCRIPT = textwrap.dedent(
    """
    import asyncio, json, sys
    from pathlib import Path
    from groundkit import ChunkingConfig, Collection, GlossaryRewriter

    FILES = json.loads(sys.argv[2])
    ROOT = Path(sys.argv[1])

    async def main() -> None:
        base = ROOT / "corpus"
        for name, text in FILES.items():
            (base / name).parent.mkdir(parents=True, exist_ok=True)
            (base / name).write_bytes(text.encode("utf-8"))
        rewriter = GlossaryRewriter({"beacon": ["lamp", "light"], "sailor": ["keeper"]})
        chunking = ChunkingConfig(strategy="sentence", max_chars=80)
        out = []
        async with Collection.open(
            ROOT / "index", base_dir=base, chunking=chunking, rewriter=rewriter
        ) as col:
            await col.ingest(base)
            for query in ("beacon sailor", "fog ship", "dawn beacon"):
                for steps in (
                    {"mmr": 0.5, "reorder": "lost-in-the-middle"},
                    {"mmr": 0.5, "reorder": "lost-in-the-middle", "rewrite": True},
                    {"expand": "window", "mmr": 0.3, "rewrite": True},
                ):
                    response = await col.search(query, 5, **steps)
                    out.append([
                        query,
                        response.metadata.get("queries"),
                        [(r.chunk_id, r.score) for r in response.results],
                        [list(r.context.chunk_ids) if r.context else None
                         for r in response.results],
                    ])
        print(json.dumps(out))

    asyncio.run(main())
    """
)


def _run(root: Path, seed: str) -> Any:
    env = {**os.environ, "PYTHONHASHSEED": seed, "HF_HUB_OFFLINE": "1", "CI": "true"}
    done = subprocess.run(
        [sys.executable, "-c", _SCRIPT, str(root), json.dumps(REPEATS)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_steps_are_deterministic_across_processes(tmp_path: Path) -> None:
    first = _run(tmp_path / "one", "1")
    second = _run(tmp_path / "two", "4242")
    assert first == second
    assert any(rankings for _, _, rankings, _ in first)
    assert any(queries for _, queries, _, _ in first)
