"""The live lexical index: persisted segments kept in step with the metadata store.

The metadata store is the source of truth; segments are derived state
(adr/0030-lexical-segments.md). Opening loads the segments a manifest names
(memory-mapped, checksums verified) and catches up with the store through its
change log: chunks written since (``max_key``) become a new in-memory segment,
chunks that stopped being current since (``generation``) are marked in their
segment's overlay. Anything that does not fit (another collection's files, a
store older than the files, a pruned log, a damaged pack) is rebuilt from the
store, never trusted.

A writer (``commit``) persists what it caught up with: the new segment and the
changed overlays as packs, then the manifest naming them; it holds the files'
writer lock, so one process writes at a time while any number search. Merges
(``merge``) rewrite several segments as one off the event loop and swap the
manifest; searches keep using the state they started with.

Scores never depend on how documents are spread over segments: statistics are
summed over every view at query time (``groundkit.lexical.bm25``), so a live
index and a fresh rebuild rank identically.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
import uuid
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import numpy.typing as npt

from groundkit.contracts import CheckedPackStore, PackCheck, PackStore
from groundkit.errors import GroundkitError, StorageError
from groundkit.lexical.bm25 import (
    BM25Index,
    SegmentView,
    kernel_module,
    sorted_union,
    view_from_batches,
)
from groundkit.lexical.protocols import ChangeEntries, LexicalDeltaLike, LiveSource
from groundkit.lexical.segment import (
    Segment,
    check_segment_arrays,
    merge_segments,
    segment_from_arrays,
)
from groundkit.lexical.vocabulary import VocabularyPack, vocabulary_arrays

__all__ = ["FORMAT", "SEGMENT_CHECK", "LiveIndex"]

logger = logging.getLogger("groundkit.lexical")

# Version of the manifest and pack layout; files of another format are rebuilt.
# Format 2: the manifest states the current chunks it holds (``live_chunks``).
FORMAT = 2
# How often, at most, the packs a state maps are looked at (one stat each) for a file
# cut short or replaced under the mapping (seconds).
_PACK_CHECK_INTERVAL = 1.0
# A merge is due when more than this many segments exist...
_MAX_SEGMENTS = 8
# ...or when this share of a segment's documents is removed (visible at no time).
_MAX_REMOVED_SHARE = 0.3
# Terms whose ids are remembered (a query looks each one up in the store once).
_TERM_CACHE = 100_000
# Terms written after the vocabulary pack that are kept in memory; past this many the
# store is asked instead, until a merge writes a new pack.
_TAIL_CAP = 200_000
# A merge writes a new vocabulary pack when the tail holds this many terms (or a tenth
# of the pack's, if more).
_TAIL_REWRITE = 10_000
# The whole check of a stored segment (adr/0051), as a pack store may remember that a file
# passed it. The name changes whenever ``segment_damage`` checks something more or else:
# what the old check passed then vouches for nothing.
SEGMENT_CHECK = PackCheck("segment-1", check_segment_arrays)


class _Stale(Exception):
    """The persisted index cannot be used; the message says why (it is rebuilt)."""


@dataclass(frozen=True, slots=True)
class _Part:
    """One segment of a state, and the packs that hold it when it is persisted."""

    view: SegmentView
    segment_pack: dict[str, Any] | None = None  # manifest entry of the segment
    overlay_pack: dict[str, Any] | None = None  # entry of the overlay matching ``view``
    overlay_saved: bool = True  # False: ``view`` has changes no pack holds yet


@dataclass(frozen=True, slots=True)
class _State:
    generation: int
    max_key: int
    parts: tuple[_Part, ...]
    index: BM25Index


@dataclass(frozen=True, slots=True)
class Refresh:
    """What a catch-up read from the store: keys that became current and keys that
    stopped being current (a newer manifest adopted first is not listed);
    ``rebuilt`` when the index was rebuilt from the store instead."""

    added: npt.NDArray[np.int64]
    retired: npt.NDArray[np.int64]
    rebuilt: bool = False


_NOTHING = Refresh(np.zeros(0, np.int64), np.zeros(0, np.int64))


class LiveIndex:
    """A ``BM25Index`` over persisted segments that follows the store's writes."""

    def __init__(
        self,
        source: LiveSource,
        files: PackStore | None,
        *,
        k1: float = 1.5,
        b: float = 0.75,
    ) -> None:
        self._source = source
        self._files = files
        self.k1 = float(k1)
        self.b = float(b)
        self._state: _State | None = None
        self._lock = asyncio.Lock()
        self._uid: str | None = None
        self._terms: OrderedDict[str, int] = OrderedDict()
        # The vocabulary (lexical/vocabulary.py): a persisted pack, the terms written
        # after it, and whether the two together hold every term up to ``_vocab_max``.
        self._pack: VocabularyPack | None = None
        self._tail: dict[str, int] = {}
        self._complete = False
        self._vocab_max = 0
        # Why the persisted index was not used at open, or was dropped since (None: it
        # was used, or there was none).
        self.rebuilt_because: str | None = None
        self._packs_checked = 0.0

    # -- opening ------------------------------------------------------------------

    @classmethod
    async def open(
        cls,
        source: LiveSource,
        files: PackStore | None = None,
        *,
        k1: float = 1.5,
        b: float = 0.75,
    ) -> LiveIndex:
        """Load the persisted segments (or build them) and catch up with the store."""
        live = cls(source, files, k1=k1, b=b)
        await live._open()
        await live._remember_vocabulary()
        return live

    async def _remember_vocabulary(self) -> None:
        """Know every term at open, when that is cheap: the vocabulary pack plus the
        terms written after it, or a vocabulary small enough to read whole. Then a
        query term the vocabulary lacks is in no segment, and the store is not asked."""
        assert self._state is not None
        after = 0 if self._pack is None else self._pack.max_id
        if self._pack is None and not 0 <= self._state.index.largest_term < _TERM_CACHE:
            return  # no pack, and too large to read at every open: asked term by term
        tail = await self._source.vocabulary(after)
        if len(tail) > _TAIL_CAP:
            return
        self._tail = tail
        self._vocab_max = max([after, *tail.values()])
        self._complete = True

    async def _open(self) -> None:
        self._uid = await self._source.collection_uid()
        generation = await self._source.generation()
        state: _State | None = None
        if self._files is not None:
            try:
                state = await self._load(generation)
            except _Stale as exc:
                self.rebuilt_because = str(exc)
                logger.warning("the lexical index is rebuilt from the store: %s", exc)
        loaded_generation = None if state is None else state.generation
        if state is not None:
            try:
                state = (await self._catch_up(state))[0]
            except _Stale as exc:
                self.rebuilt_because = str(exc)
                logger.warning("the lexical index is rebuilt from the store: %s", exc)
                state = None
        if state is None:
            state = await self._build()
        self._state = state
        unsaved = state.generation != loaded_generation
        if self._files is not None and (unsaved or self._wants_vocabulary()):
            # Saved for the next process (a writer that died before saving, a first
            # open, files from before vocabulary packs); skipped when another process
            # is saving right now.
            try:
                await self._save(wait=False)
            except StorageError as exc:  # searches here are right; the next open retries
                logger.warning("the lexical index was not saved: %s", exc)

    # -- reading ------------------------------------------------------------------

    @property
    def index(self) -> BM25Index:
        assert self._state is not None, "LiveIndex.open() first"
        return self._state.index

    @property
    def generation(self) -> int:
        assert self._state is not None
        return self._state.generation

    @property
    def segment_count(self) -> int:
        assert self._state is not None
        return len(self._state.parts)

    @property
    def persisted(self) -> bool:
        """Whether every part of the current state is held by packs on disk."""
        assert self._state is not None
        return self._files is not None and all(
            p.segment_pack is not None and p.overlay_saved for p in self._state.parts
        )

    async def term_ids(self, terms: Sequence[str]) -> dict[str, int]:
        """Store ids of the ``terms`` that have one; ids never change, so found ones
        are remembered. An unknown term is asked again (it may exist by now), unless
        the vocabulary is known up to every id the index holds: then it is in no
        segment of the index, and the store need not be asked."""
        out: dict[str, int] = {}
        missing: list[str] = []
        tail, known = self._tail, self._terms
        for term in terms:
            found = tail.get(term)
            if found is None:
                found = known.get(term)
                if found is not None:
                    known.move_to_end(term)
            if found is None:
                missing.append(term)
            else:
                out[term] = found
        if missing and self._pack is not None:
            packed = self._pack.find(missing, kernel=kernel_module())
            if packed:
                out.update(packed)
                missing = [t for t in missing if t not in packed]
        if not missing or (self._complete and self._vocab_max >= self.index.largest_term):
            return out
        looked_up = await self._source.term_ids(missing)
        out.update(looked_up)
        known.update(looked_up)
        while len(known) > _TERM_CACHE:
            known.popitem(last=False)
        return out

    # -- following the store --------------------------------------------------------

    async def refresh(self) -> Refresh:
        """Catch up with writes made since the state was taken (any process's)."""
        async with self._lock:
            assert self._state is not None
            if await self._source.generation() == self._state.generation:
                return _NOTHING
            await self._adopt_newer_manifest()
            try:
                self._state, change = await self._catch_up(self._state)
            except _Stale as exc:
                await self._rebuild_locked(str(exc))
                return Refresh(_NOTHING.added, _NOTHING.retired, rebuilt=True)
            await self._follow_vocabulary()
            return change

    async def rebuild(self, reason: str) -> None:
        """Drop the current state for a fresh build from the store, because of
        ``reason`` (damage found while reading it), and save that build when no other
        writer is saving: every later search, here and in other processes, reads it."""
        async with self._lock:
            await self._rebuild_locked(reason)
        if self._files is not None:
            try:
                await self._save(wait=False)
            except GroundkitError as exc:
                logger.warning("the rebuilt lexical index could not be saved: %s", exc)

    async def _rebuild_locked(self, reason: str) -> None:
        self.rebuilt_because = reason
        logger.warning("the lexical index is rebuilt from the store: %s", reason)
        self._state = await self._build()
        # The vocabulary pack is derived state too: dropped with the rest, and written
        # anew by the next save (terms are asked of the store until then).
        self._pack, self._tail, self._complete, self._vocab_max = None, {}, False, 0
        self._terms.clear()

    async def check_packs(self) -> bool:
        """Rebuild from the store if a pack the state maps was cut short or replaced
        on disk (reading such a mapping would kill the process); True when it did.
        Looked at most once a second: one ``stat`` a pack."""
        if self._files is None or self._state is None:
            return False
        now = time.monotonic()
        if now - self._packs_checked < _PACK_CHECK_INTERVAL:
            return False
        self._packs_checked = now
        entries = [e for p in self._state.parts for e in (p.segment_pack, p.overlay_pack) if e]
        changed = self._files.changed_packs(entries)
        if not changed:
            return False
        await self.rebuild(f"index file {changed[0]!r} changed on disk under this process")
        return True

    async def _follow_vocabulary(self) -> None:
        """Read the terms the index's new segments brought into the tail, while the
        vocabulary is known whole (ids only grow: those above the largest known)."""
        assert self._state is not None
        if not self._complete or self._vocab_max >= self._state.index.largest_term:
            return
        try:
            added = await self._source.vocabulary(self._vocab_max)
        except GroundkitError:
            added = None
        if added is None or len(self._tail) + len(added) > _TAIL_CAP:
            self._complete, self._tail = False, {}  # asked term by term until a merge
            return
        self._tail.update(added)
        self._vocab_max = max([self._vocab_max, *added.values()])

    async def _adopt_newer_manifest(self) -> bool:
        """Take a manifest another writer saved past this state, when it can be read:
        loading its packs is cheaper than replaying what it covers."""
        if self._files is None or self._state is None:
            return False
        try:
            manifest = await self._files.read_manifest()
        except GroundkitError:
            return False
        if not isinstance(manifest, dict):
            return False
        generation = manifest.get("generation")
        if not isinstance(generation, int) or generation <= self._state.generation:
            return False
        try:
            self._state = await self._from_manifest(manifest, await self._source.generation())
        except _Stale:
            return False
        pack = await self._vocabulary_of(manifest)
        if pack is not None and (self._pack is None or pack.max_id > self._pack.max_id):
            self._pack = pack  # the tail still holds every term above the old one
        return True

    async def _catch_up(self, state: _State) -> tuple[_State, Refresh]:
        """``state`` moved to the store's present; ``_Stale`` when the store's change
        log no longer reaches back to it, or when the result does not hold the chunks
        the store counts as current (the caller rebuilds)."""
        delta = await self._source.lexical_delta(state.max_key, state.generation)
        if delta.generation == state.generation:
            _check_count(state.index.live_size, delta)
            return state, _NOTHING
        if not delta.changes.complete or delta.generation < state.generation:
            raise _Stale("the store's change log no longer reaches the index")
        parts = list(state.parts)
        added = np.zeros(0, np.int64)
        max_key = state.max_key
        batches = [b for b in delta.postings if b.keys.shape[0]]
        if batches:
            view = view_from_batches(batches)
            parts.append(_Part(view, overlay_saved=view.dead_docs == 0))
            current = view.segment.keys[view.current]
            added = np.sort(current)
            max_key = max(max_key, int(view.segment.keys.max()))
        changes = delta.changes
        retired = sorted_union([changes.keys])
        if changes.keys.size:
            parts = _apply_changes(parts, changes)
        index = self._index_of(parts)
        _check_count(index.live_size, delta)
        new_state = _State(delta.generation, max_key, tuple(parts), index)
        return new_state, Refresh(added, retired)

    def _index_of(self, parts: Sequence[_Part]) -> BM25Index:
        return BM25Index([p.view for p in parts], {}, k1=self.k1, b=self.b)

    # -- building and loading ---------------------------------------------------------

    async def _build(self) -> _State:
        """Every retained chunk of the store as one segment (the full rebuild)."""
        generation = await self._source.generation()  # first: later writes are replayed
        # In key order, the order the store keeps them in: the segment is numbered
        # canonically when it is built.
        batches = [b async for b in self._source.postings_since(0)]
        batches = [b for b in batches if b.keys.shape[0]]
        parts: list[_Part] = []
        max_key = 0
        if batches:
            view = await asyncio.to_thread(view_from_batches, batches)
            parts.append(_Part(view, overlay_saved=view.dead_docs == 0))
            max_key = int(view.segment.keys.max())
        return _State(generation, max_key, tuple(parts), self._index_of(parts))

    async def _load(self, store_generation: int) -> _State | None:
        """The state the manifest names; None without one, ``_Stale`` when unusable."""
        assert self._files is not None
        try:
            manifest = await self._files.read_manifest()
        except GroundkitError as exc:
            raise _Stale(str(exc)) from None
        if manifest is None:
            return None
        state = await self._from_manifest(manifest, store_generation)
        self._pack = await self._vocabulary_of(manifest)
        return state

    async def _vocabulary_of(self, manifest: Mapping[str, Any]) -> VocabularyPack | None:
        """The vocabulary pack ``manifest`` names, checked; None without one, or when it
        cannot be used (the store is then asked term by term, and the next save writes
        a new one: the segments stay usable either way)."""
        assert self._files is not None
        named = manifest.get("vocabulary")
        if not isinstance(named, dict):
            return None
        try:
            entry = named["pack"]
            arrays, _ = await self._files.load_pack(entry)
            return VocabularyPack.of(arrays, named.get("max_id"), entry)
        except (GroundkitError, ValueError, KeyError, TypeError) as exc:
            logger.warning("the vocabulary pack is not used: %s", exc)
            return None

    async def _from_manifest(self, manifest: Mapping[str, Any], store_generation: int) -> _State:
        assert self._files is not None
        if manifest.get("format") != FORMAT:
            raise _Stale(f"the index files are of format {manifest.get('format')!r}")
        if manifest.get("uid") != self._uid:
            raise _Stale("the index files belong to another collection (or an earlier one)")
        generation = manifest.get("generation")
        max_key = manifest.get("max_key")
        entries = manifest.get("parts")
        stated = manifest.get("live_chunks")
        if (
            not isinstance(generation, int)
            or not isinstance(max_key, int)
            or not isinstance(stated, int)
            or not isinstance(entries, list)
            or not all(_is_count(v) for v in (generation, max_key, stated))
        ):
            raise _Stale("the index manifest is malformed")
        if generation > store_generation:
            raise _Stale("the index files are newer than the store (was it restored?)")
        known = {
            p.segment_pack["name"]: p
            for p in (self._state.parts if self._state is not None else ())
            if p.segment_pack is not None
        }
        parts: list[_Part] = []
        for entry in entries:
            if not isinstance(entry, dict) or not isinstance(entry.get("segment"), dict):
                raise _Stale("the index manifest is malformed")
            parts.append(await self._load_part(entry, known))
        _check_parts(parts, max_key, stated)
        return _State(generation, max_key, tuple(parts), self._index_of(parts))

    async def _load_part(self, entry: Mapping[str, Any], known: Mapping[str, _Part]) -> _Part:
        assert self._files is not None
        seg_entry = entry["segment"]
        overlay_entry = entry.get("overlay")
        same = known.get(seg_entry.get("name"))
        try:
            if same is not None and same.segment_pack == seg_entry:
                segment = same.view.segment  # verified when it was first loaded
            else:
                segment = segment_from_arrays(await self._load_segment(seg_entry), checked=True)
            if overlay_entry is None:
                return _Part(SegmentView.fresh(segment), seg_entry, None)
            if same is not None and same.overlay_pack == overlay_entry:
                return _Part(same.view, seg_entry, overlay_entry)
            arrays, _ = await self._files.load_pack(overlay_entry)
            view = _view_from_overlay(segment, arrays)
        except GroundkitError as exc:
            raise _Stale(str(exc)) from None
        except (ValueError, KeyError, TypeError, IndexError) as exc:
            raise _Stale(f"an index file does not fit together: {exc}") from None
        return _Part(view, seg_entry, overlay_entry)

    async def _load_segment(self, entry: Mapping[str, Any]) -> Mapping[str, npt.NDArray[Any]]:
        """A segment pack's arrays, checked whole (``SEGMENT_CHECK``): by a store that
        may remember an unchanged file passing, else here."""
        files = self._files
        assert files is not None
        if isinstance(files, CheckedPackStore):
            arrays, _ = await files.load_checked_pack(entry, SEGMENT_CHECK)
            return arrays
        arrays, _ = await files.load_pack(entry)
        await asyncio.to_thread(SEGMENT_CHECK.run, arrays)  # whole-segment work, off the loop
        return arrays

    # -- writing ------------------------------------------------------------------------

    async def commit(self) -> str | None:
        """Catch up with the store and persist the result (the writer's step after a
        write). Without files this only catches up.

        A failure to write the files (disk full, a read-only directory) does not undo
        the write, which the store holds: this index is caught up in memory, the
        files stay as they were for the next open to catch up from or rebuild, and
        the returned notice says what was not saved (None: everything was).
        """
        if self._files is None:
            await self.refresh()
            return None
        try:
            await self._save(wait=True)
        except StorageError as exc:
            logger.warning("the lexical index was not saved: %s", exc)
            return f"the lexical index was not saved ({exc}); the next open rebuilds it"
        return None

    async def _save(self, *, wait: bool) -> bool:
        assert self._files is not None
        async with self._files.writer_lock(wait=wait) as held:
            if held:
                await self.refresh()
                await self._persist()
            return held

    async def _persist(self, *, vocabulary: bool = False) -> None:
        """Write the packs the current state lacks, then the manifest naming them
        (the caller holds the writer lock). Searches go on meanwhile: the state is
        only swapped, for one with the pack entries filled in, at the end. A
        vocabulary pack is written when there is none yet, or when ``vocabulary``."""
        assert self._files is not None and self._state is not None
        state = self._state
        if self._pack is None or vocabulary:
            await self._write_vocabulary()
        previous = None
        with contextlib.suppress(GroundkitError):
            previous = await self._files.read_manifest()
        saved: list[_Part] = []
        for part in state.parts:
            seg_pack = part.segment_pack
            if seg_pack is None:
                seg_pack = await self._files.write_pack(
                    _new_name("seg"), part.view.segment.arrays(), {"docs": part.view.segment.size}
                )
            overlay = part.overlay_pack
            if not part.overlay_saved or part.segment_pack is None:
                overlay = None
                if part.view.dead_docs:
                    overlay = await self._files.write_pack(
                        _new_name("ov"), _overlay_arrays(part.view), {}
                    )
            saved.append(
                replace(part, segment_pack=seg_pack, overlay_pack=overlay, overlay_saved=True)
            )
        await self._files.write_manifest(
            {
                "format": FORMAT,
                "uid": self._uid,
                "generation": state.generation,
                "max_key": state.max_key,
                "live_chunks": state.index.live_size,
                "parts": [{"segment": p.segment_pack, "overlay": p.overlay_pack} for p in saved],
                **self._vocabulary_entry(),
            }
        )
        async with self._lock:
            self._state = _with_packs(self._state, saved)
        # Whoever can load a manifest starts from this one or the one it replaced,
        # so the log up to the older of the two is needed by no one.
        before = previous.get("generation") if isinstance(previous, dict) else None
        if isinstance(before, int) and before > 0:
            await self._source.prune_changes(min(before, state.generation))
        names = [p.segment_pack["name"] for p in saved if p.segment_pack is not None]
        names += [p.overlay_pack["name"] for p in saved if p.overlay_pack is not None]
        if self._pack is not None:
            names.append(self._pack.entry["name"])
        try:
            await self._files.remove_unreferenced(names)
        except StorageError as exc:  # housekeeping: the files left are swept next time
            logger.warning("old lexical index files were not removed: %s", exc)

    def _wants_vocabulary(self) -> bool:
        """Whether a save would add a vocabulary pack the files lack (or hold damaged)."""
        return self._pack is None

    def _vocabulary_entry(self) -> dict[str, Any]:
        if self._pack is None:
            return {}
        return {"vocabulary": {"pack": dict(self._pack.entry), "max_id": self._pack.max_id}}

    async def _write_vocabulary(self) -> None:
        """Write every term the store holds as a new vocabulary pack (the caller holds
        the writer lock); the tail keeps only the terms above it."""
        assert self._files is not None
        terms = await self._source.vocabulary()
        arrays = await asyncio.to_thread(vocabulary_arrays, terms)
        max_id = max(terms.values(), default=0)
        entry = await self._files.write_pack(_new_name("voc"), arrays, {"terms": len(terms)})
        pack = VocabularyPack.of(arrays, max_id, entry)
        async with self._lock:
            # The pack holds every term up to max_id; a tail known whole still holds
            # every term above it up to _vocab_max, and any other tail is dropped.
            if self._complete:
                self._tail = {t: i for t, i in self._tail.items() if i > max_id}
                self._vocab_max = max(self._vocab_max, max_id)
            else:
                self._tail, self._vocab_max = {}, max_id
            self._pack = pack
            self._complete = True

    # -- merging -------------------------------------------------------------------------

    def merge_due(self) -> bool:
        """Whether the merge policy asks for a merge now (see ``merge``)."""
        assert self._state is not None
        return bool(_merge_plan(self._state.parts, everything=False))

    async def merge(self, *, everything: bool = False) -> bool:
        """Rewrite segments as one, dropping removed documents; True if it did.

        Without ``everything`` the policy picks: all segments but the largest when
        there are too many, and any segment whose removed share is high. The
        heavy work runs in a worker thread with no lock a search waits for;
        searches use the old state until the merged one is swapped in.
        """
        if self._files is None:
            return False
        async with self._files.writer_lock() as held:
            if not held:
                return False
            await self.refresh()
            assert self._state is not None
            state = self._state
            chosen = _merge_plan(state.parts, everything=everything)
            if not chosen:
                return False
            inputs = [state.parts[i].view for i in chosen]
            merged_view, numbering = await asyncio.to_thread(_merge_views, inputs)
            async with self._lock:
                current = self._state
                latest = {id(p.view.segment): p.view for p in current.parts}
                merged_segments = {id(v.segment) for v in inputs}
                if any(latest.get(id(v.segment)) is not v for v in inputs):
                    # Documents were retired while merging: take their latest ends.
                    valid_to = np.full(merged_view.segment.size, math.inf, dtype=np.float64)
                    for old, new_local in zip(inputs, numbering, strict=True):
                        kept = new_local >= 0
                        valid_to[new_local[kept]] = latest[id(old.segment)].valid_to[kept]
                    merged_view = SegmentView.with_valid_to(merged_view.segment, valid_to)
                parts = [p for p in current.parts if id(p.view.segment) not in merged_segments]
                if merged_view.segment.size:  # everything removed: no segment at all
                    parts.append(_Part(merged_view, overlay_saved=merged_view.dead_docs == 0))
                parts.sort(key=lambda p: -p.view.segment.size)  # large first, as searched
                self._state = replace(current, parts=tuple(parts), index=self._index_of(parts))
            packed = 0 if self._pack is None else int(self._pack.ids.shape[0])
            await self._persist(vocabulary=len(self._tail) > max(_TAIL_REWRITE, packed // 10))
            return True

    # -- erasing -------------------------------------------------------------------------

    async def erase(
        self, remove_now: Callable[[list[str]], Awaitable[int]] | None = None
    ) -> tuple[int, int]:
        """Leave no file of the index holding what the store removed (adr/0053-erasure.md).

        Every segment is merged into one without removed documents, a new vocabulary
        pack is written from the store's terms (an erase has removed the unused ones),
        the change log is pruned up to the manifest naming them, and ``remove_now``
        deletes every other pack at once, with no grace period. Run after the store
        erased its rows. Returns how many packs were written and how many files
        ``remove_now`` deleted. Without files it catches up and prunes the log only.
        """
        self._terms.clear()  # an erased term's id must not be remembered
        if self._files is None:
            await self.refresh()
            await self._source.prune_changes(self.generation)
            self._tail, self._complete = {}, False
            await self._remember_vocabulary()
            return 0, 0
        before = self._pack_names()
        await self.merge(everything=True)
        async with self._files.writer_lock() as held:
            if not held:  # pragma: no cover - a waiting lock is always held
                raise _Stale("the index files' writer lock was not taken")
            await self.refresh()
            self._terms.clear()
            await self._persist(vocabulary=True)
            assert self._state is not None
            await self._source.prune_changes(self._state.generation)
            after = self._pack_names()
            removed = 0 if remove_now is None else await remove_now(sorted(after))
        return len(after - before), removed

    def _pack_names(self) -> set[str]:
        """The packs the current state and vocabulary are saved in."""
        names = {
            str(entry["name"])
            for part in (self._state.parts if self._state is not None else ())
            for entry in (part.segment_pack, part.overlay_pack)
            if entry is not None
        }
        if self._pack is not None:
            names.add(str(self._pack.entry["name"]))
        return names


def _is_count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _check_count(live: int, delta: LexicalDeltaLike) -> None:
    """``_Stale`` unless the index holds as many current chunks as the store counts
    in the snapshot the delta was read from (a store that keeps no count is trusted)."""
    counted = delta.live_chunks
    if counted is not None and counted != live:
        raise _Stale(f"the index holds {live} current chunks where the store holds {counted}")


def _check_parts(parts: Sequence[_Part], max_key: int, stated: int) -> None:
    """``_Stale`` unless the parts a manifest names fit together and fit what it says:
    each segment once, no key above ``max_key``, ``stated`` current chunks in all."""
    names = [p.segment_pack["name"] for p in parts if p.segment_pack is not None]
    if len(set(names)) != len(names):
        raise _Stale("the index manifest names a segment twice")
    for part in parts:
        keys = part.view.segment.keys
        if keys.size and (int(keys.max()) > max_key or int(keys.min()) <= 0):
            raise _Stale("a segment holds keys outside the range its manifest states")
    live = sum(p.view.segment.size - p.view.dead_docs for p in parts)
    if live != stated:
        raise _Stale(f"the index manifest states {stated} current chunks, its segments hold {live}")


def _merge_views(
    views: Sequence[SegmentView],
) -> tuple[SegmentView, list[npt.NDArray[np.int64]]]:
    """Merge the segments of ``views``, dropping removed documents (run in a thread)."""
    merged, numbering = merge_segments([(v.segment, v.valid_to != -math.inf) for v in views])
    valid_to = np.full(merged.size, math.inf, dtype=np.float64)
    for view, new_local in zip(views, numbering, strict=True):
        kept = new_local >= 0
        valid_to[new_local[kept]] = view.valid_to[kept]
    return SegmentView.with_valid_to(merged, valid_to), numbering


def _with_packs(state: _State, saved: Sequence[_Part]) -> _State:
    """``state`` with the pack entries of ``saved`` wherever a part still has the
    very view that was saved (a part changed since keeps its unsaved mark)."""
    by_view = {id(p.view): p for p in saved}
    by_segment = {id(p.view.segment): p for p in saved}
    parts: list[_Part] = []
    for part in state.parts:
        same = by_view.get(id(part.view))
        if same is not None:
            parts.append(same)
            continue
        seg = by_segment.get(id(part.view.segment))
        if seg is not None:  # the segment was saved; its overlay has moved on since
            part = replace(part, segment_pack=seg.segment_pack, overlay_saved=False)
        parts.append(part)
    return replace(state, parts=tuple(parts))


def _merge_plan(parts: Sequence[_Part], *, everything: bool) -> list[int]:
    if everything:
        worth = len(parts) > 1 or any(p.view.removed for p in parts)
        return list(range(len(parts))) if worth else []
    chosen: set[int] = set()
    if len(parts) > _MAX_SEGMENTS:
        largest = max(range(len(parts)), key=lambda i: parts[i].view.segment.size)
        chosen.update(i for i in range(len(parts)) if i != largest)
    for i, part in enumerate(parts):
        size = part.view.segment.size
        if size and part.view.removed / size > _MAX_REMOVED_SHARE:
            chosen.add(i)
    if len(chosen) == 1 and not parts[next(iter(chosen))].view.removed:
        return []
    return sorted(chosen)


def _apply_changes(parts: list[_Part], changes: ChangeEntries) -> list[_Part]:
    """Mark every logged chunk in the part that holds it (keys in no part are chunks
    written and gone between two catch-ups: nothing to do)."""
    out = list(parts)
    offsets = changes.offsets
    for i, part in enumerate(parts):
        docs = part.view.segment.locate(changes.keys)
        hit = np.flatnonzero(docs >= 0)
        if hit.size == 0:
            continue
        terms = [changes.term_ids[offsets[j] : offsets[j + 1]] for j in hit.tolist()]
        view = part.view.apply(docs[hit], changes.valid_to[hit], terms)
        out[i] = replace(part, view=view, overlay_saved=False)
    return out


def _overlay_arrays(view: SegmentView) -> dict[str, npt.NDArray[Any]]:
    """An overlay as stored: the documents not current and their end, and the
    non-zero per-term counts (sparse: most documents of most segments are current)."""
    dead = np.flatnonzero(view.valid_to != math.inf)
    arrays: dict[str, npt.NDArray[Any]] = {
        "docs": dead.astype(np.int64),
        "valid_to": view.valid_to[dead].astype(np.float64),
    }
    if view.dead_df is not None:
        nz = np.flatnonzero(view.dead_df)
        arrays["df_terms"] = nz.astype(np.int64)
        arrays["df_counts"] = view.dead_df[nz].astype(np.int64)
    else:
        arrays["df_terms"] = np.zeros(0, np.int64)
        arrays["df_counts"] = np.zeros(0, np.int64)
    return arrays


def _view_from_overlay(segment: Segment, arrays: Mapping[str, npt.NDArray[Any]]) -> SegmentView:
    docs = np.asarray(arrays["docs"], dtype=np.int64)
    until = np.asarray(arrays["valid_to"], dtype=np.float64)
    df_terms = np.asarray(arrays["df_terms"], dtype=np.int64)
    df_counts = np.asarray(arrays["df_counts"], dtype=np.int64)
    n, m = segment.size, int(segment.terms.shape[0])
    if (
        docs.shape != until.shape
        or df_terms.shape != df_counts.shape
        or (docs.size and (docs.min() < 0 or docs.max() >= n))
        or (df_terms.size and (df_terms.min() < 0 or df_terms.max() >= m))
        or np.isnan(until).any()
        or (until == math.inf).any()
        or sorted_union([docs]).size != docs.size
    ):
        raise ValueError("an overlay does not fit its segment")
    if df_terms.size:
        # A removed count never exceeds the documents holding the term (nor is negative).
        held = np.diff(np.asarray(segment.term_ptr, dtype=np.int64))[df_terms]
        if (df_counts < 0).any() or (df_counts > held).any():
            raise ValueError("an overlay's removed document counts do not fit its segment")
    valid_to = np.full(n, math.inf, dtype=np.float64)
    valid_to[docs] = until
    dead_df = None
    if df_terms.size:
        dead_df = np.zeros(m, dtype=np.int64)
        dead_df[df_terms] = df_counts
    return SegmentView.restored(segment, valid_to, dead_df)


def _new_name(kind: str) -> str:
    """A unique pack name, sortable by creation time."""
    return f"{kind}-{time.time_ns():020d}-{uuid.uuid4().hex[:8]}"
