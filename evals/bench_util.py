"""Small helpers the benchmark scripts share: progress logging, method timers, verdicts.

The load average for a page lives in ``evals.machine`` (``load_average``) and the
percentile in ``evals.stats``.
"""

from __future__ import annotations

import json
import sqlite3
import sys
import time
from collections.abc import Awaitable, Callable
from contextlib import closing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from groundkit.storage.location import metadata_path
from groundkit.storage.sqlite import SCHEMA_VERSION

__all__ = [
    "Timers",
    "logger",
    "ratio_text",
    "reusable_cache",
    "stored_schema_current",
    "time_method",
    "verdict",
]


def verdict(ok: bool) -> str:
    """How a target line ends: ``met``, or a bold ``missed``."""
    return "met" if ok else "**missed**"


def ratio_text(ratio: float, target: float) -> str:
    """``ratio`` as ``1.23×``: two places, more where two would put it on the other side
    of ``target`` from its verdict (1.2012 against a 1.2 target reads ``1.201×``)."""
    for places in range(2, 7):
        shown = f"{ratio:.{places}f}"
        if (float(shown) <= target) == (ratio <= target):
            break
    return f"{shown}×"


def stored_schema_current(index_dir: Path, collection: str) -> bool:
    """Whether a cached collection's SQLite file exists and is at the schema this groundkit
    reads. A cache's fingerprint says what wrote it; the file may have been moved on since
    (opened by a groundkit with a newer schema, which migrates it in place), and a run on
    such a cache would fail at open instead of ingesting it again."""
    path = metadata_path(index_dir, collection)
    if not path.is_file():
        return False
    try:
        with closing(sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)) as conn:
            row = conn.execute("SELECT schema_version FROM state WHERE id = 1").fetchone()
    except sqlite3.Error:
        return False
    return row is not None and row[0] == SCHEMA_VERSION


def reusable_cache(
    meta_path: Path, fingerprint: str, index_dir: Path, collection: str = "bench"
) -> dict[str, Any] | None:
    """A benchmark cache's ``meta.json`` when the cache may be reused: written with this
    ``fingerprint``, and its store still at this groundkit's schema; else None."""
    if not meta_path.exists():
        return None
    meta: dict[str, Any] = json.loads(meta_path.read_text(encoding="utf-8"))
    if meta.get("fingerprint") != fingerprint:
        return None
    return meta if stored_schema_current(index_dir, collection) else None


def logger(name: str) -> Callable[[str], None]:
    """A function printing ``[name HH:MM:SS] message`` lines to stderr, flushed at once."""

    def log(message: str) -> None:
        print(f"[{name} {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)

    return log


@dataclass
class Timers:
    """Wall time and call counts accumulated by ``time_method``."""

    seconds: dict[str, float] = field(default_factory=dict)
    calls: dict[str, int] = field(default_factory=dict)
    # The texts of every embed_documents call, when that method is wrapped.
    embedded: list[list[str]] = field(default_factory=list)

    def add(self, name: str, elapsed: float) -> None:
        self.seconds[name] = self.seconds.get(name, 0.0) + elapsed
        self.calls[name] = self.calls.get(name, 0) + 1


def time_method(obj: object, name: str, timers: Timers, label: str) -> None:
    """Wrap ``obj.name`` (a coroutine method) on this instance only, timing each call.

    A wrapped ``embed_documents`` also records the texts of each call in
    ``timers.embedded``. ``delattr(obj, name)`` removes the wrapper again.
    """
    inner: Callable[..., Awaitable[Any]] = getattr(obj, name)

    async def timed(*args: Any, **kwargs: Any) -> Any:
        if name == "embed_documents":
            timers.embedded.append(list(args[0]))
        started = time.perf_counter()
        try:
            return await inner(*args, **kwargs)
        finally:
            timers.add(label, time.perf_counter() - started)

    setattr(obj, name, timed)
