"""Files replaced whole: a reader sees the old content or the new, never a part."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterable
from pathlib import Path
from typing import Any

__all__ = ["fsync_dir", "temp_name", "write_atomically"]


def fsync_dir(path: Path) -> None:
    """Make a rename in ``path`` durable (the directory's own entry list)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def temp_name(path: Path) -> Path:
    """A hidden temporary name beside ``path``, of this call's own."""
    return path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")


def write_atomically(path: Path, pieces: Iterable[Any], hasher: Any = None) -> int:
    """Write ``pieces`` to ``path`` whole: a temporary name of this call's own (two
    writers of one file never share one), fsync, rename, fsync of the directory. Each
    piece also goes to ``hasher`` when given; returns the size written."""
    temp = temp_name(path)
    size = 0
    try:
        with open(temp, "xb") as handle:
            for piece in pieces:
                handle.write(piece)
                if hasher is not None:
                    hasher.update(piece)
                size += len(piece)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temp, path)
    except BaseException:
        temp.unlink(missing_ok=True)
        raise
    fsync_dir(path.parent)
    return size
