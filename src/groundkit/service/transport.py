"""Running the MCP server: stdio, or streamable HTTP behind an optional bearer token.

HTTP binds to 127.0.0.1 unless told otherwise. Any address that is not a
loopback address needs a token (adr/0015-serve-auth-and-telemetry.md): every
request must then carry ``Authorization: Bearer <token>`` or it gets 401 and
no data. Tokens are compared in constant time.
"""

from __future__ import annotations

import asyncio
import errno
import hmac
import ipaddress
import json
import logging
from collections.abc import Awaitable, Callable, MutableMapping
from typing import TYPE_CHECKING, Any, Literal

from groundkit.errors import ConfigurationError
from groundkit.service.http_guard import (
    HEAD_TIMEOUT_S,
    accept_backlog,
    connection_cap,
    guarded_protocol,
)

if TYPE_CHECKING:
    # Imported by run_server: grk builds its parser from this module's defaults.
    from groundkit.service.collections import CollectionRegistry

__all__ = [
    "DEFAULT_HOST",
    "DEFAULT_PORT",
    "MIN_TOKEN_CHARS",
    "TOKEN_ENV",
    "BearerTokenGate",
    "bearer_token",
    "check_binding",
    "is_loopback",
    "netloc",
    "run_server",
    "serve_asgi",
]

logger = logging.getLogger("groundkit.service")

Transport = Literal["stdio", "http"]
DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8000
TOKEN_ENV = "GROUNDKIT_SERVE_TOKEN"
MIN_TOKEN_CHARS = 16
MCP_PATH = "/mcp"
# How long a stopping HTTP server lets its requests in flight finish.
GRACEFUL_SHUTDOWN_S = 5

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


def is_loopback(host: str) -> bool:
    """Whether ``host`` only accepts connections from this machine."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_binding(transport: Transport, host: str, token: str | None) -> None:
    """Refuse settings that would expose the index: no token off loopback, a weak token."""
    if transport not in ("stdio", "http"):
        raise ConfigurationError(f"unknown transport {transport!r}; use 'stdio' or 'http'")
    if token is not None and len(token) < MIN_TOKEN_CHARS:
        raise ConfigurationError(f"the bearer token must be at least {MIN_TOKEN_CHARS} characters")
    if transport == "http" and not is_loopback(host) and token is None:
        raise ConfigurationError(
            f"serving HTTP on {host!r} exposes the index beyond this machine; "
            f"set a bearer token (--token or {TOKEN_ENV})"
        )


# What a caller without the token is told, in the 401 and on the OAuth discovery paths.
TOKEN_REQUIRED = (
    "this server requires a static bearer token: send 'Authorization: Bearer <token>' with "
    f"the token grk serve was started with (--token or {TOKEN_ENV}); it offers no OAuth, "
    "so there is nothing to discover or log in to"
)


class BearerTokenGate:
    """ASGI middleware: without ``Authorization: Bearer <token>``, 401 and nothing else.

    The 401 says that a static token is required, in its body and its
    ``WWW-Authenticate`` error description. MCP clients answer a 401 by looking for
    OAuth metadata under ``/.well-known/``; those paths get 404 with the same
    explanation, so a client reports that no OAuth is offered instead of attempting
    a login that cannot exist.
    """

    def __init__(self, app: ASGIApp, token: str) -> None:
        self._app = app
        self._expected = token.encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] in ("http", "websocket") and not self._authorised(scope):
            discovery = str(scope.get("path", "")).startswith("/.well-known/")
            body = json.dumps(
                {
                    "error": "not_found" if discovery else "invalid_token",
                    "error_description": TOKEN_REQUIRED,
                }
            ).encode()
            headers = [(b"content-type", b"application/json")]
            if not discovery:
                challenge = (
                    'Bearer realm="groundkit", error="invalid_token", '
                    f'error_description="{TOKEN_REQUIRED}"'
                )
                headers.append((b"www-authenticate", challenge.encode()))
            await send(
                {
                    "type": "http.response.start",
                    "status": 404 if discovery else 401,
                    "headers": headers,
                }
            )
            await send({"type": "http.response.body", "body": body})
            return
        await self._app(scope, receive, send)

    def _authorised(self, scope: Scope) -> bool:
        supplied = b""
        for key, value in scope.get("headers", ()):
            if key.lower() == b"authorization":
                supplied = bytes(value)
                break
        return hmac.compare_digest(bearer_token(supplied), self._expected)


def bearer_token(header: bytes) -> bytes:
    """The token of an ``Authorization`` value of the Bearer scheme, named in any case
    (RFC 9110 11.1); ``b""`` for any other value."""
    scheme, _, rest = header.partition(b" ")
    return rest.lstrip(b" ") if scheme.lower() == b"bearer" else b""


async def _run_stdio(server: Any) -> None:
    """Serve over stdio, stdin read through the event loop (``stdio_input``): a stop
    must not wait for the client's next line."""
    from mcp.server.stdio import stdio_server

    from groundkit.service.stdio_input import loop_stdin

    # The SDK runs a stdio server only on its own stdin reader; the low-level server
    # it wraps takes any pair of streams. Without one (another SDK layout), the SDK's
    # own transport serves.
    lowlevel = getattr(server, "_lowlevel_server", None)
    try:
        async with loop_stdin() as lines:
            if lines is None or lowlevel is None:
                await server.run_stdio_async()
                return
            # stdio_server reads its stdin only with ``async for``, as ``lines`` provides.
            async with stdio_server(stdin=lines) as (read_stream, write_stream):  # type: ignore[arg-type]
                await lowlevel.run(
                    read_stream, write_stream, lowlevel.create_initialization_options()
                )
    except BaseExceptionGroup as group:
        # A client that stops reading our stdout fails the SDK's writer task, and its
        # task group reports that wrapped: say it as the closed pipe it is.
        pipes, _ = group.split(BrokenPipeError)
        if pipes is None:
            raise
        raise _first_leaf(pipes) from None


def _first_leaf(group: BaseExceptionGroup[BaseException]) -> BaseException:
    """The first exception in ``group`` that is not itself a group."""
    first = group.exceptions[0]
    return _first_leaf(first) if isinstance(first, BaseExceptionGroup) else first


async def run_server(
    registry: CollectionRegistry,
    *,
    transport: Transport = "stdio",
    host: str = DEFAULT_HOST,
    port: int = DEFAULT_PORT,
    token: str | None = None,
    ready: Callable[[str], None] | None = None,
) -> None:
    """Serve ``registry`` until the transport closes (stdio) or the process is stopped.

    ``ready`` is called with a description of the endpoint once it accepts
    requests. The registry is left open; the caller closes it.
    """
    from groundkit.service.server import SERVE_EXTRA_HINT, build_server

    check_binding(transport, host, token)
    server = build_server(registry)
    if transport == "stdio":
        if ready is not None:
            ready("stdio")
        await _run_stdio(server)
        return
    try:
        import uvicorn  # noqa: F401  # serve_asgi runs it
        from mcp.server.transport_security import TransportSecuritySettings
    except ImportError as exc:
        raise ConfigurationError(SERVE_EXTRA_HINT) from exc
    security = None
    if is_loopback(host):
        # Refuse Host/Origin headers naming other sites (DNS rebinding), for every
        # loopback spelling, not only the three the SDK knows.
        names = sorted({_bracketed(host), "127.0.0.1", "localhost", "[::1]"})
        security = TransportSecuritySettings(
            enable_dns_rebinding_protection=True,
            allowed_hosts=[f"{n}:*" for n in names],
            allowed_origins=[f"http://{n}:*" for n in names],
        )
    app: ASGIApp = server.streamable_http_app(
        streamable_http_path=MCP_PATH, host=host, transport_security=security
    )
    if token is not None:
        app = BearerTokenGate(app, token)
    url = f"http://{netloc(host, port)}{MCP_PATH}"

    def started(_: Any) -> None:
        logger.info("serving MCP at %s", url)
        if ready is not None:
            ready(url)

    await serve_asgi(app, host, port, lifespan="on", started=started)


async def serve_asgi(
    app: ASGIApp,
    host: str,
    port: int,
    *,
    lifespan: Literal["on", "off"],
    started: Callable[[Any], None],
    head_timeout_s: float = HEAD_TIMEOUT_S,
    max_connections: int | None = None,
) -> None:
    """Run ``app`` on uvicorn (the caller has checked it is installed) until the process
    is stopped; ``started`` gets the uvicorn server once it listens.

    Handlers belong to the application (grk configures them): none from uvicorn, and no
    access log, whose request lines could carry query strings (a token among them).
    A connection whose request head is not in within ``head_timeout_s`` is closed, and
    at most ``max_connections`` (default ``connection_cap()``) are held at once
    (``groundkit.service.http_guard``). ``ConfigurationError`` when the address cannot
    be bound.
    """
    import uvicorn

    cap = connection_cap() if max_connections is None else max_connections
    config = uvicorn.Config(
        app,
        host=host,
        port=port,
        log_config=None,
        access_log=False,
        lifespan=lifespan,
        http=guarded_protocol(head_timeout_s, cap),
        # Also how many connections one accept takes in at once (asyncio): kept well
        # inside the descriptors the cap leaves free.
        backlog=accept_backlog(cap),
        # A stop (Ctrl-C, SIGTERM) lets requests in flight finish for this long, then
        # cancels them: uvicorn would otherwise wait for ever on a client that sent a
        # request's head and never its whole body.
        timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_S,
    )

    class _Announcing(uvicorn.Server):
        async def startup(self, sockets: Any = None) -> None:
            await super().startup(sockets=sockets)
            if self.started:
                started(self)

    bind = _BindFailure()
    uvicorn_log = logging.getLogger("uvicorn.error")
    uvicorn_log.addFilter(bind)
    # Kept once the server has stopped: a request it cut off ends (and is logged) after.
    uvicorn_log.addFilter(_CUT_OFF)
    try:
        await _Announcing(config).serve()
    except SystemExit:  # uvicorn exits when it cannot bind
        raise ConfigurationError(
            f"cannot listen on {netloc(host, port)}: {_bind_reason(bind.error)}"
        ) from bind.error
    finally:
        uvicorn_log.removeFilter(bind)


class _BindFailure(logging.Filter):
    """Takes uvicorn's record of a failed bind (the socket error, as the OS words it)
    out of the log and keeps the error: grk says it once, in its own words."""

    def __init__(self) -> None:
        super().__init__()
        self.error: OSError | None = None

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.msg, OSError):
            self.error = record.msg
            logger.debug("uvicorn could not bind: %s", record.msg)
            return False
        return True


class _CutOffRequests(logging.Filter):
    """Words a stop that had to cut requests off as one warning: uvicorn logs it as an
    error, then each cancelled request as an application failure with its traceback,
    though nothing failed but a client too slow to finish before the stop."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.exc_info and isinstance(record.exc_info[1], asyncio.CancelledError):
            return False
        if "timeout graceful shutdown exceeded" in str(record.msg):
            count = record.args[0] if isinstance(record.args, tuple) and record.args else "some"
            logger.warning(
                "stopped: %s request(s) still unfinished after %d s were cut off",
                count,
                GRACEFUL_SHUTDOWN_S,
            )
            return False
        return True


_CUT_OFF = _CutOffRequests()


def _bind_reason(error: OSError | None) -> str:
    """Why a bind failed, by its errno."""
    code = error.errno if error is not None else None
    if code == errno.EADDRINUSE:
        return "the port is in use; stop what listens there or pick another port"
    if code == errno.EADDRNOTAVAIL:
        return "the address is not one of this host's; check the host"
    if code == errno.EACCES:
        return "permission denied (ports below 1024 need privileges); pick another port"
    return "the address is in use or not available"


def _bracketed(host: str) -> str:
    """``host`` as it appears in a URL or Host header (IPv6 in brackets)."""
    bare = host.strip("[]")
    return f"[{bare}]" if ":" in bare else bare


def netloc(host: str, port: int) -> str:
    """``host:port`` as a URL writes it (IPv6 in brackets)."""
    return f"{_bracketed(host)}:{port}"
