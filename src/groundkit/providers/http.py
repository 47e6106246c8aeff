"""Embeddings from an Ollama or an OpenAI-compatible server, over httpx.

Errors. No new exception classes; each failure maps onto the existing tree:

* ``ConfigurationError`` - what only the user can fix: invalid arguments, a
  redirect (never followed: ``base_url`` should name where it leads), HTTP
  401/403 (credentials), HTTP 404 (model not pulled, or wrong ``base_url``),
  vectors whose size differs from the declared or previously seen
  ``dimensions`` (the server serves another model than the one configured),
  and use after ``aclose()``.
* ``IngestionError`` from ``embed_documents`` and ``RetrievalError`` from
  ``embed_query`` - everything else: retries exhausted on 408/429/5xx or
  transport errors, another 4xx (refused input), and malformed responses
  (invalid JSON, wrong count, non-finite or all-zero vectors). Documents are
  embedded while ingesting, a query while searching; the class says which step
  failed, as the rest of groundkit does.

Deadline and size. ``timeout`` bounds each attempt as a whole, from the
request to the last byte of the answer, so a server that trickles its body
cannot hold a call for ever; an attempt past it is retried like a timeout. An
answer is read up to 8 MiB plus 1 MiB per text sent, counted after gzip or
deflate (the only codings accepted, one layer): a larger one, or another
coding, is a malformed response, so a compressed bomb never reaches memory.

Retries. 408, 429, 5xx and transport failures (refused connection, timeout,
dropped connection) are retried up to ``max_retries`` times, waiting
``retry_backoff * 2**attempt`` with jitter, or the server's ``Retry-After``
when it sends one, never longer than ``max_backoff``. Other statuses fail at
once. Malformed bodies are not retried: a server that answers nonsense once
usually does so again.

Dimensions. Pass ``dimensions=`` to know the identity up front; every response
is then checked against it. Without it the size is learnt from the first
response, so ``dimensions`` (and the identity) raise ``ConfigurationError``
until ``await embedder.load()`` (which embeds a short probe) or a first
embedding call. The value is an expectation only; it is not sent to the
server, since many servers reject or ignore the field.

Secrets. The API key is kept in a wrapper whose ``repr`` is masked, sent only
as a per-request ``Authorization`` header, and scrubbed from any server text
quoted in an error; so are credentials in ``base_url`` (sent as Basic auth), in
every form a server may echo them, the header's base64 included. It is never
formatted into a message or a log record.

Vectors are L2-normalised client-side and returned as float32.
"""

from __future__ import annotations

import asyncio
import base64
import email.utils
import logging
import math
import random
import time
from collections.abc import Sequence
from typing import Any, Final, Self

import httpx
import numpy as np
import numpy.typing as npt

from groundkit.errors import ConfigurationError
from groundkit.providers._vectors import check_query, check_texts, failure, unit_rows
from groundkit.utils.http_answer import (
    POST_FAILURES,
    Answer,
    UnreadableAnswer,
    credentials,
    json_body,
    port_problem,
    post_json,
)

__all__ = ["OllamaEmbedder", "OpenAICompatibleEmbedder"]

logger = logging.getLogger(__name__)

_RETRY_STATUSES: Final = frozenset({408, 429})
_PROBE_TEXT: Final = "groundkit dimension probe"
_SNIPPET_CHARS: Final = 200
# What an answer may hold: a vector of 4,096 floats is about 100 KB of JSON.
_MAX_BODY_BASE: Final = 8 * 1024 * 1024
_MAX_BODY_PER_TEXT: Final = 1024 * 1024


class _Secret:
    """Holds a credential; its ``repr`` and ``str`` never show it."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def reveal(self) -> str:
        return self._value

    def __repr__(self) -> str:
        return "<secret>"

    __str__ = __repr__


def _positive_int(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigurationError(f"{name} must be a positive integer, got {value!r}")
    return value


def _non_negative_float(name: str, value: object, *, allow_zero: bool = True) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigurationError(f"{name} must be a number, got {type(value).__name__}")
    number = float(value)
    if not math.isfinite(number) or number < 0 or (number == 0 and not allow_zero):
        raise ConfigurationError(
            f"{name} must be a finite {'non-negative' if allow_zero else 'positive'} number"
        )
    return number


def _parse_base_url(base_url: object) -> httpx.URL:
    if not isinstance(base_url, str) or not base_url.strip():
        raise ConfigurationError("base_url must be a non-empty http(s) URL")
    try:
        url = httpx.URL(base_url.strip())
    except (httpx.InvalidURL, TypeError, ValueError):
        raise ConfigurationError("base_url is not a valid URL") from None
    if url.scheme not in ("http", "https") or not url.host:
        raise ConfigurationError("base_url must be an http:// or https:// URL with a host")
    problem = port_problem(url)
    if problem is not None:
        raise ConfigurationError(problem)
    return url


def _retry_after(value: str | None) -> float | None:
    """Seconds from a ``Retry-After`` header (delta-seconds or HTTP date), if parseable."""
    if value is None:
        return None
    text = value.strip()
    try:
        seconds = float(text)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(text)
        except (TypeError, ValueError, IndexError):
            return None
        seconds = when.timestamp() - time.time()
    return max(0.0, seconds) if math.isfinite(seconds) else None


class _HTTPEmbedder:
    """Request, retry and validation machinery shared by the two wire formats."""

    _provider: str = ""
    _path: str = ""

    def __init__(
        self,
        model: str,
        *,
        base_url: str,
        api_key: str | None = None,
        dimensions: int | None = None,
        batch_size: int = 64,
        timeout: float = 60.0,
        max_retries: int = 3,
        retry_backoff: float = 0.5,
        max_backoff: float = 10.0,
    ) -> None:
        if not isinstance(model, str) or not model.strip():
            raise ConfigurationError("model must be a non-empty model name")
        if api_key is not None and (not isinstance(api_key, str) or not api_key.strip()):
            raise ConfigurationError("api_key, when given, must be a non-empty string")
        if dimensions is not None:
            _positive_int("dimensions", dimensions)
        if isinstance(max_retries, bool) or not isinstance(max_retries, int) or max_retries < 0:
            raise ConfigurationError(f"max_retries must be an integer >= 0, got {max_retries!r}")
        self._model = model
        self._base = _parse_base_url(base_url)
        self._url = self._endpoint(self._base)
        # Requested and shown without user info, which may carry a password.
        self._request_url, self._url_auth = credentials(self._url, api_key)
        self._shown_url = str(self._request_url)
        self._key = _Secret(api_key) if api_key is not None else None
        self._hidden = self._hidden_forms(api_key)
        self._dimensions = dimensions
        self._batch_size = _positive_int("batch_size", batch_size)
        self._timeout = _non_negative_float("timeout", timeout, allow_zero=False)
        self._max_retries = max_retries
        self._retry_backoff = _non_negative_float("retry_backoff", retry_backoff)
        self._max_backoff = _non_negative_float("max_backoff", max_backoff)
        self._client: httpx.AsyncClient | None = None
        self._client_loop: asyncio.AbstractEventLoop | None = None
        self._closed = False

    # -- wire format (overridden) -------------------------------------------

    def _endpoint(self, base: httpx.URL) -> httpx.URL:
        return base.join(base.path.rstrip("/") + self._path)

    def _payload(self, texts: list[str]) -> dict[str, Any]:
        return {"model": self._model, "input": texts}

    def _vectors(self, body: Any, count: int) -> list[Any]:
        raise NotImplementedError

    # -- public surface -----------------------------------------------------

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(model={self._model!r}, url={self._shown_url!r}, "
            f"dimensions={self._dimensions!r}, api_key={'set' if self._key else 'unset'})"
        )

    @property
    def provider(self) -> str:
        return self._provider

    @property
    def model_name(self) -> str:
        return self._model

    @property
    def url(self) -> str:
        """The embeddings endpoint requests go to (without any userinfo)."""
        return self._shown_url

    @property
    def dimensions(self) -> int:
        if self._dimensions is None:
            raise ConfigurationError(
                f"the vector size of {self._provider} model {self._model!r} is learnt from the "
                "server: pass dimensions= or call `await embedder.load()` first"
            )
        return self._dimensions

    async def load(self) -> None:
        """Learn ``dimensions`` by embedding a probe, if it is not known yet."""
        if self._dimensions is None:
            await self._embed([_PROBE_TEXT], for_query=True)

    async def embed_documents(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        items = check_texts(texts, for_query=False)
        if not items:
            return np.zeros((0, self.dimensions), dtype=np.float32)
        parts = [
            await self._embed(items[i : i + self._batch_size], for_query=False)
            for i in range(0, len(items), self._batch_size)
        ]
        return parts[0] if len(parts) == 1 else np.concatenate(parts, axis=0)

    async def embed_query(self, text: str) -> npt.NDArray[np.float32]:
        row: npt.NDArray[np.float32] = (await self._embed([check_query(text)], for_query=True))[0]
        return row

    async def aclose(self) -> None:
        """Close the connection pool; the embedder cannot be used afterwards."""
        self._closed = True
        client, self._client = self._client, None
        if client is not None:
            await client.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    # -- machinery ----------------------------------------------------------

    def _http(self) -> httpx.AsyncClient:
        if self._closed:
            raise ConfigurationError(f"{type(self).__name__} is closed")
        if self._client is None:
            self._client = httpx.AsyncClient(timeout=httpx.Timeout(self._timeout))
            self._client_loop = asyncio.get_running_loop()
        return self._client

    def _hidden_forms(self, api_key: str | None) -> tuple[_Secret, ...]:
        """Every form a credential may come back in from a server quoting the request.

        The key as sent; the URL's password as written and decoded; its user
        name when it has no password (a token passed as ``https://TOKEN@host``);
        and the Basic header's base64, which decodes to both.
        """
        user, password = self._base.username, self._base.password
        raw_user, _, raw_password = self._base.userinfo.decode("ascii").partition(":")
        forms = {api_key or "", password, raw_password}
        if user and not password:
            forms.update((user, raw_user))
        if user or password:
            forms.add(base64.b64encode(f"{user}:{password}".encode()).decode("ascii"))
        # Longest first, so a form containing another is replaced whole.
        return tuple(_Secret(f) for f in sorted(forms - {""}, key=len, reverse=True))

    def _redact(self, text: str) -> str:
        for secret in self._hidden:
            text = text.replace(secret.reveal(), "<secret>")
        return text

    def _snippet(self, answer: Answer) -> str:
        """A short, scrubbed rendering of an error body (the server's reason)."""
        try:
            body = json_body(answer.body)
        except ValueError:
            body = None
        reason: Any = body.get("error", body) if isinstance(body, dict) else None
        if isinstance(reason, dict):
            reason = reason.get("message", reason)
        text = str(reason) if reason is not None else answer.body.decode("utf-8", "replace")
        text = " ".join(self._redact(text).split())
        if len(text) > _SNIPPET_CHARS:
            text = text[:_SNIPPET_CHARS] + "..."
        return f": {text}" if text else ""

    def _delay(self, attempt: int, retry_after: float | None) -> float:
        if retry_after is not None:
            return min(retry_after, self._max_backoff)
        exponential = self._retry_backoff * (2.0**attempt)
        return min(exponential * random.uniform(0.5, 1.0), self._max_backoff)

    async def _post(self, payload: dict[str, Any], *, for_query: bool) -> Any:
        if self._client is not None and self._client_loop is not asyncio.get_running_loop():
            # A call from another event loop (evidence read inside a coroutine runs
            # on one of its own): the pool's connections belong to the first loop.
            self._http()  # the closed check
            async with httpx.AsyncClient(timeout=httpx.Timeout(self._timeout)) as client:
                return await self._post_with(client, payload, for_query=for_query)
        return await self._post_with(self._http(), payload, for_query=for_query)

    async def _post_with(
        self, client: httpx.AsyncClient, payload: dict[str, Any], *, for_query: bool
    ) -> Any:
        headers = {"Authorization": f"Bearer {self._key.reveal()}"} if self._key else {}
        limit = _MAX_BODY_BASE + _MAX_BODY_PER_TEXT * len(payload["input"])
        attempts = self._max_retries + 1
        for attempt in range(attempts):
            retry_after: float | None = None
            try:
                answer = await post_json(
                    client,
                    self._request_url,
                    payload,
                    headers=headers,
                    auth=self._url_auth,
                    deadline=self._timeout,
                    limit=limit,
                )
            except TimeoutError:
                problem = f"Timeout: no complete answer within {self._timeout:g} s"
            except httpx.TransportError as exc:
                problem = f"{type(exc).__name__}: {self._redact(str(exc)) or 'no detail'}"
            except (httpx.HTTPError, *POST_FAILURES) as exc:
                raise failure(
                    for_query,
                    f"{self._provider} request to {self._shown_url} failed "
                    f"({type(exc).__name__}: {self._redact(str(exc))})",
                ) from None
            except UnreadableAnswer as exc:
                # Not retried: a server that sends this once usually does so again.
                raise failure(
                    for_query,
                    f"{self._provider} at {self._shown_url} sent {exc} for "
                    f"{len(payload['input'])} input(s); not used",
                ) from None
            else:
                status = answer.status
                if status < 300:
                    try:
                        return json_body(answer.body)
                    except ValueError:
                        raise failure(
                            for_query,
                            f"{self._provider} at {self._shown_url} answered HTTP {status} with "
                            f"a body that is not JSON{self._snippet(answer)}",
                        ) from None
                self._refuse_unless_retryable(answer, for_query=for_query)
                problem = f"HTTP {status}{self._snippet(answer)}"
                retry_after = _retry_after(answer.headers.get("Retry-After"))
            if attempt + 1 < attempts:
                delay = self._delay(attempt, retry_after)
                # The server's reason may echo the text sent: kept out of WARNING.
                logger.warning(
                    "%s embedding request failed (%s); retry %d of %d in %.2fs",
                    self._provider,
                    problem.split(":", 1)[0],
                    attempt + 1,
                    self._max_retries,
                    delay,
                )
                logger.debug("embedding request failure detail: %s", problem)
                await asyncio.sleep(delay)
        raise failure(
            for_query,
            f"{self._provider} at {self._shown_url} still failing after {attempts} attempt(s) "
            f"({problem})",
        )

    def _refuse_unless_retryable(self, answer: Answer, *, for_query: bool) -> None:
        status = answer.status
        if status in _RETRY_STATUSES or status >= 500:
            return
        where = f"{self._provider} at {self._shown_url}"
        if 300 <= status < 400:
            # Typically http:// answered by a redirect to https://; never followed,
            # since a POST carrying the key must not go wherever a server points.
            target = answer.headers.get("location")
            shown = f" to {self._redact(target)[:_SNIPPET_CHARS]}" if target else ""
            raise ConfigurationError(
                f"{where} answered with a redirect (HTTP {status}){shown}; redirects are not "
                "followed: set base_url to the address the server redirects to"
            )
        if status in (401, 403):
            raise ConfigurationError(
                f"{where} refused the request (HTTP {status}){self._snippet(answer)}; "
                "check the API key and its permissions"
            )
        if status == 404:
            raise ConfigurationError(
                f"{where} does not know model {self._model!r} or the endpoint "
                f"(HTTP 404){self._snippet(answer)}; check the model name (for Ollama, "
                "`ollama pull` it) and base_url"
            )
        raise failure(
            for_query, f"{where} rejected the request (HTTP {status}){self._snippet(answer)}"
        )

    async def _embed(self, texts: list[str], *, for_query: bool) -> npt.NDArray[np.float32]:
        body = await self._post(self._payload(texts), for_query=for_query)
        where = f"{self._provider} at {self._shown_url}"
        try:
            rows = self._vectors(body, len(texts))
            width = self._width(rows)
        except ValueError as exc:
            raise failure(for_query, f"{where} sent a malformed response: {exc}") from None
        if self._dimensions is None:
            self._dimensions = width
        elif width != self._dimensions:
            raise ConfigurationError(
                f"{where} returned {width}-dimensional vectors for model {self._model!r}, "
                f"expected {self._dimensions}; the server serves a different model than "
                "configured, or dimensions= is wrong"
            )
        try:
            return unit_rows(rows, count=len(texts), dimensions=self._dimensions)
        except ValueError as exc:
            raise failure(for_query, f"{where} sent unusable vectors: {exc}") from None

    @staticmethod
    def _width(rows: list[Any]) -> int:
        widths = {len(row) if isinstance(row, list) else -1 for row in rows}
        if -1 in widths:
            raise ValueError("a vector is not a JSON array")
        # JSON numbers only: numpy would read "0.5" and true as numbers too.
        if not all(type(x) is float or type(x) is int for row in rows for x in row):
            raise ValueError("a vector holds something other than numbers")
        if len(widths) != 1:
            raise ValueError(f"vectors of different lengths {sorted(widths)}")
        width = widths.pop()
        if width < 1:
            raise ValueError("vectors are empty")
        return width


class OllamaEmbedder(_HTTPEmbedder):
    """Ollama's ``POST /api/embed`` (batched ``input``, provider ``"ollama"``)."""

    _provider = "ollama"
    _path = "/api/embed"

    def __init__(
        self,
        model: str,
        *,
        base_url: str = "http://127.0.0.1:11434",
        dimensions: int | None = None,
        batch_size: int = 64,
        timeout: float = 60.0,
        max_retries: int = 3,
        retry_backoff: float = 0.5,
        max_backoff: float = 10.0,
    ) -> None:
        super().__init__(
            model,
            base_url=base_url,
            api_key=None,
            dimensions=dimensions,
            batch_size=batch_size,
            timeout=timeout,
            max_retries=max_retries,
            retry_backoff=retry_backoff,
            max_backoff=max_backoff,
        )

    def _vectors(self, body: Any, count: int) -> list[Any]:
        rows = body.get("embeddings") if isinstance(body, dict) else None
        if not isinstance(rows, list):
            raise ValueError("no 'embeddings' list")
        if len(rows) != count:
            raise ValueError(f"{len(rows)} embedding(s) for {count} input(s)")
        return rows


class OpenAICompatibleEmbedder(_HTTPEmbedder):
    """``POST {base_url}/v1/embeddings`` as OpenAI defines it (provider ``"openai-compatible"``).

    ``base_url`` may be given with or without its trailing ``/v1``. Results are
    put back in input order by their ``index``.
    """

    _provider = "openai-compatible"
    _path = "/v1/embeddings"

    def _endpoint(self, base: httpx.URL) -> httpx.URL:
        path = base.path.rstrip("/").removesuffix("/v1")
        return base.join(path + self._path)

    def _vectors(self, body: Any, count: int) -> list[Any]:
        data = body.get("data") if isinstance(body, dict) else None
        if not isinstance(data, list):
            raise ValueError("no 'data' list")
        if len(data) != count:
            raise ValueError(f"{len(data)} embedding(s) for {count} input(s)")
        by_index: dict[int, Any] = {}
        for item in data:
            index = item.get("index") if isinstance(item, dict) else None
            if isinstance(index, bool) or not isinstance(index, int):
                raise ValueError("an item has no integer 'index'")
            by_index[index] = item.get("embedding")
        if sorted(by_index) != list(range(count)):
            raise ValueError(f"indices are not 0..{count - 1}")
        return [by_index[i] for i in range(count)]
