"""The lexical seam: an index over one snapshot of a collection's term statistics.

This package knows nothing of where postings are stored. ``PostingsSource`` and
``PostingsBatch`` describe, structurally, what it reads; the metadata stores in
``groundkit.storage`` satisfy them without either side importing the other.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

__all__ = [
    "ChangeEntries",
    "LexicalDeltaLike",
    "LexicalHit",
    "LexicalIndexProtocol",
    "LiveSource",
    "PostingsBatch",
    "PostingsSource",
    "ValidityBatch",
]


@dataclass(frozen=True, slots=True)
class LexicalHit:
    key: int
    score: float


class PostingsBatch(Protocol):
    """Term statistics of a batch of chunks: ``keys[i]``'s unique term ids are
    ``term_ids[offsets[i]:offsets[i+1]]``, with frequencies ``tfs`` at the same positions."""

    @property
    def keys(self) -> npt.NDArray[np.int64]: ...

    @property
    def offsets(self) -> npt.NDArray[np.int64]: ...

    @property
    def term_ids(self) -> npt.NDArray[np.int32]: ...

    @property
    def tfs(self) -> npt.NDArray[np.int32]: ...


class PostingsSource(Protocol):
    """What building an index reads: postings in canonical order, then the vocabulary."""

    def iter_postings(self, batch_size: int = ...) -> AsyncIterator[PostingsBatch]: ...

    async def vocabulary(self) -> dict[str, int]: ...


@runtime_checkable
class LexicalIndexProtocol(Protocol):
    """A lexical index over one store snapshot."""

    @property
    def size(self) -> int: ...

    @property
    def keys(self) -> npt.NDArray[np.int64]:
        """Store keys of the indexed chunks, by position (what a mask lines up with)."""
        ...

    def search(
        self,
        query_terms: Sequence[str],
        top_k: int,
        *,
        score_threshold: float | None = None,
        mask: npt.NDArray[np.bool_] | None = None,
    ) -> list[LexicalHit]:
        """Best ``top_k`` chunks, ordered by ``(-score, canonical position)``.

        Chunks matching none of the terms are never returned; with ``mask``
        (one flag per position) neither are chunks whose flag is False. The
        mask applies before the cut, so ``top_k`` hits come back whenever that
        many allowed chunks match.
        """
        ...


class ValidityBatch(PostingsBatch, Protocol):
    """Postings of a batch of chunks with their tie keys and validity
    (``storage.protocols.ChunkPostings``)."""

    @property
    def order(self) -> npt.NDArray[np.uint64] | None: ...
    @property
    def valid_from(self) -> npt.NDArray[np.float64] | None: ...
    @property
    def valid_to(self) -> npt.NDArray[np.float64] | None: ...


class ChangeEntries(Protocol):
    """Chunks that left the current view (``storage.protocols.ChangeLog``)."""

    @property
    def complete(self) -> bool: ...
    @property
    def keys(self) -> npt.NDArray[np.int64]: ...
    @property
    def valid_to(self) -> npt.NDArray[np.float64]: ...
    @property
    def offsets(self) -> npt.NDArray[np.int64]: ...
    @property
    def term_ids(self) -> npt.NDArray[np.int32]: ...


class LexicalDeltaLike(Protocol):
    @property
    def generation(self) -> int: ...
    @property
    def changes(self) -> ChangeEntries: ...
    @property
    def postings(self) -> Sequence[ValidityBatch]: ...
    @property
    def live_chunks(self) -> int | None:
        """Current chunks in the store at ``generation``; None when it keeps no count."""
        ...


class LiveSource(Protocol):
    """What the live index reads from the metadata store (structurally: the stores
    in ``groundkit.storage`` satisfy it without this package importing them)."""

    async def generation(self) -> int: ...

    async def collection_uid(self) -> str: ...

    def postings_since(
        self, after_key: int, batch_size: int = ...
    ) -> AsyncIterator[ValidityBatch]: ...

    async def lexical_delta(self, after_key: int, since_generation: int) -> LexicalDeltaLike: ...

    async def prune_changes(self, through_generation: int) -> None: ...

    async def term_ids(self, terms: Sequence[str]) -> dict[str, int]: ...

    async def vocabulary(self, after: int = ...) -> dict[str, int]: ...
