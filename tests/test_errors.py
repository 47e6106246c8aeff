"""The exception tree and the verdict attribute."""

from __future__ import annotations

import inspect

import pytest

import groundkit
from groundkit import errors
from groundkit.errors import (
    ConfigurationError,
    GroundkitError,
    IndexIdentityError,
    IngestionError,
    NotGroundedError,
    ReceiptError,
    RerankerNotConfiguredError,
    RetrievalError,
    StorageError,
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
]


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
