"""groundkit as a LangChain retriever (``pip install groundkit[langchain]``).

::

    from groundkit.integrations.langchain import GroundkitRetriever, citation_of

    retriever = GroundkitRetriever(collection=col, top_k=4, mode="hybrid")
    docs = retriever.invoke("how hot should green tea be")   # or: await retriever.ainvoke(...)
    citation = citation_of(docs[0])                          # a groundkit.Citation

``collection`` is a ``groundkit.Collection`` (async) or ``groundkit.sync.SyncCollection``.
Both ``invoke`` and ``ainvoke`` work with either: a call runs on the loop the
collection was opened on. Each ``Document`` has the chunk id as its ``id``, the
chunk as ``page_content``, and in ``metadata`` its ``source``, ``page``, ``score``,
``fields`` and the citation under ``"groundkit_citation"``, which ``citation_of``
reads back for ``groundkit.check_citation`` or ``Collection.verify``.

``records_from_documents`` turns a LangChain loader's documents into records for
``Collection.add_documents``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any, Literal

from groundkit.contracts import Citation, ContextKind, Record, RetrievalResult, SearchMode
from groundkit.errors import ConfigurationError, InvalidQueryError
from groundkit.integrations._common import (
    CITATION_KEY,
    Searcher,
    check_record_keys,
    citation_from_metadata,
    framework_items,
    framework_object,
    record_from,
    result_metadata,
)
from groundkit.retrieval.request import Reorder, SearchRequest

try:
    from langchain_core.callbacks import (
        AsyncCallbackManagerForRetrieverRun,
        CallbackManagerForRetrieverRun,
    )
    from langchain_core.documents import Document
    from langchain_core.retrievers import BaseRetriever
    from pydantic import Field, ValidationError
except ImportError:  # pragma: no cover - exercised without the extra
    raise ConfigurationError(
        "the LangChain retriever needs the 'langchain' extra: pip install groundkit[langchain]"
    ) from None

__all__ = [
    "CITATION_KEY",
    "GroundkitRetriever",
    "citation_of",
    "records_from_documents",
    "to_document",
]


class GroundkitRetriever(BaseRetriever):
    """A LangChain ``BaseRetriever`` over one groundkit collection."""

    collection: Any
    """A ``groundkit.Collection`` or ``groundkit.sync.SyncCollection``."""
    # The search options: SearchRequest's fields (a test pins them); top_k's default is
    # LangChain's usual four.
    top_k: int = Field(default=4, description=SearchRequest.describe("top_k"))
    mode: SearchMode = Field(default="bm25", description=SearchRequest.describe("mode"))
    rerank: bool = Field(default=False, description=SearchRequest.describe("rerank"))
    filters: dict[str, Any] | None = Field(
        default=None, description=SearchRequest.describe("filters")
    )
    as_of: datetime | None = Field(default=None, description=SearchRequest.describe("as_of"))
    expand: ContextKind | None = Field(default=None, description=SearchRequest.describe("expand"))
    mmr: float | None = Field(default=None, description=SearchRequest.describe("mmr"))
    reorder: Reorder | None = Field(default=None, description=SearchRequest.describe("reorder"))
    rewrite: bool = Field(default=False, description=SearchRequest.describe("rewrite"))
    min_relevance: float | Literal["auto"] | None = Field(
        default=None, description=SearchRequest.describe("min_relevance")
    )

    def __init__(self, **data: Any) -> None:
        """The options are checked here, in groundkit's words (``InvalidQueryError``),
        and the collection too: a bad retriever fails where it is made, as the
        LlamaIndex and Haystack ones do, not at its first ``invoke``. LangChain's models
        ignore a keyword they do not know; this one refuses it, so a ``k=3`` meant as
        ``top_k`` is not dropped without a word."""
        unknown = sorted(set(data) - set(type(self).model_fields))
        if unknown:
            options = [name for name in SearchRequest.model_fields if name != "query"]
            raise InvalidQueryError(
                f"GroundkitRetriever has no option {', '.join(map(repr, unknown))}; it takes "
                f"collection and the search options {', '.join(options)} (top_k is "
                "LangChain's k; give options directly, not as search_kwargs)"
            )
        SearchRequest.checked_options(
            **{name: value for name, value in data.items() if name in SearchRequest.model_fields}
        )
        try:
            super().__init__(**data)
        except ValidationError as exc:
            first = exc.errors(include_url=False, include_input=False)[0]
            where = ".".join(str(part) for part in first["loc"]) or "the retriever"
            raise InvalidQueryError(f"GroundkitRetriever {where}: {first['msg']}") from None
        self._searcher()

    def _searcher(self) -> Searcher:
        names = [name for name in SearchRequest.model_fields if name != "query"]
        return Searcher.of(self.collection, **{name: getattr(self, name) for name in names})

    # LangChain hands ``invoke(query, **kwargs)``'s keywords on only to a method that
    # takes them, and drops them without a word otherwise: ``filters=`` given to
    # ``invoke`` would search unfiltered. So they are taken, and checked.
    def _get_relevant_documents(
        self, query: str, *, run_manager: CallbackManagerForRetrieverRun, **options: Any
    ) -> list[Document]:
        top_k, filters = _call_options(options)
        response = self._searcher().search(query, top_k=top_k, filters=filters)
        return [to_document(result) for result in response.results]

    async def _aget_relevant_documents(
        self, query: str, *, run_manager: AsyncCallbackManagerForRetrieverRun, **options: Any
    ) -> list[Document]:
        top_k, filters = _call_options(options)
        response = await self._searcher().asearch(query, top_k=top_k, filters=filters)
        return [to_document(result) for result in response.results]


# LangChain's own keyword of ``invoke``, read by its callbacks, which it passes on too.
_LANGCHAIN_KEYWORDS = frozenset({"verbose"})


def _call_options(options: Mapping[str, Any]) -> tuple[int | None, Mapping[str, Any] | None]:
    """``top_k`` and ``filters`` given to one ``invoke``, replacing the retriever's (an
    empty ``filters`` keeps them, as Haystack's filter policy does); any other keyword
    is refused, never ignored."""
    unknown = sorted(set(options) - {"top_k", "filters"} - _LANGCHAIN_KEYWORDS)
    if unknown:
        raise InvalidQueryError(
            f"GroundkitRetriever.invoke takes top_k and filters, not "
            f"{', '.join(map(repr, unknown))}; set other options on the retriever"
        )
    filters = options.get("filters")
    if isinstance(filters, Mapping) and not filters:
        filters = None
    return options.get("top_k"), filters


def to_document(result: RetrievalResult) -> Document:
    """A search result as a LangChain ``Document`` carrying its citation."""
    return Document(
        id=result.chunk_id, page_content=result.content, metadata=result_metadata(result)
    )


def citation_of(document: Document) -> Citation:
    """The ``Citation`` of a document a ``GroundkitRetriever`` returned.

    ``RetrievalError`` for a document that carries none (or a damaged one).
    """
    framework_object(document, Document, "LangChain Document")
    return citation_from_metadata(document.metadata, "LangChain document")


def records_from_documents(
    documents: Iterable[Document],
    *,
    id_key: str | None = None,
    fields: list[str] | None = None,
) -> list[Record]:
    """Records for ``Collection.add_documents`` from LangChain documents (a loader's output).

    The id is ``document.id``, or ``metadata[id_key]`` when ``id_key`` is given; a
    document without one is an ``IngestionError`` (an id is what makes a re-add a
    replacement). Fields are the metadata (only the keys in ``fields`` when given),
    checked by the field rules when added.
    """
    check_record_keys(id_key, fields, "records_from_documents")
    given = framework_items(documents, Document, "LangChain Document", "records_from_documents")
    records: list[Record] = []
    for index, document in enumerate(given):
        metadata: Mapping[str, Any] = document.metadata or {}
        record_id = metadata.get(id_key) if id_key is not None else document.id
        records.append(
            record_from(
                record_id,
                document.page_content,
                metadata,
                fields,
                f"LangChain document {index}",
            )
        )
    return records
