"""Content hashing: one function so every layer agrees on what a hash is."""

from __future__ import annotations

import hashlib

__all__ = ["sha256_text", "stable_id"]


def sha256_text(text: str) -> str:
    """Hex SHA-256 of ``text`` encoded as UTF-8."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def stable_id(*parts: str) -> str:
    """A 32-hex-digit id derived from ``parts``; same parts, same id, every run."""
    joined = "\x1f".join(parts)
    return hashlib.sha256(joined.encode("utf-8")).hexdigest()[:32]
