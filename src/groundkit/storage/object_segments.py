"""The lexical index of a collection on object storage, with a local cache of its packs.

A shared collection whose ``storage_uri`` is ``s3://bucket/prefix`` keeps its
packs and manifest under ``<storage_uri>/<name>.segments/``, exactly the files
``LocalSegments`` keeps in a directory (adr/0041-segments-on-object-storage.md).
A pack is memory-mapped, so it must be a local file: ``load_pack`` serves it
from a cache directory on this host when the cached copy has the entry's size
and checksum, and otherwise downloads it under a temporary name, checks it and
renames it into place. A copy that does not match is never mapped.

The cache lives under ``$GROUNDKIT_CACHE_DIR`` (default ``$XDG_CACHE_HOME/groundkit``
or ``~/.cache/groundkit``), in ``segments/<digest>/`` where the digest is taken
of the endpoint and the prefix, so two collections (or two object stores) never
share a directory. Cached packs the manifest no longer names are removed by the
same grace-period rule as in ``LocalSegments``.

Object stores have no locks: ``writer_lock`` is a ``flock`` on the cache
directory, which serialises the writers of one host only. Writers on two hosts
may race on the manifest; every manifest is still a whole, self-consistent
state, so the cost of a lost race is a reader's rebuild (see the ADR).

Every failure is a ``StorageError`` naming the object and what went wrong,
with the values of the storage options blanked, so no credential is printed.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import importlib.util
import logging
import os
import re
import shutil
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, TypeVar

import numpy.typing as npt
import xxhash

from groundkit.contracts import PackCheck
from groundkit.errors import ConfigurationError, StorageError
from groundkit.storage.segments import (
    _MANIFEST,
    _SUFFIX,
    _map_pack,
    changed_pack_files,
    check_new_pack_name,
    clear_directory,
    directory_lock,
    entry_fields,
    grace_period,
    manifest_bytes,
    pack_names,
    pack_path,
    parse_manifest,
    sweep_directory,
    verify_pack_file,
    write_pack_file,
)
from groundkit.utils.cache_dir import CACHE_DIR_ENV, default_cache_root
from groundkit.utils.durable import temp_name

__all__ = ["CACHE_DIR_ENV", "ObjectSegments", "default_cache_root"]

logger = logging.getLogger("groundkit.storage")

_BLOCK = 1 << 22
# Option keys whose values are blanked in messages (LanceDB's and pyarrow's spellings).
_SECRET_HINTS = ("key", "secret", "token", "password", "credential", "sas")
# A name as LiveIndex makes them: kind, creation time in nanoseconds, random tail.
_TIMED_NAME = re.compile(r"[A-Za-z0-9]+-(\d{20})-[0-9A-Za-z]+")
_REASON_LIMIT = 300

T = TypeVar("T")


class _ObjectStoreError(StorageError, OSError):
    """A failure of the object store or the cache (``kind_of`` names it ``StorageError``).

    Also an ``OSError``: a failed write to a local directory is one, and callers
    that tolerate a failed opportunistic save (``LiveIndex`` at open, a replica
    with read-only credentials) must tolerate this one alike.
    """


def _require_pyarrow() -> None:
    try:
        found = importlib.util.find_spec("pyarrow") is not None
    except (ImportError, ValueError):
        found = False
    if not found:
        raise ConfigurationError(
            "a lexical index on object storage is moved with pyarrow: pip install groundkit[dense]"
        )


class ObjectSegments:
    """Packs and the manifest under an object-store prefix, packs cached on this host.

    ``uri`` is the prefix itself (``s3://bucket/prefix/<name>.segments``);
    ``storage_options`` take LanceDB's spelling, as for ``ObjectSnapshots``.
    ``cache_root`` overrides ``default_cache_root()``; ``grace_seconds`` is as for
    ``LocalSegments``.
    """

    def __init__(
        self,
        uri: str,
        storage_options: Mapping[str, str] | None = None,
        *,
        cache_root: Path | None = None,
        grace_seconds: float | None = None,
    ) -> None:
        _require_pyarrow()
        self._uri = uri.rstrip("/")
        self._options = dict(storage_options or {})
        self.grace_seconds = grace_seconds
        endpoint = self._options.get("aws_endpoint") or self._options.get("endpoint") or ""
        digest = hashlib.sha256(f"{endpoint}\n{self._uri}".encode()).hexdigest()[:32]
        root = default_cache_root() if cache_root is None else Path(cache_root)
        self.cache_dir = root / "segments" / digest
        self._secrets = [
            value
            for key, value in self._options.items()
            if value and any(hint in key.lower() for hint in _SECRET_HINTS)
        ]
        self._fs: Any = None
        self._root = ""
        self._errors: tuple[type[BaseException], ...] = (OSError,)
        self._fs_lock = threading.Lock()

    @property
    def location(self) -> str:
        return self._uri

    # -- plumbing -------------------------------------------------------------------

    def _filesystem(self) -> tuple[Any, str]:
        with self._fs_lock:
            if self._fs is None:
                from pyarrow import ArrowException  # extra: dense

                from groundkit.storage.snapshots import object_filesystem

                self._fs, self._root = object_filesystem(self._uri, self._options)
                self._errors = (OSError, ArrowException)
        return self._fs, self._root

    def _key(self, file_name: str) -> str:
        return f"{self._filesystem()[1]}/{file_name}"

    def _where(self, file_name: str) -> str:
        return f"{self._uri}/{file_name}"

    def _reason(self, exc: BaseException) -> str:
        text = " ".join((str(exc) or type(exc).__name__).split())
        for secret in self._secrets:
            text = text.replace(secret, "***")
        if len(text) > _REASON_LIMIT:
            text = text[: _REASON_LIMIT - 1] + "…"
        return f"{type(exc).__name__}: {text}"

    def _remote_error(self, action: str, file_name: str, exc: BaseException) -> StorageError:
        return _ObjectStoreError(
            f"cannot {action} {self._where(file_name)!r} ({self._reason(exc)}); check the "
            "storage URI, the endpoint and the credentials"
        )

    def _local_error(self, action: str, path: Path, exc: BaseException) -> StorageError:
        return _ObjectStoreError(
            f"cannot {action} {str(path)!r} in the lexical index cache ({self._reason(exc)}); "
            f"set {CACHE_DIR_ENV} to a writable directory"
        )

    async def _run(self, work: Callable[[], T]) -> T:
        """``work`` in a thread; an OSError that escaped the specific mappings becomes
        a ``StorageError`` as well (never a bare pyarrow error)."""

        def guarded() -> T:
            try:
                return work()
            except StorageError:
                raise
            except self._errors as exc:
                raise self._remote_error("use", "", exc) from None

        return await asyncio.to_thread(guarded)

    def _get(self, file_name: str) -> bytes:
        fs, _ = self._filesystem()
        try:
            with fs.open_input_stream(self._key(file_name)) as stream:
                return bytes(stream.read())
        except FileNotFoundError:
            raise
        except self._errors as exc:
            raise self._remote_error("read", file_name, exc) from None

    def _put(self, file_name: str, write: Callable[[Any], None]) -> None:
        fs, _ = self._filesystem()
        try:
            with fs.open_output_stream(self._key(file_name)) as stream:
                write(stream)
        except self._errors as exc:
            raise self._remote_error("write", file_name, exc) from None

    def _prune_cache(self, keep: set[str]) -> None:
        """Cached packs ``keep`` does not name, once past the grace period (a cache
        that cannot be swept is left as it is: it only costs disk space)."""
        with contextlib.suppress(OSError):
            sweep_directory(self.cache_dir, keep, grace_period(self.grace_seconds))

    # -- manifest ---------------------------------------------------------------------

    async def read_manifest(self) -> dict[str, Any] | None:
        """The current manifest, or None when there is none; ``StorageError`` if it
        cannot be read or is not a JSON object. Sweeps the cache after a good read."""
        return await self._run(self._read_manifest)

    def _read_manifest(self) -> dict[str, Any] | None:
        manifest = self._fetch_manifest()
        self._prune_cache(pack_names(manifest))
        return manifest

    def _fetch_manifest(self) -> dict[str, Any] | None:
        try:
            raw = self._get(_MANIFEST)
        except FileNotFoundError:
            return None
        return parse_manifest(raw, self._where(_MANIFEST))

    async def write_manifest(self, manifest: Mapping[str, Any]) -> None:
        """Replace the manifest with one PUT (an object appears whole or not at all)."""
        data = manifest_bytes(manifest)
        names = pack_names(manifest)

        def work() -> None:
            self._put(_MANIFEST, lambda stream: stream.write(data))
            self._prune_cache(names)

        await self._run(work)

    # -- packs ---------------------------------------------------------------------------

    async def write_pack(
        self, name: str, arrays: Mapping[str, npt.NDArray[Any]], meta: Mapping[str, Any]
    ) -> dict[str, Any]:
        """Write a pack into the cache (whole, synced), then upload it; returns its
        manifest entry. ``ValueError`` as for ``LocalSegments.write_pack``."""
        check_new_pack_name(name)
        copied, extra = dict(arrays), dict(meta)
        return await self._run(lambda: self._write_pack(name, copied, extra))

    def _write_pack(
        self, name: str, arrays: dict[str, npt.NDArray[Any]], meta: dict[str, Any]
    ) -> dict[str, Any]:
        path = pack_path(self.cache_dir, name)
        try:
            entry = write_pack_file(self.cache_dir, name, arrays, meta)
        except OSError as exc:
            raise self._local_error("write", path, exc) from None

        def upload(stream: Any) -> None:
            with open(path, "rb") as source:
                while block := source.read(_BLOCK):
                    stream.write(block)

        try:
            self._put(path.name, upload)
        except BaseException:
            path.unlink(missing_ok=True)
            raise
        return entry

    async def load_pack(
        self, entry: Mapping[str, Any]
    ) -> tuple[dict[str, npt.NDArray[Any]], dict[str, Any]]:
        """The arrays (read-only views of one memory map) and meta of a pack: the
        cached copy when it matches ``entry``, else a fresh download checked against it."""
        copied = dict(entry)
        return await self._run(lambda: self._load_pack(copied))

    async def load_checked_pack(
        self, entry: Mapping[str, Any], check: PackCheck
    ) -> tuple[dict[str, npt.NDArray[Any]], dict[str, Any]]:
        """As ``load_pack``, then ``check`` run on the arrays (its ``ValueError`` raised).
        Both run at every load: a cached copy is touched on each use (the sweep keeps
        what is used), so its times never stay put long enough to be remembered."""
        copied = dict(entry)

        def work() -> tuple[dict[str, npt.NDArray[Any]], dict[str, Any]]:
            arrays, meta = self._load_pack(copied)
            check.run(arrays)
            return arrays, meta

        return await self._run(work)

    def _load_pack(
        self, entry: dict[str, Any]
    ) -> tuple[dict[str, npt.NDArray[Any]], dict[str, Any]]:
        name, size, checksum = entry_fields(entry)
        path = pack_path(self.cache_dir, name)
        if not self._cached(path, size, checksum):
            self._download(path, size, checksum)
        try:
            return _map_pack(path, size)
        except FileNotFoundError:  # swept by another process between check and mapping
            self._download(path, size, checksum)
            return _map_pack(path, size)

    def changed_packs(self, entries: Iterable[Mapping[str, Any]]) -> list[str]:
        """Names of the packs among ``entries`` whose cached copy (the file a search
        maps) no longer has the entry's size: removed, cut short or replaced."""
        return changed_pack_files(self.cache_dir, entries)

    def _cached(self, path: Path, size: int, checksum: str) -> bool:
        """Whether the cached copy matches; a damaged one is removed."""
        if not path.exists():
            return False
        try:
            verify_pack_file(path, size, checksum)
        except StorageError as exc:
            logger.warning("a cached index file is downloaded again: %s", exc)
            with contextlib.suppress(OSError):
                path.unlink()
            return False
        # Touched: the sweep removes what no process has used for the grace period.
        with contextlib.suppress(OSError):
            os.utime(path)
        return True

    def _download(self, path: Path, size: int, checksum: str) -> None:
        """Fetch ``path``'s object under a temporary name, check it, rename it into place."""
        fs, _ = self._filesystem()
        where = self._where(path.name)
        try:
            self.cache_dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise self._local_error("create", self.cache_dir, exc) from None
        temp = temp_name(path)
        hasher = xxhash.xxh3_64()
        got = 0
        try:
            try:
                with fs.open_input_stream(self._key(path.name)) as stream, open(temp, "wb") as out:
                    while block := stream.read(_BLOCK):
                        got += len(block)
                        if got > size:
                            break
                        hasher.update(block)
                        out.write(block)
            except FileNotFoundError:
                raise _ObjectStoreError(f"index object {where!r} is missing") from None
            except self._errors as exc:
                raise _ObjectStoreError(
                    f"cannot download {where!r} into {str(self.cache_dir)!r} "
                    f"({self._reason(exc)}); check the storage URI, the endpoint, the "
                    f"credentials and the space left in the cache ({CACHE_DIR_ENV})"
                ) from None
            if got != size:
                held = f"more than {size}" if got > size else str(got)
                raise _ObjectStoreError(
                    f"index object {where!r} has {held} bytes, the manifest says {size}: "
                    "it was cut short or replaced"
                )
            if str(hasher.hexdigest()) != checksum:
                raise _ObjectStoreError(f"index object {where!r} does not match its checksum")
            os.replace(temp, path)
        except BaseException:
            temp.unlink(missing_ok=True)
            raise

    # -- housekeeping ----------------------------------------------------------------------

    async def remove_unreferenced(self, keep: Iterable[str]) -> int:
        """Delete pack objects that neither ``keep`` nor the manifest now in the store
        names, once older than the grace period (by the object's modification time,
        else the time in its name; an object of neither is kept); then sweep the
        cache. Returns how many objects went. Nothing is deleted while the stored
        manifest is damaged (the next manifest written replaces it)."""
        wanted = set(keep)
        return await self._run(lambda: self._remove_unreferenced(wanted))

    def _remove_unreferenced(self, keep: set[str]) -> int:
        try:
            raw: bytes | None = self._get(_MANIFEST)
        except FileNotFoundError:
            raw = None
        if raw is not None:
            try:
                keep = keep | pack_names(parse_manifest(raw, self._where(_MANIFEST)))
            except StorageError:  # damaged: what it named is unknown, so nothing goes
                return 0
        fs, root = self._filesystem()
        from pyarrow import fs as pafs  # extra: dense

        try:
            listed = fs.get_file_info(pafs.FileSelector(root, allow_not_found=True))
        except self._errors as exc:
            raise self._remote_error("list", "", exc) from None
        grace = grace_period(self.grace_seconds)
        now = time.time()
        removed = 0
        for info in listed:
            base = str(info.base_name)
            if not info.is_file or not base.endswith(_SUFFIX):
                continue
            stem = base[: -len(_SUFFIX)]
            age = _age(info, stem, now)
            if stem in keep or age is None or age < grace:
                continue
            try:
                fs.delete_file(info.path)
            except FileNotFoundError:
                continue
            except self._errors as exc:
                raise self._remote_error("delete", base, exc) from None
            removed += 1
        self._prune_cache(keep)
        return removed

    async def clear(self) -> None:
        """Remove the manifest and every pack, in the store and in this host's cache."""

        def work() -> None:
            fs, root = self._filesystem()
            try:
                fs.delete_dir_contents(root, missing_dir_ok=True)
            except self._errors as exc:
                raise self._remote_error("clear", "", exc) from None
            try:
                clear_directory(self.cache_dir)
            except OSError as exc:
                raise self._local_error("clear", self.cache_dir, exc) from None

        await self._run(work)

    async def drop(self) -> None:
        """Remove the prefix itself and this host's cache of it (the collection is dropped)."""

        def work() -> None:
            fs, root = self._filesystem()
            try:
                fs.delete_dir(root)
            except FileNotFoundError:
                pass
            except self._errors as exc:
                raise self._remote_error("remove", "", exc) from None
            shutil.rmtree(self.cache_dir, ignore_errors=True)

        await self._run(work)

    @contextlib.asynccontextmanager
    async def writer_lock(self, *, wait: bool = True) -> AsyncIterator[bool]:
        """Exclusive among the writers of this index on this host (a ``flock`` on the
        cache directory); writers on other hosts are not excluded (see the module)."""
        try:
            await asyncio.to_thread(self.cache_dir.mkdir, parents=True, exist_ok=True)
        except OSError as exc:
            raise self._local_error("create", self.cache_dir, exc) from None
        async with directory_lock(self.cache_dir, wait=wait) as held:
            yield held


def _age(info: Any, stem: str, now: float) -> float | None:
    """Seconds since an object was written: its modification time, else the time its
    name carries; None when neither is known (such an object is never deleted)."""
    mtime = getattr(info, "mtime", None)
    if mtime is not None:
        return now - float(mtime.timestamp())
    timed = _TIMED_NAME.fullmatch(stem)
    if timed is not None:
        return now - int(timed.group(1)) / 1e9
    return None
