"""The progress events drive tqdm and rich as docs/progress.md shows, and embedding is
reported slice by slice."""

from __future__ import annotations

import io
import random
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest

from groundkit import Collection, IngestProgress
from groundkit.ingestion import progress
from groundkit.ingestion.progress import EMBED_SLICE_SECONDS, embed_in_slices
from tests.support import ToyEmbedder, write_tree


def _corpus(base: Path, files: int = 40) -> Path:
    write_tree(
        base, {f"d/{i:03d}.md": f"Paragraph {i} about pumps and valves.\n" for i in range(files)}
    )
    return base


async def test_tqdm_bars_follow_the_events(tmp_path: Path) -> None:
    tqdm = pytest.importorskip("tqdm").tqdm
    base = _corpus(tmp_path / "c")
    out = io.StringIO()
    bars: dict[str, object] = {}

    def progress(event: IngestProgress) -> None:
        bar = bars.get(event.stage)
        if bar is None:
            bar = bars[event.stage] = tqdm(
                desc=event.stage, unit=event.unit, total=event.total, file=out
            )
        bar.total = event.total  # type: ignore[attr-defined]
        bar.n = event.done  # type: ignore[attr-defined]
        bar.refresh()  # type: ignore[attr-defined]
        if event.finished:
            bar.close()  # type: ignore[attr-defined]

    async with Collection.open(tmp_path / "i", base_dir=base, embedder=ToyEmbedder()) as col:
        report = await col.ingest(base, progress=progress)
    assert len(report.added) == 40
    assert set(bars) >= {"discover", "read", "chunk", "store", "embed"}
    assert all(bar.n == bar.total for bar in bars.values())  # type: ignore[attr-defined]
    assert "read: 100%" in out.getvalue() and "embed: 100%" in out.getvalue()


async def test_rich_progress_follows_the_events(tmp_path: Path) -> None:
    rich_progress = pytest.importorskip("rich.progress")
    rich_console = pytest.importorskip("rich.console")
    base = _corpus(tmp_path / "c")
    console = rich_console.Console(file=io.StringIO(), force_terminal=False)
    with rich_progress.Progress(console=console) as bars:
        tasks: dict[str, int] = {}

        def progress(event: IngestProgress) -> None:
            if event.stage not in tasks:
                tasks[event.stage] = bars.add_task(event.stage, total=event.total)
            bars.update(tasks[event.stage], completed=event.done, total=event.total)

        async with Collection.open(tmp_path / "i", base_dir=base) as col:
            await col.ingest(base, progress=progress)
        shown = {task.description: task for task in bars.tasks}
    assert shown["read"].completed == shown["read"].total == 40
    assert shown["store"].finished


async def test_embedding_is_reported_in_slices(tmp_path: Path) -> None:
    base = _corpus(tmp_path / "c", files=200)
    events: list[IngestProgress] = []
    async with Collection.open(tmp_path / "i", base_dir=base, embedder=ToyEmbedder()) as col:
        report = await col.ingest(base, progress=events.append)
    embed = [e for e in events if e.stage == "embed"]
    assert report.chunks_embedded == 200
    assert len(embed) >= 3  # more than one event for one batch of 200
    assert [e.done for e in embed] == sorted(e.done for e in embed)
    assert embed[-1].done == embed[-1].total == 200


class _Clock:
    """``perf_counter`` for the progress module: time passes only when the fake
    embedder says it does."""

    def __init__(self) -> None:
        self.now = 0.0

    def perf_counter(self) -> float:
        return self.now


async def test_slices_keep_the_bar_moving_at_least_every_two_seconds(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each slice is sized from the one before, so while the embedding rate changes by
    at most 4x from one slice to the next, the bar moves at least every
    4 x EMBED_SLICE_SECONDS = 2 s. Timed on a clock the test owns, not the machine's."""
    clock = _Clock()
    monkeypatch.setattr(progress, "time", clock)
    rng = random.Random(7)
    texts = [f"text {i} " * (1 + i % 5) for i in range(3000)]
    position = {t: float(i) for i, t in enumerate(texts)}
    took: list[float] = []
    sizes: list[int] = []

    async def embed(batch: list[str]) -> npt.NDArray[np.float32]:
        per_text = rng.uniform(0.002, 0.008)  # the rate moves within a factor of 4
        clock.now += per_text * len(batch)
        took.append(per_text * len(batch))
        return np.asarray([[position[t]] for t in batch], dtype=np.float32)

    rows = await embed_in_slices(embed, texts, sizes.append)
    assert rows[:, 0].tolist() == [position[t] for t in texts]  # back in input order
    assert sum(sizes) == len(texts) and len(sizes) == len(took) > 10
    assert max(took) <= 4 * EMBED_SLICE_SECONDS

    # At a steady rate every slice after the first takes at most the target.
    clock.now = 0.0
    steady: list[float] = []

    async def embed_steadily(batch: list[str]) -> npt.NDArray[np.float32]:
        clock.now += 0.003 * len(batch)
        steady.append(0.003 * len(batch))
        return np.zeros((len(batch), 1), dtype=np.float32)

    await embed_in_slices(embed_steadily, texts, lambda n: None)
    assert max(steady[1:]) <= EMBED_SLICE_SECONDS
    assert max(steady[1:]) >= EMBED_SLICE_SECONDS / 2  # not needlessly small either


@pytest.mark.parametrize("granule", [1, 16, 64, 100])
async def test_slices_are_whole_batches_of_the_embedder(
    monkeypatch: pytest.MonkeyPatch, granule: int
) -> None:
    """Whatever the clock says, every slice but the last is a whole number of the
    embedder's batches, and the slices together are the texts longest first."""
    clock = _Clock()
    monkeypatch.setattr(progress, "time", clock)
    rng = random.Random(granule)
    texts = [f"text {i} " * (1 + i % 7) for i in range(2500)]
    calls: list[list[str]] = []

    async def embed(batch: list[str]) -> npt.NDArray[np.float32]:
        clock.now += rng.uniform(0.0005, 0.02) * len(batch)  # odd, moving rates
        calls.append(batch)
        return np.zeros((len(batch), 1), dtype=np.float32)

    await embed_in_slices(embed, texts, lambda n: None, granule=granule)
    assert len(calls) > 5
    assert all(len(c) % granule == 0 for c in calls[:-1]), [len(c) for c in calls]
    longest_first = sorted(texts, key=lambda t: -len(t))
    assert [t for c in calls for t in c] == longest_first
