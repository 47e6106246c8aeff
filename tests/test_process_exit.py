"""A process that never closes a collection still exits, and keeps what it committed.

aiosqlite's worker thread used to be an ordinary thread, so an open collection kept
the interpreter waiting for it at exit, forever. Each case runs in a child process,
the way a script, the CLI or the MCP server ends, under a timeout: a hang fails the
test instead of stalling the suite. No bound is put on how long the exit takes.

A collection left open is a leak, named in a ``ResourceWarning`` (shown here with
``-W always::ResourceWarning``); one that was closed, or that the CLI and the server
close themselves, is not. What the child committed is searched for afterwards, from
this process.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from groundkit import Collection
from groundkit.storage import StoreLocation
from tests.support import ToyEmbedder, write_tree

REPO = Path(__file__).resolve().parents[1]
TIMEOUT = 120
STRAY = ("Traceback", "Event loop is closed", "Task exception was never retrieved")
LEFT_OPEN = "ResourceWarning: unclosed collection"
NOTES = {"tea.md": "Green tea is brewed at about eighty degrees.\n"}


def child_env() -> dict[str, str]:
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "LANCEDB_LOG": "error",
        "PYTHONIOENCODING": "utf-8",
        # The child imports tests.support (ToyEmbedder) whatever its directory.
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
    }
    env.pop("PYTHONWARNINGS", None)  # -W below decides what is shown
    return env


def python(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-W", "always::ResourceWarning", *args],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,  # a child that never exits fails here
        check=False,
        env=child_env(),
    )


def run_script(source: str, *args: str) -> subprocess.CompletedProcess[str]:
    return python("-c", textwrap.dedent(source), *args)


def assert_clean_exit(done: subprocess.CompletedProcess[str]) -> None:
    assert done.returncode == 0, done.stderr
    for needle in STRAY:
        assert needle not in done.stderr, done.stderr


def assert_left_open(done: subprocess.CompletedProcess[str], index: Path, name: str) -> None:
    """Exactly one warning, naming the collection and its index directory."""
    assert_clean_exit(done)
    lines = [line for line in done.stderr.splitlines() if LEFT_OPEN in line]
    assert len(lines) == 1, done.stderr
    assert f"{name!r}" in lines[0], lines[0]
    assert str(index.resolve()) in lines[0], lines[0]


def assert_not_left_open(done: subprocess.CompletedProcess[str]) -> None:
    assert_clean_exit(done)
    assert LEFT_OPEN not in done.stderr, done.stderr


def sources_found(index: Path, query: str) -> list[str]:
    """What a search in this process finds: the child's commits are in the files."""

    async def search() -> list[str]:
        async with Collection.open(index, create=False) as col:
            return [r.source for r in (await col.search(query)).results]

    return asyncio.run(search())


def assert_kept_and_closed(index: Path) -> None:
    """The child's commit is searchable, and its store was closed at exit, not merely
    abandoned: SQLite folded its WAL back into the file."""
    assert sources_found(index, "green tea") == ["tea.md"]
    assert not (index / "default.sqlite3-wal").exists()


@pytest.fixture
def base(tmp_path: Path) -> Path:
    folder = tmp_path / "base"
    write_tree(folder, NOTES)
    return folder


@pytest.fixture
def index(tmp_path: Path) -> Path:
    return tmp_path / "index"


# -- the async API ----------------------------------------------------------------


def test_a_collection_opened_by_asyncio_run_and_never_closed(index: Path, base: Path) -> None:
    # The README's own form: the collection outlives the loop it was opened on.
    done = run_script(
        """
        import asyncio, sys
        import groundkit

        col = asyncio.run(groundkit.Collection.open(sys.argv[1], base_dir=sys.argv[2]))
        print(col.name)
        """,
        str(index),
        str(base),
    )
    assert_left_open(done, index, "default")
    assert done.stdout.strip() == "default"


def test_an_ingest_and_a_search_then_exit_keep_what_was_committed(index: Path, base: Path) -> None:
    done = run_script(
        """
        import asyncio, sys
        import groundkit

        col = asyncio.run(groundkit.Collection.open(sys.argv[1], base_dir=sys.argv[2]))

        async def work():
            report = await col.ingest(sys.argv[2])
            assert report.added == ["tea.md"], report
            print([r.source for r in (await col.search("green tea")).results])

        asyncio.run(work())  # another loop, closed in turn; the collection stays open
        """,
        str(index),
        str(base),
    )
    assert_left_open(done, index, "default")
    assert "tea.md" in done.stdout
    assert_kept_and_closed(index)


def test_a_collection_dropped_unclosed_warns_when_collected(index: Path, base: Path) -> None:
    done = run_script(
        """
        import asyncio, gc, sys
        import groundkit

        async def work():
            col = await groundkit.Collection.open(sys.argv[1], base_dir=sys.argv[2])
            await col.ingest(sys.argv[2])

        asyncio.run(work())
        gc.collect()
        print("collected", file=sys.stderr, flush=True)
        """,
        str(index),
        str(base),
    )
    assert_left_open(done, index, "default")
    # Warned when the object went, not at exit; aiosqlite had nothing left to warn about.
    assert done.stderr.index(LEFT_OPEN) < done.stderr.index("collected"), done.stderr
    assert "was deleted before being closed" not in done.stderr, done.stderr
    assert sources_found(index, "green tea") == ["tea.md"]


def test_a_collection_left_open_by_another_thread(index: Path, base: Path) -> None:
    # Its loop ran and closed in a thread that has ended; the main thread holds it.
    done = run_script(
        """
        import asyncio, sys, threading
        import groundkit

        kept = []

        def worker():
            async def work():
                col = await groundkit.Collection.open(sys.argv[1], base_dir=sys.argv[2])
                await col.ingest(sys.argv[2])
                kept.append(col)

            asyncio.run(work())

        thread = threading.Thread(target=worker)
        thread.start()
        thread.join()
        """,
        str(index),
        str(base),
    )
    assert_left_open(done, index, "default")
    assert_kept_and_closed(index)


def test_a_closed_collection_is_not_reported(index: Path, base: Path) -> None:
    done = run_script(
        """
        import asyncio, gc, sys
        import groundkit

        async def work():
            async with groundkit.Collection.open(sys.argv[1], base_dir=sys.argv[2]) as col:
                await col.ingest(sys.argv[2])
            again = await groundkit.Collection.open(sys.argv[1])
            await again.close()
            return again

        kept = asyncio.run(work())
        gc.collect()
        """,
        str(index),
        str(base),
    )
    assert_not_left_open(done)
    assert sources_found(index, "green tea") == ["tea.md"]


def test_a_dense_collection_left_open_exits_too(index: Path, base: Path) -> None:
    # LanceDB's own threads never held the process; its vectors are kept like the rest.
    done = run_script(
        """
        import asyncio, sys
        import groundkit
        from tests.support import ToyEmbedder

        async def work():
            col = await groundkit.Collection.open(
                sys.argv[1], base_dir=sys.argv[2], embedder=ToyEmbedder()
            )
            await col.ingest(sys.argv[2])
            return col

        col = asyncio.run(work())
        """,
        str(index),
        str(base),
    )
    assert_left_open(done, index, "default")

    async def dense() -> list[str]:
        async with Collection.open(index, create=False, embedder=ToyEmbedder()) as col:
            found = await col.search("green tea", mode="dense")
            return [r.source for r in found.results]

    assert asyncio.run(dense()) == ["tea.md"]


def test_a_shared_collection_left_open_exits_too(
    postgres_dsn: str, fresh: str, tmp_path: Path, base: Path
) -> None:
    # asyncpg holds no thread: the process exits; its sockets close with it.
    storage = tmp_path / "shared"
    done = run_script(
        """
        import asyncio, sys
        import groundkit

        async def work():
            col = await groundkit.Collection.open(
                name=sys.argv[1], metadata_url=sys.argv[2], storage_uri=sys.argv[3],
                base_dir=sys.argv[4],
            )
            await col.ingest(sys.argv[4])
            return col

        col = asyncio.run(work())
        """,
        fresh,
        postgres_dsn,
        str(storage),
        str(base),
    )
    assert_clean_exit(done)
    lines = [line for line in done.stderr.splitlines() if LEFT_OPEN in line]
    assert len(lines) == 1 and repr(fresh) in lines[0], done.stderr
    assert "postgresql://" in lines[0] and postgres_dsn not in lines[0]  # no password

    async def search() -> list[str]:
        where = StoreLocation.resolve(fresh, metadata_url=postgres_dsn, storage_uri=storage)
        async with Collection.open(location=where, create=False, base_dir=base) as col:
            return [r.source for r in (await col.search("green tea")).results]

    assert asyncio.run(search()) == ["tea.md"]


# -- groundkit.sync ---------------------------------------------------------------


def test_a_sync_collection_never_closed(index: Path, base: Path) -> None:
    done = run_script(
        """
        import sys
        import groundkit.sync as gks

        col = gks.Collection.open(sys.argv[1], base_dir=sys.argv[2])
        assert col.ingest(sys.argv[2]).added == ["tea.md"]
        print([r.source for r in col.search("green tea").results])
        """,
        str(index),
        str(base),
    )
    # Closed by groundkit.sync's exit hook, and still reported: it was left open.
    assert_left_open(done, index, "default")
    assert "tea.md" in done.stdout
    assert_kept_and_closed(index)


def test_a_closed_sync_collection_is_not_reported(index: Path, base: Path) -> None:
    done = run_script(
        """
        import sys
        import groundkit.sync as gks

        with gks.Collection.open(sys.argv[1], base_dir=sys.argv[2]) as col:
            col.ingest(sys.argv[2])
        other = gks.Collection.open(sys.argv[1])
        other.close()
        """,
        str(index),
        str(base),
    )
    assert_not_left_open(done)
    assert sources_found(index, "green tea") == ["tea.md"]


# -- the CLI and the MCP server ---------------------------------------------------


def test_the_cli_exits_and_closes_what_it_opened(index: Path, base: Path) -> None:
    where = ("--index-dir", str(index), "--base-dir", str(base))
    ingested = python("-m", "groundkit", *where, "ingest", str(base))
    assert_not_left_open(ingested)
    searched = python("-m", "groundkit", *where, "--json", "search", "green tea")
    assert_not_left_open(searched)
    assert "tea.md" in searched.stdout
    assert sources_found(index, "green tea") == ["tea.md"]


def _rpc(message: dict[str, Any]) -> bytes:
    return (json.dumps(message) + "\n").encode("utf-8")


async def _serve_over_stdio(index: Path, base: Path, *, in_flight: bool) -> tuple[int, str, str]:
    """``grk serve`` over stdio: initialize, search, then end its stdin.

    Answered: the search's answer is read before stdin ends. In flight: three searches
    are written and stdin ends at once, with them queued or running. Returns the exit
    code, what was read of stdout, and stderr."""
    from mcp.types import LATEST_PROTOCOL_VERSION

    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-W",
        "always::ResourceWarning",
        "-m",
        "groundkit",
        "serve",
        "--index-dir",
        str(index),
        "--base-dir",
        str(base),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=child_env(),
    )
    assert proc.stdin is not None and proc.stdout is not None
    try:
        hello = {
            "protocolVersion": LATEST_PROTOCOL_VERSION,
            "capabilities": {},
            "clientInfo": {"name": "test_process_exit", "version": "0"},
        }
        proc.stdin.write(_rpc({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": hello}))
        read = [await asyncio.wait_for(proc.stdout.readline(), TIMEOUT)]
        proc.stdin.write(_rpc({"jsonrpc": "2.0", "method": "notifications/initialized"}))
        call = {"name": "search", "arguments": {"query": "green tea"}}
        for n in range(2, 5 if in_flight else 3):
            proc.stdin.write(
                _rpc({"jsonrpc": "2.0", "id": n, "method": "tools/call", "params": call})
            )
        await proc.stdin.drain()
        if not in_flight:
            read.append(await asyncio.wait_for(proc.stdout.readline(), TIMEOUT))
        proc.stdin.close()  # the client goes away; a server that stays fails here
        rest, err = await asyncio.wait_for(proc.communicate(), TIMEOUT)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    out = b"".join([*read, rest]).decode("utf-8")
    assert proc.returncode is not None
    return proc.returncode, out, err.decode("utf-8")


@pytest.mark.parametrize("in_flight", [False, True], ids=["answered", "in-flight"])
def test_the_mcp_server_exits_when_its_stdin_closes(
    index: Path, base: Path, in_flight: bool
) -> None:
    pytest.importorskip("mcp")
    where = ("--index-dir", str(index), "--base-dir", str(base))
    assert_not_left_open(python("-m", "groundkit", *where, "ingest", str(base)))
    code, out, err = asyncio.run(_serve_over_stdio(index, base, in_flight=in_flight))
    done = subprocess.CompletedProcess(["grk", "serve"], code, out, err)
    assert_not_left_open(done)
    assert "serving 1 collection(s)" in err
    answers = [json.loads(line) for line in out.splitlines() if line.strip()]
    assert answers and answers[0]["id"] == 1, out
    if not in_flight:
        assert answers[1]["id"] == 2 and "tea.md" in json.dumps(answers[1]), out
    assert sources_found(index, "green tea") == ["tea.md"]
