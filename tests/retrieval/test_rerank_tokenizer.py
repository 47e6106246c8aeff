"""A cross-encoder directory without its tokenizer is refused, not used to rank at random.

Without tokenizer files the loader builds a tokenizer of the special tokens alone:
every word is ``[UNK]`` and every passage scores the same.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from groundkit.contracts import RetrievalResult
from groundkit.errors import RerankerNotConfiguredError
from groundkit.retrieval.rerank import CrossEncoderReranker
from tests.retrieval.conftest import TinyCrossEncoders
from tests.retrieval.test_rerank import QUERY, _candidates

_TOKENIZER_FILES = (
    "vocab.txt",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
)


def _copy(source: Path, target: Path, *, drop: tuple[str, ...]) -> Path:
    shutil.copytree(source, target)
    for name in drop:
        (target / name).unlink(missing_ok=True)
    return target


async def _rerank(path: Path) -> list[RetrievalResult]:
    return await CrossEncoderReranker(str(path)).rerank(QUERY, _candidates())


async def test_a_directory_without_tokenizer_files_is_not_configured(
    tmp_path: Path, tiny_cross_encoders: TinyCrossEncoders
) -> None:
    model = _copy(tiny_cross_encoders.single, tmp_path / "no-tokenizer", drop=_TOKENIZER_FILES)
    with pytest.raises(RerankerNotConfiguredError, match="no tokenizer files") as raised:
        await _rerank(model)
    assert "vocab.txt" in str(raised.value) and "tokenizer.json" in str(raised.value)


async def test_a_tokenizer_config_alone_is_not_a_tokenizer(
    tmp_path: Path, tiny_cross_encoders: TinyCrossEncoders
) -> None:
    keep = ("tokenizer_config.json",)
    drop = tuple(n for n in _TOKENIZER_FILES if n not in keep)
    model = _copy(tiny_cross_encoders.single, tmp_path / "config-only", drop=drop)
    assert (model / "tokenizer_config.json").exists()
    with pytest.raises(RerankerNotConfiguredError, match="no tokenizer files"):
        await _rerank(model)


async def test_a_tokenizer_far_smaller_than_the_model_is_not_configured(
    tmp_path: Path, tiny_cross_encoders: TinyCrossEncoders
) -> None:
    model = _copy(tiny_cross_encoders.single, tmp_path / "small-vocab", drop=_TOKENIZER_FILES)
    words = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "sky", "blue"]
    (model / "vocab.txt").write_text("\n".join(words) + "\n", encoding="utf-8")
    config = {"do_lower_case": True, "model_max_length": 512}
    (model / "tokenizer_config.json").write_text(json.dumps(config), encoding="utf-8")
    with pytest.raises(RerankerNotConfiguredError, match=r"tokenizer knows \d+ tokens where"):
        await _rerank(model)


async def test_a_model_with_its_tokenizer_still_reranks(
    tiny_cross_encoders: TinyCrossEncoders,
) -> None:
    ranked = await _rerank(tiny_cross_encoders.single)
    assert len({r.score for r in ranked}) > 1
