"""Ollama and OpenAI-compatible embedders against a real server on 127.0.0.1."""

from __future__ import annotations

import asyncio
import base64
import gzip
import logging
import re
import socket
import threading
import time
import zlib
from collections.abc import Callable
from typing import Any, TypedDict
from urllib.parse import unquote

import numpy as np
import numpy.typing as npt
import pytest

from groundkit.contracts import EmbeddingIdentity
from groundkit.errors import ConfigurationError, GroundkitError, IngestionError, RetrievalError
from groundkit.providers import (
    EmbeddingProtocol,
    OllamaEmbedder,
    OpenAICompatibleEmbedder,
    ensure_identity,
    identity_of,
)
from groundkit.providers.factory import http_embedder
from groundkit.providers.http import _retry_after
from tests.providers.embedding_server import (
    OLLAMA,
    OPENAI,
    EmbeddingServer,
    Reply,
    Request,
    json_reply,
    raw_vector,
    with_rows,
)

KEY = "sk-test-7f3a9c1e5b2d4f60a8e7"


class _Backoff(TypedDict):
    retry_backoff: float
    max_backoff: float


FAST = _Backoff(retry_backoff=0.001, max_backoff=0.01)
# Only turns a client that never gives up into a failure instead of a hang.
_HANG = 60.0

Embedder = OllamaEmbedder | OpenAICompatibleEmbedder
Factory = Callable[..., Embedder]


def ollama(server: EmbeddingServer, **kwargs: object) -> OllamaEmbedder:
    return OllamaEmbedder("nomic-embed-text", base_url=server.url, **{**FAST, **kwargs})  # type: ignore[arg-type]


def openai(server: EmbeddingServer, **kwargs: object) -> OpenAICompatibleEmbedder:
    options: dict[str, object] = {**FAST, "api_key": KEY, **kwargs}
    return OpenAICompatibleEmbedder("text-embedding-3-small", base_url=server.url, **options)  # type: ignore[arg-type]


BOTH = pytest.mark.parametrize("make", [ollama, openai], ids=["ollama", "openai"])


def expected(texts: list[str], dims: int = 8) -> npt.NDArray[Any]:
    rows = np.array([raw_vector(t, dims) for t in texts])
    unit: npt.NDArray[Any] = rows / np.linalg.norm(rows, axis=1, keepdims=True)
    return unit


def _retry_delays(caplog: pytest.LogCaptureFixture) -> list[float]:
    """The sleep before each retry, as the embedder's warnings say it."""
    found = [
        re.search(r"retry \d+ of \d+ in ([0-9.]+)s$", r.getMessage())
        for r in caplog.records
        if r.name == "groundkit.providers.http"
    ]
    return [float(m.group(1)) for m in found if m is not None]


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


# -- happy paths -------------------------------------------------------------


@BOTH
async def test_embeds_normalised_float32_rows_in_input_order(
    server: EmbeddingServer, make: Factory
) -> None:
    texts = ["alpha", "beta", "gamma"]
    async with make(server, dimensions=8) as embedder:
        docs = await embedder.embed_documents(texts)
        query = await embedder.embed_query("beta")
    assert docs.dtype == np.float32 and docs.shape == (3, 8)
    assert query.dtype == np.float32 and query.shape == (8,)
    np.testing.assert_allclose(np.linalg.norm(docs, axis=1), 1.0, atol=1e-6)
    np.testing.assert_allclose(docs, expected(texts), atol=1e-6)
    np.testing.assert_allclose(query, docs[1], atol=1e-6)


async def test_ollama_wire_format(server: EmbeddingServer) -> None:
    async with ollama(server) as embedder:
        await embedder.embed_documents(["one", "two"])
    (request,) = server.requests
    assert request.path == OLLAMA
    assert request.body == {"model": "nomic-embed-text", "input": ["one", "two"]}
    assert "authorization" not in {k.lower() for k in request.headers}
    assert embedder.provider == "ollama"


async def test_openai_wire_format_and_key_header(server: EmbeddingServer) -> None:
    # The fake server returns ``data`` in reverse order; rows must follow ``index``.
    async with openai(server) as embedder:
        docs = await embedder.embed_documents(["one", "two", "three"])
    (request,) = server.requests
    assert request.path == OPENAI
    assert request.body == {"model": "text-embedding-3-small", "input": ["one", "two", "three"]}
    assert request.headers["Authorization"] == f"Bearer {KEY}"
    np.testing.assert_allclose(docs, expected(["one", "two", "three"]), atol=1e-6)
    assert embedder.provider == "openai-compatible"


async def test_openai_base_url_may_carry_v1(server: EmbeddingServer) -> None:
    a = OpenAICompatibleEmbedder("m", base_url=server.url)
    b = OpenAICompatibleEmbedder("m", base_url=server.url + "/v1/")
    assert a.url == b.url == server.url + "/v1/embeddings"
    async with b:
        await b.embed_query("x")
    assert server.requests[0].path == OPENAI


@BOTH
async def test_batches_split_requests_and_keep_order(
    server: EmbeddingServer, make: Factory
) -> None:
    texts = [f"text {i}" for i in range(10)]
    async with make(server, batch_size=4) as embedder:
        docs = await embedder.embed_documents(texts)
    assert [len(r.body["input"]) for r in server.requests] == [4, 4, 2]
    np.testing.assert_allclose(docs, expected(texts), atol=1e-6)


@BOTH
async def test_empty_input_sends_nothing(server: EmbeddingServer, make: Factory) -> None:
    async with make(server, dimensions=8) as embedder:
        assert (await embedder.embed_documents([])).shape == (0, 8)
    async with make(server) as unknown:
        with pytest.raises(ConfigurationError, match="load"):
            await unknown.embed_documents([])
    assert server.requests == []


@BOTH
async def test_dimensions_are_learnt_by_load(server: EmbeddingServer, make: Factory) -> None:
    server.reset(dims=12)
    async with make(server) as embedder:
        assert isinstance(embedder, EmbeddingProtocol)  # no property runs in isinstance
        with pytest.raises(ConfigurationError, match=r"await embedder\.load\(\)"):
            _ = embedder.dimensions
        with pytest.raises(ConfigurationError):
            identity_of(embedder)
        await embedder.load()
        await embedder.load()  # known now: no second probe
        assert len(server.requests) == 1
        assert identity_of(embedder) == EmbeddingIdentity(
            provider=embedder.provider, model_name=embedder.model_name, dimensions=12
        )


async def test_ensure_identity_loads_first(server: EmbeddingServer) -> None:
    async with ollama(server) as embedder:
        identity = await ensure_identity(embedder)
    assert identity == EmbeddingIdentity(
        provider="ollama", model_name="nomic-embed-text", dimensions=8
    )


# -- retries -----------------------------------------------------------------


@BOTH
async def test_retry_after_is_honoured_and_capped(
    server: EmbeddingServer, make: Factory, caplog: pytest.LogCaptureFixture
) -> None:
    server.script(json_reply({"error": "slow down"}, 429, **{"Retry-After": "30"}))
    caplog.set_level(logging.WARNING, logger="groundkit")
    async with make(server, retry_backoff=0.0, max_backoff=0.25) as embedder:
        started = time.perf_counter()
        docs = await embedder.embed_documents(["a"])
        elapsed = time.perf_counter() - started
    assert docs.shape == (1, 8)
    assert len(server.requests) == 2
    assert _retry_delays(caplog) == [0.25]  # the capped Retry-After, not 30 s
    assert elapsed >= 0.24  # and it did wait


def test_retry_after_forms() -> None:
    assert _retry_after("3") == 3.0
    assert _retry_after("-4") == 0.0
    assert _retry_after("soon") is None
    assert _retry_after(None) is None
    assert _retry_after("Wed, 21 Oct 2015 07:28:00 GMT") == 0.0  # a date in the past
    later = _retry_after(time.strftime("%a, %d %b %Y %H:%M:%S GMT", time.gmtime(time.time() + 60)))
    assert later is not None and 55 <= later <= 61


@BOTH
async def test_server_errors_retry_then_fail_with_the_step(
    server: EmbeddingServer, make: Factory, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="groundkit")
    server.script(*[json_reply({"error": "boom"}, 500)] * 8)
    async with make(server, max_retries=3, retry_backoff=0.01, max_backoff=0.02) as embedder:
        with pytest.raises(IngestionError, match=r"after 4 attempt\(s\).*HTTP 500"):
            await embedder.embed_documents(["a"])
        assert len(server.requests) == 4
        delays = _retry_delays(caplog)
        assert len(delays) == 3 and max(delays) <= 0.02  # three sleeps, each under the cap
        with pytest.raises(RetrievalError, match="HTTP 500") as info:
            await embedder.embed_query("q")
        assert info.value.verdict is None
    assert len(server.requests) == 8
    retries = [r for r in caplog.records if r.name == "groundkit.providers.http"]
    assert len(retries) == 6


@BOTH
async def test_transient_failures_recover(server: EmbeddingServer, make: Factory) -> None:
    server.script(
        json_reply({"error": "overloaded"}, 503),
        Reply(0, drop=True),
        json_reply({"error": "later"}, 429),
    )
    async with make(server, max_retries=3) as embedder:
        docs = await embedder.embed_documents(["a", "b"])
    assert docs.shape == (2, 8)
    assert len(server.requests) == 4


@BOTH
async def test_timeouts_are_retried_and_bounded(
    server: EmbeddingServer, make: Factory, caplog: pytest.LogCaptureFixture
) -> None:
    # The server answers nothing until the test is over, so each attempt can only end
    # by the client's own timeout, and the call can only return by giving up: one
    # retry, then the timeout is reported.
    caplog.set_level(logging.WARNING, logger="groundkit")
    release = threading.Event()
    held = Reply(200, b"{}", until=release)
    server.script(held, held, held)
    try:
        async with make(server, timeout=0.2, max_retries=1) as embedder:
            call = embedder.embed_query("q")
            with pytest.raises(RetrievalError, match=r"after 2 attempt\(s\) \(\w*Timeout"):
                await asyncio.wait_for(call, _HANG)
    finally:
        release.set()
    retries = [r for r in caplog.records if r.name == "groundkit.providers.http"]
    assert len(retries) == 1 and "Timeout" in retries[0].getMessage()


@BOTH
async def test_a_trickled_answer_meets_the_deadline(server: EmbeddingServer, make: Factory) -> None:
    # A byte every 50 ms never trips a per-read timeout of 0.5 s; the answer
    # (a few hundred bytes) would take many seconds, then be used.
    def trickled(_server: EmbeddingServer, request: Request) -> Reply:
        whole = with_rows(lambda rows: rows)(_server, request)
        return Reply(200, whole.body, whole.headers, trickle=0.05)

    server.script(trickled, trickled)
    async with make(server, timeout=0.5, max_retries=1) as embedder:
        with pytest.raises(RetrievalError, match=r"after 2 attempt\(s\) \(Timeout: no complete"):
            await asyncio.wait_for(embedder.embed_query("q"), _HANG)
    assert len(server.requests) == 2


@BOTH
async def test_an_answer_over_the_cap_is_not_read_whole(
    server: EmbeddingServer, make: Factory
) -> None:
    # 64 MiB of spaces in 64 KB of gzip: valid JSON whitespace, far past the cap
    # for one text (9 MiB), so it must be cut there, not inflated and parsed.
    bomb = gzip.compress(b" " * (64 * 1024 * 1024), 9)
    server.script(
        Reply(200, bomb, {"Content-Type": "application/json", "Content-Encoding": "gzip"})
    )
    async with make(server, dimensions=8) as embedder:
        with pytest.raises(IngestionError, match=r"a body over \d+ bytes for 1 input"):
            await embedder.embed_documents(["a"])
    assert len(server.requests) == 1  # not retried


@BOTH
@pytest.mark.parametrize("coding", ["gzip", "deflate", "identity"])
async def test_one_layer_of_gzip_or_deflate_is_read(
    server: EmbeddingServer, make: Factory, coding: str
) -> None:
    def compressed(_server: EmbeddingServer, request: Request) -> Reply:
        whole = with_rows(lambda rows: rows)(_server, request)
        body = {"gzip": gzip.compress(whole.body), "deflate": zlib.compress(whole.body)}.get(
            coding, whole.body
        )
        return Reply(200, body, {**whole.headers, "Content-Encoding": coding})

    server.script(compressed)
    async with make(server, dimensions=8) as embedder:
        docs = await embedder.embed_documents(["alpha", "beta"])
    np.testing.assert_allclose(docs, expected(["alpha", "beta"]), atol=1e-6)


@BOTH
# x-gzip too: httpx would pass it on undecoded, as it does any name it does not know.
@pytest.mark.parametrize("coding", ["br", "zstd", "gzip, gzip", "compress", "x-gzip"])
async def test_codings_not_accepted_are_refused_by_name(
    server: EmbeddingServer, make: Factory, coding: str
) -> None:
    # httpx would undo a stacked or brotli coding without any bound on a step.
    server.script(Reply(200, b"\x00\x01", {"Content-Encoding": coding}))
    async with make(server, dimensions=8) as embedder:
        with pytest.raises(IngestionError, match=f"content coding {coding!r}"):
            await embedder.embed_documents(["a"])
    assert server.requests[0].headers["Accept-Encoding"] == "gzip, deflate"


@pytest.mark.parametrize("cls", [OllamaEmbedder, OpenAICompatibleEmbedder])
async def test_refused_connection_is_retried(
    cls: type[Embedder], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="groundkit")
    url = f"http://127.0.0.1:{closed_port()}"
    async with cls("m", base_url=url, max_retries=2, **FAST) as embedder:
        with pytest.raises(IngestionError, match=r"after 3 attempt\(s\).*ConnectError"):
            await embedder.embed_documents(["a"])
    assert len([r for r in caplog.records if "retry" in r.getMessage()]) == 2


# -- refusals that are not retried --------------------------------------------


@pytest.mark.parametrize("status", [401, 403])
async def test_auth_failures_are_configuration_errors(server: EmbeddingServer, status: int) -> None:
    server.script(json_reply({"error": {"message": "invalid api key"}}, status))
    async with openai(server) as embedder:
        with pytest.raises(ConfigurationError, match=f"HTTP {status}.*invalid api key.*API key"):
            await embedder.embed_documents(["a"])
    assert len(server.requests) == 1


@BOTH
@pytest.mark.parametrize("status", [301, 302, 307, 308])
async def test_redirects_are_configuration_errors_not_followed(
    server: EmbeddingServer, make: Factory, status: int
) -> None:
    # The usual case: base_url says http:// and the server moved to https://.
    server.script(Reply(status, b"", {"Location": "https://elsewhere.example/v1/embeddings"}))
    async with make(server) as embedder:
        with pytest.raises(
            ConfigurationError,
            match=rf"redirect \(HTTP {status}\) to https://elsewhere\.example.*set base_url",
        ):
            await embedder.embed_documents(["a"])
    assert len(server.requests) == 1


async def test_missing_model_is_a_configuration_error(server: EmbeddingServer) -> None:
    server.script(json_reply({"error": 'model "nomic-embed-text" not found, try pulling it'}, 404))
    async with ollama(server) as embedder:
        with pytest.raises(ConfigurationError, match=r"nomic-embed-text.*HTTP 404.*ollama pull"):
            await embedder.embed_query("a")
    assert len(server.requests) == 1


@BOTH
async def test_other_client_errors_fail_at_once(server: EmbeddingServer, make: Factory) -> None:
    server.script(json_reply({"error": "input too long"}, 400))
    async with make(server) as embedder:
        with pytest.raises(IngestionError, match=r"HTTP 400.*input too long"):
            await embedder.embed_documents(["a"])
    assert len(server.requests) == 1


# -- response validation ------------------------------------------------------

MALFORMED: dict[str, tuple[Callable[[EmbeddingServer, Request], Reply] | Reply, str]] = {
    "not json": (Reply(200, b"<html>oops</html>"), "not JSON"),
    "wrong count": (with_rows(lambda rows: rows[:-1]), "1 embedding.*for 2 input"),
    "nan": (with_rows(lambda rows: [[float("nan")] * len(rows[0]), rows[1]]), "NaN"),
    "inf": (with_rows(lambda rows: [[float("inf")] * len(rows[0]), rows[1]]), "infinite"),
    "zeros": (with_rows(lambda rows: [[0.0] * len(rows[0]), rows[1]]), "all zeros"),
    "ragged": (with_rows(lambda rows: [rows[0], rows[1][:-1]]), "different lengths"),
    "strings": (with_rows(lambda rows: [["x"] * len(rows[0]), rows[1]]), "numbers"),
    # numpy would read these as numbers; they are not JSON numbers.
    "numeric strings": (with_rows(lambda rows: [[str(x) for x in rows[0]], rows[1]]), "numbers"),
    "booleans": (with_rows(lambda rows: [[True] * len(rows[0]), rows[1]]), "numbers"),
    "integer past float range": (
        with_rows(lambda rows: [[10**400] * len(rows[0]), rows[1]]),
        "rectangular array of numbers",
    ),
    "nested too deep": (Reply(200, b"[" * 100_000 + b"]" * 100_000), "not JSON"),
    "no list": (json_reply({"model": "m"}), "malformed"),
}


@BOTH
@pytest.mark.parametrize("case", list(MALFORMED))
async def test_malformed_responses_are_rejected(
    server: EmbeddingServer, make: Factory, case: str
) -> None:
    reply, message = MALFORMED[case]
    server.script(reply)
    async with make(server, dimensions=8) as embedder:
        with pytest.raises(IngestionError, match=message):
            await embedder.embed_documents(["a", "b"])
    assert len(server.requests) == 1  # a malformed body is not retried


async def test_an_error_body_nested_too_deep_is_still_a_groundkit_error(
    server: EmbeddingServer,
) -> None:
    server.script(Reply(400, b'{"error": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"))
    async with openai(server) as embedder:
        with pytest.raises(IngestionError, match="HTTP 400"):
            await embedder.embed_documents(["a"])


@BOTH
async def test_components_too_large_to_square_still_give_a_direction(
    server: EmbeddingServer, make: Factory
) -> None:
    # Their squares overflow: divided by an infinite norm, the row was all zeros.
    server.script(with_rows(lambda rows: [[1e300] * len(r) for r in rows]))
    async with make(server, dimensions=8) as embedder:
        docs = await embedder.embed_documents(["a"])
    np.testing.assert_allclose(docs, np.full((1, 8), 8**-0.5), atol=1e-6)


async def test_openai_indices_must_cover_the_batch(server: EmbeddingServer) -> None:
    data = [{"index": 0, "embedding": [1.0, 0.0]}, {"index": 0, "embedding": [0.0, 1.0]}]
    server.script(json_reply({"data": data}))
    async with openai(server) as embedder:
        with pytest.raises(IngestionError, match="indices"):
            await embedder.embed_documents(["a", "b"])


@BOTH
async def test_wrong_dimensions_are_a_configuration_error(
    server: EmbeddingServer, make: Factory
) -> None:
    async with make(server, dimensions=16) as embedder:
        with pytest.raises(ConfigurationError, match=r"8-dimensional.*expected 16"):
            await embedder.embed_documents(["a"])
    async with make(server) as learnt:
        await learnt.load()
        server.reset(dims=4)  # the server now serves another model under the same name
        with pytest.raises(ConfigurationError, match=r"4-dimensional.*expected 8"):
            await learnt.embed_query("a")


# -- the API key never leaks ---------------------------------------------------


def _echo(status: int) -> Callable[[EmbeddingServer, Request], Reply]:
    """A reply quoting the client's credentials back, as some servers do."""

    def respond(_server: EmbeddingServer, request: Request) -> Reply:
        auth = request.headers.get("Authorization", "")
        return json_reply({"error": {"message": f"bad request from {auth} ({KEY})"}}, status)

    return respond


def _echo_not_json(_server: EmbeddingServer, request: Request) -> Reply:
    return Reply(200, f"not json {request.headers.get('Authorization')}".encode())


LEAKY: dict[str, list[Callable[[EmbeddingServer, Request], Reply] | Reply]] = {
    "401": [_echo(401)],
    "403": [_echo(403)],
    "404": [_echo(404)],
    "400": [_echo(400)],
    "500 exhausted": [_echo(500)] * 3,
    "429 exhausted": [_echo(429)] * 3,
    "not json": [_echo_not_json],
    "wrong dimensions": [with_rows(lambda rows: [[*r, 1.0] for r in rows])],
    "nan": [with_rows(lambda rows: [[float("nan")] * len(r) for r in rows])],
}


def _assert_secret_absent(*texts: str) -> None:
    for text in texts:
        assert KEY not in text
        assert KEY[-8:] not in text


@pytest.mark.parametrize("case", list(LEAKY))
async def test_api_key_never_in_errors_reprs_or_logs(
    server: EmbeddingServer, case: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)  # every logger, httpx and httpcore included
    server.script(*LEAKY[case])
    embedder = openai(server, dimensions=8, max_retries=2)
    _assert_secret_absent(repr(embedder), str(embedder), repr(vars(embedder)))
    async with embedder:
        with pytest.raises(GroundkitError) as info:
            await embedder.embed_documents(["a"])
    exc: BaseException | None = info.value
    while exc is not None:
        _assert_secret_absent(str(exc), repr(exc), repr(exc.args))
        exc = exc.__cause__ or exc.__context__
    assert caplog.records
    for record in caplog.records:
        _assert_secret_absent(record.getMessage(), repr(record.args), record.msg)


async def test_api_key_never_in_connection_errors(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    embedder = OpenAICompatibleEmbedder(
        "m", base_url=f"http://127.0.0.1:{closed_port()}", api_key=KEY, max_retries=1, **FAST
    )
    async with embedder:
        with pytest.raises(RetrievalError) as info:
            await embedder.embed_query("q")
    _assert_secret_absent(str(info.value), repr(info.value), str(info.value.__cause__))
    for record in caplog.records:
        _assert_secret_absent(record.getMessage(), repr(record.args))


@pytest.mark.parametrize(
    ("userinfo", "secrets"),
    [
        ("alice:s3cr%40t-pw", ["s3cr@t-pw", "s3cr%40t-pw"]),
        ("ghp_T0KENas%2Buser", ["ghp_T0KENas+user", "ghp_T0KENas%2Buser"]),  # no password
    ],
)
async def test_url_credentials_never_in_errors_whatever_their_form(
    server: EmbeddingServer, userinfo: str, secrets: list[str], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)

    def echo(_server: EmbeddingServer, request: Request) -> Reply:
        # The Basic header, whose base64 decodes to the credentials, quoted back.
        sent = request.headers["Authorization"]
        return json_reply({"error": f"denied {sent} {sent.removeprefix('Basic ')}"}, 401)

    server.script(echo, echo)
    base = server.url.replace("http://", f"http://{userinfo}@")
    user, _, password = userinfo.partition(":")
    encoded = base64.b64encode(unquote(f"{user}:{password}").encode()).decode()
    for cls in (OllamaEmbedder, OpenAICompatibleEmbedder):
        async with cls("m", base_url=base, **FAST) as embedder:
            with pytest.raises(ConfigurationError, match="denied Basic <secret>") as info:
                await embedder.embed_documents(["a"])
        for secret in [*secrets, encoded]:
            assert secret not in str(info.value)
            assert all(secret not in r.getMessage() for r in caplog.records)
    assert server.requests[0].headers["Authorization"] == f"Basic {encoded}"


@pytest.mark.parametrize(
    ("ollama_host", "url"),
    [
        ("0.0.0.0", "http://0.0.0.0:11434/api/embed"),  # Ollama's port, not HTTP's 80
        ("127.0.0.1", "http://127.0.0.1:11434/api/embed"),
        (":11434", "http://127.0.0.1:11434/api/embed"),
        ("gpu-box:8080", "http://gpu-box:8080/api/embed"),
        ("[::1]", "http://[::1]:11434/api/embed"),
        ("::1", "http://[::1]:11434/api/embed"),
        ("[::1]:9", "http://[::1]:9/api/embed"),
        ("gpu-box/ollama", "http://gpu-box:11434/ollama/api/embed"),
        ("https://ollama.example", "https://ollama.example/api/embed"),
        ("http://gpu-box", "http://gpu-box/api/embed"),
    ],
)
def test_ollama_host_is_read_as_ollama_reads_it(ollama_host: str, url: str) -> None:
    embedder = http_embedder("ollama", "m", environ={"OLLAMA_HOST": ollama_host})
    assert isinstance(embedder, OllamaEmbedder) and embedder.url == url


@pytest.mark.parametrize(
    ("key", "what"),
    [
        (KEY + "\n", "a line break at character 28"),  # read from a file
        (KEY + "\r", "a line break"),
        ("sk-a b" + KEY, "a space at character 4"),
        (KEY + "\x00", "a control character"),
        ("sk-ключ" + KEY, "a non-ASCII character at character 3"),
    ],
)
async def test_an_api_key_no_header_can_carry_is_refused_without_quoting_it(
    key: str, what: str, caplog: pytest.LogCaptureFixture
) -> None:
    # Sent anyway, h11 quoted the whole header, key escaped past the scrubbing, in
    # the error and the log; a non-ASCII one raised UnicodeEncodeError.
    caplog.set_level(logging.DEBUG)
    with pytest.raises(ConfigurationError, match=f"api_key holds {what}") as info:
        OpenAICompatibleEmbedder("m", base_url="http://127.0.0.1:1", api_key=key)
    _assert_secret_absent(str(info.value), *(r.getMessage() for r in caplog.records))


def test_an_api_key_and_url_credentials_together_are_refused() -> None:
    # Sent together, the URL's Basic auth replaced the Bearer header without a word.
    with pytest.raises(ConfigurationError, match="one way") as info:
        OpenAICompatibleEmbedder(
            "m", base_url="http://user:hunter2@127.0.0.1:1", api_key="sk-secret-key"
        )
    assert "hunter2" not in str(info.value) and "sk-secret-key" not in str(info.value)


def test_url_password_is_not_shown() -> None:
    embedder = OllamaEmbedder("m", base_url="http://user:hunter2@127.0.0.1:1")
    assert "hunter2" not in repr(embedder) and "hunter2" not in embedder.url


# -- lifecycle and arguments ---------------------------------------------------


@BOTH
async def test_closed_embedder_refuses_work(server: EmbeddingServer, make: Factory) -> None:
    embedder = make(server)
    await embedder.embed_query("warm")
    await embedder.aclose()
    await embedder.aclose()  # idempotent
    with pytest.raises(ConfigurationError, match="closed"):
        await embedder.embed_query("again")


@BOTH
async def test_bad_inputs_name_the_step(server: EmbeddingServer, make: Factory) -> None:
    async with make(server) as embedder:
        with pytest.raises(IngestionError, match="single string"):
            await embedder.embed_documents("not a list")
        with pytest.raises(IngestionError, match="text 1 is int"):
            await embedder.embed_documents(["ok", 3])  # type: ignore[list-item]
        with pytest.raises(RetrievalError, match="not str"):
            await embedder.embed_query(None)  # type: ignore[arg-type]
        # No UTF-8 for a lone surrogate: the JSON body could not be encoded.
        with pytest.raises(IngestionError, match=r"text 1 cannot be encoded.*U\+DFFF"):
            await embedder.embed_documents(["ok", "tail \udfff"])
        with pytest.raises(RetrievalError, match=r"the query cannot be encoded.*U\+D800"):
            await embedder.embed_query("bad \ud800")
    assert server.requests == []


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"model": ""}, "model"),
        ({"base_url": "ftp://example.com"}, "http"),
        ({"base_url": "not a url"}, "base_url"),
        ({"base_url": "http://127.0.0.1:65536"}, "port 65536"),
        ({"batch_size": 0}, "batch_size"),
        ({"timeout": 0}, "timeout"),
        ({"timeout": float("inf")}, "timeout"),
        ({"max_retries": -1}, "max_retries"),
        ({"dimensions": 0}, "dimensions"),
        ({"api_key": " "}, "api_key"),
        ({"retry_backoff": -1.0}, "retry_backoff"),
    ],
)
def test_invalid_arguments_are_configuration_errors(
    kwargs: dict[str, object], message: str
) -> None:
    options: dict[str, object] = {"model": "m", "base_url": "http://127.0.0.1:1", **kwargs}
    with pytest.raises(ConfigurationError, match=message):
        OpenAICompatibleEmbedder(**options)  # type: ignore[arg-type]


@BOTH
async def test_a_call_from_another_event_loop_gets_its_own_connection(
    server: EmbeddingServer, make: Factory
) -> None:
    # Evidence read inside a coroutine embeds on a fresh loop in a worker thread; the
    # pool's connections belong to this loop and must not be used there.
    import asyncio

    async with make(server, dimensions=8) as embedder:
        here = await embedder.embed_documents(["alpha"])

        def elsewhere() -> npt.NDArray[Any]:
            return asyncio.run(embedder.embed_documents(["alpha", "beta"]))

        there = await asyncio.to_thread(elsewhere)
        again = await embedder.embed_documents(["beta"])  # this loop's pool still works
    np.testing.assert_allclose(there[0], here[0], atol=1e-6)
    np.testing.assert_allclose(again[0], there[1], atol=1e-6)
