"""A local read-through cache of a LanceDB vector table on object storage.

Dense search on a table under ``s3://`` makes dozens of range reads a query. Every
file of a Lance table is immutable once written (data fragments, deletion files,
index files, one manifest per version), so a host can keep copies and search
them with LanceDB as a local table: the *mirror*, ``<cache>/vectors/<digest>/``,
the same layout as the table, holding the files the searched version uses
(adr/0061-vector-cache.md).

The mirror follows the version of the store's own table handle, which moves
exactly as without the cache (the store's writes, ``refresh()``); on a new
version it lists the table once, reads that version's manifest afresh, and
downloads only the files it names that are not cached yet. Which files a
version uses is read from its manifest's bytes: a data file's name and an
index's 16-byte id appear there verbatim (deletion files are small and all
kept).

Checked, never trusted: each cached file has a sidecar with its size, xxh3-128
checksum and the listing's size and time of the object it came from. A file is
hashed against its sidecar before its first use in a process and again whenever
its size, time or inode change; one that does not match is deleted and fetched
again; a sidecar that does not decode as one reads as missing. Opening the mirror
reads its newest manifest, possibly another process's version: if that fails, cached
manifests of other versions that do not match their sidecar are deleted and the open
is tried once more. Files and sidecars are written under a temporary name (locked while it is
written) and renamed, so processes sharing the directory never see half a file; a
temporary file no process holds, left by one killed in a download, is deleted when a
version is planned or files are evicted. Deleting the whole directory at any moment
only costs a refill, and a search whose read of the mirror fails is repeated on the
object store (only that one search). The cache is bounded: past its
byte budget the least recently used files of any table are evicted (never the
ones the current search needs); a version whose files alone exceed the budget
is searched uncached, and the store says so.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import fcntl
import hashlib
import json
import logging
import math
import os
import shutil
import threading
import time
import uuid
from collections.abc import Awaitable, Callable, Collection, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import IO, Any, TypeGuard, TypeVar

import numpy as np
import numpy.typing as npt
import xxhash

from groundkit.errors import ConfigurationError
from groundkit.storage.lancedb import DEFAULT_ANN_THRESHOLD, LanceDBVectorStore, _first_line
from groundkit.storage.object_segments import CACHE_DIR_ENV, default_cache_root
from groundkit.storage.protocols import VectorErasure
from groundkit.utils.hashing import file_checksum as _checksum

__all__ = [
    "CACHE_BYTES_ENV",
    "DEFAULT_CACHE_BYTES",
    "CacheUnavailable",
    "CachedLanceDBVectorStore",
    "TableMirror",
    "VectorCacheSettings",
]

logger = logging.getLogger("groundkit.storage")

CACHE_BYTES_ENV = "GROUNDKIT_CACHE_MAX_BYTES"
# Enough for the vectors of a few million 384-d chunks; most disks spare it.
DEFAULT_CACHE_BYTES = 10 * 2**30
_SUMS = ".sums"
_U64_MAX = 2**64 - 1
_V2_NAME_DIGITS = 20  # Lance's newer manifest names: u64::MAX - version, 20 digits
_FETCH_THREADS = 8
_TOUCH_EVERY_S = 60.0
_RETRY_AFTER_S = 30.0
_ATTEMPTS = 3
_BLOCK = 1 << 22
_SUFFIXES = {"": 1, "k": 2**10, "m": 2**20, "g": 2**30, "t": 2**40}
_SIDECAR_MAX_BYTES = 4096  # a sidecar is ~150 bytes; anything larger is not one
# A temporary file is swept once no process holds its lock and it is older than this
# (the moment between creating it and locking it); without locks, once this old.
_TEMP_GRACE_S = 2.0
_TEMP_UNLOCKED_S = 600.0
_HEX = frozenset("0123456789abcdef")
_T = TypeVar("_T")


class CacheUnavailable(Exception):
    """The mirror cannot serve this version; the store searches uncached."""

    def __init__(self, reason: str, *, too_large: bool = False) -> None:
        super().__init__(reason)
        self.reason = reason
        self.too_large = too_large


def parse_bytes(text: str) -> int:
    """``"10G"``, ``"512m"``, ``"1048576"`` as a byte count (``ValueError`` otherwise).

    Infinite sizes and a positive size under one byte are refused: the one is no size,
    the other would turn the cache off without saying so (``0`` does that on purpose).
    """
    spelt = text.strip().lower().removesuffix("ib").removesuffix("b")
    unit = spelt[-1:] if spelt[-1:] in _SUFFIXES and spelt[-1:] else ""
    number = spelt[: len(spelt) - len(unit)].strip()
    value = float(number) * _SUFFIXES[unit]
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"{text!r} is not a finite size")
    count = int(value)
    if count == 0 and value > 0:
        raise ValueError(f"{text!r} is less than one byte")
    return count


@dataclass(frozen=True)
class VectorCacheSettings:
    """Where the vector cache lives and how many bytes it may hold (``max_bytes=0``: off).

    ``root`` may be given as a ``str`` or any path-like (kept as a ``Path``); anything
    else, or a budget that is not a whole number of bytes, is a ``ConfigurationError``
    here rather than a ``TypeError`` at the first search.
    """

    root: Path
    max_bytes: int = DEFAULT_CACHE_BYTES

    def __post_init__(self) -> None:
        given: object = self.root
        spelt = os.fspath(given) if isinstance(given, (str, os.PathLike)) else None
        if not isinstance(spelt, str) or not spelt:
            raise ConfigurationError(
                f"vector cache root {given!r} is not a directory path (give a str or a Path)"
            )
        object.__setattr__(self, "root", Path(spelt))
        budget: object = self.max_bytes
        if not isinstance(budget, int) or isinstance(budget, bool) or budget < 0:
            raise ConfigurationError(
                f"vector cache max_bytes {budget!r} is not a byte count (an int, 0 or more; "
                "0 turns the cache off)"
            )

    @property
    def enabled(self) -> bool:
        return self.max_bytes > 0

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> VectorCacheSettings:
        """``$GROUNDKIT_CACHE_DIR`` (or the platform cache directory) and
        ``$GROUNDKIT_CACHE_MAX_BYTES`` (default 10 GiB; ``0`` turns the cache off)."""
        env = os.environ if environ is None else environ
        given = env.get(CACHE_BYTES_ENV, "").strip()
        budget = DEFAULT_CACHE_BYTES
        if given:
            try:
                budget = parse_bytes(given)
            except (ValueError, IndexError, OverflowError):
                raise ConfigurationError(
                    f"{CACHE_BYTES_ENV}={given!r} is not a size: give bytes, or a number with "
                    "K, M, G or T, of one byte or more (0 turns the vector cache off)"
                ) from None
        return cls(default_cache_root(env), budget)


@dataclass
class _Sidecar:
    size: int
    checksum: str
    remote: list[int]  # [size, mtime_ns] of the object in the listing it was fetched from

    @classmethod
    def parse(cls, raw: object) -> _Sidecar | None:
        """The sidecar a decoded JSON value spells, or None for anything else (any damage
        then reads as a missing sidecar: the file is fetched again)."""
        if not isinstance(raw, dict):
            return None
        size, checksum, remote = raw.get("size"), raw.get("checksum"), raw.get("remote")
        if not _count(size) or not isinstance(checksum, str):
            return None
        if len(checksum) != 32 or not set(checksum) <= _HEX:
            return None
        if not isinstance(remote, list) or len(remote) != 2 or not all(map(_count, remote)):
            return None
        return cls(size, checksum, list(remote))


def _count(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= _U64_MAX


def _is_panic(exc: BaseException) -> bool:
    """Whether ``exc`` is a Rust panic surfaced by pyo3 (a ``BaseException``)."""
    kind = type(exc)
    return kind.__name__ == "PanicException" and kind.__module__ == "pyo3_runtime"


def _failed_read(exc: BaseException) -> bool:
    """Whether ``exc`` is a failure to read (not a cancellation or an exit)."""
    return isinstance(exc, Exception) or _is_panic(exc)


def _reason(exc: BaseException) -> str:
    """Why a read of the cached copy failed, without the advice meant for the table."""
    return _first_line(exc).partition(". If the table is damaged")[0][:200]


@contextlib.contextmanager
def _locked_temp(path: Path) -> Iterator[IO[bytes]]:
    """A new temporary file, under a ``flock`` until it is closed: a sweep removes only
    temporary files nobody holds (a process killed in the middle of writing one)."""
    with open(path, "xb") as handle:
        with contextlib.suppress(OSError):
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        yield handle


def _sweep_temp(directory: Path) -> None:
    """Delete the temporary files under ``directory`` that no process is writing."""
    now = time.time()
    try:
        found = list(directory.rglob(".*.tmp"))
    except OSError:
        return
    for path in found:
        try:
            with open(path, "rb") as handle:
                age = now - os.fstat(handle.fileno()).st_mtime
                if age < _TEMP_GRACE_S:
                    continue
                try:
                    fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    continue  # being written
                except OSError:
                    if age < _TEMP_UNLOCKED_S:  # no locks on this filesystem: by age only
                        continue
                path.unlink()  # a writer renames it away while holding the lock
        except OSError:
            continue


def _stamp(stat: os.stat_result) -> tuple[int, int, int]:
    return (stat.st_size, stat.st_mtime_ns, stat.st_ino)


def _version_of(manifest_name: str) -> int | None:
    stem = manifest_name.removesuffix(".manifest")
    if stem == manifest_name or not stem.isdigit():
        return None
    number = int(stem)
    return _U64_MAX - number if len(stem) == _V2_NAME_DIGITS else number


def _wire_fields(buf: bytes) -> list[tuple[int, int, Any]]:
    """Protobuf wire format, one level: ``(field number, wire type, int or bytes)``."""
    out: list[tuple[int, int, Any]] = []
    at = 0

    def varint() -> int:
        nonlocal at
        value = shift = 0
        while True:
            byte = buf[at]
            at += 1
            value |= (byte & 0x7F) << shift
            if byte < 0x80:
                return value
            shift += 7

    widths = {1: 8, 5: 4}
    while at < len(buf):
        key = varint()
        number, kind = key >> 3, key & 7
        if kind == 0:
            out.append((number, kind, varint()))
            continue
        if kind == 2:
            width = varint()
        elif kind in widths:
            width = widths[kind]
        else:
            raise ValueError(f"wire type {kind}")
        if at + width > len(buf):
            raise ValueError("a field runs past the message")
        out.append((number, kind, buf[at : at + width]))
        at += width
    return out


def _fragment_files(manifest: bytes) -> set[str] | None:
    """The data files (``DataFragment.files[].path``) a Lance manifest names, or None when
    it cannot be read so (the caller then keeps every data file the bytes mention).

    A manifest file ends with the manifest's position (u64), two version numbers (u16)
    and ``LANC``; at that position a u32 length and the ``Manifest`` message, whose
    field 2 is the fragments, each with its data files in field 2, each file's path
    in field 1 (Lance's ``table.proto``).
    """
    try:
        if manifest[-4:] != b"LANC":
            return None
        start = int.from_bytes(manifest[-16:-8], "little")
        size = int.from_bytes(manifest[start : start + 4], "little")
        body = manifest[start + 4 : start + 4 + size]
        if len(body) != size:
            return None
        paths: set[str] = set()
        for number, kind, fragment in _wire_fields(body):
            if number != 2 or kind != 2:
                continue
            for f_number, f_kind, data_file in _wire_fields(fragment):
                if f_number != 2 or f_kind != 2:
                    continue
                for d_number, d_kind, path in _wire_fields(data_file):
                    if d_number == 1 and d_kind == 2:
                        paths.add(path.decode())
        return paths
    except (ValueError, IndexError, UnicodeDecodeError):
        return None


def _write_atomic(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    temp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
    try:
        with _locked_temp(temp) as handle:
            handle.write(data)
            handle.flush()
            os.replace(temp, path)  # still locked: never swept before it is renamed
    finally:
        with contextlib.suppress(FileNotFoundError):
            temp.unlink()


class TableMirror:
    """The cached copy of one table's files; blocking methods, run them in a thread.

    ``uri`` is the table itself (``s3://bucket/prefix/<name>.lance``).
    """

    def __init__(
        self,
        uri: str,
        name: str,
        storage_options: Mapping[str, str],
        settings: VectorCacheSettings,
    ) -> None:
        self.uri = uri.rstrip("/")
        self.name = name
        self.settings = settings
        self._options = dict(storage_options)
        endpoint = self._options.get("aws_endpoint") or self._options.get("endpoint") or ""
        digest = hashlib.sha256(f"{endpoint}\n{self.uri}".encode()).hexdigest()[:32]
        self.directory = settings.root / "vectors" / digest
        self.table_dir = self.directory / f"{name}.lance"
        self._secrets = [
            value
            for key, value in self._options.items()
            if value and any(hint in key.lower() for hint in ("key", "secret", "token"))
        ]
        self._fs: Any = None
        self._remote_root = ""
        self._lock = threading.Lock()
        self.version: int | None = None  # the version the mirror holds for this process
        self._needed: dict[str, tuple[int, int]] = {}  # relative path -> remote (size, mtime_ns)
        self._verified: dict[str, tuple[int, int, int]] = {}
        self._touched = 0.0
        # (version, why, until when): a version the mirror could not serve.
        self._refused: tuple[int, CacheUnavailable, float] | None = None
        self.fetched_files = 0  # files downloaded by this process (for the benchmark)
        self.fetched_bytes = 0

    # -- plumbing -------------------------------------------------------------------

    def _filesystem(self) -> tuple[Any, str]:
        if self._fs is None:
            from groundkit.storage.snapshots import object_filesystem

            self._fs, self._remote_root = object_filesystem(self.uri, self._options)
        return self._fs, self._remote_root

    def _listing(self) -> dict[str, tuple[int, int]]:
        from pyarrow import fs as pafs  # extra: dense

        filesystem, root = self._filesystem()
        infos = filesystem.get_file_info(pafs.FileSelector(root, recursive=True))
        out: dict[str, tuple[int, int]] = {}
        for info in infos:
            if info.type != pafs.FileType.File:
                continue
            rel = info.path[len(root) + 1 :]
            out[rel] = (int(info.size or 0), int(info.mtime_ns or 0))
        return out

    def _download(self, rel: str, remote: tuple[int, int]) -> None:
        filesystem, root = self._filesystem()
        target = self.table_dir / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        temp = target.with_name(f".{target.name}.{uuid.uuid4().hex}.tmp")
        digest = xxhash.xxh3_128()
        size = 0
        try:
            with filesystem.open_input_stream(f"{root}/{rel}") as stream, _locked_temp(temp) as out:
                while block := stream.read(_BLOCK):
                    digest.update(block)
                    out.write(block)
                    size += len(block)
                if size != remote[0]:
                    raise CacheUnavailable(f"{rel} changed while it was downloaded")
                out.flush()
                os.replace(temp, target)  # still locked: never swept before it is renamed
        finally:
            with contextlib.suppress(FileNotFoundError):
                temp.unlink()
        sidecar = {"size": size, "checksum": digest.hexdigest(), "remote": list(remote)}
        _write_atomic(self._sidecar_path(rel), json.dumps(sidecar).encode())
        self._verified[rel] = _stamp(target.stat())
        self.fetched_files += 1
        self.fetched_bytes += size

    def _sidecar_path(self, rel: str) -> Path:
        return self.directory / _SUMS / f"{rel}.json"

    def _read_sidecar(self, rel: str) -> _Sidecar | None:
        """The sidecar of ``rel``; None when it is missing or is not one (whatever its
        bytes: JSON nested too deep, numbers out of range, fields of the wrong type)."""
        try:
            with open(self._sidecar_path(rel), "rb") as handle:
                blob = handle.read(_SIDECAR_MAX_BYTES + 1)
            if len(blob) > _SIDECAR_MAX_BYTES:
                return None
            return _Sidecar.parse(json.loads(blob))
        except Exception:  # a damaged sidecar is a missing one
            return None

    def _matches_sidecar(self, rel: str, path: Path, size: int) -> bool:
        sidecar = self._read_sidecar(rel)
        return sidecar is not None and sidecar.size == size and _checksum(path) == sidecar.checksum

    def _usable(self, rel: str, remote: tuple[int, int]) -> bool:
        """Whether the cached copy of ``rel`` is the listed object, byte for byte; a
        copy that is not is deleted."""
        path = self.table_dir / rel
        try:
            stamp = _stamp(path.stat())
        except OSError:
            self._verified.pop(rel, None)
            return False
        if self._verified.get(rel) == stamp:
            return True
        sidecar = self._read_sidecar(rel)
        good = (
            sidecar is not None
            and sidecar.remote == list(remote)
            and self._matches_sidecar(rel, path, stamp[0])
        )
        if good:
            self._verified[rel] = stamp
            return True
        logger.info("vector cache: %s does not match its checksum; fetching it again", rel)
        self._verified.pop(rel, None)
        with contextlib.suppress(OSError):
            path.unlink()
        return False

    # -- the mirror -----------------------------------------------------------------

    def sync(self, version: int) -> bool:
        """Make the mirror hold every file ``version`` uses, checked; True when a file
        was (re)fetched (the caller reopens its local handle). ``CacheUnavailable``
        when it cannot (the version's files exceed the budget, a download failed)."""
        with self._lock:
            refused = self._refused
            if refused is not None and refused[0] == version and time.monotonic() < refused[2]:
                raise refused[1]  # not tried again for every search of the same version
            try:
                for _ in range(_ATTEMPTS - 1):
                    # A directory deleted under a download (the cache is disposable,
                    # another process may clear it): plan and fetch again at once.
                    with contextlib.suppress(FileNotFoundError):
                        return self._sync(version)
                    self.version = None
                return self._sync(version)
            except Exception as exc:
                if isinstance(exc, CacheUnavailable):
                    failure = exc
                else:
                    text = " ".join(str(exc).split())[:200]
                    for secret in self._secrets:
                        text = text.replace(secret, "***")
                    failure = CacheUnavailable(f"{type(exc).__name__}: {text}")
                # A budget does not change while the version stays; other failures may
                # pass, a directory deleted under this one at once.
                wait = float("inf") if failure.too_large else _RETRY_AFTER_S
                if not isinstance(exc, FileNotFoundError):
                    self._refused = (version, failure, time.monotonic() + wait)
                self.version = None
                raise failure from None

    def _sync(self, version: int) -> bool:
        changed = False
        if version != self.version:
            self._needed = self._plan(version)
            self.version = version
            changed = True
        missing = [
            (rel, remote) for rel, remote in self._needed.items() if not self._usable(rel, remote)
        ]
        if missing:
            with ThreadPoolExecutor(min(_FETCH_THREADS, len(missing))) as pool:
                for future in [pool.submit(self._download, rel, r) for rel, r in missing]:
                    future.result()
            self._evict()
            changed = True
        now = time.monotonic()
        if changed or now - self._touched > _TOUCH_EVERY_S:
            self._touch()
            self._touched = now
        return bool(missing) or changed

    def _plan(self, version: int) -> dict[str, tuple[int, int]]:
        """The files ``version`` uses, from one listing and its manifest (fetched now,
        never taken from the cache); removes cached files the table no longer has, and
        temporary files a killed process left behind."""
        _sweep_temp(self.directory)
        listing = self._listing()
        manifests = {
            rel: remote
            for rel, remote in listing.items()
            if rel.startswith("_versions/") and _version_of(rel[len("_versions/") :]) == version
        }
        if not manifests:
            raise CacheUnavailable(f"version {version} is not listed")
        manifest_rel, manifest_remote = sorted(manifests.items())[0]
        self._download(manifest_rel, manifest_remote)
        blob = (self.table_dir / manifest_rel).read_bytes()
        needed = {manifest_rel: manifest_remote}
        named = _fragment_files(blob)
        if named is None or any(f"data/{path}" not in listing for path in named):
            named = None  # read otherwise than expected: every data file the bytes name
        for rel, remote in listing.items():
            folder, _, rest = rel.partition("/")
            if folder == "data":
                if rest in named if named is not None else rest.encode() in blob:
                    needed[rel] = remote
            elif folder == "_deletions":
                needed[rel] = remote
            elif folder == "_indices":
                index_id = rest.partition("/")[0]
                with contextlib.suppress(ValueError):
                    if uuid.UUID(index_id).bytes in blob:
                        needed[rel] = remote
        total = sum(size for size, _ in needed.values())
        if total > self.settings.max_bytes:
            raise CacheUnavailable(
                f"version {version} uses {total:,} bytes, more than the cache's budget of "
                f"{self.settings.max_bytes:,} ({CACHE_BYTES_ENV})",
                too_large=True,
            )
        self._remove_unlisted(listing)
        return needed

    def _remove_unlisted(self, listing: Mapping[str, tuple[int, int]]) -> None:
        """Cached files whose object is gone (pruned versions, erased rows) go too."""
        sums = self.directory / _SUMS
        for path in list(sums.rglob("*.json")) if sums.is_dir() else []:
            rel = path.relative_to(sums).as_posix().removesuffix(".json")
            if rel in listing:
                continue
            with contextlib.suppress(OSError):
                (self.table_dir / rel).unlink()
            with contextlib.suppress(OSError):
                path.unlink()
            self._verified.pop(rel, None)

    def _touch(self) -> None:
        """Mark the current version's files as just used (the LRU order is the sidecars' times)."""
        for rel in self._needed:
            with contextlib.suppress(OSError):
                os.utime(self._sidecar_path(rel))

    def _evict(self) -> None:
        """Delete the least recently used cached files of any table until the cache
        fits its budget; the current version's files are kept."""
        root = self.settings.root / "vectors"
        keep = {self._sidecar_path(rel) for rel in self._needed}
        entries: list[tuple[float, int, Path, Path]] = []
        total = 0
        try:
            mirrors = list(root.iterdir())
        except OSError:  # deleted meanwhile: nothing to evict
            mirrors = []
        for mirror in mirrors:
            if mirror.name.startswith("."):
                if mirror.name.endswith(".gone"):  # a clear() that did not finish
                    shutil.rmtree(mirror, ignore_errors=True)
                continue
            _sweep_temp(mirror)
            tables = [p for p in mirror.glob("*.lance") if p.is_dir()]
            sums = mirror / _SUMS
            if len(tables) != 1 or not sums.is_dir():
                continue
            for sidecar in list(sums.rglob("*.json")):
                data = tables[0] / sidecar.relative_to(sums).as_posix().removesuffix(".json")
                try:
                    size = data.stat().st_size
                    used = sidecar.stat().st_mtime
                except OSError:
                    continue
                total += size
                if sidecar not in keep:
                    entries.append((used, size, data, sidecar))
        entries.sort(key=lambda entry: entry[0])
        for _, size, data, sidecar in entries:
            if total <= self.settings.max_bytes:
                break
            with contextlib.suppress(OSError):
                data.unlink()
            with contextlib.suppress(OSError):
                sidecar.unlink()
            total -= size

    def drop_unchecked_manifests(self) -> bool:
        """Delete the cached manifests of other versions that do not match their sidecar;
        True when one went.

        LanceDB opens a table at the newest manifest it finds before the checkout to this
        process's version, so a damaged manifest of a newer version (another process's)
        would keep this one from opening its own, checked files. A manifest whose bytes
        match its sidecar is left for the process that uses it; one removed while another
        process needs it is fetched again by that process's next search.
        """
        with self._lock:
            versions = self.table_dir / "_versions"
            dropped = False
            for path in sorted(versions.glob("*.manifest")) if versions.is_dir() else []:
                rel = f"_versions/{path.name}"
                if rel in self._needed:
                    continue
                try:
                    if self._matches_sidecar(rel, path, path.stat().st_size):
                        continue
                except OSError:
                    continue
                logger.info("vector cache: %s does not match its checksum; deleting it", rel)
                with contextlib.suppress(OSError):
                    path.unlink()
                with contextlib.suppress(OSError):
                    self._sidecar_path(rel).unlink()
                self._verified.pop(rel, None)
                dropped = True
            return dropped

    def forget(self) -> None:
        """Plan the mirror afresh at the next search (its files stay, checked as ever)."""
        with self._lock:
            self.version = None
            self._refused = None

    def clear(self) -> None:
        """Remove every cached file of this table (erasure, drop); never raises."""
        with self._lock:
            self.version = None
            self._refused = None
            self._needed = {}
            self._verified.clear()
            if not self.directory.exists():
                return
            aside = self.directory.with_name(f".{self.directory.name}.{uuid.uuid4().hex}.gone")
            try:
                os.replace(self.directory, aside)
            except OSError:
                aside = self.directory
            shutil.rmtree(aside, ignore_errors=True)

    def describe(self) -> str:
        return f"{self.directory} ({CACHE_DIR_ENV})"


@dataclass(eq=False)
class _Local:
    """A LanceDB handle on the mirror, shared by the searches reading it: closed once it
    is retired (replaced, or its files failed a read) and no search holds it any more."""

    conn: Any
    table: Any
    version: int
    users: int = 0
    retired: bool = False
    closed: bool = False

    def release(self) -> None:
        self.users -= 1
        self._close_if_idle()

    def retire(self) -> None:
        self.retired = True
        self._close_if_idle()

    def _close_if_idle(self) -> None:
        if self.retired and self.users <= 0 and not self.closed:
            self.closed = True
            with contextlib.suppress(Exception):
                self.table.close()
            with contextlib.suppress(Exception):
                self.conn.close()


@dataclass(eq=False)
class _Read:
    """One search's read (or its repeat on the object store): which mirror handles it
    took, so that only a failure of those sends it to the object store."""

    store: CachedLanceDBVectorStore
    remote: bool = False
    held: list[_Local] = field(default_factory=list)


# Per task, so concurrent searches never see each other's state.
_READ: contextvars.ContextVar[_Read | None] = contextvars.ContextVar(
    "groundkit_vector_cache_read", default=None
)


class CachedLanceDBVectorStore(LanceDBVectorStore):
    """``LanceDBVectorStore`` on object storage whose searches read a local mirror.

    Writes, counts, inventories and the version followed are the table's own, as
    uncached; only a search (and the document list it filters with) reads the
    mirror of the same version. Whenever the mirror cannot serve, the search reads
    the object store instead: slower, never different, never a failure of its own.
    ``cache_notice`` says why the last search went uncached (None when it did not).
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.mirror: TableMirror | None = None
        self.cache_notice: str | None = None
        self._local: _Local | None = None  # the current handle on the mirror
        self._handle: Any = None  # the table handle the mirror's version belongs to
        self._noticed: set[str] = set()
        self._local_lock = asyncio.Lock()

    @classmethod
    async def open_cached(
        cls,
        root: str,
        collection: str,
        dimensions: int,
        *,
        cache: VectorCacheSettings,
        storage_options: Mapping[str, str] | None = None,
        create: bool = True,
        ann_threshold: int = DEFAULT_ANN_THRESHOLD,
        owner: str | None = None,
        reclaim: bool = False,
    ) -> CachedLanceDBVectorStore:
        """``LanceDBVectorStore.open`` on ``root`` (an object-store URI), searches cached
        under ``cache.root``. A table created again (``refresh()`` sees another table
        uid) comes with a new handle, so the mirror is planned afresh from its files."""
        if not isinstance(cache, VectorCacheSettings):
            raise ConfigurationError(f"cache={cache!r} is not a VectorCacheSettings")
        options = dict(storage_options or {})
        store = await cls.open(
            root,
            collection,
            dimensions,
            create=create,
            ann_threshold=ann_threshold,
            storage_options=options,
            owner=owner,
            reclaim=reclaim,
        )
        assert isinstance(store, cls)
        table_uri = f"{root.rstrip('/')}/{collection}.lance"
        try:
            store.mirror = TableMirror(table_uri, collection, options, cache)
        except BaseException:
            await store.close()  # not left open behind the error
            raise
        return store

    @property
    def cache_state(self) -> str:
        """``"cached"`` or why searches read the object store, for a collection's info."""
        if self.mirror is None:
            return "off"
        return "cached" if self.cache_notice is None else f"uncached: {self.cache_notice}"

    def _note(self, exc: CacheUnavailable) -> None:
        self.cache_notice = exc.reason
        key = "too large" if exc.too_large else exc.reason
        if key not in self._noticed:  # said once per cause, not per search
            self._noticed.add(key)
            logger.warning("vector cache: searching %s uncached: %s", str(self.path), exc.reason)

    def _retire_local(self, only: Collection[_Local] | None = None) -> None:
        """Stop handing out the current mirror handle (``only``: if it is one of these);
        it closes once the searches holding it are done."""
        local = self._local
        if local is not None and (only is None or local in only):
            self._local = None
            local.retire()

    async def _read_table(self) -> Any:
        """The mirror's handle at the table handle's version, for a read that tracks it
        (``_through_cache``); the table itself otherwise."""
        table, mirror, read = self._table, self.mirror, _READ.get()
        if table is None or mirror is None or read is None or read.store is not self:
            return table
        if read.remote:
            return table
        if table is not self._handle:  # a new handle may be a recreated table: plan afresh
            self._handle = table
            mirror.forget()
        try:
            version = int(await table.version())
            refetched = await asyncio.to_thread(mirror.sync, version)
            async with self._local_lock:
                local = await self._local_at(version, reopen=refetched)
                local.users += 1
                read.held.append(local)
        except CacheUnavailable as exc:
            self._note(exc)
            return table
        except BaseException as exc:
            if not _failed_read(exc):
                raise
            self._note(CacheUnavailable(f"the cached copy cannot be opened ({_reason(exc)})"))
            async with self._local_lock:
                self._retire_local()
            return table
        self.cache_notice = None
        return local.table

    async def _local_at(self, version: int, *, reopen: bool) -> _Local:
        """The current mirror handle at ``version`` (call under ``_local_lock``). A handle
        searches still hold is never checked out elsewhere or closed: it is retired and
        a new one opened."""
        local = self._local
        if local is not None and (reopen or (local.version != version and local.users > 0)):
            self._retire_local()
            local = None
        if local is None:
            local = self._local = await self._open_local()
        if local.version != version:
            await local.table.checkout(version)
            local.version = version
        return local

    async def _open_local(self) -> _Local:
        """Open the mirror with LanceDB. Opening reads the newest manifest present, which
        may be another process's, not checked by this one: when the open fails, such
        manifests that do not match their sidecar are deleted and it is tried once more."""
        import lancedb  # extra: dense

        assert self.mirror is not None
        for attempt in range(2):
            conn: Any = await lancedb.connect_async(str(self.mirror.directory))
            table: Any = None
            try:
                table = await conn.open_table(self._name)
                return _Local(conn, table, int(await table.version()))
            except BaseException as exc:
                if table is not None:
                    with contextlib.suppress(Exception):
                        table.close()
                conn.close()
                if attempt or not _failed_read(exc):
                    raise
                if not await asyncio.to_thread(self.mirror.drop_unchecked_manifests):
                    raise
        raise AssertionError("unreachable")

    async def _through_cache(self, read: Callable[[], Awaitable[_T]]) -> _T:
        """Run ``read`` on the mirror; if reading the mirror failed (a file another
        process evicted or deleted under it, a handle LanceDB refused), run it again on
        the object store. A failure with the object store as the reader is not repeated:
        it is the table's own."""
        outer = _READ.get()
        if self.mirror is None or (outer is not None and outer.store is self and outer.remote):
            return await read()
        attempt = _Read(self)
        token = _READ.set(attempt)
        reason = ""
        try:
            return await read()
        except BaseException as exc:
            if not attempt.held or not _failed_read(exc):
                raise
            reason = _reason(exc)
        finally:
            _READ.reset(token)
            for local in attempt.held:
                local.release()
        await self._uncached(attempt.held, reason)
        token = _READ.set(_Read(self, remote=True))
        try:
            return await read()
        finally:
            _READ.reset(token)

    async def _uncached(self, failed: Collection[_Local], reason: str) -> None:
        """A read of the mirror failed: plan it afresh at the next search, and stop
        using the handle that failed (closed once no search holds it)."""
        if self.mirror is not None:
            self.mirror.forget()
        async with self._local_lock:
            self._retire_local(failed)
        self._note(CacheUnavailable(f"a cached file could not be read ({reason})"))

    async def _search(
        self,
        vector: npt.NDArray[np.float32],
        limit: int,
        predicate: str | None,
        *,
        exact: bool,
        resident: Any = None,
    ) -> list[tuple[str, str, float]]:
        search = partial(super()._search, vector, limit, predicate, exact=exact, resident=resident)
        return await self._through_cache(search)

    async def _read_vectors(self, rows: int) -> Any:
        return await self._through_cache(partial(super()._read_vectors, rows))

    async def _stored_documents(self) -> frozenset[str]:
        return await self._through_cache(super()._stored_documents)

    async def erase_documents(
        self, document_ids: Sequence[str], *, keep: Collection[str] | None = None
    ) -> VectorErasure:
        """Erase as uncached, then empty this table's cache: no copy of an erased row
        stays on this host (other hosts drop theirs at their next search)."""
        try:
            return await super().erase_documents(document_ids, keep=keep)
        finally:
            await self.clear_cache()

    async def clear_cache(self) -> None:
        """Delete every cached file of this table; the next search refills."""
        async with self._local_lock:
            self._retire_local()
        if self.mirror is not None:
            await asyncio.to_thread(self.mirror.clear)

    async def close(self) -> None:
        async with self._local_lock:
            self._retire_local()
        await super().close()
