"""A conformance suite any ``VectorStoreProtocol`` implementation must pass.

Use it by subclassing with a ``Test*`` class that provides an async
``vector_store`` fixture yielding a fresh, empty store of ``DIM`` dimensions::

    class TestMyVectorStore(VectorStoreConformance):
        @pytest.fixture
        async def vector_store(self, tmp_path): ...

Invalid input is refused before anything is written: ``IngestionError`` from
``upsert_documents``/``delete_documents``, ``RetrievalError`` from ``query``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest

from groundkit.errors import IngestionError, RetrievalError
from groundkit.storage.protocols import VectorHit, VectorStoreProtocol

__all__ = ["DIM", "VectorStoreConformance", "basis", "random_rows", "unit", "upsert"]

DIM = 8
VStore = Any  # a VectorStoreProtocol implementation

INJECTIONS = (
    "x' OR '1'='1",
    "a') OR (1=1",
    "a'; DROP TABLE t; --",
    "doc id",
    "",
    "d\\",
    "d\n",
)


async def upsert(
    store: VStore,
    document_id: str,
    chunk_ids: Sequence[str],
    vectors: npt.ArrayLike,
    *,
    content_hashes: Sequence[str] | None = None,
) -> None:
    """Replace one document's rows through ``upsert_documents``."""
    await store.upsert_documents(
        [(document_id, chunk_ids, vectors)],
        content_hashes=None if content_hashes is None else {document_id: content_hashes},
    )


def unit(*components: float) -> npt.NDArray[np.float32]:
    """A DIM-wide vector with the given leading components (not normalised)."""
    out = np.zeros(DIM, dtype=np.float32)
    out[: len(components)] = components
    return out


def basis(i: int) -> npt.NDArray[np.float32]:
    out = np.zeros(DIM, dtype=np.float32)
    out[i] = 1.0
    return out


def random_rows(n: int, seed: int) -> npt.NDArray[np.float32]:
    rng = np.random.default_rng(seed)
    return rng.standard_normal((n, DIM)).astype(np.float32)


def exact_order(
    rows: dict[str, npt.NDArray[np.float32]], query: npt.NDArray[np.float32]
) -> list[str]:
    """Chunk ids by descending cosine, ties by chunk id: what a store must return."""
    q = query / np.linalg.norm(query)
    scores = {c: float(v @ q / np.linalg.norm(v)) for c, v in rows.items()}
    return sorted(scores, key=lambda c: (-round(scores[c], 5), c))


async def snapshot(store: VStore) -> tuple[int, set[str], list[VectorHit]]:
    return (await store.count(), await store.document_ids(), await store.query(basis(0), 100))


class VectorStoreConformance:
    """Behaviour shared by every vector store."""

    async def test_satisfies_protocol(self, vector_store: VStore) -> None:
        assert isinstance(vector_store, VectorStoreProtocol)
        assert vector_store.dimensions == DIM

    async def test_empty_store(self, vector_store: VStore) -> None:
        assert await vector_store.count() == 0
        assert await vector_store.document_ids() == set()
        assert await vector_store.query(basis(0), 5) == []
        assert await vector_store.query(basis(0), 5, document_ids=["d1"]) == []
        assert await vector_store.delete_documents(["d1"]) == 0
        await vector_store.optimize()

    async def test_upsert_and_query(self, vector_store: VStore) -> None:
        await upsert(vector_store, "d1", ["d1#0", "d1#1"], np.stack([basis(0), basis(1)]))
        await upsert(vector_store, "d2", ["d2#0"], np.stack([unit(1, 1)]))
        assert await vector_store.count() == 3
        assert await vector_store.document_ids() == {"d1", "d2"}
        hits = await vector_store.query(basis(0), 10)
        assert [h.chunk_id for h in hits] == ["d1#0", "d2#0", "d1#1"]
        assert [h.document_id for h in hits] == ["d1", "d2", "d1"]
        assert all(isinstance(h, VectorHit) for h in hits)
        scores = [h.score for h in hits]
        assert scores == sorted(scores, reverse=True)
        assert all(0.0 <= s <= 1.0 for s in scores)

    async def test_score_is_one_plus_cosine_over_two(self, vector_store: VStore) -> None:
        await upsert(
            vector_store,
            "d1",
            ["same", "diagonal", "orthogonal", "opposite"],
            np.stack([unit(3), unit(1, 1), basis(1), unit(-2)]),
        )
        hits = {h.chunk_id: h.score for h in await vector_store.query(unit(5), 4)}
        assert hits["same"] == pytest.approx(1.0, abs=1e-5)
        assert hits["diagonal"] == pytest.approx((1 + 2**-0.5) / 2, abs=1e-5)
        assert hits["orthogonal"] == pytest.approx(0.5, abs=1e-5)
        assert hits["opposite"] == pytest.approx(0.0, abs=1e-5)

    async def test_ranking_matches_exact_cosine(self, vector_store: VStore) -> None:
        vectors = random_rows(60, seed=1)
        rows: dict[str, npt.NDArray[np.float32]] = {}
        for d in range(6):
            ids = [f"d{d}#{i:02d}" for i in range(10)]
            block = vectors[d * 10 : (d + 1) * 10] * np.float32(d + 1)  # scale is irrelevant
            await upsert(vector_store, f"d{d}", ids, block)
            rows.update(zip(ids, block, strict=True))
        for q in random_rows(5, seed=2):
            hits = await vector_store.query(q, 7)
            assert [h.chunk_id for h in hits] == exact_order(rows, q)[:7]

    async def test_accepts_float64_and_lists(self, vector_store: VStore) -> None:
        await upsert(vector_store, "d1", ["a"], [[1.0] + [0.0] * (DIM - 1)])
        await upsert(vector_store, "d2", ["b"], np.ones((1, DIM), dtype=np.float64))
        hits = await vector_store.query([1.0] + [0.0] * (DIM - 1), 2)
        assert [h.chunk_id for h in hits] == ["a", "b"]
        await upsert(vector_store, "d3", ["huge", "tiny"], [[1e30] * DIM, [1e-30] * DIM])
        hits = await vector_store.query(np.ones(DIM), 4)
        assert {h.chunk_id for h in hits[:3]} == {"b", "huge", "tiny"}
        assert hits[0].score == pytest.approx(1.0, abs=1e-5)

    async def test_concurrent_writes(self, vector_store: VStore) -> None:
        await asyncio.gather(
            *(
                upsert(vector_store, f"d{d}", [f"d{d}#0", f"d{d}#1"], random_rows(2, seed=d))
                for d in range(8)
            )
        )
        assert await vector_store.count() == 16
        assert await vector_store.document_ids() == {f"d{d}" for d in range(8)}

    async def test_upsert_replaces_all_rows_of_the_document(self, vector_store: VStore) -> None:
        await upsert(vector_store, "d1", ["old0", "old1", "old2"], random_rows(3, seed=3))
        await upsert(vector_store, "d2", ["other"], random_rows(1, seed=4))
        await upsert(vector_store, "d1", ["new0"], np.stack([basis(2)]))
        assert await vector_store.count() == 2
        hits = await vector_store.query(basis(2), 10)
        assert {h.chunk_id for h in hits} == {"new0", "other"}
        assert hits[0].chunk_id == "new0"

    async def test_upsert_with_no_chunks_removes_the_document(self, vector_store: VStore) -> None:
        await upsert(vector_store, "d1", ["a", "b"], random_rows(2, seed=5))
        await upsert(vector_store, "d2", ["c"], random_rows(1, seed=6))
        await upsert(vector_store, "d1", [], np.zeros((0, DIM), dtype=np.float32))
        assert await vector_store.document_ids() == {"d2"}
        assert await vector_store.count() == 1

    async def test_delete_documents(self, vector_store: VStore) -> None:
        for d in range(4):
            await upsert(vector_store, f"d{d}", [f"d{d}#0", f"d{d}#1"], random_rows(2, seed=d))
        assert await vector_store.delete_documents(["d1", "d3", "missing"]) == 4
        assert await vector_store.document_ids() == {"d0", "d2"}
        assert await vector_store.count() == 4
        assert {h.document_id for h in await vector_store.query(basis(0), 10)} == {"d0", "d2"}
        assert await vector_store.delete_documents([]) == 0
        assert await vector_store.delete_documents(["d1"]) == 0

    async def test_ties_break_on_chunk_id(self, vector_store: VStore) -> None:
        # 40 identical vectors: far more ties at the cut than any fetch padding.
        ids = [f"c{i:02d}" for i in range(40)]
        shuffled = list(np.random.default_rng(7).permutation(ids))
        for n, doc in enumerate(("d1", "d2", "d3", "d4")):
            part = [str(c) for c in shuffled[n * 10 : (n + 1) * 10]]
            await upsert(vector_store, doc, part, np.tile(unit(1, 1), (10, 1)))
        await upsert(vector_store, "far", ["a-far"], np.stack([basis(5)]))
        for top_k in (1, 5, 12, 40):
            hits = await vector_store.query(unit(1, 1), top_k)
            assert [h.chunk_id for h in hits] == ids[:top_k]
            assert len({h.score for h in hits}) == 1
        again = await vector_store.query(unit(1, 1), 41)
        assert [h.chunk_id for h in again] == [*ids, "a-far"]

    async def test_document_ids_restriction_fills_top_k(self, vector_store: VStore) -> None:
        # "near" holds the 30 best rows; the restriction must look past them all.
        near = np.tile(basis(0), (30, 1)) + np.float32(0.01) * random_rows(30, seed=8)
        far = np.tile(basis(1), (20, 1)) + np.float32(0.5) * random_rows(20, seed=9)
        await upsert(vector_store, "near", [f"n{i:02d}" for i in range(30)], near)
        await upsert(vector_store, "far", [f"f{i:02d}" for i in range(20)], far)
        await upsert(vector_store, "other", ["o"], np.stack([basis(2)]))
        hits = await vector_store.query(basis(0), 8, document_ids={"far", "other"})
        assert len(hits) == 8
        assert {h.document_id for h in hits} <= {"far", "other"}
        unrestricted = await vector_store.query(basis(0), 51)
        expected = [h.chunk_id for h in unrestricted if h.document_id in {"far", "other"}][:8]
        assert [h.chunk_id for h in hits] == expected
        assert await vector_store.query(basis(0), 8, document_ids=set()) == []
        assert await vector_store.query(basis(0), 8, document_ids=["unknown"]) == []
        few = await vector_store.query(basis(0), 8, document_ids=("other", "unknown"))
        assert [h.chunk_id for h in few] == ["o"]

    async def test_restriction_to_all_or_most_documents(self, vector_store: VStore) -> None:
        for d in range(6):
            await upsert(vector_store, f"d{d}", [f"d{d}#0", f"d{d}#1"], random_rows(2, seed=20 + d))
        q = random_rows(1, seed=30)[0]
        everything = await vector_store.query(q, 12)
        every_doc = {f"d{d}" for d in range(6)}
        assert await vector_store.query(q, 12, document_ids=every_doc) == everything
        assert await vector_store.query(q, 12, document_ids=[*every_doc, "gone"]) == everything
        most = every_doc - {"d3"}
        hits = await vector_store.query(q, 12, document_ids=most)
        assert hits == [h for h in everything if h.document_id != "d3"]

    async def test_top_k_below_one_is_empty(self, vector_store: VStore) -> None:
        await upsert(vector_store, "d1", ["a"], np.stack([basis(0)]))
        assert await vector_store.query(basis(0), 0) == []

    @pytest.mark.parametrize(
        ("chunk_ids", "vectors"),
        [
            (["a", "b"], np.ones((1, DIM))),  # one row short
            (["a"], np.ones((1, DIM + 1))),  # wrong width
            (["a"], np.ones(DIM)),  # not a matrix
            (["a"], np.array([[np.nan] + [1.0] * (DIM - 1)])),
            (["a"], np.array([[np.inf] + [1.0] * (DIM - 1)])),
            (["a"], np.zeros((1, DIM))),  # no direction
            (["a"], [["x"] * DIM]),
            (["a"], [[1.0] * DIM, [1.0]]),  # ragged
            (["a", "a"], np.ones((2, DIM))),  # repeated chunk id
            ([""], np.ones((1, DIM))),
        ],
    )
    async def test_bad_vectors_are_refused(
        self, vector_store: VStore, chunk_ids: list[str], vectors: Any
    ) -> None:
        await upsert(vector_store, "keep", ["k"], np.stack([basis(0)]))
        before = await snapshot(vector_store)
        with pytest.raises(IngestionError):
            await upsert(vector_store, "d1", chunk_ids, vectors)
        with pytest.raises(IngestionError):
            await upsert(vector_store, "keep", chunk_ids, vectors)
        assert await snapshot(vector_store) == before

    @pytest.mark.parametrize(
        "vector",
        [
            np.ones(DIM + 1),
            np.ones((2, DIM)),
            np.zeros(DIM),
            np.full(DIM, np.nan),
            ["x"] * DIM,
        ],
    )
    async def test_bad_query_vectors_are_refused(self, vector_store: VStore, vector: Any) -> None:
        await upsert(vector_store, "d1", ["a"], np.stack([basis(0)]))
        with pytest.raises(RetrievalError):
            await vector_store.query(vector, 3)

    @pytest.mark.parametrize(
        ("top_k", "document_ids"),
        [
            (2.0, None),
            ("3", None),
            (True, None),
            (3, "d1"),  # one string is not a collection of ids
            (3, ["d1", 2]),
            (3, [["d1"]]),
        ],
        ids=["float", "text", "bool", "one-string", "mixed", "unhashable"],
    )
    async def test_bad_top_k_and_restrictions_are_refused(
        self, vector_store: VStore, top_k: Any, document_ids: Any
    ) -> None:
        await upsert(vector_store, "d1", ["a"], np.stack([basis(0)]))
        with pytest.raises(RetrievalError):
            await vector_store.query(basis(0), top_k, document_ids=document_ids)

    @pytest.mark.parametrize("bad", INJECTIONS)
    async def test_injection_looking_ids_are_refused(self, vector_store: VStore, bad: str) -> None:
        await upsert(vector_store, "d1", ["a"], np.stack([basis(0)]))
        await upsert(vector_store, "d2", ["b"], np.stack([basis(1)]))
        before = await snapshot(vector_store)
        with pytest.raises(IngestionError):
            await upsert(vector_store, bad, ["c"], np.stack([basis(2)]))
        with pytest.raises(IngestionError):
            await vector_store.delete_documents(["d1", bad])
        with pytest.raises(RetrievalError):
            await vector_store.query(basis(0), 5, document_ids=["d1", bad])
        assert await snapshot(vector_store) == before

    async def test_vectors_by_content_hands_back_stored_rows(self, vector_store: VStore) -> None:
        rows = random_rows(3, seed=11)
        await vector_store.upsert_documents(
            [("d1", ["d1#0", "d1#1"], rows[:2]), ("d2", ["d2#0"], rows[2:])],
            content_hashes={"d1": ["h-a", "h-b"]},
        )
        found = await vector_store.vectors_by_content(["h-b", "h-a", "absent", "h-a"])
        assert set(found) == {"h-a", "h-b"}  # d2 was written without hashes
        for key, row in (("h-a", rows[0]), ("h-b", rows[1])):
            expected = row / np.linalg.norm(row)
            np.testing.assert_allclose(found[key], expected, rtol=1e-6, atol=1e-7)
        assert await vector_store.vectors_by_content([]) == {}
        # The same text under another document is found by its hash too.
        await upsert(vector_store, "d3", ["d3#0"], rows[:1], content_hashes=["h-a"])
        await upsert(vector_store, "d1", ["d1#0"], rows[2:], content_hashes=["h-c"])
        assert set(await vector_store.vectors_by_content(["h-a", "h-b", "h-c"])) == {"h-a", "h-c"}
        await vector_store.delete_documents(["d1", "d3"])
        assert await vector_store.vectors_by_content(["h-a", "h-c"]) == {}

    async def test_bad_content_hashes_are_refused(self, vector_store: VStore) -> None:
        rows = random_rows(2, seed=12)
        for hashes in ({"d1": ["only-one"]}, {"d1": ["a", ""]}, {"other": ["a", "b"]}):
            with pytest.raises(IngestionError):
                await vector_store.upsert_documents(
                    [("d1", ["d1#0", "d1#1"], rows)], content_hashes=hashes
                )
        assert await vector_store.count() == 0
        with pytest.raises(IngestionError):
            await vector_store.vectors_by_content(["x' OR '1'='1"])
