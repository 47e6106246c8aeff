"""A conformance suite any ``EmbeddingProtocol`` implementation must pass.

Subclass it with a ``Test*`` class that provides an ``embedder_factory`` fixture
returning a zero-argument callable that builds a fresh, identically configured
embedder, and optionally ``sample_texts`` with texts it really embeds::

    class TestMyEmbedder(EmbedderConformance):
        @pytest.fixture
        def embedder_factory(self):
            return lambda: MyEmbedder(...)

groundkit checks what an embedder returns before using it (``providers/checked.py``)
and turns a defect into an error at ingest or search time, far from its cause. The
suite pins the same contract on the embedder itself, so its author finds out in
its own tests: one unit-length, finite float32 row per text, in input order and
independent of the rest of the batch; the same vectors on every call, every fresh
instance and under concurrency; arrays the caller may keep and modify; a stable
identity (``provider``, ``model_name``, ``dimensions``); and groundkit errors,
never a third party's, for input that is not text. An embedder whose size is
learnt by running may raise ``ConfigurationError`` from ``dimensions`` and offer
``async load()``; the suite loads it where it needs the size.

Tolerances are class attributes: ``TOLERANCE`` bounds how far the components of
two vectors of one text, embedded in the same batch, may differ; ``BATCH_TOLERANCE``
the same when the text is embedded alone and beside others (an embedder that
quantises its activations per batch, as ONNX int8 does, sets it wider);
``NORM_TOLERANCE`` how far a row's length may be from 1; ``MAX_DISTINCT_COSINE``
how alike two different sample texts may embed.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest

from groundkit.errors import ConfigurationError, GroundkitError
from groundkit.providers import checked
from groundkit.providers.protocols import EmbeddingProtocol

__all__ = [
    "DEFAULT_TEXTS",
    "NOT_QUERIES",
    "NOT_TEXTS",
    "UNUSUAL_TEXTS",
    "EmbedderConformance",
    "dimensions_of",
]

Factory = Callable[[], EmbeddingProtocol]
Vectors = npt.NDArray[np.float32]

DEFAULT_TEXTS = (
    "Green tea is brewed at about eighty degrees.",
    "The night bus leaves the station at midnight.",
    "Photovoltaic cells turn sunlight into electricity.",
    "Sourdough rises slowly because wild yeast ferments overnight.",
    "Offshore wind farms see steadier winds than onshore sites.",
)
# Texts a real corpus holds: each must give a valid vector or a groundkit error.
UNUSUAL_TEXTS = (
    "",
    " ",
    "\n\t ",
    "a",
    "e\u0301 combining",
    "Straße ÉCOLE naïve café",
    "東京 の 天気",
    "مرحبا بالعالم",
    "Gezeiten – tidal 🌊",
    "\x00 control \x7f characters",
    "x" * 20_000,
    "word " * 4_000,
)
# What ``embed_documents`` must refuse with a groundkit error: not a sequence of
# strings (a bare string would be split into characters), or a string without UTF-8.
NOT_TEXTS: tuple[object, ...] = (
    [None],
    [3],
    [b"bytes"],
    ["fine", None],
    "a bare string",
    ["a lone surrogate \ud800"],
)
NOT_QUERIES: tuple[object, ...] = (None, 3, b"bytes", ["a list"], "a lone surrogate \ud800")
# More texts than many embedders send in one request or one batch (64 is common).
LONG_LIST = 70


async def dimensions_of(embedder: EmbeddingProtocol) -> int:
    """``embedder.dimensions``, after ``await embedder.load()`` when the size is learnt
    by running (``ConfigurationError`` until then)."""
    try:
        return embedder.dimensions
    except ConfigurationError:
        load = getattr(embedder, "load", None)
        if load is None:
            raise
        await load()
        return embedder.dimensions


def _ids(values: Sequence[object]) -> list[str]:
    """Short, ASCII test ids: the position and the start of each value."""
    return [f"{i}-{ascii(v)[:16]}" for i, v in enumerate(values)]


class EmbedderConformance:
    """Behaviour shared by every embedder."""

    # Largest difference of a component between two embeddings of one text in one batch.
    TOLERANCE: float = 1e-5
    # The same, for a text embedded alone and in a batch of others (or in another order).
    BATCH_TOLERANCE: float = 1e-5
    # How far a row's L2 norm may be from 1.
    NORM_TOLERANCE: float = 1e-5
    # Two different sample texts must have a cosine similarity below this.
    MAX_DISTINCT_COSINE: float = 0.999

    def sample_texts(self) -> Sequence[str]:
        """Distinct texts to embed; override with ones the embedder really reads."""
        return DEFAULT_TEXTS

    @pytest.fixture
    def embedder(self, embedder_factory: Factory) -> EmbeddingProtocol:
        """One instance from the implementer's factory."""
        return embedder_factory()

    # -- helpers -------------------------------------------------------------

    def _texts(self) -> list[str]:
        texts = list(self.sample_texts())
        assert len(texts) >= 2, "sample_texts must offer at least two texts"
        return texts

    def _rows(self, rows: Any, count: int, width: int) -> Vectors:
        """``rows`` checked as ``count`` unit, finite float32 rows of ``width``."""
        assert isinstance(rows, np.ndarray), f"expected a numpy array, got {type(rows).__name__}"
        assert rows.dtype == np.float32, f"expected float32, got {rows.dtype}"
        assert rows.shape == (count, width), f"expected shape {(count, width)}, got {rows.shape}"
        assert np.isfinite(rows).all(), "vectors hold NaN or infinite values"
        if count:
            norms = np.linalg.norm(rows.astype(np.float64), axis=1)
            worst = float(np.abs(norms - 1.0).max())
            assert worst <= self.NORM_TOLERANCE, f"rows are not unit length: norms {norms}"
        return rows

    def _vector(self, vector: Any, width: int) -> Vectors:
        """``vector`` checked as one unit, finite float32 vector of ``width``."""
        assert isinstance(vector, np.ndarray), (
            f"expected a numpy array, got {type(vector).__name__}"
        )
        assert vector.shape == (width,), f"expected shape {(width,)}, got {vector.shape}"
        row: Vectors = self._rows(vector[None, :], 1, width)[0]
        return row

    @staticmethod
    def _in_order(rows: Any, expected: Any) -> None:
        """Each of ``rows`` is nearest (ties allowed) to the row of ``expected`` for its
        own text, however wide the tolerances: a row answering another text fails."""
        cosines = np.asarray(rows, dtype=np.float64) @ np.asarray(expected, dtype=np.float64).T
        own = np.diag(cosines)
        wrong = np.flatnonzero(cosines.max(axis=1) > own + 1e-6)
        assert not wrong.size, (
            f"row {int(wrong[0])} is nearer to text {int(np.argmax(cosines[wrong[0]]))}'s "
            "vector than to its own text's: rows are not in input order"
        )

    @staticmethod
    def _close(got: Any, want: Any, tolerance: float, what: str) -> None:
        a, b = np.asarray(got, dtype=np.float64), np.asarray(want, dtype=np.float64)
        assert a.shape == b.shape, f"{what}: shapes {a.shape} and {b.shape}"
        worst = float(np.abs(a - b).max(initial=0.0))
        assert worst <= tolerance, f"{what}: components differ by up to {worst:.3g} > {tolerance}"

    # -- identity ------------------------------------------------------------

    async def test_satisfies_the_protocol(self, embedder: EmbeddingProtocol) -> None:
        assert isinstance(embedder, EmbeddingProtocol)

    async def test_provider_and_model_name_are_stable(
        self, embedder: EmbeddingProtocol, embedder_factory: Factory
    ) -> None:
        provider, model = embedder.provider, embedder.model_name
        for name in (provider, model):
            assert isinstance(name, str) and name.strip(), (provider, model)
        await dimensions_of(embedder)
        await embedder.embed_documents(self._texts()[:2])
        await embedder.embed_query(self._texts()[0])
        assert (embedder.provider, embedder.model_name) == (provider, model)
        fresh = embedder_factory()
        assert (fresh.provider, fresh.model_name) == (provider, model)

    async def test_dimensions_is_a_positive_int_that_does_not_change(
        self, embedder_factory: Factory
    ) -> None:
        embedder = embedder_factory()
        try:
            before: int | None = embedder.dimensions
        except ConfigurationError:
            # Learnt by running: the protocol's one allowed answer, with load() to learn it.
            assert callable(getattr(embedder, "load", None)), (
                "dimensions raised ConfigurationError, but there is no load() to learn it"
            )
            before = None
        width = await dimensions_of(embedder)
        assert isinstance(width, int) and not isinstance(width, bool), f"dimensions {width!r}"
        assert width > 0, f"dimensions is {width}"
        assert before is None or before == width
        rows = await embedder.embed_documents(self._texts()[:2])
        await embedder.embed_query(self._texts()[0])
        assert embedder.dimensions == width
        assert np.shape(rows)[-1] == width
        assert await dimensions_of(embedder_factory()) == width

    # -- shape ---------------------------------------------------------------

    async def test_no_texts_is_an_empty_matrix(self, embedder: EmbeddingProtocol) -> None:
        width = await dimensions_of(embedder)
        self._rows(await embedder.embed_documents([]), 0, width)
        self._rows(await embedder.embed_documents(()), 0, width)

    async def test_documents_are_one_unit_row_per_text(self, embedder: EmbeddingProtocol) -> None:
        width = await dimensions_of(embedder)
        texts = self._texts()
        self._rows(await embedder.embed_documents(texts), len(texts), width)
        self._rows(await embedder.embed_documents(texts[:1]), 1, width)

    async def test_a_query_is_one_unit_vector(self, embedder: EmbeddingProtocol) -> None:
        width = await dimensions_of(embedder)
        for text in self._texts():
            self._vector(await embedder.embed_query(text), width)

    async def test_any_sequence_of_texts_is_accepted(self, embedder: EmbeddingProtocol) -> None:
        texts = self._texts()
        as_list = await embedder.embed_documents(list(texts))
        as_tuple = await embedder.embed_documents(tuple(texts))
        self._rows(as_tuple, len(texts), await dimensions_of(embedder))
        self._close(as_list, as_tuple, self.TOLERANCE, "a tuple and a list of the same texts")

    # -- order and batches ---------------------------------------------------

    async def test_rows_follow_the_input_order(self, embedder: EmbeddingProtocol) -> None:
        texts = self._texts()
        together = await embedder.embed_documents(texts)
        alone = np.stack([(await embedder.embed_documents([t]))[0] for t in texts])
        self._in_order(together, alone)
        self._close(together, alone, self.BATCH_TOLERANCE, "a text alone and in a batch")
        reversed_rows = await embedder.embed_documents(texts[::-1])
        self._close(reversed_rows[::-1], together, self.BATCH_TOLERANCE, "reversed input")

    async def test_a_long_list_keeps_its_order(self, embedder: EmbeddingProtocol) -> None:
        base = self._texts()
        texts = [f"{base[i % len(base)]} (note {i})" for i in range(LONG_LIST)]
        width = await dimensions_of(embedder)
        together = self._rows(await embedder.embed_documents(texts), LONG_LIST, width)
        half = LONG_LIST // 2
        halves = np.concatenate(
            [
                await embedder.embed_documents(texts[:half]),
                await embedder.embed_documents(texts[half:]),
            ]
        )
        self._in_order(together, halves)
        self._close(together, halves, self.BATCH_TOLERANCE, "one call and two")

    async def test_distinct_texts_give_distinct_vectors(self, embedder: EmbeddingProtocol) -> None:
        texts = self._texts()
        for rows in (
            await embedder.embed_documents(texts),
            np.stack([await embedder.embed_query(t) for t in texts]),
        ):
            matrix = np.asarray(rows, dtype=np.float64)
            cosines = matrix @ matrix.T
            np.fill_diagonal(cosines, -1.0)
            i, j = np.unravel_index(int(np.argmax(cosines)), cosines.shape)
            assert cosines[i, j] < self.MAX_DISTINCT_COSINE, (
                f"{texts[i]!r} and {texts[j]!r} embed alike (cosine {cosines[i, j]:.6f})"
            )

    # -- determinism ---------------------------------------------------------

    async def test_deterministic_across_calls_and_instances(
        self, embedder: EmbeddingProtocol, embedder_factory: Factory
    ) -> None:
        texts = self._texts()
        first = await embedder.embed_documents(texts)
        queries = np.stack([await embedder.embed_query(t) for t in texts])
        self._close(await embedder.embed_documents(texts), first, self.TOLERANCE, "a second call")
        fresh = embedder_factory()
        self._close(await fresh.embed_documents(texts), first, self.TOLERANCE, "a fresh instance")
        again = np.stack([await embedder.embed_query(t) for t in texts])
        self._close(again, queries, self.TOLERANCE, "a second query")
        fresh_queries = np.stack([await fresh.embed_query(t) for t in texts])
        self._close(fresh_queries, queries, self.TOLERANCE, "a query on a fresh instance")

    async def test_concurrent_calls_give_what_sequential_calls_give(
        self, embedder: EmbeddingProtocol
    ) -> None:
        texts = self._texts()
        sequential_docs = [await embedder.embed_documents([t]) for t in texts]
        sequential_all = await embedder.embed_documents(texts)
        sequential_queries = [await embedder.embed_query(t) for t in texts]
        got = await asyncio.gather(
            *(embedder.embed_documents([t]) for t in texts),
            embedder.embed_documents(texts),
            *(embedder.embed_query(t) for t in texts),
        )
        n = len(texts)
        for text, want, have in zip(texts, sequential_docs, got[:n], strict=True):
            self._close(have, want, self.TOLERANCE, f"concurrent {text!r}")
        self._close(got[n], sequential_all, self.TOLERANCE, "a concurrent batch")
        for text, want, have in zip(texts, sequential_queries, got[n + 1 :], strict=True):
            self._close(have, want, self.TOLERANCE, f"concurrent query {text!r}")

    async def test_returned_arrays_belong_to_the_caller(self, embedder: EmbeddingProtocol) -> None:
        texts = self._texts()
        rows = await embedder.embed_documents(texts)
        query = await embedder.embed_query(texts[0])
        assert isinstance(rows, np.ndarray) and isinstance(query, np.ndarray)
        kept_rows, kept_query = np.array(rows, copy=True), np.array(query, copy=True)
        second = await embedder.embed_documents(texts)
        if rows.flags.writeable:
            assert not np.shares_memory(rows, second), "two calls returned one buffer"
            rows[...] = 7.0
        if query.flags.writeable:
            query[...] = 7.0
        self._close(second, kept_rows, self.TOLERANCE, "a result after changing an earlier one")
        self._close(
            await embedder.embed_documents(texts), kept_rows, self.TOLERANCE, "a later result"
        )
        self._close(
            await embedder.embed_query(texts[0]), kept_query, self.TOLERANCE, "a later query"
        )

    async def test_groundkit_takes_the_vectors_as_they_are(
        self, embedder: EmbeddingProtocol
    ) -> None:
        texts = self._texts()
        width = await dimensions_of(embedder)
        raw = await embedder.embed_documents(texts)
        try:
            rows = await checked.documents(embedder, texts)
            query = await checked.query(embedder, texts[0])
        except GroundkitError as exc:
            raise AssertionError(f"groundkit refuses the embedder's vectors: {exc}") from exc
        self._close(self._rows(rows, len(texts), width), raw, self.TOLERANCE, "checked rows")
        self._vector(query, width)

    # -- unusual and invalid input ---------------------------------------------

    @pytest.mark.parametrize("text", UNUSUAL_TEXTS, ids=_ids(UNUSUAL_TEXTS))
    async def test_unusual_text_is_embedded_or_refused(
        self, embedder: EmbeddingProtocol, text: str
    ) -> None:
        width = await dimensions_of(embedder)
        try:
            rows = await embedder.embed_documents([text, self._texts()[0]])
        except GroundkitError:
            pass
        else:
            self._rows(rows, 2, width)
        try:
            vector = await embedder.embed_query(text)
        except GroundkitError:
            pass
        else:
            self._vector(vector, width)

    @pytest.mark.parametrize("bad", NOT_TEXTS, ids=_ids(NOT_TEXTS))
    async def test_refuses_what_is_not_texts_with_a_groundkit_error(
        self, embedder: EmbeddingProtocol, bad: object
    ) -> None:
        await dimensions_of(embedder)
        with pytest.raises(GroundkitError):
            await embedder.embed_documents(bad)  # type: ignore[arg-type]

    @pytest.mark.parametrize("bad", NOT_QUERIES, ids=_ids(NOT_QUERIES))
    async def test_refuses_a_query_that_is_not_text_with_a_groundkit_error(
        self, embedder: EmbeddingProtocol, bad: object
    ) -> None:
        await dimensions_of(embedder)
        with pytest.raises(GroundkitError):
            await embedder.embed_query(bad)  # type: ignore[arg-type]
