"""Which lexical index packs on this host passed their checks, and have not changed since.

Before a pack is searched it is read whole for its xxh3 checksum and each segment in it
is checked whole (adr/0051-kernel-input-validation.md): work that grows with the index,
paid by every new process before its first answer. Both outcomes depend only on the
file's bytes. groundkit replaces a pack only by rename (a new inode), and any write to a
file in place moves its ctime, which no unprivileged program can set back; so a file
whose device, inode, size, mtime and ctime (nanoseconds) are all what they were when it
passed still holds the bytes that passed. That stamp is recorded with the manifest
checksum the file matched and the names of the checks it passed, and a later open
whose stamp matches skips them (adr/0075-check-cache.md).

The record lives in the user's cache directory (``$GROUNDKIT_CACHE_DIR/checks/``), one
file per index directory, never beside the packs: whoever can write the index cannot
write it. Checked, never trusted: a record file that is not the user's own, is writable
by others, is larger than a record can be, does not match its own checksum, is of
another format or names another index directory is ignored (everything is checked
again, and the file is replaced). Every write is a temporary file renamed into place,
so readers see the old record or the new one. Records are bounded (the newest
``MAX_PACKS`` packs an index, the newest ``MAX_FILES`` indexes), disposable (deleting
the directory costs one full check per pack), and a cache that cannot be read or
written is no error: the checks then run at every open, as without it.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import re
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import xxhash

from groundkit.utils.cache_dir import UNUSABLE_CACHE, default_cache_root
from groundkit.utils.private_files import (
    oldest_first,
    open_private_folder,
    read_private,
    write_private,
    written_names,
)

__all__ = ["CHECKSUM", "SETTLED_NS", "CheckCache", "FileStamp", "stamp_of"]

logger = logging.getLogger("groundkit.storage")

# The name recorded for a checksum that matched the manifest's.
CHECKSUM = "xxh3"
FORMAT = 1
# Packs remembered per index (a merged index holds a handful), and indexes per user.
MAX_PACKS = 512
MAX_FILES = 256
# A record file larger than this is not one of ours.
_MAX_BYTES = 1 << 20
_FOLDER = "checks"
# The names this module writes in the checks folder: records and their temporary files.
_OURS = re.compile(r"\.?[0-9a-f]{32}\.json(?:\.[0-9a-f]{8}\.tmp)?")
# How long ago a file must have last changed for its stamp to be recorded (see ``record``).
SETTLED_NS = 1_000_000_000


@dataclass(frozen=True, slots=True)
class FileStamp:
    """What must be unchanged for a past check to hold: the file's identity and times."""

    device: int
    inode: int
    size: int
    mtime_ns: int
    ctime_ns: int

    def as_list(self) -> list[int]:
        return [self.device, self.inode, self.size, self.mtime_ns, self.ctime_ns]


def stamp_of(found: os.stat_result) -> FileStamp:
    return FileStamp(
        found.st_dev, found.st_ino, found.st_size, found.st_mtime_ns, found.st_ctime_ns
    )


@dataclass(frozen=True, slots=True)
class _Passed:
    stamp: FileStamp
    checksum: str
    checks: frozenset[str]


class CheckCache:
    """The checks the packs of one index directory passed, kept for this user.

    ``root`` overrides ``default_cache_root()`` (read when the record is first used,
    so ``$GROUNDKIT_CACHE_DIR`` set after the store was made still counts).
    """

    def __init__(self, index_dir: Path, *, root: Path | None = None) -> None:
        self._index = str(Path(os.path.abspath(index_dir)))
        self._root = root
        self._lock = threading.Lock()
        self._loaded: dict[str, _Passed] | None = None

    @property
    def path(self) -> Path:
        root = default_cache_root() if self._root is None else self._root
        digest = hashlib.sha256(self._index.encode("utf-8", "surrogateescape")).hexdigest()
        return root / _FOLDER / f"{digest[:32]}.json"

    def passed(self, name: str, stamp: FileStamp, checksum: str) -> frozenset[str]:
        """The checks pack ``name`` passed as the file ``stamp`` describes, holding the
        bytes whose xxh3 is ``checksum``; empty when nothing is known of that file."""
        with self._lock:
            if self._loaded is None:
                self._loaded = self._read()
            found = self._loaded.get(name)
        if found is None or found.stamp != stamp or found.checksum != checksum:
            return frozenset()
        return found.checks

    def record(
        self,
        name: str,
        stamp: FileStamp,
        checksum: str,
        checks: Iterable[str],
        *,
        seen_ns: int | None = None,
    ) -> bool:
        """Remember that the file ``stamp`` describes passed ``checks`` as pack ``name``
        with checksum ``checksum``; True when it was written down.

        ``seen_ns`` is the clock just before the stamp was taken (default: now). Not
        recorded when the file had changed less than ``SETTLED_NS`` before then: file
        times move by clock ticks, and a write in the same tick as the stamp would leave
        it as it is (the next open checks again, and records it then). Merged into the
        record on disk as read just before (two processes recording at once may each
        drop the other's entry, which costs only a check again); a record that cannot
        be written is let go."""
        seen = time.time_ns() if seen_ns is None else seen_ns
        if seen - stamp.ctime_ns < SETTLED_NS:
            return False
        entry = _Passed(stamp, checksum, frozenset(checks))
        with self._lock:
            current = self._read()  # what other processes wrote meanwhile
            current.pop(name, None)
            current[name] = entry  # newest last: the first ones go when over the bound
            while len(current) > MAX_PACKS:
                current.pop(next(iter(current)))
            self._loaded = current
            try:
                self._write(current)
            except UNUSABLE_CACHE as exc:
                logger.debug("the pack check record was not written: %s", exc)
                return False
        return True

    # -- the file -------------------------------------------------------------------------

    def _read(self) -> dict[str, _Passed]:
        """The record on disk, or nothing when it is missing, not ours or damaged."""
        try:
            path = self.path
            folder = open_private_folder(path.parent)
        except UNUSABLE_CACHE:
            return {}
        try:
            raw = read_private(folder, path.name, _MAX_BYTES)
        finally:
            os.close(folder)
        if raw is None:
            return {}
        packs = _parse(raw, self._index)
        if packs is None:
            logger.debug("the pack check record %s is not used: damaged or foreign", path)
            return {}
        return packs

    def _write(self, packs: dict[str, _Passed]) -> None:
        path = self.path
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        body = {
            "format": FORMAT,
            "index": self._index,
            "packs": [
                [name, p.stamp.as_list(), p.checksum, sorted(p.checks)] for name, p in packs.items()
            ],
        }
        data = json.dumps({**body, "body_xxh3": _body_checksum(body)}).encode("utf-8")
        # Every step relative to the folder opened once, never through a link: what is
        # written, replaced and removed is inside the user's own checks folder.
        folder = open_private_folder(path.parent)
        try:
            write_private(folder, path.name, data)
            _bound_folder(folder, keep=path.name)
        finally:
            os.close(folder)


def _body_checksum(body: dict[str, Any]) -> str:
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":"))
    return str(xxhash.xxh3_64_hexdigest(canonical.encode("utf-8")))


def _parse(raw: bytes, index: str) -> dict[str, _Passed] | None:
    """The packs a record file holds, or None unless it is a whole record of ``index``."""
    try:
        value = json.loads(raw)
    except (ValueError, RecursionError):
        return None
    if not isinstance(value, dict):
        return None
    stated = value.pop("body_xxh3", None)
    try:
        if stated != _body_checksum(value):
            return None
    except (TypeError, ValueError, RecursionError):
        return None
    if value.get("format") != FORMAT or value.get("index") != index:
        return None
    packs = value.get("packs")
    if not isinstance(packs, list) or len(packs) > MAX_PACKS:
        return None
    out: dict[str, _Passed] = {}
    for item in packs:
        entry = _entry(item)
        if entry is None:
            return None
        out[entry[0]] = entry[1]
    return out


def _entry(item: Any) -> tuple[str, _Passed] | None:
    if not isinstance(item, list) or len(item) != 4:
        return None
    name, numbers, checksum, checks = item
    if (
        not isinstance(name, str)
        or not isinstance(checksum, str)
        or not isinstance(numbers, list)
        or len(numbers) != 5
        or not all(isinstance(n, int) and not isinstance(n, bool) for n in numbers)
        or not isinstance(checks, list)
        or not all(isinstance(c, str) for c in checks)
    ):
        return None
    return name, _Passed(FileStamp(*numbers), checksum, frozenset(checks))


def _bound_folder(folder: int, *, keep: str) -> None:
    """At most ``MAX_FILES`` records (and leftovers of writes cut short): the ones
    written longest ago go first. Only names this module writes are ever removed."""
    files = [name for name in written_names(folder, _OURS) if name != keep]
    if len(files) < MAX_FILES:
        return
    for old, _ in oldest_first(folder, files)[: len(files) - MAX_FILES + 1]:
        with contextlib.suppress(OSError):
            os.unlink(old, dir_fd=folder)
