"""Local copies of URL documents: ``<index_dir>/<collection>.snapshots/<document_id>``.

A snapshot holds exactly the document's indexed text (UTF-8), so a citation
into a URL document is checked against what was fetched at ingest, never a
re-fetch. The writer and the citation reader share these helpers, so both
agree on where a snapshot lives and refuse the same ids.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from pathlib import Path

from groundkit.utils.path_safety import PathEscapeError, ensure_within

__all__ = [
    "remove_stale_snapshots",
    "snapshot_dir_for",
    "snapshot_matches",
    "snapshot_path",
    "write_snapshot",
]

_TEMP_SUFFIX = ".partial"
# A document id becomes a file name; only a plain name can be one.
_SAFE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")


def snapshot_dir_for(index_dir: Path, collection: str) -> Path:
    """The directory holding one collection's snapshots, beside its SQLite file."""
    return Path(index_dir) / f"{collection}.snapshots"


def snapshot_path(snapshot_dir: Path, document_id: str) -> Path:
    """Where ``document_id``'s snapshot lives; ``PathEscapeError`` for an unusable id.

    A document id is data from the store, never trusted as a path: it must be a
    plain file name and the result must stay inside ``snapshot_dir``.
    """
    if not _SAFE_NAME.fullmatch(document_id) or document_id.endswith(_TEMP_SUFFIX):
        raise PathEscapeError(f"document id {document_id!r} cannot name a snapshot file")
    return ensure_within(Path(snapshot_dir) / document_id, Path(snapshot_dir))


def snapshot_matches(path: Path, content: str) -> bool:
    """True when the file at ``path`` holds exactly ``content``."""
    try:
        return path.read_bytes() == content.encode("utf-8")
    except OSError:
        return False


def write_snapshot(snapshot_dir: Path, document_id: str, content: str) -> Path:
    """Write ``content`` atomically (temp file, fsync, rename); returns the path."""
    snapshot_dir.mkdir(parents=True, exist_ok=True)
    path = snapshot_path(snapshot_dir, document_id)
    temp = path.with_name(path.name + _TEMP_SUFFIX)
    with open(temp, "wb") as handle:
        handle.write(content.encode("utf-8"))
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(temp, path)
    return path


def remove_stale_snapshots(snapshot_dir: Path, keep: Iterable[str]) -> list[str]:
    """Delete snapshot files whose document is gone, and leftover temp files."""
    if not snapshot_dir.is_dir():
        return []
    wanted = set(keep)
    removed: list[str] = []
    for entry in sorted(snapshot_dir.iterdir()):
        if entry.name in wanted or not (entry.is_symlink() or entry.is_file()):
            continue
        try:
            entry.unlink()
        except OSError:
            continue
        removed.append(entry.name)
    return removed
