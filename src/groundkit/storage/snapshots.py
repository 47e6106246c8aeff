"""Copies of URL documents: ``<location>/<collection>.snapshots/<document_id>``.

A snapshot holds exactly the document's indexed text (UTF-8), so a citation
into a URL document is checked against what was fetched at ingest, never a
re-fetch. The writer and the citation reader share these helpers, so both
agree on where a snapshot lives and refuse the same ids. The location is a
local directory or, for collections shared between hosts, an object-store
prefix (``s3://bucket/prefix``) reached through pyarrow's filesystems; the
same id rules apply to both (adr/0025-shared-collections.md).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from groundkit.errors import ConfigurationError
from groundkit.storage.names import SNAPSHOT_TEMP_SUFFIX, check_snapshot_id
from groundkit.storage.protocols import SnapshotStore
from groundkit.utils.file_reads import read_regular_file
from groundkit.utils.path_safety import ensure_within

__all__ = [
    "LocalSnapshots",
    "ObjectSnapshots",
    "SnapshotLocation",
    "as_snapshot_store",
    "is_object_uri",
    "object_filesystem",
    "remove_stale_snapshots",
    "snapshot_matches",
    "snapshot_path",
    "write_snapshot",
]


def snapshot_path(snapshot_dir: Path, document_id: str) -> Path:
    """Where ``document_id``'s snapshot lives; ``PathEscapeError`` for an unusable id
    or a result outside ``snapshot_dir``."""
    check_snapshot_id(document_id)
    return ensure_within(Path(snapshot_dir) / document_id, Path(snapshot_dir))


def snapshot_matches(path: Path, content: str) -> bool:
    """True when the file at ``path`` holds exactly ``content``."""
    try:
        return read_regular_file(path) == content.encode("utf-8")
    except OSError:
        return False


def write_snapshot(snapshot_dir: Path, document_id: str, content: str) -> Path:
    """Write ``content`` atomically (temp file, fsync, rename); returns the path."""
    snapshot_dir.mkdir(parents=True, exist_ok=True)
    path = snapshot_path(snapshot_dir, document_id)
    temp = path.with_name(path.name + SNAPSHOT_TEMP_SUFFIX)
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


class LocalSnapshots:
    """Snapshots as files in a local directory (the default, beside the SQLite file)."""

    def __init__(self, directory: Path) -> None:
        self.directory = Path(directory)

    @property
    def location(self) -> str:
        return str(self.directory)

    async def read(self, document_id: str) -> bytes:
        path = snapshot_path(self.directory, document_id)
        # A regular file only: a FIFO put in its place is refused, never waited on.
        return await asyncio.to_thread(read_regular_file, path)

    async def matches(self, document_id: str, content: str) -> bool:
        path = snapshot_path(self.directory, document_id)
        return await asyncio.to_thread(snapshot_matches, path, content)

    async def write(self, document_id: str, content: str) -> None:
        await asyncio.to_thread(write_snapshot, self.directory, document_id, content)

    async def remove_stale(self, keep: Iterable[str]) -> list[str]:
        return await asyncio.to_thread(remove_stale_snapshots, self.directory, list(keep))


class ObjectSnapshots:
    """Snapshots as objects under a prefix of an object store (``s3://``, ``gs://``...).

    ``storage_options`` takes LanceDB's spelling (``aws_endpoint``,
    ``aws_region``, ``aws_access_key_id``, ...), so one mapping configures the
    vectors and the snapshots; credentials not given are read by pyarrow from
    the environment, as LanceDB does. An object put is atomic, so no temporary
    name is needed.
    """

    def __init__(self, uri: str, storage_options: Mapping[str, str] | None = None) -> None:
        self._uri = uri.rstrip("/")
        self._options = dict(storage_options or {})
        self._fs: Any = None
        self._root = ""

    @property
    def location(self) -> str:
        return self._uri

    def _filesystem(self) -> tuple[Any, str]:
        if self._fs is None:
            self._fs, self._root = object_filesystem(self._uri, self._options)
        return self._fs, self._root

    def _key(self, document_id: str) -> str:
        _, root = self._filesystem()
        return f"{root}/{check_snapshot_id(document_id)}"

    async def read(self, document_id: str) -> bytes:
        fs, _ = self._filesystem()
        key = self._key(document_id)

        def get() -> bytes:
            with fs.open_input_stream(key) as stream:
                return bytes(stream.read())

        return await asyncio.to_thread(get)

    async def matches(self, document_id: str, content: str) -> bool:
        try:
            return await self.read(document_id) == content.encode("utf-8")
        except OSError:
            return False

    async def write(self, document_id: str, content: str) -> None:
        fs, _ = self._filesystem()
        key = self._key(document_id)

        def put() -> None:
            with fs.open_output_stream(key) as stream:
                stream.write(content.encode("utf-8"))

        await asyncio.to_thread(put)

    async def remove_stale(self, keep: Iterable[str]) -> list[str]:
        fs, root = self._filesystem()
        wanted = set(keep)

        def sweep() -> list[str]:
            from pyarrow import fs as pafs  # extra: dense

            listed = fs.get_file_info(pafs.FileSelector(root, allow_not_found=True))
            names = sorted(info.base_name for info in listed if info.is_file)
            removed = [n for n in names if n not in wanted]
            for name in removed:
                fs.delete_file(f"{root}/{name}")
            return removed

        return await asyncio.to_thread(sweep)


def object_filesystem(uri: str, options: Mapping[str, str]) -> tuple[Any, str]:
    """A pyarrow filesystem and the path under it for ``uri``."""
    try:
        from pyarrow import fs as pafs
    except ImportError as exc:
        raise ConfigurationError(
            "snapshots in object storage need pyarrow: pip install groundkit[dense]"
        ) from exc
    scheme, _, rest = uri.partition("://")
    if scheme == "s3":
        endpoint = options.get("aws_endpoint") or options.get("endpoint")
        kwargs: dict[str, Any] = {}
        if endpoint:
            kind, _, host = endpoint.partition("://")
            kwargs["endpoint_override"] = host or kind
            kwargs["scheme"] = kind if host else "https"
        if options.get("aws_region") or options.get("region"):
            kwargs["region"] = options.get("aws_region") or options.get("region")
        key = options.get("aws_access_key_id")
        secret = options.get("aws_secret_access_key")
        if key and secret:
            kwargs["access_key"] = key
            kwargs["secret_key"] = secret
            if options.get("aws_session_token"):
                kwargs["session_token"] = options["aws_session_token"]
        try:
            return pafs.S3FileSystem(**kwargs), rest.rstrip("/")
        except Exception as exc:
            raise ConfigurationError(f"cannot reach {uri!r}: {type(exc).__name__}") from None
    try:
        filesystem, path = pafs.FileSystem.from_uri(uri)
    except Exception as exc:
        raise ConfigurationError(
            f"snapshots cannot live at {uri!r}: {type(exc).__name__}; use a local directory "
            "or an s3:// URI"
        ) from None
    return filesystem, str(path).rstrip("/")


def is_object_uri(location: str | os.PathLike[str]) -> bool:
    """True for ``scheme://...`` locations other than ``file://``."""
    text = str(location)
    return "://" in text and not text.startswith("file://")


# What a ``snapshot_dir`` argument may be: a directory, an object-store URI, a store.
SnapshotLocation = Path | str | SnapshotStore


def as_snapshot_store(
    location: SnapshotLocation | None,
    storage_options: Mapping[str, str] | None = None,
) -> SnapshotStore | None:
    """The store a ``snapshot_dir`` argument names (a directory, a URI or a store)."""
    if location is None or isinstance(location, SnapshotStore):
        return location
    if is_object_uri(location):
        return ObjectSnapshots(str(location), storage_options)
    return LocalSnapshots(Path(location))
