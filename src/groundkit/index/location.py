"""Where one collection lives: metadata, vectors and snapshots.

Two shapes (adr/0025-shared-collections.md). Local: everything under one
index directory (``<name>.sqlite3``, ``<name>.lance``, ``<name>.snapshots``).
Shared: metadata in PostgreSQL (``metadata_url``) and vectors and snapshots
under ``storage_uri`` (a directory every host mounts, or ``s3://bucket/prefix``),
so several processes on several hosts open the same collection.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from groundkit.errors import ConfigurationError
from groundkit.index.metadata import SQLiteMetadataStore, check_collection_name
from groundkit.index.protocols import MetadataStoreProtocol
from groundkit.ingestion.snapshots import (
    SnapshotStore,
    as_snapshot_store,
    is_object_uri,
    snapshot_dir_for,
)

__all__ = ["METADATA_URL_ENV", "STORAGE_URI_ENV", "StoreLocation", "storage_options_from_env"]

METADATA_URL_ENV = "GROUNDKIT_METADATA_URL"
STORAGE_URI_ENV = "GROUNDKIT_STORAGE_URI"
_PG_SCHEMES = ("postgresql://", "postgres://")
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


@dataclass(frozen=True)
class StoreLocation:
    """One collection's places; ``describe()`` is safe to print (no credentials)."""

    name: str
    index_dir: Path | None = None
    metadata_url: str | None = None
    storage_uri: str | None = None
    storage_options: dict[str, str] = field(default_factory=dict, repr=False)

    @classmethod
    def resolve(
        cls,
        name: str,
        *,
        index_dir: str | Path | None = None,
        metadata_url: str | None = None,
        storage_uri: str | Path | None = None,
        storage_options: Mapping[str, str] | None = None,
    ) -> StoreLocation:
        """Check the combination; ``ConfigurationError`` names what is missing or wrong."""
        check_collection_name(name)
        if metadata_url is not None and not metadata_url.startswith(_PG_SCHEMES):
            raise ConfigurationError(
                "metadata_url must be a PostgreSQL URL (postgresql://user@host/db); "
                "for a local collection give index_dir instead"
            )
        if metadata_url is None and index_dir is None:
            raise ConfigurationError("give index_dir, or metadata_url for a shared collection")
        index = Path(os.path.realpath(index_dir)) if index_dir is not None else None
        storage = None
        if storage_uri is not None:
            text = str(storage_uri)
            storage = text.rstrip("/") if is_object_uri(text) else os.path.realpath(text)
        options = storage_options_from_env(storage_options) if storage else {}
        return cls(name, index, metadata_url, storage, options)

    @property
    def shared(self) -> bool:
        return self.metadata_url is not None

    @property
    def storage_root(self) -> Path | str | None:
        """Where vectors and snapshots go: ``storage_uri``, else the index directory."""
        if self.storage_uri is not None:
            return self.storage_uri if is_object_uri(self.storage_uri) else Path(self.storage_uri)
        return self.index_dir

    def snapshots(self) -> SnapshotStore | None:
        root = self.storage_root
        if root is None:
            return None
        if isinstance(root, Path):
            return as_snapshot_store(snapshot_dir_for(root, self.name))
        return as_snapshot_store(f"{root}/{self.name}.snapshots", self.storage_options)

    async def open_metadata(self, *, create: bool = True) -> MetadataStoreProtocol:
        if self.metadata_url is not None:
            from groundkit.index.postgres import PostgresMetadataStore

            return await PostgresMetadataStore.open(self.metadata_url, self.name, create=create)
        assert self.index_dir is not None
        return await SQLiteMetadataStore.for_collection(self.index_dir, self.name, create=create)

    def describe(self) -> str:
        """Where the collection is, for messages: the metadata URL without its password."""
        if self.metadata_url is not None:
            from groundkit.index.postgres import redact_dsn

            return f"{redact_dsn(self.metadata_url)} (collection {self.name!r})"
        return f"{self.index_dir} (collection {self.name!r})"
