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
either. ``filters`` are groundkit's
(``{"team": "infra", "year": {"gte": 2020}}``, SPEC 4.8), not Haystack's filter
syntax. Each ``Document`` has the chunk id as ``id``, the chunk as ``content``, its
``score``, and in ``meta`` its ``source``, ``page``, ``fields`` and the citation
under ``"groundkit_citation"``.

``records_from_documents`` turns Haystack documents (a converter's output) into
records for ``Collection.add_documents``; their ids are Haystack's, which are
derived from content and meta, so re-adding the same document changes nothing.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Unpack

from groundkit.contracts import Citation, Record, RetrievalResult
from groundkit.errors import ConfigurationError
from groundkit.integrations._common import (
    CITATION_KEY,
    Searcher,
    citation_from_metadata,
    record_from,
    result_metadata,
)
from groundkit.retrieval.request import SearchOptions

try:
    from haystack import Document, component
except ImportError:  # pragma: no cover - exercised without the extra
    raise ConfigurationError(
        "the Haystack retriever needs the 'haystack' extra: pip install groundkit[haystack]"
    ) from None

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
        """The options are ``SearchRequest``'s fields, checked here; ``top_k``'s
        default is Haystack retrievers' usual ten."""
        self._searcher = Searcher.of(collection, top_k=top_k, **options)

    @component.output_types(documents=list[Document])
    def run(
        self,
        query: str,
        top_k: int | None = None,
        filters: dict[str, Any] | None = None,
    ) -> dict[str, list[Document]]:
        """Search; ``top_k`` and ``filters`` override the component's for this run."""
        response = self._searcher.search(query, top_k=top_k, filters=filters)
        return {"documents": [to_document(result) for result in response.results]}

    @component.output_types(documents=list[Document])
    async def run_async(
        self,
        query: str,
        top_k: int | None = None,
        filters: dict[str, Any] | None = None,
    ) -> dict[str, list[Document]]:
        """``run`` for pipelines run asynchronously."""
        response = await self._searcher.asearch(query, top_k=top_k, filters=filters)
        return {"documents": [to_document(result) for result in response.results]}


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
    records: list[Record] = []
    for index, document in enumerate(documents):
        meta: Mapping[str, Any] = document.meta or {}
        record_id = meta.get(id_key) if id_key is not None else document.id
        records.append(
            record_from(record_id, document.content, meta, fields, f"Haystack document {index}")
        )
    return records
