"""Context around a result: its parent section or a window of neighbouring chunks.

Small chunks (sentences, short passages) make precise citations but thin
reading; ``search(expand=...)`` keeps the small chunk as the citation and adds
the passage around it as ``result.context``. The passage is rebuilt from the
document's stored chunks of the same version (overlaps merged, the recorded
gaps between disjoint chunks put back), so it is an exact slice of the source
like the citation itself. A passage never crosses a heading, and hits that fall
inside a passage already returned are folded into it, so one section is not
returned five times (adr/0046-structure-chunking.md).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import pairwise
from typing import Any

from groundkit.contracts import (
    GAPS_KEY,
    HEADINGS_KEY,
    ContextKind,
    ContextSpan,
    RetrievalResult,
)
from groundkit.storage.protocols import MetadataStoreProtocol, StoredChunk
from groundkit.utils.hashing import stable_id

__all__ = ["EXPAND_KINDS", "expand_results", "gaps_of", "rebuild_text", "section_bounds"]

EXPAND_KINDS: tuple[str, ...] = ("parent", "window")

ChunkAt = Callable[[int], Awaitable[StoredChunk | None]]
# Chunks read either side of the one asked for, in one store call.
_READ_AHEAD = 8


def section_bounds(metadata: Mapping[str, Any], offset: int) -> tuple[int, int | None]:
    """``[start, end)`` of the innermost section holding ``offset`` (end None: to the end).

    A section runs from its heading line to the next heading of any level, so a
    parent never swallows the subsections under it.
    """
    outline = metadata.get(HEADINGS_KEY)
    start, end = 0, None
    if isinstance(outline, list):
        for entry in outline:
            if not (isinstance(entry, list) and entry and type(entry[0]) is int):
                continue
            if entry[0] <= offset:
                start = entry[0]
            else:
                end = entry[0]
                break
    return start, end


def rebuild_text(chunks: Sequence[StoredChunk], gaps: Mapping[str, Any] | None) -> str | None:
    """The source text from the first chunk's start to the last one's end, or None
    when a gap between two of them was not recorded or does not fit. ``gaps`` None:
    the document was chunked before gaps were recorded (``gaps_of``), so only
    overlapping and adjacent chunks join."""
    text = [chunks[0].content]
    end = chunks[0].end_offset
    for previous, chunk in pairwise(chunks):
        if chunk.end_offset <= end:
            return None  # not in offset order: nothing a chunker writes
        if chunk.start_offset < end:
            text.append(chunk.content[end - chunk.start_offset :])
        else:
            width = chunk.start_offset - end
            # Unrecorded: nothing between adjacent chunks (a hard cut, CJK sentences), or
            # one space; anything else was recorded by ``chunk_gaps``.
            if gaps is None:
                gap: object = "" if width == 0 else None
            else:
                default = "" if width == 0 else " " if width == 1 else None
                gap = gaps.get(str(previous.chunk_index), default)
            if not isinstance(gap, str) or len(gap) != width:
                return None
            text.append(gap)
            text.append(chunk.content)
        end = chunk.end_offset
    return "".join(text)


def gaps_of(metadata: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """A document's recorded chunk gaps (``{}``: every gap is one space, or none), or
    None for a document stored before gaps were recorded (``GAPS_KEY`` null, set when
    its collection was migrated to schema 4)."""
    if GAPS_KEY in metadata and metadata[GAPS_KEY] is None:
        return None
    gaps = metadata.get(GAPS_KEY)
    return gaps if isinstance(gaps, Mapping) else {}


@dataclass(slots=True)
class _Kept:
    result: RetrievalResult
    document_id: str
    version: int | None
    start: int
    end: int
    context: ContextSpan | None = None
    collapsed: list[str] = field(default_factory=list)


class _Chunks:
    """Reads the chunks next to the hits, a few ids each (never a whole document), in
    as few store calls as it can: all anchors at once, then all their neighbours."""

    def __init__(self, store: MetadataStoreProtocol) -> None:
        self._store = store
        self._cache: dict[tuple[str, int, int], StoredChunk | None] = {}
        self._anchors: dict[str, StoredChunk] = {}

    async def prefetch(self, results: Sequence[RetrievalResult], around: int) -> None:
        """Read every result's own row, and ``around`` chunks either side of the
        current ones, in two batched reads."""
        rows = await self._store.get_chunks_by_ids([r.chunk_id for r in results])
        for result in results:
            row = rows.get(result.chunk_id)
            if row is not None and row.version == (result.version or row.version):
                self._anchors[result.chunk_id] = row
        wanted: dict[str, tuple[str, int, int]] = {}
        for row in self._anchors.values():
            low = max(0, row.chunk_index - around)
            for i in range(low, row.chunk_index + around + 1):
                key = (row.document_id, row.version, i)
                if key not in self._cache:
                    wanted[stable_id(row.document_id, row.document_hash, str(i))] = key
        if wanted:
            found = await self._store.get_chunks_by_ids(list(wanted))
            for chunk_id, key in wanted.items():
                hit = found.get(chunk_id)
                fits = hit is not None and hit.version == key[1] and hit.chunk_index == key[2]
                self._cache[key] = hit if fits else None

    async def anchor(self, result: RetrievalResult) -> tuple[StoredChunk | None, ChunkAt]:
        own = self._anchors.get(result.chunk_id)
        if own is None:  # a past version (an ``as_of`` search)
            own = await self._store.get_chunk(result.chunk_id, result.version)
        if own is None or own.start_offset != result.start_offset:
            return None, _nothing
        document_id, doc_hash, version = own.document_id, own.document_hash, own.version
        current = own.current
        self._cache[(document_id, version, own.chunk_index)] = own

        async def chunk_at(index: int) -> StoredChunk | None:
            key = (document_id, version, index)
            if key not in self._cache:
                await self._read(document_id, doc_hash, version, current, index)
            return self._cache.get(key)

        return own, chunk_at

    async def _read(
        self, document_id: str, doc_hash: str, version: int, current: bool, index: int
    ) -> None:
        """Read the chunks around ``index`` of one document version into the cache."""
        wanted = list(range(max(0, index - _READ_AHEAD), index + _READ_AHEAD + 1))
        wanted = [i for i in wanted if (document_id, version, i) not in self._cache]
        ids = {stable_id(document_id, doc_hash, str(i)): i for i in wanted}
        found: dict[int, StoredChunk] = {}
        if current:
            for chunk_id, row in (await self._store.get_chunks_by_ids(list(ids))).items():
                if row.version == version:
                    found[ids[chunk_id]] = row
        else:
            past = await self._store.get_chunk(
                stable_id(document_id, doc_hash, str(index)), version
            )
            if past is not None:
                found[index] = past
            wanted = [index]
        for i in wanted:
            hit = found.get(i)
            self._cache[(document_id, version, i)] = (
                hit if hit is not None and hit.chunk_index == i else None
            )


async def _nothing(index: int) -> StoredChunk | None:
    return None


async def _passage(
    own: StoredChunk, chunk_at: ChunkAt, kind: ContextKind, window: int, max_chars: int
) -> list[StoredChunk]:
    """The chunks of the passage around ``own``, in order."""
    sec_start, sec_end = section_bounds(own.metadata, own.start_offset)

    def inside(chunk: StoredChunk | None) -> bool:
        return (
            chunk is not None
            and chunk.start_offset >= sec_start
            and (sec_end is None or chunk.start_offset < sec_end)
        )

    found = {own.chunk_index: own}
    low = high = own.chunk_index
    start, end = own.start_offset, own.end_offset
    growing = [1, -1]  # the next chunk first: text reads forwards
    while growing:
        for step in list(growing):
            edge = high if step == 1 else low
            if kind == "window" and abs(edge - own.chunk_index) >= window:
                growing.remove(step)
                continue
            index = edge + step
            chunk = await chunk_at(index) if index >= 0 else None
            if (
                chunk is None
                or not inside(chunk)
                or max(end, chunk.end_offset) - min(start, chunk.start_offset) > max_chars
            ):
                growing.remove(step)
                continue
            found[index] = chunk
            if step == 1:
                high, end = index, chunk.end_offset
            else:
                low, start = index, chunk.start_offset
    return [found[i] for i in range(low, high + 1)]


async def expand_results(
    results: Sequence[RetrievalResult],
    store: MetadataStoreProtocol,
    *,
    kind: ContextKind,
    top_k: int,
    window: int,
    max_chars: int,
) -> list[RetrievalResult]:
    """The first ``top_k`` results not inside an earlier one's passage, each with
    its ``context``; the ones folded in are named by ``context.collapsed``."""
    chunks = _Chunks(store)
    await chunks.prefetch(results, window if kind == "window" else _READ_AHEAD // 2)
    kept: list[_Kept] = []
    for result in results:
        home = next(
            (
                k
                for k in kept
                if k.document_id == result.document_id
                and k.version == result.version
                and k.start <= result.start_offset
                and result.end_offset <= k.end
            ),
            None,
        )
        if home is not None:
            home.collapsed.append(result.chunk_id)
            continue
        if len(kept) == top_k:
            continue  # still read on: a later hit may fold into a kept passage
        own, chunk_at = await chunks.anchor(result)
        if own is None:  # no rows to read it from: returned as it is
            kept.append(_Kept(result, result.document_id, result.version, 0, 0))
            continue
        passage = await _passage(own, chunk_at, kind, window, max_chars)
        text = rebuild_text(passage, gaps_of(own.metadata))
        if text is None:  # a gap was not recorded: the chunk alone is exact
            passage, text = [own], own.content
        start, end = passage[0].start_offset, passage[-1].end_offset
        context = ContextSpan.model_construct(
            kind=kind,
            content=text,
            start_offset=start,
            end_offset=end,
            chunk_ids=tuple(c.chunk_id for c in passage),
            collapsed=(),
        )
        kept.append(_Kept(result, result.document_id, result.version, start, end, context))
    out: list[RetrievalResult] = []
    for k in kept:
        if k.context is None:
            out.append(k.result)
            continue
        context = k.context.model_copy(update={"collapsed": tuple(k.collapsed)})
        out.append(k.result.model_copy(update={"context": context}))
    return out
