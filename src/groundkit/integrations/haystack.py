"""groundkit as a Haystack retriever component (``pip install groundkit[haystack]``).

::

    from haystack import Pipeline
    from groundkit.integrations.haystack import GroundkitRetriever, citation_of

    pipeline = Pipeline()
    pipeline.add_component("retriever", GroundkitRetriever(col, top_k=4))
    out = pipeline.run({"retriever": {"query": "how hot should green tea be"}})
    citation = citation_of(out["retriever"]["documents"][0])

``col`` is a ``groundkit.Collection`` or ``groundkit.sync.SyncCollection``; ``run`` and
``run_async`` (``Pipeline.run_async``; ``AsyncPipeline`` in Haystack 2) work with
either. ``filters`` are groundkit's (``{"team": "infra", "year": {"gte": 2020}}``,
SPEC 4.8) or Haystack's (``{"field": "meta.team", "operator": "==", "value":
"infra"}``), translated by ``groundkit.retrieval.filters.from_haystack``; what has
no groundkit form (an ``OR`` across fields, say) is refused with a message saying
so. Each ``Document`` has the chunk id as ``id``, the chunk as ``content``, its
``score``, and in ``meta`` its ``source``, ``page``, ``fields`` and the citation
under ``"groundkit_citation"``.

The component serialises: ``Pipeline.dumps()`` writes where its collection is
(index directory and name, or the PostgreSQL URL without a password and the storage
URI), its clearance and the search settings, never the collection's contents or
credentials; ``Pipeline.loads()`` gives a retriever that reopens that collection
(never creating it) at its first run or ``warm_up()``, with the embedding model
the collection records when it searches by vectors, and ``close()`` closes it.
Importing this module allows Haystack to deserialise its classes (Haystack
refuses modules outside its allowlist).

``records_from_documents`` turns Haystack documents (a converter's output) into
records for ``Collection.add_documents``, choosing the metadata kept as fields;
``add_documents`` also takes Haystack documents as they are. Their ids are
Haystack's, which are derived from content and meta, so re-adding the same document
changes nothing.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any, Unpack

from groundkit.contracts import Citation, Record, RetrievalResult
from groundkit.errors import ConfigurationError, InvalidQueryError
from groundkit.integrations._common import (
    CITATION_KEY,
    CollectionReference,
    Searcher,
    check_record_keys,
    citation_from_metadata,
    framework_items,
    framework_object,
    record_from,
    result_metadata,
)
from groundkit.retrieval.filters import from_haystack, meant_for_haystack
from groundkit.retrieval.request import SearchOptions, SearchRequest

try:
    from haystack import Document, component, default_from_dict, default_to_dict
except ImportError:  # pragma: no cover - exercised without the extra
    raise ConfigurationError(
        "the Haystack retriever needs the 'haystack' extra: pip install groundkit[haystack]"
    ) from None

try:  # Haystack 3 deserialises only modules on its allowlist.
    from haystack.core.serialization import allow_deserialization_module
except ImportError:  # pragma: no cover - Haystack 2 has no allowlist
    pass
else:
    allow_deserialization_module(__name__)

__all__ = [
    "CITATION_KEY",
    "GroundkitRetriever",
    "citation_of",
    "records_from_documents",
    "to_document",
]


@component
class GroundkitRetriever:
    """A Haystack component: ``query`` in, ``documents`` out, from one collection."""

    def __init__(
        self,
        collection: Any,
        *,
        top_k: int = 10,
        **options: Unpack[SearchOptions],
    ) -> None:
        """The options are ``SearchRequest``'s fields, checked here (Haystack filter
        syntax translated first); ``top_k``'s default is Haystack retrievers' usual ten."""
        settings: dict[str, Any] = {"top_k": top_k, **options}
        given = settings.get("filters")
        if given is not None:
            if not isinstance(given, Mapping):
                raise InvalidQueryError(
                    f"filters must be a mapping (Haystack filter syntax or groundkit's), "
                    f"not {type(given).__name__}"
                )
            settings["filters"] = dict(given)
        if isinstance(settings.get("as_of"), datetime):
            # Kept as ISO 8601 with its offset, which a pipeline file can hold.
            settings["as_of"] = settings["as_of"].isoformat()
        self._settings = settings
        SearchRequest.checked_options(**self._search_options())
        self._owned: Any = None  # the collection from_dict reopened, once it has
        self._opening = threading.Lock()
        if isinstance(collection, CollectionReference):
            self._reference = collection
            self._searcher: Searcher | None = None
        else:
            self._searcher = self._make_searcher(collection)
            self._reference = CollectionReference.of(collection)

    def _search_options(self) -> dict[str, Any]:
        options = dict(self._settings)
        if options.get("filters") is not None:
            options["filters"] = _groundkit_filters(options["filters"])
        return options

    def _make_searcher(self, collection: object) -> Searcher:
        return Searcher.of(collection, **self._search_options())

    def warm_up(self) -> None:
        """Reopen the collection of a deserialised retriever (once; the first run
        does it otherwise)."""
        self._ready()

    def _ready(self) -> Searcher:
        with self._opening:  # concurrent first runs reopen the collection once
            if self._searcher is None:
                vectors = self._settings.get("mode", "bm25") != "bm25"
                self._owned = self._reference.open(vectors=vectors)
                self._searcher = self._make_searcher(self._owned)
            return self._searcher

    def close(self) -> None:
        """Close the collection this retriever reopened (one given to it stays open)."""
        owned, self._owned = self._owned, None
        if owned is not None:
            self._searcher = None
            owned.close()

    def to_dict(self) -> dict[str, Any]:
        """Where the collection is and the search settings (``Pipeline.dumps``)."""
        return default_to_dict(self, collection=self._reference.to_dict(), **self._settings)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> GroundkitRetriever:
        """A retriever that reopens the serialised collection when first used."""
        params = data.get("init_parameters", {}) if isinstance(data, Mapping) else None
        if not isinstance(params, Mapping):
            raise ConfigurationError(
                "a serialised groundkit retriever is a mapping with init_parameters (a "
                "mapping holding collection and the search options), as to_dict() gives"
            )
        params = dict(params)
        params["collection"] = CollectionReference.from_dict(params.get("collection"))
        return default_from_dict(cls, {**data, "init_parameters": params})

    @component.output_types(documents=list[Document])
    def run(
        self,
        query: str,
        top_k: int | None = None,
        filters: dict[str, Any] | None = None,
    ) -> dict[str, list[Document]]:
        """Search; ``top_k`` and ``filters`` override the component's for this run
        (``filters={}``, like None, keeps the component's, as Haystack's retrievers do)."""
        response = self._ready().search(query, top_k=top_k, filters=_groundkit_filters(filters))
        return {"documents": [to_document(result) for result in response.results]}

    @component.output_types(documents=list[Document])
    async def run_async(
        self,
        query: str,
        top_k: int | None = None,
        filters: dict[str, Any] | None = None,
    ) -> dict[str, list[Document]]:
        """``run`` for pipelines run asynchronously."""
        searcher = self._searcher
        if searcher is None:
            searcher = await asyncio.to_thread(self._ready)
        response = await searcher.asearch(query, top_k=top_k, filters=_groundkit_filters(filters))
        return {"documents": [to_document(result) for result in response.results]}


def _groundkit_filters(filters: Mapping[str, Any] | None) -> Mapping[str, Any] | None:
    """Haystack-syntax filters translated; groundkit's as they are; an empty mapping is
    None. A run's filters replace the component's only when they hold a condition:
    Haystack's retrievers keep their own for ``filters={}`` (``apply_filter_policy``
    gives ``runtime_filters or init_filters``), and so does this one."""
    if isinstance(filters, Mapping) and not filters:
        return None
    if filters is not None and meant_for_haystack(filters):
        return from_haystack(filters)
    return filters


def to_document(result: RetrievalResult) -> Document:
    """A search result as a Haystack ``Document`` carrying its citation."""
    return Document(
        id=result.chunk_id,
        content=result.content,
        meta=result_metadata(result),
        score=result.score,
    )


def citation_of(document: Document) -> Citation:
    """The ``Citation`` of a document a ``GroundkitRetriever`` returned."""
    framework_object(document, Document, "Haystack Document")
    return citation_from_metadata(document.meta, "Haystack document")


def records_from_documents(
    documents: Iterable[Document],
    *,
    id_key: str | None = None,
    fields: list[str] | None = None,
) -> list[Record]:
    """Records for ``Collection.add_documents`` from Haystack documents (text only).

    The id is ``document.id`` (Haystack's own, from content and meta), or
    ``meta[id_key]``; fields are the meta (only ``fields`` when given).
    """
    check_record_keys(id_key, fields, "records_from_documents")
    given = framework_items(documents, Document, "Haystack Document", "records_from_documents")
    records: list[Record] = []
    for index, document in enumerate(given):
        meta: Mapping[str, Any] = document.meta or {}
        record_id = meta.get(id_key) if id_key is not None else document.id
        records.append(
            record_from(record_id, document.content, meta, fields, f"Haystack document {index}")
        )
    return records
