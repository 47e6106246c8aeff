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
import re
from http.cookies import SimpleCookie
from urllib.parse import parse_qsl, quote, unquote_plus

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


# A Host value (RFC 9110 7.2): a bracketed IPv6 literal, or a name or IPv4 address,
# then an optional ":port" of digits, and nothing else.
_HOST = re.compile(r"(\[[0-9a-f:.]+\]|[a-z0-9.-]+)(?::[0-9]{0,5})?")
# An Origin a browser sends for a page (RFC 6454 7): scheme://host[:port], nothing more.
_ORIGIN = re.compile(r"https?://(\[[0-9a-f:.]+\]|[a-z0-9.-]+)(?::[0-9]{1,5})?")


def _values(scope: Scope, name: bytes) -> list[str]:
    return [
        bytes(value).decode("latin-1").strip().lower()
        for key, value in scope.get("headers", ())
        if key.lower() == name
    ]


def _names_loopback(scope: Scope) -> bool:
    """Whether the Host header names this machine (any port), or is absent. Parsed
    strictly: ``[::1]evil.com`` or two Host headers must not pass for loopback."""
    hosts = _values(scope, b"host")
    if not hosts:
        return True
    found = _HOST.fullmatch(hosts[0])
    return len(hosts) == 1 and found is not None and is_loopback(found.group(1))


def _origin_is_loopback(scope: Scope) -> bool:
    """Whether the Origin header, when there is one, is a page on this machine: another
    site's page (or an opaque "null" origin, or a second Origin) gets nothing from a
    loopback inspector."""
    origins = _values(scope, b"origin")
    if not origins:
        return True
    found = _ORIGIN.fullmatch(origins[0])
    return len(origins) == 1 and found is not None and is_loopback(found.group(1))


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
    location = _without_token(scope)
    cookie = b"%s=%s; HttpOnly; SameSite=Strict; Path=/" % (COOKIE.encode(), session)
    await send(
        {
            "type": "http.response.start",
            "status": 303,
            "headers": [
                (b"location", location),
                (b"set-cookie", cookie),
                (b"cache-control", b"no-store"),
                (b"content-length", b"0"),
            ],
        }
    )
    await send({"type": "http.response.body", "body": b""})


def _without_token(scope: Scope) -> bytes:
    """The request's own path and query, as the browser sent them (percent-escapes
    kept: ``a%2Fb`` is not ``a/b``), less every ``token`` parameter. Never another
    site: one leading slash, and a backslash, a control or a non-ASCII byte is escaped
    (a browser reads ``/\\evil.example`` as ``//evil.example``; CR LF would end the
    header)."""
    raw = scope.get("raw_path")
    path = bytes(raw) if raw else quote(str(scope.get("path", "/"))).encode("ascii")
    path = b"/" + _escaped(path.split(b"?", 1)[0]).lstrip(b"/")
    kept = [
        part
        for part in bytes(scope.get("query_string", b"")).split(b"&")
        if part and unquote_plus(part.split(b"=", 1)[0].decode("latin-1")) != "token"
    ]
    return path + (b"?" + _escaped(b"&".join(kept)) if kept else b"")


def _escaped(raw: bytes) -> bytes:
    """``raw`` with every byte a Location must not carry as is percent-escaped."""
    return b"".join(
        bytes([b]) if 0x21 <= b <= 0x7E and b not in b"\\#" else b"%%%02X" % b for b in raw
    )


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
