"""The one exception tree groundkit raises.

::

    GroundkitError
    ├── ConfigurationError          bad settings, missing optional extra
    │   └── InvalidSettingError     (also a ValueError) a setting or argument out of range
    ├── IngestionError              a source could not be loaded or stored
    │   ├── InvalidInputError       (also a ValueError) bad metadata, record id or text
    │   └── RecordNotFoundError     (also a LookupError) no record with that id
    ├── StorageError                the index on disk is unusable (schema, I/O)
    │   └── CollectionNotFoundError (also a LookupError) no collection of that name
    ├── IndexIdentityError          index built with another analyzer/embedder
    ├── RetrievalError              bad query, or a citation that does not check out
    │   ├── InvalidQueryError       (also a ValueError) a search or fetch argument
    │   ├── ChunkNotFoundError      (also a LookupError) no chunk with that id (or hidden)
    │   ├── RerankerNotConfiguredError
    │   └── ReceiptError            a receipt (a citation as a Web Annotation) is malformed
    ├── NotGroundedError            (also an AssertionError) groundkit.testing's verdict
    └── (nothing else crosses the public API)

The ``Invalid*`` and ``*NotFound`` errors refine their family: code that catches the
family still catches them, and so does code that catches ``ValueError`` or
``LookupError``, as it would for a built-in container or parser. ``kind_of`` (what
tool results, failure lists and spans show) names the family.

``RetrievalError.verdict`` is ``"drifted"`` when a source was read and no longer
holds the cited span, ``"unresolvable"`` when it could not be checked at all, and
``None`` for errors unrelated to a citation (an empty query, say).
"""

from __future__ import annotations

from typing import Literal

Verdict = Literal["drifted", "unresolvable"]

__all__ = [
    "ChunkNotFoundError",
    "CollectionNotFoundError",
    "ConfigurationError",
    "GroundkitError",
    "IndexIdentityError",
    "IngestionError",
    "InvalidInputError",
    "InvalidQueryError",
    "InvalidSettingError",
    "NotGroundedError",
    "ReceiptError",
    "RecordNotFoundError",
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


class InvalidSettingError(ConfigurationError, ValueError):
    """A setting or an argument has a value out of its range or of the wrong kind
    (a missing extra stays a plain ``ConfigurationError``). For a settings model,
    ``setting`` is its class name and ``problems`` lists each refused field with its
    reason and the value given, so a surface can name the field its own way (``grk``
    names its flag)."""

    def __init__(
        self,
        message: str,
        *,
        setting: str | None = None,
        problems: tuple[tuple[str, str, object], ...] = (),
    ) -> None:
        super().__init__(message)
        self.setting = setting
        self.problems = problems


class InvalidInputError(IngestionError, ValueError):
    """What was given to ingest is invalid (metadata fields, a record's id or text):
    refused before anything was stored."""


class RecordNotFoundError(IngestionError, LookupError):
    """No in-memory record has the id given."""


class CollectionNotFoundError(StorageError, LookupError):
    """No collection of that name exists where it was looked for."""


class InvalidQueryError(RetrievalError, ValueError):
    """A search or fetch argument is invalid (an empty query, ``top_k`` out of range,
    an unknown mode, a naive ``as_of``, a bad filter or version)."""


class ChunkNotFoundError(RetrievalError, LookupError):
    """No chunk has that id in the collection, or its clearance hides it."""

    def __init__(self, message: str, *, verdict: Verdict | None = "unresolvable") -> None:
        super().__init__(message, verdict=verdict)


class NotGroundedError(GroundkitError, AssertionError):
    """An answer's quotes are not all grounded in its results (``groundkit.testing``).

    An ``AssertionError`` too, so a test runner reports it as a failed assertion.
    """


def kind_of(exc: BaseException) -> str:
    """The name of ``exc``'s class as users see it: the nearest public one.

    groundkit raises private subclasses of its public errors for its own
    bookkeeping; messages, tool results and spans name the public class, and for
    a refinement (``InvalidQueryError``, ``ChunkNotFoundError``, ...) its family.
    """
    for cls in type(exc).__mro__:
        if not cls.__name__.startswith("_") and not _refinement(cls):
            return cls.__name__
    return type(exc).__name__


def _refinement(cls: type) -> bool:
    """``cls`` is one of the ``Invalid*``/``*NotFound`` errors, which refine a family."""
    return issubclass(cls, GroundkitError) and bool({ValueError, LookupError} & set(cls.__bases__))
