"""Files of the persisted lexical index: packs of arrays and the manifest naming them.

A collection's lexical index lives in ``<index_dir>/<name>.segments/``
(adr/0030-lexical-segments.md). Every segment, and every overlay (what has
happened to a segment's documents since it was written), is one immutable
*pack*: a small JSON header then each array, 64-byte aligned, so the whole file
is memory-mapped once and every array is a zero-copy view of it. A pack is
written under a temporary name, synced and renamed: it is whole or absent.

``manifest.json`` names the current commit: every pack with its size and xxh3
checksum, which ``load_pack`` verifies before anything is used. It is replaced
atomically (temporary file, fsync, rename).

Everything here is derived state that the metadata store can rebuild, so every
mismatch is a ``StorageError`` for the caller to rebuild from, never trusted.
The checksum is computed with plain reads, not through the mapping: pages a
search never touches stay out of the process, and processes on one host share
the ones it does.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import json
import mmap
import os
import time
import uuid
from collections.abc import AsyncIterator, Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from groundkit.errors import ConfigurationError, StorageError

__all__ = ["LocalSegments", "file_checksum", "new_pack_name"]

_MANIFEST = "manifest.json"
_LOCK = "writer.lock"
_MAGIC = b"GRKPACK1"
_ALIGN = 64
_SUFFIX = ".pack"
# Packs the manifest no longer names are removed only once they are this old: a
# process that has just read the previous manifest may still be mapping them.
_GRACE_SECONDS = 600.0
# The dtypes a pack may hold (anything else in a header is damage).
_DTYPES = frozenset({"<i4", "<i8", "<u2", "<u4", "<u8", "<f8", "|u1", "|b1"})


def _xxhash() -> Any:
    try:
        import xxhash
    except ImportError:  # a base dependency: only a broken install gets here
        raise ConfigurationError("the xxhash package is missing: pip install groundkit") from None
    return xxhash


def file_checksum(path: Path) -> str:
    """xxh3-64 of a file, read in large steps (about 10 GB/s from the page cache)."""
    hasher = _xxhash().xxh3_64()
    with open(path, "rb") as handle:
        while block := handle.read(1 << 24):
            hasher.update(block)
    return str(hasher.hexdigest())


def new_pack_name(kind: str) -> str:
    """A unique, sortable pack name (time first, so names list in creation order)."""
    return f"{kind}-{time.time_ns():020d}-{uuid.uuid4().hex[:8]}"


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _temp_name(path: Path) -> Path:
    return path.with_name(f".{path.name}.{uuid.uuid4().hex[:8]}.tmp")


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
    """Packs and the manifest in a local directory (beside the SQLite file)."""

    def __init__(self, directory: Path) -> None:
        self.directory = Path(directory)

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
            raw = path.read_bytes()
        except (FileNotFoundError, NotADirectoryError):
            return None
        except OSError as exc:
            raise StorageError(f"cannot read {str(path)!r}: {exc.strerror or exc}") from None
        try:
            value = json.loads(raw)
        except (ValueError, RecursionError):
            raise StorageError(f"{str(path)!r} is not valid JSON") from None
        if not isinstance(value, dict):
            raise StorageError(f"{str(path)!r} does not hold a manifest")
        return value

    async def write_manifest(self, manifest: Mapping[str, Any]) -> None:
        data = json.dumps(manifest, sort_keys=True, indent=1).encode("utf-8")
        await asyncio.to_thread(self._write_manifest, data)

    def _write_manifest(self, data: bytes) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        path = self.directory / _MANIFEST
        temp = _temp_name(path)
        try:
            with open(temp, "wb") as handle:
                handle.write(data)
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(temp, path)
        except BaseException:
            temp.unlink(missing_ok=True)
            raise
        _fsync_dir(self.directory)

    # -- packs --------------------------------------------------------------------

    async def write_pack(
        self, name: str, arrays: Mapping[str, npt.NDArray[Any]], meta: Mapping[str, Any]
    ) -> dict[str, Any]:
        """Write a pack whole; returns its manifest entry (name, bytes, checksum)."""
        return await asyncio.to_thread(self._write_pack, name, dict(arrays), dict(meta))

    def _write_pack(
        self, name: str, arrays: dict[str, npt.NDArray[Any]], meta: dict[str, Any]
    ) -> dict[str, Any]:
        self.directory.mkdir(parents=True, exist_ok=True)
        path = self.directory / f"{name}{_SUFFIX}"
        temp = _temp_name(path)
        hasher = _xxhash().xxh3_64()
        size = 0
        try:
            with open(temp, "wb") as handle:
                for piece in _encode_pack(arrays, meta):
                    handle.write(piece)
                    hasher.update(piece)
                    size += len(piece)
                handle.flush()
                os.fsync(handle.fileno())
            os.rename(temp, path)
        except BaseException:
            temp.unlink(missing_ok=True)
            raise
        _fsync_dir(self.directory)
        return {"name": name, "bytes": size, "xxh3": str(hasher.hexdigest())}

    async def load_pack(
        self, entry: Mapping[str, Any]
    ) -> tuple[dict[str, npt.NDArray[Any]], dict[str, Any]]:
        """The arrays (read-only views of one memory map) and meta of a pack, after
        checking its size and checksum against its manifest ``entry``."""
        return await asyncio.to_thread(self._load_pack, dict(entry))

    def _load_pack(
        self, entry: dict[str, Any]
    ) -> tuple[dict[str, npt.NDArray[Any]], dict[str, Any]]:
        name = entry.get("name")
        if not isinstance(name, str) or "/" in name or name.startswith("."):
            raise StorageError("a pack entry of the lexical index manifest is malformed")
        path = self.directory / f"{name}{_SUFFIX}"
        try:
            size = path.stat().st_size
        except FileNotFoundError:
            raise StorageError(f"index file {str(path)!r} is missing") from None
        except OSError as exc:
            raise StorageError(f"cannot read {str(path)!r}: {exc.strerror or exc}") from None
        if size != entry.get("bytes"):
            raise StorageError(
                f"index file {str(path)!r} has {size} bytes, the manifest says "
                f"{entry.get('bytes')}: it was cut short or replaced"
            )
        if file_checksum(path) != entry.get("xxh3"):
            raise StorageError(f"index file {str(path)!r} does not match its checksum")
        return _map_pack(path, size)

    # -- housekeeping -------------------------------------------------------------

    async def remove_unreferenced(self, keep: Iterable[str]) -> int:
        """Delete packs the manifest no longer names (once older than a grace period)
        and temporary leftovers; returns how many files went."""
        return await asyncio.to_thread(self._remove_unreferenced, set(keep))

    def _remove_unreferenced(self, keep: set[str]) -> int:
        if not self.directory.is_dir():
            return 0
        now = time.time()
        removed = 0
        for entry in self.directory.iterdir():
            name = entry.name
            if name in (_MANIFEST, _LOCK):
                continue
            if name.endswith(_SUFFIX) and name[: -len(_SUFFIX)] in keep:
                continue
            try:
                if now - entry.stat().st_mtime < _GRACE_SECONDS or entry.is_dir():
                    continue
                entry.unlink()
                removed += 1
            except OSError:
                continue
        return removed

    async def clear(self) -> None:
        """Remove the manifest and every pack (the index is then rebuilt from the store)."""
        await asyncio.to_thread(self._clear)

    def _clear(self) -> None:
        if not self.directory.is_dir():
            return
        for entry in self.directory.iterdir():
            if entry.name != _LOCK and entry.is_file():
                entry.unlink(missing_ok=True)

    @contextlib.asynccontextmanager
    async def writer_lock(self, *, wait: bool = True) -> AsyncIterator[bool]:
        """Exclusive among the writers of this index, in any process on this host.

        Yields True when held; with ``wait=False`` it yields False at once if
        another writer holds it (a reader that only wanted to save its work).
        """
        await asyncio.to_thread(self.directory.mkdir, parents=True, exist_ok=True)
        handle = await asyncio.to_thread(open, self.directory / _LOCK, "a+b")
        try:
            flags = fcntl.LOCK_EX if wait else fcntl.LOCK_EX | fcntl.LOCK_NB
            try:
                await asyncio.to_thread(fcntl.flock, handle.fileno(), flags)
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
    if size < len(_MAGIC) + 8:
        raise StorageError(f"index file {str(path)!r} is too short to be a pack")
    with open(path, "rb") as handle:
        try:
            view = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ)
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
        return np.zeros(shape, dtype=dtype)
    array = np.frombuffer(view, dtype=dtype, count=count, offset=offset).reshape(shape)
    return array
