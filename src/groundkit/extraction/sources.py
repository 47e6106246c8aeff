"""Reading source files as bytes and as strict UTF-8, shared by ingest and verification.

Both sides must read a file the same way, or an offset taken at ingest would not
land on the same character when a citation is checked.
"""

from __future__ import annotations

from pathlib import Path

from groundkit.errors import IngestionError

__all__ = ["read_capped", "read_utf8"]


def read_capped(path: Path, max_bytes: int | None = None) -> bytes:
    """The file's bytes; ``IngestionError`` when it is larger than ``max_bytes``."""
    if max_bytes is not None:
        size = path.stat().st_size
        if size > max_bytes:
            raise IngestionError(f"{path.name}: {size} bytes exceeds the cap of {max_bytes}")
    return path.read_bytes()


def read_utf8(path: Path, max_bytes: int | None = None) -> str:
    """Strict UTF-8 decode of the raw bytes (no newline translation, so offsets hold)."""
    return read_capped(path, max_bytes).decode("utf-8")
