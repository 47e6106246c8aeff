"""The exception tree and the verdict attribute."""

from __future__ import annotations

import inspect

import pytest

import groundkit
from groundkit import errors
from groundkit.errors import (
    ChunkNotFoundError,
    CollectionNotFoundError,
    ConfigurationError,
    GroundkitError,
    IndexIdentityError,
    IngestionError,
    InvalidInputError,
    InvalidQueryError,
    InvalidSettingError,
    NotGroundedError,
    ReceiptError,
    RecordNotFoundError,
    RerankerNotConfiguredError,
    RetrievalError,
    StorageError,
    kind_of,
)

ERROR_CLASSES = [
    ConfigurationError,
    IngestionError,
    StorageError,
    IndexIdentityError,
    RetrievalError,
    RerankerNotConfiguredError,
    ReceiptError,
    NotGroundedError,
    InvalidSettingError,
    InvalidInputError,
    RecordNotFoundError,
    CollectionNotFoundError,
    InvalidQueryError,
    ChunkNotFoundError,
]
# Each refinement: its family, and the built-in class it also is.
REFINEMENTS = {
    InvalidSettingError: (ConfigurationError, ValueError),
    InvalidInputError: (IngestionError, ValueError),
    RecordNotFoundError: (IngestionError, LookupError),
    CollectionNotFoundError: (StorageError, LookupError),
    InvalidQueryError: (RetrievalError, ValueError),
    ChunkNotFoundError: (RetrievalError, LookupError),
}


@pytest.mark.parametrize("cls", ERROR_CLASSES, ids=lambda c: c.__name__)
def test_every_error_is_a_groundkit_error(cls: type[Exception]) -> None:
    assert issubclass(cls, GroundkitError)
    with pytest.raises(GroundkitError):
        raise cls("boom")


def test_error_list_is_complete() -> None:
    # Every exception class the errors module exports is in the tree above.
    exported = {
        obj
        for name in errors.__all__
        if inspect.isclass(obj := getattr(errors, name)) and issubclass(obj, BaseException)
    }
    assert exported == {GroundkitError, *ERROR_CLASSES}
    assert issubclass(GroundkitError, Exception)


def test_tree_shape() -> None:
    assert issubclass(RerankerNotConfiguredError, RetrievalError)
    assert ReceiptError.__bases__ == (RetrievalError,)
    for cls in (ConfigurationError, IngestionError, StorageError, IndexIdentityError):
        assert not issubclass(cls, RetrievalError)
        assert cls.__bases__ == (GroundkitError,)
    assert RetrievalError.__bases__ == (GroundkitError,)
    # A failed grounding assertion is a failed assertion to any test runner.
    assert NotGroundedError.__bases__ == (GroundkitError, AssertionError)


@pytest.mark.parametrize("cls", REFINEMENTS, ids=lambda c: c.__name__)
def test_a_refinement_is_caught_by_its_family_and_by_the_builtin(cls: type[Exception]) -> None:
    family, builtin = REFINEMENTS[cls]
    assert cls.__bases__ == (family, builtin)
    with pytest.raises(family):
        raise cls("boom")
    with pytest.raises(builtin):
        raise cls("boom")
    # What tools and spans report stays the family's name.
    assert kind_of(cls("boom")) == family.__name__


def test_only_the_refinements_are_lookup_or_value_errors() -> None:
    for cls in (GroundkitError, *ERROR_CLASSES):
        if cls not in REFINEMENTS:
            assert not issubclass(cls, ValueError | LookupError), cls


def test_a_missing_chunk_is_unresolvable() -> None:
    assert ChunkNotFoundError("no chunk 'x'").verdict == "unresolvable"


def test_public_api_exports_the_same_classes() -> None:
    for cls in (GroundkitError, *ERROR_CLASSES):
        assert getattr(groundkit, cls.__name__) is cls


class TestVerdict:
    def test_default_is_none(self) -> None:
        err = RetrievalError("empty query")
        assert err.verdict is None
        assert str(err) == "empty query"

    @pytest.mark.parametrize("verdict", ["drifted", "unresolvable"])
    def test_verdict_is_kept(self, verdict: str) -> None:
        err = RetrievalError("span moved", verdict=verdict)  # type: ignore[arg-type]
        assert err.verdict == verdict
        assert str(err) == "span moved"

    def test_verdict_is_keyword_only(self) -> None:
        with pytest.raises(TypeError):
            RetrievalError("x", "drifted")  # type: ignore[call-arg]

    def test_subclass_has_verdict(self) -> None:
        assert RerankerNotConfiguredError("no reranker").verdict is None
        malformed = ReceiptError("receipt 3: no target", number=3)
        assert (malformed.verdict, malformed.number) == (None, 3)
