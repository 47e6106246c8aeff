"""``grk serve`` as a real subprocess, driven by the MCP SDK's own client over stdio and HTTP."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import httpx2
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client

from tests.service.conftest import Served, free_port
from tests.service.test_server import call, refused
from tests.support import write_tree

GRK = Path(sys.executable).with_name("grk")
TOKEN = "e2e-token-0123456789abcdef"


def child_env(**extra: str) -> dict[str, str]:
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "HF_HUB_DISABLE_PROGRESS_BARS": "1",
        "LANCEDB_LOG": "error",
        "PYTHONIOENCODING": "utf-8",
        **extra,
    }
    if "GROUNDKIT_SERVE_TOKEN" not in extra:
        env.pop("GROUNDKIT_SERVE_TOKEN", None)
    return env


def serve_args(served: Served, *extra: str) -> list[str]:
    return ["serve", "--index-dir", str(served.index), "--base-dir", str(served.base), *extra]


async def exercise(client: Client, served: Served) -> None:
    """The issue's walk: search, fetch verified, edit, fetch drifted, bad arguments."""
    found = await call(client, "search", query="boiling water tea", top_k=2)
    top = found["results"][0]
    assert top["citation"]["source"] == "docs/kitchen/tea.rst"
    chunk_id = top["citation"]["chunk_id"]
    assert (await call(client, "fetch_chunk", chunk_id=chunk_id))["verification"] == "verified"
    served.source("docs/kitchen/tea.rst").write_text("Tea was replaced by coffee.\n", "utf-8")
    drifted = await call(client, "fetch_chunk", chunk_id=chunk_id)
    assert drifted["verification"] == "drifted"
    assert drifted["content"] == top["content"]
    assert "top_k" in await refused(client, "search", query="tea", top_k=-1)
    assert "query" in await refused(client, "search", top_k=3)
    assert "'recipes'" in await refused(client, "search", query="tea", collection="recipes")
    listed = await call(client, "list_collections")
    assert [c["name"] for c in listed["collections"]] == ["default", "notes"]


async def test_stdio(served: Served, tmp_path: Path) -> None:
    params = StdioServerParameters(
        command=str(GRK), args=serve_args(served), env=child_env(), cwd=str(tmp_path)
    )
    log = tmp_path / "stderr.log"
    with log.open("w", encoding="utf-8") as errlog:
        async with Client(stdio_client(params, errlog=errlog)) as client:
            await exercise(client, served)
    assert "serving 2 collection(s)" in log.read_text(encoding="utf-8")


async def _wait_until_listening(port: int, proc: asyncio.subprocess.Process, log: Path) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.returncode is not None:
            raise AssertionError(f"grk serve exited {proc.returncode}: {log.read_text('utf-8')}")
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return
        await asyncio.sleep(0.1)
    raise AssertionError(f"grk serve did not listen on {port}: {log.read_text('utf-8')}")


async def test_streamable_http_with_a_token(served: Served, tmp_path: Path) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}/mcp"
    log = tmp_path / "serve.log"
    with log.open("wb") as sink:
        proc = await asyncio.create_subprocess_exec(
            str(GRK),
            *serve_args(served, "--transport", "http", "--port", str(port)),
            env=child_env(GROUNDKIT_SERVE_TOKEN=TOKEN),
            stdin=subprocess.DEVNULL,
            stdout=sink,
            stderr=sink,
        )
    try:
        await _wait_until_listening(port, proc, log)
        initialize: dict[str, Any] = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "tools/call",
            "params": {"name": "search", "arguments": {"query": "tea"}},
        }
        accept = {"Accept": "application/json, text/event-stream"}
        async with httpx.AsyncClient() as raw:
            for headers in ({}, {"Authorization": "Bearer not-the-token-0123456789"}):
                response = await raw.post(url, json=initialize, headers={**accept, **headers})
                assert response.status_code == 401
                body = response.json()
                assert body["error"] == "invalid_token"
                assert "static bearer token" in body["error_description"]
                assert "no OAuth" in response.headers["www-authenticate"]
            # An MCP client's OAuth discovery finds nothing, and is told why.
            for path in ("oauth-protected-resource/mcp", "oauth-authorization-server"):
                found = await raw.get(f"http://127.0.0.1:{port}/.well-known/{path}")
                assert found.status_code == 404
                assert "static bearer token" in found.json()["error_description"]
        auth = {"Authorization": f"Bearer {TOKEN}"}
        async with httpx.AsyncClient() as raw:
            # Token right, but the Host of another site (DNS rebinding): refused.
            headers = {**accept, **auth, "Host": "attacker.example"}
            response = await raw.post(url, json=initialize, headers=headers)
            assert response.status_code == 421
        async with (
            httpx2.AsyncClient(headers=auth) as http,
            Client(streamable_http_client(url, http_client=http)) as client,
        ):
            await exercise(client, served)
            # Re-ingested by another process while the server runs: seen next request.
            write_tree(served.base, {"docs/lab/kiln.txt": "The kiln fires clay at night.\n"})
            ingest = await asyncio.create_subprocess_exec(
                str(GRK),
                *("ingest", str(served.base / "docs"), "-q"),
                *("--index-dir", str(served.index), "--base-dir", str(served.base)),
                env=child_env(),
                stderr=subprocess.PIPE,
            )
            _, err = await ingest.communicate()
            assert ingest.returncode == 0, err
            hits = (await call(client, "search", query="kiln clay"))["results"]
            assert hits[0]["citation"]["source"] == "docs/lab/kiln.txt"
    finally:
        if proc.returncode is None:
            proc.terminate()
        await asyncio.wait_for(proc.wait(), 20)
    text = log.read_text(encoding="utf-8")
    assert "Traceback" not in text
    assert "kiln clay" not in text and "boiling water tea" not in text


def run(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        list(argv), env=child_env(), capture_output=True, text=True, timeout=60, check=False
    )


def test_http_off_loopback_needs_a_token(served: Served) -> None:
    done = run(str(GRK), *serve_args(served, "--transport", "http", "--host", "0.0.0.0"))
    assert done.returncode == 2
    assert "GROUNDKIT_SERVE_TOKEN" in done.stderr and "Traceback" not in done.stderr


def test_serve_without_the_extra_names_it(served: Served) -> None:
    code = (
        "import sys; sys.modules['mcp'] = None; sys.modules['mcp.server.mcpserver'] = None; "
        "from groundkit.cli import main; sys.exit(main(sys.argv[1:]))"
    )
    done = run(sys.executable, "-c", code, *serve_args(served))
    assert done.returncode == 2
    assert "pip install groundkit[serve]" in done.stderr and "Traceback" not in done.stderr


def test_serve_an_empty_index_is_an_error(tmp_path: Path) -> None:
    done = run(str(GRK), "serve", "--index-dir", str(tmp_path / "none"))
    assert done.returncode == 2 and "no collections" in done.stderr


async def test_stdio_survives_filters_nested_too_deep_to_parse(served: Served) -> None:
    """A request nested 5,000 deep, then one 100 deep, then a plain search, as raw
    JSON-RPC lines (the SDK client cannot even serialise the first)."""
    proc = await asyncio.create_subprocess_exec(
        str(GRK),
        *serve_args(served),
        env=child_env(),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None

    async def send(line: str) -> None:
        assert proc.stdin is not None
        proc.stdin.write(line.encode("utf-8") + b"\n")
        await proc.stdin.drain()

    def search(request_id: int, filters: str) -> str:
        arguments = '{"query": "boiling water", "filters": ' + filters + "}"
        return (
            f'{{"jsonrpc": "2.0", "id": {request_id}, "method": "tools/call", '
            f'"params": {{"name": "search", "arguments": {arguments}}}}}'
        )

    def nested(depth: int) -> str:
        return '{"team": ' + '{"eq": ' * depth + "1" + "}" * (depth + 1)

    try:
        client = {"name": "raw", "version": "0"}
        hello = {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": client}
        await send(json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": hello}))
        assert json.loads(await asyncio.wait_for(proc.stdout.readline(), 60))["id"] == 1
        await send(json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}))
        await send(search(2, nested(5000)))
        await send(search(3, nested(100)))
        await send(search(4, "null"))
        answers: dict[int, Any] = {}
        while 4 not in answers or 3 not in answers:
            message = json.loads(await asyncio.wait_for(proc.stdout.readline(), 60))
            answers[message["id"]] = message["result"]
    finally:
        proc.stdin.close()
        _, err = await asyncio.wait_for(proc.communicate(), 60)
    # The message nested 5,000 deep is dropped by the SDK's JSON parser before any
    # tool sees it; the one it can parse is refused by the filter limits.
    assert answers[3]["isError"] is True
    assert "filters nest more than 3 levels deep" in answers[3]["content"][0]["text"]
    assert answers[4]["isError"] is False
    assert answers[4]["structuredContent"]["results"][0]["citation"]["source"] == (
        "docs/kitchen/tea.rst"
    )
    assert proc.returncode == 0
    assert "Traceback" not in err.decode("utf-8")
