"""The cross-encoder reranker, exercised through a real (tiny, locally built) model."""

from __future__ import annotations

import asyncio
import inspect
import logging
import math
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from groundkit.contracts import RetrievalResult, SourceClass
from groundkit.errors import ConfigurationError, RerankerNotConfiguredError, RetrievalError
from groundkit.retrieval.rerank import CrossEncoderReranker, RerankerProtocol, sigmoid
from tests.retrieval.conftest import TinyCrossEncoders

SENTINEL = "ZQXSENTINEL7731"
QUERY = "why is the sky blue"


def _result(
    content: str,
    *,
    source: str,
    start: int = 0,
    index: int = 0,
    score: float = 1.0,
    source_class: SourceClass = "text",
    extractor: str | None = None,
    metadata: dict[str, Any] | None = None,
) -> RetrievalResult:
    return RetrievalResult(
        content=content,
        score=score,
        document_id=f"doc:{source}",
        chunk_id=f"{source}#{index}@{start}",
        chunk_index=index,
        source=source,
        source_class=source_class,
        extractor=extractor,
        start_offset=start,
        end_offset=start + len(content),
        metadata=metadata or {},
    )


def _candidates() -> list[RetrievalResult]:
    return [
        _result("the sky is blue because of light", source="sky.txt", start=10),
        _result("cats purr and dogs bark", source="pets.txt"),
        _result("solar panel cells are made of silicon", source="solar.md", start=3, index=1),
        _result("green tea is steeped in hot water", source="tea.rst", index=2, start=40),
        _result("rocket launch at dawn over the ocean", source="launch.md"),
        _result("wind turbine power from air", source="wind.txt", start=7, index=1),
    ]


class CountingReranker(CrossEncoderReranker):
    """Counts model loads; everything else is the production path."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.loads = 0

    def _load_sync(self) -> Any:
        self.loads += 1
        return super()._load_sync()


def _independent_logits(model_dir: Path, query: str, passages: list[str]) -> list[float]:
    import torch
    from transformers import AutoTokenizer, BertForSequenceClassification

    tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
    model = BertForSequenceClassification.from_pretrained(str(model_dir))
    assert not model.training  # from_pretrained hands back eval mode: no dropout
    encoded = tokenizer([query] * len(passages), passages, padding=True, return_tensors="pt")
    with torch.no_grad():
        logits = model(**encoded).logits
    assert tuple(logits.shape) == (len(passages), 1)
    return [float(x) for x in logits[:, 0]]


# --- sigmoid -----------------------------------------------------------------


def test_sigmoid_is_overflow_safe_at_the_extremes() -> None:
    assert sigmoid(1000.0) == 1.0
    assert sigmoid(-1000.0) == 0.0
    assert sigmoid(0.0) == 0.5
    assert sigmoid(2.0) == pytest.approx(1 / (1 + math.exp(-2.0)))
    assert sigmoid(-2.0) == pytest.approx(1 - sigmoid(2.0))


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_sigmoid_rejects_non_finite_logits(bad: float) -> None:
    with pytest.raises(RetrievalError, match="non-finite"):
        sigmoid(bad)


@given(
    st.floats(allow_nan=False, allow_infinity=False),
    st.floats(allow_nan=False, allow_infinity=False),
)
def test_sigmoid_is_monotone_and_bounded(a: float, b: float) -> None:
    lo, hi = sorted((a, b))
    assert 0.0 <= sigmoid(lo) <= sigmoid(hi) <= 1.0


# --- construction ------------------------------------------------------------


def test_reranker_satisfies_the_protocol() -> None:
    reranker = CrossEncoderReranker("some/model")
    assert isinstance(reranker, RerankerProtocol)
    assert reranker.model_name == "some/model"
    assert not reranker.loaded
    params = list(inspect.signature(reranker.rerank).parameters)
    assert params == ["query", "results", "top_k"]


@pytest.mark.parametrize(
    "kwargs",
    [
        {"model_name_or_path": ""},
        {"model_name_or_path": "m", "max_length": 0},
        {"model_name_or_path": "m", "batch_size": 0},
    ],
)
def test_constructor_rejects_bad_settings(kwargs: dict[str, Any]) -> None:
    with pytest.raises(ConfigurationError):
        CrossEncoderReranker(**kwargs)


def test_import_and_construction_stay_light() -> None:
    code = (
        "import sys\n"
        "from groundkit.retrieval.rerank import CrossEncoderReranker\n"
        "CrossEncoderReranker('/nonexistent/model', max_length=64)\n"
        "heavy = [m for m in ('torch', 'sentence_transformers', 'transformers') "
        "if m in sys.modules]\n"
        "print(','.join(heavy))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert out.stdout.strip() == ""


async def test_empty_candidates_return_empty_without_loading(tmp_path: Path) -> None:
    reranker = CountingReranker(str(tmp_path / "does-not-exist"))
    assert await reranker.rerank(QUERY, []) == []
    assert await reranker.rerank(QUERY, [], top_k=3) == []
    assert reranker.loads == 0
    assert not reranker.loaded


@pytest.mark.parametrize("top_k", [0, -1, True])
async def test_invalid_top_k_is_refused(top_k: int) -> None:
    with pytest.raises(RetrievalError, match="top_k"):
        await CrossEncoderReranker("m").rerank(QUERY, _candidates(), top_k=top_k)


# --- scoring through the real model ------------------------------------------


async def test_scores_are_our_sigmoid_of_the_raw_logits(
    tiny_cross_encoders: TinyCrossEncoders, caplog: pytest.LogCaptureFixture
) -> None:
    candidates = _candidates()
    reranker = CrossEncoderReranker(str(tiny_cross_encoders.single))
    with caplog.at_level(logging.DEBUG):
        reranked = await reranker.rerank(QUERY, candidates)
    logits = _independent_logits(tiny_cross_encoders.single, QUERY, [c.content for c in candidates])
    expected = {c.chunk_id: sigmoid(logit) for c, logit in zip(candidates, logits, strict=True)}
    assert len(reranked) == len(candidates)
    for result in reranked:
        assert 0.0 <= result.score <= 1.0
        assert result.score == pytest.approx(expected[result.chunk_id], abs=1e-5)
    # A second sigmoid would squeeze everything into [0.5, 0.74]; the tiny
    # model's logits are spread wide enough to tell.
    assert max(abs(x) for x in logits) > 1.0
    assert any(r.score < 0.45 or r.score > 0.78 for r in reranked)
    for record in caplog.records:
        if record.levelno >= logging.INFO:
            assert QUERY not in record.getMessage()
            assert all(c.content not in record.getMessage() for c in candidates)


async def test_order_is_by_score_then_source_then_offset(
    tiny_cross_encoders: TinyCrossEncoders,
) -> None:
    twin = "the sky is blue because of light"  # also the content of sky.txt
    candidates = [
        *_candidates(),
        _result(twin, source="b.txt", start=5),
        _result(twin, source="a.txt", start=90, index=3),
        _result(twin, source="a.txt", start=2),
    ]
    reranker = CrossEncoderReranker(str(tiny_cross_encoders.single))
    reranked = await reranker.rerank(QUERY, candidates)
    keys = [(-r.score, r.source, r.start_offset) for r in reranked]
    assert keys == sorted(keys)
    twins = [(r.source, r.start_offset) for r in reranked if r.content == twin]
    # Identical passages tie exactly, so the tie-break alone decides their order.
    assert len({r.score for r in reranked if r.content == twin}) == 1
    assert twins == [("a.txt", 2), ("a.txt", 90), ("b.txt", 5), ("sky.txt", 10)]


async def test_results_are_new_validated_objects_with_everything_but_score_kept(
    tiny_cross_encoders: TinyCrossEncoders,
) -> None:
    candidates = [
        _result(
            "solar panel cells",
            source="paper.pdf",
            start=12,
            source_class="extracted",
            extractor="pypdf-5.1",
            metadata={"page": 3},
        ),
        _result("sky blue light", source="snap.html", source_class="snapshot"),
        _result("cats and dogs", source="pets.txt", start=4, metadata={"tags": ["a"]}),
    ]
    before = [c.model_dump() for c in candidates]
    reranker = CrossEncoderReranker(str(tiny_cross_encoders.single))
    reranked = await reranker.rerank(QUERY, candidates)
    assert [c.model_dump() for c in candidates] == before  # inputs untouched
    originals = {c.chunk_id: c for c in candidates}
    for result in reranked:
        original = originals[result.chunk_id]
        assert result is not original
        assert result.model_dump(exclude={"score", "scores"}) == original.model_dump(
            exclude={"score", "scores"}
        )
        assert result.citation == original.citation
        # The cross-encoder's score is kept beside the signals the result came with.
        assert result.scores is not None
        assert result.scores.rerank == result.score


async def test_reranking_is_deterministic_and_input_order_independent(
    tiny_cross_encoders: TinyCrossEncoders,
) -> None:
    candidates = _candidates()
    reranker = CrossEncoderReranker(str(tiny_cross_encoders.single), batch_size=2)
    first = await reranker.rerank(QUERY, candidates)
    again = await reranker.rerank(QUERY, candidates)
    reversed_input = await reranker.rerank(QUERY, list(reversed(candidates)))
    assert first == again
    assert [r.chunk_id for r in reversed_input] == [r.chunk_id for r in first]
    assert [r.score for r in reversed_input] == pytest.approx([r.score for r in first], abs=1e-6)


async def test_top_k_truncates_after_sorting(tiny_cross_encoders: TinyCrossEncoders) -> None:
    reranker = CrossEncoderReranker(str(tiny_cross_encoders.single))
    everything = await reranker.rerank(QUERY, _candidates())
    assert await reranker.rerank(QUERY, _candidates(), top_k=2) == everything[:2]
    assert await reranker.rerank(QUERY, _candidates(), top_k=100) == everything


async def test_concurrent_first_calls_share_one_load(
    tiny_cross_encoders: TinyCrossEncoders,
) -> None:
    reranker = CountingReranker(str(tiny_cross_encoders.single))
    outcomes = await asyncio.gather(*(reranker.rerank(QUERY, _candidates()) for _ in range(8)))
    assert reranker.loads == 1
    assert all(outcome == outcomes[0] for outcome in outcomes)
    await reranker.rerank(QUERY, _candidates())
    assert reranker.loads == 1


# --- load failures -----------------------------------------------------------


async def test_missing_path_is_not_configured_and_a_later_call_retries(
    tiny_cross_encoders: TinyCrossEncoders, tmp_path: Path
) -> None:
    target = tmp_path / "models" / "reranker"
    reranker = CountingReranker(str(target))
    results = await asyncio.gather(
        *(reranker.rerank(QUERY, _candidates()) for _ in range(3)), return_exceptions=True
    )
    assert reranker.loads == 1  # concurrent callers share the failed attempt too
    for outcome in results:
        assert isinstance(outcome, RerankerNotConfiguredError)
        assert str(target) in str(outcome)
        assert "no such directory" in str(outcome)
    assert not reranker.loaded
    # The failure is not remembered: once the model exists, the same instance works.
    shutil.copytree(tiny_cross_encoders.single, target)
    assert len(await reranker.rerank(QUERY, _candidates())) == len(_candidates())
    assert reranker.loads == 2


async def test_directory_without_a_model_is_not_configured(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("not a model", encoding="utf-8")
    with pytest.raises(RerankerNotConfiguredError, match="not a loadable") as caught:
        await CrossEncoderReranker(str(tmp_path)).rerank(QUERY, _candidates())
    # The loader's words are the cause, never the message.
    assert "[" not in str(caught.value) and "Error" not in str(caught.value)
    assert caught.value.__cause__ is not None


@pytest.mark.parametrize("name", ["/nonexistent/reranker", "./nowhere/reranker", "~/nowhere/x"])
async def test_a_path_to_nothing_is_refused_before_loading_and_in_groundkits_words(
    name: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    with pytest.raises(RerankerNotConfiguredError) as caught:
        await CrossEncoderReranker(name).rerank(QUERY, _candidates())
    assert str(caught.value) == (
        f"cannot load cross-encoder {name!r}: no such directory; pass the directory or hub "
        "name of a sequence-classification cross-encoder"
    )
    assert [r.name for r in caplog.records if not r.name.startswith("groundkit")] == []


async def test_a_file_is_named_as_one(tmp_path: Path) -> None:
    (tmp_path / "model.bin").write_bytes(b"weights")
    with pytest.raises(RerankerNotConfiguredError, match="it is a file, not a model's directory"):
        await CrossEncoderReranker(str(tmp_path / "model.bin")).rerank(QUERY, _candidates())


async def test_bare_encoder_is_not_a_cross_encoder(tiny_cross_encoders: TinyCrossEncoders) -> None:
    reranker = CrossEncoderReranker(str(tiny_cross_encoders.bare_encoder))
    with pytest.raises(RerankerNotConfiguredError, match="not a cross-encoder"):
        await reranker.rerank(QUERY, _candidates())
    assert not reranker.loaded


async def test_missing_extra_names_the_install_command(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # A None entry in sys.modules makes the import raise ImportError, as in a base install.
    monkeypatch.setitem(sys.modules, "sentence_transformers", None)
    with pytest.raises(ConfigurationError, match=r"pip install groundkit\[local\]"):
        await CrossEncoderReranker(str(tmp_path)).rerank(QUERY, _candidates())


# --- inference failures never quote the text -----------------------------------


def _assert_no_sentinel(exc: BaseException, caplog: pytest.LogCaptureFixture) -> None:
    assert SENTINEL not in str(exc)
    assert SENTINEL not in repr(exc)
    assert SENTINEL.lower() not in str(exc).lower()
    for record in caplog.records:
        if record.levelno >= logging.INFO:
            assert SENTINEL.lower() not in record.getMessage().lower()


async def test_multi_logit_model_is_a_retrieval_error_without_text(
    tiny_cross_encoders: TinyCrossEncoders, caplog: pytest.LogCaptureFixture
) -> None:
    candidates = [_result(f"{SENTINEL} sky blue", source="s.txt"), *_candidates()]
    reranker = CrossEncoderReranker(str(tiny_cross_encoders.three_labels))
    with caplog.at_level(logging.DEBUG), pytest.raises(RetrievalError) as info:
        await reranker.rerank(f"{SENTINEL} {QUERY}", candidates)
    assert not isinstance(info.value, RerankerNotConfiguredError)
    assert "one logit per pair" in str(info.value)
    _assert_no_sentinel(info.value, caplog)


async def test_backend_failure_is_a_retrieval_error_without_text(
    tiny_cross_encoders: TinyCrossEncoders, caplog: pytest.LogCaptureFixture
) -> None:
    # max_length beyond the model's 64 positions: the real forward pass fails
    # on a long input, inside sentence-transformers/torch.
    reranker = CrossEncoderReranker(str(tiny_cross_encoders.single), max_length=512)
    long_passage = f"{SENTINEL} " + " ".join(f"w{i}" for i in range(120))
    candidates = [_result(long_passage, source="long.txt"), *_candidates()]
    with caplog.at_level(logging.INFO), pytest.raises(RetrievalError) as info:
        await reranker.rerank(f"{SENTINEL} {QUERY}", candidates)
    assert "could not score" in str(info.value)
    assert info.value.__cause__ is None
    assert info.value.__suppress_context__
    _assert_no_sentinel(info.value, caplog)
    # Short inputs still fit, so the same loaded model keeps working.
    assert len(await reranker.rerank(QUERY, _candidates())) == len(_candidates())
