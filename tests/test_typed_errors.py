"""Hostile arguments at the public API come back as typed errors, with nothing half done.

Filters nested thousands of levels deep, and text UTF-8 cannot encode (a lone
surrogate) in a query, a chunk id, a filter or a field, are refused where they
enter: as ``RetrievalError`` on the search side and ``IngestionError`` on the
ingest side, never as a ``RecursionError`` or ``UnicodeEncodeError`` from deep
inside a store.
"""

from __future__ import annotations

import asyncio
import datetime
from pathlib import Path
from typing import Any

import pytest

from groundkit import (
    Collection,
    ConfigurationError,
    IngestionError,
    InvalidInputError,
    InvalidQueryError,
    InvalidSettingError,
    RetrievalConfig,
    RetrievalError,
    StorageError,
    search_collections,
)
from groundkit.contracts import Document
from groundkit.ingestion.indexer import Indexer
from groundkit.storage import SQLiteMetadataStore
from groundkit.storage.names import document_id_for
from groundkit.testing.conformance.helpers import document_sources
from tests.support import SMALL_CHUNKS, ToyEmbedder, write_tree

SECRET = "qqsecretqq"


def deep(depth: int) -> dict[str, Any]:
    value: Any = 1
    for _ in range(depth):
        value = {"eq": value}
    return {"team": value}


# -- search side -----------------------------------------------------------------


async def test_fetch_chunk_with_a_lone_surrogate_is_a_retrieval_error(
    ingested: Collection,
) -> None:
    with pytest.raises(RetrievalError, match="the chunk id cannot be encoded as UTF-8") as caught:
        await ingested.fetch_chunk("\ud800")
    assert caught.value.verdict is None
    # The collection is untouched and still answers.
    hit = (await ingested.search("solar panels", 1)).results[0]
    assert (await ingested.fetch_chunk(hit.chunk_id)).verification == "verified"


@pytest.mark.parametrize("query", [f"{SECRET} \ud800", "\udced\udca0\udc80", f"a\udfff{SECRET}"])
async def test_queries_utf8_cannot_encode_are_refused_without_quoting_them(
    ingested: Collection, query: str
) -> None:
    with pytest.raises(RetrievalError, match="the query cannot be encoded as UTF-8") as caught:
        await ingested.search(query)
    assert SECRET not in str(caught.value)
    retriever = await ingested.retriever()
    with pytest.raises(RetrievalError, match="lone surrogate"):
        await retriever.search(query, mode="bm25")


async def test_deep_filters_are_refused_by_search(ingested: Collection) -> None:
    with pytest.raises(RetrievalError, match="more than 3 levels deep"):
        await ingested.search("solar", filters=deep(5000))
    with pytest.raises(RetrievalError, match="'team': a name or value cannot be encoded"):
        await ingested.search("solar", filters={"team": "r\ud800"})
    assert (await ingested.search("solar")).results  # still searchable


async def test_search_collections_refuses_before_any_collection_is_searched(
    ingested: Collection,
) -> None:
    for query, filters in (("x\ud800", None), ("solar", deep(5000)), ("solar", {"k": "\udc80"})):
        with pytest.raises(RetrievalError) as caught:
            await search_collections([ingested], query, filters=filters)
        # Raised by search_collections itself, not collected as a per-collection failure.
        assert "could be searched" not in str(caught.value)


class _BlockingEmbedder(ToyEmbedder):
    """Embeds documents normally; once ``block`` is set, a query embedding never ends."""

    def __init__(self) -> None:
        super().__init__()
        self.block = False
        self.cancelled = False

    async def embed_query(self, text: str) -> Any:
        if self.block:
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                self.cancelled = True
                raise
        return await super().embed_query(text)


async def test_hybrid_cancels_the_other_side_when_one_fails(
    index_dir: Path, corpus_dir: Path
) -> None:
    embedder = _BlockingEmbedder()
    no_preload = RetrievalConfig(preload_max_chunks=0)  # the BM25 side reads the store
    async with Collection.open(
        index_dir, base_dir=corpus_dir, embedder=embedder, retrieval=no_preload
    ) as col:
        await col.ingest(corpus_dir)
        retriever = await col.retriever()
        embedder.block = True
        await col.store.close()  # the BM25 side's row read now fails at once
        with pytest.raises(StorageError, match="closed"):
            await asyncio.wait_for(retriever.search("solar panels", mode="hybrid"), 10)
        # The dense side did not go on running after the search had raised.
        assert embedder.cancelled
        current = asyncio.current_task()
        assert [t for t in asyncio.all_tasks() if t is not current] == []


# -- ingest side -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("metadata", "needle"),
    [
        ({"team": "r\ud800"}, "field 'team' cannot be encoded as UTF-8"),
        ({"tags": ["ok", "\udcff"]}, "field 'tags' cannot be encoded as UTF-8"),
        ({"te\ud800am": "red"}, "is not allowed"),
        ({(("a",),): "red"}, "a field name must be a string, not a tuple"),
    ],
)
async def test_metadata_utf8_cannot_encode_is_an_ingestion_error_before_any_write(
    collection: Collection, corpus_dir: Path, metadata: dict[Any, Any], needle: str
) -> None:
    with pytest.raises(IngestionError) as caught:
        await collection.ingest(corpus_dir, metadata=metadata)
    assert needle in str(caught.value)
    assert await collection.generation() == 0
    assert await document_sources(collection.store) == []


class _SurrogateLoader:
    """Reads ``.txt`` files the way a broken extractor might: each 'X' becomes a lone
    surrogate, as a PDF's damaged UTF-16 text can."""

    def accepts(self, path: Path) -> bool:
        return path.suffix == ".txt"

    async def load(self, path: Path, *, base_dir: Path) -> Document:
        source = path.relative_to(base_dir).as_posix()
        text = path.read_text(encoding="utf-8").replace("X", "\ud800")
        return Document(document_id=document_id_for(source), source=source, content=text)


async def test_a_document_whose_text_utf8_cannot_encode_fails_alone(
    store: SQLiteMetadataStore, tmp_path: Path
) -> None:
    base = tmp_path / "docs"
    write_tree(base, {"good.txt": "Plain words only.\n", "bad.txt": f"{SECRET} X broken\n"})
    indexer = Indexer(store, base, loader=_SurrogateLoader(), chunking=SMALL_CHUNKS)
    report = await indexer.ingest(base)
    assert report.added == ["good.txt"]
    [failure] = report.failed
    assert failure.source == "bad.txt"
    assert "its text cannot be encoded as UTF-8" in failure.reason
    assert SECRET not in failure.reason
    assert await document_sources(store) == ["good.txt"]


# -- arguments out of any range a store or the datetime module can hold ------------


class _FarZone(datetime.tzinfo):
    """A caller's time zone whose offset no datetime accepts (30 hours)."""

    def utcoffset(self, dt: datetime.datetime | None) -> datetime.timedelta:
        return datetime.timedelta(hours=30)

    def dst(self, dt: datetime.datetime | None) -> None:
        return None

    def tzname(self, dt: datetime.datetime | None) -> str:
        return "test zone"


class _BrokenZone(datetime.tzinfo):
    """A caller's time zone that raises when asked for its offset."""

    def utcoffset(self, dt: datetime.datetime | None) -> datetime.timedelta:
        raise RuntimeError("no offset today")

    def dst(self, dt: datetime.datetime | None) -> None:
        return None

    def tzname(self, dt: datetime.datetime | None) -> str:
        return "test zone"


@pytest.mark.parametrize("zone", [_FarZone(), _BrokenZone()], ids=["30 hours", "raises"])
async def test_an_as_of_whose_zone_cannot_be_used_is_a_retrieval_error(
    ingested: Collection, zone: datetime.tzinfo
) -> None:
    with pytest.raises(RetrievalError, match="as_of"):
        await ingested.search("solar", 3, as_of=datetime.datetime(2026, 1, 1, tzinfo=zone))


async def test_a_version_no_store_can_hold_is_a_retrieval_error(ingested: Collection) -> None:
    hit = (await ingested.search("solar", 1)).results[0]
    with pytest.raises(RetrievalError, match="version"):
        await ingested.fetch_chunk(hit.chunk_id, version=10**30)


@pytest.mark.parametrize("records", [None, 7, b"bytes"])
async def test_add_documents_without_an_iterable_is_an_ingestion_error(
    ingested: Collection, records: Any
) -> None:
    with pytest.raises(IngestionError, match="iterable of records"):
        await ingested.add_documents(records)
    with pytest.warns(DeprecationWarning), pytest.raises(IngestionError, match="list of ids"):
        await ingested.delete_documents(records)
    with pytest.raises(ConfigurationError, match="records must be a list of record ids"):
        await ingested.delete(records=records)


@pytest.mark.parametrize("field", ["id", "text"])
async def test_bytes_are_not_taken_for_a_record_id_or_text(
    ingested: Collection, field: str
) -> None:
    record = {"id": "by", "text": "bytes about kettles", field: f"{field} value".encode()}
    before = await ingested.generation()
    with pytest.raises(IngestionError, match="valid string"):
        await ingested.add_documents([record])
    assert await ingested.generation() == before  # nothing stored


@pytest.mark.parametrize("source", ["x" * 5000, "a\x00b"], ids=["too long", "NUL"])
async def test_a_delete_of_a_source_no_file_can_be_named_reports_it_missing(
    ingested: Collection, source: str
) -> None:
    report = await ingested.delete(sources=[source])
    assert report.deleted == [] and report.missing == [source]


# -- arguments of the wrong type ---------------------------------------------------


@pytest.mark.parametrize("path", [None, 5, ["docs"]])
async def test_ingest_of_something_that_is_no_path_is_an_ingestion_error(
    ingested: Collection, path: Any
) -> None:
    with pytest.raises(InvalidInputError, match="ingest takes a path"):
        await ingested.ingest(path)


async def test_rebase_to_something_that_is_no_path_is_a_setting_error(
    ingested: Collection,
) -> None:
    with pytest.raises(InvalidSettingError, match="must be a path"):
        await ingested.rebase(None)  # type: ignore[arg-type]


@pytest.mark.parametrize("name", ["docs\x00", "x" * 5000], ids=["NUL", "too long"])
async def test_rebase_to_a_name_no_directory_can_have_is_a_setting_error(
    ingested: Collection, name: str
) -> None:
    with pytest.raises(InvalidSettingError, match="base directory"):
        await ingested.rebase(name)


@pytest.mark.parametrize("target", ["abc", 5, {"chunk_id": "x"}], ids=["str", "int", "dict"])
async def test_verify_of_something_that_is_no_citation_is_a_query_error(
    ingested: Collection, target: Any
) -> None:
    with pytest.raises(InvalidQueryError, match="verify takes a RetrievalResult"):
        await ingested.verify(target)


async def test_verify_content_must_be_text(ingested: Collection) -> None:
    result = (await ingested.search("solar", 1)).results[0]
    with pytest.raises(InvalidQueryError, match="a str"):
        await ingested.verify(result.citation, content=5)  # type: ignore[call-overload]


@pytest.mark.parametrize(
    ("collections", "message"),
    [(None, "a list of collections, not NoneType"), ("a", "not str"), (["a"], r"collections\[0\]")],
)
async def test_search_collections_of_no_collections_is_a_query_error(
    collections: Any, message: str
) -> None:
    with pytest.raises(InvalidQueryError, match=message):
        await search_collections(collections, "solar")


@pytest.mark.parametrize("setting", ["retrieval", "chunking", "analyzer", "ingest"])
def test_a_settings_dict_is_refused_naming_its_model(tmp_path: Path, setting: str) -> None:
    with pytest.raises(InvalidSettingError, match=f"{setting} must be a .*Config.*not dict"):
        settings: dict[str, Any] = {setting: {"max_chars": 600}}
        Collection.open(tmp_path / "idx", **settings)
    assert not (tmp_path / "idx").exists()


# -- the verification functions' arguments -----------------------------------------


async def test_verification_arguments_of_the_wrong_type_are_query_errors(
    ingested: Collection,
) -> None:
    from groundkit import check_citation, check_quote, verify_answer

    result = (await ingested.search("solar", 1)).results[0]
    base = ingested.base_dir
    calls: list[tuple[str, Any]] = [
        ("the quote must be a str", lambda: check_quote(None, result, base)),  # type: ignore[arg-type]
        ("not str", lambda: check_quote("x", "a-chunk-id", base)),  # type: ignore[arg-type]
        ("not dict", lambda: check_quote("x", {"chunk_id": "x"}, base)),  # type: ignore[arg-type]
        ("max_bytes must be", lambda: check_quote("x", result, base, max_bytes="x")),  # type: ignore[arg-type]
        ("must be a path", lambda: check_citation(result.citation, result.content, None)),  # type: ignore[arg-type]
        ("must be a path", lambda: verify_answer("Solar [1].", [result], None)),  # type: ignore[arg-type]
        ("must be a path .*, not an empty string", lambda: check_quote("x", result, "")),
        ("maps to a list", lambda: verify_answer("S [^a].", [result], base, markers={"a": ["x"]})),  # type: ignore[dict-item]
    ]
    for message, call in calls:
        with pytest.raises(InvalidQueryError, match=message):
            await call()


def test_receipts_json_cannot_hold_are_receipt_errors(tmp_path: Path) -> None:
    from groundkit import ReceiptError
    from groundkit.verification.receipts import dump_receipts, parse_receipts

    for given, message in [
        ([{"a": float("nan")}], "receipt 1 cannot be written as JSON"),
        ([{"a": object()}], "receipt 1 cannot be written as JSON"),
        ([1], "receipt 1 is a int, not an annotation"),
    ]:
        with pytest.raises(ReceiptError, match=message):
            dump_receipts(given)  # type: ignore[arg-type]
    deep = "[" * 100_000 + "]" * 100_000
    with pytest.raises(ReceiptError, match="nested too deeply"):
        parse_receipts(deep)


def test_grk_verify_of_a_deeply_nested_receipts_file_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from groundkit.cli import main as grk

    receipts = tmp_path / "deep.json"
    receipts.write_text("[" * 100_000 + "]" * 100_000, encoding="utf-8")
    assert grk(["verify", "--receipts", str(receipts), "--base-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "nested too deeply" in err and "Traceback" not in err
