"""Calibrated relevance: how likely a dense or hybrid result is to be relevant.

Raw scores cannot say that. BM25 grows with the query and the corpus, min-max
fusion always gives its top result 1.0, and a cosine of 0.4 means "close" for one
embedding model and "unrelated" for another. A logistic curve fitted on judged
queries for one model turns that model's cosine into a probability, and a
threshold on it lets a query the collection cannot answer come back empty
(adr/0071-relevance-calibration.md).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from groundkit.config import RelevanceCalibration
from groundkit.contracts import EmbeddingIdentity
from groundkit.errors import ConfigurationError

__all__ = ["BUILT_IN_CALIBRATIONS", "calibration_for", "fit_relevance"]

_MINILM = "sentence-transformers/all-MiniLM-L6-v2"
_SCIFACT = (
    "SciFact training claims (257) against the SciFact corpus, top 10 dense chunks each; "
    "relevant = a chunk of an abstract the claim cites"
)

# Fitted by `python -m evals.fit_relevance` (docs/quality.md, "Relevance calibration").
BUILT_IN_CALIBRATIONS: dict[tuple[str, str, int], RelevanceCalibration] = {
    ("sentence-transformers", _MINILM, 384): RelevanceCalibration(
        slope=12.6725, intercept=-9.1039, floor=0.4169, fitted_on=_SCIFACT
    ),
}


def calibration_for(
    identity: EmbeddingIdentity, configured: RelevanceCalibration | None = None
) -> RelevanceCalibration | None:
    """The calibration a collection's searches use: the configured one, else the
    built-in one for its embedding model, else None."""
    if configured is not None:
        return configured
    return BUILT_IN_CALIBRATIONS.get((identity.provider, identity.model_name, identity.dimensions))


def fit_relevance(
    cosines: Sequence[float],
    relevant: Sequence[bool],
    *,
    keep: float = 0.99,
    fitted_on: str = "",
) -> RelevanceCalibration:
    """A logistic fit of ``relevant`` on ``cosines`` (maximum likelihood, Newton's
    method): judged results of one embedding model, e.g. each judged query's top 10.
    The floor is the cosine that keeps the share ``keep`` of the relevant ones.

    One feature needs no solver library; a tiny ridge term keeps perfectly separated
    data finite. Both classes must be present, and the fitted slope positive (higher
    similarity more often relevant), else ``ConfigurationError``.
    """
    if not 0.0 < keep <= 1.0:
        raise ConfigurationError(f"keep must be in (0, 1], got {keep!r}")
    x = np.asarray(cosines, dtype=np.float64)
    y = np.asarray(relevant, dtype=np.float64)
    if x.ndim != 1 or x.shape != y.shape or not np.all(np.isfinite(x)):
        raise ConfigurationError("fit_relevance needs one finite cosine per judgement")
    if not (0 < y.sum() < len(y)):
        raise ConfigurationError("fit_relevance needs both relevant and irrelevant results")
    design = np.stack([x, np.ones_like(x)], axis=1)
    w = np.zeros(2)
    ridge = 1e-6 * len(x)
    for _ in range(100):
        p = 1.0 / (1.0 + np.exp(-(design @ w)))
        grad = design.T @ (p - y) + ridge * w
        hess = (design * (p * (1 - p))[:, None]).T @ design + ridge * np.eye(2)
        step = np.linalg.solve(hess, grad)
        w -= step
        if float(np.abs(step).max()) < 1e-10:
            break
    slope, intercept = float(w[0]), float(w[1])
    if not (math.isfinite(slope) and math.isfinite(intercept)) or slope <= 0:
        raise ConfigurationError(
            "these judgements do not make relevance grow with similarity "
            f"(fitted slope {slope:.3g}); a calibration needs more or other data"
        )
    # A relevant result's own cosine, so at least ``keep`` of them lie at or above it.
    floor = float(np.quantile(x[y == 1.0], 1.0 - keep, method="lower"))
    return RelevanceCalibration(
        slope=slope, intercept=intercept, floor=min(1.0, max(-1.0, floor)), fitted_on=fitted_on
    )
