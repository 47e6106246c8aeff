"""A cProfile of one ingest with the model's vectors replayed (part 1's last step)."""

from __future__ import annotations

import asyncio
import cProfile
import pstats
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from evals.hybrid.embedders import ReplayEmbedder
from groundkit import Collection

__all__ = ["ProfileResult", "profile_ingest"]

_PROFILE_TOP = 14


@dataclass
class ProfileResult:
    """A cProfile of one ingest with the model replaced by ``ReplayEmbedder``."""

    wall_s: float
    profiled_s: float
    top: list[tuple[str, int, float, float]]
    sqlite_calls: int
    documents: int


def _function_name(key: tuple[str, int, str]) -> str:
    path, line, name = key
    if path == "~":
        return name
    for marker in ("/site-packages/", "/src/"):
        if marker in path:
            path = path.split(marker, 1)[1]
            break
    path = re.sub(r"^.*/lib/python3\.\d+/", "", path)
    return f"{path}:{line}({name})"


async def profile_ingest(
    root: Path, corpus_dir: Path, vectors: dict[str, npt.NDArray[np.float32]], documents: int
) -> ProfileResult:
    """Ingest once more into a fresh index with the model's vectors replayed, under cProfile.

    ``asyncio.to_thread`` is run inline meanwhile so that chunking, analysis
    and file reads show up in the profile (cProfile sees one thread); SQLite
    statements still run on aiosqlite's thread and appear as waits.
    """
    dimensions = next(iter(vectors.values())).shape[0]
    col = await Collection.open(
        root / "profiled", "beir", base_dir=root, embedder=ReplayEmbedder(vectors, dimensions)
    )
    real = asyncio.to_thread

    async def inline(func: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
        return func(*args, **kwargs)

    profiler = cProfile.Profile()
    setattr(asyncio, "to_thread", inline)  # noqa: B010
    try:
        started = time.perf_counter()
        profiler.enable()
        await col.ingest(corpus_dir)
        profiler.disable()
        wall = time.perf_counter() - started
    finally:
        setattr(asyncio, "to_thread", real)  # noqa: B010
        await col.close()
    stats: dict[tuple[str, int, str], tuple[int, int, float, float, Any]]
    stats = pstats.Stats(profiler).stats  # type: ignore[attr-defined]
    ranked = sorted(stats.items(), key=lambda kv: kv[1][2], reverse=True)
    top = [(_function_name(k), v[1], v[2], v[3]) for k, v in ranked[:_PROFILE_TOP]]
    # aiosqlite hands every operation to its thread with one SimpleQueue.put_nowait.
    sqlite_calls = sum(v[1] for k, v in stats.items() if k[0] == "~" and "put_nowait" in k[2])
    total = sum(v[2] for v in stats.values())
    return ProfileResult(wall, total, top, sqlite_calls, documents)
