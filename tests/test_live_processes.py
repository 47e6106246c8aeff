"""The live lexical index across processes: a writer and a long-lived searcher, and
writers killed with SIGKILL in the middle of writes and merges.

The searcher never serves a chunk whose text is not the text of the version it
names, never a version older than one whose ingest had finished when the search
began, and never a document deleted before it began. After any kill the collection
opens, and its live index ranks exactly like a fresh rebuild from the store.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import signal
import subprocess
import sys
import textwrap
import time
from collections import Counter
from pathlib import Path

from groundkit import Collection
from groundkit.lexical.live import LiveIndex
from groundkit.storage import SQLiteMetadataStore
from groundkit.storage.segments import LocalSegments
from tests.services import REPO_ROOT

WORDS = ["amber", "basalt", "cobalt", "dune", "ember", "fjord"]
WORDS += ["glacier", "heath", "isle", "jade", "kelp", "lagoon"]

_WRITER = textwrap.dedent(
    """
    import asyncio, json, random, sys, time
    from pathlib import Path
    from groundkit import Collection

    WORDS = __WORDS__

    async def main():
        index, base, log = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3])
        seed, rounds = int(sys.argv[4]), int(sys.argv[5])
        rng = random.Random(seed)
        versions = {}
        async with Collection.open(index, base_dir=base) as col:
            print("ready", flush=True)
            with open(log, "a", encoding="utf-8") as out:
                for n in range(rounds):
                    source = f"f{rng.randrange(6)}.md"
                    if source in versions and rng.random() < 0.2:
                        await col.delete(sources=[source])
                        (base / source).unlink()
                        out.write(json.dumps({"deleted": source, "done": time.time()}) + "\\n")
                        del versions[source]
                    else:
                        text = " ".join(rng.choices(WORDS, k=rng.randint(3, 12))) + f" round{n}"
                        (base / source).write_text(text, encoding="utf-8")
                        out.write(json.dumps({"source": source, "text": text}) + "\\n")
                        out.flush()
                        await col.ingest(base / source)
                        versions[source] = versions.get(source, 0) + 1
                        out.write(json.dumps({"source": source, "version": versions[source],
                                              "done": time.time()}) + "\\n")
                    out.flush()
                    if n % 7 == 6:
                        await col.optimize()
        print("done", flush=True)

    asyncio.run(main())
    """
).replace("__WORDS__", repr(WORDS))


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": f"{REPO_ROOT / 'src'}{os.pathsep}{REPO_ROOT}"}


def _log(path: Path) -> list[dict[str, object]]:
    if not path.exists():
        return []
    lines = path.read_text(encoding="utf-8").splitlines()
    out: list[dict[str, object]] = []
    for line in lines:
        try:
            out.append(json.loads(line))
        except ValueError:
            break  # a line the writer was still writing
    return out


async def test_a_long_lived_searcher_never_serves_a_wrong_or_stale_chunk(tmp_path: Path) -> None:
    base, index, log = tmp_path / "base", tmp_path / "index", tmp_path / "writes.jsonl"
    base.mkdir()
    (base / "seed.md").write_text("seed text lagoon", encoding="utf-8")
    async with Collection.open(index, base_dir=base) as col:
        await col.ingest(base)
    writer = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        _WRITER,
        str(index),
        str(base),
        str(log),
        "7",
        "40",
        cwd=REPO_ROOT,
        env=_env(),
        stdout=asyncio.subprocess.PIPE,
    )
    assert writer.stdout is not None
    assert (await writer.stdout.readline()).strip() == b"ready"
    checked = 0
    async with Collection.open(index, base_dir=base) as searcher:
        while writer.returncode is None:
            started = time.time()
            response = await searcher.search(" ".join(random.sample(WORDS, 3)), 10)
            checked += _check(response.results, _log(log), started)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(writer.wait(), 0.01)
        assert writer.returncode == 0
        started = time.time()
        final = await searcher.search(" ".join(WORDS), 50)
        checked += _check(final.results, _log(log), started)
    assert checked > 20


class _Life:
    """One life of a source in the writer's log: its versions' texts, when each
    version's ingest finished, and when its delete finished (if it was deleted)."""

    def __init__(self) -> None:
        self.texts: list[str] = []
        self.finished: list[float] = []
        self.deleted: float | None = None


def _lives(history: list[dict[str, object]]) -> dict[str, list[_Life]]:
    lives: dict[str, list[_Life]] = {}
    for entry in history:
        source = str(entry.get("source") or entry.get("deleted"))
        chain = lives.setdefault(source, [_Life()])
        if "text" in entry:
            if chain[-1].deleted is not None:
                chain.append(_Life())
            chain[-1].texts.append(str(entry["text"]))
        elif "deleted" in entry:
            chain[-1].deleted = float(str(entry["done"]))
        else:
            chain[-1].finished.append(float(str(entry["done"])))
    return lives


def _check(
    results: list,  # type: ignore[type-arg]
    history: list[dict[str, object]],
    started: float,
) -> int:
    """Assert every result against the writer's log (read after the search): its text
    is the text of the version it names in some life of its source, that life was not
    deleted before the search began, and no newer version of it had finished its
    ingest before then."""
    lives = _lives(history)
    for result in results:
        if result.source == "seed.md":
            continue
        assert result.version is not None and result.version >= 1
        v = result.version
        matching = [
            life
            for life in lives[result.source]
            if len(life.texts) >= v
            and life.texts[v - 1][result.start_offset : result.end_offset] == result.content
        ]
        assert matching, "a chunk that is not its version's text"
        assert any(
            (life.deleted is None or life.deleted >= started)
            and not any(done < started for done in life.finished[v:])
            for life in matching
        ), "a deleted document or a stale version was served"
    return len(results)


_KILLED = textwrap.dedent(
    """
    import asyncio, random, sys
    from pathlib import Path
    from groundkit import Collection

    WORDS = __WORDS__

    async def main():
        index, base, seed = Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3])
        rng = random.Random(seed)
        async with Collection.open(index, base_dir=base) as col:
            print("ready", flush=True)
            for n in range(10_000):
                for _ in range(rng.randint(1, 4)):
                    name = f"k{rng.randrange(30)}.md"
                    text = " ".join(rng.choices(WORDS, k=rng.randint(5, 40)))
                    (base / name).write_text(text, encoding="utf-8")
                if rng.random() < 0.2:
                    victim = base / f"k{rng.randrange(30)}.md"
                    if victim.exists():
                        victim.unlink()
                await col.ingest(base)
                if rng.random() < 0.3:
                    await col.optimize()

    asyncio.run(main())
    """
).replace("__WORDS__", repr(WORDS))


async def _ranking(live: LiveIndex) -> list[object]:
    out: list[object] = []
    for query in (["amber"], ["basalt", "cobalt"], ["dune", "ember", "fjord"], WORDS):
        ids = await live.term_ids(query)
        out.append(live.index.search_ids(Counter(ids[t] for t in query if t in ids), 10))
    return out


def _run_killed(index: Path, base: Path, seed: int, after: float) -> None:
    """A writer looping over ingests and merges, killed with SIGKILL ``after`` seconds in."""
    proc = subprocess.Popen(
        [sys.executable, "-c", _KILLED, str(index), str(base), str(seed)],
        cwd=REPO_ROOT,
        env=_env(),
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    time.sleep(after)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)


async def test_sigkill_during_writes_and_merges_leaves_an_index_that_opens_and_is_exact(
    tmp_path: Path,
) -> None:
    base, index = tmp_path / "base", tmp_path / "index"
    base.mkdir()
    rng = random.Random(20261201)
    rebuilt = 0
    for round_ in range(8):
        await asyncio.to_thread(_run_killed, index, base, round_, rng.uniform(0.3, 2.5))
        store = await SQLiteMetadataStore.open(index / "default.sqlite3", create=False)
        try:
            live = await LiveIndex.open(store, LocalSegments(index / "default.segments"))
            rebuilt += live.rebuilt_because is not None
            fresh = await LiveIndex.open(store, None)
            assert await _ranking(live) == await _ranking(fresh)
        finally:
            await store.close()
        async with Collection.open(index, base_dir=base) as col:
            response = await col.search("amber basalt cobalt", 10)
            assert response.metadata["stale_dropped"] == 0
    # A kill leaves at worst a manifest behind the store, which is caught up, or
    # a half-written pack under a temporary name, which is never read: no rebuilds.
    assert rebuilt == 0
