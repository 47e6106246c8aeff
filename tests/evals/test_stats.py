"""evals.stats.percentile is linear interpolation, the definition the pages report."""

from __future__ import annotations

import math
import statistics

import numpy as np
import pytest

from evals.stats import percentile


@pytest.mark.parametrize("n", [1, 2, 3, 10, 99, 100, 201])
def test_matches_numpy_linear_and_the_inclusive_quantiles(n: int) -> None:
    values = [float(v) for v in np.random.default_rng(n).exponential(10.0, n)]
    for q in (0, 5, 50, 90, 95, 99, 100):
        assert percentile(values, q) == pytest.approx(float(np.percentile(values, q)))
    assert percentile(values, 50) == pytest.approx(statistics.median(values))
    if n > 1:
        p95 = statistics.quantiles(values, n=20, method="inclusive")[-1]
        assert percentile(values, 95) == pytest.approx(p95)


def test_order_does_not_matter_and_empty_is_nan() -> None:
    assert percentile([4.0, 1.0, 3.0, 2.0], 50) == 2.5
    assert percentile([1.0, 2.0, 3.0, 4.0, 5.0], 95) == pytest.approx(4.8)
    assert math.isnan(percentile([], 50))
