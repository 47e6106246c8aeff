"""Sixty-four writers at once, of every kind, on one collection: none hangs, none is lost.

Async tasks (sharing one collection object, and each with its own), threads of the
blocking API (sharing one, and each with its own) and separate processes all write
records to one collection, released together. Every write must return (the per-test
timeout turns a hang into a failure), and afterwards every record must be stored
once, found by a search, and its citation verified from a fresh process's view.

``GROUNDKIT_STRESS_ROUNDS`` repeats the whole exercise (each round on a new
collection) for a longer run than the suite's one.
"""

from __future__ import annotations

import asyncio
import os
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

import groundkit.sync as gks
from groundkit import Collection

pytestmark = pytest.mark.timeout(900)

ASYNC_SHARED, ASYNC_OWN, THREADS_SHARED, THREADS_OWN, PROCESSES = 12, 12, 12, 12, 16
WRITERS = ASYNC_SHARED + ASYNC_OWN + THREADS_SHARED + THREADS_OWN + PROCESSES
RECORDS_EACH = 2
ROUNDS = int(os.environ.get("GROUNDKIT_STRESS_ROUNDS", "1"))

_PROCESS = textwrap.dedent(
    """
    import asyncio, sys, time
    from pathlib import Path
    from groundkit import Collection

    index, base, name, go = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3], Path(sys.argv[4])
    each = int(sys.argv[5])

    async def main():
        async with Collection.open(index, base_dir=base) as col:
            (index.parent / f"ready-{name}").touch()
            while not go.exists():
                await asyncio.sleep(0.005)
            for j in range(each):
                marker = f"Mark{name}x{j}"
                await col.add_documents([{"id": f"{name}-{j}", "text": f"{marker} kettle note"}])
                await col.search(marker, 1)

    asyncio.run(main())
    """
)


def _record(name: str, j: int) -> dict[str, str]:
    return {"id": f"{name}-{j}", "text": f"Mark{name}x{j} kettle note"}


async def _write(col: Collection, name: str) -> None:
    for j in range(RECORDS_EACH):
        await col.add_documents([_record(name, j)])
        await col.search(f"Mark{name}x{j}", 1)


def _write_sync(col: gks.SyncCollection, name: str) -> None:
    for j in range(RECORDS_EACH):
        col.add_documents([_record(name, j)])
        col.search(f"Mark{name}x{j}", 1)


async def _round(root: Path) -> None:
    index, base, go = root / "index", root / "base", root / "go"
    base.mkdir(parents=True)
    async with Collection.open(index, base_dir=base) as col:
        await col.add_documents([{"id": "seed", "text": "the first kettle note"}])

    names = [f"p{i}" for i in range(PROCESSES)]
    procs = [
        await asyncio.create_subprocess_exec(
            sys.executable,
            "-c",
            _PROCESS,
            *(str(index), str(base), name, str(go), str(RECORDS_EACH)),
            stderr=asyncio.subprocess.PIPE,
        )
        for name in names
    ]
    try:
        while not all((root / f"ready-{n}").exists() for n in names):
            if any(p.returncode is not None for p in procs):
                break
            await asyncio.sleep(0.01)

        shared = await Collection.open(index, base_dir=base)
        own = [await Collection.open(index, base_dir=base) for _ in range(ASYNC_OWN)]
        sync_shared = gks.Collection.open(index, base_dir=base)
        sync_own = [gks.Collection.open(index, base_dir=base) for _ in range(THREADS_OWN)]
        errors: list[BaseException] = []

        def thread(col: gks.SyncCollection, name: str) -> None:
            try:
                _write_sync(col, name)
            except BaseException as exc:  # reported below
                errors.append(exc)

        threads = [
            threading.Thread(target=thread, args=(sync_shared, f"ts{i}"))
            for i in range(THREADS_SHARED)
        ] + [threading.Thread(target=thread, args=(c, f"to{i}")) for i, c in enumerate(sync_own)]
        go.touch()
        for t in threads:
            t.start()
        try:
            await asyncio.gather(
                *(_write(shared, f"as{i}") for i in range(ASYNC_SHARED)),
                *(_write(c, f"ao{i}") for i, c in enumerate(own)),
            )
            for t in threads:
                await asyncio.to_thread(t.join)
        finally:
            for c in [shared, *own]:
                await c.close()
            for s in [sync_shared, *sync_own]:
                await asyncio.to_thread(s.close)
        assert errors == []
        for p in procs:
            _, stderr = await p.communicate()
            assert p.returncode == 0, stderr.decode(errors="replace")[-2000:]
    finally:
        for p in procs:
            if p.returncode is None:
                p.kill()
                await p.wait()

    writers = (
        [f"as{i}" for i in range(ASYNC_SHARED)]
        + [f"ao{i}" for i in range(ASYNC_OWN)]
        + [f"ts{i}" for i in range(THREADS_SHARED)]
        + [f"to{i}" for i in range(THREADS_OWN)]
        + names
    )
    assert len(writers) == WRITERS == 64
    async with Collection.open(index, base_dir=base) as col:
        stored = sorted([r.source async for r in col.store.iter_documents()])
        wanted = sorted(
            ["record://seed"] + [f"record://{w}-{j}" for w in writers for j in range(RECORDS_EACH)]
        )
        assert stored == wanted  # none lost, none twice
        for w in writers:
            for j in range(RECORDS_EACH):
                hits = (await col.search(f"Mark{w}x{j}", 1)).results
                assert [h.source for h in hits] == [f"record://{w}-{j}"]
                assert (await col.verify(hits[0])).verification == "verified"
        assert (await col.verify_all()).ok


async def test_sixty_four_writers_of_every_kind(tmp_path: Path) -> None:
    for round_ in range(ROUNDS):
        started = time.monotonic()
        await _round(tmp_path / f"round-{round_}")
        if ROUNDS > 1:
            print(f"round {round_}: {time.monotonic() - started:.1f} s", flush=True)
