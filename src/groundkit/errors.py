"""The one exception tree groundkit raises.

::

    GroundkitError
    ├── ConfigurationError          bad settings, missing optional extra
    ├── IngestionError              a source could not be loaded or stored
    ├── StorageError                the index on disk is unusable (schema, I/O)
    ├── IndexIdentityError          index built with another analyzer/embedder
    ├── RetrievalError              bad query, or a citation that does not check out
    │   ├── RerankerNotConfiguredError
    │   └── ReceiptError            a receipt (a citation as a Web Annotation) is malformed
    ├── NotGroundedError            (also an AssertionError) groundkit.testing's verdict
    └── (nothing else crosses the public API)

``RetrievalError.verdict`` is ``"drifted"`` when a source was read and no longer
holds the cited span, ``"unresolvable"`` when it could not be checked at all, and
``None`` for errors unrelated to a citation (an empty query, say).
"""

from __future__ import annotations

from typing import Literal

Verdict = Literal["drifted", "unresolvable"]

__all__ = [
    "ConfigurationError",
    "GroundkitError",
    "IndexIdentityError",
    "IngestionError",
    "NotGroundedError",
    "ReceiptError",
    "RerankerNotConfiguredError",
    "RetrievalError",
    "StorageError",
    "Verdict",
    "kind_of",
]


class GroundkitError(Exception):
    """Root of every error groundkit raises on purpose."""


class ConfigurationError(GroundkitError):
    """Invalid settings, or an optional extra that is not installed."""


class IngestionError(GroundkitError):
    """A source could not be read, decoded, chunked or stored."""


class StorageError(GroundkitError):
    """The metadata or vector store is missing, corrupt or of another schema."""


class IndexIdentityError(GroundkitError):
    """The collection was built with a different analyzer or embedding model."""


class RetrievalError(GroundkitError):
    """A search was refused, or a citation failed to resolve."""

    def __init__(self, message: str, *, verdict: Verdict | None = None) -> None:
        super().__init__(message)
        self.verdict: Verdict | None = verdict


class RerankerNotConfiguredError(RetrievalError):
    """``rerank=True`` was asked of a retriever that has no reranker."""


class ReceiptError(RetrievalError):
    """A receipt cannot be read as a citation: ``number`` is its place in its file
    (1-based; 0 for the file as a whole) and the message says what is wrong."""

    def __init__(self, message: str, *, number: int = 0) -> None:
        super().__init__(message)
        self.number = number


class NotGroundedError(GroundkitError, AssertionError):
    """An answer's quotes are not all grounded in its results (``groundkit.testing``).

    An ``AssertionError`` too, so a test runner reports it as a failed assertion.
    """


def kind_of(exc: BaseException) -> str:
    """The name of ``exc``'s class as users see it: the nearest public one.

    groundkit raises private subclasses of its public errors for its own
    bookkeeping; messages, tool results and spans name the public class.
    """
    for cls in type(exc).__mro__:
        if not cls.__name__.startswith("_"):
            return cls.__name__
    return type(exc).__name__
