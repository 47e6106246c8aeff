"""Nothing is printed on stderr after a failure but the failure itself.

aiosqlite runs each connection's calls on a thread of its own, which hands results
back through the event loop. A thread still busy when the loop closes dies with
"Event loop is closed" on stderr. Each case runs in a child process, the way a
CLI run or a server ends, and its stderr must hold no traceback at all.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

STRAY = ("Traceback", "Event loop is closed", "Task exception was never retrieved")


def run_script(source: str, *args: str) -> subprocess.CompletedProcess[str]:
    code = textwrap.dedent(source)
    return subprocess.run(
        [sys.executable, "-c", code, *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def assert_clean(done: subprocess.CompletedProcess[str]) -> None:
    assert done.returncode == 0, done.stderr
    for needle in STRAY:
        assert needle not in done.stderr, done.stderr


def test_a_failed_open_leaves_no_sqlite_thread_behind(tmp_path: Path) -> None:
    # A directory where the SQLite file should be: every open fails. Before the
    # fix about one open in four left a thread that outlived its event loop.
    target = tmp_path / "default.sqlite3"
    target.mkdir()
    done = run_script(
        """
        import asyncio, sys
        from pathlib import Path
        from groundkit import StorageError
        from groundkit.storage import SQLiteMetadataStore

        async def once():
            try:
                await SQLiteMetadataStore.open(Path(sys.argv[1]))
            except StorageError:
                return
            raise SystemExit("opened a directory")

        for _ in range(200):
            asyncio.run(once())
        """,
        str(target),
    )
    assert_clean(done)


def test_a_request_cancelled_mid_read_ends_its_sqlite_thread_before_the_loop(
    tmp_path: Path,
) -> None:
    # As when a server stops with a request in flight: the request's task is
    # cancelled (anyio: again at every await, so its cleanup is cancelled too)
    # while its statement is still running on aiosqlite's thread. Here the
    # statement waits for another connection's write lock, released 1 s after
    # the cancellation, long after the event loop would have closed.
    done = run_script(
        """
        import sqlite3, sys, threading
        from pathlib import Path
        import anyio
        from groundkit.storage import SQLiteMetadataStore

        path = Path(sys.argv[1])

        async def create():
            await (await SQLiteMetadataStore.open(path)).close()

        async def request():
            store = await SQLiteMetadataStore.open(path)
            try:
                await store.set_base_dir("elsewhere")  # waits for the write lock
            finally:
                await store.close()

        async def serve():
            async with anyio.create_task_group() as group:
                group.start_soon(request)
                await anyio.sleep(0.5)
                group.cancel_scope.cancel()

        anyio.run(create)
        holder = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        holder.execute("BEGIN IMMEDIATE")

        def release():
            holder.execute("ROLLBACK")
            holder.close()

        timer = threading.Timer(1.5, release)
        timer.start()
        anyio.run(serve)
        timer.join()
        """,
        str(tmp_path / "busy.sqlite3"),
    )
    assert_clean(done)
