"""Content hashing: one function so every layer agrees on what a hash is."""

from __future__ import annotations

import asyncio
import hashlib
from pathlib import Path

import xxhash

__all__ = ["file_checksum", "sha256_bytes", "sha256_text", "stable_id"]

_BLOCK = 1 << 22
# Hashing releases the GIL; below this it is quicker than the hop to a worker thread.
_HASH_INLINE_BYTES = 1 << 20


def sha256_text(text: str) -> str:
    """Hex SHA-256 of ``text`` encoded as UTF-8."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


async def sha256_bytes(data: bytes) -> bytes:
    """SHA-256 digest of ``data``, in a worker thread when it is large (a whole source file)."""
    if len(data) < _HASH_INLINE_BYTES:
        return hashlib.sha256(data).digest()
    return await asyncio.to_thread(lambda: hashlib.sha256(data).digest())


def stable_id(*parts: str) -> str:
    """A 32-hex-digit id derived from ``parts``; same parts, same id, every run."""
    joined = "\x1f".join(parts)
    return hashlib.sha256(joined.encode("utf-8")).hexdigest()[:32]


def file_checksum(path: Path) -> str:
    """Hex xxh3-128 of a file's bytes, read in 4 MiB blocks: how cached files are checked."""
    digest = xxhash.xxh3_128()
    with open(path, "rb") as handle:
        while block := handle.read(_BLOCK):
            digest.update(block)
    return digest.hexdigest()
