"""An application's embedder, held to the protocol wherever groundkit calls it."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from groundkit import Collection, IngestionError, RetrievalError
from groundkit.providers import checked
from tests.support import ToyEmbedder


class Faulty(ToyEmbedder):
    """A toy embedder that goes wrong in one chosen way once ``fault`` is set."""

    def __init__(self) -> None:
        super().__init__()
        self.fault: str | None = None

    def _spoilt(self, rows: Any) -> Any:
        if self.fault == "short":
            return rows[:-1]
        if self.fault == "narrow":
            return rows[:, :-1]
        if self.fault == "nan":
            rows = rows.copy()
            rows[0, 0] = np.nan
            return rows
        if self.fault == "raise":
            raise RuntimeError("the model server went away")
        if self.fault == "ragged":
            return [list(rows[0]), [1.0]]
        return rows

    async def embed_documents(self, texts: Sequence[str]) -> Any:
        return self._spoilt(await super().embed_documents(texts))

    async def embed_query(self, text: str) -> Any:
        if self.fault == "short":
            return np.zeros(0, dtype=np.float32)
        return self._spoilt(await super().embed_documents([text]))[0]


FAULTS = {
    "short": "expected 2 vector",
    "narrow": "expected 64-dimensional vectors, got 63",
    "nan": "NaN or infinite",
    "raise": "failed: the model server went away",
    "ragged": "not a rectangular array",
}


@pytest.mark.parametrize(("fault", "message"), FAULTS.items())
async def test_documents_are_checked_and_typed(fault: str, message: str) -> None:
    embedder = Faulty()
    embedder.fault = fault
    with pytest.raises(IngestionError, match=message) as raised:
        await checked.documents(embedder, ["one text", "another text"])
    assert "Faulty ('hash-64')" in str(raised.value)
    with pytest.raises(RetrievalError, match=message):
        await checked.documents(embedder, ["one text", "another text"], for_query=True)


async def test_a_well_behaved_embedder_passes_unchanged() -> None:
    embedder = ToyEmbedder()
    rows = await checked.documents(embedder, ["a b", "c"])
    assert rows.shape == (2, 64) and rows.dtype == np.float32
    assert np.array_equal(rows, await embedder.embed_documents(["a b", "c"]))
    vector = await checked.query(embedder, "a b")
    assert vector.shape == (64,)
    with pytest.raises(RetrievalError, match="expected 32-dimensional"):
        await checked.documents(embedder, ["a"], for_query=True, width=32)


async def test_a_query_vector_of_the_wrong_shape_is_a_retrieval_error() -> None:
    class Matrix(ToyEmbedder):
        async def embed_query(self, text: str) -> Any:
            return await self.embed_documents([text])

    with pytest.raises(RetrievalError, match="expected one vector"):
        await checked.query(Matrix(), "x")


@pytest.mark.parametrize(
    ("fault", "in_search"),
    [("short", "got 0"), ("raise", "went away"), ("narrow", "got 63")],
)
async def test_a_faulty_embedder_fails_ingest_and_search_with_groundkit_errors(
    tmp_path: Path, fault: str, in_search: str
) -> None:
    embedder = Faulty()
    async with Collection.open(tmp_path / "idx", base_dir=tmp_path, embedder=embedder) as col:
        await col.add_documents([{"id": "a", "text": "kettles boil water"}])
        embedder.fault = fault
        with pytest.raises(IngestionError, match=FAULTS[fault]):
            await col.add_documents(
                [{"id": "b", "text": "tea leaves steep"}, {"id": "c", "text": "cups hold tea"}]
            )
        for mode in ("dense", "hybrid"):
            with pytest.raises(RetrievalError, match=in_search):
                await col.search("kettles boil", mode=mode)
        embedder.fault = None
        response = await col.search("kettles boil", mode="hybrid")
        assert response.results and response.results[0].source == "record://a"


async def test_evidence_with_vectors_of_another_width_is_a_retrieval_error(
    tmp_path: Path,
) -> None:
    embedder = Faulty()
    async with Collection.open(tmp_path / "idx", base_dir=tmp_path, embedder=embedder) as col:
        await col.add_documents([{"id": "a", "text": "Kettles boil water. Tea steeps."}])
        response = await col.search("kettles boil", mode="dense")
        embedder.fault = "narrow"  # the sentences' vectors, embedded when first read
        with pytest.raises(RetrievalError, match="expected 64-dimensional"):
            len(response.results[0].evidence or ())
