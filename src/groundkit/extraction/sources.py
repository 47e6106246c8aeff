"""Reading source files as bytes and as strict UTF-8, shared by ingest and verification.

Both sides must read a file the same way, or an offset taken at ingest would not
land on the same character when a citation is checked. Both read regular files
only (a FIFO or a device is refused, never waited on) and both stop at the size
cap, so a check reads no more than an ingest would have.
"""

from __future__ import annotations

from pathlib import Path

from groundkit.errors import IngestionError
from groundkit.utils.file_reads import FileTooLargeError, NotRegularFileError, read_regular_file

__all__ = ["read_capped", "read_utf8"]


def read_capped(path: Path, max_bytes: int | None = None, *, follow_symlinks: bool = True) -> bytes:
    """The file's bytes.

    ``IngestionError`` when it is not a regular file, or is (or grows while it
    is read) larger than ``max_bytes``; its message does not name the file, so
    callers prefix the source they know it as. ``OSError`` when it cannot be
    read. ``follow_symlinks=False`` for a path already resolved (containment-checked).
    """
    try:
        return read_regular_file(path, max_bytes, follow_symlinks=follow_symlinks)
    except (NotRegularFileError, FileTooLargeError) as exc:
        raise IngestionError(str(exc)) from None


def read_utf8(path: Path, max_bytes: int | None = None, *, follow_symlinks: bool = True) -> str:
    """Strict UTF-8 decode of the raw bytes (no newline translation, so offsets hold)."""
    return read_capped(path, max_bytes, follow_symlinks=follow_symlinks).decode("utf-8")
