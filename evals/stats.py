"""The one percentile every eval script reports.

Definition: linear interpolation between the two nearest ranks, which is
numpy's default (``method="linear"``), Hyndman & Fan type 7, and what
``statistics.quantiles(..., method="inclusive")`` computes. For ``q`` = 50 it is
the ordinary median (the mean of the middle two values when their number is
even). Nearest-rank percentiles are not used anywhere in ``evals/``.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["percentile"]


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0-100) of ``values``, linearly interpolated; NaN if empty."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q / 100.0
    lo = int(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)
