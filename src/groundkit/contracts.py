"""Frozen data contracts shared by every layer.

Models reject unknown fields and are immutable, so a value that passed
validation stays valid. Offsets are Python string indices (code points) into
the text the source class defines: the decoded file for ``text``, the
extractor's output for ``extracted``, the stored copy for ``snapshot``.
"""

from __future__ import annotations

import math
import re
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, replace
from typing import (
    TYPE_CHECKING,
    Any,
    ClassVar,
    Literal,
    Protocol,
    Self,
    TypeGuard,
    TypeVar,
    get_args,
    overload,
    runtime_checkable,
)

import numpy.typing as npt
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    GetCoreSchemaHandler,
    GetJsonSchemaHandler,
    SerializerFunctionWrapHandler,
    ValidationError,
    model_serializer,
    model_validator,
)
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import CoreSchema, PydanticSerializationError, core_schema

from groundkit.errors import (
    ConfigurationError,
    GroundkitError,
    InvalidInputError,
    InvalidQueryError,
    RetrievalError,
    StorageError,
)
from groundkit.utils.annotation import (
    QUOTE_CONTEXT_CHARS,
    page_link,
    text_fragment_link,
    web_annotation,
)
from groundkit.utils.geometry import DamagedGeometryError, PageFrame, page_frame, span_rects
from groundkit.utils.hashing import sha256_text
from groundkit.utils.text import describe_unencodable, first_unencodable

__all__ = [
    "ANSWER_PROBLEMS",
    "FIELDS_KEY",
    "FIELD_NAME_PATTERN",
    "GAPS_KEY",
    "GEOMETRY_KEY",
    "HEADINGS_KEY",
    "PAGE_STARTS_KEY",
    "PDF_EXTRACTOR_PREFIXES",
    "RECORD_SOURCE_PREFIX",
    "RESULT_CITATION_FIELDS",
    "SENSITIVITY_FIELD",
    "SENSITIVITY_LEVELS",
    "SOURCE_FIELD",
    "STORED_TEXT_CLASSES",
    "AnswerReport",
    "AnswerSentence",
    "AnswerVerdict",
    "CheckedPackStore",
    "Chunk",
    "Citation",
    "CollectionFailure",
    "CollectionManifest",
    "ContextKind",
    "ContextSpan",
    "DeleteReport",
    "Document",
    "DocumentRecord",
    "EmbeddingIdentity",
    "ErasureReport",
    "Evidence",
    "EvidenceMethod",
    "EvidenceSpan",
    "FetchResult",
    "FieldScalar",
    "FieldValue",
    "Highlights",
    "IngestFailure",
    "IngestProgress",
    "IngestReport",
    "IngestStage",
    "IngestWarning",
    "MultiSearchResponse",
    "OptimizeReport",
    "PackCheck",
    "PackStore",
    "PageRect",
    "ProviderCitation",
    "ProviderVerdict",
    "QuoteCheck",
    "QuoteVerdict",
    "ReadFrom",
    "Record",
    "RetrievalResult",
    "SearchMode",
    "SearchResponse",
    "SourceClass",
    "Verification",
    "checked_citation",
    "citation_for",
    "end_page_at",
    "fields_of",
    "fill_trusted",
    "heading_path_at",
    "metadata_without_gaps",
    "opening_heading",
    "page_at",
    "page_frame_at",
    "record_id_of",
    "record_source",
    "rects_at",
    "result_metadata",
    "trusted",
]

SourceClass = Literal["text", "extracted", "snapshot", "record"]
# Classes whose text is kept in the collection's snapshot store (URL snapshots and
# in-memory records): verified against that copy, never pruned by a folder scan.
STORED_TEXT_CLASSES: frozenset[str] = frozenset({"snapshot", "record"})
# The source of an in-memory record: this prefix and the caller's id. No path
# relative to a base directory can start with it ("//" never survives there).
RECORD_SOURCE_PREFIX = "record://"
SearchMode = Literal["bm25", "dense", "hybrid"]
EvidenceMethod = Literal["terms", "embedding", "hybrid"]
# ``moved``: the indexed text is intact, but elsewhere in the source now.
Verification = Literal["verified", "moved", "drifted", "unresolvable"]
# A quote check adds one outcome: the span is intact but does not hold the quote.
QuoteVerdict = Literal["verified", "moved", "not_in_span", "drifted", "unresolvable"]
# Where a verdict's source text was read: the file itself, the collection's kept copy
# of its text (the file is not on this host; ``IngestConfig.keep_sources``), or the
# snapshot store (URL snapshots and record texts).
ReadFrom = Literal["file", "kept copy", "snapshot"]
# What a provider's citation comes to, mapped back and checked (verification/providers.py).
ProviderVerdict = Literal["verified", "moved", "not_in_span", "drifted", "unresolvable", "unmapped"]
# What an answer check says of one sentence (groundkit/verification/answers.py).
AnswerVerdict = Literal[
    "quoted",
    "supported",
    "weak",
    "unsupported",
    "contradicted",
    "misquoted",
    "uncited",
    "dangling",
    "drifted",
    "unresolvable",
    "no_claim",
]
# The verdicts that make an answer fail a grounding check: all but these three, so a new
# verdict is a problem until it is said otherwise.
ANSWER_PROBLEMS: frozenset[str] = frozenset(get_args(AnswerVerdict)) - {
    "quoted",
    "supported",
    "no_claim",
}


# Document metadata key holding the offset where each page of the text begins
# (PDFs). Citations derive their 1-based page from it.
PAGE_STARTS_KEY = "page_starts"

# Document metadata key holding where each character of the text stands on its page
# (PDFs): per page its frame, per line the boxes of its characters, encoded compactly
# (groundkit/utils/geometry.py). Citations derive their rectangles from it.
GEOMETRY_KEY = "geometry"

# Document metadata key holding the document's outline: ``[offset, level, title]``
# per heading, in offset order, where ``offset`` is where the heading's line
# begins in the text and ``level`` is 1 (``#``, ``<h1>``) to 6. The chunker cuts
# there and a result's heading path is read from it (adr/0046-structure-chunking.md).
HEADINGS_KEY = "headings"


def valid_page_starts(starts: Any) -> TypeGuard[list[int]]:
    """Page offsets as the ingest writes them: non-negative ints in order."""
    return (
        isinstance(starts, list)
        and all(type(s) is int and s >= 0 for s in starts)
        and starts == sorted(starts)
    )


def valid_outline(outline: Any) -> TypeGuard[list[list[Any]]]:
    """``[[offset, level 1-6, title], ...]`` in offset order, as the ingest writes it."""
    if not isinstance(outline, list):
        return False
    last = -1
    for entry in outline:
        if not (isinstance(entry, list) and len(entry) == 3):
            return False
        start, level, title = entry
        if type(start) is not int or start < last or type(level) is not int:
            return False
        if not 1 <= level <= 6 or not isinstance(title, str):
            return False
        last = start
    return True


# Document metadata key holding what lies between consecutive disjoint chunks
# when it is not a single space (``{"<i>": text between chunk i and i + 1}``),
# so a context span can be rebuilt exactly from stored chunks.
GAPS_KEY = "chunk_gaps"


def metadata_without_gaps(metadata: Mapping[str, Any]) -> dict[str, Any]:
    """``metadata`` minus the chunk gaps: what a loader gave and a result shows (the
    gaps are derived at ingest and serve only to rebuild passages)."""
    return {k: v for k, v in metadata.items() if k != GAPS_KEY}


def result_metadata(metadata: Mapping[str, Any]) -> dict[str, Any]:
    """A result's own copy of its document's metadata, without the chunk gaps.

    Rows held in memory serve many searches: a caller editing one result's metadata
    (its top level, or a field) must not change what later searches return. The
    keys groundkit records for itself (page offsets, geometry, headings) are not
    copied, a PDF's geometry being megabytes: they are read-only.
    """
    out = dict(metadata)
    out.pop(GAPS_KEY, None)
    fields = out.get(FIELDS_KEY)
    if type(fields) is dict and fields:
        out[FIELDS_KEY] = {k: list(v) if type(v) is list else v for k, v in fields.items()}
    return out


# Document metadata key holding the document's fields: typed, descriptive
# values (front matter, PDF info, HTML meta, the ingest call's metadata) kept
# apart from the keys groundkit records for itself (adr/0016-document-fields.md).
FIELDS_KEY = "fields"
# What a field may be called: written at ingest and named by filters.
FIELD_NAME_PATTERN = re.compile(r"[A-Za-z_][A-Za-z0-9_-]{0,63}")

# The document field holding a sensitivity label, and the labels from least to
# most restricted. A fixed scale, so a label means the same thing at ingest, in
# every collection and at every server (adr/0021-sensitivity.md).
SENSITIVITY_FIELD = "sensitivity"
SENSITIVITY_LEVELS: tuple[str, ...] = ("public", "internal", "confidential", "restricted")

# The name filters give a document's source (its path, or its URL). No field may take
# it, so ``{"source": {"prefix": "docs/"}}`` means one thing in every collection.
SOURCE_FIELD = "source"

FieldScalar = str | int | float | bool
# Lists hold one type of scalar; ingestion/fields.py enforces the rules.
FieldValue = FieldScalar | list[FieldScalar]


def fields_of(metadata: Mapping[str, Any]) -> dict[str, FieldValue]:
    """The fields recorded in a document's ``metadata`` (``{}`` when it has none)."""
    fields = metadata.get(FIELDS_KEY)
    return dict(fields) if isinstance(fields, Mapping) else {}


def page_at(metadata: Mapping[str, Any], offset: int) -> int | None:
    """1-based page holding ``offset``, when the document records page starts."""
    starts = metadata.get(PAGE_STARTS_KEY)
    if not isinstance(starts, list) or not starts or starts[0] != 0:
        return None
    if not all(type(s) is int for s in starts):
        return None
    return bisect_right(starts, offset)


def rects_at(metadata: Mapping[str, Any], start: int, end: int) -> tuple[PageRect, ...]:
    """The rectangles covering ``[start, end)``, one per line fragment in reading order
    (``()`` when the document records no geometry). ``StorageError`` when the stored
    geometry is damaged."""
    geometry = metadata.get(GEOMETRY_KEY)
    if geometry is None:
        return ()
    return _rects(geometry, page_at(metadata, start), end_page_at(metadata, start, end), start, end)


def _rects(
    geometry: Any, first: int | None, last: int | None, start: int, end: int
) -> tuple[PageRect, ...]:
    """``rects_at`` for pages already read from the same metadata."""
    if start >= end:
        return ()
    if not isinstance(geometry, Mapping) or first is None or last is None:
        raise StorageError("document metadata holds damaged geometry (no pages to place it)")
    try:
        found = span_rects(geometry, first, last, start, end)
    except DamagedGeometryError as exc:
        raise StorageError(f"document metadata holds damaged geometry: {exc}") from None
    return tuple(
        trusted(PageRect, dict(zip(_RECT_FIELDS, r, strict=True)), set(_RECT_FIELDS)) for r in found
    )


def page_frame_at(metadata: Mapping[str, Any], page: int) -> PageFrame | None:
    """Page ``page``'s (1-based) crop box in its user space and its rotation, when the
    document records geometry: what a renderer needs to place a citation's rectangles."""
    geometry = metadata.get(GEOMETRY_KEY)
    return page_frame(geometry, page) if isinstance(geometry, Mapping) else None


def heading_path_at(metadata: Mapping[str, Any], offset: int) -> list[str]:
    """Titles of the headings enclosing ``offset``, outermost first (``[]`` when none).

    A heading encloses what follows it up to the next heading of the same or a
    higher level, so ``# Guide`` / ``## Install`` / ``### Linux`` gives
    ``["Guide", "Install", "Linux"]`` for text under the last one.
    """
    outline = metadata.get(HEADINGS_KEY)
    if not isinstance(outline, list) or not outline:
        return []
    # Walked back from the last heading at or before ``offset``: each heading of a
    # level above every later one up to there encloses it. A result's path costs its
    # section's depth, not the document's outline.
    try:
        index = bisect_right(outline, offset, key=lambda entry: int(entry[0]))
    except (TypeError, ValueError, IndexError, KeyError):
        return []  # a damaged outline gives no path
    path: list[str] = []
    above = 7
    for back in range(index - 1, -1, -1):
        entry = outline[back]
        if not (isinstance(entry, list) and len(entry) == 3):
            return []
        _, level, title = entry
        if type(level) is not int or not isinstance(title, str):
            return []
        if level < above:
            path.append(title)
            above = level
            if level <= 1:
                break
    path.reverse()
    return path


# A leading front matter block, as ingestion/fields.py reads one (YAML between ``---`` and
# ``---`` or ``...``, TOML between ``+++`` lines).
_FRONT_MATTER = re.compile(
    r"\ufeff?(?:---[ \t]*\r?\n(?:.*?\n)??(?:---|\.\.\.)|\+\+\+[ \t]*\r?\n(?:.*?\n)??\+\+\+)"
    r"[ \t]*(?:\r?\n|\Z)",
    re.DOTALL,
)


def opening_heading(metadata: Mapping[str, Any], start: int, content: str) -> int:
    """Where the heading path of a chunk starting at ``start`` is read: the start of the
    last heading in the run of heading lines the chunk opens with, else ``start``.

    A chunk joining small sections (adr/0096-small-sections-joined.md) may open with a
    document's title and then a section's heading (``# Kettles`` / ``## Boiling`` /
    text): its text is under both, and its path is ``["Kettles", "Boiling"]``, not the
    title's alone. A document's front matter does not end the run; a chunk opening
    with body text keeps the path at its start.
    """
    outline = metadata.get(HEADINGS_KEY)
    if not isinstance(outline, list) or not outline:
        return start
    try:
        index = bisect_left(outline, start, key=lambda entry: int(entry[0]))
    except (TypeError, ValueError, IndexError, KeyError):
        return start  # a damaged outline: heading_path_at gives no path for it either
    end = start + len(content)
    at, done = start, 0  # ``done``: where in ``content`` the last heading line ended
    if start == 0 and (front := _FRONT_MATTER.match(content)) is not None:
        done = front.end()  # a document's front matter is its fields, not body text
    for entry in outline[index:]:
        offset = entry[0] if isinstance(entry, list) and entry else None
        if type(offset) is not int or offset >= end:
            break
        if content[done : offset - start].strip():
            break  # body text before this heading: the run has ended
        at = offset
        line_end = content.find("\n", offset - start)
        if line_end < 0:
            break
        done = line_end + 1
    return at


def end_page_at(metadata: Mapping[str, Any], start: int, end: int) -> int | None:
    """The 1-based page the span ``[start, end)`` ends on (its last character's)."""
    return page_at(metadata, max(start, end - 1))


def record_source(record_id: str) -> str:
    """The source a record is stored under: ``record://<id>``."""
    return RECORD_SOURCE_PREFIX + record_id


def record_id_of(source: str) -> str | None:
    """The caller's id of a record's source (``record://<id>``), else None."""
    return source[len(RECORD_SOURCE_PREFIX) :] if source.startswith(RECORD_SOURCE_PREFIX) else None


Span = tuple[int, int]


T = TypeVar("T")


class _Deferred(Sequence[T]):
    """A read-only sequence that may be computed on first use.

    A search hands each result deferred work (highlights, evidence), so only
    what is read, or serialised, costs anything. Compares equal to any sequence
    of the same items; pickles and copies as its resolved items.
    """

    __slots__ = ("_args", "_compute", "_items")

    def __init__(self, items: Iterable[T] = ()) -> None:
        self._items: tuple[T, ...] | None = tuple(self._coerce(items))
        self._compute: Callable[..., Sequence[T]] | None = None
        self._args: tuple[Any, ...] = ()

    @staticmethod
    def _coerce(items: Iterable[Any]) -> Iterable[T]:
        return items

    @classmethod
    def deferred(cls, compute: Callable[..., Sequence[T]], *args: Any) -> Self:
        """Items that ``compute(*args)`` produces on first use."""
        lazy = cls.__new__(cls)
        lazy._items = None
        lazy._compute = compute
        lazy._args = args
        return lazy

    @property
    def resolved(self) -> bool:
        """Whether the items are known yet (nothing is computed to answer)."""
        return self._items is not None

    def _resolve(self) -> tuple[T, ...]:
        if self._items is None:
            assert self._compute is not None
            self._items = tuple(self._compute(*self._args))
            self._compute, self._args = None, ()
        return self._items

    @overload
    def __getitem__(self, index: int) -> T: ...

    @overload
    def __getitem__(self, index: slice) -> Sequence[T]: ...

    def __getitem__(self, index: int | slice) -> T | Sequence[T]:
        return self._resolve()[index]

    def __len__(self) -> int:
        return len(self._resolve())

    def __iter__(self) -> Iterator[T]:
        return iter(self._resolve())

    def __eq__(self, other: object) -> bool:
        if isinstance(other, _Deferred):
            return self._resolve() == other._resolve()
        if isinstance(other, Sequence) and not isinstance(other, str | bytes):
            return list(self._resolve()) == [self._same(item) for item in other]
        return NotImplemented

    @staticmethod
    def _same(item: Any) -> Any:
        return item

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"{type(self).__name__}({list(self._resolve())!r})"

    def __reduce__(self) -> tuple[type[Self], tuple[tuple[T, ...]]]:
        return (type(self), (self._resolve(),))

    def __copy__(self) -> Self:
        return type(self)(self._resolve())

    def __deepcopy__(self, memo: dict[int, Any]) -> Self:
        return type(self)(self._resolve())


class Highlights(_Deferred[Span]):
    """Where a result's query terms occur in its content: sorted ``(start, end)`` pairs.

    Offsets are relative to ``RetrievalResult.content``; add the result's
    ``start_offset`` for offsets into the source. Deferred until read, so the
    BM25 path stays as fast as without them.
    """

    __slots__ = ()

    @staticmethod
    def _coerce(items: Iterable[Any]) -> Iterable[Span]:
        return ((int(a), int(b)) for a, b in items)

    @staticmethod
    def _same(item: Any) -> Any:
        return tuple(item)

    @classmethod
    def __get_pydantic_core_schema__(cls, source: Any, handler: GetCoreSchemaHandler) -> CoreSchema:
        pair = core_schema.tuple_schema([core_schema.int_schema(ge=0)] * 2)
        from_pairs = core_schema.no_info_after_validator_function(
            cls, core_schema.list_schema(pair)
        )
        return core_schema.json_or_python_schema(
            json_schema=from_pairs,
            python_schema=core_schema.union_schema(
                [core_schema.is_instance_schema(cls), from_pairs]
            ),
            serialization=core_schema.plain_serializer_function_ser_schema(
                lambda h: [list(pair) for pair in h],
                return_schema=core_schema.list_schema(core_schema.list_schema()),
            ),
        )


class _Frozen(BaseModel):
    # Validators are built when a model is first used, not at import: a process pays
    # only for the models it uses (adr/0063-cold-start.md).
    model_config = ConfigDict(frozen=True, extra="forbid", strict=False, defer_build=True)

    # A model built by hand (or by ``model_validate``) from values it refuses raises
    # groundkit's error, a ``ValueError`` as pydantic's is, never pydantic's own: a
    # result or citation is an argument to a retrieval call, a document or record the
    # input of an ingest (``InvalidInputError`` there). groundkit's own results are built
    # checked already (``trusted``) and never come through here.
    _refusal: ClassVar[type[InvalidQueryError | InvalidInputError]] = InvalidQueryError
    _label: ClassVar[str] = ""

    def __init__(self, **data: Any) -> None:
        try:
            super().__init__(**data)
        except ValidationError as exc:
            raise type(self)._refused(exc) from None

    # Marked as pydantic's own: a model nested in another (a result's citation) is then
    # validated by pydantic-core alone, not through this ``__init__``, so its refusal
    # is reported once, by the outer model, and nesting costs no Python call (as
    # pydantic's ``RootModel`` marks its ``__init__``).
    __init__.__pydantic_base_init__ = True  # type: ignore[attr-defined]

    @classmethod
    def model_validate(cls, obj: Any, *args: Any, **kwargs: Any) -> Self:
        try:
            return super().model_validate(obj, *args, **kwargs)
        except ValidationError as exc:
            raise cls._refused(exc) from None

    @classmethod
    def model_validate_json(cls, json_data: Any, *args: Any, **kwargs: Any) -> Self:
        try:
            return super().model_validate_json(json_data, *args, **kwargs)
        except ValidationError as exc:
            raise cls._refused(exc) from None

    # As a frozen dataclass (and ``SearchRequest``) answers: pydantic's own is its error.
    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(
            f"{type(self).__name__} is frozen; model_copy(update={{{name!r}: ...}}) gives a "
            "changed copy"
        )

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"{type(self).__name__} is frozen")

    @classmethod
    def _refused(cls, exc: ValidationError) -> InvalidQueryError | InvalidInputError:
        """The error naming each refused value's place and why (never the value: a
        document's text or a result's content may be anything)."""
        problems = []
        for error in exc.errors(include_url=False, include_input=False):
            message = error["msg"]
            if error["type"] == "value_error":  # one of the model's own checks
                message = message.removeprefix("Value error, ")
            where = ".".join(str(part) for part in error["loc"])
            problems.append(f"{where}: {message}" if where else message)
        return cls._refusal(f"invalid {cls._label or cls.__name__}: {'; '.join(problems)}")

    # A value worked out while dumping (a result's citation from damaged geometry,
    # deferred evidence whose embedder fails) raises groundkit's error; pydantic would
    # wrap it in its own exception, which the public API does not let out.
    def model_dump(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
        try:
            return super().model_dump(*args, **kwargs)
        except PydanticSerializationError as exc:
            raise _unwrapped(exc) from None

    def model_dump_json(self, *args: Any, **kwargs: Any) -> str:
        try:
            return super().model_dump_json(*args, **kwargs)
        except PydanticSerializationError as exc:
            # The JSON serializer keeps only the message: the Python one finds the error.
            self.model_dump(mode="json")
            raise exc from None


def _unwrapped(exc: PydanticSerializationError) -> BaseException:
    """The groundkit error a serializer raised, else pydantic's own (a defect here)."""
    cause = exc.__cause__
    return cause if isinstance(cause, GroundkitError) else exc


class EvidenceSpan(_Frozen):
    """One sentence of a result that answers the query, as exact source offsets.

    ``text`` is ``source[start_offset:end_offset]`` as indexed, so it verifies
    like any quote of the result (``check_quote``). ``method`` says how it was
    chosen: ``terms`` (the query's terms, weighted by their rarity in the
    collection), ``embedding`` (cosine similarity of the sentence and the query
    under the collection's embedder) or ``hybrid`` (both, standardised within
    the chunk and summed). ``score`` is on that method's scale: higher is better
    within one result; scores of different methods do not compare.
    """

    start_offset: int = Field(ge=0)
    end_offset: int = Field(ge=0)
    text: str
    score: float
    method: EvidenceMethod

    @model_validator(mode="after")
    def _validate(self) -> EvidenceSpan:
        _check_span(self.start_offset, self.end_offset)
        if self.end_offset - self.start_offset != len(self.text):
            raise ValueError("evidence span length does not match its text")
        if not math.isfinite(self.score):
            raise ValueError("evidence score must be finite")
        return self


class Evidence(_Deferred[EvidenceSpan]):
    """A result's evidence sentences, best first (at most three), computed on first read."""

    __slots__ = ()

    @classmethod
    def __get_pydantic_core_schema__(cls, source: Any, handler: GetCoreSchemaHandler) -> CoreSchema:
        items = core_schema.list_schema(handler.generate_schema(EvidenceSpan))
        from_items = core_schema.no_info_after_validator_function(cls, items)
        return core_schema.json_or_python_schema(
            json_schema=from_items,
            python_schema=core_schema.union_schema(
                [core_schema.is_instance_schema(cls), from_items]
            ),
            serialization=core_schema.plain_serializer_function_ser_schema(
                lambda e: [span.model_dump() for span in e],
                return_schema=core_schema.list_schema(core_schema.dict_schema()),
            ),
        )


def _check_extractor(source_class: SourceClass, extractor: str | None) -> None:
    # Offsets into extracted text only mean something under the extractor that
    # produced them; any other class must not pretend to have one.
    if source_class == "extracted" and not extractor:
        raise ValueError("an 'extracted' source needs the identity of its extractor")
    if source_class != "extracted" and extractor is not None:
        raise ValueError(f"a {source_class!r} source must not name an extractor")


def _check_highlights(highlights: Sequence[Span], length: int) -> None:
    end = 0
    for a, b in highlights:
        if not end <= a < b <= length:
            raise ValueError(
                f"highlight {a}..{b} is empty, out of order or outside content of length {length}"
            )
        end = b


def _check_span(start: int, end: int) -> None:
    if end < start:
        raise ValueError(f"end_offset {end} is before start_offset {start}")


class Document(_Frozen):
    """A loaded source, before chunking."""

    _refusal = InvalidInputError

    document_id: str = Field(min_length=1)
    source: str = Field(min_length=1)
    content: str
    source_class: SourceClass = "text"
    extractor: str | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)
    # What the loader read but passed over (a front matter field it could not store),
    # one line each: reported in ``IngestReport.warnings``, never stored.
    notes: tuple[str, ...] = ()

    @model_validator(mode="after")
    def _validate(self) -> Document:
        _check_extractor(self.source_class, self.extractor)
        return self

    @property
    def content_hash(self) -> str:
        """SHA-256 of ``content`` (computed on access; the model is frozen)."""
        return sha256_text(self.content)

    @property
    def fields(self) -> dict[str, FieldValue]:
        """The document's fields (``metadata["fields"]``), a copy."""
        return fields_of(self.metadata)


class Record(_Frozen):
    """Text that is not a file (a database row, a ticket, a framework's document),
    given with the caller's own ``id`` and optional ``fields``.

    Stored as a ``record`` document whose source is ``record://<id>``; its text is
    kept in the collection's snapshot store and citations verify against it. The
    id rules are checked when it is added (``Collection.add_documents``).
    Invalid arguments raise ``IngestionError`` (not pydantic's error), like every
    other bad input to an ingest.
    """

    _refusal = InvalidInputError
    _label = "record"

    # Strict: bytes (or anything else) is refused, never decoded into an id or a text.
    id: str = Field(strict=True)
    text: str = Field(strict=True)
    fields: dict[str, Any] = Field(default_factory=dict)

    @property
    def source(self) -> str:
        return record_source(self.id)


class Chunk(_Frozen):
    """An exact slice ``document.content[start_offset:end_offset]``."""

    _refusal = InvalidInputError

    chunk_id: str = Field(min_length=1)
    document_id: str = Field(min_length=1)
    chunk_index: int = Field(ge=0)
    content: str
    start_offset: int = Field(ge=0)
    end_offset: int = Field(ge=0)
    metadata: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _validate(self) -> Chunk:
        _check_span(self.start_offset, self.end_offset)
        if self.end_offset - self.start_offset != len(self.content):
            raise ValueError(
                f"span {self.start_offset}..{self.end_offset} does not fit content of "
                f"length {len(self.content)}"
            )
        return self

    @property
    def content_hash(self) -> str:
        """SHA-256 of ``content``."""
        return sha256_text(self.content)


class DocumentRecord(_Frozen):
    """What the metadata store knows about one ingested document."""

    document_id: str
    source: str
    content_hash: str
    ingested_at: str
    source_class: SourceClass = "text"
    extractor: str | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)
    chunk_count: int = Field(default=0, ge=0)
    # The current version (1 for the first ingest) and how many past ones are kept.
    version: int = Field(default=1, ge=1)
    past_versions: int = Field(default=0, ge=0)

    @model_validator(mode="after")
    def _validate(self) -> DocumentRecord:
        _check_extractor(self.source_class, self.extractor)
        return self

    @property
    def fields(self) -> dict[str, FieldValue]:
        """The document's fields (``metadata["fields"]``), a copy."""
        return fields_of(self.metadata)


_RECT_FIELDS = ("page", "x0", "y0", "x1", "y1")


class PageRect(_Frozen):
    """Where part of a cited span stands on a PDF page: ``page`` (1-based) and a box
    in PDF points in the page's own user space (origin at the bottom-left as the
    page's content places it, the page's ``/Rotate`` not applied).

    Written as ``[page, x0, y0, x1, y1]`` in every shape (dumps, JSON, MCP), and read
    back from that list or from an object of the fields.
    """

    page: int = Field(ge=1)
    x0: float
    y0: float
    x1: float
    y1: float

    @model_validator(mode="before")
    @classmethod
    def _from_list(cls, data: Any) -> Any:
        if isinstance(data, list | tuple) and len(data) == len(_RECT_FIELDS):
            return dict(zip(_RECT_FIELDS, data, strict=True))
        return data

    @model_serializer(mode="plain")
    def _as_list(self) -> list[int | float]:
        return [self.page, self.x0, self.y0, self.x1, self.y1]

    @classmethod
    def __get_pydantic_json_schema__(
        cls, schema: CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        # The shape it is written in (MCP checks tool output against this).
        number = {"type": "number"}
        return {
            "type": "array",
            "description": "[page, x0, y0, x1, y1]: 1-based page, box in PDF points",
            "prefixItems": [{"type": "integer", "minimum": 1}, number, number, number, number],
            "minItems": 5,
            "maxItems": 5,
        }

    @model_validator(mode="after")
    def _validate(self) -> PageRect:
        if not all(math.isfinite(v) for v in (self.x0, self.y0, self.x1, self.y1)):
            raise ValueError("a rectangle's coordinates must be finite")
        if not (self.x0 < self.x1 and self.y0 < self.y1):
            raise ValueError("a rectangle needs x0 < x1 and y0 < y1")
        return self


# How the extractor identities of PDF text begin: the current extractor's, and the one
# before it (a document whose extractor begins so has pages to link and render).
PDF_EXTRACTOR_PREFIXES = ("groundkit-pdf/", "pypdf/")


class Citation(_Frozen):
    """Where a passage came from, precisely enough to read it back.

    ``page`` (1-based) is the page the span starts on and ``end_page`` the one it
    ends on, for sources that have pages; they help a reader find the passage and
    play no part in verifying it. ``rects`` shows where the span stands on those
    pages: one rectangle per line fragment it covers, in reading order (PDFs; empty
    for sources without geometry). Like the pages, they are derived from the
    extraction the offsets come from and checked by verifying the span.
    ``version`` is the document version the span was taken from (1 for a
    document's first ingest; ``None`` when the citation was built by hand).
    """

    document_id: str
    chunk_id: str
    source: str
    source_class: SourceClass
    extractor: str | None
    # Strict: a citation carried through a framework's metadata or a file must not
    # turn "5" or True into an offset.
    start_offset: int = Field(ge=0, strict=True)
    end_offset: int = Field(ge=0, strict=True)
    page: int | None = Field(default=None, ge=1, strict=True)
    version: int | None = Field(default=None, ge=1, strict=True)
    # The page the span ends on (its last character's), when the source has pages.
    end_page: int | None = Field(default=None, ge=1, strict=True)
    rects: tuple[PageRect, ...] = ()

    @model_validator(mode="after")
    def _validate(self) -> Citation:
        _check_span(self.start_offset, self.end_offset)
        _check_extractor(self.source_class, self.extractor)
        # Refused where it enters (SPEC 8.3): no store, hash or file name can hold it.
        for name in ("document_id", "chunk_id", "source", "extractor"):
            value = getattr(self, name)
            if value is not None and (problem := describe_unencodable(value, name)):
                raise ValueError(problem)
        if self.end_page is not None and (self.page is None or self.end_page < self.page):
            raise ValueError("end_page needs a page and cannot come before it")
        return self

    def to_dict(self, *, full: bool = False) -> dict[str, Any]:
        """The citation as JSON-ready data: by default what a reader needs to find and
        cite the passage (document, chunk, source, offsets, version, and its pages when
        the source has them); ``full=True`` gives every field (``model_dump(mode="json")``)."""
        if full:
            return self.model_dump(mode="json")
        out: dict[str, Any] = {
            "document_id": self.document_id,
            "chunk_id": self.chunk_id,
            "source": self.source,
            "start_offset": self.start_offset,
            "end_offset": self.end_offset,
            "version": self.version,
        }
        if self.page is not None:
            out["page"] = self.page
            if self.end_page is not None and self.end_page != self.page:
                out["end_page"] = self.end_page
        if self.rects:
            out["rects"] = [r.model_dump() for r in self.rects]
        return out

    @property
    def pages(self) -> str | None:
        """``"p. 3"`` or ``"pp. 3-4"`` for a span crossing a page break; None without pages."""
        if self.page is None:
            return None
        if self.end_page is None or self.end_page == self.page:
            return f"p. {self.page}"
        return f"pp. {self.page}-{self.end_page}"

    def link(self, exact: str | None = None) -> str | None:
        """A link that opens the source at the passage, or None when there is none.

        A PDF (or any URL source with pages) gets ``#page=N``; another URL gets a
        text directive (``#:~:text=``) highlighting ``exact``, the cited text (the
        URL alone without it). Local text files and records have no link.
        """
        is_url = self.source_class == "snapshot"
        is_pdf = (self.extractor or "").startswith(PDF_EXTRACTOR_PREFIXES)
        if self.page is not None and (is_url or is_pdf):
            return page_link(self.source, self.page, is_url=is_url)
        if not is_url:
            return None
        return self.source if exact is None else text_fragment_link(self.source, exact)

    def to_annotation(
        self,
        exact: str,
        *,
        prefix: str | None = None,
        suffix: str | None = None,
        collection: str | None = None,
    ) -> dict[str, Any]:
        """This citation as a portable receipt: a W3C Web Annotation (JSON-LD dict).

        ``exact`` is the text the citation stands for (``RetrievalResult.content``;
        the citation itself carries offsets only); ``prefix``/``suffix`` the source
        text just before and after it, which tell a repeated passage apart when the
        source is edited. ``grk verify --receipts`` and
        ``groundkit.check_receipts`` check it against the source with no index
        (docs/receipts.md).
        """
        if not isinstance(exact, str) or len(exact) != self.end_offset - self.start_offset:
            size = len(exact) if isinstance(exact, str) else type(exact).__name__
            raise RetrievalError(
                f"the exact text ({size} characters) does not fit the citation's span "
                f"{self.start_offset}..{self.end_offset}; pass the text it was indexed with"
            )
        _check_annotation_texts(exact=exact, prefix=prefix, suffix=suffix, collection=collection)
        return web_annotation(
            self.source,
            self.start_offset,
            self.end_offset,
            exact,
            prefix=prefix,
            suffix=suffix,
            extensions={
                "sourceClass": self.source_class,
                "extractor": self.extractor,
                "documentId": self.document_id,
                "chunkId": self.chunk_id,
                "version": self.version,
                "page": self.page,
                "endPage": self.end_page,
                # PDF user space, as in ``rects``: a PDF fragment (RFC 8118 viewrect) would
                # need each page's box, which a citation does not carry (adr/0072).
                "rects": [r.model_dump() for r in self.rects] or None,
                "collection": collection,
                "link": self.link(exact),
            },
        )


def _check_annotation_texts(**texts: object) -> None:
    """``RetrievalError`` for a receipt part that is not text a UTF-8 receipt can hold:
    what ``to_annotation`` writes must read back (``parse_receipt``)."""
    for name, value in texts.items():
        if value is None and name != "exact":
            continue
        if not isinstance(value, str):
            raise RetrievalError(f"{name} must be a str or None, not {type(value).__name__}")
        problem = describe_unencodable(value, name)
        if problem is not None:
            raise RetrievalError(problem)


ContextKind = Literal["parent", "window"]


_Model = TypeVar("_Model", bound=BaseModel)
# The slots every pydantic model instance has, set directly (what ``model_construct``
# does through ``object.__setattr__``, minus its per-field bookkeeping).
_set_values = BaseModel.__dict__["__dict__"].__set__
_set_fields_set = BaseModel.__dict__["__pydantic_fields_set__"].__set__
_set_extra = BaseModel.__dict__["__pydantic_extra__"].__set__
_set_private = BaseModel.__dict__["__pydantic_private__"].__set__


def trusted(cls: type[_Model], values: dict[str, Any], fields_set: set[str]) -> _Model:
    """A ``cls`` holding ``values`` (every field, none extra) as they are, unvalidated.

    For values already checked (a stored row, a result's own fields): the caller
    answers for them. ``fields_set`` is the instance's own set (pydantic's
    ``model_copy(update=...)`` adds to it in place). Only for models without
    private attributes or extra fields, which all of these contracts are.
    """
    model = cls.__new__(cls)
    fill_trusted(model, values, fields_set)
    return model


def fill_trusted(model: BaseModel, values: dict[str, Any], fields_set: set[str]) -> None:
    """``trusted`` for an instance being initialised (a model whose own ``__init__``
    checked its arguments)."""
    _set_values(model, values)
    _set_fields_set(model, fields_set)
    _set_extra(model, None)
    _set_private(model, None)


_CITATION_FIELDS = frozenset(Citation.model_fields)


def checked_citation(citation: Citation) -> Citation:
    """``citation`` when its values pass ``Citation``'s checks; ``InvalidQueryError``
    otherwise. pydantic's ``model_copy(update=...)`` and ``model_construct`` make a
    citation without them (end before start, an offset that is a string), which a
    check would otherwise meet deep inside as a ``TypeError`` or pydantic's error."""
    try:
        Citation.model_validate({name: getattr(citation, name) for name in _CITATION_FIELDS})
    except InvalidQueryError as exc:
        problems = str(exc).removeprefix("invalid Citation: ")
        raise InvalidQueryError(f"the citation is not a valid one: {problems}") from None
    return citation


# A result's own fields that make up its citation (with its text, what a reranker may not
# change), and the citation's fields derived from the result's metadata (its pages).
RESULT_CITATION_FIELDS = (
    "document_id",
    "chunk_id",
    "source",
    "source_class",
    "extractor",
    "start_offset",
    "end_offset",
    "version",
)
_DERIVED_CITATION_FIELDS = frozenset({"page", "end_page", "rects"})
# Keys of a result's dump that are not its fields: read back, they are derived again.
_DERIVED_RESULT_KEYS = frozenset({"citation", "heading_path", "fields"})
_SOURCE_CLASSES: frozenset[str] = frozenset(get_args(SourceClass))


def _encodable(*texts: str) -> bool:
    """Whether UTF-8 can encode each of ``texts`` (ASCII, as ids and most paths are, at
    once)."""
    return all(text.isascii() or first_unencodable(text) is None for text in texts)


def citation_for(
    *,
    document_id: str,
    chunk_id: str,
    source: str,
    source_class: SourceClass,
    extractor: str | None,
    start_offset: int,
    end_offset: int,
    metadata: Mapping[str, Any],
    version: int | None,
) -> Citation:
    """The citation of a stored span, its pages and rectangles read from ``metadata``.

    Equal to ``Citation(...)`` of the same values. Values that pass the model's
    checks in one expression (what every stored row and every result holds) are
    set without running the validator, which cost as much as reading the row;
    any other value goes through the validated constructor, which raises as it
    always has. A test pins the two together.
    """
    page = page_at(metadata, start_offset)
    end_page = end_page_at(metadata, start_offset, end_offset)
    # Only documents with geometry (PDFs) pay for rectangles.
    geometry = metadata.get(GEOMETRY_KEY)
    rects = () if geometry is None else _rects(geometry, page, end_page, start_offset, end_offset)
    if (
        type(document_id) is str
        and type(chunk_id) is str
        and type(source) is str
        and _encodable(document_id, chunk_id, source)
        and source_class in _SOURCE_CLASSES
        and (
            extractor is None
            if source_class != "extracted"
            else (type(extractor) is str and bool(extractor) and _encodable(extractor))
        )
        and type(start_offset) is int
        and type(end_offset) is int
        and 0 <= start_offset <= end_offset
        and (version is None or (type(version) is int and version >= 1))
        and (page is None or page >= 1)
        and (end_page is None or (page is not None and end_page >= page))
    ):
        values = {
            "document_id": document_id,
            "chunk_id": chunk_id,
            "source": source,
            "source_class": source_class,
            "extractor": extractor,
            "start_offset": start_offset,
            "end_offset": end_offset,
            "page": page,
            "version": version,
            "end_page": end_page,
            "rects": rects,
        }
        return trusted(Citation, values, set(_CITATION_FIELDS))
    return Citation(
        document_id=document_id,
        chunk_id=chunk_id,
        source=source,
        source_class=source_class,
        extractor=extractor,
        start_offset=start_offset,
        end_offset=end_offset,
        page=page,
        version=version,
        end_page=end_page,
        rects=rects,
    )


class ContextSpan(_Frozen):
    """The passage around a result, for reading: an exact slice of the same source.

    ``search(expand="parent")`` gives the section the result's chunk lies in
    (bounded by headings, at most ``context_max_chars``); ``expand="window"``
    the chunks next to it within that section. ``collapsed`` names the other
    hits of the search that fell inside this passage and were folded into this
    result rather than returned again.
    """

    kind: ContextKind
    content: str
    start_offset: int = Field(ge=0)
    end_offset: int = Field(ge=0)
    chunk_ids: tuple[str, ...]
    collapsed: tuple[str, ...] = ()

    @model_validator(mode="after")
    def _validate(self) -> ContextSpan:
        _check_span(self.start_offset, self.end_offset)
        if self.end_offset - self.start_offset != len(self.content):
            raise ValueError("context span length does not match its content")
        return self


@dataclass(frozen=True, slots=True)
class Scores:
    """Each signal behind a result's rank, ``None`` where that signal did not score it.

    ``bm25`` is the BM25 sum over the query's terms; ``vector`` the cosine similarity
    of query and chunk embeddings, in [-1, 1]; ``fused`` what hybrid fusion, query
    rewriting or a multi-collection search gave the result; ``rerank`` the
    cross-encoder's score (a sigmoid of its logit); ``relevance`` the probability
    that the result is relevant, read off ``vector`` by the embedder's relevance
    calibration (adr/0071-relevance-calibration.md).
    A slotted dataclass, not a model: every search result carries one.
    """

    bm25: float | None = None
    vector: float | None = None
    fused: float | None = None
    rerank: float | None = None
    relevance: float | None = None


_SIGNALS = ("bm25", "vector", "fused", "rerank", "relevance")


def with_fused(scores: Scores | None, fused: float) -> Scores:
    """``scores`` with ``fused`` set: a later fusion (rewrites, collections) replaces
    an earlier one's score, and keeps the signals beneath it."""
    return replace(scores or Scores(), fused=fused)


class RetrievalResult(_Frozen):
    """One ranked hit; ``citation`` says exactly where its content lives.

    ``score`` orders the results, and its scale is the mode's: the BM25 sum in
    ``bm25``; ``(1 + cosine) / 2``, in [0, 1], in ``dense``; the fusion's score in
    ``hybrid`` (convex: BM25 and vector scores min-max normalised over the
    candidates and weighted, so the best is near 1 whatever the query; rrf:
    a sum of ``weight / (rrf_k + rank)``); the cross-encoder's score after a
    rerank; a reciprocal-rank score after query rewriting or across collections.
    Only ``scores.relevance`` compares across queries (adr/0071).
    """

    content: str
    score: float = Field(ge=0.0)
    document_id: str
    chunk_id: str
    chunk_index: int = Field(ge=0)
    source: str
    source_class: SourceClass
    extractor: str | None
    start_offset: int = Field(ge=0)
    end_offset: int = Field(ge=0)
    metadata: dict[str, Any] = Field(default_factory=dict)
    # Query-term spans in ``content`` (lexical matches); None for dense hits.
    highlights: Highlights | None = None
    # The collection the result came from, when the search knew its name.
    collection: str | None = None
    # The document version the chunk belongs to (a past one only in ``as_of`` searches).
    version: int | None = Field(default=None, ge=1)
    # The chunk's sentences that best answer the query (a search fills it in).
    evidence: Evidence | None = None
    # The passage around the chunk, when the search asked for one (``expand=``).
    context: ContextSpan | None = None
    # The signals behind ``score``, one by one (every search fills it in).
    scores: Scores | None = None

    @model_validator(mode="before")
    @classmethod
    def _from_shape(cls, data: Any) -> Any:
        # Reads back the shape ``model_dump`` writes: the citation's fields nested under
        # ``citation``, the derived ``heading_path`` and pages left to be derived again.
        if not isinstance(data, dict) or "citation" not in data:
            return data
        flat = {k: v for k, v in data.items() if k not in _DERIVED_RESULT_KEYS}
        cited = data["citation"]
        if isinstance(cited, Citation):
            cited = cited.model_dump()
        if not isinstance(cited, Mapping):
            raise ValueError("citation must be an object of the citation's fields")
        for key, value in cited.items():
            if key not in _DERIVED_CITATION_FIELDS:
                flat[key] = value
        return flat

    @model_serializer(mode="wrap")
    def _shape(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        # One shape for a result everywhere (SPEC.md, "One shape for a result"): where
        # the text lives is one nested citation, as in ``FetchResult`` and MCP; the
        # model keeps it flat, the fields a stored row gives.
        data: dict[str, Any] = handler(self)
        cited = {k: data.pop(k) for k in RESULT_CITATION_FIELDS if k in data}
        if cited:
            citation = self.citation
            data["citation"] = {
                name: cited[name] if name in cited else _plain(getattr(citation, name))
                for name in Citation.model_fields
                if name in cited or name in _DERIVED_CITATION_FIELDS
            }
        if "metadata" in data:
            data["heading_path"] = self.heading_path
            fields = self.fields
            if fields:
                data["fields"] = fields
        return data

    def to_dict(self, *, full: bool = False) -> dict[str, Any]:
        """The result as JSON-ready data, the shape every surface shows (the CLI's
        ``--json``, MCP's structured content): by default its text, score, the signals
        that scored it, citation, evidence sentences (with offsets), headings and its
        document's fields (when it has any); ``full=True`` gives everything
        (``model_dump(mode="json")``, of which the default is a part, same names and
        nesting)."""
        if full:
            out: dict[str, Any] = self.model_dump(mode="json")
            return out
        compact: dict[str, Any] = {
            "content": self.content,
            "score": self.score,
            "citation": self.citation.to_dict(),
            "heading_path": self.heading_path,
        }
        if self.scores is not None:
            # The signals that scored the result (relevance among them when calibrated).
            signals = ((k, getattr(self.scores, k)) for k in _SIGNALS)
            compact["scores"] = {k: v for k, v in signals if v is not None}
        fields = self.fields
        if fields:
            compact["fields"] = fields
        if self.evidence is not None:
            compact["evidence"] = [
                {"text": s.text, "start_offset": s.start_offset, "end_offset": s.end_offset}
                for s in self.evidence
            ]
        if self.collection is not None:
            compact["collection"] = self.collection
        if self.context is not None:
            compact["context"] = self.context.model_dump(mode="json")
        return compact

    @model_validator(mode="after")
    def _validate(self) -> RetrievalResult:
        if not math.isfinite(self.score):
            raise ValueError("score must be finite")
        _check_span(self.start_offset, self.end_offset)
        _check_extractor(self.source_class, self.extractor)
        if self.end_offset - self.start_offset != len(self.content):
            raise ValueError("span length does not match content length")
        if self.highlights is not None and self.highlights.resolved:
            # Deferred highlights come from this content and are not forced here.
            _check_highlights(self.highlights, len(self.content))
        return self

    @property
    def source_highlights(self) -> list[Span]:
        """``highlights`` as offsets into the source (empty for dense hits)."""
        base = self.start_offset
        return [(base + a, base + b) for a, b in self.highlights or ()]

    @property
    def fields(self) -> dict[str, FieldValue]:
        """The fields of the result's document (``metadata["fields"]``), a copy."""
        return fields_of(self.metadata)

    @property
    def heading_path(self) -> list[str]:
        """The headings the chunk lies under, outermost first (``[]`` when none)."""
        return heading_path_at(
            self.metadata, opening_heading(self.metadata, self.start_offset, self.content)
        )

    def to_annotation(self) -> dict[str, Any]:
        """This result's citation as a receipt (``Citation.to_annotation``); a result
        searched with ``expand=`` carries the source text around it as well."""
        prefix = suffix = None
        ctx = self.context
        if ctx is not None and ctx.start_offset <= self.start_offset <= ctx.end_offset:
            before = self.start_offset - ctx.start_offset
            prefix = ctx.content[max(0, before - QUOTE_CONTEXT_CHARS) : before]
        if ctx is not None and ctx.start_offset <= self.end_offset <= ctx.end_offset:
            after = self.end_offset - ctx.start_offset
            suffix = ctx.content[after : after + QUOTE_CONTEXT_CHARS]
        return self.citation.to_annotation(
            self.content, prefix=prefix, suffix=suffix, collection=self.collection
        )

    @property
    def citation(self) -> Citation:
        """The verifiable pointer for this result."""
        return citation_for(
            document_id=self.document_id,
            chunk_id=self.chunk_id,
            source=self.source,
            source_class=self.source_class,
            extractor=self.extractor,
            start_offset=self.start_offset,
            end_offset=self.end_offset,
            metadata=self.metadata,
            version=self.version,
        )


def _plain(value: Any) -> Any:
    """A derived citation value as plain data (rectangles as their lists)."""
    if isinstance(value, tuple):
        return [r.model_dump() if isinstance(r, BaseModel) else r for r in value]
    return value


class _ResultList:
    """A response read as the list of its results: iteration, ``len``, indexing and
    slicing, truth, and ``to_list``/``to_pandas`` for tabular use. The model's fields
    stay attributes (``response.query``, ``response.metadata``)."""

    if TYPE_CHECKING:
        results: list[RetrievalResult]

    def __iter__(self) -> Iterator[RetrievalResult]:
        return iter(self.results)

    def __len__(self) -> int:
        return len(self.results)

    @overload
    def __getitem__(self, index: int) -> RetrievalResult: ...

    @overload
    def __getitem__(self, index: slice) -> list[RetrievalResult]: ...

    def __getitem__(self, index: int | slice) -> RetrievalResult | list[RetrievalResult]:
        if isinstance(index, str):  # the habit of a response that is a dict
            raise TypeError(
                f"a response is indexed by rank (response[0], response[:3]); its fields "
                f"are attributes: response.{index}"
                if index in type(self).model_fields
                else f"a response is indexed by rank (response[0], response[:3]), not {index!r}"
            )
        return self.results[index]

    def __bool__(self) -> bool:
        return bool(self.results)

    def to_list(self, *, full: bool = False) -> list[dict[str, Any]]:
        """The results as JSON-ready dicts in the one result shape (``to_dict``: compact,
        or everything with ``full=True``); ``list(response)`` gives the results themselves."""
        return [result.to_dict(full=full) for result in self.results]

    def to_pandas(self, *, full: bool = False) -> Any:
        """The results as a ``pandas.DataFrame``, one row per result in rank order and
        one column per key of ``to_list()``'s dicts, nested keys joined by dots
        (``citation.chunk_id``). Needs pandas (``pip install groundkit[pandas]``),
        imported on first use."""
        try:
            import pandas
        except ImportError:
            raise ConfigurationError(
                "to_pandas needs pandas, which is not installed: pip install groundkit[pandas]"
            ) from None
        rows = self.to_list(full=full)
        if not rows:  # still the columns every result has, for code that selects them
            return pandas.DataFrame(columns=list(_BASE_COLUMNS))
        return pandas.json_normalize(rows)


# The columns every compact result has, flattened as ``to_pandas`` flattens them.
_BASE_COLUMNS = (
    "content",
    "score",
    "heading_path",
    "citation.document_id",
    "citation.chunk_id",
    "citation.source",
    "citation.start_offset",
    "citation.end_offset",
    "citation.version",
)


# pydantic's ``__iter__`` yields (field, value) pairs; a response iterates its results.
class SearchResponse(_ResultList, _Frozen):  # type: ignore[misc]
    """Ranked results plus how they were produced (stage, latency, counts).

    It reads as the list of its results: ``for r in response``, ``len(response)``,
    ``response[0]``, ``response[:3]``, ``if response``, ``to_list()``, ``to_pandas()``.
    """

    query: str
    mode: SearchMode
    results: list[RetrievalResult]
    total_results: int = Field(ge=0)
    metadata: dict[str, Any] = Field(default_factory=dict)


class CollectionFailure(_Frozen):
    """A collection a multi-collection search could not search, and why."""

    collection: str
    error: str  # the groundkit error class name
    detail: str


class MultiSearchResponse(_ResultList, _Frozen):  # type: ignore[misc]
    """Results fused across collections; each result names its collection. It reads
    as the list of its results, as ``SearchResponse`` does.

    ``score`` of each result is its fused (reciprocal-rank) score. Collections
    that failed are listed in ``failures``; their absence from ``results`` is
    never silent.
    """

    query: str
    mode: SearchMode
    collections: list[str]
    results: list[RetrievalResult]
    total_results: int = Field(ge=0)
    failures: list[CollectionFailure] = Field(default_factory=list)
    metadata: dict[str, Any] = Field(default_factory=dict)

    @property
    def complete(self) -> bool:
        """True when every collection answered."""
        return not self.failures


class FetchResult(_Frozen):
    """A stored chunk together with the verdict of reading it back now.

    ``version`` is the document version the chunk belongs to; ``replaced_at``
    (ISO 8601) is when that version stopped being current, ``None`` while it is.
    ``verification`` is ``moved`` when the text is intact but no longer at the
    cited offsets (``current_start_offset``/``current_end_offset`` say where):
    still true, yet not the citation it was; a re-ingest gives new offsets.
    """

    content: str
    citation: Citation
    verification: Verification
    detail: str
    version: int | None = Field(default=None, ge=1)
    replaced_at: str | None = None
    # Where the indexed text is now (``moved``), or the passage closest to it
    # (``drifted``, with ``similarity`` from 0 to 1) for a person to review.
    current_start_offset: int | None = Field(default=None, ge=0)
    current_end_offset: int | None = Field(default=None, ge=0)
    similarity: float | None = Field(default=None, ge=0.0, le=1.0)
    # Where the source text was read (None when it could not be read).
    read_from: ReadFrom | None = None

    @property
    def ok(self) -> bool:
        """True when the source holds ``content`` at the cited offsets now."""
        return self.verification == "verified"

    @property
    def moved(self) -> bool:
        """True when the source holds ``content`` intact, at other offsets."""
        return self.verification == "moved"

    def to_dict(self, *, full: bool = False) -> dict[str, Any]:
        """The fetched chunk as JSON-ready data, in a search result's shape (``content``
        and a nested ``citation``) with the verdict: by default the citation's short form
        and only the optional fields that are set; ``full=True`` gives everything
        (``model_dump(mode="json")``)."""
        if full:
            return self.model_dump(mode="json")
        out: dict[str, Any] = {
            "content": self.content,
            "citation": self.citation.to_dict(),
            "verification": self.verification,
            "detail": self.detail,
        }
        for name in _FETCH_OPTIONAL:
            value = getattr(self, name)
            if value is not None:
                out[name] = value
        return out

    def to_annotation(self) -> dict[str, Any]:
        """The fetched chunk's citation as a receipt (``Citation.to_annotation``)."""
        return self.citation.to_annotation(self.content)


# A fetch's fields shown by default only when set (``version`` is the citation's).
_FETCH_OPTIONAL = (
    "replaced_at",
    "current_start_offset",
    "current_end_offset",
    "similarity",
    "read_from",
)


class QuoteCheck(_Frozen):
    """Whether a quote lies in a cited span that still reads as indexed, and why not.

    The span's own verdict is the one ``check_citation`` gives: ``moved`` when the
    span's text is intact elsewhere in the source now and holds the quote.
    ``start_offset``/``end_offset`` locate the quote in the source as it reads now
    (not in the span) when the verdict is ``verified`` or ``moved``; they are None
    otherwise.
    """

    quote: str
    verdict: QuoteVerdict
    detail: str
    citation: Citation
    start_offset: int | None = Field(default=None, ge=0)
    end_offset: int | None = Field(default=None, ge=0)
    # Where the cited source's text was read (``FetchResult.read_from``).
    read_from: ReadFrom | None = None

    @model_validator(mode="after")
    def _validate(self) -> QuoteCheck:
        located = self.start_offset is not None and self.end_offset is not None
        if located != self.found:
            raise ValueError("a found quote (verified or moved), and only one, has offsets")
        if self.start_offset is not None and self.end_offset is not None:
            _check_span(self.start_offset, self.end_offset)
        return self

    @property
    def ok(self) -> bool:
        """True when the quote is in the cited span, at the cited offsets."""
        return self.verdict == "verified"

    @property
    def found(self) -> bool:
        """True when the quote is in the text the span was indexed with and the source
        still holds that text: at the cited offsets (``verified``) or elsewhere (``moved``)."""
        return self.verdict in ("verified", "moved")


class AnswerSentence(_Frozen):
    """One sentence of a checked answer: what it cites and what the check found.

    Offsets are into the answer text (``text`` is that slice, markers included).
    ``cited`` are the citations its markers point at; ``quotes`` the checks of
    every passage it quotes; ``evidence`` the cited sentence closest to it, with
    ``similarity`` its score on the report's ``method`` scale. ``relevant`` says,
    per citation in ``cited``, whether it counts towards citation precision (ALCE:
    the sentence is supported and the citation is needed for it); empty where no
    citation is counted (no marker, or a marker naming no result).
    """

    start_offset: int = Field(ge=0)
    end_offset: int = Field(ge=0)
    text: str
    verdict: AnswerVerdict
    detail: str
    markers: list[str] = Field(default_factory=list)
    cited: list[Citation] = Field(default_factory=list)
    quotes: list[QuoteCheck] = Field(default_factory=list)
    evidence: EvidenceSpan | None = None
    similarity: float | None = None
    relevant: list[bool] = Field(default_factory=list)

    @model_validator(mode="after")
    def _validate(self) -> AnswerSentence:
        if self.relevant and len(self.relevant) != len(self.cited):
            raise ValueError("relevant needs one entry per cited result, or none")
        return self

    @property
    def ok(self) -> bool:
        """True unless the verdict is a problem (``ANSWER_PROBLEMS``)."""
        return self.verdict not in ANSWER_PROBLEMS


class AnswerReport(_Frozen):
    """The verdict on every sentence of an answer, with counts and one line per problem.

    ``method`` is how unquoted sentences were compared with their evidence
    (``embedding``: cosine under the embedder; ``terms``: the share of the
    sentence's terms the evidence holds); a sentence is ``supported`` at
    ``supported_threshold`` or above and ``weak`` from ``weak_threshold``.
    Similarity is not entailment: ``claim_judge`` names the judge that read
    each supported or weak sentence against its closest cited sentences
    (``rules`` by default) and turned the ones it found contradicted into
    ``contradicted``; a contradiction it does not see still reads as
    ``supported`` (KNOWN_LIMITATIONS.md says how often).
    ``citations`` is the verdict on each cited result's span, judged once, in the
    order of the results (the one ``check_citation`` gives): a span that ``moved``
    keeps its sentences' verdicts, and says here where its text is now.

    ``citation_recall`` and ``citation_precision`` are ALCE's (Gao et al. 2023),
    with this check's verdicts as the support judgement (SPEC.md): the share of
    claims their cited results support (``quoted`` or ``supported``), and the
    share of citations that are needed. None when the answer has no claim, or
    counts no citation.
    """

    sentences: list[AnswerSentence]
    counts: dict[str, int]
    problems: list[str]
    method: Literal["embedding", "terms"]
    supported_threshold: float
    weak_threshold: float
    citations: list[FetchResult] = Field(default_factory=list)
    citation_recall: float | None = Field(default=None, ge=0.0, le=1.0)
    citation_precision: float | None = Field(default=None, ge=0.0, le=1.0)
    claim_judge: str = "rules"

    @property
    def ok(self) -> bool:
        """True when no sentence has a problem verdict."""
        return not self.problems


class ProviderCitation(_Frozen):
    """A citation an LLM provider returned, mapped back to a groundkit result and checked.

    ``kind`` is the provider's own type (``search_result_location``,
    ``char_location``, ``file_citation``...). ``answer_text`` is the part of the
    answer it supports; ``cited_text`` what the provider says it cited, checked
    against the mapped result's span as the source reads now (``verdict``, with
    ``start_offset``/``end_offset`` in the source once verified). ``unmapped``: no
    result it could stand for; ``moved``: the span's text is intact elsewhere in the
    source now (the offsets say where the cited text is now); ``drifted``/
    ``unresolvable``: the span no longer verifies; ``not_in_span``: the cited text is
    not in the result it names.
    """

    provider: Literal["anthropic", "openai"]
    kind: str
    answer_text: str
    cited_text: str | None = None
    result_index: int | None = None
    citation: Citation | None = None
    verdict: ProviderVerdict
    detail: str
    start_offset: int | None = Field(default=None, ge=0)
    end_offset: int | None = Field(default=None, ge=0)

    @property
    def ok(self) -> bool:
        return self.verdict == "verified"


class EmbeddingIdentity(_Frozen):
    """The triple that names one embedding space."""

    provider: str = Field(min_length=1)
    model_name: str = Field(min_length=1)
    dimensions: int = Field(gt=0)


class CollectionManifest(_Frozen):
    """The embedding identity a collection was bound to, and when."""

    provider: str = Field(min_length=1)
    model_name: str = Field(min_length=1)
    dimensions: int = Field(gt=0)
    created_at: str

    @property
    def identity(self) -> EmbeddingIdentity:
        return EmbeddingIdentity(
            provider=self.provider, model_name=self.model_name, dimensions=self.dimensions
        )


class IngestFailure(_Frozen):
    """A source that could not be ingested, and why."""

    source: str
    reason: str


class ErasureReport(_Frozen):
    """What an erasing delete (``Collection.delete(..., erase=True)``) removed from the
    collection's files, beyond taking the documents out of searches.

    ``documents``, ``versions`` and ``chunks`` are the rows removed (past versions and
    chunk rows of every version), ``terms`` the vocabulary entries no document uses
    any more, ``vector_rows`` the vector rows deleted and ``vector_versions`` the older
    vector-table versions removed (``vector_bytes``: the bytes their files held).
    ``packs_written`` and ``packs_removed`` count the lexical index's files rewritten
    and deleted, ``snapshots`` the stored texts deleted, ``bytes_vacuumed`` how much
    the metadata store's files shrank. ``unfinished`` names each step that could not
    finish (empty: the erase is complete); running the erase again completes it.
    """

    documents: int = Field(default=0, ge=0)
    versions: int = Field(default=0, ge=0)
    chunks: int = Field(default=0, ge=0)
    terms: int = Field(default=0, ge=0)
    vector_rows: int = Field(default=0, ge=0)
    vector_versions: int = Field(default=0, ge=0)
    vector_bytes: int = Field(default=0, ge=0)
    packs_written: int = Field(default=0, ge=0)
    packs_removed: int = Field(default=0, ge=0)
    snapshots: int = Field(default=0, ge=0)
    bytes_vacuumed: int = Field(default=0, ge=0)
    unfinished: list[str] = Field(default_factory=list)

    @property
    def complete(self) -> bool:
        """Whether every step finished (nothing is left in ``unfinished``)."""
        return not self.unfinished


class DeleteReport(_Frozen):
    """What a delete removed: the stored sources of the documents that went (with
    every version, their vectors and snapshots), and the names that matched nothing.
    ``erasure`` is set by an erasing delete only (adr/0053-erasure.md)."""

    deleted: list[str] = Field(default_factory=list)
    missing: list[str] = Field(default_factory=list)
    erasure: ErasureReport | None = None


class OptimizeReport(_Frozen):
    """What merging the lexical index did."""

    segments_before: int = Field(ge=0)
    segments_after: int = Field(ge=0)
    merged: bool


IngestStage = Literal["discover", "read", "chunk", "store", "model", "embed"]


class IngestProgress(_Frozen):
    """One progress event of an ingest, for ``Collection.ingest(progress=...)``.

    ``stage`` is what is being counted and ``unit`` what it counts: ``discover``,
    ``read`` (files, out of the files found), ``chunk`` (chunks cut from changed files),
    ``store`` (chunks written, out of those cut), ``model`` (the embedding model
    loading: 0 of 1, then 1 of 1, ``detail`` naming it) and ``embed`` (chunks given
    vectors, embedded or reused, out of those waiting). ``done`` counts from the start
    of the ingest and never goes down; ``total`` is what is known so far (it grows while
    files are still being read; ``None`` when nothing bounds it yet). Every stage that
    ran ends with an event where ``done == total``. docs/progress.md drives tqdm and
    rich bars with it.
    """

    stage: IngestStage
    done: int = Field(ge=0)
    total: int | None = Field(default=None, ge=0)
    unit: Literal["files", "chunks", "models"]
    detail: str | None = None

    @property
    def finished(self) -> bool:
        return self.total is not None and self.done >= self.total


class IngestWarning(_Frozen):
    """Something an ingest passed over in a source it did index (a front matter field
    it could not store, say), and why."""

    source: str
    reason: str


class IngestReport(_Frozen):
    """What one ingest did, by source (each list sorted)."""

    added: list[str] = Field(default_factory=list)
    updated: list[str] = Field(default_factory=list)
    unchanged: list[str] = Field(default_factory=list)
    removed: list[str] = Field(default_factory=list)
    failed: list[IngestFailure] = Field(default_factory=list)
    # Indexed, with something left out (one line each, sorted by source).
    warnings: list[IngestWarning] = Field(default_factory=list)
    skipped: int = Field(default=0, ge=0)
    embedded: int = Field(default=0, ge=0)
    chunks_embedded: int = Field(default=0, ge=0)
    chunks_reused: int = Field(default=0, ge=0)
    # What the ingest found damaged in derived state and repaired, one line each.
    repairs: list[str] = Field(default_factory=list)
    # What the write stored but could not save in derived state (the lexical index
    # files, say), one line each: the data is in and searchable, and the next open
    # rebuilds what is missing from the store.
    notices: list[str] = Field(default_factory=list)
    generation: int = Field(default=0, ge=0)

    @property
    def changed(self) -> bool:
        return bool(self.added or self.updated or self.removed)


@runtime_checkable
class PackStore(Protocol):
    """Where a lexical index's packs and manifest are kept: the seam between the
    live index (``groundkit.lexical.live``) and its stores (``groundkit.storage.
    segments``, ``object_segments``). It lives here because those two packages
    import nothing of each other; ``groundkit.testing.conformance.PackStoreConformance``
    pins down what an implementation must do.
    """

    @property
    def location(self) -> str: ...

    async def read_manifest(self) -> dict[str, Any] | None: ...

    async def write_manifest(self, manifest: Mapping[str, Any]) -> None: ...

    async def write_pack(
        self, name: str, arrays: Mapping[str, npt.NDArray[Any]], meta: Mapping[str, Any]
    ) -> dict[str, Any]: ...

    async def load_pack(
        self, entry: Mapping[str, Any]
    ) -> tuple[dict[str, npt.NDArray[Any]], dict[str, Any]]: ...

    def changed_packs(self, entries: Iterable[Mapping[str, Any]]) -> list[str]:
        """Names of the packs among ``entries`` whose file on this host (the one a
        load maps) is gone or no longer of the entry's size: cheap, asked often."""
        ...

    async def remove_unreferenced(self, keep: Iterable[str]) -> int: ...

    async def clear(self) -> None: ...

    def writer_lock(self, *, wait: bool = True) -> AbstractAsyncContextManager[bool]: ...


@dataclass(frozen=True, slots=True)
class PackCheck:
    """A check of a loaded pack's arrays beyond its checksum: ``run`` raises
    ``ValueError`` when they do not fit together. A store may remember that a file
    passed it and skip it while that file stays unchanged, so ``name`` says which
    check it is and must change whenever what it checks does."""

    name: str
    run: Callable[[Mapping[str, npt.NDArray[Any]]], None]


@runtime_checkable
class CheckedPackStore(PackStore, Protocol):
    """A ``PackStore`` that runs a ``PackCheck`` on the packs it loads, and may skip
    both the checksum and the check for a file it saw pass them, unchanged since
    (``LocalSegments``: adr/0075-check-cache.md). The live index runs the check
    itself on any other store."""

    async def load_checked_pack(
        self, entry: Mapping[str, Any], check: PackCheck
    ) -> tuple[dict[str, npt.NDArray[Any]], dict[str, Any]]: ...
