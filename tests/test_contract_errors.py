"""Contract models refuse bad values with groundkit's errors, never pydantic's."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from pydantic import ValidationError

import groundkit
from groundkit import (
    Citation,
    GroundkitError,
    InvalidInputError,
    InvalidQueryError,
    Record,
    RetrievalResult,
)
from groundkit.contracts import Chunk, Document, _Frozen, citation_for

CITATION: dict[str, Any] = {
    "document_id": "d1",
    "chunk_id": "c1",
    "source": "tea.md",
    "source_class": "text",
    "extractor": None,
    "start_offset": 0,
    "end_offset": 4,
}
INGEST_SIDE = {Document, Chunk, Record}


def exported_models() -> list[type[_Frozen]]:
    found = [getattr(groundkit, name) for name in groundkit.__all__]
    return [m for m in found if isinstance(m, type) and issubclass(m, _Frozen)]


def test_every_exported_contract_model_is_covered() -> None:
    # The same rule for every model a user can build, not just the common ones.
    assert {Citation, RetrievalResult, Record} <= set(exported_models())
    assert len(exported_models()) >= 10


@pytest.mark.parametrize("model", exported_models(), ids=lambda m: m.__name__)
def test_an_unknown_field_is_groundkits_error(model: type[_Frozen]) -> None:
    expected = InvalidInputError if model in INGEST_SIDE else InvalidQueryError
    makers: list[Callable[[], object]] = [
        lambda: model(surprise_field=1),
        lambda: model.model_validate({"surprise_field": 1}),
        lambda: model.model_validate_json('{"surprise_field": 1}'),
    ]
    for make in makers:
        with pytest.raises(expected) as caught:
            make()
        assert not isinstance(caught.value, ValidationError)
        assert isinstance(caught.value, ValueError) and isinstance(caught.value, GroundkitError)
        label = "record" if model is Record else model.__name__
        assert str(caught.value).startswith(f"invalid {label}: ")
        assert "surprise_field: Extra inputs are not permitted" in str(caught.value)
        assert caught.value.__cause__ is None and caught.value.__suppress_context__


def test_a_models_own_check_reads_plainly_and_names_no_value() -> None:
    with pytest.raises(InvalidQueryError) as caught:
        Citation(**{**CITATION, "start_offset": 9, "end_offset": 4, "source": "secret-name.md"})
    assert str(caught.value) == "invalid Citation: end_offset 4 is before start_offset 9"
    with pytest.raises(InvalidQueryError, match="start_offset: Input should be a valid integer"):
        Citation(**{**CITATION, "start_offset": "private words"})
    with pytest.raises(InvalidQueryError) as quoted:
        Citation(**{**CITATION, "start_offset": "private words"})
    assert "private words" not in str(quoted.value)


def test_a_nested_model_is_reported_once_by_the_outer_one() -> None:
    bad = {**CITATION, "start_offset": 9, "end_offset": 4}
    with pytest.raises(InvalidQueryError) as caught:
        RetrievalResult.model_validate({"content": "tea!", "score": 1.0, "citation": bad})
    message = str(caught.value)
    assert message.startswith("invalid RetrievalResult: ")
    assert message.count("invalid") == 1 and "Value error" not in message


def test_records_keep_their_message_and_family() -> None:
    with pytest.raises(InvalidInputError, match=r"^invalid record: id: Input should be a valid"):
        Record(id=b"x", text="t")  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError, match=r"^invalid Document: document_id: "):
        Document(document_id="", source="a.md", content="x")


def test_valid_models_still_build_and_copy() -> None:
    citation = Citation(**CITATION)
    assert Citation.model_validate(CITATION) == citation
    assert Citation.model_validate_json(citation.model_dump_json()) == citation
    assert citation.model_copy(update={"end_offset": 3}).end_offset == 3


def test_fields_cannot_be_assigned_or_deleted() -> None:
    citation = Citation(**CITATION)
    with pytest.raises(AttributeError, match="frozen; model_copy"):
        citation.start_offset = 1
    with pytest.raises(AttributeError, match="frozen"):
        del citation.start_offset
    assert citation.start_offset == 0


@pytest.mark.parametrize("field", ["document_id", "chunk_id", "source", "extractor"])
def test_a_citation_holding_text_utf8_cannot_encode_is_refused(field: str) -> None:
    # No store, hash or path can hold a lone surrogate: refused where it enters (a
    # citation carried in a framework's metadata, a receipt), not deep in a check.
    values = {**CITATION, "source_class": "extracted", "extractor": "pdfium/1", field: "x\ud800"}
    with pytest.raises(InvalidQueryError, match=f"{field} cannot be encoded as UTF-8"):
        Citation(**values)
    with pytest.raises(InvalidQueryError, match=f"{field} cannot be encoded as UTF-8"):
        citation_for(**{**values, "metadata": {}, "version": 1})
