"""SIGTERM ends ``grk`` the way SIGINT (Ctrl-C) does: the command is cancelled, what it
opened is closed, one line on stderr and no traceback; exit 143 (128 + 15), 130 for SIGINT.

Each case is a real ``grk`` process sent the signal once it is known to be inside the
command (an ingest waiting on its embedder, a server that said it is serving). A child that
does not exit fails under a timeout, after printing where its threads stand; no bound is put
on how long the exit takes.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from tests.support import write_tree
from tests.test_interrupted_ingests import _GRK_STALLED
from tests.test_process_exit import LEFT_OPEN, REPO, child_env

TIMEOUT = 120
FILES = {
    "harbour.md": "# Harbour\n\nTides lift the boats and cranes load the ships at dawn.\n",
    "garden.md": "# Garden\n\nTomatoes ripen slowly when the nights are cold.\n",
}
EXIT = {signal.SIGINT: (130, b"grk: interrupted"), signal.SIGTERM: (143, b"grk: terminated")}
SIGNALS = pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["INT", "TERM"])

# ``grk``, telling where its threads stand when the test asks (SIGUSR1).
_GRK = textwrap.dedent(
    """
    import faulthandler, signal, sys
    import groundkit.cli as cli

    faulthandler.register(signal.SIGUSR1, all_threads=True)
    sys.exit(cli.main(sys.argv[1:]))
    """
)


def _default_sigint() -> None:
    # A test run started in the background ignores SIGINT, and a child inherits that.
    signal.signal(signal.SIGINT, signal.SIG_DFL)


async def _started(script: str, *argv: str, stdin: int | None = None) -> asyncio.subprocess.Process:
    """``script`` (grk, as the tests drive it) with ``argv``, its output piped, SIGINT
    handled as in a shell, resource warnings shown."""
    return await asyncio.create_subprocess_exec(
        *(sys.executable, "-W", "always::ResourceWarning", "-c", script, *argv),
        cwd=REPO,
        env=child_env(),
        stdin=stdin,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        preexec_fn=_default_sigint,
    )


async def _signalled(
    proc: asyncio.subprocess.Process,
    sig: signal.Signals,
    *,
    said: bytes,
    on_stderr: bool,
    then: Callable[[], Awaitable[None]] | None = None,
) -> tuple[bytes, bytes]:
    """Wait for the line ``said``, run ``then``, send ``sig``, and return the rest of
    stdout and stderr."""
    stream = proc.stderr if on_stderr else proc.stdout
    assert stream is not None
    seen = b""
    while said not in seen:
        line = await asyncio.wait_for(stream.readline(), TIMEOUT)
        assert line, f"grk ended before it said {said!r}: {seen!r}"
        seen += line
    if then is not None:
        await then()
    proc.send_signal(sig)
    assert proc.stdout is not None and proc.stderr is not None
    # Not communicate(): that closes stdin, which alone ends grk serve over stdio.
    ending = asyncio.gather(proc.stdout.read(), proc.stderr.read(), proc.wait())
    try:
        out, err, _ = await asyncio.wait_for(ending, TIMEOUT)
    except TimeoutError:
        proc.send_signal(signal.SIGUSR1)  # faulthandler: where each thread stands
        await asyncio.sleep(2)
        if proc.returncode is None:
            proc.kill()
        out, err = await proc.communicate()
        pytest.fail(f"grk did not exit after {sig.name}:\n" + err.decode(errors="replace"))
    return (out, seen + err) if on_stderr else (seen + out, err)


def _ends_like_ctrl_c(proc: asyncio.subprocess.Process, sig: signal.Signals, err: bytes) -> None:
    code, line = EXIT[sig]
    assert proc.returncode == code, err
    assert line in err, err
    assert b"Traceback" not in err, err
    assert LEFT_OPEN.encode() not in err, err


def _described(index: Path) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-m", "groundkit", "collections", "--index-dir", str(index), "--json"],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=True,
        env=child_env(),
    )
    listed: dict[str, Any] = json.loads(done.stdout)["collections"][0]
    return listed


@SIGNALS
async def test_a_signal_during_grk_ingest_closes_the_collection(
    tmp_path: Path, sig: signal.Signals
) -> None:
    base, index = tmp_path / "base", tmp_path / "index"
    write_tree(base, FILES)
    proc = await _started(
        _GRK_STALLED,
        *("ingest", str(base), "--index-dir", str(index), "--base-dir", str(base)),
        *("--embedder", "hash-64"),
    )
    _, err = await _signalled(proc, sig, said=b"embedding", on_stderr=False)
    _ends_like_ctrl_c(proc, sig, err)
    # Closed, not abandoned: SQLite folded its write-ahead log back into the file.
    assert not (index / "default.sqlite3-wal").exists()
    # What either signal leaves: the texts, committed whole, and no vectors yet (the
    # next ingest adds them; tests/test_interrupted_ingests.py).
    described = _described(index)
    assert described["status"] == "ok"
    assert described["documents"] == len(FILES)
    assert described["chunks"] > 0
    assert described["vectors_missing"] == described["chunks"]


@pytest.fixture
def index(tmp_path: Path) -> Path:
    base, index = tmp_path / "base", tmp_path / "index"
    write_tree(base, FILES)
    subprocess.run(
        [
            *(sys.executable, "-m", "groundkit", "ingest", str(base), "-q"),
            *("--index-dir", str(index), "--base-dir", str(base)),
        ],
        capture_output=True,
        timeout=TIMEOUT,
        check=True,
        env=child_env(),
    )
    return index


@SIGNALS
async def test_a_signal_stops_grk_serve_over_http(index: Path, sig: signal.Signals) -> None:
    pytest.importorskip("uvicorn")
    import httpx2
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    from tests.service.conftest import free_port
    from tests.service.test_server import call

    port = free_port()

    async def search() -> None:
        # The server opens the collection for it: the signal finds it open.
        url = f"http://127.0.0.1:{port}/mcp"
        async with (
            httpx2.AsyncClient() as http,
            Client(streamable_http_client(url, http_client=http)) as client,
        ):
            assert (await call(client, "search", query="tides"))["results"]

    proc = await _started(
        _GRK,
        *("serve", "--index-dir", str(index), "--transport", "http", "--port", str(port)),
        stdin=asyncio.subprocess.DEVNULL,
    )
    # uvicorn stops serving on either signal; grk then ends as for Ctrl-C.
    _, err = await _signalled(
        proc, sig, said=b"serving 1 collection(s)", on_stderr=True, then=search
    )
    _ends_like_ctrl_c(proc, sig, err)
    # Closed, not abandoned, although uvicorn hands the signal back as the server closes
    # its collections.
    assert not (index / "default.sqlite3-wal").exists()


@pytest.mark.parametrize("command", ["serve", "inspect"])
async def test_a_signal_stops_an_http_server_with_a_request_body_still_coming(
    index: Path, command: str
) -> None:
    """A client that sent a request's head and part of its body held a stopping server for
    ever: the server waited on that request. It is cut off after a grace period, with one
    warning line, and grk ends as for Ctrl-C."""
    pytest.importorskip("uvicorn")
    from tests.service.conftest import free_port

    port = free_port()
    argv: tuple[str, ...]
    if command == "serve":
        argv = ("serve", "--index-dir", str(index), "--transport", "http", "--port", str(port))
        said, path = b"serving 1 collection(s)", "/mcp"
    else:
        argv = ("inspect", str(index), "--port", str(port))
        said, path = b"http://", "/c/default/answer"
    stalled: list[asyncio.StreamWriter] = []

    async def stall() -> None:
        _, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(
            f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n".encode()
            + b"Content-Type: application/x-www-form-urlencoded\r\n"
            + b"Content-Length: 100\r\n\r\nanswer="
        )
        await writer.drain()
        await asyncio.sleep(0.5)  # the request is in the application, reading its body
        stalled.append(writer)

    proc = await _started(_GRK, *argv, stdin=asyncio.subprocess.DEVNULL)
    try:
        _, err = await _signalled(proc, signal.SIGTERM, said=said, on_stderr=True, then=stall)
    finally:
        for writer in stalled:
            writer.close()
    _ends_like_ctrl_c(proc, signal.SIGTERM, err)
    assert b"still unfinished after 5 s were cut off" in err, err


@SIGNALS
async def test_a_signal_stops_grk_serve_over_stdio_with_stdin_open(
    index: Path, sig: signal.Signals
) -> None:
    pytest.importorskip("mcp")
    # The client keeps stdin open: the server must not wait for its next line to stop.
    proc = await _started(
        _GRK, *("serve", "--index-dir", str(index)), stdin=asyncio.subprocess.PIPE
    )
    assert proc.stdin is not None and proc.stdout is not None

    async def search() -> None:
        assert proc.stdin is not None and proc.stdout is not None
        client = {"name": "test", "version": "1"}
        for message in (
            {
                "id": 1,
                "method": "initialize",
                "params": {
                    "protocolVersion": "2025-06-18",
                    "capabilities": {},
                    "clientInfo": client,
                },
            },
            {"method": "notifications/initialized"},
            {
                "id": 2,
                "method": "tools/call",
                "params": {"name": "search", "arguments": {"query": "tides"}},
            },
        ):
            proc.stdin.write(json.dumps({"jsonrpc": "2.0", **message}).encode() + b"\n")
            await proc.stdin.drain()
            if "id" in message:
                reply = json.loads(await asyncio.wait_for(proc.stdout.readline(), TIMEOUT))
                assert reply["id"] == message["id"] and "result" in reply, reply
        # The search opened the collection: the signal finds it open.

    try:
        _, err = await _signalled(
            proc, sig, said=b"serving 1 collection(s)", on_stderr=True, then=search
        )
    finally:
        proc.stdin.close()
    _ends_like_ctrl_c(proc, sig, err)
    assert not (index / "default.sqlite3-wal").exists()


@pytest.mark.parametrize("stdin", ["null device", "closed"])
def test_grk_serve_over_stdio_ends_when_stdin_has_nothing(index: Path, stdin: str) -> None:
    pytest.importorskip("mcp")
    # The event loop cannot watch the null device (epoll refuses it): the server must
    # still read its end, not log the refusal and wait for ever. A stdin closed before
    # the start is an input already at its end: no traceback.
    command = [sys.executable, "-c", _GRK, "serve", "--index-dir", str(index)]
    if stdin == "null device":
        done = subprocess.run(
            command,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            env=child_env(),
            cwd=REPO,
            timeout=TIMEOUT,
        )
    else:
        done = subprocess.run(
            ["sh", "-c", 'exec "$@" <&-', "sh", *command],
            capture_output=True,
            env=child_env(),
            cwd=REPO,
            timeout=TIMEOUT,
        )
    assert done.returncode == 0, done.stderr
    assert done.stderr.strip().splitlines() == [
        b"grk: serving 1 collection(s) (default) over MCP: stdio"
    ]
    assert done.stdout == b""


def test_grk_serve_over_stdio_whose_client_stops_reading(index: Path) -> None:
    pytest.importorskip("mcp")
    # The client closes its end of our stdout and keeps talking: the SDK's writer fails
    # inside its task group, which reports the closed pipe wrapped in an exception group.
    # grk says it in one line, without a traceback.
    read_end, write_end = os.pipe()
    proc = subprocess.Popen(
        [sys.executable, "-c", _GRK, "serve", "--index-dir", str(index)],
        stdin=subprocess.PIPE,
        stdout=write_end,
        stderr=subprocess.PIPE,
        env=child_env(),
        cwd=REPO,
    )
    os.close(write_end)
    os.close(read_end)
    assert proc.stdin is not None
    hello = {"protocolVersion": "2025-06-18", "capabilities": {}}
    hello["clientInfo"] = {"name": "test", "version": "0"}
    messages = [
        {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": hello},
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "ping"},
    ]
    try:
        for message in messages:
            proc.stdin.write((json.dumps(message) + "\n").encode())
            proc.stdin.flush()
    except BrokenPipeError:
        pass  # the server may already have ended
    try:
        returncode = proc.wait(timeout=TIMEOUT)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        with contextlib.suppress(BrokenPipeError):
            proc.stdin.close()
    stderr = proc.stderr.read() if proc.stderr else b""
    assert returncode == 2, stderr
    assert b"Traceback" not in stderr and b"ExceptionGroup" not in stderr, stderr
    errors = [line for line in stderr.splitlines() if line.startswith(b"grk: error:")]
    assert errors == [b"grk: error: a pipe closed under the command ([Errno 32] Broken pipe)"]
