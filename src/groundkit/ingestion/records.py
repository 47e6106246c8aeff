"""In-memory documents ("records"): text given by the caller with its own id.

A record becomes a ``record`` document whose source is ``record://<id>`` and whose
text, like a URL snapshot's, is kept in the collection's snapshot store: the stored
record is what citations are verified against. Everything about a batch is checked
before anything is written, so bad input never leaves part of a batch behind.

Id rules (adr/0036-in-memory-records.md): 1 to 256 characters, no control
characters, no lone surrogates, no leading or trailing whitespace; compared
exactly (case and Unicode form included). The document id is derived from the
source, so any valid id is safe as a snapshot name and in a vector-store filter.

Besides ``Record`` and mappings, a batch may hold plain strings and the documents
of LangChain, LlamaIndex and Haystack (adr/0070-framework-documents-and-progress.md).
Those are recognised by the module and name of a class in their type's MRO, so no
framework is imported to check an item. An item without an id of its own gets
``text-`` and the first 32 hex digits of the SHA-256 of its UTF-8 text: the same
text always gets the same id, so adding it again changes nothing.
"""

from __future__ import annotations

import hashlib
import os
import unicodedata
from collections.abc import Iterable, Mapping, Sequence
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
    "derived_id",
    "record_documents",
    "record_sources",
]

MAX_RECORD_ID_CHARS = 256
# What add_documents takes: a Record, a mapping with its keys, a text, or a framework
# document (typed Any: the frameworks are optional and never imported to check one).
RecordInput = Record | Mapping[str, Any] | str | Any
# Framework document classes by (module, qualified name), found in an item's MRO so a
# subclass is recognised too; the value names the framework in messages.
_FRAMEWORK_CLASSES = {
    ("langchain_core.documents.base", "Document"): "LangChain",
    ("llama_index.core.schema", "TextNode"): "LlamaIndex",
    ("llama_index.core.schema", "Document"): "LlamaIndex",
    ("haystack.dataclasses.document", "Document"): "Haystack",
}
_ACCEPTED = (
    "a str, a groundkit.Record, a mapping with id and text, or a LangChain Document, "
    "LlamaIndex Document/TextNode or Haystack Document"
)
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


def derived_id(text: str) -> str:
    """The id of a text given without one: ``text-`` and 32 hex digits of its SHA-256."""
    digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()
    return "text-" + digest[:32]


def _framework_of(item: object) -> str | None:
    for klass in type(item).__mro__:
        name = _FRAMEWORK_CLASSES.get((klass.__module__, klass.__qualname__))
        if name is not None:
            return name
    return None


def _text_of(text: object, where: str) -> str:
    if not isinstance(text, str):
        raise IngestionError(
            f"{where}: its text is {type(text).__name__}, not str; only text documents can be added"
        )
    return text


def _framework_record(item: Any, framework: str, where: str) -> Record:
    """A ``Record`` from a framework document: its id (derived when it has none), its
    text, and its metadata as fields."""
    if framework == "LangChain":
        text, metadata, own_id = item.page_content, item.metadata, item.id
    elif framework == "LlamaIndex":
        from llama_index.core.schema import MetadataMode  # extra: llama-index

        text = item.get_content(metadata_mode=MetadataMode.NONE)
        metadata, own_id = item.metadata, item.node_id
    else:
        text, metadata, own_id = item.content, item.meta, item.id
    text = _text_of(text, f"{where} ({framework} document)")
    record_id = own_id if isinstance(own_id, str) and own_id else derived_id(text)
    if not isinstance(metadata, Mapping):
        metadata = {}
    try:
        check_fields(dict(metadata), "its metadata")
        return Record(id=record_id, text=text, fields=dict(metadata))
    except IngestionError as exc:
        raise IngestionError(
            f"{where} ({framework} document): {exc}; to keep only some metadata keys, "
            f"convert with groundkit.integrations.{_MODULES[framework]}."
            f"{_CONVERTERS[framework]}(..., fields=[...])"
        ) from None


_MODULES = {"LangChain": "langchain", "LlamaIndex": "llama_index", "Haystack": "haystack"}
_CONVERTERS = {
    "LangChain": "records_from_documents",
    "LlamaIndex": "records_from_nodes",
    "Haystack": "records_from_documents",
}


def _type_name(item: object) -> str:
    kind = type(item)
    return (
        kind.__qualname__
        if kind.__module__ == "builtins"
        else f"{kind.__module__}.{kind.__qualname__}"
    )


def _near_miss(item: object) -> str:
    """What to do with an item that is not accepted, when it is close to something that is."""
    module = type(item).__module__.split(".")[0]
    name = type(item).__name__
    if isinstance(item, bytes | bytearray):
        return "; decode bytes to str first"
    if isinstance(item, os.PathLike):
        return "; to add a file, use Collection.ingest(path)"
    if name == "NodeWithScore":
        return "; pass its .node"
    if module in ("langchain", "langchain_core", "langchain_community"):
        return "; convert it to a langchain_core Document first"
    if module == "llama_index":
        return "; only text nodes can be added (a LlamaIndex Document or TextNode)"
    if module == "haystack":
        return "; convert it to a Haystack Document first (a Haystack converter does that)"
    return ""


def _as_record(item: object, name: str) -> Record:
    if isinstance(item, Record):
        return item
    if isinstance(item, str):
        return Record(id=derived_id(item), text=item)
    if isinstance(item, Mapping):
        unknown = sorted(str(k) for k in item if k not in ("id", "text", "fields"))
        if unknown:
            raise IngestionError(
                f"{name}: unknown key(s) {', '.join(unknown)}; a record has id, text and fields"
            )
        try:
            return Record(**{str(k): v for k, v in item.items()})
        except IngestionError as exc:
            raise IngestionError(f"{name}: {exc}") from None
    framework = _framework_of(item)
    if framework is not None:
        return _framework_record(item, framework, name)
    raise IngestionError(f"{name}: expected {_ACCEPTED}, not {_type_name(item)}{_near_miss(item)}")


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
    records: Iterable[RecordInput],
    fields: Mapping[str, FieldValue] | None = None,
    *,
    names: Sequence[str] | None = None,
) -> list[Document]:
    """Every record as a ``Document``, all checked first.

    ``fields`` (already checked) apply to every record, over its own. Raises one
    ``IngestionError`` naming up to five problems (by position and id) and how many
    there were; an id given twice is a problem too, unless both items are the same
    text under its derived id (the second is then dropped). ``names`` says what to
    call each item in those problems (``record 0`` ...), so a caller that read the
    records from lines of a file can name the lines.
    """
    single = isinstance(records, str | bytes | Mapping | Record) or _framework_of(records)
    if single or not isinstance(records, Iterable):
        raise InvalidInputError(
            "add_documents takes an iterable of records, texts or documents (a list), not "
            + ("None" if records is None else f"a single {type(records).__name__}")
            + ("; wrap it in a list: [item]" if single else "")
        )
    documents: list[Document] = []
    problems: list[str] = []
    seen: dict[str, int] = {}
    kept: dict[int, int] = {}  # position in the batch -> position in documents

    def name_of(index: int) -> str:
        return names[index] if names is not None and index < len(names) else f"record {index}"

    for index, item in enumerate(records):
        try:
            record = _as_record(item, name_of(index))
            where = f"{name_of(index)} ({record.id!r})" if isinstance(record.id, str) else ""
            document = _document(record, where or name_of(index), fields or {})
        except IngestionError as exc:
            problems.append(str(exc))
            continue
        first = seen.setdefault(record.id, index)
        repeated = first != index and record.id == derived_id(record.text)
        if repeated and documents[kept[first]] == document:
            continue  # the same text twice: stored once
        if first != index:
            problems.append(f"{name_of(index)}: id {record.id!r} is also given by {name_of(first)}")
            continue
        kept[index] = len(documents)
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
