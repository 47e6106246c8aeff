"""The figures of the generated pages, drawn by one set of functions.

    python -m evals.plots [--docs docs] [--out docs/img]

Each eval that writes a page calls its plotting function here at the end of its run,
with the numbers it has just measured. ``python -m evals.plots`` draws the same
figures again from the Markdown tables of the pages in ``--docs`` (the results of
record, written by those evals), so the images can be redrawn after a change to a
plot without rerunning an expensive benchmark. The output is deterministic: Agg,
a fixed dpi and no software tag in the PNG, so unchanged numbers give unchanged bytes.

How every figure is drawn:

- a title, and axis labels that give units;
- measured series as solid lines (or bars) with markers, each named in a legend;
- reference lines (a baseline run, published figures, another system as an anchor)
  in grey or muted colours, dashed or dotted, named ``reference: ...``;
- target lines in red, dash-dot, named ``target: ...``, so the two never read alike;
- a linear y axis starts at 0. When it does not, the figure says so: a log axis is
  labelled ``(log scale)``, and a zoomed axis has break marks on its spine
  (``BREAK_GID``) and a note in the title.
"""

from __future__ import annotations

import argparse
import math
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeGuard

from evals.machine import REPO_ROOT

if TYPE_CHECKING:  # matplotlib itself is imported when a figure is drawn
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

__all__ = [
    "BREAK_GID",
    "FilterPoint",
    "ScaleRow",
    "Target",
    "fusion_points",
    "main",
    "markdown_tables",
    "plot_bm25_scale",
    "plot_chunk_sweep",
    "plot_filter_cost",
    "plot_fusion_weight",
    "plot_hybrid_scale",
    "plot_quality_ndcg",
    "redraw",
]

DPI = 110
# The gid of the strokes that mark a y axis which does not start at 0.
BREAK_GID = "y-axis-break"
LOG_LABEL = "(log scale)"

_SERIES = ["#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#17becf"]
_REFERENCE_COLOURS = ["#555555", "#8c8c8c", "#6b8e23", "#7b68ae", "#a0785a", "#4682b4"]
_REFERENCE_STYLES: list[Any] = ["--", ":", (0, (5, 1)), (0, (1, 1)), (0, (8, 3)), (0, (3, 3))]
_TARGET_COLOUR = "#d62728"
_TARGET_STYLES: list[Any] = ["-.", (0, (4, 1.5, 1, 1.5, 1, 1.5))]


# --- drawing helpers ----------------------------------------------------------------


def _figure(width: float, height: float, ncols: int = 1) -> tuple[Figure, list[Axes]]:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height))
    FigureCanvasAgg(fig)  # PNGs through Agg, whatever backend pyplot would pick
    axes = fig.subplots(1, ncols, squeeze=False)[0]
    return fig, list(axes)


def _save(fig: Figure, png: Path) -> Figure:
    png.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(png, dpi=DPI, bbox_inches="tight", metadata={"Software": None})
    return fig


def _reference(ax: Axes, i: int, value: float, label: str) -> None:
    ax.axhline(
        value,
        color=_REFERENCE_COLOURS[i % len(_REFERENCE_COLOURS)],
        linestyle=_REFERENCE_STYLES[i % len(_REFERENCE_STYLES)],
        linewidth=1.3,
        label=f"reference: {label}",
        zorder=3,
    )


def _target_style(i: int) -> dict[str, Any]:
    return {
        "color": _TARGET_COLOUR,
        "linestyle": _TARGET_STYLES[i % len(_TARGET_STYLES)],
        "linewidth": 1.4,
        "zorder": 4,
    }


def _log_y(ax: Axes, label: str) -> None:
    ax.set_yscale("log")
    ax.set_ylabel(f"{label} {LOG_LABEL}")


def _zoom_y(ax: Axes, values: Iterable[float], step: float = 0.05) -> float:
    """Limit the y axis to a band around ``values`` (scores from 0 to 1) and mark its foot
    as cut; returns the low end."""
    got = list(values)
    low = max(0.0, math.floor((min(got) - step / 2) / step) * step)
    high = math.ceil((max(got) + 0.015) * 100) / 100
    ax.set_ylim(low, high)
    if low > 0:
        # Two short slanted strokes across the foot of the y axis: the scale is cut there.
        d = 0.015
        for y in (0.012, 0.042):
            ax.plot(
                (-d, d),
                (y - d, y + d),
                transform=ax.transAxes,
                color="black",
                linewidth=1.0,
                clip_on=False,
                gid=BREAK_GID,
            )
    return low


def _zoom_note(low: float) -> str:
    return f"y axis zoomed: starts at {low:.2f}, not 0" if low > 0 else ""


def _title(ax: Axes, title: str, note: str = "") -> None:
    ax.set_title(f"{title}\n({note})" if note else title, fontsize=10)


# --- the figures ----------------------------------------------------------------------


def plot_quality_ndcg(
    name: str,
    queries: int,
    modes: Sequence[tuple[str, float]],
    published: Sequence[tuple[str, float]],
    png: Path,
) -> Figure:
    """Bars of nDCG@10 per mode from 0, the dataset's published figures as reference lines."""
    fig, (ax,) = _figure(8.0, 5.6)
    labels = [mode for mode, _ in modes]
    values = [value for _, value in modes]
    bars = ax.bar(
        labels, values, color="#4c72b0", width=0.55, zorder=2, label="groundkit, this run"
    )
    for bar, value in zip(bars, values, strict=True):
        # Inside the bar, clear of the reference lines near its top.
        ax.text(
            bar.get_x() + bar.get_width() / 2,
            value / 2,
            f"{value:.3f}",
            ha="center",
            va="center",
            color="white",
            fontsize=10,
        )
    for i, (label, value) in enumerate(published):
        _reference(ax, i, value, f"{value:.3f} {label}")
    top = max([*values, *(v for _, v in published), 0.0])
    ax.set_ylim(0.0, min(1.0, top + 0.1) if top <= 0.9 else 1.0)
    ax.set_ylabel("nDCG@10 (0 to 1, higher is better)")
    ax.set_xlabel("search mode")
    _title(ax, f"{name}: nDCG@10 per mode ({queries} queries)")
    ax.grid(axis="y", alpha=0.3, zorder=0)
    ax.set_xlim(-0.75, len(values) - 0.25)
    ax.legend(
        fontsize=7.5,
        loc="upper center",
        bbox_to_anchor=(0.5, -0.12),
        ncol=2,
        title="references are published figures, not run here" if published else None,
        title_fontsize=8,
        frameon=False,
    )
    return _save(fig, png)


@dataclass(frozen=True)
class Target:
    """A goal drawn as a line on the panel of ``metric``: a fixed ``value``, or ``factor``
    times the value of the series ``of`` at each x."""

    label: str
    metric: str
    value: float | None = None
    factor: float | None = None
    of: str | None = None
    of_metric: str | None = None  # the metric of ``of`` it multiplies (default: ``metric``)


@dataclass(frozen=True)
class ScaleRow:
    """One corpus size of the BM25 scale table: per system, per metric, a value or None."""

    chunks: int
    values: dict[str, dict[str, float | None]] = field(default_factory=dict)


# Metric key → panel title (with unit); a panel is drawn for each metric the rows hold.
BM25_PANELS = (
    ("p50", "query p50", "ms"),
    ("open", "open from disk, warm cache\n(rank-bm25: its build)", "s"),
    ("open_or_build", "open (groundkit) or build (others)", "s"),
    ("build", "build from scratch", "s"),
    ("rss", "peak RSS of the serving process", "MB"),
)


def _positive(value: float | None) -> TypeGuard[float]:
    """A value a log axis can show (not missing, not NaN, above 0)."""
    return value is not None and value == value and value > 0


def _target_points(
    target: Target, xs: Sequence[int], base: Sequence[float | None]
) -> tuple[list[int], list[float]]:
    """The line of ``target``; ``base`` is the series a relative target multiplies."""
    if target.value is not None:
        return [min(xs), max(xs)], [target.value, target.value]
    assert target.factor is not None
    points = [(x, target.factor * v) for x, v in zip(xs, base, strict=False) if _positive(v)]
    return [x for x, _ in points], [y for _, y in points]


def plot_bm25_scale(rows: Sequence[ScaleRow], targets: Sequence[Target], png: Path) -> Figure:
    """Every system against corpus size, one log-log panel per metric, with the targets."""
    systems = list(dict.fromkeys(s for row in rows for s in row.values))
    metrics = [p for p in BM25_PANELS if any(p[0] in v for r in rows for v in r.values.values())]
    fig, axes = _figure(4.4 * len(metrics), 4.6, len(metrics))
    xs = [row.chunks for row in rows]
    for ax, (metric, title, unit) in zip(axes, metrics, strict=True):
        series: dict[str, list[float | None]] = {
            s: [row.values.get(s, {}).get(metric) for row in rows] for s in systems
        }
        hidden: list[str] = []
        for i, system in enumerate(systems):
            points = [(x, v) for x, v in zip(xs, series[system], strict=True) if _positive(v)]
            if any(v is not None and v == v and v <= 0 for v in series[system]):
                hidden.append(system)
            if points:
                ax.plot(
                    [x for x, _ in points],
                    [v for _, v in points],
                    marker="o",
                    color=_SERIES[i % len(_SERIES)],
                    label=system,
                )
        for i, target in enumerate(t for t in targets if t.metric == metric):
            of = target.of_metric or metric
            base = [row.values.get(target.of or "", {}).get(of) for row in rows]
            tx, ty = _target_points(target, xs, base)
            if tx:
                ax.plot(tx, ty, label=f"target: {target.label}", **_target_style(i))
        ax.set_xscale("log")
        ax.set_xlabel(f"corpus size, chunks {LOG_LABEL}")
        _log_y(ax, f"{title.splitlines()[0]} ({unit})")
        _title(ax, title)
        ax.grid(True, which="both", alpha=0.3)
        if hidden:
            # A log axis has no 0: say which measured values it cannot show.
            ax.text(
                0.98,
                0.02,
                f"0 (not drawable on a log axis): {', '.join(hidden)}",
                transform=ax.transAxes,
                ha="right",
                va="bottom",
                fontsize=7,
            )
        ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.2), frameon=False)
    fig.suptitle("BM25 systems against corpus size (log–log axes)", fontsize=11)
    fig.tight_layout()
    return _save(fig, png)


def plot_hybrid_scale(
    chunks: Sequence[int],
    series: dict[str, list[float]],
    targets: Sequence[Target],
    png: Path,
) -> Figure:
    """Query p50 per setting against corpus size; ``anchor: ...`` series are references."""
    fig, (ax,) = _figure(8.5, 5.4)
    measured = [label for label in series if not label.startswith("anchor:")]
    anchors = [label for label in series if label.startswith("anchor:")]
    for i, label in enumerate(measured):
        ax.plot(chunks, series[label], marker="o", color=_SERIES[i % len(_SERIES)], label=label)
    for i, label in enumerate(anchors):
        ax.plot(
            chunks,
            series[label],
            marker="s",
            markerfacecolor="none",
            color=_REFERENCE_COLOURS[i % len(_REFERENCE_COLOURS)],
            linestyle=_REFERENCE_STYLES[i % len(_REFERENCE_STYLES)],
            label="reference: " + label.removeprefix("anchor:").strip(),
        )
    for i, target in enumerate(targets):
        tx, ty = _target_points(target, chunks, series.get(target.of or "", []))
        ax.plot(tx, ty, label=f"target: {target.label}", **_target_style(i))
    ax.set_xscale("log")
    ax.set_xlabel(f"corpus size, chunks {LOG_LABEL}")
    _log_y(ax, "query p50 (ms)")
    _title(ax, "Search latency against corpus size, synthetic corpora", "log–log axes")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7.5, loc="upper center", bbox_to_anchor=(0.5, -0.13), ncol=2)
    fig.tight_layout()
    return _save(fig, png)


def _scores(
    ax: Axes, points: Sequence[tuple[Any, float]], label: str, digits: int
) -> tuple[list[Any], list[float]]:
    """One measured series of scores, each point marked with its value; its xs and ys."""
    xs = [x for x, _ in points]
    ys = [y for _, y in points]
    ax.plot(xs, ys, marker="o", color=_SERIES[0], label=label)
    for x, y in points:
        ax.annotate(
            f"{y:.{digits}f}", (x, y), textcoords="offset points", xytext=(0, 6), ha="center",
            fontsize=8,
        )  # fmt: skip
    return xs, ys


def _finish_scores(fig: Figure, title: str, low: float, png: Path) -> Figure:
    """Label, title (with the zoom note), legend and save a one-panel plot of nDCG@10."""
    ax = fig.axes[0]
    ax.set_ylabel("nDCG@10 (higher is better)")
    _title(ax, title, _zoom_note(low))
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    return _save(fig, png)


def plot_chunk_sweep(
    points: Sequence[tuple[int, float]], whole_document: float | None, png: Path
) -> Figure:
    """nDCG@10 against the chunk budget, the whole-document run as a reference line."""
    fig, (ax,) = _figure(8.0, 5.0)
    xs, ys = _scores(ax, points, "groundkit BM25, chunked", 3)
    if whole_document is not None:
        _reference(ax, 0, whole_document, f"whole document, one chunk each ({whole_document:.3f})")
    low = _zoom_y(ax, [*ys, *([] if whole_document is None else [whole_document])])
    ax.set_xscale("log")
    ax.set_xticks(xs, [str(x) for x in xs])
    ax.minorticks_off()
    ax.set_xlabel(f"chunk budget, max_chars (characters; overlap max_chars // 8) {LOG_LABEL}")
    return _finish_scores(fig, "SciFact BM25: nDCG@10 against the chunk budget", low, png)


def plot_fusion_weight(
    points: Sequence[tuple[float, float]],
    references: Sequence[tuple[str, float]],
    default_weight: float | None,
    png: Path,
) -> Figure:
    """nDCG@10 of convex fusion against the BM25 weight; RRF and single modes as references."""
    fig, (ax,) = _figure(8.0, 5.0)
    _, ys = _scores(ax, points, "hybrid, convex fusion", 4)
    for i, (label, value) in enumerate(references):
        _reference(ax, i, value, f"{label} ({value:.4f})")
    if default_weight is not None:
        ax.axvline(
            default_weight,
            color="black",
            linestyle=(0, (1, 3)),
            linewidth=1.0,
            label=f"groundkit's default weight ({default_weight:g})",
        )
    low = _zoom_y(ax, [*ys, *(v for _, v in references)])
    ax.set_xlim(0.0, 1.0)
    ax.set_xlabel("BM25 weight in convex fusion (0 = dense only, 1 = BM25 only)")
    return _finish_scores(fig, "SciFact: nDCG@10 against the fusion weight", low, png)


@dataclass(frozen=True)
class FilterPoint:
    """One row of a filter benchmark: p50 of ``mode`` with ``setting`` on ``size``."""

    size: str
    mode: str
    setting: str
    share: float  # of the chunks the setting keeps, 0 to 1
    p50_ms: float


CLEARANCE = "clearance public"
NO_FILTER = "no filter"


def plot_filter_cost(points: Sequence[FilterPoint], png: Path) -> Figure:
    """p50 against the share of chunks a filter keeps: a panel per mode, a line per size.

    Field filters (and no filter, at 100%) make the line; the clearance is its own marker;
    each size's unfiltered p50 is a dotted reference line."""
    modes = list(dict.fromkeys(p.mode for p in points))
    sizes = list(dict.fromkeys(p.size for p in points))
    fig, axes = _figure(4.6 * len(modes), 4.6, len(modes))
    for ax, mode in zip(axes, modes, strict=True):
        top = 0.0
        for i, size in enumerate(sizes):
            colour = _SERIES[i % len(_SERIES)]
            here = [p for p in points if p.mode == mode and p.size == size]
            line = sorted((p for p in here if p.setting != CLEARANCE), key=lambda p: p.share)
            ax.plot(
                [100 * p.share for p in line],
                [p.p50_ms for p in line],
                marker="o",
                color=colour,
                label=f"{size}: field filters",
            )
            for p in here:
                if p.setting == CLEARANCE:
                    ax.plot(
                        [100 * p.share],
                        [p.p50_ms],
                        marker="D",
                        markersize=7,
                        markerfacecolor="none",
                        linestyle="none",
                        color=colour,
                        label=f"{size}: clearance public",
                    )
                if p.setting == NO_FILTER:
                    ax.axhline(
                        p.p50_ms,
                        color=colour,
                        linestyle=":",
                        linewidth=1.0,
                        alpha=0.8,
                        label=f"reference: {size}, no filter",
                    )
            top = max([top, *(p.p50_ms for p in here)])
        ax.set_xlim(0, 105)
        ax.set_ylim(0, top * 1.15 if top > 0 else 1.0)
        ax.set_xlabel("chunks the filter keeps (%)")
        ax.set_ylabel("query p50 (ms)")
        _title(ax, f"{mode} search")
        ax.grid(True, alpha=0.3)
    handles, labels = axes[0].get_legend_handles_labels()
    fig.suptitle("What a filter costs: query p50 against the share of chunks it keeps")
    fig.tight_layout()
    # Every panel draws the same series: one legend under them all.
    fig.legend(
        handles,
        labels,
        loc="upper center",
        bbox_to_anchor=(0.5, 0.0),
        ncol=len(sizes),
        fontsize=8,
        frameon=False,
    )
    return _save(fig, png)


# --- reading the pages back -------------------------------------------------------------


@dataclass(frozen=True)
class Table:
    heading: str  # the nearest heading above it, without its #s
    header: list[str]
    rows: list[list[str]]


def markdown_tables(text: str) -> list[Table]:
    """The GitHub-flavoured tables of a page, each with the heading it sits under."""
    tables: list[Table] = []
    heading = ""
    block: list[list[str]] = []

    def close() -> None:
        if len(block) >= 2 and all(set(c) <= set("-: ") for c in block[1]):
            tables.append(Table(heading, block[0], block[2:]))
        block.clear()

    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("|") and stripped.endswith("|"):
            block.append([cell.strip() for cell in stripped[1:-1].split("|")])
            continue
        close()
        if stripped.startswith("#"):
            heading = stripped.lstrip("#").strip()
    close()
    return tables


def _table(tables: list[Table], where: str, test: Callable[[Table], bool]) -> Table:
    for table in tables:
        if test(table):
            return table
    raise ValueError(f"{where}: the table to plot is not there")


def _number(cell: str) -> float | None:
    cell = cell.replace(",", "").strip()
    if not cell or cell.startswith("–") or cell == "-":
        return None
    return float(cell.split()[0].rstrip("×"))


Scores = list[tuple[str, float]]


def quality_from_page(text: str) -> tuple[str, int, Scores, Scores]:
    """(dataset, queries, (mode, nDCG@10) rows, (system, nDCG@10) published rows)."""
    title = re.search(r"^# Retrieval quality: (.+)$", text, re.M)
    queries = re.search(r"over (\d+) judged", text)
    if title is None or queries is None:
        raise ValueError("quality page: its title or query count is missing")
    tables = markdown_tables(text)
    modes = _table(tables, "quality page", lambda t: t.header[:2] == ["mode", "nDCG@10"])
    published = [t for t in tables if t.header == ["system", "nDCG@10"]]
    return (
        title[1].strip(),
        int(queries[1]),
        [(r[0], float(r[1])) for r in modes.rows],
        [(r[0], float(r[1])) for r in published[0].rows] if published else [],
    )


def bm25_scale_from_page(text: str) -> list[ScaleRow]:
    """The rows of the BM25 page's table against corpus size.

    A cell is ``p50 / open / build / peak RSS`` or, on pages written before open and
    build were measured apart, ``p50 / open or build / peak RSS``."""
    table = _table(markdown_tables(text), "BM25 page", lambda t: t.heading == "Against corpus size")
    systems = table.header[1:]
    rows = []
    for row in table.rows:
        values: dict[str, dict[str, float | None]] = {}
        for system, cell in zip(systems, row[1:], strict=True):
            parts = [_number(p) for p in cell.split(" / ")]
            if len(parts) == 4:
                values[system] = dict(zip(("p50", "open", "build", "rss"), parts, strict=True))
            elif len(parts) == 3:
                values[system] = dict(zip(("p50", "open_or_build", "rss"), parts, strict=True))
        rows.append(ScaleRow(int(row[0].replace(",", "")), values))
    return rows


def hybrid_scale_from_page(text: str) -> tuple[list[int], dict[str, list[float]]]:
    table = _table(
        markdown_tables(text), "hybrid scale page", lambda t: t.heading == "Against corpus size"
    )
    chunks = [int(r[0].replace(",", "")) for r in table.rows]
    series = {
        label: [float(r[i + 1]) for r in table.rows] for i, label in enumerate(table.header[1:])
    }
    return chunks, series


def chunk_sweep_from_page(text: str) -> tuple[list[tuple[int, float]], float | None]:
    table = _table(markdown_tables(text), "chunk sweep page", lambda t: t.header[0] == "max_chars")
    column = table.header.index("nDCG@10")
    points = [(int(r[0]), float(r[column])) for r in table.rows if r[0].isdigit()]
    whole = [float(r[column]) for r in table.rows if r[0] == "whole document"]
    return points, whole[0] if whole else None


_WEIGHT = re.compile(r"^hybrid convex, bm25 weight ([0-9.]+)")


def fusion_points(
    runs: Iterable[tuple[str, float]],
) -> tuple[list[tuple[float, float]], list[tuple[str, float]]]:
    """From (run label, nDCG@10): convex fusion's (BM25 weight, nDCG@10) points, sorted, and
    every other run as a reference (RRF first)."""
    points: list[tuple[float, float]] = []
    references: list[tuple[str, float]] = []
    for label, value in runs:
        weight = _WEIGHT.match(label)
        if weight is not None:
            points.append((float(weight[1]), value))
        else:
            references.append((fusion_reference_label(label), value))
    references.sort(key=lambda r: not r[0].startswith("hybrid"))
    return sorted(points), references


def fusion_from_page(text: str) -> tuple[list[tuple[float, float]], list[tuple[str, float]]]:
    """``fusion_points`` of the fusion page's table."""
    tables = markdown_tables(text)
    table = _table(tables, "fusion page", lambda t: t.header[:2] == ["run", "nDCG@10"])
    return fusion_points((r[0], float(r[1])) for r in table.rows)


def fusion_reference_label(run: str) -> str:
    """The legend name of a run that is not a point of the convex sweep."""
    return {"bm25": "BM25 alone", "dense": "dense alone"}.get(run, run)


_SHARE = re.compile(r"^(.*) \((\d+)% of chunks\)$")
_SIZE_HEADING = re.compile(r"^([\d,]+) chunks$")


def filter_points_from_page(text: str) -> list[FilterPoint]:
    points: list[FilterPoint] = []
    for table in markdown_tables(text):
        size = _SIZE_HEADING.match(table.heading)
        if size is None or table.header[:3] != ["mode", "setting", "p50 ms"]:
            continue
        for mode, setting, p50, *_ in table.rows:
            share = _SHARE.match(setting)
            if share is None:
                raise ValueError(f"filter page: cannot read the share in {setting!r}")
            points.append(
                FilterPoint(
                    size_name(int(size[1].replace(",", ""))),
                    mode,
                    share[1],
                    int(share[2]) / 100,
                    float(p50),
                )
            )
    return points


def size_name(chunks: int) -> str:
    """``10k chunks``, ``1M chunks``: a corpus size as a legend names it."""
    for unit, div in (("M", 1_000_000), ("k", 1000)):
        if chunks >= div and chunks % div == 0:
            return f"{chunks // div}{unit} chunks"
    return f"{chunks:,} chunks"


# --- the command ------------------------------------------------------------------------


def redraw(docs: Path, out: Path) -> dict[str, Figure]:
    """Every figure drawn again from the pages in ``docs`` into ``out``, by file name.

    A page that is missing is passed over; one whose table cannot be read raises."""
    from evals.bench_bm25 import SCALE_TARGETS
    from evals.hybrid.scale import SCALE_TARGETS as HYBRID_TARGETS
    from groundkit import RetrievalConfig

    def page(name: str) -> str | None:
        path = docs / name
        return path.read_text(encoding="utf-8") if path.is_file() else None

    figures: dict[str, Figure] = {}
    if (text := page("quality.md")) is not None:
        name, queries, modes, published = quality_from_page(text)
        png = out / "quality-ndcg.png"
        figures[png.name] = plot_quality_ndcg(name, queries, modes, published, png)
    if (text := page("benchmarks.md")) is not None:
        png = out / "bm25-scale.png"
        figures[png.name] = plot_bm25_scale(bm25_scale_from_page(text), SCALE_TARGETS, png)
    if (text := page("benchmarks-hybrid-scale.md")) is not None:
        chunks, series = hybrid_scale_from_page(text)
        png = out / "benchmarks-hybrid-scale-scale.png"
        figures[png.name] = plot_hybrid_scale(chunks, series, HYBRID_TARGETS, png)
    if (text := page("chunk-sweep.md")) is not None:
        points, whole = chunk_sweep_from_page(text)
        png = out / "chunk-sweep-ndcg.png"
        figures[png.name] = plot_chunk_sweep(points, whole, png)
    if (text := page("quality-dense.md")) is not None:
        weights, references = fusion_from_page(text)
        png = out / "quality-dense-fusion.png"
        default = RetrievalConfig().hybrid_bm25_weight
        figures[png.name] = plot_fusion_weight(weights, references, default, png)
    if (text := page("benchmarks-filters.md")) is not None:
        png = out / "benchmarks-filters-p50.png"
        figures[png.name] = plot_filter_cost(filter_points_from_page(text), png)
    return figures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m evals.plots", description=__doc__)
    parser.add_argument("--docs", type=Path, default=REPO_ROOT / "docs")
    parser.add_argument("--out", type=Path, default=None, help="default: img/ in --docs")
    args = parser.parse_args(argv)
    out = args.out or args.docs / "img"
    for name in redraw(args.docs, out):
        print(f"wrote {out / name}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
