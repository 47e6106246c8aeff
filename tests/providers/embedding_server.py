"""A real HTTP server on 127.0.0.1 speaking Ollama's and OpenAI's embedding APIs.

Each request is answered by the next scripted reply, or, when the script is
empty, by a correct response whose vectors are derived from the input text.
Replies are callables so a test can make one from what the client sent (the
``Authorization`` header, say).
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import numpy as np


@dataclass(frozen=True)
class Request:
    path: str
    headers: dict[str, str]
    body: Any


@dataclass(frozen=True)
class Reply:
    status: int
    body: bytes = b""
    headers: dict[str, str] = field(default_factory=dict)
    drop: bool = False  # close the connection without answering
    # Held until the test sets this event (at most HOLD_LIMIT s): a server that has not
    # answered yet, for as long as the test needs, without guessing a duration.
    until: threading.Event | None = None
    # Seconds between the body's bytes: a server that trickles its answer.
    trickle: float | None = None


# How long a held reply waits for its event at most: only keeps a forgotten one from
# holding a server thread for ever.
HOLD_LIMIT = 120.0


Responder = Callable[["EmbeddingServer", Request], Reply]

OLLAMA = "/api/embed"
OPENAI = "/v1/embeddings"


def raw_vector(text: str, dims: int) -> list[float]:
    """Deterministic, deliberately not unit-length."""
    seed = int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big")
    return [float(x) for x in np.random.default_rng(seed).normal(size=dims) * 3.0]


def json_reply(obj: Any, status: int = 200, **headers: str) -> Reply:
    return Reply(status, json.dumps(obj).encode(), {"Content-Type": "application/json", **headers})


def vectors_reply(path: str, rows: list[list[float]], *, reverse: bool = True) -> Reply:
    """A well-formed body for ``path`` carrying exactly ``rows``."""
    if path == OLLAMA:
        return json_reply({"model": "m", "embeddings": rows})
    data = [{"object": "embedding", "index": i, "embedding": r} for i, r in enumerate(rows)]
    return json_reply({"object": "list", "data": data[::-1] if reverse else data})


def fixed(reply: Reply) -> Responder:
    return lambda _server, _request: reply


def with_rows(transform: Callable[[list[list[float]]], Any]) -> Responder:
    """A correct response whose rows are first passed through ``transform``."""

    def respond(server: EmbeddingServer, request: Request) -> Reply:
        rows = [raw_vector(t, server.dims) for t in request.body["input"]]
        return vectors_reply(request.path, transform(rows))

    return respond


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length)
        try:
            body: Any = json.loads(raw)
        except ValueError:
            body = raw
        request = Request(self.path, dict(self.headers.items()), body)
        owner = self.server.owner
        reply = owner.answer(request)
        if reply.until is not None:
            reply.until.wait(HOLD_LIMIT)
        if reply.drop:
            self.close_connection = True
            return
        self.send_response(reply.status)
        for name, value in reply.headers.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(reply.body)))
        self.end_headers()
        if reply.trickle is None:
            self.wfile.write(reply.body)
            return
        for byte in reply.body:  # ends with a broken pipe once the client gives up
            self.wfile.write(bytes([byte]))
            self.wfile.flush()
            time.sleep(reply.trickle)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    owner: EmbeddingServer

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # a client that gave up on a slow reply is expected, not news


class EmbeddingServer:
    def __init__(self, dims: int = 8) -> None:
        self.dims = dims
        self.requests: list[Request] = []
        self._script: deque[Responder] = deque()
        self._lock = threading.Lock()
        self._httpd = _Server(("127.0.0.1", 0), _Handler)
        self._httpd.owner = self
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host!s}:{port}"

    def reset(self, dims: int = 8) -> None:
        with self._lock:
            self.dims = dims
            self.requests.clear()
            self._script.clear()

    def script(self, *responders: Responder | Reply) -> None:
        with self._lock:
            for r in responders:
                self._script.append(fixed(r) if isinstance(r, Reply) else r)

    def answer(self, request: Request) -> Reply:
        with self._lock:
            self.requests.append(request)
            responder = self._script.popleft() if self._script else None
        if responder is not None:
            return responder(self, request)
        if request.path not in (OLLAMA, OPENAI):
            return json_reply({"error": "not found"}, 404)
        return with_rows(lambda rows: rows)(self, request)

    def close(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)
