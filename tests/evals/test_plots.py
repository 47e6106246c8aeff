"""The figures redrawn from the pages in docs/: valid PNGs, honest axes, every series named."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("matplotlib")

from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.image import imread

from evals import bench_filters, chunk_sweep, dense_scifact, plots
from evals.machine import REPO_ROOT

DOCS = REPO_ROOT / "docs"
_PNG = b"\x89PNG\r\n\x1a\n"
FIGURES = {
    "quality-ndcg.png",
    "bm25-scale.png",
    "benchmarks-hybrid-scale-scale.png",
    "chunk-sweep-ndcg.png",
    "quality-dense-fusion.png",
    "benchmarks-filters-p50.png",
}


@pytest.fixture(scope="module")
def drawn(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Figure]]:
    out = tmp_path_factory.mktemp("img")
    return out, plots.redraw(DOCS, out)


def _legend_labels(fig: Figure, ax: Axes) -> set[str]:
    own = ax.get_legend()
    legends = [*fig.legends, *([own] if own is not None else [])]
    return {text.get_text() for legend in legends for text in legend.get_texts()}


def _y_is_honest(fig: Figure, ax: Axes) -> bool:
    """From 0, or the figure says it is not: a labelled log axis, or a marked zoom."""
    if ax.get_yscale() == "log":
        return plots.LOG_LABEL in ax.get_ylabel()
    if ax.get_ylim()[0] == 0:
        return True
    marked = any(line.get_gid() == plots.BREAK_GID for line in ax.get_lines())
    return marked and "zoomed" in ax.get_title() and "not 0" in ax.get_title()


def test_every_figure_is_redrawn_as_a_png(drawn: tuple[Path, dict[str, Figure]]) -> None:
    out, figures = drawn
    assert set(figures) == FIGURES
    for name in FIGURES:
        data = (out / name).read_bytes()
        assert data.startswith(_PNG), name
        pixels = imread(out / name)
        assert pixels.shape[0] > 200 and pixels.shape[1] > 200, name


def test_axes_titles_labels_and_legends(drawn: tuple[Path, dict[str, Figure]]) -> None:
    _, figures = drawn
    for name, fig in figures.items():
        for ax in fig.axes:
            assert _y_is_honest(fig, ax), (name, ax.get_ylim(), ax.get_title())
            assert ax.get_title() or fig.get_suptitle(), name
            assert ax.get_xlabel() and ax.get_ylabel(), name
            # Units in the labels: a score says its range or direction, a time or size its unit.
            assert any(u in ax.get_ylabel() for u in ("(ms)", "(s)", "(MB)", "better")), name
            shown = _legend_labels(fig, ax)
            series = [line for line in ax.get_lines() if line.get_gid() != plots.BREAK_GID]
            series += ax.containers  # type: ignore[arg-type]
            assert series, name
            for artist in series:
                label = artist.get_label()
                assert label and not str(label).startswith("_"), (name, artist)
                assert label in shown, (name, label)


def test_targets_and_references_are_told_apart(drawn: tuple[Path, dict[str, Figure]]) -> None:
    _, figures = drawn
    kinds: dict[str, set[str]] = {"target": set(), "reference": set()}
    for name, fig in figures.items():
        for ax in fig.axes:
            for line in ax.get_lines():
                label = str(line.get_label())
                kind = label.split(":")[0]
                if kind in kinds:
                    kinds[kind].add(f"{line.get_color()} {line.get_linestyle()}")
                if kind == "target":
                    assert line.get_color() == plots._TARGET_COLOUR, (name, label)
                elif kind == "reference":
                    assert line.get_color() != plots._TARGET_COLOUR, (name, label)
    assert kinds["target"] and kinds["reference"]
    assert not kinds["target"] & kinds["reference"]


def test_figures_read_the_tables_of_record(drawn: tuple[Path, dict[str, Figure]]) -> None:
    _, figures = drawn
    sweep = figures["chunk-sweep-ndcg.png"].axes[0]
    points, whole = plots.chunk_sweep_from_page((DOCS / "chunk-sweep.md").read_text())
    [measured] = [line for line in sweep.get_lines() if "chunked" in str(line.get_label())]
    assert list(measured.get_xdata()) == [x for x, _ in points]  # type: ignore[arg-type]
    [reference] = [line for line in sweep.get_lines() if "whole document" in str(line.get_label())]
    assert str(reference.get_label()).startswith("reference: ")
    assert whole is not None and list(reference.get_ydata()) == [whole, whole]  # type: ignore[arg-type]
    fusion = plots.fusion_from_page((DOCS / "quality-dense.md").read_text())
    assert [w for w, _ in fusion[0]] == [0.5, 0.6, 0.7]
    assert fusion[1][0][0].startswith("hybrid rrf")
    filters = plots.filter_points_from_page((DOCS / "benchmarks-filters.md").read_text())
    assert {p.size for p in filters} == {"10k chunks", "100k chunks"}
    assert {p.mode for p in filters} == {"bm25", "dense", "hybrid"}
    assert len(figures["benchmarks-filters-p50.png"].axes) == 3


def test_redrawing_gives_the_same_bytes(
    drawn: tuple[Path, dict[str, Figure]], tmp_path: Path
) -> None:
    out, _ = drawn
    plots.redraw(DOCS, tmp_path)
    for name in FIGURES:
        assert (tmp_path / name).read_bytes() == (out / name).read_bytes(), name


def test_every_figure_is_linked_from_a_page() -> None:
    pages = "\n".join(p.read_text(encoding="utf-8") for p in DOCS.glob("*.md"))
    for name in FIGURES:
        assert f"(img/{name})" in pages, name
    # The generators write these links; the pages hold the same lines.
    assert chunk_sweep.plot_link("img/chunk-sweep-ndcg.png") in pages
    assert dense_scifact.plot_link("img/quality-dense-fusion.png") in pages
    for line in bench_filters.plot_section("img/benchmarks-filters-p50.png"):
        assert line in pages


def test_scale_cells_with_open_and_build_apart(tmp_path: Path) -> None:
    from evals.bench_bm25 import SCALE_TARGETS

    page = "\n".join(
        [
            "## Against corpus size",
            "",
            "| chunks | groundkit | bm25s | tantivy |",
            "|---|---|---|---|",
            "| 10,000 | 0.1 / 0.02 / 0.3 / 109 | 0.2 / 0.1 / 0.8 / 183 | 0.03 / – / 0.6 / 1,122 |",
            "| 100,000 | 0.6 / 0.05 / 2.1 / 300 | 2.2 / 0.4 / 7.7 / 487 | 0.06 / – / 5.5 / 2,288 |",
        ]
    )  # fmt: skip
    rows = plots.bm25_scale_from_page(page)
    assert rows[1].chunks == 100_000
    assert rows[0].values["tantivy"] == {"p50": 0.03, "open": None, "build": 0.6, "rss": 1122.0}
    fig = plots.plot_bm25_scale(rows, SCALE_TARGETS, tmp_path / "scale.png")
    assert fig.axes[0].get_title() == "query p50"
    assert len(fig.axes) == 4
    targets = [str(line.get_label()) for ax in fig.axes for line in ax.get_lines()]
    assert "target: groundkit open ≤ 0.5 s (set for 1M chunks)" in targets
    assert (tmp_path / "scale.png").read_bytes().startswith(_PNG)


def test_a_zoomed_axis_is_marked_and_a_full_one_is_not(tmp_path: Path) -> None:
    zoomed = plots.plot_chunk_sweep([(400, 0.64), (800, 0.69)], 0.68, tmp_path / "z.png")
    ax = zoomed.axes[0]
    assert ax.get_ylim()[0] > 0 and "y axis zoomed" in ax.get_title()
    assert any(line.get_gid() == plots.BREAK_GID for line in ax.get_lines())
    full = plots.plot_chunk_sweep([(400, 0.01), (800, 0.3)], None, tmp_path / "f.png")
    ax = full.axes[0]
    assert ax.get_ylim()[0] == 0 and "zoomed" not in ax.get_title()
    assert not any(line.get_gid() == plots.BREAK_GID for line in ax.get_lines())
