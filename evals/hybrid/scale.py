"""Query p50 per setting against corpus size, when part 2 ran at several sizes."""

from __future__ import annotations

from pathlib import Path

from evals.hybrid.latency import LatencyResult
from evals.hybrid.latency_page import HYBRID_P50_TARGET_MS
from evals.machine import markdown_table
from evals.plots import Target, plot_hybrid_scale
from evals.stats import percentile

__all__ = ["SCALE_TARGETS", "scale_lines"]

# The latency target, drawn on the plot (HashEmbedder's query embedding takes microseconds,
# so the "hybrid" series is the one the target is about).
SCALE_TARGETS = (
    Target(
        f"hybrid p50 without query embedding ≤ {HYBRID_P50_TARGET_MS:g} ms",
        "p50",
        value=HYBRID_P50_TARGET_MS,
    ),
)


def scale_lines(measured: list[LatencyResult], png: Path) -> list[str]:
    """Query p50 per setting against corpus size: a table and a log-log plot."""
    labels = list(measured[0].samples)
    p50 = {label: [percentile(r.samples[label].total_ms, 50) for r in measured] for label in labels}
    rows = [
        [f"{r.prepared.chunks:,}"] + [f"{p50[label][i]:.2f}" for label in labels]
        for i, r in enumerate(measured)
    ]
    plot_hybrid_scale([r.prepared.chunks for r in measured], p50, SCALE_TARGETS, png)
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
