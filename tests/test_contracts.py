"""The frozen data contracts: immutability, strictness, span and extractor rules."""

from __future__ import annotations

import hashlib
import math
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import BaseModel

from groundkit import (
    Citation,
    FetchResult,
    IngestFailure,
    IngestReport,
    QuoteCheck,
    RetrievalResult,
    SearchResponse,
)
from groundkit.contracts import (
    Chunk,
    CollectionManifest,
    Document,
    DocumentRecord,
    EmbeddingIdentity,
)
from groundkit.errors import InvalidInputError, InvalidQueryError

# What a contract model built from values it refuses raises: groundkit's, never pydantic's.
REFUSED = (InvalidQueryError, InvalidInputError)


def _chunk(**over: Any) -> dict[str, Any]:
    base = dict(
        chunk_id="c1", document_id="d1", chunk_index=0, content="abc", start_offset=5, end_offset=8
    )
    return base | over


def _citation(**over: Any) -> dict[str, Any]:
    base = dict(
        document_id="d1",
        chunk_id="c1",
        source="a.txt",
        source_class="text",
        extractor=None,
        start_offset=0,
        end_offset=3,
    )
    return base | over


def _result(**over: Any) -> dict[str, Any]:
    base = dict(
        content="abc",
        score=1.5,
        document_id="d1",
        chunk_id="c1",
        chunk_index=0,
        source="a.txt",
        source_class="text",
        extractor=None,
        start_offset=10,
        end_offset=13,
    )
    return base | over


def _record(**over: Any) -> dict[str, Any]:
    base = dict(document_id="d1", source="a.txt", content_hash="h", ingested_at="2024-01-01")
    return base | over


def _document(**over: Any) -> dict[str, Any]:
    return dict(document_id="d1", source="a.txt", content="hello") | over


INSTANCES: list[BaseModel] = [
    Document(**_document()),
    Chunk(**_chunk()),
    DocumentRecord(**_record()),
    Citation(**_citation()),
    RetrievalResult(**_result()),
    SearchResponse(query="q", mode="bm25", results=[], total_results=0),
    FetchResult(
        content="abc", citation=Citation(**_citation()), verification="verified", detail="ok"
    ),
    EmbeddingIdentity(provider="p", model_name="m", dimensions=3),
    CollectionManifest(provider="p", model_name="m", dimensions=3, created_at="now"),
    IngestFailure(source="a.txt", reason="bad"),
    IngestReport(),
]


@pytest.mark.parametrize("instance", INSTANCES, ids=lambda m: type(m).__name__)
def test_models_are_frozen(instance: BaseModel) -> None:
    field = next(iter(type(instance).model_fields))
    with pytest.raises(AttributeError, match="frozen"):
        setattr(instance, field, getattr(instance, field))


@pytest.mark.parametrize("instance", INSTANCES, ids=lambda m: type(m).__name__)
def test_models_forbid_unknown_fields(instance: BaseModel) -> None:
    data = instance.model_dump() | {"surprise": 1}
    with pytest.raises(REFUSED, match="surprise"):
        type(instance).model_validate(data)
    # The same data without the extra field is accepted: the failure was the extra key.
    assert type(instance).model_validate(instance.model_dump()) == instance


class TestChunkSpan:
    def test_valid_span(self) -> None:
        chunk = Chunk(**_chunk())
        assert chunk.end_offset - chunk.start_offset == len(chunk.content)

    @pytest.mark.parametrize(
        "over",
        [
            {"start_offset": -1, "end_offset": 2},
            {"start_offset": 3, "end_offset": 2, "content": ""},
            {"start_offset": 0, "end_offset": 4},
            {"start_offset": 0, "end_offset": 2},
            {"chunk_index": -1},
            {"chunk_id": ""},
        ],
    )
    def test_invalid_spans_rejected(self, over: dict[str, Any]) -> None:
        with pytest.raises(REFUSED):
            Chunk(**_chunk(**over))

    def test_length_counts_code_points(self) -> None:
        # An emoji is one code point (four UTF-8 bytes): offsets are string indices.
        Chunk(**_chunk(content="a😀b", start_offset=0, end_offset=3))
        with pytest.raises(REFUSED):
            Chunk(**_chunk(content="a😀b", start_offset=0, end_offset=6))


EXTRACTOR_MODELS = [
    (Document, _document),
    (Citation, _citation),
    (DocumentRecord, _record),
    (RetrievalResult, _result),
]


@pytest.mark.parametrize(
    ("model", "make"), EXTRACTOR_MODELS, ids=lambda x: getattr(x, "__name__", "")
)
class TestExtractorRule:
    def test_extracted_needs_extractor(self, model: type[BaseModel], make: Any) -> None:
        with pytest.raises(REFUSED, match="extractor"):
            model(**make(source_class="extracted", extractor=None))
        with pytest.raises(REFUSED, match="extractor"):
            model(**make(source_class="extracted", extractor=""))
        ok = model(**make(source_class="extracted", extractor="pdf-text@1"))
        assert ok.extractor == "pdf-text@1"  # type: ignore[attr-defined]

    @pytest.mark.parametrize("source_class", ["text", "snapshot"])
    def test_other_classes_refuse_extractor(
        self, model: type[BaseModel], make: Any, source_class: str
    ) -> None:
        with pytest.raises(REFUSED, match="must not name an extractor"):
            model(**make(source_class=source_class, extractor="pdf-text@1"))
        assert model(**make(source_class=source_class, extractor=None))

    def test_unknown_source_class_rejected(self, model: type[BaseModel], make: Any) -> None:
        with pytest.raises(REFUSED):
            model(**make(source_class="web"))


class TestRetrievalResult:
    @pytest.mark.parametrize("score", [-0.001, math.inf, -math.inf, math.nan])
    def test_score_must_be_non_negative_and_finite(self, score: float) -> None:
        with pytest.raises(REFUSED):
            RetrievalResult(**_result(score=score))

    def test_zero_score_allowed(self) -> None:
        assert RetrievalResult(**_result(score=0.0)).score == 0.0

    def test_span_must_match_content(self) -> None:
        with pytest.raises(REFUSED):
            RetrievalResult(**_result(end_offset=14))
        with pytest.raises(REFUSED):
            RetrievalResult(**_result(start_offset=13, end_offset=10))

    def test_citation_carries_every_locating_field(self) -> None:
        result = RetrievalResult(
            **_result(source="docs/r.pdf", source_class="extracted", extractor="pdf-text@1")
        )
        assert result.citation == Citation(
            document_id="d1",
            chunk_id="c1",
            source="docs/r.pdf",
            source_class="extracted",
            extractor="pdf-text@1",
            start_offset=10,
            end_offset=13,
        )
        snapshot = RetrievalResult(**_result(source_class="snapshot"))
        assert snapshot.citation.source_class == "snapshot"
        assert snapshot.citation.extractor is None


class TestCitation:
    def test_end_before_start_rejected(self) -> None:
        with pytest.raises(REFUSED):
            Citation(**_citation(start_offset=4, end_offset=3))

    def test_negative_offset_rejected(self) -> None:
        with pytest.raises(REFUSED):
            Citation(**_citation(start_offset=-1))


@given(st.text())
def test_content_hash_is_sha256_of_utf8(text: str) -> None:
    expected = hashlib.sha256(text.encode("utf-8")).hexdigest()
    assert Document(**_document(content=text)).content_hash == expected
    chunk = Chunk(**_chunk(content=text, start_offset=0, end_offset=len(text)))
    assert chunk.content_hash == expected


def test_content_hash_known_value() -> None:
    text = "héllo 東京 😀"
    assert (
        Document(**_document(content=text)).content_hash
        == hashlib.sha256(text.encode("utf-8")).hexdigest()
    )
    assert Document(**_document(content="abc")).content_hash == (
        "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
    )


def test_document_requires_id_and_source() -> None:
    with pytest.raises(REFUSED):
        Document(**_document(document_id=""))
    with pytest.raises(REFUSED):
        Document(**_document(source=""))


def test_embedding_identity_and_manifest() -> None:
    with pytest.raises(REFUSED):
        EmbeddingIdentity(provider="p", model_name="m", dimensions=0)
    manifest = CollectionManifest(provider="p", model_name="m", dimensions=8, created_at="t")
    assert manifest.identity == EmbeddingIdentity(provider="p", model_name="m", dimensions=8)


def test_ingest_report_changed() -> None:
    assert not IngestReport(unchanged=["a"], failed=[IngestFailure(source="b", reason="x")]).changed
    assert IngestReport(added=["a"]).changed
    assert IngestReport(updated=["a"]).changed
    assert IngestReport(removed=["a"]).changed
    with pytest.raises(REFUSED):
        IngestReport(skipped=-1)


def test_search_response_and_fetch_result_literals() -> None:
    with pytest.raises(REFUSED):
        SearchResponse(query="q", mode="sparse", results=[], total_results=0)  # type: ignore[arg-type]
    with pytest.raises(REFUSED):
        SearchResponse(query="q", mode="bm25", results=[], total_results=-1)
    with pytest.raises(REFUSED):
        FetchResult(
            content="abc",
            citation=Citation(**_citation()),
            verification="maybe",  # type: ignore[arg-type]
            detail="",
        )


def test_quote_check_offsets_only_when_verified() -> None:
    citation = Citation(**_citation())
    found: dict[str, Any] = {"start_offset": 0, "end_offset": 1}
    check = QuoteCheck(quote="x", verdict="verified", detail="", citation=citation, **found)
    assert check.ok
    with pytest.raises(REFUSED):
        QuoteCheck(quote="x", verdict="verified", detail="", citation=citation)
    with pytest.raises(REFUSED):
        QuoteCheck(quote="x", verdict="drifted", detail="", citation=citation, **found)
    assert not QuoteCheck(quote="x", verdict="not_in_span", detail="", citation=citation).ok
