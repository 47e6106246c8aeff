"""Files in a folder of the user's own cache that only the user can write.

Host-local caches (pack checks, extractions) are read back by later runs and must
not be a way in for anyone else: the folder is opened once without following a
link and must be the user's own directory that no one else can write; a file is
used only when it is the user's own regular file that no one else can write; every
write is a temporary file of its own renamed into place, so a reader sees a whole
file or none.
"""

from __future__ import annotations

import contextlib
import os
import re
import stat
import uuid
from collections.abc import Iterable
from pathlib import Path

__all__ = [
    "NOFOLLOW",
    "NONBLOCK",
    "oldest_first",
    "open_private_folder",
    "own_file",
    "read_private",
    "write_private",
    "written_names",
]

NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
NONBLOCK = getattr(os, "O_NONBLOCK", 0)


def own_file(found: os.stat_result) -> bool:
    """Whether a file (or folder) is this user's and no one else can write it; the
    callers check which of the two it is."""
    return found.st_uid == os.geteuid() and not found.st_mode & (stat.S_IWGRP | stat.S_IWOTH)


def open_private_folder(folder: Path) -> int:
    """``folder`` opened without following a link, if it is the user's own directory
    that no one else can write; ``OSError`` otherwise."""
    fd = os.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | NOFOLLOW)
    try:
        found = os.fstat(fd)
        if not stat.S_ISDIR(found.st_mode) or not own_file(found):
            raise OSError(f"{folder} is not this user's own directory")
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_private(folder: int, name: str, max_bytes: int) -> bytes | None:
    """The bytes of ``name`` in the opened ``folder``, or None when it is missing, not
    the user's own regular file, or larger than ``max_bytes``. Opened without blocking:
    a FIFO in its place is refused, never waited on."""
    try:
        fd = os.open(name, os.O_RDONLY | NOFOLLOW | NONBLOCK, dir_fd=folder)
    except OSError:
        return None
    try:
        found = os.fstat(fd)
        if not stat.S_ISREG(found.st_mode) or not own_file(found) or found.st_size > max_bytes:
            return None
        # As many bytes as the file holds, and one more to see it grew: a read of the
        # bound itself allocates it first (a bound of a terabyte is a MemoryError).
        size = found.st_size
        with os.fdopen(os.dup(fd), "rb") as handle:
            data = handle.read(size + 1)
    except OSError:
        return None
    finally:
        os.close(fd)
    # A file that grew since it was measured is being written in place, which no
    # writer of these folders does: not used.
    return data if len(data) <= size else None


def write_private(folder: int, name: str, data: bytes) -> None:
    """``data`` as ``name`` in the opened ``folder``, whole: a temporary file of this
    call's own (mode 0600, never through a link) renamed into place. Not synced: what
    these folders hold is disposable, and a torn file fails its reader's checks."""
    temp = f".{name}.{uuid.uuid4().hex[:8]}.tmp"
    try:
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | NOFOLLOW, 0o600, dir_fd=folder)
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.replace(temp, name, src_dir_fd=folder, dst_dir_fd=folder)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temp, dir_fd=folder)
        raise


def written_names(folder: int, pattern: re.Pattern[str]) -> list[str]:
    """The names in the opened ``folder`` that ``pattern`` matches whole: what the
    caller writes there (records and their temporary files), the only files a bound
    may remove. Empty when the folder cannot be listed."""
    try:
        return [name for name in os.listdir(folder) if pattern.fullmatch(name)]
    except OSError:
        return []


def oldest_first(folder: int, names: Iterable[str]) -> list[tuple[str, int]]:
    """``names`` in the opened ``folder`` with their sizes, modified longest ago first
    (a reader refreshing a file's time keeps it); a file gone meanwhile is left out."""
    found: list[tuple[int, str, int]] = []
    for name in names:
        with contextlib.suppress(OSError):
            st = os.stat(name, dir_fd=folder, follow_symlinks=False)
            found.append((st.st_mtime_ns, name, st.st_size))
    return [(name, size) for _, name, size in sorted(found)]
