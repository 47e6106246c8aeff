"""Reading a file that must be a regular file, in bounded memory, without ever blocking.

A FIFO opened for reading waits for a writer, a character device may never end,
and a file can be swapped for either between a check and the open. So the type
is checked before the open (a special file is never opened in the common case)
and again on the opened descriptor, which is opened non-blocking; the read stops
one byte past the cap, so a file growing after the check cannot take more memory
than the cap allows.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

__all__ = ["FileTooLargeError", "NotRegularFileError", "file_kind", "read_regular_file"]

# One read call asks for at most this much when the size is not known in advance.
_READ_STEP = 1024 * 1024
# POSIX flags; where a platform lacks one, the stat and fstat checks still stand.
_NONBLOCK = getattr(os, "O_NONBLOCK", 0)
_NOCTTY = getattr(os, "O_NOCTTY", 0)
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)


class NotRegularFileError(OSError):
    """The path is a FIFO, socket, device or directory: never read as a source."""


class FileTooLargeError(OSError):
    """The file is larger than the cap (announced by its size, or found while reading)."""


def file_kind(mode: int) -> str:
    """A short name for the type in ``mode`` (``st_mode``), for messages."""
    if stat.S_ISREG(mode):
        return "regular file"
    if stat.S_ISFIFO(mode):
        return "FIFO"
    if stat.S_ISSOCK(mode):
        return "socket"
    if stat.S_ISCHR(mode):
        return "character device"
    if stat.S_ISBLK(mode):
        return "block device"
    if stat.S_ISDIR(mode):
        return "directory"
    return "special file"


def _check(st: os.stat_result, max_bytes: int | None) -> None:
    if not stat.S_ISREG(st.st_mode):
        raise NotRegularFileError(
            f"not a regular file ({file_kind(st.st_mode)}); only regular files are read"
        )
    if max_bytes is not None and st.st_size > max_bytes:
        raise FileTooLargeError(f"{st.st_size} bytes exceeds the cap of {max_bytes} bytes")


def read_regular_file(
    path: str | Path, max_bytes: int | None = None, *, follow_symlinks: bool = True
) -> bytes:
    """The bytes of the regular file at ``path``, at most ``max_bytes`` of them.

    Raises ``NotRegularFileError`` for anything but a regular file (checked by
    ``stat`` before the open and by ``fstat`` after it), ``FileTooLargeError``
    when the file is, or grows while being read, larger than ``max_bytes``, and
    ``OSError`` for the rest. ``follow_symlinks=False`` refuses a symlink as the
    last component (for a path already resolved, so a link swapped in after the
    resolution is not followed).
    """
    _check(os.stat(path, follow_symlinks=follow_symlinks), max_bytes)
    flags = os.O_RDONLY | _NONBLOCK | _NOCTTY
    if not follow_symlinks:
        flags |= _NOFOLLOW
    fd = os.open(path, flags)
    try:
        st = os.fstat(fd)
        _check(st, max_bytes)
        return _read_bounded(fd, st.st_size, max_bytes)
    finally:
        os.close(fd)


def _read_bounded(fd: int, size: int, max_bytes: int | None) -> bytes:
    # One byte past the cap is enough to know the file outgrew it.
    limit = None if max_bytes is None else max_bytes + 1
    pieces: list[bytes] = []
    total = 0
    # The first read asks for the announced size and one byte more, so a file
    # that did not change lands in one buffer and the next read sees its end.
    ask = size + 1
    while limit is None or total < limit:
        if limit is not None:
            ask = min(ask, limit - total)
        piece = os.read(fd, ask)
        if not piece:
            break
        pieces.append(piece)
        total += len(piece)
        ask = _READ_STEP
    if max_bytes is not None and total > max_bytes:
        raise FileTooLargeError(f"grew past the cap of {max_bytes} bytes while being read")
    if len(pieces) == 1:
        return pieces[0]
    return b"".join(pieces)
