"""groundkit.sync: the async API driven by one background loop, from scripts, threads
and a running event loop; and ``Collection.open`` as a plain coroutine."""

from __future__ import annotations

import _thread
import asyncio
import inspect
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

import groundkit
import groundkit.sync as gks
from groundkit import ConfigurationError, Record, RetrievalError, StorageError
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


def run_script(code: str, tmp_path: Path) -> str:
    """Run ``code`` with the index and base directories as arguments; what it printed,
    once it exited 0 with nothing on stderr."""
    done = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path / "idx"), str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO_ROOT,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    return done.stdout.strip()


def test_a_script_that_forgets_close_still_exits(tmp_path: Path) -> None:
    assert run_script(SCRIPT, tmp_path) == "record://note"


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


class SignallingLoop(asyncio.SelectorEventLoop):
    """An event loop that says when another thread has handed it a callback."""

    def __init__(self) -> None:
        super().__init__()
        self.handed = threading.Event()

    def call_soon_threadsafe(  # type: ignore[override]
        self, callback: Callable[..., object], *args: Any, **kwargs: Any
    ) -> asyncio.Handle:
        handle = super().call_soon_threadsafe(callback, *args, **kwargs)
        self.handed.set()
        return handle


@pytest.fixture
def app_loop() -> Iterator[SignallingLoop]:
    """An application's event loop, run in a thread of its own until the test stops it."""
    loop = SignallingLoop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    asyncio.run_coroutine_threadsafe(asyncio.sleep(0), loop).result()
    yield loop
    if loop.is_running():
        loop.call_soon_threadsafe(loop.stop)
    thread.join()

    # Let what the test left behind (a cancelled call) finish before closing.
    async def drain() -> None:
        await asyncio.sleep(0)
        left = asyncio.all_tasks() - {asyncio.current_task()}
        await asyncio.gather(*left, return_exceptions=True)

    loop.run_until_complete(drain())
    loop.close()


def hold(loop: asyncio.AbstractEventLoop) -> threading.Event:
    """Keep ``loop`` busy (running, but running nothing else) until the event is set."""
    holding, release = threading.Event(), threading.Event()

    def busy() -> None:
        holding.set()
        release.wait()

    loop.call_soon_threadsafe(busy)
    holding.wait()
    return release


async def answer() -> str:
    return "answer"


def in_a_thread(function: Callable[..., Any], *args: Any, **kwargs: Any) -> Callable[[], Any]:
    """Call ``function`` in a daemon thread; what this returns waits for its outcome.

    A daemon, so a call that never returns fails its test through the timeout without
    also keeping the test run from exiting."""
    outcome: dict[str, Any] = {}

    def target() -> None:
        try:
            outcome["value"] = function(*args, **kwargs)
        except BaseException as exc:
            outcome["error"] = exc

    thread = threading.Thread(target=target, daemon=True)
    thread.start()

    def result() -> Any:
        thread.join()
        if "error" in outcome:
            raise outcome["error"]
        return outcome["value"]

    return result


def test_a_call_longer_than_a_wait_slice_keeps_its_outcome(monkeypatch: pytest.MonkeyPatch) -> None:
    # A late answer is waited for slice after slice; its own TimeoutError is its own.
    monkeypatch.setattr(gks, "_SLICE", 0.001)

    async def late(outcome: BaseException | None) -> str:
        await asyncio.sleep(0.05)
        if outcome is not None:
            raise outcome
        return "late"

    assert gks.run(late(None)) == "late"
    with pytest.raises(TimeoutError, match="its own"):
        gks.run(late(TimeoutError("its own")))


@pytest.mark.timeout(120)
def test_a_call_whose_home_loop_stops_before_running_it_raises(app_loop: SignallingLoop) -> None:
    # The app's loop is busy when the call is handed to it, then stops (as
    # run_until_complete and asyncio.run do) before it gets to the call.
    release = hold(app_loop)
    app_loop.handed.clear()
    call = in_a_thread(gks.run, answer(), home=app_loop)
    app_loop.handed.wait()  # the call is queued on the app's loop
    app_loop.call_soon_threadsafe(app_loop.stop)
    release.set()
    with pytest.raises(ConfigurationError, match="owns this groundkit object stopped"):
        call()
    assert not app_loop.is_running()


@pytest.mark.timeout(120)
def test_a_call_that_finished_as_its_loop_stopped_returns_its_answer(
    app_loop: SignallingLoop,
) -> None:
    # The loop stops in the very step that ends the call, before the callback that
    # hands the answer over would run.
    async def last_words() -> str:
        asyncio.get_running_loop().stop()
        return "said"

    assert gks.run(last_words(), home=app_loop) == "said"
    assert not app_loop.is_running()


@pytest.mark.timeout(120)
def test_a_call_its_home_loops_asyncio_run_cancels_raises() -> None:
    # The owner's asyncio.run ends while the call is running there: asyncio cancels it.
    ready, running = threading.Event(), threading.Event()
    owner: dict[str, Any] = {}

    async def main() -> None:
        owner["loop"], owner["end"] = asyncio.get_running_loop(), asyncio.Event()
        ready.set()
        await owner["end"].wait()

    async def long() -> None:
        running.set()
        await asyncio.sleep(3600)

    thread = threading.Thread(target=asyncio.run, args=(main(),), daemon=True)
    thread.start()
    ready.wait()
    call = in_a_thread(gks.run, long(), home=owner["loop"])
    running.wait()
    owner["loop"].call_soon_threadsafe(owner["end"].set)
    with pytest.raises(ConfigurationError, match="cancelled the call as it shut down"):
        call()
    thread.join()


@pytest.mark.timeout(120)
def test_an_awaited_call_whose_home_loop_stops_before_running_it_raises(
    app_loop: SignallingLoop,
) -> None:
    # The async direction watches the home loop as the blocking one does.
    release = hold(app_loop)
    app_loop.handed.clear()

    async def caller() -> str:
        return await gks.run_async(answer(), home=app_loop)

    call = in_a_thread(asyncio.run, caller())
    app_loop.handed.wait()
    app_loop.call_soon_threadsafe(app_loop.stop)
    release.set()
    with pytest.raises(ConfigurationError, match="owns this groundkit object stopped"):
        call()


@pytest.mark.timeout(120)
def test_an_awaited_call_answers_across_slices_and_finishing_as_its_loop_stops(
    app_loop: SignallingLoop, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(gks, "_SLICE", 0.001)

    async def late() -> str:
        await asyncio.sleep(0.05)
        return "late"

    async def last_words() -> str:
        asyncio.get_running_loop().stop()
        return "said"

    async def caller() -> tuple[str, str]:
        first = await gks.run_async(late(), home=app_loop)
        return first, await gks.run_async(last_words(), home=app_loop)

    assert asyncio.run(caller()) == ("late", "said")


@pytest.mark.timeout(120)
def test_cancelling_an_awaited_call_cancels_it_on_its_home_loop(app_loop: SignallingLoop) -> None:
    started, cancelled = threading.Event(), threading.Event()

    async def long() -> None:
        started.set()
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            cancelled.set()
            raise

    async def caller() -> None:
        task = asyncio.ensure_future(gks.run_async(long(), home=app_loop))
        await asyncio.to_thread(started.wait)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(caller())
    assert cancelled.wait(60)


def test_a_call_to_a_home_loop_closed_meanwhile_raises(monkeypatch: pytest.MonkeyPatch) -> None:
    # The loop closes between the look at it and the hand-over.
    loop = asyncio.new_event_loop()
    loop.close()
    monkeypatch.setattr(gks, "_usable", lambda loop: True)
    call = answer()
    with pytest.raises(ConfigurationError, match="stopped before the call ended"):
        gks.run(call, home=loop)
    assert inspect.getcoroutinestate(call) == "CORO_CLOSED"  # no "never awaited" warning


@pytest.mark.timeout(120)
def test_systemexit_from_code_on_the_loop_reaches_the_caller_and_the_loop_lives(
    tmp_path: Path,
) -> None:
    async def exits() -> None:
        raise SystemExit("abort")

    async def interrupts() -> None:
        raise KeyboardInterrupt

    async def in_a_child_task() -> None:
        await asyncio.gather(exits())

    loop = gks.background_loop()
    with pytest.raises(SystemExit, match="abort"):
        gks.run(exits())
    with pytest.raises(KeyboardInterrupt):
        gks.run(interrupts())
    with pytest.raises(SystemExit, match="abort"):
        gks.run(in_a_child_task())
    assert gks.run(answer()) == "answer"
    assert gks.background_loop() is loop
    # What a user's progress callback does to give up an ingest.
    write_notes(tmp_path)
    with gks.Collection.open(tmp_path / "idx", base_dir=tmp_path) as col:
        with pytest.raises(SystemExit, match="user gives up"):
            col.ingest(tmp_path / "notes", progress=lambda event: sys.exit("user gives up"))
        col.add_documents([{"id": "after", "text": "the loop still serves this collection"}])
        assert col.search("still serves").results[0].source == "record://after"
    assert gks.background_loop() is loop


def test_a_refused_close_leaves_the_collection_open(tmp_path: Path) -> None:
    write_notes(tmp_path)
    col = gks.Collection.open(tmp_path / "idx", base_dir=tmp_path)
    col.ingest(tmp_path / "notes")
    (tmp_path / "notes" / "white.md").write_text("White tea is barely processed.\n", "utf-8")
    # close() from a callback on groundkit's loop is refused (it would wait on itself).
    with pytest.raises(ConfigurationError, match="await the async API"):
        col.ingest(tmp_path / "notes", progress=lambda event: col.close())
    assert not col.closed and not col.aio.closed
    assert col in list(gks._OPEN)  # still closed at exit if the script forgets
    assert col.search("roasted").results[0].source == "notes/oolong.md"
    col.close()
    assert col.closed and col.aio.closed
    assert col not in list(gks._OPEN)
    with pytest.raises(StorageError):
        col.search("tea")


def test_a_close_interrupted_before_it_began_leaves_the_collection_open(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    col = gks.Collection.open(tmp_path / "idx", base_dir=tmp_path)
    col.add_documents([{"id": "x", "text": "kept open"}])

    def interrupted(awaitable: Any, *, home: object = None) -> None:
        awaitable.close()  # Ctrl-C before the close was handed to the loop
        raise KeyboardInterrupt

    with monkeypatch.context() as patched:
        patched.setattr(gks, "run", interrupted)
        with pytest.raises(KeyboardInterrupt):
            col.close()
    assert not col.closed and col in list(gks._OPEN)
    col.close()
    assert col.closed and col.aio.closed and col not in list(gks._OPEN)


THREAD_AFTER_MAIN = """
import sys, threading, time
import groundkit.sync as gks

col = gks.Collection.open(sys.argv[1], base_dir=sys.argv[2])
col.add_documents([{"id": "first", "text": "kettle note"}])


def worker() -> None:  # not a daemon: the interpreter waits for it
    time.sleep(0.3)  # the main thread has returned by now
    report = col.add_documents([{"id": "late", "text": "a late kettle note"}])
    found = [r.citation.source for r in col.search("kettle", top_k=5)]
    col.close()
    print(report.added, sorted(found))


threading.Thread(target=worker).start()
"""


@pytest.mark.skipif(
    sys.version_info[:2] == (3, 12),
    reason="CPython 3.12 alone refuses to start any thread once the main thread has returned, "
    "so the worker's write cannot get a worker thread there (3.11 and 3.13 allow it)",
)
def test_a_thread_still_running_at_exit_keeps_its_collection(tmp_path: Path) -> None:
    # The exit hook closes what was left open only once the application's own threads
    # have ended, as the interpreter waits for them: a worker may still write and close.
    printed = run_script(THREAD_AFTER_MAIN, tmp_path)
    assert printed == "['record://late'] ['record://first', 'record://late']"


@pytest.mark.timeout(120)
@pytest.mark.skipif(not hasattr(signal, "setitimer"), reason="needs setitimer")
def test_a_deadline_raised_by_a_signal_handler_reaches_the_caller_and_cancels_the_call() -> None:
    # A TimeoutError raised in the waiting thread is the caller's, not a wait slice's end.
    cancelled = threading.Event()

    async def long() -> None:
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            cancelled.set()
            raise

    def deadline(signum: int, frame: object) -> None:
        raise TimeoutError("the caller's deadline")

    previous = signal.signal(signal.SIGALRM, deadline)
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.3)
        with pytest.raises(TimeoutError, match="the caller's deadline"):
            gks.run(long())
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    assert cancelled.wait(60)


@pytest.mark.timeout(120)
def test_an_open_interrupted_as_it_finishes_closes_what_it_opened(tmp_path: Path) -> None:
    # The interrupt is pending when the open's answer arrives: the caller gets the
    # KeyboardInterrupt, never the collection, so the collection is closed for it (a
    # new one nothing was written to is removed, as after a failed open).
    opened: list[groundkit.Collection] = []

    async def open_then_interrupted() -> groundkit.Collection:
        col = await groundkit.Collection.open(tmp_path / "idx", base_dir=tmp_path)
        opened.append(col)
        _thread.interrupt_main()
        return col

    # A test runner may ignore SIGINT (pytest-xdist's workers do): interrupt_main then
    # does nothing.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(KeyboardInterrupt):
            gks._opening(open_then_interrupted)()
    finally:
        signal.signal(signal.SIGINT, previous)
    assert opened and opened[0].closed
    assert not (tmp_path / "idx").exists() or not any((tmp_path / "idx").iterdir())


def test_a_call_cancelled_from_inside_says_so_and_the_loop_serves_on() -> None:
    async def gives_up() -> None:
        raise asyncio.CancelledError

    with pytest.raises(ConfigurationError, match="cancelled from inside"):
        gks.run(gives_up())
    assert gks.run(answer()) == "answer"


@pytest.mark.timeout(120)
def test_an_async_collection_refuses_a_second_running_loop_and_passes_to_the_next(
    tmp_path: Path, app_loop: SignallingLoop
) -> None:
    # Its locks and connections serve one loop at a time: a call from another loop
    # while its own runs (another thread's asyncio.run) is refused, not left to wedge
    # both; reached through run_async it works; once its loop has ended, the next
    # asyncio.run takes it over, as a script's successive runs do.
    async def opened() -> groundkit.Collection:
        return await groundkit.Collection.open(tmp_path / "idx", base_dir=tmp_path)

    col = asyncio.run_coroutine_threadsafe(opened(), app_loop).result()
    record = [{"id": "x", "text": "kettle note"}]
    with pytest.raises(ConfigurationError, match="event loop running in another thread"):
        asyncio.run(col.add_documents(record))

    async def through_its_loop() -> list[str]:
        return (await gks.run_async(col.add_documents(record), home=col.loop)).added

    assert asyncio.run(through_its_loop()) == ["record://x"]
    app_loop.call_soon_threadsafe(app_loop.stop)
    while app_loop.is_running():
        threading.Event().wait(0.01)
    found = asyncio.run(col.search("kettle"))
    assert [r.citation.source for r in found.results] == ["record://x"]
    asyncio.run(col.close())
