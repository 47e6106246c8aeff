"""Files of the persisted lexical index: packs of arrays and the manifest naming them.

A collection's lexical index lives in ``<index_dir>/<name>.segments/``
(adr/0030-lexical-segments.md). Every segment, and every overlay (what has
happened to a segment's documents since it was written), is one immutable
*pack*: a small JSON header then each array, 64-byte aligned, so the whole file
is memory-mapped once and every array is a zero-copy view of it. A pack is
written under a temporary name, synced and renamed: it is whole or absent.

``manifest.json`` names the current commit: every pack with its size and xxh3
checksum, which ``load_pack`` verifies before anything is used. It carries an xxh3
of its own body too (``body_xxh3``), checked on every read, and it is replaced
atomically (temporary file, fsync, rename). A pack is never rewritten in place: a
mapped file only ever disappears by a rename, which leaves the mapping whole.

Everything here is derived state that the metadata store can rebuild, so every
mismatch is a ``StorageError`` for the caller to rebuild from, never trusted.
The checksum is computed with plain reads, not through the mapping: pages a
search never touches stay out of the process, and processes on one host share
the ones it does.

A collection whose storage root is an object store keeps the same files under
its prefix instead (``ObjectSegments``, ``storage/object_segments.py``); the
pieces both share (the entry checks, the atomic pack write, the sweep and the
writer lock) are the helpers at the end of this module.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import fcntl
import json
import mmap
import os
import re
import stat
import threading
import time
import uuid
from collections.abc import AsyncIterator, Iterable, Iterator, Mapping
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np
import numpy.typing as npt
import xxhash

from groundkit.contracts import PackCheck, PackStore
from groundkit.errors import StorageError
from groundkit.storage.check_cache import CHECKSUM, CheckCache, FileStamp, stamp_of
from groundkit.utils.durable import write_atomically as _write_atomically
from groundkit.utils.file_reads import read_regular_file

__all__ = ["LocalSegments", "PackStore", "file_checksum", "new_pack_name", "pack_names"]

_MANIFEST = "manifest.json"
_NONBLOCK = getattr(os, "O_NONBLOCK", 0)
# A manifest names each pack in a few hundred bytes; a file larger than this is not one.
MANIFEST_MAX_BYTES = 16 * 1024 * 1024
# The key of the manifest's own checksum (of everything else in it).
_BODY_CHECKSUM = "body_xxh3"
_LOCK = "writer.lock"
_MAGIC = b"GRKPACK1"
_ALIGN = 64
_SUFFIX = ".pack"
# Packs the manifest no longer names are removed only once they are this old: a
# process that has just read the previous manifest may still be mapping them.
_GRACE_SECONDS = 600.0
# A pack just read for its checksum is mapped with its page tables filled at once (its
# pages are in the page cache): a search then takes no page fault on postings it has not
# read before, for about 5 ms at open for 300 MB. A pack whose checks are remembered is
# mapped without (populating 16 MB took 0.6 ms, work that grows with the index, while
# faulting in every page of it as searches touch them, 16 pages a fault, took 0.3 ms).
_POPULATE = getattr(mmap, "MAP_POPULATE", 0)
_MAP_FLAGS = mmap.MAP_SHARED | _POPULATE
# The dtypes a pack may hold (anything else in a header is damage).
_DTYPES = frozenset({"<i4", "<i8", "<u2", "<u4", "<u8", "<f8", "|u1", "|b1"})
# What a pack may be called: one plain file or object name, never a path.
_PACK_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,127}")


def file_checksum(path: Path) -> str:
    """xxh3-64 of a file, read in large steps (about 10 GB/s from the page cache)."""
    with open(path, "rb") as handle:
        return read_checksum(handle)


def read_checksum(handle: BinaryIO) -> str:
    """xxh3-64 of what is left to read from an open file, read in large steps."""
    hasher = xxhash.xxh3_64()
    while block := handle.read(1 << 24):
        hasher.update(block)
    return str(hasher.hexdigest())


def new_pack_name(kind: str) -> str:
    """A unique, sortable pack name (time first, so names list in creation order)."""
    return f"{kind}-{time.time_ns():020d}-{uuid.uuid4().hex[:8]}"


def _encode_pack(arrays: Mapping[str, npt.NDArray[Any]], meta: Mapping[str, Any]) -> list[Any]:
    """The pieces of a pack file, in order: magic, header, padding and array bytes."""
    table: dict[str, Any] = {}
    blobs: list[npt.NDArray[Any]] = []
    offset = 0
    for name in sorted(arrays):
        array = np.ascontiguousarray(arrays[name])
        dtype = array.dtype.newbyteorder("<") if array.dtype.byteorder == ">" else array.dtype
        array = array.astype(dtype, copy=False)
        if dtype.str not in _DTYPES:
            raise ValueError(f"a pack cannot hold {name!r} of dtype {dtype.str}")
        table[name] = {"dtype": dtype.str, "shape": list(array.shape), "offset": offset}
        blobs.append(array)
        offset += -(-array.nbytes // _ALIGN) * _ALIGN
    header = json.dumps({"arrays": table, "meta": dict(meta)}, sort_keys=True).encode("utf-8")
    start = len(_MAGIC) + 8 + len(header)
    data_start = -(-start // _ALIGN) * _ALIGN
    pieces: list[Any] = [
        _MAGIC,
        len(header).to_bytes(8, "little"),
        header,
        b"\0" * (data_start - start),
    ]
    for array in blobs:
        pieces.append(array.tobytes() if array.nbytes < 1 << 16 else array.data.cast("B"))
        pad = -array.nbytes % _ALIGN
        if pad:
            pieces.append(b"\0" * pad)
    return pieces


class LocalSegments:
    """Packs and the manifest in a local directory (beside the SQLite file).

    ``grace_seconds`` is how old a pack the manifest no longer names must be
    before ``remove_unreferenced`` deletes it (default: ten minutes). Which packs
    passed their checks, unchanged since, is remembered for this user under
    ``check_root`` (default: ``default_cache_root()``; storage/check_cache.py).
    """

    def __init__(
        self,
        directory: Path,
        *,
        grace_seconds: float | None = None,
        check_root: Path | None = None,
    ) -> None:
        self.directory = Path(directory)
        self.grace_seconds = grace_seconds
        self.checks = CheckCache(self.directory, root=check_root)

    @property
    def location(self) -> str:
        return str(self.directory)

    # -- manifest ---------------------------------------------------------------

    async def read_manifest(self) -> dict[str, Any] | None:
        """The current manifest, or None when there is none; ``StorageError`` if it
        cannot be read or is not a JSON object."""
        return await asyncio.to_thread(self._read_manifest)

    def _read_manifest(self) -> dict[str, Any] | None:
        path = self.directory / _MANIFEST
        try:
            # A regular file, bounded: a FIFO put there would block the read for good,
            # a link to a device would never end.
            raw = read_regular_file(path, MANIFEST_MAX_BYTES)
        except (FileNotFoundError, NotADirectoryError):
            return None
        except OSError as exc:
            raise StorageError(f"cannot read {str(path)!r}: {exc.strerror or exc}") from None
        return parse_manifest(raw, str(path))

    async def write_manifest(self, manifest: Mapping[str, Any]) -> None:
        """Replace the manifest whole; ``StorageError`` naming the file and the cause
        when it cannot be written (the previous manifest then stays)."""
        await asyncio.to_thread(self._write_manifest, manifest_bytes(manifest))

    def _write_manifest(self, data: bytes) -> None:
        path = self.directory / _MANIFEST
        with written(path):
            self.directory.mkdir(parents=True, exist_ok=True)
            _write_atomically(path, [data])

    # -- packs --------------------------------------------------------------------

    async def write_pack(
        self, name: str, arrays: Mapping[str, npt.NDArray[Any]], meta: Mapping[str, Any]
    ) -> dict[str, Any]:
        """Write a pack whole; returns its manifest entry (name, bytes, checksum).
        ``ValueError`` for a name that is not a plain pack name or an array of a
        dtype a pack cannot hold."""
        check_new_pack_name(name)
        copied, extra = dict(arrays), dict(meta)

        def work() -> dict[str, Any]:
            with written(pack_path(self.directory, name)):
                return write_pack_file(self.directory, name, copied, extra)

        return await asyncio.to_thread(work)

    async def load_pack(
        self, entry: Mapping[str, Any]
    ) -> tuple[dict[str, npt.NDArray[Any]], dict[str, Any]]:
        """The arrays (read-only views of one memory map) and meta of a pack, after
        checking its size and checksum against its manifest ``entry``."""
        return await asyncio.to_thread(self._load_pack, dict(entry), None)

    async def load_checked_pack(
        self, entry: Mapping[str, Any], check: PackCheck
    ) -> tuple[dict[str, npt.NDArray[Any]], dict[str, Any]]:
        """As ``load_pack``, and ``check`` run on the arrays (its ``ValueError`` raised);
        both skipped for a file this user saw pass them and that has not changed since."""
        return await asyncio.to_thread(self._load_pack, dict(entry), check)

    def _load_pack(
        self, entry: dict[str, Any], check: PackCheck | None
    ) -> tuple[dict[str, npt.NDArray[Any]], dict[str, Any]]:
        name, size, checksum = entry_fields(entry)
        path = pack_path(self.directory, name)
        try:
            # Non-blocking: a FIFO in a pack's place would wait for a writer (it is
            # refused below, as anything but a regular file is).
            fd = os.open(path, os.O_RDONLY | _NONBLOCK)
            handle = os.fdopen(fd, "rb")
        except FileNotFoundError:
            raise StorageError(f"index file {str(path)!r} is missing") from None
        except OSError as exc:
            raise StorageError(f"cannot read {str(path)!r}: {exc.strerror or exc}") from None
        with handle:
            # One open file throughout: the file checked is the file mapped, whatever
            # is renamed over its path meanwhile.
            # The clock before the stamp: a file is recorded only if it had settled
            # by then (check_cache.CheckCache.record), whatever the checks then take.
            seen_ns = time.time_ns()
            try:
                found = os.fstat(handle.fileno())
            except OSError as exc:
                raise StorageError(f"cannot read {str(path)!r}: {exc.strerror or exc}") from None
            if not stat.S_ISREG(found.st_mode):
                raise StorageError(f"index file {str(path)!r} is not a regular file")
            before = stamp_of(found)
            _check_size(path, before.size, size)
            known = self.checks.passed(name, before, checksum)
            if CHECKSUM not in known:
                try:
                    matches = read_checksum(handle) == checksum
                except OSError as exc:
                    raise StorageError(
                        f"cannot read {str(path)!r}: {exc.strerror or exc}"
                    ) from None
                if not matches:
                    raise StorageError(f"index file {str(path)!r} does not match its checksum")
            # Pages just read for the checksum are in the page cache: their page tables are
            # filled at once. A remembered file may not be read at all (a search faults in
            # what it touches, 16 pages a fault), so nothing grows with the pack here.
            populate = CHECKSUM not in known
            arrays, meta = _map_open_pack(handle.fileno(), path, size, populate=populate)
            passed = {CHECKSUM, *known}
            if check is not None and check.name not in known:
                check.run(arrays)
                passed.add(check.name)
            if passed != known:
                self._remember(name, before, checksum, passed, handle.fileno(), seen_ns)
        return arrays, meta

    async def remembered(self) -> bool:
        """Whether every pack the manifest names is a file this user saw pass its
        checksum, unchanged since: opening the index then reads no pack whole."""
        return await asyncio.to_thread(self._remembered)

    def _remembered(self) -> bool:
        try:
            manifest = self._read_manifest()
            if manifest is None:
                return False
            for entry in pack_entries(manifest):
                name, _, checksum = entry_fields(entry)
                found = os.stat(pack_path(self.directory, name))
                if CHECKSUM not in self.checks.passed(name, stamp_of(found), checksum):
                    return False
        except (OSError, StorageError):
            return False
        return True

    def _remember(
        self,
        name: str,
        stamp: FileStamp,
        checksum: str,
        passed: set[str],
        fd: int,
        seen_ns: int,
    ) -> None:
        """Record what ``name`` passed, if the file is still as it was when the checks
        began (a write in place meanwhile would have moved its ctime)."""
        try:
            unchanged = stamp_of(os.fstat(fd)) == stamp
        except OSError:
            return
        if unchanged:
            self.checks.record(name, stamp, checksum, passed, seen_ns=seen_ns)

    def changed_packs(self, entries: Iterable[Mapping[str, Any]]) -> list[str]:
        """Names of the packs among ``entries`` whose file no longer has the entry's
        size (cut short or replaced by someone): a mapping of it may fault on read."""
        return changed_pack_files(self.directory, entries)

    # -- housekeeping -------------------------------------------------------------

    async def remove_unreferenced(self, keep: Iterable[str]) -> int:
        """Delete packs the manifest no longer names (once older than a grace period)
        and temporary leftovers; returns how many files went."""
        grace = grace_period(self.grace_seconds)
        names = set(keep)

        def work() -> int:
            with written(self.directory):
                return sweep_directory(self.directory, names, grace)

        return await asyncio.to_thread(work)

    async def clear(self) -> None:
        """Remove the manifest and every pack (the index is then rebuilt from the store)."""

        def work() -> None:
            with written(self.directory):
                clear_directory(self.directory)

        await asyncio.to_thread(work)

    def writer_lock(self, *, wait: bool = True) -> AbstractAsyncContextManager[bool]:
        """Exclusive among the writers of this index, in any process on this host.

        Yields True when held; with ``wait=False`` it yields False at once if
        another writer holds it (a reader that only wanted to save its work).
        """
        return directory_lock(self.directory, wait=wait)


# -- shared with ObjectSegments ---------------------------------------------------------


def grace_period(given: float | None) -> float:
    """A store's grace period: its own, else the module's (read now, so tests can set it)."""
    return _GRACE_SECONDS if given is None else float(given)


def check_new_pack_name(name: str) -> None:
    """``ValueError`` unless ``name`` can name a pack (a plain name, never a path)."""
    if not isinstance(name, str) or not _PACK_NAME.fullmatch(name):
        raise ValueError(f"{name!r} cannot name a pack: letters, digits, '-' and '_' only")


def entry_fields(entry: Mapping[str, Any]) -> tuple[str, int, str]:
    """The name, size and checksum of a manifest entry; ``StorageError`` when any of
    them is missing or unusable (a name is checked before it becomes a path or key)."""
    name, size, checksum = entry.get("name"), entry.get("bytes"), entry.get("xxh3")
    if (
        not isinstance(name, str)
        or not _PACK_NAME.fullmatch(name)
        or not isinstance(size, int)
        or isinstance(size, bool)
        or size < 0
        or not isinstance(checksum, str)
    ):
        raise StorageError("a pack entry of the lexical index manifest is malformed")
    return name, size, checksum


def pack_names(manifest: Any) -> set[str]:
    """The name of every pack entry anywhere in ``manifest`` (a dict holding ``name``,
    ``bytes`` and ``xxh3``): what a sweep must keep, whatever the manifest's layout."""
    return {entry["name"] for entry in pack_entries(manifest)}


def pack_entries(manifest: Any) -> list[dict[str, Any]]:
    """Every pack entry anywhere in ``manifest`` (a dict holding a string ``name``,
    ``bytes`` and ``xxh3``), whatever the manifest's layout."""
    found: list[dict[str, Any]] = []
    stack = [manifest]
    while stack:
        value = stack.pop()
        if isinstance(value, dict):
            name = value.get("name")
            if isinstance(name, str) and "bytes" in value and "xxh3" in value:
                found.append(value)
            stack.extend(value.values())
        elif isinstance(value, list):
            stack.extend(value)
    return found


def pack_path(directory: Path, name: str) -> Path:
    return directory / f"{name}{_SUFFIX}"


def verify_pack_file(path: Path, size: int, checksum: str) -> None:
    """``StorageError`` unless the file at ``path`` has ``size`` bytes and ``checksum``."""
    try:
        found = path.stat().st_size
    except FileNotFoundError:
        raise StorageError(f"index file {str(path)!r} is missing") from None
    except OSError as exc:
        raise StorageError(f"cannot read {str(path)!r}: {exc.strerror or exc}") from None
    _check_size(path, found, size)
    if file_checksum(path) != checksum:
        raise StorageError(f"index file {str(path)!r} does not match its checksum")


def _check_size(path: Path, found: int, size: int) -> None:
    if found != size:
        raise StorageError(
            f"index file {str(path)!r} has {found} bytes, the manifest says "
            f"{size}: it was cut short or replaced"
        )


def write_pack_file(
    directory: Path, name: str, arrays: Mapping[str, npt.NDArray[Any]], meta: Mapping[str, Any]
) -> dict[str, Any]:
    """Write pack ``name`` into ``directory`` whole (temporary name, fsync, rename);
    returns its manifest entry."""
    directory.mkdir(parents=True, exist_ok=True)
    hasher = xxhash.xxh3_64()
    size = _write_atomically(pack_path(directory, name), _encode_pack(arrays, meta), hasher)
    return {"name": name, "bytes": size, "xxh3": str(hasher.hexdigest())}


def _body_checksum(body: Mapping[str, Any]) -> str:
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":"), allow_nan=False)
    return str(xxhash.xxh3_64_hexdigest(canonical.encode("utf-8")))


def manifest_bytes(manifest: Mapping[str, Any]) -> bytes:
    """The manifest as stored: its body and, beside it, the body's checksum."""
    body = {k: v for k, v in manifest.items() if k != _BODY_CHECKSUM}
    stored = {**body, _BODY_CHECKSUM: _body_checksum(body)}
    return json.dumps(stored, sort_keys=True, indent=1).encode("utf-8")


def parse_manifest(raw: bytes, where: str) -> dict[str, Any]:
    """The manifest body in ``raw``; ``StorageError`` naming ``where`` unless it is a
    JSON object whose checksum matches (an edit by hand, or a write cut short)."""
    try:
        value = json.loads(raw)
    except (ValueError, RecursionError):
        raise StorageError(f"{where!r} is not valid JSON") from None
    if not isinstance(value, dict):
        raise StorageError(f"{where!r} does not hold a manifest")
    stated = value.pop(_BODY_CHECKSUM, None)
    try:
        matches = stated == _body_checksum(value)
    except (ValueError, TypeError, RecursionError):
        matches = False
    if not matches:
        raise StorageError(f"{where!r} does not match its checksum (edited or damaged)")
    return value


@contextlib.contextmanager
def written(path: Path) -> Iterator[None]:
    """A failure to write ``path`` (disk full, read-only, a directory in the way) as a
    ``StorageError`` naming the file and the cause."""
    try:
        yield
    except OSError as exc:
        raise StorageError(
            f"cannot write {str(path)!r}: {exc.strerror or exc}"
            + (" (no space left on the device)" if exc.errno == errno.ENOSPC else "")
        ) from None


def changed_pack_files(directory: Path, entries: Iterable[Mapping[str, Any]]) -> list[str]:
    """Names of the packs among ``entries`` whose file in ``directory`` is missing or no
    longer has the entry's size (one ``stat`` each: cheap enough to ask often)."""
    changed: list[str] = []
    for entry in entries:
        name, size = entry.get("name"), entry.get("bytes")
        if not isinstance(name, str) or not _PACK_NAME.fullmatch(name):
            continue
        try:
            same = pack_path(directory, name).stat().st_size == size
        except OSError:
            same = False
        if not same:
            changed.append(name)
    return changed


def sweep_directory(directory: Path, keep: set[str], grace: float) -> int:
    """Delete the files of ``directory`` that are neither the manifest, the lock nor a
    pack named in ``keep``, once older than ``grace`` seconds; returns how many went."""
    if not directory.is_dir():
        return 0
    now = time.time()
    removed = 0
    for entry in directory.iterdir():
        name = entry.name
        if name in (_MANIFEST, _LOCK):
            continue
        if name.endswith(_SUFFIX) and name[: -len(_SUFFIX)] in keep:
            continue
        try:
            if now - entry.stat().st_mtime < grace or entry.is_dir():
                continue
            entry.unlink()
            removed += 1
        except OSError:
            continue
    return removed


def clear_directory(directory: Path) -> None:
    """Remove every file of ``directory`` but the writer lock."""
    if not directory.is_dir():
        return
    for entry in directory.iterdir():
        if entry.name != _LOCK and entry.is_file():
            entry.unlink(missing_ok=True)


async def _wait_for_flock(fd: int) -> None:
    """Take an exclusive ``flock`` on ``fd``, waiting on a thread of its own.

    Not on the event loop's shared worker threads: writers of one process queue for the
    lock too, and with as many waiting as the pool has threads, the holder would never
    get one back to finish its write and let go.
    """
    loop = asyncio.get_running_loop()
    taken: asyncio.Future[None] = loop.create_future()

    def settle(error: BaseException | None) -> None:
        if taken.done():
            return
        if error is None:
            taken.set_result(None)
        else:
            taken.set_exception(error)

    def wait() -> None:
        error: BaseException | None = None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
        except BaseException as exc:  # handed to the waiting coroutine
            error = exc
        with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
            loop.call_soon_threadsafe(settle, error)

    threading.Thread(target=wait, name="groundkit-lock-wait", daemon=True).start()
    await taken


@contextlib.asynccontextmanager
async def directory_lock(directory: Path, *, wait: bool) -> AsyncIterator[bool]:
    """An exclusive ``flock`` on ``directory``'s lock file: True when held, False at
    once with ``wait=False`` if another holder (any process on this host) has it."""

    def open_lock() -> Any:
        with written(directory / _LOCK):
            directory.mkdir(parents=True, exist_ok=True)
            return open(directory / _LOCK, "a+b")

    handle = await asyncio.to_thread(open_lock)
    try:
        try:
            if wait:
                await _wait_for_flock(handle.fileno())
            else:
                fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)  # never blocks
        except BlockingIOError:
            yield False
            return
        try:
            yield True
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)
    finally:
        handle.close()


def _map_pack(path: Path, size: int) -> tuple[dict[str, npt.NDArray[Any]], dict[str, Any]]:
    """Map a checked pack file and cut its arrays out of the one mapping."""
    with open(path, "rb") as handle:
        return _map_open_pack(handle.fileno(), path, size)


def _map_open_pack(
    fd: int, path: Path, size: int, *, populate: bool = True
) -> tuple[dict[str, npt.NDArray[Any]], dict[str, Any]]:
    """Map the checked pack open as ``fd`` (read from ``path``) and cut its arrays out;
    ``populate``: with its page tables filled at once."""
    if size < len(_MAGIC) + 8:
        raise StorageError(f"index file {str(path)!r} is too short to be a pack")
    try:
        flags = _MAP_FLAGS if populate else _MAP_FLAGS & ~_POPULATE
        view = mmap.mmap(fd, 0, flags=flags, prot=mmap.PROT_READ)
    except (OSError, ValueError) as exc:
        raise StorageError(f"cannot map {str(path)!r}: {exc}") from None
    try:
        if view[: len(_MAGIC)] != _MAGIC:
            raise StorageError(f"index file {str(path)!r} is not a groundkit pack")
        header_len = int.from_bytes(view[len(_MAGIC) : len(_MAGIC) + 8], "little")
        start = len(_MAGIC) + 8
        if header_len > size - start:
            raise StorageError(f"index file {str(path)!r} has a damaged header")
        try:
            header = json.loads(bytes(view[start : start + header_len]))
            table = header["arrays"]
            meta = header["meta"]
        except (ValueError, KeyError, TypeError, RecursionError):
            raise StorageError(f"index file {str(path)!r} has a damaged header") from None
        if not isinstance(table, dict) or not isinstance(meta, dict):
            raise StorageError(f"index file {str(path)!r} has a damaged header")
        data_start = -(-(start + header_len) // _ALIGN) * _ALIGN
        arrays = {
            str(name): _array_at(view, spec, data_start, path) for name, spec in table.items()
        }
    except BaseException:
        view.close()
        raise
    return arrays, meta


def _array_at(view: mmap.mmap, spec: Any, data_start: int, path: Path) -> npt.NDArray[Any]:
    try:
        dtype = np.dtype(spec["dtype"])
        shape = tuple(int(n) for n in spec["shape"])
        offset = data_start + int(spec["offset"])
    except (KeyError, TypeError, ValueError):
        raise StorageError(f"index file {str(path)!r} has a damaged array table") from None
    count = int(np.prod(shape, dtype=np.int64)) if shape else 1
    if (
        spec["dtype"] not in _DTYPES
        or any(n < 0 for n in shape)
        or offset < data_start
        or offset + count * dtype.itemsize > len(view)
    ):
        raise StorageError(f"index file {str(path)!r} has a damaged array table")
    if count == 0:
        empty = np.zeros(shape, dtype=dtype)
        empty.flags.writeable = False  # read-only like every array cut from the mapping
        return empty
    array = np.frombuffer(view, dtype=dtype, count=count, offset=offset).reshape(shape)
    return array
