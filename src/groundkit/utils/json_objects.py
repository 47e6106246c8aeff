"""JSON objects read with each key once: ``json.loads`` keeps the last of a key given
twice, while a person (or another parser) reading the same text may take the first."""

from __future__ import annotations

from typing import Any

__all__ = ["RepeatedKeyError", "unique_object"]


class RepeatedKeyError(ValueError):
    """A JSON object gives one key twice."""

    def __init__(self, key: str) -> None:
        super().__init__(f"the key {key!r} is given twice")
        self.key = key


def unique_object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """An ``object_pairs_hook``: the object, or ``RepeatedKeyError``."""
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise RepeatedKeyError(key)
        out[key] = value
    return out
