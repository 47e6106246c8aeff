"""Naming rules for what is persisted: collections, documents, snapshots.

Collection names become file names, schema names and span attributes; document
ids become snapshot file names and literals inside vector-store filters. Every
rule is written here once, so the writer and every reader refuse the same input.
"""

from __future__ import annotations

import re

from groundkit.errors import ConfigurationError
from groundkit.utils.hashing import stable_id
from groundkit.utils.path_safety import PathEscapeError

__all__ = [
    "COLLECTION_NAME_PATTERN",
    "SNAPSHOT_TEMP_SUFFIX",
    "VECTOR_ID_PATTERN",
    "check_collection_name",
    "check_snapshot_id",
    "document_id_for",
]

COLLECTION_NAME_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$")
# Ids (document ids, content hashes) that may be spelled inside a vector-store
# filter, which has no bound parameters. Ours are hex digests; the set also admits
# readable test ids ("doc:a.txt") but nothing that can end a quoted literal (no
# quote, backslash, whitespace or control character).
VECTOR_ID_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:#/-]{0,255}$")
# A document id becomes a snapshot's file name; only a plain name can be one.
_SNAPSHOT_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")
# Snapshot writes go through a temporary name with this suffix, so no id may end in it.
SNAPSHOT_TEMP_SUFFIX = ".partial"


def check_collection_name(name: str) -> str:
    """``name`` if it can name a collection; ``ConfigurationError`` otherwise."""
    if not isinstance(name, str) or not COLLECTION_NAME_PATTERN.fullmatch(name):
        raise ConfigurationError(
            f"invalid collection name {name!r}: use 1-64 letters, digits, '_' or '-', "
            "starting with a letter or digit"
        )
    return name


def document_id_for(source: str) -> str:
    """A document's id, derived from its source so a re-ingest keeps it."""
    return stable_id("document", source)


def check_snapshot_id(document_id: str) -> str:
    """``document_id`` if it can name a snapshot; ``PathEscapeError`` otherwise.

    A document id is data from the store, never trusted as a path: it must be a
    plain file (or object) name.
    """
    if not _SNAPSHOT_ID.fullmatch(document_id) or document_id.endswith(SNAPSHOT_TEMP_SUFFIX):
        raise PathEscapeError(f"document id {document_id!r} cannot name a snapshot file")
    return document_id
