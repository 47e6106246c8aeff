"""The MCP Inspector's CLI, an outside client, lists and calls every tool of `grk serve`.

Over stdio (the Inspector starts the server) and over streamable HTTP with a bearer
token. Runs wherever `npx` is on the PATH, and must run under CI (`.ci/run` installs
node and npm when the machine has none). The Inspector's version is pinned.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.services import free_port, unavailable
from tests.support import write_tree

INSPECTOR = "@modelcontextprotocol/inspector@2.12.0"
TOKEN = "inspector-test-token-0123456789"
TOOLS = {"search", "search_collections", "fetch_chunk", "list_collections", "verify_answer"}


@pytest.fixture(scope="module")
def npx() -> str:
    found = shutil.which("npx")
    if found is None:
        unavailable("npx (node) is not installed; the MCP Inspector test needs it")
    return found


@pytest.fixture(scope="module")
def index(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("inspector")
    write_tree(
        root / "docs",
        {
            "tea.md": "---\ntitle: Tea\n---\nGreen tea is brewed at about 80 degrees.\n",
            "coffee.txt": "Espresso is brewed with water at about 93 degrees under pressure.\n",
        },
    )
    done = subprocess.run(
        [sys.executable, "-m", "groundkit", "ingest", "docs", "--index-dir", "idx", "-q"],
        cwd=root,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return root / "idx"


def _server_command(index: Path) -> list[str]:
    return [sys.executable, "-m", "groundkit", "serve", "--index-dir", str(index), "-q"]


def _stdio_target(index: Path) -> list[str]:
    # The Inspector starts the server with a minimal environment: pass on what it needs.
    passed = [
        part
        for name in ("PYTHONPATH", "HF_HUB_OFFLINE", "LANCEDB_LOG")
        if os.environ.get(name)
        for part in ("-e", f"{name}={os.environ[name]}")
    ]
    return [*passed, "--", *_server_command(index)]


def _ordered(target: list[str], options: tuple[str, ...]) -> list[str]:
    """A URL goes before the options (``--tool-arg`` takes every word after it); a
    command after them (it takes every word after ``--``)."""
    if target and target[0].startswith("http"):
        return [*target, *options]
    return [*options, *target]


# The Inspector CLI's exit code when the tool call itself returned isError.
_TOOL_IS_ERROR = 5


def inspect(npx: str, target: list[str], *options: str, tool_error: bool = False) -> dict[str, Any]:
    """One Inspector CLI call; its JSON output."""
    done = subprocess.run(
        [npx, "-y", INSPECTOR, "--cli", *_ordered(target, options)],
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
        env={**os.environ, "npm_config_update_notifier": "false", "npm_config_fund": "false"},
    )
    assert done.returncode == (_TOOL_IS_ERROR if tool_error else 0), (done.stdout, done.stderr)
    parsed: dict[str, Any] = json.loads(done.stdout)
    return parsed


def _call(npx: str, target: list[str], tool: str, *args: str) -> dict[str, Any]:
    options = ["--method", "tools/call", "--tool-name", tool]
    if args:
        options += ["--tool-arg", *args]
    result = inspect(npx, target, *options)
    assert result.get("isError") is not True, result
    return result


def _every_tool(npx: str, target: list[str]) -> None:
    listed = inspect(npx, target, "--method", "tools/list")["tools"]
    assert {t["name"] for t in listed} == TOOLS
    for tool in listed:
        notes = tool["annotations"]
        assert notes["readOnlyHint"] is True and notes["destructiveHint"] is False
        assert notes["title"] == tool["title"]
        assert "\n " not in tool["description"]  # dedented
        assert tool["outputSchema"]["type"] == "object"
    found = _call(npx, target, "search", "query=green tea")
    structured = found["structuredContent"]
    assert structured["results"][0]["citation"]["source"] == "docs/tea.md"
    text = found["content"][0]["text"]
    chunk_id = structured["results"][0]["citation"]["chunk_id"]
    # The compact text block: one line per result with source, offsets and chunk id.
    assert "[1] docs/tea.md [0:" in text and f"chunk_id {chunk_id}" in text
    assert len(text) < len(json.dumps(structured, indent=2))
    fused = _call(npx, target, "search_collections", "query=brewed", 'collections=["default"]')
    assert fused["structuredContent"]["failures"] == []
    fetched = _call(npx, target, "fetch_chunk", f"chunk_id={chunk_id}")
    assert fetched["structuredContent"]["verification"] == "verified"
    assert fetched["content"][0]["text"].startswith("verified: docs/tea.md")
    listed_collections = _call(npx, target, "list_collections")["structuredContent"]
    assert [c["name"] for c in listed_collections["collections"]] == ["default"]
    # A refused call is a tool error of the one style.
    bad = inspect(
        npx,
        target,
        "--method",
        "tools/call",
        "--tool-name",
        "search",
        "--tool-arg",
        "query=x",
        "top_k=0",
        tool_error=True,
    )
    assert bad["isError"] is True
    assert bad["content"][0]["text"].startswith("search failed (invalid arguments): top_k")


def test_inspector_over_stdio(npx: str, index: Path) -> None:
    _every_tool(npx, _stdio_target(index))


@pytest.fixture
def http_server(index: Path) -> Iterator[str]:
    port = free_port()
    proc = subprocess.Popen(
        [*_server_command(index), "--transport", "http", "--port", str(port)],
        env={**os.environ, "GROUNDKIT_SERVE_TOKEN": TOKEN},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        import socket

        while time.monotonic() < deadline:
            assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
            with socket.socket() as probe:
                if probe.connect_ex(("127.0.0.1", port)) == 0:
                    break
            time.sleep(0.2)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_inspector_over_http_with_a_token(npx: str, http_server: str) -> None:
    target = [http_server, "--transport", "http", "--header", f"Authorization: Bearer {TOKEN}"]
    _every_tool(npx, target)


def test_inspector_without_the_token_is_told_a_static_token_is_required(
    npx: str, http_server: str
) -> None:
    done = subprocess.run(
        [
            npx,
            "-y",
            INSPECTOR,
            "--cli",
            http_server,
            "--transport",
            "http",
            "--stored-auth-only",
            "--method",
            "tools/list",
        ],
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    assert done.returncode != 0
    assert "static bearer token" in done.stdout + done.stderr
