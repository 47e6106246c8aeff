"""Blocking groundkit: the async API, driven by one background event loop per process.

``groundkit.sync`` is for scripts, notebooks and synchronous frameworks. It has no
logic of its own: every call submits the very coroutine the async API runs to one
event loop that lives in a daemon thread (started on first use, restarted after a
``fork``), and waits for its result, as LanceDB's synchronous client does. So:

- it works from plain scripts, from any number of threads at once (the calls
  interleave on that loop as concurrent tasks do), and from inside a running
  event loop such as Jupyter's, whose thread simply waits for the answer;
- errors are the async API's own exceptions, raised in the caller's thread, as are
  a ``SystemExit`` or ``KeyboardInterrupt`` raised by code on the loop (a callback),
  which the loop survives;
- an interrupted call (Ctrl-C) cancels the coroutine it was waiting for;
- a call whose loop stops, closes or cancels it before answering (an ``asyncio.run``
  that ends) raises ``ConfigurationError`` rather than waiting forever;
- collections still open when the interpreter exits are closed first, so a script
  that forgot ``close()`` still exits; a ``ResourceWarning`` names each of them.

An object belongs to the loop it was opened on. ``run`` takes ``home=`` (an event
loop) so a synchronous caller can reach an object opened by async code in another
thread; ``run_async`` does the reverse for async code holding a ``SyncCollection``'s
collection. The framework retrievers (``groundkit.integrations``) use both.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import functools
import inspect
import os
import threading
import warnings
import weakref
from collections.abc import Awaitable, Callable, Coroutine, Iterable, Mapping, Sequence
from concurrent.futures import Future, InvalidStateError
from concurrent.futures import wait as _wait_for
from pathlib import Path
from types import TracebackType
from typing import (
    TYPE_CHECKING,
    Any,
    Concatenate,
    Generic,
    NoReturn,
    ParamSpec,
    TypeVar,
    Unpack,
    overload,
)

from groundkit.collection import DEPRECATIONS
from groundkit.collection import Collection as AsyncCollection
from groundkit.config import RetrievalConfig
from groundkit.contracts import MultiSearchResponse
from groundkit.errors import ConfigurationError, InvalidQueryError
from groundkit.providers.protocols import EmbeddingProtocol
from groundkit.retrieval.multi import search_collections as _search_collections
from groundkit.retrieval.request import SearchOptions, SearchRequest
from groundkit.retrieval.rerank import RerankerProtocol
from groundkit.retrieval.rewriting import QueryRewriterProtocol
from groundkit.retrieval.search import Retriever
from groundkit.storage.location import StoreLocation
from groundkit.storage.protocols import SnapshotStore
from groundkit.storage.snapshots import SnapshotLocation
from groundkit.verification.answers import verify_answer as _verify_answer
from groundkit.verification.quotes import check_quote as _check_quote
from groundkit.verification.quotes import quote_holds as _quote_holds
from groundkit.verification.receipts import check_receipts as _check_receipts
from groundkit.verification.receipts import read_receipts as _read_receipts
from groundkit.verification.receipts import write_receipts as _write_receipts
from groundkit.verification.sources import resolve_citation as _resolve_citation
from groundkit.verification.verdict import check_citation as _check_citation
from groundkit.verification.verdict import citation_holds as _citation_holds
from groundkit.verification.verdict import deprecation

__all__ = [
    "Collection",
    "SyncCollection",
    "SyncRetriever",
    "check_citation",
    "check_quote",
    "check_receipts",
    "read_receipts",
    "resolve_citation",
    "run",
    "run_async",
    "search_collections",
    "verify_answer",
    "verify_citation",
    "verify_quote",
    "write_receipts",
]

T = TypeVar("T")
P = ParamSpec("P")

# How long the exit hook waits for open collections to close.
_EXIT_WAIT = 10.0


# The process each background loop runs in. A forked child inherits the parent's
# loop objects, which look running there but have no thread to run anything.
_LOOP_PIDS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, int] = weakref.WeakKeyDictionary()


def _foreign(home: asyncio.AbstractEventLoop | None) -> bool:
    """Whether ``home`` is a background loop of another process (a fork's parent)."""
    owner = None if home is None else _LOOP_PIDS.get(home)
    return owner is not None and owner != os.getpid()


def _check_process(home: asyncio.AbstractEventLoop | None, awaitable: Awaitable[Any]) -> None:
    """``ConfigurationError`` (``awaitable`` closed unrun) for an object opened in
    another process (the parent of a fork): its loop, threads and connections stayed
    there, so waiting on it would never end."""
    if home is not None and _foreign(home):
        owner = _LOOP_PIDS.get(home)
        _close_unawaited(awaitable)
        raise ConfigurationError(
            f"this groundkit object was opened in process {owner}, not this one (a forked "
            "child): its event loop and database connections stayed in that process; open "
            "the collection again in this process"
        )


class _LoopThread:
    """The process's background event loop, started on first use."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._pid = 0

    def loop(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            alive = (
                self._loop is not None
                and self._pid == os.getpid()
                and self._thread is not None
                and self._thread.is_alive()
            )
            if not alive:
                # A forked child has the parent's loop object but not its thread.
                self._loop = asyncio.new_event_loop()
                self._pid = os.getpid()
                _LOOP_PIDS[self._loop] = self._pid
                started = threading.Event()
                self._thread = threading.Thread(
                    target=self._serve,
                    args=(self._loop, started),
                    name="groundkit-sync",
                    daemon=True,
                )
                self._thread.start()
                started.wait()
            assert self._loop is not None
            return self._loop

    def _serve(self, loop: asyncio.AbstractEventLoop, started: threading.Event) -> None:
        asyncio.set_event_loop(loop)
        loop.call_soon(started.set)
        try:
            while True:
                try:
                    loop.run_forever()
                except (KeyboardInterrupt, SystemExit):
                    # User code on this loop raised one (``sys.exit()`` in a progress
                    # callback): asyncio lets it out of run_forever, but its task holds
                    # it and hands it to the caller once the loop runs again. Serve on,
                    # or every call waiting here and every collection living here dies.
                    if self.current() is loop:
                        continue
                return  # stop(): the process is exiting
        finally:
            loop.close()

    def current(self) -> asyncio.AbstractEventLoop | None:
        """The loop if it is running in this process, without starting one."""
        with self._lock:
            if self._loop is not None and self._pid == os.getpid():
                return self._loop
            return None

    def in_loop_thread(self) -> bool:
        return self._thread is not None and threading.current_thread() is self._thread

    def stop(self) -> None:
        with self._lock:
            loop, thread = self._loop, self._thread
            if loop is None or thread is None or self._pid != os.getpid():
                return
            self._loop = self._thread = None
        if thread.is_alive():
            loop.call_soon_threadsafe(loop.stop)
            thread.join(_EXIT_WAIT)


_BACKGROUND = _LoopThread()
# Sync collections not yet closed; the exit hook closes them.
_OPEN: weakref.WeakSet[SyncCollection] = weakref.WeakSet()


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


def _usable(loop: asyncio.AbstractEventLoop | None) -> bool:
    return loop is not None and loop.is_running() and not loop.is_closed()


def run(
    awaitable: Awaitable[T],
    *,
    home: asyncio.AbstractEventLoop | None = None,
    abandon: Callable[[T], object] | None = None,
) -> T:
    """Run ``awaitable`` to completion and return its result, blocking this thread.

    It runs on ``home`` when that loop is running in another thread (the loop an
    object was opened on), else on groundkit's background loop. Safe from any
    thread and from inside a running event loop (that loop waits meanwhile). Its
    exception, if any, is raised here. A ``KeyboardInterrupt`` while waiting
    cancels it.

    ``ConfigurationError`` when called from the loop that would have to run it,
    where waiting could never end: await the async API there instead; and when
    that loop stops, closes or cancels the call (its ``asyncio.run`` ending) before
    the call ends, which it notices within a second. ``abandon`` is given the result
    of a call that ended as it was interrupted (the caller never sees it), so that
    what it opened is closed.
    """
    _check_process(home, awaitable)
    target = home if _usable(home) else None
    current = _running_loop()
    if target is not None and target is current:
        _close_unawaited(awaitable)
        raise ConfigurationError(
            "a blocking groundkit call was made on the event loop that owns the object; "
            "await the async API (groundkit.Collection) there instead"
        )
    if target is None:
        if _BACKGROUND.in_loop_thread():
            _close_unawaited(awaitable)
            raise ConfigurationError(
                "a blocking groundkit call was made from inside groundkit's own event loop "
                "(a callback of an async call); await the async API there instead"
            )
        target = _BACKGROUND.loop()
    # The future exists before anything is scheduled, so a Ctrl-C that lands at any
    # point from here on cancels the work (run_coroutine_threadsafe would leave a
    # window in which the call runs on, unseen, and keeps the process from exiting).
    future: _Call[T] = _Call()
    coroutine = _as_coroutine(awaitable)
    try:
        _hand(target, coroutine, future)
        return _wait(future, target, coroutine)
    except BaseException:
        if not future.cancel() and abandon is not None:
            _abandon(future, abandon)
        raise


def _abandon(future: Future[T], abandon: Callable[[T], object]) -> None:
    """Hand ``abandon`` the result of a call that finished as its caller was interrupted."""
    if future.done() and not future.cancelled() and future.exception() is None:
        abandon(future.result())


# How often a blocking call whose result is late looks whether its loop still runs.
_SLICE = 0.25


class _Call(Future[T]):
    """A blocking call's outcome, and the task computing it once its loop started it."""

    task: asyncio.Task[T] | None = None


def _wait(
    future: _Call[T], loop: asyncio.AbstractEventLoop, coroutine: Coroutine[Any, Any, T]
) -> T:
    """``future``'s outcome, which ``loop`` settles: ``ConfigurationError`` once that loop
    has closed, or was seen stopped twice in a row, with the call unsettled (nothing
    would ever settle it). A call answered in time never wakes before its answer."""
    stopped = False
    while True:
        # Waited for without raising: a TimeoutError here is the caller's own (a signal
        # handler's deadline) or the call's, never a slice ending.
        if _wait_for((future,), _SLICE).done:
            return future.result()
        stopped = _still_served(future, loop, coroutine, stopped)


def _still_served(
    future: _Call[Any],
    loop: asyncio.AbstractEventLoop,
    coroutine: Coroutine[Any, Any, Any],
    stopped: bool,
) -> bool:
    """After a slice without an answer: raise ``ConfigurationError`` when ``loop`` can no
    longer answer (closed, or stopped now as at the last look); else return whether it
    is stopped now. A task that finished unseen is settled from here."""
    if not (loop.is_closed() or (stopped and not loop.is_running())):
        # A loop seen stopped once may be between two run_until_complete calls.
        return not loop.is_running()
    task = future.task
    if task is not None and task.done():
        # Finished, but the loop stopped before running the callback that hands the
        # outcome over: take it from the task (only this side can now, and asyncio then
        # need not report it never retrieved).
        _settle(future, task, loop)
        return stopped
    if loop.is_closed() and _unstarted(coroutine):
        coroutine.close()  # and now never will be: no "never awaited" warning
    if task is not None:
        # The caller is told here; asyncio need not log it again when the abandoned
        # task is collected ("Task was destroyed but it is pending").
        with contextlib.suppress(AttributeError):
            task._log_destroy_pending = False  # type: ignore[attr-defined]
    raise _loop_gone(loop) from None


def _unstarted(coroutine: Coroutine[Any, Any, Any]) -> bool:
    return inspect.iscoroutine(coroutine) and inspect.getcoroutinestate(coroutine) == "CORO_CREATED"


def _loop_gone(loop: asyncio.AbstractEventLoop, *, cancelled: bool = False) -> ConfigurationError:
    """The error of a call whose loop ended before answering it: a ``ConfigurationError``,
    as for every loop a blocking call cannot use."""
    how = "cancelled the call as it shut down" if cancelled else "stopped before the call ended"
    if cancelled and loop is _BACKGROUND.current() and loop.is_running():
        return ConfigurationError(
            "the call was cancelled from inside: code it ran (a progress callback, say) "
            "raised asyncio.CancelledError"
        )
    if loop in _LOOP_PIDS:
        return ConfigurationError(f"groundkit's background loop {how} (the process is exiting)")
    return ConfigurationError(
        f"the event loop that owns this groundkit object {how} (asyncio.run returned, or "
        "loop.stop() or loop.close() was called): keep that loop running while blocking "
        "calls use what was opened on it, or open the collection again where it stays open"
    )


def _hand(
    loop: asyncio.AbstractEventLoop, coroutine: Coroutine[Any, Any, T], future: _Call[T]
) -> None:
    """Schedule ``coroutine`` on ``loop``, tied to ``future``; ``ConfigurationError`` (the
    coroutine closed unrun) when the loop closed since it was looked at."""
    try:
        loop.call_soon_threadsafe(_start, coroutine, future)
    except RuntimeError:
        coroutine.close()
        raise _loop_gone(loop) from None


def _start(coroutine: Coroutine[Any, Any, T], future: _Call[T]) -> None:
    """On the loop: run ``coroutine`` as a task tied to ``future`` both ways."""
    if future.cancelled():
        coroutine.close()
        return
    task = future.task = asyncio.ensure_future(coroutine)
    loop = task.get_loop()

    def settle(done: asyncio.Future[T]) -> None:
        _settle(future, done, loop)

    def on_future(settled: Future[T]) -> None:
        if settled.cancelled():
            # On a closed loop the task never runs again: nothing to cancel.
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(task.cancel)

    task.add_done_callback(settle)
    future.add_done_callback(on_future)


def _settle(future: Future[T], done: asyncio.Future[T], loop: asyncio.AbstractEventLoop) -> None:
    """Give ``future`` the outcome of the finished task ``done``."""
    if future.done():
        return
    try:
        if done.cancelled():
            # Not by the caller (its future would be done): by the loop's owner, as
            # asyncio.run does to what is left when its main coroutine ends.
            future.set_exception(_loop_gone(loop, cancelled=True))
        elif (error := done.exception()) is not None:
            future.set_exception(error)
        else:
            future.set_result(done.result())
    except InvalidStateError:  # cancelled by the caller meanwhile
        pass


async def run_async(awaitable: Awaitable[T], *, home: asyncio.AbstractEventLoop | None = None) -> T:
    """Await ``awaitable`` on ``home`` (an object's own loop) without blocking this one.

    When ``home`` is this loop, not running, or None, it is simply awaited here.
    ``ConfigurationError`` when ``home`` stops, closes or cancels the call before it
    ends, noticed as ``run`` notices it; cancelling the awaiting task cancels the call.
    """
    _check_process(home, awaitable)
    current = _running_loop()
    if not _usable(home) or home is current:
        return await awaitable
    assert home is not None
    future: _Call[T] = _Call()
    coroutine = _as_coroutine(awaitable)
    try:
        _hand(home, coroutine, future)
        answer = asyncio.wrap_future(future)
        stopped = False
        while True:
            done, _ = await asyncio.wait({answer}, timeout=_SLICE)
            if done:
                return answer.result()
            stopped = _still_served(future, home, coroutine, stopped)
    except BaseException:
        future.cancel()
        raise


def background_loop() -> asyncio.AbstractEventLoop:
    """groundkit's background loop (started if needed): where ``SyncCollection``s live."""
    return _BACKGROUND.loop()


async def _await(awaitable: Awaitable[T]) -> T:
    return await awaitable


def _as_coroutine(awaitable: Awaitable[T]) -> Coroutine[Any, Any, T]:
    if isinstance(awaitable, Coroutine):
        return awaitable
    return _await(awaitable)


def _close_unawaited(awaitable: Awaitable[Any]) -> None:
    # Refused before it ran: close it, so Python does not warn it was never awaited.
    close = getattr(awaitable, "close", None)
    if callable(close):
        close()


A = TypeVar("A")


class _Twin(Generic[A]):
    """A blocking twin of an async object ``aio`` that lives on the loop ``_home``."""

    aio: A
    _home: asyncio.AbstractEventLoop


def _blocking(
    method: Callable[Concatenate[A, P], Awaitable[T]],
) -> Callable[Concatenate[_Twin[A], P], T]:
    """An async method as a blocking method of its twin class (same signature)."""

    def call(self: _Twin[A], /, *args: P.args, **kwargs: P.kwargs) -> T:
        met: list[str] = []

        async def keeping_deprecations() -> T:
            DEPRECATIONS.set(met)  # this task's context only
            return await method(self.aio, *args, **kwargs)

        try:
            return run(keeping_deprecations(), home=self._home)
        finally:
            for message in met:  # here, where the caller's filters and line are
                warnings.warn(message, DeprecationWarning, stacklevel=2)

    functools.update_wrapper(call, method)
    return call


def coroutine_methods(cls: type) -> dict[str, Callable[..., Any]]:
    """The public coroutine methods ``cls`` defines, by name: the async API its
    blocking twin mirrors (class and static methods, constructors, are not among
    them)."""
    return {
        name: member
        for name, member in vars(cls).items()
        if not name.startswith("_") and inspect.iscoroutinefunction(member)
    }


def _mirror(twin: type[_Twin[Any]], original: type) -> tuple[str, ...]:
    """Give ``twin`` a blocking method for each public coroutine method of ``original``
    its class body does not define; returns the names it had to add.

    The class bodies name each method too, so type checkers know them; this makes
    sure a method added to the async class later is never missing from the blocking
    one, even before its line is written (tests/test_sync_parity.py asks for it).
    """
    added = []
    for name, method in coroutine_methods(original).items():
        if name not in vars(twin):
            setattr(twin, name, _blocking(method))
            added.append(name)
    return tuple(added)


def _opening(
    opener: Callable[P, Awaitable[AsyncCollection]],
) -> Callable[P, SyncCollection]:
    """``Collection.open`` as a blocking function returning a ``SyncCollection``."""

    @functools.wraps(opener)
    def open_blocking(*args: P.args, **kwargs: P.kwargs) -> SyncCollection:
        home = _BACKGROUND.loop()
        opened = run(
            opener(*args, **kwargs),
            home=home,
            abandon=functools.partial(_close_unclaimed, home=home),
        )
        return SyncCollection(opened, home=home)

    return open_blocking


def _close_unclaimed(collection: AsyncCollection, *, home: asyncio.AbstractEventLoop) -> None:
    """Close a collection whose blocking open was interrupted as it finished: its caller
    never got it, and a new one nothing was written to is removed as a failed open's is."""
    closing = asyncio.run_coroutine_threadsafe(collection.close(), home)
    with contextlib.suppress(Exception):
        closing.result(_EXIT_WAIT)


class _Read(Generic[T]):
    """A read-only attribute of a twin that is its async object's attribute of the
    same name."""

    def __set_name__(self, owner: type, name: str) -> None:
        self._name = name

    @overload
    def __get__(self, twin: None, owner: type) -> _Read[T]: ...

    @overload
    def __get__(self, twin: _Twin[Any], owner: type) -> T: ...

    def __get__(self, twin: _Twin[Any] | None, owner: type) -> T | _Read[T]:
        if twin is None:
            return self
        value: T = getattr(twin.aio, self._name)
        return value


_ASYNC_MISUSE = (
    "a groundkit.sync collection is blocking: use it with a plain 'with' in blocking code, "
    "or, in async code, open the async one instead:\n"
    "    async with groundkit.Collection.open(...) as col:"
)


class SyncRetriever(_Twin[Retriever]):
    """A ``Retriever`` with blocking methods, from ``SyncCollection.retriever()``.

    Each method runs the async ``Retriever``'s method of the same name on the
    collection's loop. Like the async one, it catches up with the store on
    ``refresh()``, where ``SyncCollection.search`` does so by itself. ``aio`` is the
    async ``Retriever``.
    """

    def __init__(self, retriever: Retriever, *, home: asyncio.AbstractEventLoop) -> None:
        self.aio = retriever
        self._home = home

    # The async Retriever's attributes, read through (``size``: chunks a current search
    # can return; ``vector_problem``: why dense searches cannot use the vectors now).
    config: _Read[RetrievalConfig] = _Read()
    size: _Read[int] = _Read()
    generation: _Read[int] = _Read()
    vectors_generation: _Read[int] = _Read()
    vector_problem: _Read[str | None] = _Read()
    vectors_missing: _Read[int] = _Read()
    collection: _Read[str | None] = _Read()
    clearance: _Read[str | None] = _Read()

    def __repr__(self) -> str:
        return f"SyncRetriever({self.collection!r}, generation={self.generation})"

    search = _blocking(Retriever.search)
    refresh = _blocking(Retriever.refresh)
    refresh_vectors = _blocking(Retriever.refresh_vectors)
    preload = _blocking(Retriever.preload)
    close = _blocking(Retriever.close)


class SyncCollection(_Twin[AsyncCollection]):
    """A ``groundkit.Collection`` with blocking methods (also ``groundkit.sync.Collection``).

    ``SyncCollection.open(...)`` takes exactly ``Collection.open``'s arguments and
    returns an open collection; use it with ``with`` or call ``close()``. Every
    public async method of ``Collection`` has a blocking method here of the same
    name and signature, run on groundkit's background loop; ``retriever()`` gives a
    ``SyncRetriever``. ``aio`` is the async collection underneath.
    """

    def __init__(self, collection: AsyncCollection, *, home: asyncio.AbstractEventLoop) -> None:
        self.aio = collection
        self._home = home
        self._closed = False
        _OPEN.add(self)

    # Open or create a collection: exactly the arguments of ``groundkit.Collection.open``.
    open = staticmethod(_opening(AsyncCollection.open))

    # The async collection's plain attributes, read through (``snapshots``: where URL
    # snapshots and stored records are kept, for ``check_citation``).
    name: _Read[str] = _Read()
    base_dir: _Read[Path] = _Read()
    snapshots: _Read[SnapshotStore | None] = _Read()
    snapshot_dir: _Read[SnapshotLocation | None] = _Read()
    location: _Read[StoreLocation] = _Read()
    embedder: _Read[EmbeddingProtocol | None] = _Read()
    reranker: _Read[RerankerProtocol | None] = _Read()
    rewriter: _Read[QueryRewriterProtocol | None] = _Read()
    clearance: _Read[str | None] = _Read()
    opened_generation: _Read[int] = _Read()
    max_file_bytes: _Read[int] = _Read()

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self) -> None:
        if self._closed:
            return
        foreign = _foreign(self._home)
        try:
            if not foreign:
                run(self.aio.close(), home=self._home)
            # else: a forked child's copy; what it holds belongs to the parent, which
            # closes it (closing its connections here could break the parent's).
        finally:
            # Closed only once the close began (``aio.closed``): a close refused (from
            # a callback on its loop) or interrupted before it started leaves it open,
            # still closable and still closed at exit.
            if foreign or self.aio.closed:
                self._closed = True
                _OPEN.discard(self)

    def retriever(self) -> SyncRetriever:
        """The current Retriever (``Collection.retriever``), with blocking methods."""
        return SyncRetriever(run(self.aio.retriever(), home=self._home), home=self._home)

    def __enter__(self) -> SyncCollection:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # Runtime only, so type checkers still flag ``async with`` on a blocking collection.
    if not TYPE_CHECKING:

        def __aenter__(self) -> NoReturn:
            # ``async with`` on a blocking collection: closed (nothing else can reach it
            # when it was opened in that statement), then refused with the right form.
            self._refuse_async()

        def __aexit__(self, *exc_info: object) -> NoReturn:
            self._refuse_async()  # not reached: __aenter__ refuses

        def __await__(self) -> NoReturn:
            # ``await groundkit.sync.Collection.open(...)``: the same.
            self._refuse_async()

    def _refuse_async(self) -> NoReturn:
        self.close()
        raise TypeError(f"{_ASYNC_MISUSE}\n(this blocking collection is now closed)")

    def __repr__(self) -> str:
        state = "closed" if self._closed else "open"
        return f"SyncCollection({self.name!r}, {state})"

    generation = _blocking(AsyncCollection.generation)
    ingest = _blocking(AsyncCollection.ingest)
    add_documents = _blocking(AsyncCollection.add_documents)
    delete_documents = _blocking(AsyncCollection.delete_documents)
    delete = _blocking(AsyncCollection.delete)
    search = _blocking(AsyncCollection.search)
    fetch_chunk = _blocking(AsyncCollection.fetch_chunk)
    fetch_in_source = _blocking(AsyncCollection.fetch_in_source)
    verify = _blocking(AsyncCollection.verify)
    verify_all = _blocking(AsyncCollection.verify_all)
    verify_each = _blocking(AsyncCollection.verify_each)
    verify_answer = _blocking(AsyncCollection.verify_answer)
    optimize = _blocking(AsyncCollection.optimize)
    purge_versions = _blocking(AsyncCollection.purge_versions)
    rebase = _blocking(AsyncCollection.rebase)


# What the class bodies above left out (a method added to the async class since):
# empty in a consistent tree, and a test says so.
GENERATED = (*_mirror(SyncCollection, AsyncCollection), *_mirror(SyncRetriever, Retriever))


def _blocking_function(function: Callable[P, Awaitable[T]]) -> Callable[P, T]:
    """An async groundkit function as a blocking one (same signature)."""

    @functools.wraps(function)
    def call(*args: P.args, **kwargs: P.kwargs) -> T:
        return run(function(*args, **kwargs))

    return call


def _deprecated_blocking(
    function: Callable[P, Awaitable[T]], name: str, replacement: str
) -> Callable[P, T]:
    """A deprecated alias as a blocking function: it warns in the caller's thread (where
    the warning filters that will show it are), then runs the async implementation."""

    @functools.wraps(function)
    def call(*args: P.args, **kwargs: P.kwargs) -> T:
        warnings.warn(deprecation(name, replacement), DeprecationWarning, stacklevel=2)
        return run(function(*args, **kwargs))

    call.__name__ = call.__qualname__ = name
    return call


check_citation = _blocking_function(_check_citation)
resolve_citation = _blocking_function(_resolve_citation)
check_quote = _blocking_function(_check_quote)
verify_answer = _blocking_function(_verify_answer)
read_receipts = _blocking_function(_read_receipts)
write_receipts = _blocking_function(_write_receipts)
check_receipts = _blocking_function(_check_receipts)
verify_citation = _deprecated_blocking(
    _citation_holds, "verify_citation", "check_citation(citation, content, base_dir).ok"
)
verify_quote = _deprecated_blocking(
    _quote_holds, "verify_quote", "check_quote(quote, cited, base_dir).ok"
)


def search_collections(
    collections: Iterable[SyncCollection],
    query: str | SearchRequest,
    top_k: int | None = None,
    *,
    rrf_k: int = 60,
    **options: Unpack[SearchOptions],
) -> MultiSearchResponse:
    """``groundkit.search_collections`` over sync collections, blocking."""
    if isinstance(collections, str | bytes | Mapping | SyncCollection) or not isinstance(
        collections, Iterable
    ):
        raise InvalidQueryError(
            f"search_collections takes a list of collections, not {type(collections).__name__}"
        )
    members: Sequence[SyncCollection] = list(collections)
    for position, member in enumerate(members):
        if not isinstance(member, SyncCollection):
            # An async Collection runs on its own loop: it is searched with
            # ``await groundkit.search_collections``, not from here.
            raise InvalidQueryError(
                f"collections[{position}] is a {type(member).__name__}, not a "
                "groundkit.sync collection (gks.Collection.open(...)); search async "
                "collections with await groundkit.search_collections(...)"
            )
    return run(
        _search_collections([c.aio for c in members], query, top_k, rrf_k=rrf_k, **options),
        home=_BACKGROUND.loop(),
    )


def _close_open_collections() -> None:
    """At exit: close what scripts left open, then stop the loop (bounded).

    Each collection closed here was left open: like an unclosed file, it is named in
    a ``ResourceWarning`` (shown with ``-W always::ResourceWarning`` or ``-X dev``).
    """
    loop = _BACKGROUND.current()
    if loop is None:
        return
    _join_running_threads()
    # A forked child's copies of its parent's collections are the parent's to close.
    pending = [c for c in list(_OPEN) if not c.closed and not _foreign(c._home)]
    # A warning made an error (``-W error::ResourceWarning``) is raised once all is closed.
    refused: list[Exception] = []
    for collection in pending:
        collection._closed = True
        try:
            collection.aio._report_left_open()
        except Exception as exc:
            refused.append(exc)
    if pending and _usable(loop) and not _BACKGROUND.in_loop_thread():

        async def close_all() -> None:
            await asyncio.gather(*(c.aio.close() for c in pending), return_exceptions=True)

        future = asyncio.run_coroutine_threadsafe(close_all(), loop)
        try:
            future.result(_EXIT_WAIT)
        except Exception:  # best effort at exit
            future.cancel()
    _BACKGROUND.stop()
    if refused:
        raise refused[0]


def _join_running_threads() -> None:
    """Wait for the non-daemon threads still running, as the interpreter would after this
    hook: they may still use, or close, what they opened. Thread-pool workers are left
    out; they end only once a later hook shuts their pools down."""
    from concurrent.futures import thread as pool_threads

    workers = set(getattr(pool_threads, "_threads_queues", {}))
    me = threading.current_thread()
    for thread in threading.enumerate():
        if thread is not me and not thread.daemon and thread not in workers:
            thread.join()


# Before thread pools are shut down (closing a collection needs their threads), where
# the interpreter allows it; the hook itself first waits for the application's threads.
_register_early = getattr(threading, "_register_atexit", None)
if callable(_register_early):
    _register_early(_close_open_collections)
else:  # pragma: no cover - every supported CPython has it
    atexit.register(_close_open_collections)


# ``from groundkit.sync import Collection``: the name a script expects.
Collection = SyncCollection
