"""stdin for the MCP stdio transport, read through the event loop so a stop is never stuck.

The SDK's stdio transport reads stdin in a worker thread. A cancel cannot interrupt
that read: told to stop (Ctrl-C, SIGTERM) while its client kept stdin open, the server
waited for the client's next line for ever. Here stdin is watched by the event loop
instead, and a cancel ends the read at once.

As the SDK does, descriptor 0 points at the null device while serving (a handler or a
child process reading stdin gets EOF instead of the protocol's bytes) and the protocol
is read from a private duplicate; both, and the descriptor's blocking mode, are put
back on the way out. Where the loop cannot watch stdin (a regular file, the null
device: reads there never wait) ``loop_stdin`` yields None and the SDK's own transport
serves as it is; a stdin closed before the start is an input already at its end.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import selectors
import stat
import sys
from collections.abc import AsyncIterator

__all__ = ["MAX_LINE_BYTES", "loop_stdin"]

# The longest message line read (a StreamReader needs a bound; the SDK's has none).
MAX_LINE_BYTES = 1 << 28


@contextlib.asynccontextmanager
async def loop_stdin() -> AsyncIterator[AsyncIterator[str] | None]:
    """Lines of stdin (decoded as UTF-8, errors replaced, as the SDK decodes them), or
    None when the loop cannot watch it."""
    if sys.stdin is None:  # started with stdin closed: no client, so no lines at all
        yield _no_lines()
        return
    try:
        fd = sys.stdin.fileno()
        mode = os.fstat(fd).st_mode
    except (AttributeError, ValueError, OSError):
        yield None
        return
    if not (stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode) or stat.S_ISCHR(mode)):
        yield None
        return
    if not _watchable(fd):
        # The null device and some others: epoll refuses them (EPERM), and the loop
        # would only log it from a callback and never read. Their reads never wait.
        yield None
        return
    private = os.dup(fd)
    was_blocking = os.get_blocking(private)
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=MAX_LINE_BYTES)
    # A descriptor, not a path: nothing here blocks. The transport closes it.
    pipe = os.fdopen(os.dup(private), "rb", buffering=0)
    try:
        transport, _ = await loop.connect_read_pipe(
            lambda: asyncio.StreamReaderProtocol(reader), pipe
        )
    except (OSError, ValueError):  # a device epoll refuses (the null device)
        pipe.close()
        os.set_blocking(private, was_blocking)
        os.close(private)
        yield None
        return
    diverted = _divert(fd)
    try:
        yield _lines(reader)
    finally:
        transport.close()
        if diverted:
            os.dup2(private, fd)
        os.set_blocking(private, was_blocking)
        os.close(private)


def _watchable(fd: int) -> bool:
    """Whether the event loop's selector can watch ``fd`` for reading."""
    selector = selectors.DefaultSelector()
    try:
        selector.register(fd, selectors.EVENT_READ)
    except (OSError, ValueError):
        return False
    finally:
        selector.close()
    return True


async def _no_lines() -> AsyncIterator[str]:
    """An input that has ended before its first line."""
    nothing: tuple[str, ...] = ()
    for line in nothing:
        yield line


def _divert(fd: int) -> bool:
    """Point ``fd`` at the null device; whether it was."""
    try:
        null = os.open(os.devnull, os.O_RDONLY)
    except OSError:
        return False
    try:
        os.dup2(null, fd)
    except OSError:
        return False
    finally:
        os.close(null)
    return True


async def _lines(reader: asyncio.StreamReader) -> AsyncIterator[str]:
    while line := await reader.readline():
        yield line.decode("utf-8", errors="replace")
