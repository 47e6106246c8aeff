"""Sensitivity labels and clearances.

A document's label is its ``sensitivity`` field, one of ``SENSITIVITY_LEVELS``
(least to most restricted); a document without one is ``public``. A reader
opened with a clearance sees documents at or below it, and nothing else: not
in results, not through ``fetch_chunk``, not as reranker input
(adr/0021-sensitivity.md). A stored label outside the scale is treated as
above every clearance.
"""

from __future__ import annotations

from collections.abc import Mapping

from groundkit.contracts import SENSITIVITY_FIELD, SENSITIVITY_LEVELS, FieldValue
from groundkit.errors import InvalidSettingError

__all__ = ["check_clearance", "visible"]

_RANK = {label: rank for rank, label in enumerate(SENSITIVITY_LEVELS)}
_ABOVE_ALL = len(SENSITIVITY_LEVELS)


def check_clearance(clearance: object) -> str | None:
    """``clearance`` if it is a known level (or None for no restriction)."""
    if clearance is None:
        return None
    if isinstance(clearance, str) and clearance in _RANK:
        return clearance
    raise InvalidSettingError(
        f"unknown clearance {clearance!r}; use one of {', '.join(SENSITIVITY_LEVELS)}"
    )


def visible(fields: Mapping[str, FieldValue], clearance: str | None) -> bool:
    """Whether a document with ``fields`` may be shown to a reader with ``clearance``."""
    if clearance is None:
        return True
    label = fields.get(SENSITIVITY_FIELD, SENSITIVITY_LEVELS[0])
    rank = _RANK.get(label, _ABOVE_ALL) if isinstance(label, str) else _ABOVE_ALL
    return rank <= _RANK[clearance]
