"""Ingest on a Ray cluster: files prepared in Ray tasks, chunks embedded in Ray actors.

The driver keeps what must happen once: discovery, the unchanged check's inputs,
the reuse lookup and the commit. Tasks read, extract, chunk and analyse a group
of files each (retried by Ray when their worker dies); each actor loads the
embedding model once, checks it is the collection's, and embeds batches (restarted
by Ray, its calls retried). Results come back in discovery order, so the one
committer writes exactly what a local ingest writes (adr/0060-distributed-ingest-on-ray.md).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import dataclasses
import logging
import math
import os
import sys
import threading
from collections import deque
from collections.abc import AsyncIterator, Callable
from typing import Any

import numpy as np
import numpy.typing as npt

from groundkit.errors import ConfigurationError, GroundkitError, IngestionError
from groundkit.ingestion.executor import FilePreparer, IngestPlan, PreparedFile
from groundkit.providers.factory import EmbedderRecipe

__all__ = ["RayExecutor"]

logger = logging.getLogger("groundkit.ingest")

_INSTALL = "pip install groundkit[ray]"


_PROBE_SECONDS = 5.0


def _import_ray() -> Any:
    """Ray, imported on first use with its usage reporting off."""
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    try:
        import ray  # extra: ray
    except ImportError:
        raise ConfigurationError(f"ingest on a Ray cluster needs Ray: {_INSTALL}") from None
    return ray


class RayExecutor:
    """Prepares and embeds an ingest's files on the Ray cluster at ``address``.

    ``address`` is ``"auto"`` (the cluster this host runs, or ``RAY_ADDRESS``), a
    cluster's ``host:port``, or ``"local"`` (a throwaway Ray instance in this
    process, for trying it out). ``num_workers`` embedding actors are started, each with
    ``cpus_per_worker`` CPUs and one copy of the model per whole CPU (one math thread
    each); files go to tasks ``files_per_task`` at a time, and the
    chunk texts of several tasks are gathered into calls of at least ``embed_batch``
    texts (the model is faster on a large batch than on many small ones). A task
    or actor lost with its node is retried up to ``max_retries`` times. Every node
    must see the source tree at the same path as the driver. Joining the cluster
    takes at most ``connect_timeout`` seconds; a head that does not accept a
    connection at all is refused at once.
    """

    embeds = True

    def __init__(
        self,
        address: str = "auto",
        *,
        num_workers: int = 1,
        cpus_per_worker: float = 1.0,
        files_per_task: int = 8,
        embed_batch: int = 1024,
        max_retries: int = 3,
        connect_timeout: float = 60.0,
    ) -> None:
        if not isinstance(address, str) or not address.strip():
            raise ConfigurationError("address must be 'auto' or a Ray cluster's host:port")
        for name, value in (
            ("num_workers", num_workers),
            ("files_per_task", files_per_task),
            ("embed_batch", embed_batch),
        ):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigurationError(f"{name} must be a positive integer, got {value!r}")
        if isinstance(max_retries, bool) or not isinstance(max_retries, int) or max_retries < 0:
            raise ConfigurationError(f"max_retries must be an integer >= 0, got {max_retries!r}")
        if not isinstance(cpus_per_worker, int | float) or cpus_per_worker <= 0:
            raise ConfigurationError(f"cpus_per_worker must be > 0, got {cpus_per_worker!r}")
        if (
            isinstance(connect_timeout, bool)
            or not isinstance(connect_timeout, int | float)
            or not math.isfinite(connect_timeout)
            or connect_timeout <= 0
        ):
            raise ConfigurationError(
                f"connect_timeout must be a number of seconds > 0, got {connect_timeout!r}"
            )
        self.address = address.strip()
        self.num_workers = num_workers
        self.cpus_per_worker = float(cpus_per_worker)
        self.files_per_task = files_per_task
        self.embed_batch = embed_batch
        self.max_retries = max_retries
        self.connect_timeout = float(connect_timeout)

    def __repr__(self) -> str:
        return f"RayExecutor(address={self.address!r}, num_workers={self.num_workers})"

    async def run(self, plan: IngestPlan) -> AsyncIterator[PreparedFile]:
        ray = _import_ray()
        session = await self._join(ray)
        actors: list[Any] = []
        try:
            async for item in self._pipeline(ray, plan, actors):
                yield item
        finally:
            for actor in actors:
                ray.kill(actor)
            if session is not None:
                await session.close()

    async def _join(self, ray: Any) -> _Session | None:
        """Join the cluster unless this process already has; the session joined now.

        ``ray.init`` cannot be interrupted and, against a head that does not answer,
        retries for minutes: it runs in a daemon thread of its own, awaited for at most
        ``connect_timeout`` seconds, and left behind (to shut Ray down if it ever
        connects) when the wait times out or the ingest is cancelled, so neither
        Ctrl-C nor SIGTERM nor ``asyncio.run``'s executor shutdown waits for it. A head
        that does not even accept a TCP connection is refused before that.
        """
        if ray.is_initialized():
            return None
        if self.address != "local":
            target = _resolved(self.address)
            if target is not None:
                await self._probe(target)
        session = _Session(ray)
        threading.Thread(
            target=session.hold, args=(self._connect,), name="groundkit-ray", daemon=True
        ).start()
        try:
            joined = await asyncio.wait_for(
                asyncio.wrap_future(session.joined), self.connect_timeout
            )
        except BaseException as exc:
            # Cancelled or timed out: the thread is left to finish on its own and, should
            # it join after all, shuts Ray down again at once.
            session.abandon()
            if isinstance(exc, TimeoutError):
                raise self._unreachable(
                    f"it did not let this process join within {self.connect_timeout:g} s "
                    "(RayExecutor(connect_timeout=...))"
                ) from None
            raise
        return session if joined else None

    def _connect(self, ray: Any) -> bool:
        """Join the cluster unless this process already has; whether it joined now."""
        if ray.is_initialized():
            return False
        local = {"include_dashboard": False} if self.address == "local" else {}
        try:
            ray.init(
                address=self.address,
                log_to_driver=False,
                logging_level=logging.ERROR,
                namespace="groundkit",
                **local,
            )
        except (ConnectionError, ValueError, RuntimeError) as exc:
            # Ray's text speaks of its own command line; the reason is said here instead.
            logger.debug("ray.init(address=%r) failed: %r", self.address, exc)
            why = (
                "no running cluster was found on this host (nor at RAY_ADDRESS); start one "
                "with 'ray start --head', or give the head's HOST:PORT"
                if self.address == "auto"
                else "it did not answer; check that its head runs and this host can reach it"
            )
            raise ConfigurationError(
                f"cannot reach the Ray cluster at {self.address!r}: {why}"
            ) from exc
        return True

    async def _probe(self, target: tuple[str, int]) -> None:
        """A TCP connection to the head's GCS port, so a head that is not there is
        said at once rather than after Ray's minutes of retries."""
        host, port = target
        try:
            _, writer = await asyncio.wait_for(
                asyncio.open_connection(host, port), min(_PROBE_SECONDS, self.connect_timeout)
            )
        except (OSError, TimeoutError) as exc:
            logger.debug("connecting to %s:%d failed: %r", host, port, exc)
            reason = "timed out" if isinstance(exc, TimeoutError) else exc.strerror or repr(exc)
            raise self._unreachable(
                f"nothing accepts connections at {host}:{port} ({reason})"
            ) from None
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()

    def _unreachable(self, why: str) -> ConfigurationError:
        """The error for a cluster this process cannot join, with what to do about it."""
        todo = (
            "start one with 'ray start --head', give the head's HOST:PORT, or ingest without --ray"
            if self.address == "auto"
            else "start the cluster (ray start --head), check the address and that this host "
            "can reach it, or ingest without --ray"
        )
        return ConfigurationError(
            f"cannot reach the Ray cluster at {self.address!r}: {why}; {todo}"
        )

    async def _pipeline(
        self, ray: Any, plan: IngestPlan, actors: list[Any]
    ) -> AsyncIterator[PreparedFile]:
        prepare = ray.remote(num_cpus=1, max_retries=self.max_retries)(_prepare_files)
        shipped = ray.put(dataclasses.replace(plan, files=(), stored_hashes=None))
        if plan.embedder is not None:
            worker = ray.remote(
                num_cpus=self.cpus_per_worker,
                max_restarts=self.max_retries,
                # A call to an actor whose node is lost is retried until the actor is
                # back (restarted elsewhere) or dead for good, which ``max_restarts``
                # bounds: a count of quick retries can run out before the cluster has
                # even noticed the node is gone.
                max_task_retries=-1,
            )(_EmbedWorker)
            threads = max(1, int(self.cpus_per_worker))
            actors += [
                worker.options(scheduling_strategy="SPREAD").remote(
                    plan.embedder, plan.identity, threads
                )
                for _ in range(self.num_workers)
            ]
        step = self.files_per_task
        groups = [plan.files[i : i + step] for i in range(0, len(plan.files), step)]
        window = 2 * self.num_workers + 2
        reading: deque[Any] = deque()
        embedding: deque[tuple[list[PreparedFile], list[str], Any]] = deque()
        # Prepared files whose texts wait for a full embedding call, in order.
        gathered: list[PreparedFile] = []
        todo: dict[str, str] = {}
        submitted = 0
        turn = 0
        while submitted < len(groups) or reading or gathered or embedding:
            while submitted < len(groups) and len(reading) < window:
                reading.append(prepare.remote(shipped, list(groups[submitted])))
                submitted += 1
            if reading:
                items: list[PreparedFile] = await _result(reading.popleft(), self.max_retries)
                hashes, texts = await _to_embed(plan, items)
                gathered += items
                for content_hash, text in zip(hashes, texts, strict=True):
                    todo.setdefault(content_hash, text)
            if gathered and (len(todo) >= self.embed_batch or not reading):
                job = None
                if todo and actors:
                    job = actors[turn % len(actors)].embed.remote(list(todo.values()))
                    turn += 1
                embedding.append((gathered, list(todo), job))
                gathered, todo = [], {}
            while embedding and (len(embedding) > window or not reading):
                items, hashes, job = embedding.popleft()
                made = {}
                if job is not None:
                    made = dict(zip(hashes, await _result(job, self.max_retries), strict=True))
                for item in items:
                    if item.outcome == "prepared" and actors:
                        item.vectors = {h: made[h] for h in item.hashes if h in made}
                    yield item


class _Session:
    """A Ray connection held by the thread that made it, until ``close``.

    A ``"local"`` instance's processes are started to die with their parent, and on
    Linux that parent is the *thread* that started them (``PR_SET_PDEATHSIG``): a thread
    that called ``ray.init`` and then ended took the instance with it, and the driver
    died on its next call. So that thread stays, and shuts Ray down itself.
    """

    def __init__(self, ray: Any) -> None:
        self._ray = ray
        self.joined: concurrent.futures.Future[bool] = concurrent.futures.Future()
        self._release = threading.Event()
        self._closed: concurrent.futures.Future[None] = concurrent.futures.Future()

    def hold(self, connect: Callable[[Any], bool]) -> None:
        """Thread body: connect, report it, wait for release, shut Ray down."""
        try:
            try:
                now = connect(self._ray)
            except BaseException as exc:
                with contextlib.suppress(concurrent.futures.InvalidStateError):
                    self.joined.set_exception(exc)
                return
            try:
                self.joined.set_result(now)
            except concurrent.futures.InvalidStateError:  # abandoned meanwhile
                self._release.set()
            if now:
                self._release.wait()
                with contextlib.suppress(Exception):
                    self._ray.shutdown()
        finally:
            self._closed.set_result(None)

    def abandon(self) -> None:
        """The ingest stopped waiting: a connection made later is not kept."""
        self.joined.cancel()
        self._release.set()

    async def close(self) -> None:
        """Shut Ray down (in its thread) and wait until it has."""
        self._release.set()
        await asyncio.wrap_future(self._closed)


async def _to_embed(plan: IngestPlan, items: list[PreparedFile]) -> tuple[list[str], list[str]]:
    """The chunk texts of ``items`` to embed: each once, none already stored."""
    todo: dict[str, str] = {}
    for item in items:
        if item.outcome == "prepared":
            for content_hash, text in zip(item.hashes, item.texts, strict=True):
                todo.setdefault(content_hash, text)
    if todo and plan.stored_hashes is not None:
        for content_hash in await plan.stored_hashes(list(todo)):
            todo.pop(content_hash, None)
    return list(todo), list(todo.values())


async def _result(ref: Any, retries: int) -> Any:
    """A task's or actor call's value; a failure that outlived Ray's retries becomes a
    groundkit error (a groundkit error raised on the worker is raised as it was)."""
    try:
        return await ref
    except GroundkitError:
        raise
    except Exception as exc:
        cause = getattr(exc, "cause", None)
        if isinstance(cause, GroundkitError):
            raise cause from None
        raise IngestionError(
            f"a Ray task failed after {retries} retries ({type(exc).__name__}): "
            f"{str(exc).splitlines()[0] if str(exc) else 'no message'}"
        ) from None


def _resolved(address: str) -> tuple[str, int] | None:
    """The GCS ``(host, port)`` ``ray.init(address)`` would connect to (for ``"auto"``:
    ``RAY_ADDRESS``, else the cluster ``ray start`` last recorded on this host, else a
    running head found on it); ``None`` when that cannot be told beforehand (the
    connect is then bounded by its timeout alone)."""
    try:
        from ray._private.services import canonicalize_bootstrap_address_or_die  # extra: ray
    except ImportError:  # another Ray: the address as given, "auto" unresolved
        found: str | None = None if address == "auto" else address
    else:
        try:
            found = canonicalize_bootstrap_address_or_die(address)
        except (ConnectionError, ValueError) as exc:
            raise ConfigurationError(
                f"cannot reach the Ray cluster at {address!r}: "
                + (
                    "no running cluster was found on this host (nor at RAY_ADDRESS); start one "
                    "with 'ray start --head', give the head's HOST:PORT, or ingest without --ray"
                    if address == "auto"
                    else f"{exc}; give the head's HOST:PORT, or ingest without --ray"
                )
            ) from None
        except Exception:  # Ray's own lookup failed: let ray.init say it, bounded
            return None
    if not found:
        return None
    host, sep, port = found.rpartition(":")
    if not sep or not port.isdigit():
        return None
    return host.strip("[]"), int(port)


def _prepare_files(plan: IngestPlan, paths: list[str]) -> list[PreparedFile]:
    """A Ray task: prepare a group of files (one failure per unreadable file)."""
    preparer = FilePreparer(plan)
    return [preparer.prepare(path) for path in paths]


class _EmbedWorker:
    """A Ray actor: the collection's embedder, rebuilt and loaded once per CPU it was
    given, each copy checked against the identity the collection is bound to before
    any vector is made.

    Each copy runs one math thread and takes a share of every call. One model spread
    over several threads waits at every operation for its slowest thread, and on a node
    that also runs Ray's own processes and the reading tasks one of them is often
    preempted: on 2 shared cores one actor with one 2-thread model took 1.66× a plain
    ingest's time where two 1-thread actors took 1.13× (docs/benchmarks.md). Copies in
    one actor work like the second, at one model's memory per CPU.
    """

    def __init__(
        self, recipe: EmbedderRecipe, identity: tuple[str, str, int] | None, threads: int
    ) -> None:
        # One math thread per copy, set before torch loads: threads that spin while
        # they wait for a preempted sibling cost more than they save (the user's
        # OMP_WAIT_POLICY wins).
        os.environ["OMP_NUM_THREADS"] = "1"
        os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
        self._copies = [_loaded(recipe, identity) for _ in range(max(1, threads))]
        torch = sys.modules.get("torch")
        if torch is not None:  # loaded with the model: one thread per copy
            torch.set_num_threads(1)
        self._pool = (
            concurrent.futures.ThreadPoolExecutor(len(self._copies), "groundkit-embed")
            if len(self._copies) > 1
            else None
        )

    def embed(self, texts: list[str]) -> npt.NDArray[np.float32]:
        if self._pool is None or len(texts) < 2 * len(self._copies):
            return asyncio.run(self._copies[0].embed_documents(texts))
        shares = _shares([len(t) for t in texts], len(self._copies))
        jobs = [
            self._pool.submit(_embed_share, copy, [texts[i] for i in share])
            for copy, share in zip(self._copies, shares, strict=True)
        ]
        rows = [job.result() for job in jobs]
        out = np.empty((len(texts), rows[0].shape[1]), dtype=np.float32)
        for share, made in zip(shares, rows, strict=True):
            out[share] = made
        return out


def _loaded(recipe: EmbedderRecipe, identity: tuple[str, str, int] | None) -> Any:
    """One copy of the embedder ``recipe`` names, loaded and checked against ``identity``."""
    from groundkit.providers.identity import identity_of

    embedder = recipe.build()
    load = getattr(embedder, "load", None)
    if callable(load):
        asyncio.run(load())
    found = identity_of(embedder)
    mine = (found.provider, found.model_name, found.dimensions)
    if identity is not None and mine != identity:
        raise ConfigurationError(
            f"the embedder rebuilt on a Ray worker is {mine}, not the driver's {identity}: "
            "the model must be the same on every node"
        )
    return embedder


def _embed_share(embedder: Any, texts: list[str]) -> npt.NDArray[np.float32]:
    return np.asarray(asyncio.run(embedder.embed_documents(texts)), dtype=np.float32)


def _shares(lengths: list[int], n: int) -> list[list[int]]:
    """Positions dealt into ``n`` shares of about equal work: longest first, each to the
    share with the least text so far (ties to the lower share, so it is deterministic)."""
    shares: list[list[int]] = [[] for _ in range(n)]
    load = [0] * n
    for i in sorted(range(len(lengths)), key=lambda i: (-lengths[i], i)):
        k = min(range(n), key=lambda k: (load[k], k))
        shares[k].append(i)
        load[k] += lengths[i]
    return [sorted(s) for s in shares]
