"""The progress events drive tqdm and rich as docs/progress.md shows, and embedding is
reported slice by slice."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from groundkit import Collection, IngestProgress
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
