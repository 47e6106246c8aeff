"""groundkit as a LlamaIndex retriever (``pip install groundkit[llama-index]``).

::

    from groundkit.integrations.llama_index import GroundkitRetriever, citation_of

    retriever = GroundkitRetriever(col, top_k=4, mode="hybrid")
    nodes = retriever.retrieve("how hot should green tea be")  # or: await retriever.aretrieve(...)
    citation = citation_of(nodes[0])

``col`` is a ``groundkit.Collection`` or ``groundkit.sync.SyncCollection``; ``retrieve``
and ``aretrieve`` work with either. Each ``NodeWithScore`` holds a ``TextNode``
whose ``id_`` is the chunk id, ``text`` the chunk, ``start_char_idx`` /
``end_char_idx`` its exact offsets in the source and whose ``SOURCE``
relationship names the groundkit document. Its metadata carries ``source``,
``page``, ``fields`` and the citation (under ``"groundkit_citation"``, hidden from
the LLM and embedding views of the node).

``records_from_nodes`` turns a LlamaIndex reader's documents into records for
``Collection.add_documents``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Unpack

from groundkit.contracts import Citation, Record, RetrievalResult
from groundkit.errors import ConfigurationError, InvalidQueryError, RetrievalError
from groundkit.integrations._common import (
    CITATION_KEY,
    HIDDEN_KEYS,
    Searcher,
    check_record_keys,
    citation_from_metadata,
    framework_items,
    framework_object,
    record_from,
    result_metadata,
)
from groundkit.retrieval.request import SearchOptions

try:
    from llama_index.core.callbacks import CallbackManager
    from llama_index.core.retrievers import BaseRetriever
    from llama_index.core.schema import (
        BaseNode,
        MetadataMode,
        NodeRelationship,
        NodeWithScore,
        QueryBundle,
        RelatedNodeInfo,
        TextNode,
    )
except ImportError:  # pragma: no cover - exercised without the extra
    raise ConfigurationError(
        "the LlamaIndex retriever needs the 'llama-index' extra: pip install groundkit[llama-index]"
    ) from None

__all__ = [
    "CITATION_KEY",
    "GroundkitRetriever",
    "citation_of",
    "records_from_nodes",
    "to_node",
]


class GroundkitRetriever(BaseRetriever):
    """A LlamaIndex ``BaseRetriever`` over one groundkit collection."""

    def __init__(
        self,
        collection: Any,
        *,
        top_k: int = 4,
        callback_manager: CallbackManager | None = None,
        **options: Unpack[SearchOptions],
    ) -> None:
        """The options are ``SearchRequest``'s fields, checked here; ``top_k``'s
        default is LlamaIndex's usual four."""
        self._searcher = Searcher.of(collection, top_k=top_k, **options)
        super().__init__(callback_manager=callback_manager)

    def retrieve(self, str_or_query_bundle: str | QueryBundle) -> list[NodeWithScore]:
        """LlamaIndex's ``retrieve``, with a query of the wrong kind refused in
        groundkit's words before LlamaIndex's own event model rejects it."""
        return super().retrieve(_query(str_or_query_bundle))

    async def aretrieve(self, str_or_query_bundle: str | QueryBundle) -> list[NodeWithScore]:
        return await super().aretrieve(_query(str_or_query_bundle))

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        response = self._searcher.search(query_bundle.query_str)
        return [to_node(result) for result in response.results]

    async def _aretrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        response = await self._searcher.asearch(query_bundle.query_str)
        return [to_node(result) for result in response.results]


def _query(given: object) -> str | QueryBundle:
    if not isinstance(given, str | QueryBundle):
        raise InvalidQueryError(
            f"query must be a non-empty string or a QueryBundle, not {type(given).__name__}"
        )
    return given


def to_node(result: RetrievalResult) -> NodeWithScore:
    """A search result as a scored ``TextNode`` with its offsets and citation."""
    hidden = list(HIDDEN_KEYS)
    node = TextNode(
        id_=result.chunk_id,
        text=result.content,
        start_char_idx=result.start_offset,
        end_char_idx=result.end_offset,
        metadata=result_metadata(result),
        excluded_llm_metadata_keys=hidden,
        excluded_embed_metadata_keys=hidden,
        relationships={NodeRelationship.SOURCE: RelatedNodeInfo(node_id=result.document_id)},
    )
    return NodeWithScore(node=node, score=result.score)


def citation_of(node: BaseNode | NodeWithScore) -> Citation:
    """The ``Citation`` of a node a ``GroundkitRetriever`` returned.

    ``RetrievalError`` when it carries none, or when its ``start_char_idx`` /
    ``end_char_idx`` were changed so they no longer match the citation.
    """
    framework_object(node, (BaseNode, NodeWithScore), "LlamaIndex node")
    inner = node.node if isinstance(node, NodeWithScore) else node
    citation = citation_from_metadata(inner.metadata, "LlamaIndex node")
    if isinstance(inner, TextNode) and (inner.start_char_idx, inner.end_char_idx) != (
        citation.start_offset,
        citation.end_offset,
    ):
        raise RetrievalError(
            f"this node's start_char_idx/end_char_idx ({inner.start_char_idx}, "
            f"{inner.end_char_idx}) differ from its citation's offsets "
            f"({citation.start_offset}, {citation.end_offset}); it was changed after retrieval"
        )
    return citation


def records_from_nodes(
    nodes: Iterable[BaseNode],
    *,
    id_key: str | None = None,
    fields: list[str] | None = None,
) -> list[Record]:
    """Records for ``Collection.add_documents`` from LlamaIndex documents or nodes.

    The id is the node's ``id_`` (give readers stable ids, for instance
    ``SimpleDirectoryReader(filename_as_id=True)``: a random one stores the text again
    on every add), or ``metadata[id_key]``. The text is the node's content without
    metadata; fields are its metadata (only ``fields`` when given).
    """
    check_record_keys(id_key, fields, "records_from_nodes")
    given = framework_items(nodes, BaseNode, "LlamaIndex node", "records_from_nodes")
    records: list[Record] = []
    for index, node in enumerate(given):
        metadata: Mapping[str, Any] = node.metadata or {}
        record_id = metadata.get(id_key) if id_key is not None else node.node_id
        records.append(
            record_from(
                record_id,
                node.get_content(metadata_mode=MetadataMode.NONE),
                metadata,
                fields,
                f"LlamaIndex node {index}",
            )
        )
    return records
