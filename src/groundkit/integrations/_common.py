"""What the framework retrievers share: searching a collection from sync or async
code, and carrying a result's citation in a framework document's metadata."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, fields
from typing import Any
from urllib.parse import urlsplit

from groundkit.collection import Collection
from groundkit.contracts import (
    Citation,
    FieldValue,
    Record,
    RetrievalResult,
    SearchResponse,
)
from groundkit.errors import (
    ConfigurationError,
    IngestionError,
    InvalidInputError,
    InvalidQueryError,
    RetrievalError,
)
from groundkit.retrieval.request import SearchRequest
from groundkit.sync import SyncCollection, background_loop, run, run_async

__all__ = [
    "CITATION_KEY",
    "CollectionReference",
    "Searcher",
    "check_record_keys",
    "citation_from_metadata",
    "framework_items",
    "framework_object",
    "record_from",
    "result_metadata",
]

# The metadata key under which every returned document carries its citation (a
# JSON-ready dict that ``Citation.model_validate`` reads back).
CITATION_KEY = "groundkit_citation"
# Keys the frameworks should not show an LLM or an embedder as part of the text.
HIDDEN_KEYS = (CITATION_KEY, "chunk_id", "document_id", "score", "collection", "context")

Searchable = Collection | SyncCollection


@dataclass(frozen=True)
class CollectionReference:
    """Where a collection is, enough to reopen it: what a serialised retriever keeps.

    Never its contents, storage options or a password: credentials come from the
    environment where the retriever is loaded (``PGPASSWORD``, ``AWS_*``).
    """

    name: str
    index_dir: str | None = None
    metadata_url: str | None = None
    storage_uri: str | None = None
    clearance: str | None = None

    @classmethod
    def of(cls, collection: Searchable) -> CollectionReference:
        col = collection.aio if isinstance(collection, SyncCollection) else collection
        where = col.location
        return cls(
            name=where.name,
            index_dir=str(where.index_dir) if where.index_dir is not None else None,
            metadata_url=where.metadata_url,
            storage_uri=where.storage_uri,
            clearance=col.clearance,
        )

    def to_dict(self) -> dict[str, Any]:
        if self.metadata_url is not None and urlsplit(self.metadata_url).password:
            raise ConfigurationError(
                "this retriever's collection is opened with a password in its PostgreSQL "
                "URL, which is not written into a pipeline; open it with the password in "
                "PGPASSWORD or ~/.pgpass instead"
            )
        return {k: v for k, v in asdict(self).items() if v is not None}

    @classmethod
    def from_dict(cls, data: object) -> CollectionReference:
        known = {f.name for f in fields(cls)}
        if not isinstance(data, Mapping) or not isinstance(data.get("name"), str):
            raise ConfigurationError(
                "a serialised groundkit retriever needs collection: {name: ..., index_dir: "
                "... or metadata_url: ...}"
            )
        unknown = sorted(str(k) for k in data if k not in known)
        if unknown:
            raise ConfigurationError(
                f"a serialised groundkit collection has unknown key(s) {', '.join(unknown)}; "
                f"it takes {', '.join(sorted(known))}"
            )
        wrong = sorted(str(k) for k, v in data.items() if v is not None and not isinstance(v, str))
        if wrong:
            raise ConfigurationError(
                f"a serialised groundkit collection's {', '.join(wrong)} must be text "
                "(a path, URL or name)"
            )
        return cls(**{str(k): v for k, v in data.items()})

    def open(self, *, vectors: bool) -> SyncCollection:
        """The collection, reopened (never created); with ``vectors``, the embedding
        model it records is loaded so dense and hybrid searches work."""
        from groundkit.providers.factory import require_embedder_for_manifest

        opened: SyncCollection = SyncCollection.open(
            self.index_dir,
            self.name,
            metadata_url=self.metadata_url,
            storage_uri=self.storage_uri,
            create=False,
            clearance=self.clearance,
            embedder_for=require_embedder_for_manifest if vectors else None,
        )
        return opened


@dataclass(frozen=True)
class Searcher:
    """One collection and the search options a retriever was made with (every
    ``SearchRequest`` field but the query, checked when the retriever is made)."""

    collection: Collection
    # Given a SyncCollection: its collection lives on groundkit's background loop.
    synchronous: bool
    options: Mapping[str, Any]

    @classmethod
    def of(cls, collection: object, **options: Any) -> Searcher:
        checked = SearchRequest.checked_options(**options)
        if isinstance(collection, SyncCollection):
            return cls(collection.aio, True, checked)
        if isinstance(collection, Collection):
            return cls(collection, False, checked)
        raise ConfigurationError(
            "a groundkit retriever needs a groundkit.Collection or groundkit.sync.SyncCollection, "
            f"not {type(collection).__name__}"
        )

    @property
    def home(self) -> asyncio.AbstractEventLoop | None:
        """The loop the collection lives on at this call: read each time, as a collection
        whose loop ended moves to groundkit's background loop at its next blocking call."""
        return background_loop() if self.synchronous else self.collection.loop

    def request(
        self,
        query: str | SearchRequest,
        top_k: int | None = None,
        filters: Mapping[str, Any] | None = None,
    ) -> SearchRequest:
        """The search a call asks for: ``query`` with the retriever's options, ``top_k``
        and ``filters`` replacing its own when given; a ``SearchRequest`` as it is."""
        if isinstance(query, SearchRequest):
            return SearchRequest.of(
                query, top_k, **({} if filters is None else {"filters": filters})
            )
        given = {"top_k": top_k, "filters": filters}
        chosen = {name: value for name, value in given.items() if value is not None}
        return SearchRequest(query=query, **{**self.options, **chosen})

    def search(
        self,
        query: str | SearchRequest,
        *,
        top_k: int | None = None,
        filters: Mapping[str, Any] | None = None,
    ) -> SearchResponse:
        """Blocking: on the collection's own loop when it runs in another thread (or
        groundkit's background loop), so sync framework calls work from anywhere
        but that loop's own thread."""
        request = self.request(query, top_k, filters)
        response: SearchResponse = run(self.collection.search(request), home=self.home)
        return response

    async def asearch(
        self,
        query: str | SearchRequest,
        *,
        top_k: int | None = None,
        filters: Mapping[str, Any] | None = None,
    ) -> SearchResponse:
        request = self.request(query, top_k, filters)
        response: SearchResponse = await run_async(self.collection.search(request), home=self.home)
        return response


def result_metadata(result: RetrievalResult) -> dict[str, Any]:
    """A result's metadata for a framework document: where it is from and its citation."""
    citation = result.citation
    return {
        "source": result.source,
        "page": citation.page,
        "score": result.score,
        "chunk_id": result.chunk_id,
        "document_id": result.document_id,
        "collection": result.collection,
        "fields": result.fields,
        CITATION_KEY: citation.model_dump(mode="json"),
        # With expand=..., the passage around the chunk (its text, offsets, the chunks it
        # spans and the hits folded into it); the document's text stays the cited chunk.
        "context": None if result.context is None else result.context.model_dump(mode="json"),
    }


def citation_from_metadata(metadata: Mapping[str, Any] | None, what: str) -> Citation:
    """The ``Citation`` a retriever put in ``metadata``; ``RetrievalError`` without one."""
    raw = metadata.get(CITATION_KEY) if isinstance(metadata, Mapping) else None
    if raw is None:
        raise RetrievalError(
            f"this {what} carries no groundkit citation (metadata[{CITATION_KEY!r}]); only "
            "what a groundkit retriever returned can be turned back into one"
        )
    if isinstance(raw, Citation):
        return raw
    try:
        return Citation.model_validate(raw)
    except InvalidQueryError:
        raise RetrievalError(
            f"this {what}'s metadata[{CITATION_KEY!r}] is not a valid groundkit citation"
        ) from None


def record_from(
    record_id: object,
    text: object,
    metadata: Mapping[str, Any] | None,
    fields: list[str] | None,
    where: str,
) -> Record:
    """A ``Record`` from a framework document's id, text and metadata.

    ``fields`` names the metadata keys to keep as fields (None: all of them); a key
    it names that the metadata lacks is an error, never skipped.
    """
    if record_id is None or record_id == "":
        raise IngestionError(
            f"{where} has no id; give each document a stable id (a re-add with another id "
            "would store it twice), or pass id_key= naming the metadata key that holds one"
        )
    if fields is not None and (
        isinstance(fields, str) or not all(isinstance(key, str) for key in fields)
    ):
        # A bare "title" would be read as the keys "t", "i", "t", ...
        raise InvalidInputError(f"fields= is a list of metadata keys, not {fields!r}")
    chosen: dict[str, FieldValue] = {}
    source = dict(metadata or {})
    keys = list(source) if fields is None else fields
    for key in keys:
        if key not in source:
            raise IngestionError(f"{where}: its metadata has no key {key!r} (named in fields=)")
        chosen[key] = source[key]
    try:
        # Validated as given: Record refuses an id or text that is not a str.
        return Record.model_validate({"id": record_id, "text": text, "fields": chosen})
    except IngestionError as exc:
        raise IngestionError(f"{where}: {exc}") from None


def check_record_keys(id_key: object, fields: object, function: str) -> None:
    """``InvalidInputError`` for an ``id_key=`` that is not one metadata key (a str) or
    a ``fields=`` that is not a list of them, before any document is converted (an
    unhashable key would otherwise escape as a TypeError, an int one read no id)."""
    if id_key is not None and not isinstance(id_key, str):
        raise InvalidInputError(
            f"{function}: id_key= is the metadata key holding each document's id, a str, "
            f"not {type(id_key).__name__}"
        )
    if fields is None:
        return
    if not isinstance(fields, list | tuple):
        # A bare "title" would be read as the keys "t", "i", "t", ...
        raise InvalidInputError(
            f"{function}: fields= is a list of metadata keys, not {type(fields).__name__}"
        )
    for key in fields:
        if not isinstance(key, str):
            raise InvalidInputError(
                f"{function}: fields= is a list of metadata keys (str), and holds a "
                f"{type(key).__name__}"
            )


def framework_object(value: object, kinds: type | tuple[type, ...], what: str) -> None:
    """``RetrievalError`` when ``citation_of`` is given something other than the
    framework's document (``None``, a dict, a plain string), not an AttributeError."""
    if not isinstance(value, kinds):
        raise RetrievalError(
            f"citation_of takes a {what} a groundkit retriever returned, not {type(value).__name__}"
        )


def framework_items(
    items: object, kinds: type | tuple[type, ...], what: str, function: str
) -> list[Any]:
    """``items`` as a list of the framework's documents; ``InvalidInputError`` naming the
    first that is not one (or ``items`` when it is no list), before any is converted."""
    # One document given bare is iterable too (a pydantic model yields its fields).
    single = isinstance(items, (kinds, str, bytes, Mapping))
    if single or not isinstance(items, Iterable):
        raise InvalidInputError(
            f"{function} takes a list of {what}s, not {type(items).__name__}"
            + ("; wrap it in a list: [item]" if isinstance(items, kinds) else "")
        )
    listed = list(items)
    for index, item in enumerate(listed):
        if not isinstance(item, kinds):
            raise InvalidInputError(
                f"{function}: item {index} is a {type(item).__name__}, not a {what}"
            )
    return listed
