"""Everything groundkit persists: metadata stores, the vector store, URL snapshots.

``location.StoreLocation`` resolves where a collection lives and opens its stores
as one bundle; ``binding`` ties a collection to its analyzer and embedder;
``protocols`` holds the seams every backend implements. Each name here is imported
from its module on first use, so naming one backend loads no other.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from groundkit.utils.lazy import lazy_names as _lazy_names

if TYPE_CHECKING:
    from groundkit.storage.lancedb import LanceDBVectorStore
    from groundkit.storage.location import StoreLocation
    from groundkit.storage.postgres import PostgresMetadataStore
    from groundkit.storage.protocols import (
        MetadataStoreProtocol,
        SnapshotStore,
        VectorHit,
        VectorStoreProtocol,
    )
    from groundkit.storage.sqlite import SQLiteMetadataStore

# The public names each module defines; imported on first use.
__getattr__, __dir__ = _lazy_names(
    __name__,
    globals(),
    {
        "groundkit.storage.lancedb": ("LanceDBVectorStore",),
        "groundkit.storage.location": ("StoreLocation",),
        "groundkit.storage.postgres": ("PostgresMetadataStore",),
        "groundkit.storage.protocols": (
            "MetadataStoreProtocol",
            "SnapshotStore",
            "VectorHit",
            "VectorStoreProtocol",
        ),
        "groundkit.storage.sqlite": ("SQLiteMetadataStore",),
    },
)

__all__ = [
    "LanceDBVectorStore",
    "MetadataStoreProtocol",
    "PostgresMetadataStore",
    "SQLiteMetadataStore",
    "SnapshotStore",
    "StoreLocation",
    "VectorHit",
    "VectorStoreProtocol",
]
