"""Bounds on what one HTTP client can hold of a server: ``grk serve`` and ``grk inspect``.

uvicorn keeps a connection open for as long as its client keeps it, request head
unfinished included, and accepts connections until the process runs out of file
descriptors. Then every other client is refused, and the event loop logs each failed
accept. So a connection whose request head is not in within ``HEAD_TIMEOUT_S`` of
opening (or of its previous response) is closed, and connections past a cap (half the
process's descriptor limit) are closed as they arrive, logged once a minute; the listen
backlog, which is also how many connections asyncio accepts in one go, is a quarter of
the cap
(adr/0093-http-connection-bounds.md). This is a floor, not rate limiting: a server
facing many clients goes behind a proxy.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import asyncio

__all__ = ["HEAD_TIMEOUT_S", "accept_backlog", "connection_cap", "guarded_protocol"]

logger = logging.getLogger("groundkit.service")

HEAD_TIMEOUT_S = 20.0
# The cap when the descriptor limit cannot be read, and its ceiling when it can.
_CAP_DEFAULT = 512
_CAP_CEILING = 4096
_CAP_FLOOR = 8
_REFUSED_LOG_EVERY_S = 60.0


def connection_cap() -> int:
    """Half this process's soft descriptor limit (the rest for stores, models, logs)."""
    try:
        import resource

        soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    except (ImportError, OSError, ValueError):
        return _CAP_DEFAULT
    if soft == resource.RLIM_INFINITY or soft <= 0:
        return _CAP_CEILING
    return max(_CAP_FLOOR, min(_CAP_CEILING, soft // 2))


def accept_backlog(cap: int) -> int:
    """The listen backlog for ``cap``: asyncio accepts up to this many connections in
    one go, each a descriptor, before any can be closed at the cap."""
    return max(_CAP_FLOOR, min(2048, cap // 4))


def guarded_protocol(head_timeout_s: float, cap: int) -> type[asyncio.Protocol]:
    """uvicorn's h11 protocol with the head deadline and the connection cap."""
    from uvicorn.protocols.http.h11_impl import H11Protocol  # extra: serve

    refused = _RefusedLog(cap)

    class _Guarded(H11Protocol):
        _deadline: asyncio.TimerHandle | None = None
        # The request cycle the deadline waits to see replaced by a new one.
        _waiting_after: Any = None

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            if len(self.connections) > cap:
                refused.note()
                transport.abort()
                return
            self._arm()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            if not self.transport.is_closing():
                self._arm()

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            super().connection_lost(exc)

        def _arm(self) -> None:
            self._disarm()
            self._waiting_after = self.cycle
            self._deadline = self.loop.call_later(head_timeout_s, self._overdue)

        def _disarm(self) -> None:
            if self._deadline is not None:
                self._deadline.cancel()
                self._deadline = None

        def _overdue(self) -> None:
            self._deadline = None
            cycle = self.cycle
            # No new request head since the deadline was set, and none in progress
            # (a pipelined request may have started as the last response ended).
            idle = cycle is self._waiting_after and (cycle is None or cycle.response_complete)
            if idle and not self.transport.is_closing():
                self.transport.abort()

    return _Guarded


class _RefusedLog:
    """Connections refused at the cap, said once a minute rather than once each."""

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.count = 0
        self.said_at: float | None = None

    def note(self) -> None:
        self.count += 1
        now = time.monotonic()
        if self.said_at is None or now - self.said_at >= _REFUSED_LOG_EVERY_S:
            logger.warning(
                "%d connection(s) refused: %d are open, the most this server holds; "
                "put a proxy in front of it for many clients",
                self.count,
                self.cap,
            )
            self.count = 0
            self.said_at = now
