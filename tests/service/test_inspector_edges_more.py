"""Edges of the citation inspector's gate and routes (SPEC 15.3): HEAD as GET, a Host or
Origin that only looks like loopback, the ``?token=`` redirect keeping the path and query
as sent without ever leaving the site, and page images not kept by the browser."""

from __future__ import annotations

from collections.abc import AsyncIterator
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import httpx
import pytest

pytest.importorskip("starlette")
pytest.importorskip("pypdfium2")

from groundkit.service.collections import CollectionRegistry
from groundkit.service.inspector.access import InspectorGate
from groundkit.service.inspector.app import build_app
from groundkit.service.transport import ASGIApp, Message
from tests.service.inspector_support import TOKEN, build_index


@pytest.fixture
async def registry(tmp_path: Path) -> AsyncIterator[CollectionRegistry]:
    reg = CollectionRegistry(await build_index(tmp_path))
    yield reg
    await reg.close()


def _client(app: ASGIApp, **options: Any) -> httpx.AsyncClient:
    return httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1:8765", **options
    )


def _gate(registry: CollectionRegistry, token: str | None = None) -> ASGIApp:
    return InspectorGate(build_app(registry), token=token, host="127.0.0.1")


class _Links(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.found: list[tuple[str, dict[str, str | None]]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.found.append((tag, dict(attrs)))


def _tags(body: str) -> list[tuple[str, dict[str, str | None]]]:
    parser = _Links()
    parser.feed(body)
    return parser.found


async def test_head_answer_is_get_without_a_body(registry: CollectionRegistry) -> None:
    async with _client(_gate(registry)) as http:
        got = await http.get("/c/default/answer", params={"ids": "x"})
        head = await http.head("/c/default/answer", params={"ids": "x"})
    assert got.status_code == 200
    assert head.status_code == 200 and head.content == b""
    assert head.headers["content-type"] == got.headers["content-type"]


@pytest.mark.parametrize(
    "host",
    [
        "[::1]evil.com",
        "[::1]:80.evil.com",
        "[::1",
        "localhost:80x",
        "localhost.evil.com",
        "127.0.0.1:8765@evil.com",
        "127.0.0.1 evil.com",
        b"127.0.0.1:\xb2",  # a digit to str.isdigit(), not to RFC 9110
        "::1",
    ],
)
async def test_a_host_that_only_starts_like_loopback_is_refused(
    registry: CollectionRegistry, host: str | bytes
) -> None:
    raw = host if isinstance(host, bytes) else host.encode()
    async with _client(_gate(registry)) as http:
        answered = await http.get("/c/default/", params={"q": "tea"}, headers={b"host": raw})
    assert answered.status_code == 403, host
    assert "tea" not in answered.text


@pytest.mark.parametrize(
    "host", ["[::1]", "[::1]:8765", "localhost", "LOCALHOST:1", "127.0.0.1:8765", "127.9.9.9"]
)
async def test_loopback_hosts_are_served(registry: CollectionRegistry, host: str) -> None:
    async with _client(_gate(registry)) as http:
        assert (await http.get("/", headers={"host": host})).status_code == 303, host


async def test_two_hosts_or_two_origins_are_refused(registry: CollectionRegistry) -> None:
    home = "http://127.0.0.1:8765"
    async with _client(_gate(registry)) as http:
        for headers in (
            [("origin", home), ("origin", "http://evil.example")],
            [("origin", "http://evil.example"), ("origin", home)],
            [("origin", home), ("origin", home)],
            [("origin", "http://127.0.0.1:8765/../evil")],
            [("origin", "http://127.0.0.1.evil.example")],
        ):
            sent = await http.post(
                "/c/default/answer", data={"answer": "x", "ids": "y"}, headers=headers
            )
            assert sent.status_code == 403, headers
        one = await http.post(
            "/c/default/answer", data={"answer": "x", "ids": ""}, headers={"origin": home}
        )
        assert one.status_code == 400  # through the gate: the form's own complaint
    # Two Host headers: httpx sends one, so the gate is called as a server would.
    started = await _call(
        _gate(registry), b"/", b"", [(b"host", b"127.0.0.1"), (b"host", b"evil.example")]
    )
    assert started["status"] == 403


@pytest.mark.parametrize(
    ("url", "location"),
    [
        (f"/c/default/chunk/a%2Fb?token={TOKEN}", "/c/default/chunk/a%2Fb"),
        (f"/c/default/?q=%FF&token={TOKEN}", "/c/default/?q=%FF"),
        (
            f"/c/default/?a=1&token={TOKEN}&b=%2B+x&q=caf%C3%A9",
            "/c/default/?a=1&b=%2B+x&q=caf%C3%A9",
        ),
        (f"/c/default/?token={TOKEN}&mode=bm25&token={TOKEN}", "/c/default/?mode=bm25"),
        (f"/?token={TOKEN}", "/"),
    ],
)
async def test_token_redirect_keeps_the_path_and_query_as_sent(
    registry: CollectionRegistry, url: str, location: str
) -> None:
    async with _client(_gate(registry, TOKEN), follow_redirects=False) as http:
        entered = await http.get(url)
    assert entered.status_code == 303
    assert entered.headers["location"] == location


async def _call(
    app: ASGIApp, raw_path: bytes, query: bytes, headers: list[tuple[bytes, bytes]]
) -> dict[str, Any]:
    """The response start ``app`` sends for a request built by hand (bytes no HTTP
    client would send), as a server passes them on."""
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "GET",
        "scheme": "http",
        "path": raw_path.decode("latin-1"),
        "raw_path": raw_path,
        "query_string": query,
        "headers": headers,
        "server": ("127.0.0.1", 8765),
        "client": ("127.0.0.1", 50000),
        "root_path": "",
    }
    sent: list[Message] = []

    async def receive() -> Message:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: Message) -> None:
        sent.append(message)

    await app(scope, receive, send)
    return dict(sent[0])


@pytest.mark.parametrize(
    "raw_path",
    [
        b"//evil.example/x",
        b"///evil.example",
        b"/\\evil.example",
        b"\\\\evil.example",
        b"/\\/evil.example",
        b"/x\r\nset-cookie: a=b",
        b"/caf\xc3\xa9 x",
        b"/a#b",
    ],
)
async def test_token_redirect_never_leaves_the_site(
    registry: CollectionRegistry, raw_path: bytes
) -> None:
    started = await _call(
        _gate(registry, TOKEN),
        raw_path,
        b"q=\r\nx&token=" + TOKEN.encode() + b"&r=\\",
        [(b"host", b"127.0.0.1:8765")],
    )
    assert started["status"] == 303
    location = dict(started["headers"])[b"location"]
    assert location.startswith(b"/") and not location.startswith(b"//"), location
    assert all(0x21 <= b <= 0x7E for b in location) and b"\\" not in location, location
    assert b"#" not in location and TOKEN.encode() not in location, location


async def test_a_pdf_page_image_is_not_kept(registry: CollectionRegistry) -> None:
    async with _client(_gate(registry)) as http:
        found = await http.get("/c/default/", params={"q": "photovoltaic sunlight"})
        links = [
            a["href"] for t, a in _tags(found.text) if t == "a" and a.get("class") == "result-link"
        ]
        assert links, found.text
        shown = await http.get(str(links[0]))
        images = [a["src"] for t, a in _tags(shown.text) if t == "img"]
        assert images, shown.text
        png = await http.get(str(images[0]))
    assert png.status_code == 200 and png.headers["content-type"] == "image/png"
    # The image shows the page's text: corpus text, kept nowhere (SPEC 15.3).
    assert png.headers["cache-control"] == "no-store"


async def test_a_client_that_leaves_mid_form_is_no_failure(
    registry: CollectionRegistry, caplog: pytest.LogCaptureFixture
) -> None:
    """A tab closed while its answer form was being sent: no error logged (with a
    traceback), and nothing to answer."""
    app = build_app(registry)
    sent: list[Message] = []
    parts: list[Message] = [
        {"type": "http.request", "body": b"answer=", "more_body": True},
        {"type": "http.disconnect"},
    ]

    async def receive() -> Message:
        return parts.pop(0) if parts else {"type": "http.disconnect"}

    async def send(message: Message) -> None:
        sent.append(message)

    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": "/c/default/answer",
        "raw_path": b"/c/default/answer",
        "query_string": b"",
        "root_path": "",
        "headers": [
            (b"host", b"127.0.0.1:8765"),
            (b"content-type", b"application/x-www-form-urlencoded"),
            (b"content-length", b"100"),
        ],
        "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", 8765),
    }
    with caplog.at_level("DEBUG", logger="groundkit.service"):
        await app(scope, receive, send)
    assert not [r for r in caplog.records if r.levelname in ("ERROR", "WARNING")]
    assert sent[0]["status"] == 499
