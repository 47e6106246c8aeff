"""In-memory documents ("records"): text given by the caller with its own id.

A record becomes a ``record`` document whose source is ``record://<id>`` and whose
text, like a URL snapshot's, is kept in the collection's snapshot store: the stored
record is what citations are verified against. Everything about a batch is checked
before anything is written, so bad input never leaves part of a batch behind.

Id rules (adr/0036-in-memory-records.md): 1 to 256 characters, no control
characters, no lone surrogates, no leading or trailing whitespace; compared
exactly (case and Unicode form included). The document id is derived from the
source, so any valid id is safe as a snapshot name and in a vector-store filter.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Iterable, Mapping
from typing import Any

from groundkit.contracts import (
    FIELDS_KEY,
    RECORD_SOURCE_PREFIX,
    Document,
    FieldValue,
    Record,
    record_source,
)
from groundkit.errors import IngestionError, InvalidInputError
from groundkit.ingestion.fields import check_fields
from groundkit.storage.names import document_id_for
from groundkit.utils.text import describe_unencodable

__all__ = [
    "MAX_RECORD_ID_CHARS",
    "RecordInput",
    "check_record_id",
    "record_documents",
    "record_sources",
]

MAX_RECORD_ID_CHARS = 256
# What add_documents takes: a Record, or a mapping with its keys.
RecordInput = Record | Mapping[str, Any]
# Problems named in one error before the rest are counted.
_SHOWN_PROBLEMS = 5


def check_record_id(record_id: object, where: str = "record") -> str:
    """``record_id`` if it may name a record; ``IngestionError`` saying why not."""
    if not isinstance(record_id, str):
        raise InvalidInputError(f"{where}: the id must be a str, not {type(record_id).__name__}")
    if not record_id:
        raise InvalidInputError(f"{where}: the id is empty")
    if len(record_id) > MAX_RECORD_ID_CHARS:
        raise InvalidInputError(
            f"{where}: the id is {len(record_id)} characters; at most {MAX_RECORD_ID_CHARS}"
        )
    problem = describe_unencodable(record_id, f"{where}: the id")
    if problem is not None:
        raise InvalidInputError(problem)
    if record_id != record_id.strip():
        raise InvalidInputError(f"{where}: the id {record_id!r} starts or ends with whitespace")
    for index, char in enumerate(record_id):
        if unicodedata.category(char) == "Cc":
            raise InvalidInputError(
                f"{where}: the id holds a control character (U+{ord(char):04X}) at {index}"
            )
    return record_id


def _as_record(item: object, index: int) -> Record:
    if isinstance(item, Record):
        return item
    if isinstance(item, Mapping):
        unknown = sorted(str(k) for k in item if k not in ("id", "text", "fields"))
        if unknown:
            raise IngestionError(
                f"record {index}: unknown key(s) {', '.join(unknown)}; a record has id, "
                "text and fields"
            )
        try:
            return Record(**{str(k): v for k, v in item.items()})
        except IngestionError as exc:
            raise IngestionError(f"record {index}: {exc}") from None
    raise IngestionError(
        f"record {index}: expected a groundkit.Record or a mapping with id and text, "
        f"not {type(item).__name__}"
    )


def _document(record: Record, where: str, fields: Mapping[str, FieldValue]) -> Document:
    check_record_id(record.id, where)
    problem = describe_unencodable(record.text, f"{where}: its text")
    if problem is not None:
        raise IngestionError(problem)
    if not record.text.strip():
        raise IngestionError(f"{where}: no text to index")
    merged = check_fields({**record.fields, **fields}, where)
    source = record_source(record.id)
    return Document(
        document_id=document_id_for(source),
        source=source,
        content=record.text,
        source_class="record",
        metadata={FIELDS_KEY: merged} if merged else {},
    )


def record_documents(
    records: Iterable[RecordInput], fields: Mapping[str, FieldValue] | None = None
) -> list[Document]:
    """Every record as a ``Document``, all checked first.

    ``fields`` (already checked) apply to every record, over its own. Raises one
    ``IngestionError`` naming up to five problems (by position and id) and how many
    there were; an id given twice is a problem too.
    """
    if isinstance(records, str | bytes | Mapping | Record) or not isinstance(records, Iterable):
        raise InvalidInputError(
            "add_documents takes an iterable of records (a list), not "
            + ("None" if records is None else f"a single {type(records).__name__}")
        )
    documents: list[Document] = []
    problems: list[str] = []
    seen: dict[str, int] = {}
    for index, item in enumerate(records):
        try:
            record = _as_record(item, index)
            where = f"record {index} ({record.id!r})" if isinstance(record.id, str) else ""
            document = _document(record, where or f"record {index}", fields or {})
        except IngestionError as exc:
            problems.append(str(exc))
            continue
        first = seen.setdefault(record.id, index)
        if first != index:
            problems.append(f"record {index}: id {record.id!r} is also given by record {first}")
            continue
        documents.append(document)
    if problems:
        shown = "; ".join(problems[:_SHOWN_PROBLEMS])
        more = len(problems) - _SHOWN_PROBLEMS
        tail = f" (and {more} more)" if more > 0 else ""
        raise InvalidInputError(
            f"{len(problems)} invalid record(s), nothing was stored: {shown}{tail}"
        )
    return documents


def record_sources(ids: Iterable[str]) -> list[str]:
    """The sources of records ``ids``, each id checked; ``IngestionError`` otherwise."""
    if isinstance(ids, str | bytes) or not isinstance(ids, Iterable):
        raise IngestionError(
            "delete_documents takes a list of ids, not "
            + ("None" if ids is None else f"a single {type(ids).__name__}")
        )
    sources: list[str] = []
    for index, record_id in enumerate(ids):
        sources.append(RECORD_SOURCE_PREFIX + check_record_id(record_id, f"id {index}"))
    return list(dict.fromkeys(sources))
