"""Who may open the inspector, and what every response tells the browser.

The rules are ``grk serve``'s (adr/0015-serve-auth-and-telemetry.md): loopback by
default; any other address needs a token. A browser cannot be made to send an
``Authorization`` header, so the token is presented once, as ``?token=`` on the
address ``grk inspect`` prints; the gate answers with a redirect to the same address
without it and an HttpOnly, SameSite=Strict cookie that stands for it from then on
(adr/0074-citation-inspector.md). The cookie holds a keyed hash of the token, not the
token. A client may send ``Authorization: Bearer <token>`` instead. Every comparison
is in constant time.

On loopback a request naming another host (a DNS-rebinding page) or coming from
another site's page (its Origin) is refused. Every
response carries a Content-Security-Policy that lets the page load nothing from
anywhere but the inspector and run no script.
"""

from __future__ import annotations

import hashlib
import hmac
from http.cookies import SimpleCookie
from urllib.parse import parse_qsl, quote, urlencode, urlsplit

from groundkit.service.transport import (
    ASGIApp,
    Message,
    Receive,
    Scope,
    Send,
    bearer_token,
    is_loopback,
)

__all__ = ["COOKIE", "SECURITY_HEADERS", "InspectorGate", "session_value"]

COOKIE = "grk_inspect"
SECURITY_HEADERS: tuple[tuple[bytes, bytes], ...] = (
    (
        b"content-security-policy",
        b"default-src 'self'; script-src 'none'; object-src 'none'; base-uri 'none'; "
        b"form-action 'self'; frame-ancestors 'none'",
    ),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"same-origin"),
    (b"x-frame-options", b"DENY"),
    (b"cross-origin-resource-policy", b"same-origin"),
)


def session_value(token: str) -> str:
    """What the cookie holds for ``token``: a keyed hash, so a cookie store never holds
    the token itself, and a new token invalidates every cookie."""
    return hmac.new(token.encode(), b"groundkit inspector session", hashlib.sha256).hexdigest()


class InspectorGate:
    """ASGI middleware: the token check, the host check, the security headers."""

    def __init__(self, app: ASGIApp, *, token: str | None, host: str) -> None:
        self._app = app
        self._bearer = token.encode() if token is not None else None
        self._token = token.encode() if token is not None else None
        self._session = session_value(token).encode() if token is not None else None
        self._loopback = is_loopback(host)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            if scope["type"] == "lifespan":
                await self._app(scope, receive, send)
            return

        async def secured(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = [*message.get("headers", ()), *SECURITY_HEADERS]
                message = {**message, "headers": headers}
            await send(message)

        if self._loopback and not (_names_loopback(scope) and _origin_is_loopback(scope)):
            await _plain(secured, 403, "this inspector answers on its loopback address only")
            return
        if self._token is not None:
            presented = _query_token(scope)
            if presented is not None:
                if hmac.compare_digest(presented.encode(), self._token):
                    await _enter(secured, scope, self._session or b"")
                else:
                    await _plain(secured, 401, "wrong token")
                return
            if not self._authorised(scope):
                await _plain(
                    secured,
                    401,
                    "this inspector needs its token: open the address grk inspect printed "
                    "(it ends in ?token=...), or send 'Authorization: Bearer <token>'",
                )
                return
        await self._app(scope, receive, secured)

    def _authorised(self, scope: Scope) -> bool:
        header, cookie = b"", b""
        for key, value in scope.get("headers", ()):
            name = key.lower()
            if name == b"authorization":
                header = bytes(value)
            elif name == b"cookie":
                cookie = _cookie(bytes(value))
        by_header = self._bearer is not None and hmac.compare_digest(
            bearer_token(header), self._bearer
        )
        by_cookie = hmac.compare_digest(cookie, self._session or b"")
        return by_header or by_cookie


def _names_loopback(scope: Scope) -> bool:
    """Whether the Host header names this machine (any port), or is absent."""
    for key, value in scope.get("headers", ()):
        if key.lower() == b"host":
            host = bytes(value).decode("latin-1").strip().lower()
            if host.startswith("["):
                name = host[: host.find("]") + 1] if "]" in host else host
            else:
                name = host.split(":", 1)[0]
            return is_loopback(name)
    return True


def _origin_is_loopback(scope: Scope) -> bool:
    """Whether the Origin header, when there is one, is a page on this machine: another
    site's page (or an opaque "null" origin) gets nothing from a loopback inspector."""
    for key, value in scope.get("headers", ()):
        if key.lower() == b"origin":
            host = urlsplit(bytes(value).decode("latin-1").strip()).hostname
            return host is not None and is_loopback(host)
    return True


def _query_token(scope: Scope) -> str | None:
    query = bytes(scope.get("query_string", b"")).decode("latin-1")
    for key, value in parse_qsl(query, keep_blank_values=True):
        if key == "token":
            return value
    return None


def _cookie(header: bytes) -> bytes:
    jar: SimpleCookie = SimpleCookie()
    try:
        jar.load(header.decode("latin-1"))
    except Exception:  # a malformed Cookie header is no session
        return b""
    morsel = jar.get(COOKIE)
    return morsel.value.encode() if morsel is not None else b""


async def _enter(send: Send, scope: Scope, session: bytes) -> None:
    """The redirect that trades ``?token=`` for the session cookie: the token leaves the
    address bar, the history and any later Referer."""
    query = bytes(scope.get("query_string", b"")).decode("latin-1")
    rest = urlencode([(k, v) for k, v in parse_qsl(query, keep_blank_values=True) if k != "token"])
    # One leading slash: "//host/..." would send the browser to another site.
    path = "/" + str(scope.get("path", "/")).lstrip("/")
    location = quote(path) + (f"?{rest}" if rest else "")
    cookie = b"%s=%s; HttpOnly; SameSite=Strict; Path=/" % (COOKIE.encode(), session)
    await send(
        {
            "type": "http.response.start",
            "status": 303,
            "headers": [
                (b"location", location.encode()),
                (b"set-cookie", cookie),
                (b"cache-control", b"no-store"),
                (b"content-length", b"0"),
            ],
        }
    )
    await send({"type": "http.response.body", "body": b""})


async def _plain(send: Send, status: int, text: str) -> None:
    body = (text + "\n").encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"text/plain; charset=utf-8"),
                (b"content-length", str(len(body)).encode()),
                (b"cache-control", b"no-store"),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})
