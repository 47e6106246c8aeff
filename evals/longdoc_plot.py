"""Plot the long-document figures: nDCG@10 and citation precision per configuration.

    python -m evals.longdoc_plot --json 20=L20.json --json 50=L50.json \
                                 --out docs/img/quality-longdoc.png

Each ``--json`` is ``LABEL=FILE``, a file written by ``python -m evals.longdoc --json``
(``{"<configuration> / <mode>": {"ndcg@10": ..., "citation_precision": ...}}``). One row of
panels per file: bars per configuration, one colour per mode. Needs matplotlib (the
``evals`` extra).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

__all__ = ["load_figures", "main"]

_METRICS = (("ndcg@10", "nDCG@10"), ("citation_precision", "citation precision"))


def load_figures(path: Path) -> dict[str, dict[str, dict[str, float]]]:
    """``{configuration: {mode: {metric: value}}}`` from one longdoc JSON file."""
    raw: dict[str, dict[str, float]] = json.loads(path.read_text(encoding="utf-8"))
    out: dict[str, dict[str, dict[str, float]]] = {}
    for key, metrics in raw.items():
        config, _, mode = key.rpartition(" / ")
        out.setdefault(config, {})[mode] = metrics
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="append", required=True, metavar="LABEL=FILE")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = []
    for item in args.json:
        label, _, name = item.partition("=")
        if not name:
            parser.error(f"--json takes LABEL=FILE, got {item!r}")
        runs.append((label, load_figures(Path(name))))
    modes = sorted({m for _, figures in runs for per in figures.values() for m in per})
    fig, axes = plt.subplots(len(runs), len(_METRICS), figsize=(13, 4.2 * len(runs)), squeeze=False)
    width = 0.8 / max(1, len(modes))
    for row, (label, figures) in enumerate(runs):
        configs = list(figures)
        for col, (metric, title) in enumerate(_METRICS):
            ax: Any = axes[row][col]
            for m, mode in enumerate(modes):
                xs = [i + (m - (len(modes) - 1) / 2) * width for i in range(len(configs))]
                ys = [figures[c].get(mode, {}).get(metric, float("nan")) for c in configs]
                ax.bar(xs, ys, width=width, label=mode)
            ax.set_xticks(range(len(configs)))
            ax.set_xticklabels(configs, rotation=30, ha="right", fontsize=7)
            ax.set_title(f"{title}, {label} abstracts per file", fontsize=9)
            ax.grid(axis="y", alpha=0.3)
            if row == 0 and col == 0:
                ax.legend(fontsize=8)
    fig.tight_layout()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    # A fixed date and hash salt keep the SVG byte-identical for the same figures.
    plt.rcParams["svg.hashsalt"] = "groundkit"
    fig.savefig(args.out, metadata={"Date": None} if args.out.suffix == ".svg" else None, dpi=110)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
