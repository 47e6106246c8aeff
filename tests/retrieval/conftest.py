"""Fixtures for the retrieval tests: tiny cross-encoders built on disk, never downloaded."""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from groundkit import Collection
    from groundkit.retrieval.rerank import RerankerProtocol

# Nothing in these tests may reach the hub; set before huggingface_hub is imported.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

_SPECIAL = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
_WORD_TEXT = (
    "the a an of to in on and or is are was why how what when where who sky blue red green "
    "light sun sunlight solar panel panels cell cells silicon energy power electricity wind "
    "turbine air ocean water sea tea green black boil boiling steep bread dough yeast oven "
    "crust rocket launch dawn crowd cat cats dog dogs bark purr run runs fast slow hot cold"
)
_WORDS = _WORD_TEXT.split()


@dataclass(frozen=True)
class TinyCrossEncoders:
    """Paths of the models the rerank tests load through sentence-transformers."""

    single: Path  # num_labels=1: a proper reranker, max_position_embeddings=64
    three_labels: Path  # num_labels=3: loads, but gives three logits per pair
    bare_encoder: Path  # BertModel without a classification head


def _write_tokenizer(directory: Path) -> None:
    from transformers import BertTokenizer

    directory.mkdir(parents=True, exist_ok=True)
    words = list(dict.fromkeys(_SPECIAL + _WORDS + [f"w{i}" for i in range(300)]))
    (directory / "vocab.txt").write_text("\n".join(words) + "\n", encoding="utf-8")
    config = {"do_lower_case": True, "model_max_length": 512}
    (directory / "tokenizer_config.json").write_text(json.dumps(config), encoding="utf-8")
    tokenizer = BertTokenizer.from_pretrained(str(directory))
    assert tokenizer.vocab_size == len(words), "vocab.txt was not picked up"
    tokenizer.save_pretrained(str(directory))


def _build(directory: Path, *, num_labels: int | None, seed: int) -> None:
    import torch
    from transformers import BertConfig, BertForSequenceClassification, BertModel

    _write_tokenizer(directory)
    vocab_size = len((directory / "vocab.txt").read_text(encoding="utf-8").splitlines())
    config = BertConfig(
        vocab_size=vocab_size,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=64,
        # Wide initial weights so logits spread well beyond ±0.1.
        initializer_range=0.2,
    )
    torch.manual_seed(seed)
    if num_labels is None:
        BertModel(config).save_pretrained(str(directory))
        return
    config.num_labels = num_labels
    model = BertForSequenceClassification(config)
    with torch.no_grad():
        # The pooled output is tanh-bounded; a wider head spreads the logits
        # over several units, so a second sigmoid would be plainly visible.
        model.classifier.weight.mul_(8.0)
    model.save_pretrained(str(directory))


@pytest.fixture(scope="session")
def tiny_cross_encoders(tmp_path_factory: pytest.TempPathFactory) -> TinyCrossEncoders:
    pytest.importorskip("sentence_transformers")
    base = tmp_path_factory.mktemp("cross-encoders")
    models = TinyCrossEncoders(
        single=base / "single",
        three_labels=base / "three-labels",
        bare_encoder=base / "bare-encoder",
    )
    _build(models.single, num_labels=1, seed=0)
    _build(models.three_labels, num_labels=3, seed=1)
    _build(models.bare_encoder, num_labels=None, seed=2)
    return models


@contextlib.asynccontextmanager
async def reranked_collection(
    index_dir: Path, corpus_dir: Path, reranker: RerankerProtocol
) -> AsyncIterator[Collection]:
    """A collection of the corpus, ingested with the toy embedder, searching with
    ``reranker`` over the best 8 candidates."""
    from groundkit import Collection, RetrievalConfig
    from tests.support import SMALL_CHUNKS, ToyEmbedder

    async with Collection.open(
        index_dir,
        base_dir=corpus_dir,
        chunking=SMALL_CHUNKS,
        embedder=ToyEmbedder(),
        reranker=reranker,
        retrieval=RetrievalConfig(rerank_depth=8),
    ) as col:
        await col.ingest(corpus_dir)
        yield col
