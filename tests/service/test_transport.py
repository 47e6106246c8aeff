"""Binding rules and the bearer-token gate, without a network."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from groundkit import ConfigurationError
from groundkit.service.transport import (
    BearerTokenGate,
    Receive,
    Scope,
    Send,
    check_binding,
    is_loopback,
)

TOKEN = "s3cret-token-0123456789"


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("127.0.0.1", True),
        ("127.0.0.2", True),
        ("localhost", True),
        ("::1", True),
        ("[::1]", True),
        ("0.0.0.0", False),
        ("::", False),
        ("192.168.1.10", False),
        ("example.com", False),
    ],
)
def test_loopback_detection(host: str, loopback: bool) -> None:
    assert is_loopback(host) is loopback


def test_binding_rules() -> None:
    check_binding("stdio", "0.0.0.0", None)  # stdio binds nothing
    check_binding("http", "127.0.0.1", None)
    check_binding("http", "0.0.0.0", TOKEN)
    with pytest.raises(ConfigurationError, match="GROUNDKIT_SERVE_TOKEN"):
        check_binding("http", "0.0.0.0", None)
    with pytest.raises(ConfigurationError, match="at least 16"):
        check_binding("http", "127.0.0.1", "short")
    with pytest.raises(ConfigurationError, match="unknown transport"):
        check_binding("sse", "127.0.0.1", None)  # type: ignore[arg-type]


class _Recorder:
    def __init__(self) -> None:
        self.calls = 0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        self.calls += 1
        headers = [(b"content-length", b"2")]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": b"secret data"})


@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"Authorization": "Bearer wrong-token-0123456789"},
        {"Authorization": f"Basic {TOKEN}"},
        {"Authorization": f"Bearer {TOKEN}x"},
        {"Authorization": TOKEN},
        {"Authorization": f"Bearer{TOKEN}"},
        {"Authorization": "Bearer "},
    ],
)
async def test_requests_without_the_token_get_401_and_nothing_else(headers: Any) -> None:
    app = _Recorder()
    gate = BearerTokenGate(app, TOKEN)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=gate), base_url="http://t") as c:
        response = await c.post("/mcp", json={"jsonrpc": "2.0"}, headers=headers)
    assert response.status_code == 401
    assert response.headers["www-authenticate"].startswith("Bearer")
    assert b"secret" not in response.content
    assert app.calls == 0


@pytest.mark.parametrize("scheme", ["Bearer", "bearer", "BEARER"])
async def test_the_right_token_passes(scheme: str) -> None:
    # The scheme is matched in any case (RFC 9110), the token exactly.
    app = _Recorder()
    gate = BearerTokenGate(app, TOKEN)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=gate), base_url="http://t") as c:
        response = await c.get("/mcp", headers={"Authorization": f"{scheme} {TOKEN}"})
    assert response.status_code == 200 and response.content == b"secret data"
    assert app.calls == 1


async def test_a_port_in_use_is_one_error_in_groundkits_words(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    import errno
    import logging
    import socket

    from groundkit.service.transport import serve_asgi

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        raise AssertionError("never served")

    caplog.set_level(logging.DEBUG)
    # grk's tests leave groundkit's logger to grk's handler and level; here caplog sees it.
    caplog.set_level(logging.DEBUG, logger="groundkit")
    monkeypatch.setattr(logging.getLogger("groundkit"), "propagate", True)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(ConfigurationError) as caught:
            await serve_asgi(app, "127.0.0.1", port, lifespan="off", started=lambda _: None)
    assert str(caught.value) == (
        f"cannot listen on 127.0.0.1:{port}: the port is in use; stop what listens there "
        "or pick another port"
    )
    assert isinstance(caught.value.__cause__, OSError)
    assert caught.value.__cause__.errno == errno.EADDRINUSE
    # uvicorn's own line about it is a debug record of groundkit's, not an error of its own.
    said = [r for r in caplog.records if r.name.startswith("uvicorn")]
    assert [r.getMessage() for r in said if r.levelno >= logging.WARNING] == []
    assert any("could not bind" in r.getMessage() for r in caplog.records)


async def _serving(
    head_timeout_s: float, max_connections: int
) -> tuple[Any, int, asyncio.Task[None]]:
    """A tiny app on ``serve_asgi`` with the given bounds: (server, port, task)."""
    from groundkit.service.transport import serve_asgi

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        headers = [(b"content-length", b"2")]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": b"ok"})

    up: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
    task = asyncio.create_task(
        serve_asgi(
            app,
            "127.0.0.1",
            0,
            lifespan="off",
            started=up.set_result,
            head_timeout_s=head_timeout_s,
            max_connections=max_connections,
        )
    )
    server = await up
    port = server.servers[0].sockets[0].getsockname()[1]
    return server, port, task


async def _until(condition: Callable[[], bool]) -> None:
    """Poll the server's own state (it offers no event); the test timeout ends a hang."""
    for _ in itertools.count():
        if condition():
            return
        await asyncio.sleep(0.01)


async def _closed_by_server(reader: asyncio.StreamReader) -> bool:
    return await reader.read(1) == b""


async def test_a_request_head_never_finished_is_closed_and_others_are_served() -> None:
    server, port, task = await _serving(head_timeout_s=0.5, max_connections=64)
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")  # never finished
        await writer.drain()
        async with httpx.AsyncClient() as client:
            assert (await client.get(f"http://127.0.0.1:{port}/")).text == "ok"
        assert await _closed_by_server(reader)  # the per-test timeout fails a hang
        writer.close()
        # A kept-alive connection whose next head does not come is closed as well.
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        await writer.drain()
        assert b"200 OK" in await reader.readuntil(b"ok")
        writer.write(b"GET / HTTP/1.1\r\nHost: 127")
        await writer.drain()
        assert await _closed_by_server(reader)
        writer.close()
    finally:
        server.should_exit = True
        await task


async def test_connections_past_the_cap_are_closed_on_arrival() -> None:
    server, port, task = await _serving(head_timeout_s=60.0, max_connections=3)
    held = []
    try:
        for _ in range(3):
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(b"GET / HTTP/1.1\r\n")
            await writer.drain()
            held.append((reader, writer))
        await _until(lambda: len(server.server_state.connections) == 3)
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        assert await _closed_by_server(reader)
        writer.close()
        for _, writer in held:
            writer.close()
        await _until(lambda: not server.server_state.connections)
        async with httpx.AsyncClient() as client:
            assert (await client.get(f"http://127.0.0.1:{port}/")).text == "ok"
    finally:
        server.should_exit = True
        await task


def test_the_cap_leaves_descriptors_free() -> None:
    import resource

    from groundkit.service.http_guard import accept_backlog, connection_cap

    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    cap = connection_cap()
    if soft != resource.RLIM_INFINITY:
        assert cap + accept_backlog(cap) < soft
    assert 8 <= accept_backlog(cap) <= cap
