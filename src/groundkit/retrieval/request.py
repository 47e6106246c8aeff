"""One search as a value: the query and every option, defined, checked and described here.

``SearchRequest`` is built once, where a search enters groundkit (``Collection.search``,
``search_collections``, ``groundkit.sync``, the framework retrievers, the MCP tools,
``grk search``), and handed down unchanged: no surface restates an option's checks,
and the pinning tests (tests/retrieval/test_request.py) fail when a surface's options,
defaults or descriptions drift from the fields here (adr/0067-one-search-request.md).

A refused option is a ``RetrievalError``, never pydantic's ``ValidationError``: the
checks run before pydantic sees the values. Its message names options as Python
does; ``name_options`` gives it with another surface's names (``grk``'s flags).
"""

from __future__ import annotations

import copy
import json
import math
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, ClassVar, Literal, TypedDict, Unpack

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from groundkit.config import MAX_TOP_K, RetrievalConfig
from groundkit.contracts import ContextKind, SearchMode, fill_trusted
from groundkit.errors import GroundkitError, InvalidQueryError, RetrievalError
from groundkit.lexical.bm25 import CURRENT, View
from groundkit.retrieval.context import EXPAND_KINDS
from groundkit.retrieval.filters import FILTER_OPERATORS, Filter, parse_filters
from groundkit.utils.text import describe_unencodable

__all__ = [
    "MAX_QUERY_CHARS",
    "REORDERS",
    "SEARCH_MODES",
    "Reorder",
    "SearchOptions",
    "SearchRequest",
    "name_options",
]

MAX_QUERY_CHARS = 10_000
SEARCH_MODES: tuple[SearchMode, ...] = ("bm25", "dense", "hybrid")
Reorder = Literal["lost-in-the-middle"]
REORDERS: tuple[str, ...] = ("lost-in-the-middle",)


class SearchOptions(TypedDict, total=False):
    """``SearchRequest``'s options but ``query`` and ``top_k``, as keyword arguments
    (``Collection.search(query, top_k, **options)``); a test pins it to the model."""

    mode: SearchMode
    rerank: bool
    filters: Mapping[str, Any] | None
    as_of: datetime | str | None
    expand: ContextKind | None
    mmr: float | None
    reorder: Reorder | None
    rewrite: bool
    min_relevance: float | Literal["auto"] | None


class _OptionError(InvalidQueryError):
    """A refused option. ``template`` writes each option it names as ``{field}``, so a
    surface with other names for them (``grk``'s flags) can say it in its own terms."""

    def __init__(self, template: str, *, message: str | None = None) -> None:
        super().__init__(message or template.format_map(_PYTHON_NAMES))
        self.template = template


def name_options(exc: GroundkitError, names: Mapping[str, str]) -> str:
    """``exc``'s message with the options it names called as ``names`` calls them
    (a field missing from ``names`` keeps its own name); other errors unchanged."""
    if not isinstance(exc, _OptionError):
        return str(exc)
    return exc.template.format_map({**_PYTHON_NAMES, **names})


def _literal(text: str) -> str:
    """``text`` for a template: its braces are not placeholders."""
    return text.replace("{", "{{").replace("}", "}}")


_TOP_K = f"how many results, 1 to {MAX_TOP_K} (default: the collection's setting, 10)"


class SearchRequest(BaseModel):
    """A search: the query and its options, checked once on construction.

    ``SearchRequest(query="tea", mode="hybrid", top_k=5)``; pass it wherever a
    query string goes (``col.search(request)``). Frozen and hashable; ``replace``
    gives a checked copy with some options changed. ``model_dump(mode="json")`` and
    ``model_validate`` round-trip it (``as_of`` as an ISO 8601 string with an offset).
    """

    # The schema is built on first use: ``__init__`` checks its arguments itself and
    # sets values of the fields' own types directly, so most requests never need it.
    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    query: str = Field(
        description=f"what to search for: text, at most {MAX_QUERY_CHARS} characters"
    )
    top_k: int | None = Field(default=None, description=_TOP_K)
    mode: SearchMode = Field(
        default="bm25",
        description="bm25: words; dense: meaning, through the collection's embedding model; "
        "hybrid: both, fused",
    )
    rerank: bool = Field(
        default=False,
        description="reorder the best candidates with the cross-encoder the collection "
        "was opened with",
    )
    filters: dict[str, Any] | None = Field(
        default=None,
        description="only documents whose fields match, all conditions together: "
        '{"field": {"op": value}} with op one of ' + ", ".join(FILTER_OPERATORS) + "; "
        '{"field": value} means eq. "source" is the document\'s path or URL: '
        '{"source": {"prefix": "docs/"}} or {"source": {"glob": "docs/**/*.md"}}. '
        "Unknown fields are an error, never ignored",
    )
    as_of: datetime | None = Field(
        default=None,
        description="search the documents as they stood at this moment, each one's version "
        "current then (bm25 only; a moment with a time zone)",
    )
    expand: ContextKind | None = Field(
        default=None,
        description="give each result the passage around it as context, an exact slice of "
        "its source: parent (its section) or window (the chunks next to it); hits inside a "
        "passage are folded into it",
    )
    mmr: float | None = Field(
        default=None,
        description="diversify the results (maximal marginal relevance): the weight of "
        "relevance from 0 to 1, 1 is relevance only",
    )
    reorder: Reorder | None = Field(
        default=None,
        description="lost-in-the-middle: the strongest results first and last, for prompts",
    )
    rewrite: bool = Field(
        default=False,
        description="also search the query's rephrasings from the collection's query "
        "rewriter (a glossary), fused by rank",
    )
    min_relevance: float | Literal["auto"] | None = Field(
        default=None,
        description="dense and hybrid only: leave out results less likely than this to be "
        "relevant (a probability between 0 and 1, read off the embedding model's relevance "
        "calibration), or auto: those below the calibration's floor, so a query the "
        "collection cannot answer returns nothing (default: the collection's setting, none)",
    )

    # The options ``search_collections`` does not take: they rework one collection's
    # ranking, and a fused ranking is not one.
    SINGLE_COLLECTION: ClassVar[tuple[str, ...]] = ("expand", "mmr", "reorder", "rewrite")

    def __init__(
        self, *, query: str, top_k: int | None = None, **options: Unpack[SearchOptions]
    ) -> None:
        checked = _checked({"query": query, "top_k": top_k, **options})
        if _plain(checked):
            # Values pydantic would keep as they are: set, not validated again (a
            # search builds one per call). A test pins equality with validation.
            fill_trusted(self, {**_DEFAULTS, **checked}, set(checked))
            return
        try:
            super().__init__(**checked)
        except ValidationError as exc:  # only if a check above is missing: never leaks
            raise InvalidQueryError(_describe(exc)) from None

    @classmethod
    def model_validate(
        cls,
        obj: Any,
        *,
        strict: bool | None = None,
        extra: Any = None,
        from_attributes: bool | None = None,
        context: Any | None = None,
        by_alias: bool | None = None,
        by_name: bool | None = None,
    ) -> SearchRequest:
        """A request from a mapping (what ``model_dump`` gave), checked as ``__init__`` does."""
        if isinstance(obj, cls):
            return obj
        if not isinstance(obj, Mapping):
            raise InvalidQueryError(f"a search request is a mapping, not {type(obj).__name__}")
        # Checked before the call, so a missing query is refused like an empty one.
        return cls(**_checked({str(k): v for k, v in obj.items()}))

    @classmethod
    def model_validate_json(
        cls,
        json_data: str | bytes | bytearray,
        *,
        strict: bool | None = None,
        extra: Any = None,
        context: Any | None = None,
        by_alias: bool | None = None,
        by_name: bool | None = None,
    ) -> SearchRequest:
        try:
            data = json.loads(json_data)
        except (ValueError, RecursionError):
            raise InvalidQueryError("a search request's JSON is not valid JSON") from None
        return cls.model_validate(data)

    @classmethod
    def of(
        cls, query: str | SearchRequest, top_k: int | None = None, **options: Any
    ) -> SearchRequest:
        """The request a search call describes: ``query`` itself when it is one (then
        no option may be given beside it), else one built from the arguments."""
        if isinstance(query, SearchRequest):
            given = sorted(options) + (["top_k"] if top_k is not None else [])
            if given:
                raise InvalidQueryError(
                    f"options given beside a SearchRequest ({', '.join(given)}): set them in "
                    "the request, or use request.replace(...)"
                )
            return query
        return cls(query=query, top_k=top_k, **options)

    @classmethod
    def checked_options(cls, **options: Any) -> dict[str, Any]:
        """``options`` (any fields but ``query``) checked as a request's are, for a
        surface that is given its query later (the framework retrievers)."""
        if "query" in options:
            raise InvalidQueryError("query is given with each search, not among the options")
        checked = _checked({"query": "-", **options})
        del checked["query"]
        return checked

    @classmethod
    def describe(cls, name: str) -> str:
        """Field ``name``'s description, for a surface that documents the option."""
        description = cls.model_fields[name].description
        assert description is not None
        return description

    def replace(self, **changes: Any) -> SearchRequest:
        """A copy with ``changes`` (field=value), checked as a new request is."""
        return type(self)(**{**self.fields(), **changes})

    def model_copy(
        self, *, update: Mapping[str, Any] | None = None, deep: bool = False
    ) -> SearchRequest:
        """pydantic's copy, but an ``update`` is checked as ``replace`` checks it:
        pydantic's own would take ``top_k=-5`` or ``query=""`` as they are."""
        if not update:
            return super().model_copy(deep=deep)
        return self.replace(**{str(name): value for name, value in update.items()})

    def fields(self) -> dict[str, Any]:
        """Every field's value, as given (``as_of`` a datetime, ``filters`` a copy)."""
        values = {name: getattr(self, name) for name in type(self).model_fields}
        values["filters"] = copy.deepcopy(self.filters)
        return values

    def options(self) -> dict[str, Any]:
        """The options: every field but ``query`` (and ``top_k``), as keywords."""
        values = self.fields()
        del values["query"], values["top_k"]
        return values

    def k(self, config: RetrievalConfig) -> int:
        """The number of results wanted: ``top_k``, else ``config``'s."""
        return config.top_k if self.top_k is None else self.top_k

    @property
    def filter(self) -> Filter | None:
        """The filters, parsed (``groundkit.retrieval.filters``)."""
        return parse_filters(self.filters)

    @property
    def view(self) -> View:
        """What the search reads: the current documents, or those as of ``as_of``."""
        return CURRENT if self.as_of is None else View(self.as_of.timestamp())

    def check_single_collection(self) -> None:
        """``RetrievalError`` naming the options a multi-collection search does not take."""
        given = [n for n in self.SINGLE_COLLECTION if getattr(self, n) not in (None, False)]
        if given:
            listed = ", ".join("{" + name + "}" for name in given)
            raise _OptionError(
                f"{listed}: searching several collections together does not take "
                f"{'this option' if len(given) == 1 else 'these options'}; search one "
                "{collection} at a time"
            )

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(
            f"a SearchRequest is frozen; request.replace({name}=...) gives a changed copy"
        )

    def __delattr__(self, name: str) -> None:
        raise AttributeError("a SearchRequest is frozen")

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, SearchRequest):
            return NotImplemented
        return self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def _key(self) -> str:
        """The request as canonical text, what equality and the hash read, so equal
        requests hash alike and requests that search differently are never equal: a
        filter's ``1`` and ``1.0`` are one number and its tuples lists (as the filter
        reads them), but ``True`` is not ``1``; ``as_of`` is its instant, in any zone."""
        values = self.fields()
        values["filters"] = _canonical(values["filters"])
        if self.as_of is not None:
            values["as_of"] = self.as_of.astimezone(UTC).isoformat()
        return json.dumps(values, sort_keys=True)


_DEFAULTS = {name: field.default for name, field in SearchRequest.model_fields.items()}
_EXACT = {
    "query": (str,),
    "top_k": (int, type(None)),
    "mode": (str,),
    "rerank": (bool,),
    "rewrite": (bool,),
    "as_of": (datetime, type(None)),
    "expand": (str, type(None)),
    "mmr": (float, type(None)),
    "reorder": (str, type(None)),
    "min_relevance": (float, str, type(None)),
}


def _canonical(value: object) -> object:
    """A filter value as the filter compares it: integral floats as ints, tuples as
    lists, booleans kept apart from numbers (JSON writes them apart)."""
    if isinstance(value, Mapping):
        return {str(key): _canonical(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_canonical(item) for item in value]
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def _plain(checked: dict[str, Any]) -> bool:
    """Whether ``checked`` (what ``_checked`` let through) holds values of exactly the
    types its fields keep, so validating it would change nothing. Subclasses (a str
    enum, a datetime subclass) and filters with keys that are not plain strings go
    through pydantic as before."""
    for name, value in checked.items():
        types = _EXACT.get(name)
        if types is None:
            if name != "filters":
                return False
            if value is not None and not all(type(key) is str for key in value):
                return False
        elif type(value) not in types:
            return False
    return True


# Beside the fields, a message may name what a surface calls a collection.
_PYTHON_NAMES = {name: name for name in [*SearchRequest.model_fields, "collection"]}


def _checked(values: dict[str, Any]) -> dict[str, Any]:
    """``values`` checked and normalised; ``RetrievalError`` naming the first bad one.
    Messages never quote the query."""
    unknown = sorted(set(values) - set(SearchRequest.model_fields))
    if unknown:
        raise InvalidQueryError(
            f"unknown search option(s) {', '.join(map(repr, unknown))}; the options are "
            f"{', '.join(SearchRequest.model_fields)}"
        )
    out = dict(values)
    query = values.get("query")
    if not isinstance(query, str) or not query.strip():
        raise _OptionError("{query} must be a non-empty string")
    if len(query) > MAX_QUERY_CHARS:
        raise _OptionError(f"{{query}} is longer than {MAX_QUERY_CHARS} characters")
    problem = describe_unencodable(query, "the query")
    if problem is not None:
        raise InvalidQueryError(problem)
    mode = values.get("mode", "bm25")
    if mode not in SEARCH_MODES:
        raise _OptionError(
            f"unknown {{mode}} {_literal(repr(mode))}; choose one of {', '.join(SEARCH_MODES)}"
        )
    top_k = values.get("top_k")
    if top_k is not None and (
        isinstance(top_k, bool) or not isinstance(top_k, int) or not 1 <= top_k <= MAX_TOP_K
    ):
        raise _OptionError(
            f"{{top_k}} must be an integer from 1 to {MAX_TOP_K}, got {_literal(repr(top_k))}"
        )
    for name in ("rerank", "rewrite"):
        if not isinstance(values.get(name, False), bool):
            raise _OptionError(
                f"{{{name}}} must be True or False, got {_literal(repr(values[name]))}"
            )
    out["filters"] = _filters(values.get("filters"))
    out["as_of"] = _as_of(values.get("as_of"), mode)
    expand = values.get("expand")
    if expand is not None and expand not in EXPAND_KINDS:
        raise _OptionError(
            f"{{expand}} must be one of {', '.join(EXPAND_KINDS)}, got {_literal(repr(expand))}"
        )
    mmr = values.get("mmr")
    if mmr is not None:
        if (
            isinstance(mmr, bool)
            or not isinstance(mmr, int | float)
            or not math.isfinite(mmr)
            or not 0.0 <= mmr <= 1.0
        ):
            raise _OptionError(
                "{mmr} is the relevance weight, a number from 0 to 1 (1: relevance only), "
                f"got {_literal(repr(mmr))}"
            )
        out["mmr"] = float(mmr)
    reorder = values.get("reorder")
    if reorder is not None and reorder not in REORDERS:
        raise _OptionError(
            f"{{reorder}} must be one of {', '.join(REORDERS)}, got {_literal(repr(reorder))}"
        )
    out["min_relevance"] = _min_relevance(values.get("min_relevance"), mode)
    return out


def _min_relevance(value: object, mode: object) -> float | Literal["auto"] | None:
    """A probability strictly between 0 and 1, or ``"auto"``; BM25 results have no
    relevance to cut on, so the option is refused there rather than ignored."""
    if value is None:
        return None
    if value != "auto" and (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or not 0.0 < value < 1.0
    ):
        raise _OptionError(
            "{min_relevance} is a probability between 0 and 1 (exclusive) or auto, "
            f"got {_literal(repr(value))}"
        )
    if mode == "bm25":
        raise _OptionError(
            "{min_relevance} applies to dense and hybrid searches (a BM25 score says "
            "nothing calibrated about relevance), not {mode} bm25"
        )
    return "auto" if value == "auto" else float(value)


def _filters(filters: object) -> dict[str, Any] | None:
    """A private copy of ``filters`` once their syntax is checked (a caller's later
    change to its dict cannot change the request)."""
    if filters is None:
        return None
    try:
        parse_filters(filters)
    except RetrievalError as exc:
        raise _OptionError("{filters}: " + _literal(str(exc)), message=str(exc)) from None
    assert isinstance(filters, Mapping)
    return copy.deepcopy(dict(filters))


def _as_of(as_of: object, mode: object) -> datetime | None:
    """``as_of`` as a timezone-aware datetime (an ISO 8601 string with an offset is read
    as one); refused without a time zone, or with a mode other than bm25."""
    if as_of is None:
        return None
    if isinstance(as_of, str):
        try:
            as_of = datetime.fromisoformat(as_of)
        except ValueError:
            raise _OptionError(
                "{as_of} must be a datetime or an ISO 8601 date-time with a time zone"
            ) from None
    if not isinstance(as_of, datetime):
        raise _OptionError(f"{{as_of}} must be a datetime, got {type(as_of).__name__}")
    try:
        offset = as_of.utcoffset()
        as_of.timestamp()
    except (ValueError, TypeError, ArithmeticError) as exc:
        raise _OptionError(
            "{as_of} has a time zone that cannot be used: " + _literal(str(exc))
        ) from None
    except Exception as exc:  # a caller's tzinfo may raise anything
        raise _OptionError(
            "{as_of}'s time zone failed to give its offset: "
            + _literal(f"{type(exc).__name__}: {exc}")
        ) from None
    if as_of.tzinfo is None or offset is None:
        raise _OptionError("{as_of} must carry a time zone, e.g. datetime(2026, 3, 1, tzinfo=UTC)")
    if mode != "bm25":
        raise _OptionError(
            "{as_of} searches in bm25 mode only (vectors are kept for current versions "
            f"alone), not {{mode}} {_literal(str(mode))}"
        )
    return as_of


def _describe(exc: ValidationError) -> str:
    problems = []
    for error in exc.errors(include_url=False, include_input=False, include_context=False):
        where = ".".join(str(part) for part in error["loc"]) or "request"
        problems.append(f"{where}: {error['msg']}")
    return "invalid search request: " + "; ".join(problems)
