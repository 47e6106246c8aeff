"""The LlamaIndex retriever against the real llama-index-core package."""

from __future__ import annotations

from pathlib import Path

import pytest
from llama_index.core import SimpleDirectoryReader
from llama_index.core.schema import MetadataMode, NodeRelationship, NodeWithScore, TextNode

import groundkit
import groundkit.sync as gks
from groundkit import IngestionError, InvalidQueryError, RetrievalError
from groundkit.integrations.llama_index import (
    CITATION_KEY,
    GroundkitRetriever,
    citation_of,
    records_from_nodes,
)


def test_retrieve_returns_nodes_with_exact_offsets(sync_collection: gks.SyncCollection) -> None:
    retriever = GroundkitRetriever(sync_collection, top_k=2)
    nodes = retriever.retrieve("green tea degrees")
    assert isinstance(nodes[0], NodeWithScore)
    top = nodes[0]
    node = top.node
    assert isinstance(node, TextNode)
    assert node.metadata["source"] == "tea/green.md"
    assert top.score == pytest.approx(node.metadata["score"])
    source = (sync_collection.base_dir / "tea/green.md").read_text(encoding="utf-8")
    assert source[node.start_char_idx : node.end_char_idx] == node.text
    related = node.relationships[NodeRelationship.SOURCE]
    assert not isinstance(related, list)
    assert related.node_id == citation_of(top).document_id
    citation = citation_of(top)
    assert (citation.start_offset, citation.end_offset) == (node.start_char_idx, node.end_char_idx)
    assert (gks.check_citation(citation, node.text, sync_collection.base_dir)).ok
    # What an LLM or an embedder is shown holds no citation plumbing.
    assert CITATION_KEY not in node.get_content(metadata_mode=MetadataMode.LLM)
    assert CITATION_KEY not in node.get_content(metadata_mode=MetadataMode.EMBED)
    assert "tea/green.md" in node.get_content(metadata_mode=MetadataMode.LLM)


async def test_aretrieve_on_an_async_collection(async_collection: groundkit.Collection) -> None:
    retriever = GroundkitRetriever(async_collection, top_k=5, filters={"floor": {"gte": 2}})
    nodes = await retriever.aretrieve("kettle espresso")
    assert [citation_of(n).source for n in nodes] == ["record://TCK-1", "record://TCK-2"] or [
        citation_of(n).source for n in nodes
    ] == ["record://TCK-2", "record://TCK-1"]
    for scored in nodes:
        fetched = await async_collection.fetch_chunk(citation_of(scored).chunk_id)
        assert fetched.verification == "verified"


def test_a_moved_node_is_refused(sync_collection: gks.SyncCollection) -> None:
    (scored,) = GroundkitRetriever(sync_collection, top_k=1).retrieve("espresso bars")
    node = scored.node
    assert isinstance(node, TextNode)
    node.start_char_idx = 3
    with pytest.raises(RetrievalError, match="changed after retrieval"):
        citation_of(scored)
    with pytest.raises(RetrievalError, match="carries no groundkit citation"):
        citation_of(TextNode(text="x"))


def test_a_readers_documents_are_ingested_as_records(tmp_path: Path) -> None:
    folder = tmp_path / "kb"
    folder.mkdir()
    (folder / "keys.txt").write_text("Rotate the API keys every ninety days.", encoding="utf-8")
    (folder / "backups.txt").write_text("Backups run nightly at two.", encoding="utf-8")
    documents = SimpleDirectoryReader(str(folder), filename_as_id=True).load_data()
    records = records_from_nodes(documents, fields=["file_name"])
    assert sorted(r.fields["file_name"] for r in records) == ["backups.txt", "keys.txt"]
    with gks.Collection.open(tmp_path / "idx", base_dir=tmp_path) as col:
        assert len(col.add_documents(records).added) == 2
        # Reading the folder again gives the same ids: nothing changes.
        again = SimpleDirectoryReader(str(folder), filename_as_id=True).load_data()
        assert (
            len(col.add_documents(records_from_nodes(again, fields=["file_name"])).unchanged) == 2
        )
        (scored,) = GroundkitRetriever(col, top_k=1).retrieve("api keys")
        assert scored.node.metadata["fields"] == {"file_name": "keys.txt"}
        assert col.fetch_chunk(citation_of(scored).chunk_id).verification == "verified"


def test_helpers_and_queries_of_the_wrong_kind_raise_groundkits_errors(
    sync_collection: gks.SyncCollection,
) -> None:
    retriever = GroundkitRetriever(sync_collection)
    for query in (None, 5, ["tea"]):
        with pytest.raises(InvalidQueryError, match="query must be a non-empty string"):
            retriever.retrieve(query)  # type: ignore[arg-type]
    wrong: object
    for wrong in (None, "text", {"metadata": {}}):
        with pytest.raises(RetrievalError, match="citation_of takes a LlamaIndex node"):
            citation_of(wrong)  # type: ignore[arg-type]
    for nodes in (None, 5, "text", TextNode(text="x")):
        with pytest.raises(IngestionError, match="takes a list of LlamaIndex nodes"):
            records_from_nodes(nodes)  # type: ignore[arg-type]
    with pytest.raises(IngestionError, match="item 0 is a str, not a LlamaIndex node"):
        records_from_nodes(["text"])  # type: ignore[list-item]
