"""groundkit.sync: the async API driven by one background loop, from scripts, threads
and a running event loop; and ``Collection.open`` as a plain coroutine."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

import groundkit
import groundkit.sync as gks
from groundkit import ConfigurationError, Record, RetrievalError
from tests.services import REPO_ROOT

TEXTS = {
    "green": "Green tea is brewed at about 80 degrees.",
    "black": "Black tea wants boiling water and four minutes.",
    "oolong": "Oolong is rolled, then roasted briefly.",
}


def write_notes(base: Path) -> None:
    (base / "notes").mkdir(parents=True, exist_ok=True)
    for name, text in TEXTS.items():
        (base / "notes" / f"{name}.md").write_text(text + "\n", encoding="utf-8")


def test_open_is_a_coroutine_asyncio_run_accepts(tmp_path: Path) -> None:
    write_notes(tmp_path)
    col = asyncio.run(groundkit.Collection.open(tmp_path / "idx", base_dir=tmp_path))
    assert isinstance(col, groundkit.Collection)
    assert asyncio.run(col.ingest(tmp_path / "notes")).added == [
        "notes/black.md",
        "notes/green.md",
        "notes/oolong.md",
    ]
    asyncio.run(col.close())


async def test_open_is_still_awaitable_and_an_async_context_manager(tmp_path: Path) -> None:
    col = await groundkit.Collection.open(tmp_path / "idx", base_dir=tmp_path)
    await col.close()
    async with groundkit.Collection.open(tmp_path / "idx", base_dir=tmp_path) as col:
        assert await col.generation() == 0
    task = asyncio.create_task(groundkit.Collection.open(tmp_path / "idx", base_dir=tmp_path))
    await (await task).close()


def test_sync_round_trip_from_a_plain_function(tmp_path: Path) -> None:
    write_notes(tmp_path)
    with gks.Collection.open(tmp_path / "idx", base_dir=tmp_path) as col:
        assert col.ingest(tmp_path / "notes").added
        response = col.search("boiling water", top_k=2)
        top = response.results[0]
        assert top.source == "notes/black.md"
        assert gks.check_citation(top.citation, top.content, col.base_dir).ok
        assert col.fetch_chunk(top.chunk_id).verification == "verified"
        assert col.verify_all().ok
        assert gks.check_quote("four minutes", top, col.base_dir).verdict == "verified"
        # The async API's own errors, raised in the caller's thread.
        with pytest.raises(RetrievalError, match="empty"):
            col.search("   ")
    assert col.closed
    with pytest.raises(groundkit.StorageError):
        col.search("tea")


def test_the_deprecated_yes_no_checks_warn_in_the_callers_thread(tmp_path: Path) -> None:
    write_notes(tmp_path)
    with gks.Collection.open(tmp_path / "idx", base_dir=tmp_path) as col:
        col.ingest(tmp_path / "notes")
        top = col.search("boiling water", top_k=1).results[0]
        with pytest.warns(DeprecationWarning, match="use check_citation") as caught:
            assert gks.verify_citation(top.citation, top.content, col.base_dir) is True
        assert caught[0].filename == __file__  # pointed at the call, not at groundkit
        with pytest.warns(DeprecationWarning, match="use check_quote"):
            assert gks.verify_quote("four minutes", top, col.base_dir) is True
        (tmp_path / "notes" / "black.md").write_text("New line.\n" + TEXTS["black"], "utf-8")
        moved = gks.check_citation(top.citation, top.content, col.base_dir)
        assert moved.verification == "moved" and moved == col.verify(top)
        with pytest.warns(DeprecationWarning):
            assert gks.verify_citation(top.citation, top.content, col.base_dir) is False


def test_the_sync_class_is_the_async_one_driven_not_a_copy() -> None:
    # Every blocking method wraps the async method of the same name.
    for name in (
        "ingest",
        "add_documents",
        "delete_documents",
        "search",
        "fetch_chunk",
        "verify",
        "verify_all",
    ):
        method = getattr(gks.SyncCollection, name)
        assert method.__wrapped__ is getattr(groundkit.Collection, name)
    assert gks.Collection is gks.SyncCollection
    for name in ("check_citation", "resolve_citation", "check_quote", "verify_answer"):
        assert getattr(gks, name).__wrapped__ is getattr(groundkit, name)


def test_many_threads_share_one_collection(tmp_path: Path) -> None:
    write_notes(tmp_path)
    with gks.Collection.open(tmp_path / "idx", base_dir=tmp_path) as col:
        col.ingest(tmp_path / "notes")

        def work(i: int) -> tuple[str, str]:
            col.add_documents([Record(id=f"t{i}", text=f"Ticket {i}: the kettle number {i}.")])
            hit = col.search(f"kettle number {i}", top_k=1).results[0]
            return hit.source, col.fetch_chunk(hit.chunk_id).verification

        with ThreadPoolExecutor(max_workers=8) as pool:
            outcomes = list(pool.map(work, range(24)))
        assert all(verdict == "verified" for _, verdict in outcomes)
        assert col.search("kettle", top_k=100).total_results == 24
    # Each thread may also open its own collection.

    def own(i: int) -> int:
        with gks.Collection.open(tmp_path / "idx", f"c{i}", base_dir=tmp_path) as mine:
            mine.add_documents([{"id": "x", "text": f"collection {i} of many"}])
            return mine.search("collection many").total_results

    with ThreadPoolExecutor(max_workers=4) as pool:
        assert list(pool.map(own, range(8))) == [1] * 8


async def test_usable_inside_a_running_event_loop(tmp_path: Path) -> None:
    # What a Jupyter cell does: blocking calls while the notebook's loop runs.
    write_notes(tmp_path)
    col = gks.Collection.open(tmp_path / "idx", base_dir=tmp_path)
    try:
        col.ingest(tmp_path / "notes")
        assert col.search("roasted").results[0].source == "notes/oolong.md"
        # The loop stays usable meanwhile and afterwards.
        await asyncio.sleep(0)
        # Async code may await the sync collection's own collection on its loop.
        response = await gks.run_async(col.aio.search("green tea"), home=gks.background_loop())
        assert response.results[0].source == "notes/green.md"
    finally:
        col.close()


def test_a_blocking_call_from_groundkits_own_loop_is_refused(tmp_path: Path) -> None:
    async def nested() -> None:
        gks.Collection.open(tmp_path / "idx", base_dir=tmp_path)

    with pytest.raises(ConfigurationError, match="await the async API"):
        gks.run(nested())


def test_an_async_collection_on_another_threads_loop_is_reached_there(tmp_path: Path) -> None:
    write_notes(tmp_path)
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        opened = asyncio.run_coroutine_threadsafe(
            groundkit.Collection.open(tmp_path / "idx", base_dir=tmp_path), loop
        ).result()
        assert opened.loop is loop
        gks.run(opened.ingest(tmp_path / "notes"), home=opened.loop)
        hit = gks.run(opened.search("boiling"), home=opened.loop).results[0]
        assert hit.source == "notes/black.md"

        async def on_its_loop() -> None:
            with pytest.raises(ConfigurationError, match="owns the object"):
                gks.run(opened.search("tea"), home=opened.loop)

        asyncio.run_coroutine_threadsafe(on_its_loop(), loop).result()
        gks.run(opened.close(), home=opened.loop)
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join()
        loop.close()


def test_sync_search_collections(tmp_path: Path) -> None:
    with (
        gks.Collection.open(tmp_path / "idx", "a", base_dir=tmp_path) as a,
        gks.Collection.open(tmp_path / "idx", "b", base_dir=tmp_path) as b,
    ):
        a.add_documents([{"id": "1", "text": "kettles boil water"}])
        b.add_documents([{"id": "1", "text": "water for the kettle"}])
        fused = gks.search_collections([a, b], "kettle water")
        assert {r.collection for r in fused.results} == {"a", "b"}
        assert fused.complete


SCRIPT = """
import sys
import groundkit.sync as gks
col = gks.Collection.open(sys.argv[1], base_dir=sys.argv[2])
col.add_documents([{"id": "note", "text": "A script that never closes its collection."}])
print(col.search("never closes").results[0].source)
"""


def test_a_script_that_forgets_close_still_exits(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(tmp_path / "idx"), str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO_ROOT,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "record://note"
    assert done.stderr == ""


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_forked_child_gets_its_own_loop(tmp_path: Path) -> None:
    gks.run(asyncio.sleep(0))  # the parent's loop exists before the fork
    code = f"""
import os, sys
import groundkit.sync as gks
import asyncio
gks.run(asyncio.sleep(0))
pid = os.fork()
if pid == 0:
    with gks.Collection.open({str(tmp_path / "idx")!r}, base_dir={str(tmp_path)!r}) as col:
        col.add_documents([{{"id": "child", "text": "written after a fork"}}])
        os._exit(0 if col.search("fork").total_results == 1 else 3)
_, status = os.waitpid(pid, 0)
sys.exit(os.waitstatus_to_exitcode(status))
"""
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr


INHERITED = """
import os, sys
import groundkit
import groundkit.sync as gks
index, base = sys.argv[1], sys.argv[2]
with gks.Collection.open(index, base_dir=base) as col:
    col.add_documents([{"id": "parent", "text": "written before a fork"}])
    pid = os.fork()
    if pid == 0:
        try:
            col.search("fork")
            os._exit(3)  # answered on a loop the child does not run: impossible
        except groundkit.ConfigurationError as exc:
            if "open the collection again in this process" not in str(exc):
                os._exit(4)
        col.close()  # the parent's to close: a no-op here, not a hang or an error
        with gks.Collection.open(index, base_dir=base) as own:
            os._exit(0 if own.search("fork").total_results == 1 else 5)
    _, status = os.waitpid(pid, 0)
    code = os.waitstatus_to_exitcode(status)
    # The parent's collection still works after the child is gone.
    assert col.search("fork").total_results == 1
sys.exit(code)
"""


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_collection_inherited_through_fork_is_refused_not_hung(tmp_path: Path) -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-W",
            "ignore::DeprecationWarning",
            "-c",
            INHERITED,
            str(tmp_path / "idx"),
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr


INTERRUPTED = """
import asyncio, sys, time
import groundkit.sync as gks

async def long() -> None:
    print("ready", flush=True)  # running on groundkit's loop now
    try:
        await asyncio.sleep(60)
    except asyncio.CancelledError:
        with open(sys.argv[1], "w") as out:
            out.write("cancelled")
        raise

try:
    gks.run(long())
except KeyboardInterrupt:
    time.sleep(1)
    print("interrupted", flush=True)
"""


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")
def test_ctrl_c_cancels_the_call_it_interrupts(tmp_path: Path) -> None:
    import signal

    marker = tmp_path / "marker"
    child = subprocess.Popen(
        [sys.executable, "-c", INTERRUPTED, str(marker)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        # A runner started in the background ignores SIGINT, and a child inherits that
        # (Python then installs no KeyboardInterrupt handler): give it the default back.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    assert child.stdout is not None
    assert child.stdout.readline().strip() == "ready"
    child.send_signal(signal.SIGINT)
    out, err = child.communicate(timeout=60)
    assert child.returncode == 0, err
    assert "interrupted" in out
    assert marker.read_text() == "cancelled"
