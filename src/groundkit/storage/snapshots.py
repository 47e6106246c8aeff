"""Stored texts of URL documents and records: ``<location>/<collection>.snapshots/``.

A snapshot holds exactly the document's indexed text (UTF-8), so a citation
into a URL document is checked against what was fetched at ingest, never a
re-fetch. The writer and the citation reader share these helpers, so both
agree on where a snapshot lives and refuse the same ids. The location is a
local directory or, for collections shared between hosts, an object-store
prefix (``s3://bucket/prefix``) reached through pyarrow's filesystems; the
same id rules apply to both (adr/0025-shared-collections.md).

A text is named by its document and the SHA-256 of its bytes,
``<document_id>.<content_hash>`` (``text_name``), and written before the
document row that names it commits, so a row is never visible without its
text (adr/0054-atomic-records-and-interrupted-ingests.md). Texts no row names
are swept once they are older than a grace period (``ORPHAN_GRACE_SECONDS``),
so a writer between its text and its commit is not robbed. Collections written
before keep their texts under the bare document id; those are still read.

A collection ingested with ``IngestConfig(keep_sources=True)`` also keeps each
file's extracted text here, compressed, as ``<document_id>.<content_hash>.kept.zlib``
(``kept_name``): the same naming, grace period and sweeps, so a host without the
source tree can check citations against it (adr/0062-kept-sources.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import secrets
import time
import zlib
from collections.abc import Awaitable, Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from groundkit.contracts import STORED_TEXT_CLASSES
from groundkit.errors import ConfigurationError
from groundkit.storage.names import SNAPSHOT_TEMP_SUFFIX, check_snapshot_id
from groundkit.storage.protocols import SnapshotStore
from groundkit.utils.file_reads import read_regular_file
from groundkit.utils.hashing import sha256_text
from groundkit.utils.path_safety import ensure_within

__all__ = [
    "KEPT_SUFFIX",
    "ORPHAN_GRACE_SECONDS",
    "KeptCopyError",
    "LocalSnapshots",
    "NamedTexts",
    "ObjectSnapshots",
    "SnapshotLocation",
    "as_snapshot_store",
    "is_object_uri",
    "kept_name",
    "names_of",
    "object_filesystem",
    "pack_kept",
    "remove_stale_snapshots",
    "snapshot_matches",
    "snapshot_path",
    "store_kept",
    "store_text",
    "text_name",
    "unpack_kept",
    "write_snapshot",
]

# A text no row names is left alone this long (seconds): a writer in another process
# writes its texts first and commits the rows naming them within this time.
ORPHAN_GRACE_SECONDS = 3600.0
# A file's kept text: ``<document_id>.<sha256 hex>`` and this (zlib, level 6).
KEPT_SUFFIX = ".kept.zlib"
# ``<document_id>.<sha256 hex>``: a text named by its content (``text_name``), or a
# file's kept copy (``kept_name``).
_TEXT_NAME = re.compile(
    r"^(?P<document>.+)\.(?P<hash>[0-9a-f]{64})(?P<kept>" + re.escape(KEPT_SUFFIX) + r")?$"
)
# zlib's default level: level 9 stores prose no smaller and compresses it more slowly
# (adr/0062-kept-sources.md).
_KEPT_LEVEL = 6


def text_name(document_id: str, content_hash: str) -> str:
    """The name of ``document_id``'s text whose UTF-8 bytes hash to ``content_hash``;
    ``PathEscapeError`` for an id that cannot name a snapshot."""
    check_snapshot_id(document_id)
    if not re.fullmatch(r"[0-9a-f]{64}", content_hash):
        raise ConfigurationError(f"{content_hash!r} is not a SHA-256 hex digest")
    return check_snapshot_id(f"{document_id}.{content_hash}")


def kept_name(document_id: str, content_hash: str) -> str:
    """The name of the kept copy of a file document's text hashing to ``content_hash``."""
    return check_snapshot_id(text_name(document_id, content_hash) + KEPT_SUFFIX)


def names_of(document_id: str, content_hash: str, source_class: str) -> list[str]:
    """The stored texts a document row names, which every sweep keeps: a URL's or a
    record's text (and the bare id of one written before texts were named), or a
    file's kept copy."""
    if source_class in STORED_TEXT_CLASSES:
        return [text_name(document_id, content_hash), document_id]
    return [kept_name(document_id, content_hash)]


class KeptCopyError(ValueError):
    """A kept copy that does not hold the text its name promises (corrupt, truncated,
    another text): never used."""


def pack_kept(content: str) -> bytes:
    """``content`` as a kept copy stores it."""
    return zlib.compress(content.encode("utf-8"), _KEPT_LEVEL)


def unpack_kept(data: bytes, name: str) -> str:
    """The text a kept copy ``name`` holds, checked against the hash its name (the
    document row's) gives; ``KeptCopyError`` when it is not that text."""
    match = _TEXT_NAME.fullmatch(name)
    if match is None or match["kept"] is None:
        raise KeptCopyError(f"{name!r} is not the name of a kept copy")
    try:
        text = zlib.decompress(data).decode("utf-8")
    except (zlib.error, UnicodeDecodeError) as exc:
        raise KeptCopyError(f"it is corrupt ({type(exc).__name__})") from None
    if sha256_text(text) != match["hash"]:
        raise KeptCopyError("it holds another text than the one indexed (its hash differs)")
    return text


async def store_kept(store: SnapshotStore, name: str, content: str) -> bool:
    """Make the kept copy ``name`` hold ``content`` before the row naming it commits;
    True when it had to be written. One already there is read back and checked first
    (a corrupt one is replaced); a local one's time is then renewed, so a sweep's
    grace period covers the commit that follows. ``OSError`` when it cannot be
    written; ``ConfigurationError`` for a store that cannot hold bytes."""
    write = getattr(store, "write_bytes", None)
    if not callable(write):
        raise ConfigurationError(
            f"keep_sources needs a snapshot store that stores bytes (a local directory or "
            f"an object-store URI); {type(store).__name__} does not"
        )
    try:
        unpack_kept(await store.read(name), name)
    except (OSError, KeptCopyError):
        await write(name, pack_kept(content))
        return True
    renew = getattr(store, "renew", None)
    if callable(renew):
        await renew(name)
    return False


def snapshot_path(snapshot_dir: Path, document_id: str) -> Path:
    """Where ``document_id``'s snapshot lives; ``PathEscapeError`` for an unusable id
    or a result outside ``snapshot_dir``."""
    check_snapshot_id(document_id)
    return ensure_within(document_id, Path(snapshot_dir))


def _own_file(snapshot_dir: Path, name: str) -> Path | None:
    """``name``'s path, or None when a link stands there: groundkit writes every text
    as a file of its own, so a link (wherever it points) holds no stored text. It is
    never followed to look or renew, and a write replaces it."""
    path = Path(snapshot_dir) / check_snapshot_id(name)
    return None if path.is_symlink() else path


def snapshot_matches(path: Path, content: str) -> bool:
    """True when the file at ``path`` holds exactly ``content``."""
    try:
        return read_regular_file(path) == content.encode("utf-8")
    except OSError:
        return False


def write_snapshot(snapshot_dir: Path, document_id: str, content: str | bytes) -> Path:
    """Write ``content`` (a text as UTF-8, or bytes) atomically (a temp file of this
    writer's own, fsync, rename, the directory synced); returns the path."""
    snapshot_dir.mkdir(parents=True, exist_ok=True)
    # Not resolved: the rename below replaces a link standing at the name, never
    # writing through it.
    path = Path(snapshot_dir) / check_snapshot_id(document_id)
    # Its own temp name: two processes writing the same text do not share one.
    temp = path.with_name(f"{path.name}.{secrets.token_hex(6)}{SNAPSHOT_TEMP_SUFFIX}")
    try:
        with open(temp, "wb") as handle:
            handle.write(content.encode("utf-8") if isinstance(content, str) else content)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            temp.unlink()
        raise
    _sync_directory(snapshot_dir)
    return path


def keep_snapshot(snapshot_dir: Path, name: str, content: str) -> bool:
    """True when ``name`` holds exactly ``content``; its time is then set to now, so a
    sweep's grace period protects it while the row naming it commits."""
    path = _own_file(snapshot_dir, name)
    if path is None:
        return False
    if not snapshot_matches(path, content):
        return False
    try:
        os.utime(path)
    except OSError:
        return False
    return True


def remove_stale_snapshots(
    snapshot_dir: Path,
    keep: Iterable[str],
    *,
    grace: float | None = None,
    gone: Iterable[str] = (),
    gone_before: float | None = None,
) -> list[str]:
    """Delete snapshot files no document names, and leftover temp files.

    Without ``grace``, everything not in ``keep``. With it (seconds), a text
    named by its content (``text_name``) or a temp file is removed only once it
    is that old, unless its document is one of ``gone`` (deleted) and it was
    written before ``gone_before``. A text under a bare document id (written by
    an earlier version) goes once ``keep`` names a text of the same document
    that is present, or when ``keep`` does not name it.
    """
    if not snapshot_dir.is_dir():
        return []
    entries: dict[str, float] = {}
    for entry in sorted(snapshot_dir.iterdir()):
        try:
            if entry.is_symlink() or entry.is_file():
                entries[entry.name] = entry.lstat().st_mtime
        except OSError:
            continue
    doomed = _stale_names(entries, keep, grace, gone, gone_before, time.time())
    removed: list[str] = []
    for name in doomed:
        try:
            (snapshot_dir / name).unlink()
        except OSError:
            continue
        removed.append(name)
    if removed:
        _sync_directory(snapshot_dir)
    return removed


def _stale_names(
    entries: Mapping[str, float | None],
    keep: Iterable[str],
    grace: float | None,
    gone: Iterable[str],
    gone_before: float | None,
    now: float,
) -> list[str]:
    """Which of ``entries`` (name: modification time, None when unknown) a sweep
    removes; see ``remove_stale_snapshots``."""
    wanted = set(keep)
    gone_ids = set(gone)
    # Bare-id texts superseded by a present, named text of the same document.
    superseded = {
        match["document"]
        for name in wanted
        if name in entries and (match := _TEXT_NAME.fullmatch(name)) is not None
    }
    out: list[str] = []
    for name, mtime in entries.items():
        if name in wanted and name not in superseded:
            continue
        match = _TEXT_NAME.fullmatch(name)
        if match is None and not name.endswith(SNAPSHOT_TEMP_SUFFIX):
            out.append(name)  # a bare-id text: no writer makes these any more
            continue
        if grace is None:
            out.append(name)
            continue
        if mtime is None:
            continue
        deleted = match is not None and match["document"] in gone_ids
        if (deleted and (gone_before is None or mtime <= gone_before)) or now - mtime > grace:
            out.append(name)
    return sorted(out)


def _newest_text_name(names: Mapping[str, float | None], document_id: str) -> str | None:
    """The most recently written content-named text of ``document_id`` among ``names``."""
    found = [
        (mtime or 0.0, name)
        for name, mtime in names.items()
        if (match := _TEXT_NAME.fullmatch(name)) is not None
        and match["document"] == document_id
        and match["kept"] is None
    ]
    return max(found)[1] if found else None


def _newest_kept_name(names: Mapping[str, float | None], document_id: str) -> str | None:
    """The most recently written kept copy of ``document_id`` among ``names``."""
    found = [
        (mtime or 0.0, name)
        for name, mtime in names.items()
        if (match := _TEXT_NAME.fullmatch(name)) is not None
        and match["document"] == document_id
        and match["kept"] is not None
    ]
    return max(found)[1] if found else None


def _read_local(directory: Path, name: str) -> bytes:
    """The text ``name`` names: exactly that file or, for a bare document id with no
    file of its own, the document's most recently written content-named text."""
    path = snapshot_path(directory, name)
    try:
        # A regular file only: a FIFO put in its place is refused, never waited on.
        return read_regular_file(path)
    except FileNotFoundError:
        if _TEXT_NAME.fullmatch(name) is not None:
            raise
        newest = _newest_text_name(_local_names(directory, name + "."), name)
        if newest is None:
            raise
        return read_regular_file(snapshot_path(directory, newest))


def _local_names(directory: Path, prefix: str = "") -> dict[str, float | None]:
    """``{name: modification time}`` of the files in ``directory`` starting with ``prefix``."""
    out: dict[str, float | None] = {}
    try:
        with os.scandir(directory) as listing:
            for entry in listing:
                if entry.name.startswith(prefix) and entry.is_file(follow_symlinks=False):
                    try:
                        out[entry.name] = entry.stat(follow_symlinks=False).st_mtime
                    except OSError:
                        out[entry.name] = None
    except FileNotFoundError:
        return {}
    return out


def _sync_directory(directory: Path) -> None:
    """Make the renames and removals in ``directory`` durable (best effort)."""
    with contextlib.suppress(OSError):
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


class LocalSnapshots:
    """Snapshots as files in a local directory (the default, beside the SQLite file)."""

    def __init__(self, directory: Path) -> None:
        self.directory = Path(directory)

    @property
    def location(self) -> str:
        return str(self.directory)

    async def read(self, document_id: str) -> bytes:
        """The text stored under ``document_id`` (a ``text_name`` or a bare document
        id: then its file, else the document's most recently written text)."""
        return await asyncio.to_thread(_read_local, self.directory, document_id)

    async def matches(self, document_id: str, content: str) -> bool:
        def look() -> bool:
            path = _own_file(self.directory, document_id)
            return path is not None and snapshot_matches(path, content)

        return await asyncio.to_thread(look)

    async def write(self, document_id: str, content: str) -> None:
        await asyncio.to_thread(write_snapshot, self.directory, document_id, content)

    async def keep(self, name: str, content: str) -> bool:
        """True when ``name`` already holds ``content`` (its time is then renewed)."""
        return await asyncio.to_thread(keep_snapshot, self.directory, name, content)

    async def write_bytes(self, name: str, data: bytes) -> None:
        """Store ``data`` under ``name`` whole (a kept copy)."""
        await asyncio.to_thread(write_snapshot, self.directory, name, data)

    async def renew(self, name: str) -> None:
        """Set ``name``'s time to now (a sweep's grace period counts from it)."""

        def touch() -> None:
            path = _own_file(self.directory, name)
            if path is not None:
                with contextlib.suppress(OSError):
                    os.utime(path)

        await asyncio.to_thread(touch)

    async def kept_copy(self, document_id: str) -> tuple[str, bytes] | None:
        """The name and bytes of ``document_id``'s most recently written kept copy."""
        check_snapshot_id(document_id)
        listed = await asyncio.to_thread(_local_names, self.directory, document_id + ".")
        name = _newest_kept_name(listed, document_id)
        if name is None:
            return None
        return name, await self.read(name)

    async def exists(self, name: str) -> bool:
        """Whether a file ``name`` is stored (exactly that name; a link is not one)."""

        def look() -> bool:
            path = _own_file(self.directory, name)
            return path is not None and path.is_file()

        return await asyncio.to_thread(look)

    async def names(self) -> set[str]:
        """The names stored (temp files left out)."""
        listed = await asyncio.to_thread(_local_names, self.directory)
        return {n for n in listed if not n.endswith(SNAPSHOT_TEMP_SUFFIX)}

    async def remove_stale(
        self,
        keep: Iterable[str],
        *,
        grace: float | None = None,
        gone: Iterable[str] = (),
        gone_before: float | None = None,
    ) -> list[str]:
        return await asyncio.to_thread(
            lambda: remove_stale_snapshots(
                self.directory, list(keep), grace=grace, gone=list(gone), gone_before=gone_before
            )
        )


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
        """As ``LocalSnapshots.read``: a bare document id without an object of its own
        reads the document's most recently written text."""
        fs, root = self._filesystem()
        key = self._key(document_id)

        def get(where: str) -> bytes:
            with fs.open_input_stream(where) as stream:
                return bytes(stream.read())

        try:
            return await asyncio.to_thread(get, key)
        except FileNotFoundError:
            if _TEXT_NAME.fullmatch(document_id) is not None:
                raise
            listed = await self._listing()
            newest = _newest_text_name(listed, document_id)
            if newest is None:
                raise
            return await asyncio.to_thread(get, f"{root}/{newest}")

    async def _listing(self) -> dict[str, float | None]:
        """``{name: modification time}`` of the objects under the prefix."""
        fs, root = self._filesystem()

        def listing() -> dict[str, float | None]:
            from pyarrow import fs as pafs  # extra: dense

            listed = fs.get_file_info(pafs.FileSelector(root, allow_not_found=True))
            return {
                info.base_name: (info.mtime.timestamp() if info.mtime is not None else None)
                for info in listed
                if info.is_file
            }

        return await asyncio.to_thread(listing)

    async def names(self) -> set[str]:
        """The names stored (temp names left out; object puts have none)."""
        return {n for n in await self._listing() if not n.endswith(SNAPSHOT_TEMP_SUFFIX)}

    async def sizes(self) -> dict[str, int]:
        """``{name: size in bytes}`` of the objects under the prefix, from one listing:
        an ingest checks its unchanged files' kept copies with it, where reading each
        back would cost a request per file."""
        fs, root = self._filesystem()

        def listing() -> dict[str, int]:
            from pyarrow import fs as pafs  # extra: dense

            listed = fs.get_file_info(pafs.FileSelector(root, allow_not_found=True))
            return {info.base_name: int(info.size) for info in listed if info.is_file}

        return await asyncio.to_thread(listing)

    async def keep(self, name: str, content: str) -> bool:
        """False: an object's time is renewed only by writing it again, which the caller
        then does (as cheap as reading it back to compare)."""
        self._key(name)
        return False

    async def exists(self, name: str) -> bool:
        """Whether an object ``name`` is stored (exactly that name)."""
        fs, _ = self._filesystem()
        key = self._key(name)

        def look() -> bool:
            from pyarrow import fs as pafs  # extra: dense

            return bool(fs.get_file_info(key).type == pafs.FileType.File)

        return await asyncio.to_thread(look)

    async def matches(self, document_id: str, content: str) -> bool:
        try:
            return await self.read(document_id) == content.encode("utf-8")
        except OSError:
            return False

    async def write(self, document_id: str, content: str) -> None:
        await self.write_bytes(document_id, content.encode("utf-8"))

    async def write_bytes(self, name: str, data: bytes) -> None:
        """Store ``data`` under ``name`` whole (one put)."""
        fs, _ = self._filesystem()
        key = self._key(name)

        def put() -> None:
            with fs.open_output_stream(key) as stream:
                stream.write(data)

        await asyncio.to_thread(put)

    async def kept_copy(self, document_id: str) -> tuple[str, bytes] | None:
        """As ``LocalSnapshots.kept_copy`` (one listing of the prefix)."""
        check_snapshot_id(document_id)
        name = _newest_kept_name(await self._listing(), document_id)
        if name is None:
            return None
        return name, await self.read(name)

    async def remove_stale(
        self,
        keep: Iterable[str],
        *,
        grace: float | None = None,
        gone: Iterable[str] = (),
        gone_before: float | None = None,
    ) -> list[str]:
        """As ``LocalSnapshots.remove_stale`` (``remove_stale_snapshots``)."""
        fs, root = self._filesystem()
        listed = await self._listing()
        removed = _stale_names(listed, keep, grace, gone, gone_before, time.time())

        def sweep() -> None:
            for name in removed:
                fs.delete_file(f"{root}/{name}")

        await asyncio.to_thread(sweep)
        return removed


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


class NamedTexts:
    """A snapshot store read by document id through the names the metadata store gave.

    ``names`` maps a document id to the ``text_name`` its current row names; a
    reader handed this store (``read_source``) reads exactly the text the row
    was committed with. A document whose named text is absent is read under its
    bare id (a collection written before texts were named by content); an id not
    in ``names`` is read as the store reads it.
    """

    def __init__(
        self,
        store: SnapshotStore,
        names: Mapping[str, str],
        *,
        kept: Callable[[str], Awaitable[str | None]] | None = None,
    ) -> None:
        self._store = store
        self._names = dict(names)
        # A file document's kept-copy name as its current row gives it (asked only
        # when its file cannot be read).
        self._kept = kept

    @property
    def location(self) -> str:
        return self._store.location

    async def read(self, document_id: str) -> bytes:
        name = self._names.get(document_id)
        if name is None:
            return await self._store.read(document_id)
        try:
            return await self._store.read(name)
        except FileNotFoundError:
            pass
        try:
            return await self._store.read(check_snapshot_id(document_id))
        except FileNotFoundError:
            raise FileNotFoundError(
                2, "it is missing (its write was interrupted or the file was removed)"
            ) from None

    async def kept_copy(self, document_id: str) -> tuple[str, bytes] | None:
        """The kept copy the document's current row names (None when the row names
        none, or no row was asked for: then the store's newest one)."""
        if self._kept is None:
            fallback = getattr(self._store, "kept_copy", None)
            return await fallback(document_id) if callable(fallback) else None
        name = await self._kept(document_id)
        if name is None:
            return None
        try:
            return name, await self._store.read(name)
        except FileNotFoundError:
            return None

    async def matches(self, document_id: str, content: str) -> bool:
        return await self._store.matches(self._names.get(document_id, document_id), content)

    async def write(self, document_id: str, content: str) -> None:
        await self._store.write(self._names.get(document_id, document_id), content)

    async def remove_stale(self, keep: Iterable[str]) -> list[str]:
        return await self._store.remove_stale(keep)


async def store_text(store: SnapshotStore, name: str, content: str) -> bool:
    """Make ``name`` hold ``content`` before a row naming it commits; True when it had
    to be written. A text already there is kept (its time renewed, so a sweep's grace
    period covers the commit that follows); ``OSError`` when it cannot be written."""
    keep = getattr(store, "keep", None)
    if callable(keep):
        if await keep(name, content):
            return False
    elif await store.matches(name, content):
        return False
    await store.write(name, content)
    return True


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
