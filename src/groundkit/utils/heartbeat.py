"""Progress in the log, at a steady interval: what runs without a terminal is never silent.

Work that takes seconds with nothing to show for it (an embedding model loading, a
long ingest) logs under ``groundkit.progress`` at INFO: a line when it starts and
ends, and one every ``every`` seconds between, saying what is at work and for how
long (adr/0070-framework-documents-and-progress.md).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

__all__ = ["PROGRESS_LOGGER", "PROGRESS_LOG_SECONDS", "heartbeat", "load_logged", "progress_log"]

PROGRESS_LOGGER = "groundkit.progress"
# The default interval between two progress lines in the log.
PROGRESS_LOG_SECONDS = 10.0

progress_log = logging.getLogger(PROGRESS_LOGGER)


@asynccontextmanager
async def heartbeat(
    every: float | None, line: Callable[[float], str | None]
) -> AsyncIterator[None]:
    """While the body runs, log ``line(seconds since it began)`` every ``every``
    seconds (None: not at all); a None line is skipped."""
    if every is None:
        yield
        return
    began = time.monotonic()

    async def beat() -> None:
        while True:
            await asyncio.sleep(every)
            text = line(time.monotonic() - began)
            if text is not None:
                progress_log.info("%s", text)

    task = asyncio.get_running_loop().create_task(beat())
    try:
        yield
    finally:
        task.cancel()


async def load_logged(load: Callable[[], Awaitable[None]], name: str, every: float | None) -> float:
    """``await load()``, logged: ``loading NAME``, then ``loading NAME: N s`` every
    ``every`` seconds, then ``loaded NAME in N s``; returns the seconds it took."""
    progress_log.info("loading %s", name)
    began = time.monotonic()
    async with heartbeat(every, lambda seconds: f"loading {name}: {seconds:.1f} s"):
        await load()
    seconds = time.monotonic() - began
    progress_log.info("loaded %s in %.1f s", name, seconds)
    return seconds
