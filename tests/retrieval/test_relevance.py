"""Per-signal scores on every result, and the calibrated relevance cut."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from groundkit import (
    Collection,
    ConfigurationError,
    CrossEncoderReranker,
    GlossaryRewriter,
    InvalidQueryError,
    RelevanceCalibration,
    RetrievalConfig,
    SearchMode,
    SearchRequest,
    SentenceTransformerEmbedder,
    search_collections,
)
from groundkit.contracts import RetrievalResult, Scores
from groundkit.retrieval import reciprocal_rank_fusion
from groundkit.retrieval.relevance import BUILT_IN_CALIBRATIONS, calibration_for, fit_relevance
from groundkit.storage.protocols import score_to_cosine
from tests.retrieval.conftest import TinyCrossEncoders
from tests.support import QUERIES, SMALL_CHUNKS, ToyEmbedder, write_tree

# A calibration for the toy embedder: only the arithmetic is under test with it.
TOY = RelevanceCalibration(slope=8.0, intercept=-4.0, floor=0.3, fitted_on="a test's choice")


@given(
    slope=st.floats(0.1, 50),
    intercept=st.floats(-20, 20),
    chance=st.floats(0.01, 0.99),
)
def test_cosine_at_inverts_relevance(slope: float, intercept: float, chance: float) -> None:
    calibration = RelevanceCalibration(slope=slope, intercept=intercept, floor=0.0)
    assert calibration.relevance(calibration.cosine_at(chance)) == pytest.approx(chance)


@given(cosine=st.floats(-1e6, 1e6))
def test_relevance_is_a_probability_for_any_cosine(cosine: float) -> None:
    chance = TOY.relevance(cosine)
    assert 0.0 <= chance <= 1.0
    assert math.isfinite(chance)


@settings(max_examples=25, deadline=None)
@given(
    slope=st.floats(2, 20),
    intercept=st.floats(-10, 0),
    seed=st.integers(0, 2**32 - 1),
)
def test_fit_recovers_a_known_curve(slope: float, intercept: float, seed: int) -> None:
    rng = np.random.default_rng(seed)
    cosines = rng.uniform(-0.2, 1.0, 4000)
    truth = 1.0 / (1.0 + np.exp(-(slope * cosines + intercept)))
    labels = rng.uniform(size=cosines.size) < truth
    # A curve is only recoverable from enough of both classes: with a handful of
    # relevant results any steep curve through them fits as well.
    assume(labels.sum() >= 50 and (~labels).sum() >= 50)
    fitted = fit_relevance(cosines.tolist(), labels.tolist(), keep=0.9, fitted_on="synthetic")
    grid = np.linspace(-0.2, 1.0, 25)
    want = 1.0 / (1.0 + np.exp(-(slope * grid + intercept)))
    got = np.array([fitted.relevance(float(c)) for c in grid])
    assert np.abs(got - want).max() < 0.1
    assert fitted.fitted_on == "synthetic"
    # The floor keeps the asked-for share of the relevant results.
    positives = cosines[labels]
    kept = (positives >= fitted.floor).mean()
    assert 0.9 <= kept <= 0.9 + 2.0 / positives.size


def test_fit_refuses_data_it_cannot_calibrate() -> None:
    with pytest.raises(ConfigurationError, match="both relevant and irrelevant"):
        fit_relevance([0.1, 0.5, 0.9], [True, True, True])
    with pytest.raises(ConfigurationError, match="one finite cosine"):
        fit_relevance([0.1, float("nan")], [True, False])
    with pytest.raises(ConfigurationError, match="do not make relevance grow"):
        fit_relevance([0.1, 0.2, 0.8, 0.9], [True, True, False, False])
    with pytest.raises(ConfigurationError, match="keep"):
        fit_relevance([0.1, 0.9], [False, True], keep=0.0)


def test_calibration_settings_fail_as_configuration_errors() -> None:
    with pytest.raises(ConfigurationError):
        RelevanceCalibration(slope=-1.0, intercept=0.0, floor=0.0)
    with pytest.raises(ConfigurationError):
        RelevanceCalibration(slope=1.0, intercept=float("inf"), floor=0.0)
    with pytest.raises(ConfigurationError):
        RelevanceCalibration(slope=1.0, intercept=0.0, floor=1.5)
    bad: Any
    for bad in (1.5, 0.0, "always", True):
        with pytest.raises(ConfigurationError):
            RetrievalConfig(min_relevance=bad)
    assert RetrievalConfig(min_relevance="auto").min_relevance == "auto"


async def open_toy(
    index_dir: Path, corpus_dir: Path, config: RetrievalConfig | None = None
) -> Collection:
    col = await Collection.open(
        index_dir,
        base_dir=corpus_dir,
        chunking=SMALL_CHUNKS,
        embedder=ToyEmbedder(),
        retrieval=config,
    )
    await col.ingest(corpus_dir)
    return col


async def test_every_mode_gives_its_signals(index_dir: Path, corpus_dir: Path) -> None:
    col = await open_toy(index_dir, corpus_dir, RetrievalConfig(relevance_calibration=TOY))
    try:
        for query in QUERIES:
            for result in (await col.search(query, 5, mode="bm25")).results:
                assert result.scores == Scores(bm25=result.score)
            for result in (await col.search(query, 5, mode="dense")).results:
                s = result.scores
                assert s is not None and s.vector is not None
                assert s.vector == pytest.approx(score_to_cosine(result.score))
                assert s.relevance == pytest.approx(TOY.relevance(s.vector))
                assert (s.bm25, s.fused, s.rerank) == (None, None, None)
            for result in (await col.search(query, 5, mode="hybrid")).results:
                s = result.scores
                assert s is not None and s.fused == result.score
                assert s.bm25 is not None or s.vector is not None
                if s.vector is not None:
                    assert s.relevance == pytest.approx(TOY.relevance(s.vector))
    finally:
        await col.close()


MODES: tuple[SearchMode, ...] = ("bm25", "dense", "hybrid")
# Names a term of the corpus (tests/support.py) by words it does not use, so each
# search fuses rankings that differ.
GLOSSARY = GlossaryRewriter(
    {
        "sunlight": ["solar panels", "photovoltaic"],
        "tea": ["steeped", "boiling"],
        "electricity": ["energy", "power"],
    }
)
REWRITTEN = ("sunlight electricity", "tea", "wind electricity")


def expected_fusion(
    rankings: list[list[RetrievalResult]], rrf_k: int
) -> list[tuple[str, float, Scores]]:
    """SPEC 4.17 and 7.3.1 worked out by hand: RRF over the chunk ids, each chunk the
    result of the first ranking that found it, ``fused`` set to the RRF score and the
    signals beneath it kept."""
    first: dict[str, RetrievalResult] = {}
    for ranking in rankings:
        for result in ranking:
            first.setdefault(result.chunk_id, result)
    fused = reciprocal_rank_fusion([[r.chunk_id for r in ranking] for ranking in rankings], k=rrf_k)
    out = []
    for hit in fused:
        below = first[hit.key].scores
        assert below is not None
        out.append((hit.key, hit.score, dataclasses.replace(below, fused=hit.score)))
    return out


@pytest.mark.parametrize("mode", MODES)
async def test_rewriting_fills_fused_and_keeps_the_signals(
    index_dir: Path, corpus_dir: Path, mode: SearchMode
) -> None:
    """After query rewriting ``score`` is the RRF score of the queries' rankings and
    ``scores.fused`` the same figure, over the signals the first ranking gave."""
    config = RetrievalConfig(relevance_calibration=TOY, rrf_k=10)
    async with Collection.open(
        index_dir,
        base_dir=corpus_dir,
        chunking=SMALL_CHUNKS,
        embedder=ToyEmbedder(),
        retrieval=config,
        rewriter=GLOSSARY,
    ) as col:
        await col.ingest(corpus_dir)
        differed = 0
        for query in REWRITTEN:
            response = await col.search(query, 6, mode=mode, rewrite=True)
            queries = response.metadata["queries"]
            assert len(queries) > 1 and response.results
            # Each query is ranked postprocess_candidates deep, whatever top_k.
            depth = config.postprocess_candidates
            rankings = [list((await col.search(q, depth, mode=mode)).results) for q in queries]
            expected = expected_fusion(rankings, rrf_k=10)[:6]
            got = [(r.chunk_id, r.score, r.scores) for r in response.results]
            assert got == expected
            for result in response.results:
                s = result.scores
                assert s is not None and s.fused == result.score
                if mode != "dense":
                    assert s.bm25 is not None or s.vector is not None
                if mode != "bm25":
                    assert (s.vector is None) == (s.relevance is None)
            if [r.chunk_id for r in response.results] != [r.chunk_id for r in rankings[0]]:
                differed += 1
        # The variants changed the ranking somewhere: the fusion was not the query alone.
        assert differed > 0


async def test_a_rerank_after_rewriting_scores_and_keeps_the_fusion(
    index_dir: Path, corpus_dir: Path, tiny_cross_encoders: TinyCrossEncoders
) -> None:
    """A rerank runs after the queries are fused: ``score`` is then the cross-encoder's,
    while ``scores.fused`` still holds the RRF score the candidate had."""
    config = RetrievalConfig(rerank_depth=8)
    async with Collection.open(
        index_dir,
        base_dir=corpus_dir,
        chunking=SMALL_CHUNKS,
        reranker=CrossEncoderReranker(str(tiny_cross_encoders.single)),
        retrieval=config,
        rewriter=GLOSSARY,
    ) as col:
        await col.ingest(corpus_dir)
        for query in REWRITTEN:
            response = await col.search(query, 3, rewrite=True, rerank=True)
            assert response.metadata["stage"] == "rerank" and response.results
            rankings = [
                list((await col.search(q, 8)).results) for q in response.metadata["queries"]
            ]
            candidates = {cid: s for cid, _, s in expected_fusion(rankings, config.rrf_k)}
            for result in response.results:
                assert result.scores == dataclasses.replace(
                    candidates[result.chunk_id], rerank=result.score
                )


async def _two_collections(
    tmp_path: Path, corpus_dir: Path, **options: Any
) -> tuple[Collection, Collection]:
    other = {
        "roof.md": "Solar panels on the library roof make electricity. Tea in the reading room.\n",
        "power.txt": "Wind farms and solar panels feed the grid; boiling water for tea.\n",
    }
    write_tree(tmp_path / "other", other)
    index = tmp_path / "index"
    docs = await Collection.open(
        index, "docs", base_dir=corpus_dir, chunking=SMALL_CHUNKS, **options
    )
    library = await Collection.open(index, "library", base_dir=tmp_path / "other", **options)
    await docs.ingest(corpus_dir)
    await library.ingest(tmp_path / "other")
    return docs, library


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("rerank", [False, True])
async def test_several_collections_fill_fused_and_keep_the_signals(
    tmp_path: Path,
    corpus_dir: Path,
    tiny_cross_encoders: TinyCrossEncoders,
    mode: SearchMode,
    rerank: bool,
) -> None:
    """Across collections ``score`` is the RRF score of the collections' rankings (k=60,
    SPEC 4.10) and ``scores.fused`` the same figure; every signal a collection's own
    search gave the result (bm25, vector, relevance, rerank) is kept beneath it."""
    options: dict[str, Any] = {
        "embedder": ToyEmbedder(),
        "retrieval": RetrievalConfig(relevance_calibration=TOY, rerank_depth=8),
    }
    if rerank:
        options["reranker"] = CrossEncoderReranker(str(tiny_cross_encoders.single))
    docs, library = await _two_collections(tmp_path, corpus_dir, **options)
    try:
        for query in ("solar panels electricity", "boiling water tea", "wind farms"):
            found = await search_collections([docs, library], query, 5, mode=mode, rerank=rerank)
            assert found.complete and {r.collection for r in found.results} == {"docs", "library"}
            own: dict[tuple[str, str], RetrievalResult] = {}
            rankings = []
            for col in (docs, library):
                ranking = (await col.search(query, 5, mode=mode, rerank=rerank)).results
                rankings.append([(col.name, r.chunk_id) for r in ranking])
                own.update(((col.name, r.chunk_id), r) for r in ranking)
            fused = reciprocal_rank_fusion(rankings, k=60)[:5]
            assert [(r.collection, r.chunk_id) for r in found.results] == [h.key for h in fused]
            for result, hit in zip(found.results, fused, strict=True):
                assert result.score == hit.score
                below = own[hit.key].scores
                assert below is not None
                assert result.scores == dataclasses.replace(below, fused=hit.score)
                assert result.scores.fused == result.score
                if rerank:
                    assert result.scores.rerank is not None
                if mode != "bm25":
                    assert (result.scores.vector is None) == (result.scores.relevance is None)
    finally:
        await docs.close()
        await library.close()


async def test_no_relevance_without_a_calibration(index_dir: Path, corpus_dir: Path) -> None:
    col = await open_toy(index_dir, corpus_dir)
    try:
        result = (await col.search(QUERIES[0], 3, mode="dense")).results[0]
        assert result.scores is not None
        assert result.scores.vector is not None and result.scores.relevance is None
    finally:
        await col.close()
    col = await open_toy(index_dir, corpus_dir, RetrievalConfig(min_relevance=0.5))
    try:
        with pytest.raises(ConfigurationError, match="relevance_calibration"):
            await col.search(QUERIES[0], 3, mode="dense")
        # BM25 has no relevance to read: the cut is for dense and hybrid searches.
        assert (await col.search(QUERIES[0], 3, mode="bm25")).results
    finally:
        await col.close()


@pytest.mark.parametrize("chance", [0.2, 0.5, 0.8, 0.95, "auto"])
async def test_the_cut_keeps_a_subsequence_of_the_uncut_ranking(
    index_dir: Path, corpus_dir: Path, chance: float | str
) -> None:
    uncut = RetrievalConfig(relevance_calibration=TOY, hybrid_candidates=4)
    col = await open_toy(index_dir, corpus_dir, uncut)
    await col.close()
    cut = uncut.model_copy(update={"min_relevance": chance})
    async with (
        Collection.open(index_dir, embedder=ToyEmbedder(), retrieval=uncut) as full,
        Collection.open(index_dir, embedder=ToyEmbedder(), retrieval=cut) as kept,
    ):
        least = TOY.floor if chance == "auto" else TOY.cosine_at(float(chance))
        for query in QUERIES:
            for mode in ("dense", "hybrid"):
                every = (await full.search(query, 10, mode=mode)).results
                response = await kept.search(query, 10, mode=mode)
                some = response.results
                ids = [r.chunk_id for r in every]
                # The same results in the same order, with the same scores: the cut
                # only leaves some out, it never reorders or rescores.
                positions = [ids.index(r.chunk_id) for r in some]
                assert positions == sorted(positions)
                for r in some:
                    assert r.score == every[ids.index(r.chunk_id)].score
                    vector = r.scores.vector if r.scores else None
                    if vector is not None:
                        assert vector >= least - 1e-6
                if mode == "dense":
                    assert [r.chunk_id for r in some] == [
                        r.chunk_id
                        for r in every
                        if r.scores
                        and r.scores.vector is not None
                        and r.scores.vector >= least - 1e-6
                    ]
                cut_meta = response.metadata["relevance_cut"]
                assert cut_meta["min_relevance"] == chance
                assert cut_meta["dropped"] >= len(every) - len(some) >= 0


async def test_a_rewritten_search_counts_the_cut_of_its_query_once(
    index_dir: Path, corpus_dir: Path
) -> None:
    """``relevance_cut.dropped`` of a rewritten search is the original query's count, as
    its own search at the depth each query is ranked to gives it; every variant's
    drops were added to it, past the number of chunks in the collection."""
    config = RetrievalConfig(relevance_calibration=TOY)
    col = await open_toy(index_dir, corpus_dir, config)
    await col.close()
    async with Collection.open(
        index_dir, embedder=ToyEmbedder(), retrieval=config, rewriter=GLOSSARY
    ) as col:
        depth = config.postprocess_candidates
        for query in REWRITTEN:
            for mode in ("dense", "hybrid"):
                rewritten = await col.search(query, 5, mode=mode, rewrite=True, min_relevance=0.9)
                assert len(rewritten.metadata["queries"]) > 1
                alone = await col.search(query, depth, mode=mode, min_relevance=0.9)
                assert alone.metadata["relevance_cut"]["dropped"] > 0
                assert rewritten.metadata["relevance_cut"] == alone.metadata["relevance_cut"], (
                    query,
                    mode,
                )


async def test_a_search_may_ask_for_its_own_cut(index_dir: Path, corpus_dir: Path) -> None:
    """``min_relevance`` per search equals the same setting for the collection, overrides
    it, and is refused for BM25, which has no relevance to cut on."""
    base = RetrievalConfig(relevance_calibration=TOY)
    col = await open_toy(index_dir, corpus_dir, base)
    await col.close()
    setting = base.model_copy(update={"min_relevance": 0.9})
    async with (
        Collection.open(index_dir, embedder=ToyEmbedder(), retrieval=base) as plain,
        Collection.open(index_dir, embedder=ToyEmbedder(), retrieval=setting) as cut,
    ):
        for query in QUERIES:
            for mode in ("dense", "hybrid"):
                asked = await plain.search(query, 5, mode=mode, min_relevance=0.9)
                configured = await cut.search(query, 5, mode=mode)
                assert asked.results == configured.results
                assert asked.metadata["relevance_cut"] == configured.metadata["relevance_cut"]
                request = SearchRequest(query=query, top_k=5, mode=mode, min_relevance="auto")
                overridden = await cut.search(request)
                assert overridden.metadata["relevance_cut"]["min_relevance"] == "auto"
        with pytest.raises(InvalidQueryError, match="dense and hybrid"):
            await plain.search(QUERIES[0], 5, mode="bm25", min_relevance=0.5)
        for bad in (0.0, 1.0, -0.5, float("nan"), "always", True):
            with pytest.raises(InvalidQueryError, match="min_relevance"):
                await plain.search(QUERIES[0], 5, mode="dense", min_relevance=bad)  # type: ignore[arg-type]
        # The collection's own setting does not make BM25 searches fail.
        assert (await cut.search(QUERIES[0], 5, mode="bm25")).results


def test_the_built_in_calibration_is_found_for_its_model() -> None:
    from groundkit.contracts import EmbeddingIdentity

    for (provider, model, dims), calibration in BUILT_IN_CALIBRATIONS.items():
        identity = EmbeddingIdentity(provider=provider, model_name=model, dimensions=dims)
        assert calibration_for(identity) is calibration
        assert calibration_for(identity, TOY) is TOY
        assert calibration.fitted_on
    other = EmbeddingIdentity(provider="toy", model_name="hash-64", dimensions=64)
    assert calibration_for(other) is None


@pytest.mark.slow
async def test_a_query_the_collection_cannot_answer_returns_nothing(
    index_dir: Path, corpus_dir: Path
) -> None:
    """With the packaged MiniLM and its built-in calibration: off-topic and gibberish
    queries come back empty at the floor, while queries the corpus answers do not."""
    config = RetrievalConfig(min_relevance="auto")
    async with Collection.open(
        index_dir,
        base_dir=corpus_dir,
        chunking=SMALL_CHUNKS,
        embedder=SentenceTransformerEmbedder("all-MiniLM-L6-v2"),
        retrieval=config,
    ) as col:
        await col.ingest(corpus_dir)
        modes: tuple[SearchMode, ...] = ("dense", "hybrid")
        for query in ("quarterly tax filing deadline for freelancers", "zxqv plorth wumbat"):
            for mode in modes:
                response = await col.search(query, 5, mode=mode)
                assert response.results == [], (query, mode)
                assert response.metadata["relevance_cut"]["dropped"] > 0
        for query in ("how do solar panels make electricity", "offshore wind farms"):
            for mode in modes:
                response = await col.search(query, 5, mode=mode)
                assert response.results, (query, mode)
                top = response.results[0].scores
                assert top is not None and top.vector is not None
                assert top.relevance is not None and 0.0 < top.relevance < 1.0
