"""Where one collection lives, resolved once, and its stores opened as one bundle.

Two shapes (adr/0025-shared-collections.md). Local: everything under one
index directory (``<name>.sqlite3``, ``<name>.lance``, ``<name>.snapshots``).
Shared: metadata in PostgreSQL (``metadata_url``) and vectors, snapshots and
the lexical index's segments under ``storage_uri`` (a directory every host
mounts, or ``s3://bucket/prefix``), so several processes on several hosts open
the same collection.

This module is the only place that knows the on-disk layout: callers ask a
``StoreLocation`` whether a collection exists, which collections there are, and
for a ``CollectionStores`` bundle, and never build a file name themselves.
"""

from __future__ import annotations

import asyncio
import dataclasses
import errno
import logging
import os
import shutil
import sqlite3
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from groundkit.errors import CollectionNotFoundError, ConfigurationError, StorageError
from groundkit.storage._rows import never_written
from groundkit.storage.names import COLLECTION_NAME_PATTERN, check_collection_name
from groundkit.storage.object_segments import ObjectSegments
from groundkit.storage.protocols import MetadataStoreProtocol, SnapshotStore, VectorStoreProtocol
from groundkit.storage.segments import LocalSegments, PackStore
from groundkit.storage.snapshots import as_snapshot_store, is_object_uri
from groundkit.storage.vector_cache import VectorCacheSettings

__all__ = [
    "METADATA_URL_ENV",
    "STORAGE_URI_ENV",
    "CollectionStores",
    "StoreLocation",
    "metadata_path",
    "snapshot_dir_for",
    "storage_options_from_env",
]

logger = logging.getLogger("groundkit.storage")

METADATA_URL_ENV = "GROUNDKIT_METADATA_URL"
STORAGE_URI_ENV = "GROUNDKIT_STORAGE_URI"
_PG_SCHEMES = ("postgresql://", "postgres://")
_METADATA_SUFFIX = ".sqlite3"
_SNAPSHOTS_SUFFIX = ".snapshots"
_SEGMENTS_SUFFIX = ".segments"
# Object-store settings read from the environment when not given (LanceDB reads
# these names too; pyarrow, which moves the snapshots, does not read them all).
_ENV_OPTIONS = {
    "AWS_ENDPOINT": "aws_endpoint",
    "AWS_ENDPOINT_URL": "aws_endpoint",
    "AWS_ALLOW_HTTP": "aws_allow_http",
    "AWS_REGION": "aws_region",
    "AWS_DEFAULT_REGION": "aws_region",
    "AWS_ACCESS_KEY_ID": "aws_access_key_id",
    "AWS_SECRET_ACCESS_KEY": "aws_secret_access_key",
    "AWS_SESSION_TOKEN": "aws_session_token",
}


def metadata_path(index_dir: Path, name: str) -> Path:
    """The SQLite file of collection ``name`` under ``index_dir``."""
    return Path(index_dir) / f"{check_collection_name(name)}{_METADATA_SUFFIX}"


def snapshot_dir_for(root: Path, name: str) -> Path:
    """The directory holding collection ``name``'s snapshots under a local ``root``."""
    return Path(root) / f"{check_collection_name(name)}{_SNAPSHOTS_SUFFIX}"


def storage_options_from_env(
    given: Mapping[str, str] | None = None, environ: Mapping[str, str] | None = None
) -> dict[str, str]:
    """``given`` plus the object-store settings of the environment it does not set."""
    env = os.environ if environ is None else environ
    out: dict[str, str] = {}
    for variable, key in _ENV_OPTIONS.items():
        if env.get(variable) and key not in out:
            out[key] = env[variable]
    out.update(given or {})
    return out


@dataclass
class CollectionStores:
    """The open stores of one collection: metadata always, vectors once opened.

    ``close`` closes what is open, vectors first; it is idempotent.
    """

    location: StoreLocation
    metadata: MetadataStoreProtocol
    snapshots: SnapshotStore | None
    vectors: VectorStoreProtocol | None = None
    # Where the lexical index is persisted (None: it is built in memory at open).
    segments: PackStore | None = None
    # What opening repaired (a damaged metadata file set aside), for the next report.
    repairs: list[str] = field(default_factory=list)
    # Whether the vector table is taken over even when stamped with another collection's
    # uid: opened with ``rebuild_damaged``, whose new metadata file has a new uid.
    reclaim_vectors: bool = False

    def refuse_writes(self) -> None:
        """``StorageError`` when this collection cannot be written where it is (a local
        collection on a read-only filesystem): raised before a write reads anything."""
        refuse = getattr(self.metadata, "refuse_writes", None)
        if refuse is not None:
            refuse()

    async def open_vectors(self, dimensions: int) -> VectorStoreProtocol:
        """Open (not create) the vector table for ``dimensions``-d vectors, as this
        collection's: a table stamped with another collection's uid (two collections
        sharing a storage root and a name) is refused with ``StorageError``.

        ``ConfigurationError`` for a shared collection opened without a storage URI.
        """
        if self.vectors is None:
            owner = await self.metadata.collection_uid()
            self.vectors = await self.location.open_vectors(
                dimensions, owner=owner, reclaim=self.reclaim_vectors
            )
        return self.vectors

    async def close(self) -> None:
        vectors, self.vectors = self.vectors, None
        try:
            if vectors is not None:
                await vectors.close()
        finally:
            await self.metadata.close()


@dataclass(frozen=True)
class StoreLocation:
    """One collection's places; ``describe()`` is safe to print (no credentials)."""

    name: str
    index_dir: Path | None = None
    metadata_url: str | None = None
    storage_uri: str | None = None
    storage_options: dict[str, str] = field(default_factory=dict, repr=False)
    # The local cache searches of an object-store vector table read (None: off; ADR 0061).
    vector_cache: VectorCacheSettings | None = None

    @classmethod
    def resolve(
        cls,
        name: str,
        *,
        index_dir: str | Path | None = None,
        metadata_url: str | None = None,
        storage_uri: str | Path | None = None,
        storage_options: Mapping[str, str] | None = None,
        vector_cache: VectorCacheSettings | bool = True,
    ) -> StoreLocation:
        """Check the combination; ``ConfigurationError`` names what is missing or wrong.

        ``vector_cache``: True caches an object-store vector table under
        ``$GROUNDKIT_CACHE_DIR`` within ``$GROUNDKIT_CACHE_MAX_BYTES`` (0 turns it
        off); False searches the object store directly; or give the settings."""
        check_collection_name(name)
        if metadata_url is not None and not metadata_url.startswith(_PG_SCHEMES):
            raise ConfigurationError(
                "metadata_url must be a PostgreSQL URL (postgresql://user@host/db); "
                "for a local collection give index_dir instead"
            )
        if metadata_url is None and index_dir is None:
            raise ConfigurationError("give index_dir, or metadata_url for a shared collection")
        index = Path(os.path.realpath(index_dir)) if index_dir is not None else None
        storage = None if storage_uri is None else _storage_root(storage_uri)
        options = storage_options_from_env(storage_options) if storage else {}
        cache = VectorCacheSettings.from_env() if vector_cache is True else vector_cache or None
        cache = cache if cache is not None and cache.enabled else None
        return cls(name, index, metadata_url, storage, options, cache)

    def with_name(self, name: str) -> StoreLocation:
        """The same places, for another collection."""
        return dataclasses.replace(self, name=check_collection_name(name))

    @property
    def shared(self) -> bool:
        return self.metadata_url is not None

    @property
    def storage_root(self) -> Path | str | None:
        """Where vectors and snapshots go: ``storage_uri``, else the index directory."""
        if self.storage_uri is not None:
            return self.storage_uri if is_object_uri(self.storage_uri) else Path(self.storage_uri)
        return self.index_dir

    def segments(self) -> PackStore | None:
        """Where the lexical index's segments are kept: ``<root>/<name>.segments`` beside
        the collection's other files, a directory or an object-store prefix (packs
        then cached on this host, ``ObjectSegments``). None without a storage root
        (a shared collection without ``storage_uri``): the lexical index is built in
        memory when opened."""
        root = self.storage_root
        if root is None:
            return None
        folder = f"{check_collection_name(self.name)}{_SEGMENTS_SUFFIX}"
        if isinstance(root, Path):
            return LocalSegments(root / folder)
        return ObjectSegments(f"{root}/{folder}", self.storage_options)

    def snapshots(self) -> SnapshotStore | None:
        root = self.storage_root
        if root is None:
            return None
        if isinstance(root, Path):
            return as_snapshot_store(snapshot_dir_for(root, self.name))
        return as_snapshot_store(f"{root}/{self.name}{_SNAPSHOTS_SUFFIX}", self.storage_options)

    async def exists(self) -> bool:
        """Whether the collection has been created (by a first ingest)."""
        if self.metadata_url is None:
            assert self.index_dir is not None
            return await asyncio.to_thread(metadata_path(self.index_dir, self.name).is_file)
        from groundkit.storage.postgres import collection_exists

        # Its own schema only: a schema of the database this role may not read (another
        # team's collection) must not stop it opening its own.
        return await collection_exists(self.metadata_url, self.name)

    async def list_collections(self) -> list[str]:
        """Names of the collections in this index directory or database, sorted (in a
        database, those whose schema this role may read)."""
        if self.metadata_url is not None:
            from groundkit.storage.postgres import collection_names

            return await collection_names(self.metadata_url)
        assert self.index_dir is not None  # resolve() guarantees one of the two
        return await asyncio.to_thread(_scan, self.index_dir)

    async def open_metadata(
        self, *, create: bool = True, rebuild_damaged: bool = False
    ) -> MetadataStoreProtocol:
        """The metadata store; ``rebuild_damaged`` (local collections only) sets a damaged
        file aside and starts anew (``SQLiteMetadataStore.open``)."""
        if self.metadata_url is not None:
            if rebuild_damaged:
                raise ConfigurationError(
                    "rebuild_damaged works on a local collection's file; a PostgreSQL "
                    "collection is restored by its database's own backups"
                )
            from groundkit.storage.postgres import PostgresMetadataStore

            return await PostgresMetadataStore.open(self.metadata_url, self.name, create=create)
        from groundkit.storage.sqlite import SQLiteMetadataStore

        assert self.index_dir is not None
        return await SQLiteMetadataStore.open(
            metadata_path(self.index_dir, self.name), create=create, rebuild_damaged=rebuild_damaged
        )

    async def open_vectors(
        self, dimensions: int, *, owner: str | None = None, reclaim: bool = False
    ) -> VectorStoreProtocol:
        """The collection's vector store (created on its first write); ``owner`` and
        ``reclaim`` as ``LanceDBVectorStore.open`` takes them."""
        root = self.storage_root
        if root is None:
            raise ConfigurationError(
                "dense retrieval on a shared collection needs storage_uri "
                "(a shared directory or s3://bucket/prefix) for its vectors"
            )
        if isinstance(root, str) and self.vector_cache is not None:
            from groundkit.storage.vector_cache import CachedLanceDBVectorStore

            return await CachedLanceDBVectorStore.open_cached(
                root,
                self.name,
                dimensions,
                cache=self.vector_cache,
                storage_options=self.storage_options,
                owner=owner,
                reclaim=reclaim,
            )
        from groundkit.storage.lancedb import LanceDBVectorStore

        return await LanceDBVectorStore.open(
            root,
            self.name,
            dimensions,
            storage_options=self.storage_options,
            owner=owner,
            reclaim=reclaim,
        )

    async def open(self, *, create: bool = True, rebuild_damaged: bool = False) -> CollectionStores:
        """The metadata store and snapshot store of this collection, as one bundle.

        ``create=False`` refuses a collection that does not exist yet with a
        ``StorageError`` that says to ingest first.
        """
        if not create and self.metadata_url is None and not await self.exists():
            raise CollectionNotFoundError(
                f"no collection {self.name!r} in {str(self.index_dir)!r}; ingest something first"
            )
        metadata = await self.open_metadata(create=create, rebuild_damaged=rebuild_damaged)
        repairs = list(getattr(metadata, "repairs", []))
        return CollectionStores(
            self,
            metadata,
            self.snapshots(),
            segments=self.segments(),
            repairs=repairs,
            reclaim_vectors=rebuild_damaged,
        )

    async def drop(self) -> None:
        """Remove the collection: its metadata, lexical segments, vectors and URL snapshots.

        Files a repair set aside (``<name>.sqlite3.damaged-*``, ``<name>.lance.damaged-*``)
        are kept. A collection that does not exist is a ``StorageError``.
        """
        if not await self.exists():
            raise CollectionNotFoundError(
                f"no collection {self.name!r} in {self.describe_root()!r}"
            )
        if self.metadata_url is not None:
            from groundkit.storage.postgres import PostgresMetadataStore

            store = await PostgresMetadataStore.open(self.metadata_url, self.name, create=False)
            owner: str | None = await store.collection_uid()
            await store.drop()
        else:
            assert self.index_dir is not None
            owner = await asyncio.to_thread(_local_uid, metadata_path(self.index_dir, self.name))
        await self._drop_files(keep_vectors=await self._foreign_vectors(owner))

    async def drop_unwritten(self) -> bool:
        """Remove the collection if nothing was ever written to it; whether it did.

        A collection one process created and never wrote to may meanwhile be open in
        another, about to write. So the check is made under the store's own lock, as
        the removal is: a write committed first is seen (nothing is removed), and a
        write after finds the store gone and is refused (the SQLite store compares the
        file it opened with the one its path names), never lost. A local collection
        another process has open at all is left alone."""
        if self.metadata_url is not None:
            from groundkit.storage.postgres import drop_if_unwritten

            if not await drop_if_unwritten(self.metadata_url, self.name):
                return False
            await self._drop_files(keep_vectors=True)
            return True
        assert self.index_dir is not None
        root = self.storage_root
        local = root if isinstance(root, Path) else None
        removed = await asyncio.to_thread(_drop_local_unwritten, self.index_dir, self.name, local)
        if removed and local is None:
            await self._drop_object_storage(keep_vectors=True)
        return removed

    async def _foreign_vectors(self, owner: str | None) -> bool:
        """Whether the vector table under the storage root is stamped with a collection
        uid other than ``owner`` (this collection's; None when it cannot be read): such
        a table is another collection's, and a drop leaves it."""
        root = self.storage_root
        if owner is None or root is None:
            return False
        from groundkit.storage.lancedb import vector_table_owner

        try:
            stamped = await vector_table_owner(root, self.name, self.storage_options)
        except ConfigurationError:  # no dense extra: no table this process could stamp
            return False
        except Exception as exc:
            raise StorageError(
                f"cannot read whose vector table {self.name!r} under {str(root)!r} is "
                f"({type(exc).__name__}); nothing was removed"
            ) from None
        if stamped is None or stamped == owner:
            return False
        logger.warning(
            "the vector table of %r under %s belongs to another collection: left in place",
            self.name,
            root,
        )
        return True

    async def _drop_files(self, *, keep_vectors: bool = False) -> None:
        """Remove the collection's files: a local root's (with the SQLite file when that
        is where the metadata lives), or what it keeps on object storage.

        ``keep_vectors`` leaves the vector table: another collection's (stamped with its
        uid), or any table beside a collection nothing was written to (vectors are
        stored only after their text, so such a collection has none of its own)."""
        root = self.storage_root
        if isinstance(root, Path):
            with_metadata = self.metadata_url is None
            await asyncio.to_thread(_remove_local, root, self.name, with_metadata, keep_vectors)
        else:
            await self._drop_object_storage(keep_vectors=keep_vectors)

    async def _drop_object_storage(self, *, keep_vectors: bool = False) -> None:
        """Remove what the collection keeps on object storage (nothing without it)."""
        root = self.storage_root
        if root is not None and not isinstance(root, Path):
            snapshots = self.snapshots()
            if snapshots is not None:
                await snapshots.remove_stale([])
            segments = self.segments()
            if isinstance(segments, ObjectSegments):
                await segments.drop()
            if keep_vectors:
                return
            await _drop_object_table(root, self.name, self.storage_options)
            if self.vector_cache is not None:
                from groundkit.storage.vector_cache import TableMirror

                mirror = TableMirror(
                    f"{root}/{self.name}.lance", self.name, self.storage_options, self.vector_cache
                )
                await asyncio.to_thread(mirror.clear)

    async def disk_usage(self) -> int | None:
        """Bytes the collection's files take in its index directory (metadata, lexical
        segments, vectors, snapshots); None for a shared collection, whose database and object store
        account for their own space."""
        if self.metadata_url is not None or self.index_dir is None:
            return None
        return await asyncio.to_thread(_local_size, self.index_dir, self.name)

    def describe(self) -> str:
        """Where the collection is, for messages: the metadata URL without its password."""
        if self.metadata_url is not None:
            from groundkit.storage.postgres import redact_dsn

            return f"{redact_dsn(self.metadata_url)} (collection {self.name!r})"
        return f"{self.index_dir} (collection {self.name!r})"

    def describe_root(self) -> str:
        """What the collections live in, safe to print: the directory or the redacted URL."""
        if self.metadata_url is not None:
            from groundkit.storage.postgres import redact_dsn

            return redact_dsn(self.metadata_url)
        return str(self.index_dir)


# Object stores LanceDB and pyarrow both reach (vectors, snapshots and segments share
# the root); anything else named ``scheme://`` is a mistake, not a directory.
_OBJECT_SCHEMES = frozenset({"s3", "gs", "gcs", "az", "abfs", "abfss"})


def _storage_root(given: str | Path) -> str:
    """``storage_uri`` as the stores take it: an object-store URI with its bucket, or a
    local directory (a path, or ``file://`` + an absolute path) made absolute.
    ``ConfigurationError`` for an empty one, an unknown scheme or a missing bucket: any
    of them once became a relative directory named after the text."""
    text = os.fspath(given)
    if not text.strip():
        raise ConfigurationError("storage_uri is empty: give a directory or s3://bucket/prefix")
    if text.startswith("file://"):
        path = text.removeprefix("file://")
        if not path.startswith("/"):
            raise ConfigurationError(
                f"storage_uri {text!r}: a file:// URI needs an absolute path (file:///srv/x)"
            )
        return os.path.realpath(path)
    if "://" not in text:
        return os.path.realpath(text)
    scheme, _, rest = text.partition("://")
    if scheme.lower() not in _OBJECT_SCHEMES:
        known = ", ".join(f"{s}://" for s in sorted(_OBJECT_SCHEMES))
        raise ConfigurationError(
            f"storage_uri {text!r}: unknown scheme {scheme!r}; give a directory, or one of {known}"
        )
    bucket = rest.split("/", 1)[0]
    if not bucket:
        raise ConfigurationError(f"storage_uri {text!r} names no bucket ({scheme}://bucket/prefix)")
    return text.rstrip("/")


def _local_paths(
    root: Path, name: str, with_metadata: bool, keep_vectors: bool = False
) -> list[Path]:
    paths = [
        *([] if keep_vectors else [root / f"{name}.lance"]),
        snapshot_dir_for(root, name),
        root / f"{name}{_SEGMENTS_SUFFIX}",
    ]
    if with_metadata:
        sqlite = metadata_path(root, name)
        paths += [sqlite, Path(f"{sqlite}-wal"), Path(f"{sqlite}-shm")]
    return paths


def _remove_local(root: Path, name: str, with_metadata: bool, keep_vectors: bool = False) -> None:
    # The metadata file last (its WAL and shared-memory files just before it, never
    # after, so no stale WAL is left for a new collection of the name): until it is
    # gone the collection still exists and a failed removal can be repeated.
    derived = _local_paths(root, name, False, keep_vectors)
    metadata = [p for p in _local_paths(root, name, True, keep_vectors) if p not in derived]
    removed = False
    for path in [*derived, *reversed(metadata)]:
        inside: set[str] | None = None
        try:
            if path.is_dir() and not path.is_symlink():
                inside = _tree(path)
                shutil.rmtree(path)
                removed = True
            elif path.exists() or path.is_symlink():
                path.unlink()
                removed = True
        except OSError as exc:
            # A read-only filesystem refuses every removal; a file's removal is one step;
            # a folder's is many, and whether any was taken shows in what is left of it.
            unchanged = not removed and (
                exc.errno == errno.EROFS or inside is None or _tree_unchanged(path, inside)
            )
            state = (
                "nothing was removed"
                if unchanged
                else "the collection is partly removed, run the drop again"
            )
            raise StorageError(
                f"cannot remove {str(path)!r} ({exc.strerror or exc}); {state}"
            ) from None


def _tree(folder: Path) -> set[str]:
    """Every path under ``folder``: what a failed removal may have taken part of."""
    found: set[str] = set()
    for where, folders, files in os.walk(folder):
        found.update(os.path.join(where, name) for name in (*folders, *files))
    return found


def _tree_unchanged(folder: Path, before: set[str]) -> bool:
    try:
        return folder.is_dir() and _tree(folder) == before
    except OSError:
        return False


# How long the removal of an unused collection waits for a lock another connection
# holds for a moment; a connection that stays open keeps the collection.
_UNUSED_WAIT_MS = 200


def _drop_local_unwritten(index_dir: Path, name: str, root: Path | None) -> bool:
    """``StoreLocation.drop_unwritten`` for a collection in a local SQLite file.

    Leaving write-ahead logging needs every other connection closed (SQLite refuses
    otherwise), so it tells whether another process has the file open at all. Then an
    exclusive lock keeps everyone out while the generation is read and the files are
    removed, and no write-ahead log is left for SQLite to delete by name on close (one
    a new collection of the same name might already own)."""
    path = metadata_path(index_dir, name)
    try:
        conn = sqlite3.connect(
            f"{path.resolve().as_uri()}?mode=rw", uri=True, isolation_level=None, timeout=0
        )
    except sqlite3.Error:
        return False  # gone already, or not ours to open
    try:
        conn.execute(f"PRAGMA busy_timeout={_UNUSED_WAIT_MS}")
        mode = conn.execute("PRAGMA journal_mode=DELETE").fetchone()
        if mode is None or str(mode[0]).lower() != "delete":
            return False  # another connection has it open
        conn.execute("BEGIN EXCLUSIVE")
        row = conn.execute("SELECT generation, manifest FROM state WHERE id = 1").fetchone()
        if row is None or not never_written(row[0], row[1]):
            conn.execute("ROLLBACK")
            conn.execute("PRAGMA journal_mode=WAL")
            return False
        if root is not None and root != index_dir:
            _remove_local(root, name, False, keep_vectors=True)
        _remove_local(index_dir, name, True, keep_vectors=True)
        return True
    except sqlite3.Error:
        return False  # busy, or not a collection's file: left as it is
    finally:
        conn.close()


def _local_uid(path: Path) -> str | None:
    """The collection uid in a local metadata file (None when it cannot be read)."""
    try:
        conn = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True, timeout=1)
    except sqlite3.Error:
        return None
    try:
        row = conn.execute("SELECT uid FROM state WHERE id = 1").fetchone()
    except sqlite3.Error:
        return None
    finally:
        conn.close()
    return row[0] if row is not None and isinstance(row[0], str) and row[0] else None


def _local_size(root: Path, name: str) -> int:
    total = 0
    for path in _local_paths(root, name, True):
        if path.is_file():
            total += path.stat().st_size
        elif path.is_dir():
            for dirpath, _, files in os.walk(path):
                for file in files:
                    try:
                        total += (Path(dirpath) / file).stat().st_size
                    except OSError:
                        continue
    return total


async def _drop_object_table(root: str, name: str, options: Mapping[str, str]) -> None:
    """Drop a collection's vector table under an object-store root, if it has one."""
    import lancedb

    try:
        conn = await lancedb.connect_async(root, storage_options=dict(options))
        if name in (await conn.list_tables()).tables:
            await conn.drop_table(name)
    except Exception as exc:
        raise StorageError(
            f"cannot drop the vector table of {name!r} under {root!r} ({type(exc).__name__})"
        ) from None


def _scan(index_dir: Path) -> list[str]:
    try:
        entries = list(os.scandir(index_dir))
    except OSError:
        return []
    names = (e.name[: -len(_METADATA_SUFFIX)] for e in entries if e.name.endswith(_METADATA_SUFFIX))
    return sorted(n for n in names if COLLECTION_NAME_PATTERN.fullmatch(n))
