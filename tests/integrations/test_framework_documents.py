"""``Collection.add_documents`` takes texts and the frameworks' own documents (the real
LangChain, LlamaIndex and Haystack classes), with ids that make a re-add a no-op."""

from __future__ import annotations

from pathlib import Path

import pytest
from haystack import Document as HaystackDocument
from hypothesis import given, settings
from hypothesis import strategies as st
from langchain_core.documents import Document as LangChainDocument
from llama_index.core.schema import Document as LlamaDocument
from llama_index.core.schema import NodeWithScore, TextNode

import groundkit
import groundkit.sync as gks
from groundkit.ingestion.records import derived_id, record_documents


def test_texts_and_framework_documents_in_one_batch(tmp_path: Path) -> None:
    lc = LangChainDocument(page_content="The boiler is serviced in May.", metadata={"team": "ops"})
    llama = LlamaDocument(text="The kettle descaler is in the left cupboard.", id_="kb-7")
    node = TextNode(text="Pumps are checked weekly.", id_="node-3", metadata={"floor": 2})
    hay = HaystackDocument(content="Filters are changed every quarter.", meta={"year": 2024})
    text = "Espresso is pressed at nine bars."
    with gks.Collection.open(tmp_path / "idx", base_dir=tmp_path) as col:
        report = col.add_documents([text, lc, llama, node, hay])
        assert sorted(report.added) == sorted(
            [
                f"record://{derived_id(text)}",
                f"record://{derived_id(lc.page_content)}",  # LangChain gave no id
                "record://kb-7",
                "record://node-3",
                f"record://{hay.id}",  # Haystack's own id
            ]
        )
        # Derived ids depend on the text only: the same batch again changes nothing.
        again = col.add_documents([text, lc, llama, node, hay])
        assert again.added == [] and len(again.unchanged) == 5
        # Metadata became fields, under the field rules.
        hit = col.search("boiler serviced", filters={"team": "ops"}).results[0]
        assert hit.fields == {"team": "ops"}
        assert col.search("pumps", filters={"floor": 2}).results[0].source == "record://node-3"
        assert col.search("filters quarter", filters={"year": 2024}).results
        # Their citations verify against the stored text.
        assert col.fetch_chunk(hit.chunk_id).verification == "verified"


@settings(max_examples=50, deadline=None)
@given(st.text(min_size=1).filter(lambda t: t.strip()))
def test_a_texts_id_is_a_valid_id_decided_by_the_text_alone(text: str) -> None:
    # Every text that can be stored gets an id that passes the id rules, the same one
    # each time, and a different one for a different text.
    try:
        documents = record_documents([text])
    except groundkit.IngestionError:
        return  # text groundkit refuses (say, a lone surrogate): refused, not mis-named
    assert documents[0].source == f"record://{derived_id(text)}"
    assert record_documents([text])[0].document_id == documents[0].document_id
    assert derived_id(text + "x") != derived_id(text)


def test_the_same_text_twice_is_stored_once() -> None:
    assert len(record_documents(["kettle", "kettle"])) == 1
    # An id given twice with different texts is still an error.
    with pytest.raises(groundkit.IngestionError, match="also given by record 0"):
        record_documents([{"id": "a", "text": "one"}, {"id": "a", "text": "two"}])


@pytest.mark.parametrize(
    ("item", "hint"),
    [
        (b"bytes text", "decode bytes to str first"),
        (Path("notes.md"), "Collection.ingest"),
        (NodeWithScore(node=TextNode(text="x"), score=1.0), "pass its .node"),
        (object(), "LangChain Document, LlamaIndex Document/TextNode or Haystack Document"),
        (42, "a str, a groundkit.Record, a mapping with id and text"),
    ],
)
def test_an_unsupported_item_names_what_is_accepted(item: object, hint: str) -> None:
    with pytest.raises(groundkit.IngestionError, match="nothing was stored") as caught:
        record_documents(["fine", item])
    message = str(caught.value)
    assert "record 1" in message and hint in message
    assert "a str, a groundkit.Record" in message


def test_a_single_document_is_refused_with_the_fix() -> None:
    for single in ("just a text", LangChainDocument(page_content="x")):
        with pytest.raises(groundkit.IngestionError, match=r"wrap it in a list: \[item\]"):
            record_documents(single)


def test_metadata_outside_the_field_rules_names_the_converter() -> None:
    nested = HaystackDocument(content="x", meta={"origin": {"file": "a.txt"}})
    with pytest.raises(groundkit.IngestionError) as caught:
        record_documents([nested])
    message = str(caught.value)
    assert "Haystack document" in message and "nested mappings are not fields" in message
    assert "groundkit.integrations.haystack.records_from_documents(..., fields=[...])" in message
    lc = LangChainDocument(page_content="x", metadata={"bad key!": 1})
    with pytest.raises(groundkit.IngestionError, match=r"integrations\.langchain\.records_from"):
        record_documents([lc])


def test_a_document_without_text_is_refused() -> None:
    empty = HaystackDocument(content=None, meta={})
    with pytest.raises(groundkit.IngestionError, match="its text is NoneType, not str"):
        record_documents([empty])


def test_retrievers_follow_a_collection_that_moved_to_the_background_loop(
    tmp_path: Path,
) -> None:
    """A collection opened under ``asyncio.run`` moves to groundkit's background loop at its
    first blocking call once that loop ended: every framework's retriever, made before or
    after the move, keeps working from a new loop, as a blocking call does."""
    import asyncio

    from groundkit.integrations import haystack, langchain, llama_index

    async def opened() -> groundkit.Collection:
        col = await groundkit.Collection.open(tmp_path / "idx", base_dir=tmp_path)
        await col.add_documents([{"id": "a", "text": "Refunds are paid within 14 days."}])
        return col

    col = asyncio.run(opened())
    hay = haystack.GroundkitRetriever(col)
    llama = llama_index.GroundkitRetriever(col)
    lang = langchain.GroundkitRetriever(collection=col)
    assert len(hay.run("refunds")["documents"]) == 1  # blocking: the collection moves
    assert col.loop is gks.background_loop()

    async def each() -> list[int]:
        return [
            len((await hay.run_async("refunds"))["documents"]),
            len(await llama.aretrieve("refunds")),
            len(await lang.ainvoke("refunds")),
        ]

    assert asyncio.run(each()) == [1, 1, 1]
    gks.run(col.close(), home=col.loop)
