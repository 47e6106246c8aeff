"""Posting JSON to a server groundkit does not control and reading its whole answer, bounded.

httpx's timeout bounds each read, not the answer: a server sending a byte every
few seconds never trips it. httpx also undoes any content coding it knows in
one step per chunk, stacked layers and zstd included, so a small compressed body
can inflate to gigabytes before anyone counts it. Here one deadline covers the
request and the last byte of the answer, the answer is counted as it is decoded
and cut past a cap, and only one layer of gzip or deflate (about 1,000:1 per
chunk at most) is accepted. The HTTP embedders and the chat judge post through
this.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from typing import Any, Final

import httpx

from groundkit.errors import ConfigurationError

__all__ = [
    "ACCEPT_ENCODING",
    "POST_FAILURES",
    "Answer",
    "UnreadableAnswer",
    "credentials",
    "json_body",
    "port_problem",
    "post_json",
    "token_problem",
]

# What a request offers: exactly the codings accepted below.
ACCEPT_ENCODING: Final = "gzip, deflate"
# httpx decodes these; a name it does not know (x-gzip too) it passes on undecoded.
_CODINGS: Final = frozenset({"gzip", "deflate"})


# What a post can raise besides httpx's own errors: the socket layer's (an address it
# cannot use, a port out of range, which anyio's connect raises inside an ExceptionGroup).
POST_FAILURES: Final = (OSError, OverflowError, ExceptionGroup)


def port_problem(url: httpx.URL) -> str | None:
    """Why ``url``'s port cannot be connected to, or None: httpx takes any number, and
    a port over 65535 failed only when posting, deep inside the socket layer."""
    port = url.port
    if port is None or 0 < port <= 65535:
        return None
    return f"base_url has port {port}; a port is 1 to 65535"


class UnreadableAnswer(Exception):
    """An answer not read: larger than the cap, or in a coding not accepted."""


@dataclass(frozen=True)
class Answer:
    status: int
    headers: httpx.Headers
    body: bytes


async def post_json(
    client: httpx.AsyncClient,
    url: httpx.URL | str,
    payload: Any,
    *,
    headers: dict[str, str],
    auth: httpx.Auth,
    deadline: float,
    limit: int,
) -> Answer:
    """POST ``payload`` and read the answer whole within ``deadline`` seconds and ``limit`` bytes.

    ``TimeoutError`` past the deadline; ``UnreadableAnswer`` (its message says
    why) for an answer over ``limit`` bytes decoded or in another coding; httpx's
    own errors otherwise.
    """
    async with (
        asyncio.timeout(deadline),
        client.stream(
            "POST",
            url,
            json=payload,
            headers={**headers, "Accept-Encoding": ACCEPT_ENCODING},
            auth=auth,
        ) as response,
    ):
        codings = [
            coding.strip().lower()
            for value in response.headers.get_list("content-encoding")
            for coding in value.split(",")
            if coding.strip().lower() not in ("", "identity")
        ]
        if len(codings) > 1 or not set(codings) <= _CODINGS:
            raise UnreadableAnswer(
                f"a body in content coding {', '.join(codings)!r} (one layer of gzip or "
                "deflate is accepted)"
            )
        pieces: list[bytes] = []
        size = 0
        async for piece in response.aiter_bytes():
            size += len(piece)
            if size > limit:
                raise UnreadableAnswer(f"a body over {limit} bytes")
            pieces.append(piece)
        return Answer(response.status_code, response.headers, b"".join(pieces))


def token_problem(token: str, name: str) -> str | None:
    """Why ``token`` cannot go in an ``Authorization`` header, or None when it can.

    A header carries printable ASCII only. Sent anyway, a line break fails
    inside h11 with the header, token and all, quoted in its message (escaped,
    so no scrubbing of the token finds it), and a non-ASCII character fails
    with a ``UnicodeEncodeError``. The message names the position, never the token.
    """
    for index, char in enumerate(token):
        if "!" <= char <= "~":
            continue
        if char in "\r\n":
            what = "a line break"
        elif char.isspace():
            what = "a space"
        elif char.isascii():
            what = "a control character"
        else:
            what = "a non-ASCII character"
        return (
            f"{name} holds {what} at character {index}, which an HTTP header cannot carry; "
            "check that it was copied whole and nothing else (a line break at the end of a "
            "file or an environment variable is the usual cause)"
        )
    return None


def credentials(url: httpx.URL, api_key: str | None) -> tuple[httpx.URL, httpx.Auth]:
    """``url`` without its user info, and the Basic auth that carries it instead (httpx
    logs each request's URL at INFO, so the password never goes in one).

    ``ConfigurationError`` for an ``api_key`` no header can carry, and for an ``api_key``
    beside credentials in the URL: the Basic auth would replace the Bearer header, and
    one of the two would be dropped without a word."""
    if api_key is not None:
        problem = token_problem(api_key, "api_key")
        if problem is not None:
            raise ConfigurationError(problem)
    given = bool(url.username or url.password)
    if api_key is not None and given:
        raise ConfigurationError(
            "give the server's credentials one way: api_key (sent as a Bearer token) or "
            "user:password in base_url (sent as Basic auth), not both"
        )
    auth = httpx.BasicAuth(url.username, url.password) if given else httpx.Auth()
    return url.copy_with(username=None, password=None), auth


def json_body(body: bytes | str) -> Any:
    """``body`` parsed as JSON; ``ValueError`` for anything that is not, nesting deeper
    than the parser's recursion included (``RecursionError`` otherwise)."""
    try:
        return json.loads(body)
    except RecursionError:
        raise ValueError("JSON nested too deeply") from None
