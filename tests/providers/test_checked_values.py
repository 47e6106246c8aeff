"""What an embedder's vectors become at the boundary: new arrays of real directions."""

from __future__ import annotations

from collections.abc import Sequence
from decimal import Decimal
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from groundkit import Collection, IngestionError, RetrievalError
from groundkit.providers import checked
from tests.support import ToyEmbedder


class Reusing(ToyEmbedder):
    """Returns views of one output buffer it overwrites on every call, as a
    preallocated (GPU or ONNX) output binding does."""

    def __init__(self) -> None:
        super().__init__()
        self.buffer = np.zeros((64, self.dimensions), dtype=np.float32)

    async def embed_documents(self, texts: Sequence[str]) -> Any:
        self.buffer[: len(texts)] = await super().embed_documents(texts)
        return self.buffer[: len(texts)]

    async def embed_query(self, text: str) -> Any:
        rows = await self.embed_documents([text])
        return rows[0]


async def test_vectors_are_copied_out_of_a_reused_buffer() -> None:
    embedder = Reusing()
    first = await checked.documents(embedder, ["kettles boil water", "tea leaves steep"])
    expected = await ToyEmbedder().embed_documents(["kettles boil water", "tea leaves steep"])
    query = await checked.query(embedder, "kettles boil water")
    await checked.documents(embedder, ["something else entirely", "and more"])
    assert not np.shares_memory(first, embedder.buffer)
    assert np.array_equal(first, expected)
    assert np.array_equal(query, expected[0])


async def test_ingest_with_a_reusing_embedder_stores_each_texts_own_vector(
    tmp_path: Path,
) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    texts = {f"f{i}.md": f"alpha beta word{i} number{i} gamma{i}" for i in range(40)}
    for name, text in texts.items():
        (docs / name).write_text(text, encoding="utf-8")
    async with Collection.open(tmp_path / "idx", base_dir=tmp_path, embedder=Reusing()) as col:
        # A progress callback makes ingest embed in slices, keeping each slice's array.
        await col.ingest(docs, progress=lambda _: None)
    async with Collection.open(tmp_path / "idx", base_dir=tmp_path, embedder=ToyEmbedder()) as col:
        missed = []
        for name, text in texts.items():
            found = await col.search(text, 1, mode="dense")
            if found.results[0].source != f"docs/{name}":
                missed.append(name)
        assert missed == []


class Returning(ToyEmbedder):
    """Returns what ``make`` makes of the toy's vectors."""

    def __init__(self, make: Any) -> None:
        super().__init__()
        self.make = make

    async def embed_documents(self, texts: Sequence[str]) -> Any:
        return self.make(await super().embed_documents(texts))

    async def embed_query(self, text: str) -> Any:
        return self.make(await super().embed_documents([text]))[0]


TEXTS = ["kettles boil water", "tea leaves steep"]


@pytest.mark.parametrize("scale", [1e39, 1e300, 1e-45, 1e-60, 1e-300], ids=lambda s: f"{s:g}")
async def test_a_direction_far_outside_float32_range_is_kept(scale: float) -> None:
    embedder = Returning(lambda v: v.astype(np.float64) * scale)
    rows = await checked.documents(embedder, TEXTS)
    want = await ToyEmbedder().embed_documents(TEXTS)
    assert rows.dtype == np.float32 and np.isfinite(rows).all()
    assert np.allclose(rows, want, atol=1e-6)
    assert np.allclose(await checked.query(embedder, TEXTS[0]), want[0], atol=1e-6)


async def test_a_vector_scaled_within_float32_range_is_cast_unchanged() -> None:
    embedder = Returning(lambda v: v * 1000)
    rows = await checked.documents(embedder, TEXTS)
    assert np.array_equal(rows, (await ToyEmbedder().embed_documents(TEXTS)) * 1000)


def _zero_second(v: Any) -> Any:
    v = v.copy()
    v[-1] = 0.0
    return v


BAD = {
    "complex": (lambda v: v.astype(np.complex64), "complex numbers"),
    "number strings": (lambda v: [[str(x) for x in row] for row in v], "strings"),
    "booleans": (lambda v: v > 0.1, "booleans"),
    "Python booleans": (lambda v: [[bool(x > 0.1) for x in row] for row in v], "booleans"),
    "None among numbers": (
        lambda v: [[None, *list(row[1:])] for row in v],
        "NoneType values",
    ),
    "float32 overflow as infinity": (
        lambda v: np.where(v > 0.2, np.inf, v),
        "NaN or infinite",
    ),
    "a zero row": (_zero_second, "vector 1 is all zeros"),
}


@pytest.mark.parametrize("case", sorted(BAD))
async def test_values_that_are_not_real_directions_are_refused_naming_the_embedder(
    case: str,
) -> None:
    make, message = BAD[case]
    embedder = Returning(make)
    with pytest.raises(IngestionError, match=message) as raised:
        await checked.documents(embedder, TEXTS)
    assert "Returning ('hash-64')" in str(raised.value)
    with pytest.raises(RetrievalError, match=message):
        await checked.documents(embedder, TEXTS, for_query=True)


@pytest.mark.parametrize("case", ["complex", "number strings", "booleans"])
async def test_a_query_vector_that_is_not_real_numbers_is_refused(case: str) -> None:
    make, message = BAD[case]
    with pytest.raises(RetrievalError, match=message) as raised:
        await checked.query(Returning(make), TEXTS[0])
    assert "Returning ('hash-64')" in str(raised.value)


async def test_numbers_numpy_holds_as_objects_are_accepted() -> None:
    rows = await checked.documents(
        Returning(lambda v: [[Decimal(str(x)) for x in row] for row in v]), TEXTS
    )
    assert np.allclose(rows, await ToyEmbedder().embed_documents(TEXTS), atol=1e-6)
