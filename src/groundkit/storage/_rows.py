"""Row codec shared by the SQL metadata stores: Python values to rows and back.

SQLite and PostgreSQL store the same columns in the same shapes; what turns a
document or chunk into a row, and a row into a ``StoredChunk``, is written once
here so the two backends cannot drift apart.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, get_args

import numpy as np
import numpy.typing as npt
import pydantic_core

from groundkit.contracts import (
    FIELD_NAME_PATTERN,
    FIELDS_KEY,
    GAPS_KEY,
    GEOMETRY_KEY,
    HEADINGS_KEY,
    PAGE_STARTS_KEY,
    Chunk,
    CollectionManifest,
    Document,
    DocumentRecord,
    FieldValue,
    SourceClass,
    valid_outline,
    valid_page_starts,
)
from groundkit.errors import IngestionError, InvalidQueryError, StorageError
from groundkit.storage.protocols import (
    ChangeLog,
    ChunkPostings,
    DocumentState,
    Generations,
    StoredChunk,
    metadata_json,
)
from groundkit.storage.versions import check_keep, version_start
from groundkit.utils.geometry import check_geometry
from groundkit.utils.text import describe_unencodable
from groundkit.utils.ties import order_key

__all__ = [
    "LEGACY_GAPS_SQL",
    "REMOVED",
    "MetadataCarry",
    "WriteItems",
    "change_log",
    "check_fields_value",
    "check_keep",
    "check_storable",
    "chunk_rows",
    "damaged",
    "document_record",
    "document_rows",
    "document_state",
    "generations_row",
    "has_long_metadata",
    "int_value",
    "iso_time",
    "manifest_value",
    "never_written",
    "now_iso",
    "optional_text",
    "parse_metadata",
    "plan_versions",
    "postings_from_blobs",
    "postings_from_rows",
    "prefix_range",
    "same_metadata",
    "share_metadata",
    "stored_chunk",
    "stored_hit",
    "term_counts",
    "text_value",
    "version_start",
    "write_moment",
]

WriteItems = Sequence[tuple[Document, Sequence[Chunk], Sequence[Sequence[str]]]]
_SOURCE_CLASSES: frozenset[str] = frozenset(get_args(SourceClass))
# ``valid_to`` of a change-log entry whose chunk was removed outright (it is
# visible at no time any more, unlike a past version).
REMOVED = -math.inf
# The SET clause (both SQL dialects) that marks a stored document as chunked before chunk
# gaps were recorded: ``GAPS_KEY`` is null, so a passage rebuilt from its chunks takes no
# gap for granted (a one-character gap may be a line break). Run by the migration to
# schema 4, whose writes record the gaps; only JSON objects as this codec writes them
# (``{...}``, no leading space) are touched, and their text is kept byte for byte.
LEGACY_GAPS_SQL = (
    f"metadata = '{{\"{GAPS_KEY}\": null' || CASE WHEN metadata = '{{}}' THEN '}}'"
    " ELSE ', ' || substr(metadata, 2) END WHERE metadata LIKE '{%'"
)


def now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def write_moment(seconds: float) -> float:
    """``seconds`` (the clock's now) cut to the whole microsecond below: the moment a
    write records both as its versions' start (``valid_from``) and, as ISO 8601 text, as
    their ``ingested_at``. ``time.time()`` carries sub-microsecond digits that ``iso_time``
    rounds away, half the time upwards: a search ``as_of`` the reported ``ingested_at``
    then came before the start it names and found the previous version. Cut this way,
    ``iso_time`` gives this very moment back, and ``datetime.timestamp()`` of the text
    gives back this very float; successive writes never get an earlier moment than the
    clock's order gives them (a floor keeps order, ties allowed as before). The store
    reads the clock itself, so a test can give it one."""
    return math.floor(seconds * 1_000_000) / 1_000_000


def iso_time(seconds: float) -> str:
    """Seconds since the epoch as ISO 8601 in UTC (to the microsecond, when there is one)."""
    moment = datetime.fromtimestamp(seconds, UTC)
    return moment.isoformat(timespec="microseconds" if moment.microsecond else "seconds")


@dataclass(frozen=True, slots=True)
class VersionPlan:
    """What a write does to the documents already stored under its sources."""

    next_version: dict[str, int]  # document id -> the version number the write gives it
    foreign: list[str]  # documents whose source the write hands to another document id


# What ``stored_already`` reads of each stored document under a write's sources.
STORED_ALREADY_COLUMNS = "id, source, content_hash, source_class, extractor, metadata"


def stored_already(items: WriteItems, stored: Sequence[Sequence[Any]]) -> set[str]:
    """Sources whose current row already is what the write would store: the same
    document, text, extractor and metadata (``STORED_ALREADY_COLUMNS``).

    Two writers that read a folder before either committed both take an unchanged
    file for new or changed; the second to commit would turn the first's row into
    a past version of the same text. Read inside the write's transaction, after
    its lock, this leaves such a document as the first writer stored it."""
    wanted = {
        document.source: (
            document.document_id,
            document.content_hash,
            document.source_class,
            document.extractor,
            document.metadata,
        )
        for document, _, _ in items
    }
    same: set[str] = set()
    for document_id, source, content_hash, source_class, extractor, metadata in stored:
        want = wanted.get(source)
        if want is None or (document_id, content_hash, source_class, extractor) != want[:4]:
            continue
        try:
            stored_fields = json.loads(metadata) if isinstance(metadata, str) else metadata
        except ValueError:
            continue  # damaged: written again
        # Compared as canonical JSON text, not with ``==``: that takes ``1``, ``True``
        # and ``1.0`` for one value, so a field changed from 1 to true was kept as 1.
        if same_metadata(stored_fields, json.loads(metadata_json(want[4]))):
            same.add(source)
    return same


def same_metadata(a: Any, b: Any) -> bool:
    """Whether two metadata values read from JSON are the same JSON, types included:
    ``1``, ``True`` and ``1.0`` are three values here, one to Python's ``==``."""
    try:
        return json.dumps(a, sort_keys=True, default=str) == json.dumps(
            b, sort_keys=True, default=str
        )
    except (TypeError, ValueError):  # keys that cannot be sorted, a huge int
        return False


def plan_versions(
    items: WriteItems, existing: Sequence[Sequence[Any]], start: float
) -> VersionPlan:
    """Plan a write from the stored ``(id, source, version, valid_from)`` rows of its
    sources; ``IngestionError`` when a new version would start before the current one."""
    by_source = {document.source: document for document, _, _ in items}
    next_version: dict[str, int] = {}
    foreign: list[str] = []
    for document_id, source, version, valid_from in existing:
        where = f"document row {document_id!r}"
        if document_id != by_source[source].document_id:
            foreign.append(document_id)
            continue
        current_start = _seconds(valid_from, "start of validity", where)
        if start < current_start:
            raise IngestionError(
                f"{source!r}: the new version would be valid from {iso_time(start)}, "
                f"before its current version ({iso_time(current_start)}); versions of a "
                "document follow each other in time"
            )
        next_version[document_id] = int_value(version, "version", where, minimum=1) + 1
    return VersionPlan(next_version, foreign)


def damaged(where: str, what: str) -> StorageError:
    """The error for a value in a store row that is not what groundkit wrote.

    It names the row and the field, never the value: a damaged value may be a
    fragment of someone's document.
    """
    return StorageError(
        f"{where}: damaged {what}; restore the metadata store from a backup, "
        "or ingest the collection again into a new index directory"
    )


def int_value(value: Any, what: str, where: str, *, minimum: int = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise damaged(where, what)
    return value


def _text(value: Any, what: str, where: str, *, empty: bool = False) -> str:
    if not isinstance(value, str) or (not empty and not value):
        raise damaged(where, what)
    return value


text_value = _text


def live_count(value: Any) -> int | None:
    """The store's count of current chunks, or None when it holds no usable one (the
    index is then not checked against it: the count is a guard, not data)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        return None
    return value


def _seconds(value: Any, what: str, where: str, *, missing: float | None = None) -> float:
    """A stored moment (seconds since the epoch); ``missing`` stands for NULL."""
    if value is None and missing is not None:
        return missing
    if isinstance(value, bool) or not isinstance(value, int | float) or math.isnan(value):
        raise damaged(where, what)
    return float(value)


def generations_row(row: Sequence[Any] | None, where: str) -> Generations:
    if row is None or len(row) != 2:
        raise damaged(where, "collection state")
    return Generations(
        int_value(row[0], "generation", where), int_value(row[1], "vectors generation", where)
    )


def optional_text(value: Any, what: str, where: str) -> str | None:
    if value is None:
        return None
    return _text(value, what, where)


def manifest_value(raw: Any, where: str) -> CollectionManifest | None:
    """The stored embedding manifest (JSON), checked."""
    if raw is None or raw == "":
        return None
    if not isinstance(raw, str):
        raise damaged(where, "embedding manifest")
    try:
        return CollectionManifest.model_validate_json(raw)
    except InvalidQueryError:
        raise damaged(where, "embedding manifest") from None


def prefix_range(under: str) -> tuple[str, str]:
    """The open byte-order range of sources beneath the folder ``under``: after
    ``under/`` and before ``under0`` (``0`` is the character right after ``/``)."""
    return f"{under}/", f"{under}0"


def document_state(row: Sequence[Any]) -> DocumentState:
    """``(source, content_hash, source_class, extractor, metadata)`` as a ``DocumentState``."""
    where = f"document row for {row[0]!r}" if isinstance(row[0], str) else "a document row"
    _text(row[0], "source", where)
    source_class, extractor = _source_class(row[2], row[3], where)
    return DocumentState(
        _text(row[1], "content hash", where), source_class, extractor, parse_metadata(row[4], where)
    )


def _loads(raw: str) -> Any:
    """JSON text as ``json.loads`` reads it, parsed by pydantic-core's parser first: every
    hit row's metadata is parsed, and it takes half the time. What that parser refuses
    and ``json.loads`` takes (a lone surrogate, escaped or not; nesting deeper than its limit)
    goes to ``json.loads``, so a value reads the same either way."""
    try:
        return pydantic_core.from_json(raw)
    except (ValueError, TypeError):  # TypeError: a raw lone surrogate in the text
        return json.loads(raw)


def parse_metadata(raw: Any, where: str = "a document row", *, gaps: bool = True) -> dict[str, Any]:
    """A document's metadata as stored (a JSON object), checked: ``StorageError`` otherwise.
    ``gaps=False``: the chunk gaps left out, unchecked (a search's hits do not use them)."""
    if raw == "{}":
        return {}
    if not isinstance(raw, str):
        raise damaged(where, "metadata")
    try:
        value = _loads(raw)
    except (ValueError, RecursionError):
        raise damaged(where, "metadata") from None
    if not isinstance(value, dict):
        raise damaged(where, "metadata")
    if not gaps:
        value.pop(GAPS_KEY, None)
    check_fields_value(value.get(FIELDS_KEY, {}), where)
    starts = value.get(PAGE_STARTS_KEY)
    if starts is not None and not valid_page_starts(starts):
        raise damaged(where, "page offsets")
    geometry = value.get(GEOMETRY_KEY)
    if geometry is not None and not check_geometry(
        geometry, len(starts) if isinstance(starts, list) else -1
    ):
        raise damaged(where, "geometry")
    stored_gaps = value.get(GAPS_KEY)
    if stored_gaps is not None and not _valid_gaps(stored_gaps):
        raise damaged(where, "chunk gaps")
    outline = value.get(HEADINGS_KEY)
    if outline is not None and not valid_outline(outline):
        raise damaged(where, "headings")
    return value


def _valid_gaps(gaps: Any) -> bool:
    """``{chunk index: whitespace}``; checked on every row read, so in bulk: JSON keys
    are strings, and joining the values fails unless every one is a string."""
    if not isinstance(gaps, dict):
        return False
    try:
        return all(map(str.isdigit, gaps)) and not "".join(gaps.values()).strip()
    except TypeError:
        return False


def check_fields_value(fields: Any, where: str) -> dict[str, FieldValue]:
    """Stored fields must be what the ingest checks let through: names to scalars or
    lists of scalars. Anything else would make filters fail in odd ways."""
    if not isinstance(fields, dict):
        raise damaged(where, "fields")
    for name, value in fields.items():
        if not isinstance(name, str) or not FIELD_NAME_PATTERN.fullmatch(name):
            raise damaged(where, "fields")
        items = value if isinstance(value, list) else [value]
        if not all(isinstance(v, str | int | float) for v in items):  # bool is an int
            raise damaged(where, "fields")
    return fields


def _source_class(value: Any, extractor: Any, where: str) -> tuple[SourceClass, str | None]:
    if value not in _SOURCE_CLASSES:
        raise damaged(where, "source class")
    if extractor is not None and not isinstance(extractor, str):
        raise damaged(where, "extractor")
    if (value == "extracted") != (extractor is not None):
        raise damaged(where, "extractor")
    return value, extractor


def document_record(
    row: Sequence[Any], chunk_count: int = 0, version: Any = 1, past_versions: Any = 0
) -> DocumentRecord:
    where = f"document row {row[0]!r}" if isinstance(row[0], str) else "a document row"
    source_class, extractor = _source_class(row[4], row[5], where)
    try:
        return DocumentRecord(
            document_id=_text(row[0], "id", where),
            source=_text(row[1], "source", where),
            content_hash=_text(row[2], "content hash", where),
            ingested_at=_text(row[3], "ingest time", where),
            source_class=source_class,
            extractor=extractor,
            metadata=parse_metadata(row[6], where),
            chunk_count=int_value(chunk_count, "chunk count", where),
            version=int_value(version, "version", where, minimum=1),
            past_versions=int_value(past_versions, "version count", where),
        )
    except InvalidQueryError:  # a damaged row, not a caller's argument
        raise damaged(where, "document fields") from None


def stored_chunk(row: Sequence[Any], *, gaps: bool = True) -> StoredChunk:
    """A chunk row joined to its document, every value checked.

    ``content[start:end]`` consistency is what every citation rests on, so a row
    whose offsets cannot describe its content is refused here, not later. Rows are
    checked in one expression first (a search joins ten of them, and the checks
    one by one cost as much as the scoring); a row failing it goes through the
    checks one by one, which name what is damaged. ``gaps=False``: the document's
    chunk gaps left out of the metadata, as a search holds its hits.
    """
    values: Sequence[Any] = row if len(row) == 16 else (None,) * 16
    (key, cid, index, content, start, end, did, src, dhash, when, cls, ext, meta, ver, vf, vt) = (
        values
    )
    if (
        type(key) is int
        and key >= 1
        and type(cid) is str
        and cid
        and type(index) is int
        and index >= 0
        and type(content) is str
        and content
        and type(start) is int
        and start >= 0
        and type(end) is int
        and end - start == len(content)
        and type(did) is str
        and did
        and type(src) is str
        and src
        and type(dhash) is str
        and dhash
        and type(when) is str
        and when
        and cls in _SOURCE_CLASSES
        and (ext is None if cls != "extracted" else type(ext) is str)
        and type(ver) is int
        and ver >= 1
        and type(vf) in (float, int)
        and vf == vf
        and (vt is None or (type(vt) in (float, int) and vt == vt))
        and (meta == "{}" or type(meta) is str)
    ):
        try:
            metadata = _document_metadata(did, dhash, ver, meta, gaps)
        except StorageError:
            metadata = None
        if metadata is not None:
            chunk = StoredChunk.__new__(StoredChunk)
            values = (key, cid, index, content, start, end, did, src, dhash, when, cls)
            rest = (ext, metadata, ver, float(vf), None if vt is None else float(vt))
            for put, value in zip(_SETTERS, (*values, *rest), strict=True):
                put(chunk, value)
            return chunk
    checked = _stored_chunk_checked(row)
    return checked if gaps else checked.without_gaps()


def never_written(generation: Any, manifest: Any) -> bool:
    """Whether a collection's ``state`` says no document was ever written: the
    generation counts every write, and binding the embedder (a dense first ingest)
    is the one write that stores none. A value that is not a count says written."""
    if type(generation) is not int:
        return False
    return generation <= (0 if manifest is None else 1)


def stored_hit(row: Sequence[Any]) -> StoredChunk:
    """A search's hit row: ``stored_chunk`` without the document's chunk gaps."""
    return stored_chunk(row, gaps=False)


# Where a chunk row holds its document's metadata (``stored_chunk``'s column order).
_METADATA_AT = 12


# Metadata this long (about 20 pages of a PDF's geometry) is worth reading once per
# document version in a statement rather than once per hit (``has_long_metadata``).
LONG_METADATA_CHARS = 1 << 16


def has_long_metadata(rows: Sequence[Any]) -> bool:
    """Whether a hit row of ``rows`` carries metadata of ``LONG_METADATA_CHARS`` or more."""
    for row in rows:
        meta = row[_METADATA_AT]
        if type(meta) is str and len(meta) >= LONG_METADATA_CHARS:
            return True
    return False


def share_metadata(rows: Sequence[Any]) -> list[Any]:
    """Hit rows with their document version's metadata filled in where the statement
    read it with one of them only and NULL with the others (a long PDF's metadata,
    its geometry, is read once per search, not once per hit)."""
    if all(row[_METADATA_AT] is not None for row in rows):
        return list(rows)
    read = {(row[6], row[13]): row[_METADATA_AT] for row in rows if row[_METADATA_AT] is not None}
    at = _METADATA_AT
    out: list[Any] = []
    for row in rows:
        if row[at] is None:
            values = tuple(row)
            row = (*values[:at], read.get((values[6], values[13])), *values[at + 1 :])
        out.append(row)
    return out


class MetadataCarry:
    """Fills in a scan's chunk rows whose document metadata the statement read with the
    first chunk of each document version only (NULL with the rest).

    A scan in (source, chunk index) order meets a document's chunks one after the
    other, its lowest chunk index first, so the metadata read there is carried to the
    rest: the statement's sort then holds each document's metadata once, not once per
    chunk (a long PDF's geometry, or a file of many headings, once per chunk came to
    gigabytes of temporary file)."""

    def __init__(self) -> None:
        self._owner: tuple[Any, Any] | None = None
        self._metadata: Any = None

    def fill(self, rows: Iterable[Any]) -> list[Any]:
        at = _METADATA_AT
        out: list[Any] = []
        for row in rows:
            owner = (row[6], row[13])
            if row[at] is not None:
                self._owner, self._metadata = owner, row[at]
            elif owner == self._owner:
                values = tuple(row)
                row = (*values[:at], self._metadata, *values[at + 1 :])
            out.append(row)
        return out


# A PDF's metadata holds its geometry (kilobytes per page), and every chunk row of the
# document carries it: parsed once per document version here, not once per row. A hit
# must hold the very same text (compared, not hashed: equal strings compare at memory
# speed); it gives a copy of the top level, so a caller's edit stays its own. A search's
# hits (``gaps=False``) have entries of their own: their metadata leaves the gaps out.
_MEMO_MIN_CHARS = 8192
_MEMO_DOCUMENTS = 32
_metadata_memo: dict[tuple[str, str, int, bool], tuple[str, dict[str, Any]]] = {}


def _document_metadata(
    did: str, dhash: str, version: int, raw: str, gaps: bool = True
) -> dict[str, Any]:
    if len(raw) < _MEMO_MIN_CHARS:
        return parse_metadata(raw, gaps=gaps)
    key = (did, dhash, version, gaps)
    hit = _metadata_memo.get(key)
    if hit is not None and hit[0] == raw:
        return dict(hit[1])
    parsed = parse_metadata(raw, gaps=gaps)
    if len(_metadata_memo) >= _MEMO_DOCUMENTS:
        _metadata_memo.pop(next(iter(_metadata_memo)), None)
    _metadata_memo[key] = (raw, parsed)
    return dict(parsed)


# ``StoredChunk`` is a frozen dataclass: its ``__init__`` sets each of its sixteen
# fields through ``object.__setattr__``, which cost twice what the checks above do.
# Rows that passed them are built by setting the slots directly, in field order
# (``strict`` zip: a field added to StoredChunk must be given above too; a test pins
# equality with the constructor; StoredChunk has no ``__post_init__``).
_SETTERS = tuple(getattr(StoredChunk, f.name).__set__ for f in dataclasses.fields(StoredChunk))


def _stored_chunk_checked(row: Sequence[Any]) -> StoredChunk:
    key = row[0]
    where = f"chunk row {key}" if type(key) is int else "a chunk row"
    int_value(key, "key", where, minimum=1)
    content = _text(row[3], "text", where)
    start = int_value(row[4], "start offset", where)
    end = int_value(row[5], "end offset", where)
    if end - start != len(content):
        raise damaged(where, "offsets")
    source_class, extractor = _source_class(row[10], row[11], where)
    return StoredChunk(
        key=key,
        chunk_id=_text(row[1], "chunk id", where),
        chunk_index=int_value(row[2], "chunk index", where),
        content=content,
        start_offset=start,
        end_offset=end,
        document_id=_text(row[6], "document id", where),
        source=_text(row[7], "source", where),
        document_hash=_text(row[8], "document hash", where),
        ingested_at=_text(row[9], "ingest time", where),
        source_class=source_class,
        extractor=extractor,
        metadata=parse_metadata(row[12], where),
        version=int_value(row[13], "version", where, minimum=1),
        valid_from=_seconds(row[14], "start of validity", where),
        valid_to=None if row[15] is None else _seconds(row[15], "end of validity", where),
    )


def term_counts(items: WriteItems) -> tuple[list[str], list[list[Counter[str]]]]:
    """The sources of a ``replace_documents`` batch and each chunk's term counts.

    Checked before any transaction opens, so a malformed batch writes nothing.
    """
    sources = [document.source for document, _, _ in items]
    if len(set(sources)) != len(sources):
        raise ValueError("a source appears twice in one replace_documents call")
    counts: list[list[Counter[str]]] = []
    for _, chunks, chunk_terms in items:
        if len(chunks) != len(chunk_terms):
            raise ValueError("one term list per chunk is required")
        counts.append([Counter(terms) for terms in chunk_terms])
    return sources, counts


def document_rows(items: WriteItems, stamp: str | None = None) -> list[tuple[Any, ...]]:
    """``documents`` rows in column order ``id, source, content_hash, ingested_at,
    source_class, extractor, metadata``; one timestamp (``stamp``, default now)
    for the whole batch."""
    now = stamp or now_iso()
    return [
        (
            document.document_id,
            document.source,
            document.content_hash,
            now,
            document.source_class,
            document.extractor,
            metadata_json(document.metadata),
        )
        for document, _, _ in items
    ]


def chunk_rows(
    items: WriteItems, counts: list[list[Counter[str]]], vocab: dict[str, int]
) -> list[tuple[Any, ...]]:
    """Every ``chunks`` row of a batch (see ``_chunk_row``)."""
    return [
        _chunk_row(document.document_id, chunk, counter, vocab)
        for (document, chunks, _), group in zip(items, counts, strict=True)
        for chunk, counter in zip(chunks, group, strict=True)
    ]


def _chunk_row(
    document_id: str, chunk: Chunk, counter: Counter[str], vocab: dict[str, int]
) -> tuple[Any, ...]:
    """A ``chunks`` row: term ids as a little-endian int32 blob, frequencies as
    ``term_blobs`` encodes them."""
    items = sorted((vocab[t], n) for t, n in counter.items())
    ids, tfs = term_blobs([i for i, _ in items], [n for _, n in items])
    return (
        chunk.chunk_id,
        document_id,
        chunk.chunk_index,
        chunk.content,
        chunk.start_offset,
        chunk.end_offset,
        chunk.content_hash,
        ids,
        tfs,
    )


def term_blobs(term_ids: Sequence[int], tfs: Sequence[int]) -> tuple[bytes, bytes]:
    """A chunk's term statistics as stored: ids as little-endian int32; frequencies one
    byte each when all are below 256 (nearly every chunk), else little-endian int32.
    The width is told by the blob lengths (one byte or four per id), so rows written
    with four-byte frequencies read unchanged."""
    ids = np.asarray(term_ids, dtype="<i4")
    if not tfs or max(tfs) <= 0xFF:
        return ids.tobytes(), bytes(tfs)
    return ids.tobytes(), np.asarray(tfs, dtype="<i4").tobytes()


def postings_from_blobs(
    keys: Sequence[int], id_blobs: Sequence[bytes], tf_blobs: Sequence[bytes]
) -> ChunkPostings:
    """One ``ChunkPostings`` from each chunk's term-id and frequency blobs (``term_blobs``).

    Checked as a whole (vectorised): blob lengths, ids >= 0, frequencies >= 1,
    so a damaged blob is a ``StorageError`` naming its chunk, never a numpy error.
    """
    n = len(keys)
    if not all(isinstance(b, bytes | bytearray | memoryview) for b in (*id_blobs, *tf_blobs)):
        raise damaged("a chunk row", "term statistics")
    id_sizes = np.fromiter((len(b) for b in id_blobs), dtype=np.int64, count=n)
    tf_sizes = np.fromiter((len(b) for b in tf_blobs), dtype=np.int64, count=n)
    counts = id_sizes // 4
    narrow = tf_sizes == counts
    bad = np.flatnonzero((id_sizes % 4 != 0) | ~(narrow | (tf_sizes == id_sizes)))
    if bad.size:
        raise damaged(f"chunk row {keys[int(bad[0])]}", "term statistics")
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(counts, out=offsets[1:])
    term_ids = np.frombuffer(b"".join(id_blobs), dtype="<i4").astype(np.int32)
    tfs = _frequencies(b"".join(tf_blobs), narrow, counts, tf_sizes)
    wrong = (term_ids < 0) | (tfs < 1)
    if wrong.any():
        entry = int(np.argmax(wrong))
        row = int(np.searchsorted(offsets, entry, side="right")) - 1
        raise damaged(f"chunk row {keys[row]}", "term statistics")
    return ChunkPostings(
        keys=np.asarray(keys, dtype=np.int64), offsets=offsets, term_ids=term_ids, tfs=tfs
    )


def _frequencies(
    blob: bytes,
    narrow: npt.NDArray[np.bool_],
    counts: npt.NDArray[np.int64],
    sizes: npt.NDArray[np.int64],
) -> npt.NDArray[np.int32]:
    """Every row's frequencies from the joined blobs, one byte or four each by row."""
    raw = np.frombuffer(blob, dtype=np.uint8)
    if bool(narrow.all()):
        return raw.astype(np.int32)
    if not bool(narrow.any()):
        return np.frombuffer(blob, dtype="<i4").astype(np.int32)
    # Mixed widths: posting i of row r starts at byte start[r] + width[r] * i.
    width = np.where(narrow, 1, 4)
    starts = np.zeros(counts.shape[0], dtype=np.int64)
    np.cumsum(sizes[:-1], out=starts[1:])
    first = np.zeros(counts.shape[0], dtype=np.int64)
    np.cumsum(counts[:-1], out=first[1:])
    row = np.repeat(np.arange(counts.shape[0]), counts)
    at = starts[row] + width[row] * (np.arange(int(counts.sum())) - first[row])
    low: npt.NDArray[np.int32] = raw[at].astype(np.int32)
    wide = ~narrow[row]
    if wide.any():
        byte = at[wide]
        low[wide] = np.frombuffer(
            raw[np.stack([byte, byte + 1, byte + 2, byte + 3], axis=1)].tobytes(), dtype="<i4"
        )
    return low


def postings_from_rows(rows: Sequence[Sequence[Any]]) -> ChunkPostings:
    """``ChunkPostings`` with tie keys and validity from rows of ``key, term_ids, tfs,
    content_hash, chunk_index, document_id, valid_from, valid_to`` (NULL: current).

    Converted column by column (a million rows in about a second); anything that
    does not convert is looked for row by row, so the error names its chunk.
    """
    base = postings_from_blobs([r[0] for r in rows], [r[1] for r in rows], [r[2] for r in rows])
    try:
        order, valid_from, valid_to = _tie_columns(rows)
    except (ValueError, TypeError, AttributeError, OverflowError):
        order, valid_from, valid_to = _tie_columns_checked(rows)
    return ChunkPostings(
        keys=base.keys,
        offsets=base.offsets,
        term_ids=base.term_ids,
        tfs=base.tfs,
        order=order,
        valid_from=valid_from,
        valid_to=valid_to,
    )


_Ties = tuple[npt.NDArray[np.uint64], npt.NDArray[np.float64], npt.NDArray[np.float64]]


def _tie_columns(rows: Sequence[Sequence[Any]]) -> _Ties:
    n = len(rows)
    hashes = [r[3] for r in rows]
    if not all(type(h) is str and len(h) >= 16 for h in hashes):
        raise ValueError("content hash")
    order = np.empty((n, 3), dtype=np.uint64)
    order[:, 0] = np.frombuffer(bytes.fromhex("".join(h[:16] for h in hashes)), dtype=">u8")
    indexes = np.fromiter((r[4] for r in rows), dtype=np.int64, count=n)
    if n and (int(indexes.min()) < 0 or not all(type(r[4]) is int for r in rows)):
        raise ValueError("chunk index")
    order[:, 1] = indexes.astype(np.uint64)
    prefixes = b"".join(r[5].encode("utf-8")[:8].ljust(8, b"\0") for r in rows)
    if not all(type(r[5]) is str and r[5] for r in rows):
        raise ValueError("document id")
    order[:, 2] = np.frombuffer(prefixes, dtype=">u8")
    valid_from = np.asarray([r[6] for r in rows], dtype=np.float64)
    valid_to = np.asarray([math.inf if r[7] is None else r[7] for r in rows], dtype=np.float64)
    if np.isnan(valid_from).any() or np.isnan(valid_to).any():
        raise ValueError("validity")
    if not all(type(r[6]) in (int, float) for r in rows):
        raise ValueError("validity")
    return order, valid_from, valid_to


def _tie_columns_checked(rows: Sequence[Sequence[Any]]) -> _Ties:
    """``_tie_columns`` one row at a time, raising ``damaged`` for the first bad row."""
    order = np.zeros((len(rows), 3), dtype=np.uint64)
    valid_from = np.zeros(len(rows), dtype=np.float64)
    valid_to = np.zeros(len(rows), dtype=np.float64)
    for i, row in enumerate(rows):
        where = f"chunk row {row[0]}"
        content_hash = _text(row[3], "content hash", where)
        document_id = _text(row[5], "document id", where)
        try:
            order[i] = order_key(content_hash, int_value(row[4], "chunk index", where), document_id)
        except ValueError:  # not hex
            raise damaged(where, "content hash") from None
        valid_from[i] = _seconds(row[6], "start of validity", where)
        valid_to[i] = _seconds(row[7], "end of validity", where, missing=math.inf)
    return order, valid_from, valid_to


def change_log(rows: Sequence[Sequence[Any]], *, complete: bool) -> ChangeLog:
    """A ``ChangeLog`` from rows of ``key, valid_to, term_ids, tfs`` in log order."""
    postings = postings_from_blobs([r[0] for r in rows], [r[2] for r in rows], [r[3] for r in rows])
    valid_to = np.fromiter(
        (_seconds(r[1], "change-log time", f"change of chunk {r[0]}") for r in rows),
        dtype=np.float64,
        count=len(rows),
    )
    entry_of = np.repeat(np.arange(len(rows)), np.diff(postings.offsets))
    lengths = np.bincount(entry_of, weights=postings.tfs, minlength=len(rows)).astype(np.int64)
    return ChangeLog(
        complete=complete,
        keys=postings.keys,
        valid_to=valid_to,
        offsets=postings.offsets,
        term_ids=postings.term_ids,
        lengths=lengths,
    )


def check_storable(items: WriteItems, *, nul_allowed: bool) -> None:
    """Refuse, before any transaction, text in a batch the store cannot hold.

    Every string of a row must encode as UTF-8 (no lone surrogates), and where
    ``nul_allowed`` is false (PostgreSQL text) hold no NUL character. The
    ``StorageError`` names the document's source and the chunk index; a driver
    error at that point would have quoted the offending text itself.
    """
    for document, chunks, chunk_terms in items:
        fields = [("its source", document.source), ("its document id", document.document_id)]
        if document.extractor is not None:
            fields.append(("its extractor", document.extractor))
        for chunk, terms in zip(chunks, chunk_terms, strict=True):
            index = chunk.chunk_index
            fields.append((f"the id of chunk {index}", chunk.chunk_id))
            fields.append((f"chunk {index}", chunk.content))
            if _unstorable("".join(terms), "", nul_allowed) is not None:
                # Rare: find the term at fault, so the position given is within it.
                fields.extend((f"a term of chunk {index}", term) for term in terms)
        for what, text in fields:
            problem = _unstorable(text, what, nul_allowed)
            if problem is not None:
                raise StorageError(f"could not store {document.source!r}: {problem}")


def _unstorable(text: str, what: str, nul_allowed: bool) -> str | None:
    if not nul_allowed and "\x00" in text:
        return (
            f"{what} holds a NUL character (at {text.index(chr(0))}), "
            "which PostgreSQL text cannot store"
        )
    return describe_unencodable(text, what)
