"""Query p50 per setting against corpus size, when part 2 ran at several sizes."""

from __future__ import annotations

import importlib
from pathlib import Path

from evals.hybrid.latency import LatencyResult
from evals.machine import markdown_table
from evals.stats import percentile

__all__ = ["scale_lines"]


def scale_lines(measured: list[LatencyResult], png: Path) -> list[str]:
    """Query p50 per setting against corpus size: a table and a log-log plot."""
    labels = list(measured[0].samples)
    rows = [
        [f"{r.prepared.chunks:,}"]
        + [f"{percentile(r.samples[label].total_ms, 50):.2f}" for label in labels]
        for r in measured
    ]
    matplotlib = importlib.import_module("matplotlib")
    matplotlib.use("Agg")
    plt = importlib.import_module("matplotlib.pyplot")
    fig, ax = plt.subplots(figsize=(8, 5))
    xs = [r.prepared.chunks for r in measured]
    for label in labels:
        ax.plot(xs, [percentile(r.samples[label].total_ms, 50) for r in measured], marker="o",
                label=label)  # fmt: skip
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("chunks")
    ax.set_ylabel("query p50 (ms)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    png.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(png, dpi=110)
    plt.close(fig)
    return [
        "## Against corpus size",
        "",
        "Query p50 (ms) per setting, from the sections above.",
        "",
        markdown_table(["chunks", *labels], rows),
        "",
        f"![query p50 against corpus size]({png.parent.name}/{png.name})",
        "",
    ]
