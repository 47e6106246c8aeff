"""Binding rules and the bearer-token gate, without a network."""

from __future__ import annotations

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
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"secret data"})


@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"Authorization": "Bearer wrong-token-0123456789"},
        {"Authorization": f"Basic {TOKEN}"},
        {"Authorization": f"Bearer {TOKEN}x"},
        {"Authorization": TOKEN},
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


async def test_the_right_token_passes() -> None:
    app = _Recorder()
    gate = BearerTokenGate(app, TOKEN)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=gate), base_url="http://t") as c:
        response = await c.get("/mcp", headers={"Authorization": f"Bearer {TOKEN}"})
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
