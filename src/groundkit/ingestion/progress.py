"""Progress of one ingest, as ``IngestProgress`` events for the caller's callback.

The Indexer counts; this module turns the counts into events, one stage at a
time, and closes every stage that ran with ``done == total``. Embedding is the
long part of a dense ingest, so its batches are cut into slices that each take
about ``EMBED_SLICE_SECONDS`` (longest texts first, as sentence-transformers
orders them itself, so the padding per batch stays what one large call would
have): every slice is one event, and a bar moves while vectors are made. Each
slice is a whole number of the embedder's own batches, so the embedder batches
the texts exactly as one call would: an int8 model, whose vectors depend a little
on the texts batched together, gives the same vectors however fast the machine
ran and whether progress is reported or not.

With ``log_every`` the same progress goes to the ``groundkit.progress`` log at
INFO, callback or not: each stage's first and last event as it happens, the model
load's start and end, and the state of the work every ``log_every`` seconds while
``Reporter.logging()`` is entered, so an ingest without a terminal is never silent.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager

import numpy as np
import numpy.typing as npt

from groundkit.contracts import IngestProgress, IngestStage
from groundkit.utils.heartbeat import heartbeat, progress_log

__all__ = ["EMBED_SLICE_SECONDS", "ProgressCallback", "Reporter", "embed_in_slices"]

ProgressCallback = Callable[[IngestProgress], None]

# How long one embedding call should take, so progress moves at least this often.
EMBED_SLICE_SECONDS = 0.5
_FIRST_SLICE = 32
_MIN_SLICE, _MAX_SLICE = 8, 512

_UNITS = {
    "discover": "files",
    "read": "files",
    "chunk": "chunks",
    "store": "chunks",
    "model": "models",
    "embed": "chunks",
}


class Reporter:
    """Counts per stage, sent to ``callback`` and, with ``log_every``, to the progress
    log (nothing happens with neither)."""

    def __init__(
        self, callback: ProgressCallback | None, *, log_every: float | None = None
    ) -> None:
        self._callback = callback
        self._log_every = log_every
        self._done: dict[IngestStage, int] = {}
        self._total: dict[IngestStage, int | None] = {}
        self._latest: IngestProgress | None = None
        self._started: set[IngestStage] = set()

    @property
    def active(self) -> bool:
        return self._callback is not None or self._log_every is not None

    @asynccontextmanager
    async def logging(self) -> AsyncIterator[None]:
        """While entered, the state of the work is logged every ``log_every`` seconds."""
        async with heartbeat(self._log_every, self._beat):
            yield

    def _beat(self, seconds: float) -> str:
        """Every stage so far, the model load by name while it runs."""
        parts: list[str] = []
        for stage, unit in _UNITS.items():
            if stage not in self._done:
                continue
            latest = self._latest
            if stage == "model" and latest is not None and latest.stage == "model":
                parts.append(_describe(latest))
                continue
            total = self._total.get(stage)
            count = f"{self._done[stage]}" + ("" if total is None else f"/{total}")
            parts.append(f"{stage} {count} {unit}")
        return f"ingest, {seconds:.1f} s in: {', '.join(parts) or 'starting'}"

    def _log(self, event: IngestProgress) -> None:
        first = event.stage not in self._started
        self._started.add(event.stage)
        self._latest = event
        if first or event.finished or event.stage == "model":
            progress_log.info("ingest: %s", _describe(event))

    def done_of(self, stage: IngestStage) -> int:
        return self._done.get(stage, 0)

    def count(self, stage: IngestStage, *, add_total: int) -> None:
        """Grow ``stage``'s total without an event (the next update carries it)."""
        self._done.setdefault(stage, 0)
        self._total[stage] = (self._total.get(stage) or 0) + add_total

    def update(
        self,
        stage: IngestStage,
        *,
        done: int | None = None,
        add: int = 0,
        total: int | None = None,
        add_total: int = 0,
        detail: str | None = None,
    ) -> None:
        """Set or advance ``stage``'s counts and send an event."""
        count = (self._done.get(stage, 0) if done is None else done) + add
        known = self._total.get(stage)
        if total is not None:
            known = total
        elif add_total:
            known = (known or 0) + add_total
        self._done[stage] = count
        self._total[stage] = known
        if self.active:
            unit = _UNITS[stage]
            event = IngestProgress(stage=stage, done=count, total=known, unit=unit, detail=detail)  # type: ignore[arg-type]
            if self._callback is not None:
                self._callback(event)
            if self._log_every is not None:
                self._log(event)

    def finish(self) -> None:
        """Close every stage that ran: ``done == total`` (the totals are final now)."""
        for stage in list(self._done):
            if self._total.get(stage) != self._done[stage]:
                self.update(stage, total=self._done[stage])


def _describe(event: IngestProgress) -> str:
    if event.stage == "model" and event.detail:
        return event.detail
    total = "" if event.total is None else f"/{event.total}"
    return f"{event.stage} {event.done}{total} {event.unit}"


async def embed_in_slices(
    embed: Callable[[list[str]], Awaitable[npt.NDArray[np.float32]]],
    texts: Sequence[str],
    on_slice: Callable[[int], None] | None = None,
    *,
    granule: int = 1,
) -> npt.NDArray[np.float32]:
    """``embed(texts)`` in slices of about ``EMBED_SLICE_SECONDS`` each, longest first;
    rows come back in the order of ``texts``. ``on_slice(n)`` follows each slice. Every
    slice but the last is a multiple of ``granule`` (the embedder's batch size, where it
    has one; 1 where batching does not change a vector), so the embedder's batches are
    those of a single call."""
    unit = max(1, granule)
    least, most = _whole(_MIN_SLICE, unit), _whole(_MAX_SLICE, unit)
    first = _whole(_FIRST_SLICE, unit)
    if on_slice is None or len(texts) <= first:
        rows = await embed(list(texts))
        if on_slice is not None:
            on_slice(len(texts))
        return rows
    order = sorted(range(len(texts)), key=lambda i: -len(texts[i]))
    parts: list[npt.NDArray[np.float32]] = []
    size, start = first, 0
    while start < len(order):
        picked = order[start : start + size]
        began = time.perf_counter()
        parts.append(await embed([texts[i] for i in picked]))
        elapsed = time.perf_counter() - began
        start += len(picked)
        on_slice(len(picked))
        if elapsed > 0:
            # Aim the next slice at the target time, in whole batches.
            wanted = int(len(picked) * EMBED_SLICE_SECONDS / elapsed) // unit * unit
            size = max(least, min(most, wanted, size * 2))
    stacked = np.concatenate(parts)
    out = np.empty_like(stacked)
    out[np.asarray(order)] = stacked
    return out


def _whole(size: int, unit: int) -> int:
    """``size`` rounded up to a multiple of ``unit``."""
    return -(-size // unit) * unit
