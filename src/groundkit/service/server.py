"""The MCP server over one index directory.

Tools: ``search``, ``search_collections``, ``fetch_chunk``, ``list_collections``.

Built on the official ``mcp`` SDK (2.x, ``MCPServer``), imported only when a
server is built so that ``import groundkit`` stays light; without the
``serve`` extra, building one raises ``ConfigurationError``.

Arguments have typed schemas. A call that does not fit them, names an unknown
collection, or fails inside groundkit comes back as a tool error (``isError``)
with one line, ``<tool> failed (<kind>): <reason>``, never as a protocol error or
a traceback. Reasons are written for the caller, who sent the query, but the SDK
also logs them at INFO, so the query text is cut out of every message before it
leaves.

Every tool is annotated read-only and idempotent, and answers twice: the full
result as ``structuredContent`` (its schema published), and a compact text block
for a model to read (``compact_text``: a line per result with its source,
offsets and chunk id, then its text), instead of the same JSON indented
(adr/0032-mcp-text-and-errors.md).
"""

from __future__ import annotations

import inspect
import logging
import re
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Annotated, Any, Literal, TypeVar, Unpack

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    StrictBool,
    StrictFloat,
    StrictInt,
    ValidationError,
    model_serializer,
)

from groundkit.config import MAX_TOP_K
from groundkit.contracts import (
    AnswerSentence,
    CollectionFailure,
    ContextKind,
    ContextSpan,
    EmbeddingIdentity,
    EvidenceMethod,
    FetchResult,
    MultiSearchResponse,
    PageRect,
    ReadFrom,
    RetrievalResult,
    SearchMode,
    SearchResponse,
    SourceClass,
    Verification,
)
from groundkit.errors import (
    ConfigurationError,
    GroundkitError,
    RerankerNotConfiguredError,
    RetrievalError,
    kind_of,
)
from groundkit.retrieval.evidence import load_evidence
from groundkit.retrieval.multi import search_collections
from groundkit.retrieval.request import MAX_QUERY_CHARS, Reorder, SearchOptions, SearchRequest
from groundkit.service.collections import CollectionInfo, CollectionRegistry
from groundkit.service.moments import MOMENT_EXAMPLES, parse_moment
from groundkit.storage.names import COLLECTION_NAME_PATTERN

if TYPE_CHECKING:
    from mcp.server.mcpserver import MCPServer

__all__ = [
    "CHUNK_URI_TEMPLATE",
    "AnswerCheck",
    "CitedResult",
    "CollectionList",
    "FetchedChunk",
    "ListedCollection",
    "MultiSearchOutput",
    "SearchOutput",
    "build_server",
    "chunk_resource",
    "compact_text",
    "tool_error",
]

logger = logging.getLogger("groundkit.service")

SERVE_EXTRA_HINT = "the MCP server needs the serve extra: pip install groundkit[serve]"
_INSTRUCTIONS = (
    "Search document collections and quote them with verifiable citations. Call search, "
    "then fetch_chunk on the chunk you intend to quote: its verification says whether the "
    "source still holds that text at the cited offsets (verified, moved, drifted, "
    "unresolvable). Quote a result's evidence sentences where you can. Before giving an "
    "answer that cites results as [1], [2]..., call verify_answer with it and the chunk_ids "
    "in that order, and fix every sentence it reports."
)

# -- argument types (module level: the SDK resolves annotations by name) -----

QueryArg = Annotated[
    str,
    Field(min_length=1, max_length=MAX_QUERY_CHARS, description=SearchRequest.describe("query")),
]
CollectionArg = Annotated[
    str,
    Field(
        pattern=COLLECTION_NAME_PATTERN.pattern,
        description="collection name; list_collections shows them",
    ),
]
# The search options' descriptions are SearchRequest's; what the tools add says how
# the server provides the option (tests/retrieval/test_request.py pins them).
ModeArg = Annotated[SearchMode, Field(description=SearchRequest.describe("mode"))]
TopKArg = Annotated[
    StrictInt, Field(ge=1, le=MAX_TOP_K, description=SearchRequest.describe("top_k"))
]
RerankArg = Annotated[
    StrictBool,
    Field(
        description=SearchRequest.describe("rerank")
        + " (the server's: it must be started with --rerank)"
    ),
]
FiltersArg = Annotated[dict[str, Any] | None, Field(description=SearchRequest.describe("filters"))]
CollectionsArg = Annotated[
    list[CollectionArg],
    Field(min_length=1, max_length=32, description="collections to search together"),
]
ChunkIdArg = Annotated[
    str,
    Field(min_length=1, max_length=256, description="chunk_id from a search result"),
]
AnswerArg = Annotated[
    str,
    Field(
        min_length=1,
        max_length=200_000,
        description="the answer to check, citing results with markers such as [1] or [1, 3]",
    ),
]
CitedChunksArg = Annotated[
    list[ChunkIdArg],
    Field(
        min_length=1,
        max_length=200,
        description="chunk_ids of the results the answer was written from, in order: "
        "marker [n] means the n-th",
    ),
]
AsOfArg = Annotated[
    str | None,
    Field(
        max_length=64,
        description=SearchRequest.describe("as_of")
        + f": an ISO 8601 date or date-time such as {MOMENT_EXAMPLES}; a date is midnight "
        "UTC, a time without an offset is UTC",
    ),
]
ExpandArg = Annotated[
    ContextKind | None,
    Field(description=SearchRequest.describe("expand") + " (context.collapsed)"),
]
MmrArg = Annotated[
    StrictFloat | None,
    Field(
        ge=0.0,
        le=1.0,
        allow_inf_nan=False,
        description=SearchRequest.describe("mmr"),
    ),
]
ReorderArg = Annotated[
    Reorder | None,
    Field(description=SearchRequest.describe("reorder")),
]
RewriteArg = Annotated[
    StrictBool,
    Field(
        description=SearchRequest.describe("rewrite")
        + " (the server's: it must be started with --glossary)"
    ),
]
MinRelevanceArg = Annotated[
    Annotated[StrictFloat, Field(gt=0.0, lt=1.0, allow_inf_nan=False)] | Literal["auto"] | None,
    Field(description=SearchRequest.describe("min_relevance")),
]
FullArg = Annotated[
    StrictBool,
    Field(
        description="every field of each result (chunk index, metadata, highlights, "
        "evidence scores, the citation's source class), not the compact shape"
    ),
]
VersionArg = Annotated[
    StrictInt | None,
    Field(
        ge=1,
        description="the document version the chunk belongs to, as a result's version "
        "names it (default: the current one, else the newest past one)",
    ),
]


# -- results ----------------------------------------------------------------


class _Wire(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class _Shaped(_Wire):
    """A wire model that writes only the fields it was given: the compact shape leaves
    out what ``full`` adds, rather than sending it as nulls."""

    @model_serializer(mode="wrap")
    def _given(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data: dict[str, Any] = handler(self)
        given = self.model_fields_set | set(self.model_extra or ())
        return {k: v for k, v in data.items() if k in given}


class ResultCitation(_Shaped):
    """Where a result's text lives (``Citation.to_dict``; ``full`` adds the rest)."""

    document_id: str
    chunk_id: str
    source: str
    start_offset: int
    end_offset: int
    # The document version the text is from (a past one only in as_of searches).
    version: int | None
    # The pages the span starts and ends on, for sources with pages.
    page: int | None = None
    end_page: int | None = None
    # Where the span stands on its PDF pages, as ``Citation.rects`` (one schema for both).
    rects: list[PageRect] | None = None
    source_class: SourceClass | None = None
    extractor: str | None = None


class ResultEvidence(_Shaped):
    """A sentence of the result that answers the query, with its source offsets (quote it)."""

    text: str
    start_offset: int
    end_offset: int
    score: float | None = None
    method: EvidenceMethod | None = None


class CitedResult(_Shaped):
    """One search hit in the shape every surface gives (``RetrievalResult.to_dict``): its
    text, score and citation, the sentences that answer the query, and the headings it lies
    under; ``full`` adds every other field the result has."""

    model_config = ConfigDict(frozen=True, extra="allow")

    content: str
    score: float
    citation: ResultCitation
    heading_path: list[str]
    # Up to three sentences of ``content`` that best answer the query, best first.
    evidence: list[ResultEvidence] | None = None
    # The fields of the result's document, when it has any.
    fields: dict[str, Any] | None = None
    collection: str | None = None
    # The passage around the chunk, when the search asked for one (expand).
    context: ContextSpan | None = None
    chunk_index: int | None = None
    metadata: dict[str, Any] | None = None
    # Query-term spans relative to ``content``; null for dense hits.
    highlights: list[tuple[int, int]] | None = None


class SearchOutput(_Wire):
    """What the ``search`` tool returns."""

    collection: str
    mode: SearchMode
    stage: str
    total_results: int
    # The collection's write count; null under the server's clearance, where it would
    # move with writes the caller may not read.
    generation: int | None
    latency_ms: float
    results: list[CitedResult]
    # Set when dense or hybrid was asked for but the vectors were unavailable: the
    # results are BM25's, and this says why.
    degraded: str | None = None
    # The moment searched (ISO 8601) when the call gave as_of.
    as_of: str | None = None
    # With rewrite: the queries searched, the original first (null when no rephrasing).
    queries: list[str] | None = None
    # The steps taken after ranking (rewrite, expand:parent, mmr:0.7, ...).
    steps: list[str] | None = None


class MultiSearchOutput(_Wire):
    """What ``search_collections`` returns: one fused ranking, and who failed."""

    collections: list[str]
    mode: SearchMode
    total_results: int
    latency_ms: float
    results: list[CitedResult]
    failures: list[CollectionFailure]
    # Collections that answered from BM25 because their vectors were unavailable, and why.
    degraded: dict[str, str] = Field(default_factory=dict)
    as_of: str | None = None


class FetchedChunk(_Shaped):
    """What ``fetch_chunk`` returns: the stored text and whether its source still holds it
    (``FetchResult.to_dict``, with the collection)."""

    collection: str
    content: str
    citation: ResultCitation
    verification: Verification
    detail: str
    # When the chunk's version stopped being current (ISO 8601; absent while it is).
    replaced_at: str | None = None
    # moved: where the indexed text is now; drifted: the closest passage, and how similar.
    current_start_offset: int | None = None
    current_end_offset: int | None = None
    similarity: float | None = None
    # Where the source's text was read: file, kept copy (the file is not on this host;
    # the collection's copy of its text), snapshot; absent when it could not be read.
    read_from: ReadFrom | None = None
    # With full: the version again (the citation has it).
    version: int | None = None


class AnswerCheck(_Wire):
    """What ``verify_answer`` returns: one verdict per sentence of the answer."""

    collection: str
    ok: bool
    counts: dict[str, int]
    problems: list[str]
    method: str
    supported_threshold: float
    weak_threshold: float
    # ALCE citation recall and precision (null: no claim, or no citation counted).
    citation_recall: float | None = None
    citation_precision: float | None = None
    sentences: list[AnswerSentence]
    # The verdict on each cited chunk's span, as fetch_chunk gives it (moved: where its
    # text is now; the sentences citing it keep their verdicts).
    citations: list[FetchResult] = Field(default_factory=list)


class ListedCollection(_Wire):
    """One collection as ``list_collections`` shows it (the server's paths left out)."""

    name: str
    documents: int | None
    chunks: int | None
    generation: int | None
    embedding: EmbeddingIdentity | None
    analyzer: str | None = None
    size_bytes: int | None = None
    status: str = "ok"
    error: str | None = None
    # Chunks without vectors yet (an ingest interrupted or running); dense search
    # cannot find them until an ingest completes them.
    vectors_missing: int | None = None
    # Vectors on object storage: "cached", "on", or "uncached: <why>" (ADR 0061).
    vector_cache: str | None = None
    # Why dense and hybrid searches answer from BM25 until the next ingest (the vector
    # table missing, unreadable or wrong), None when the vectors are usable.
    vector_problem: str | None = None

    @classmethod
    def of(cls, info: CollectionInfo) -> ListedCollection:
        return cls(**info.model_dump(exclude={"base_dir", "past_versions"}))


class CollectionList(_Wire):
    """What ``list_collections`` returns."""

    collections: list[ListedCollection]


# -- the text block a model reads ---------------------------------------------

_TEXT_CONTENT_CHARS = 2000  # per result; the structured content has all of it
_TEXT_CONTEXT_CHARS = 4000  # a passage (expand) in place of the chunk's text


def _flat(text: str, limit: int = _TEXT_CONTENT_CHARS) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def _where(citation: ResultCitation) -> str:
    page = citation.page
    end = citation.end_page
    pages = "" if page is None else f" p. {page}" if end in (None, page) else f" pp. {page}-{end}"
    return f"{citation.source} [{citation.start_offset}:{citation.end_offset}]{pages}"


def _fields_line(fields: dict[str, Any] | None) -> str | None:
    if not fields:
        return None
    shown = ", ".join(f"{k}={v}" for k, v in list(fields.items())[:8])
    return "   fields: " + _flat(shown, 300)


def _version(version: int | None, shown: bool) -> str:
    """`` version N`` where it tells something: a later version, or a search of the past."""
    return f" version {version}" if version is not None and (shown or version > 1) else ""


def _result_lines(results: list[CitedResult], with_collection: bool, past: bool) -> list[str]:
    """Per result its citation, then the sentences that answer the query: the chunk's
    text only when it has no such sentence (``fetch_chunk`` gives it whole)."""
    lines: list[str] = []
    for rank, r in enumerate(results, start=1):
        where = f"{r.collection}: " if with_collection and r.collection else ""
        lines.append(
            f"[{rank}] {where}{_where(r.citation)}{_version(r.citation.version, past)} score "
            f"{r.score:.4f} chunk_id {r.citation.chunk_id}"
        )
        if r.heading_path:
            lines.append("   under: " + _flat(" > ".join(r.heading_path), 300))
        fields = _fields_line(r.fields)
        if fields:
            lines.append(fields)
        for sentence in r.evidence or ():
            where = f"[{sentence.start_offset}:{sentence.end_offset}]"
            lines.append(f"   {where} {_flat(sentence.text)}")
        if r.context is not None:
            # The passage the search was asked for, in place of the chunk.
            span = r.context
            folded = len(span.collapsed)
            hits = f", {folded} more hit(s) folded in" if folded else ""
            lines.append(f"   context {span.kind} [{span.start_offset}:{span.end_offset}]{hits}:")
            lines.append("   " + _flat(span.content, _TEXT_CONTEXT_CHARS))
        elif not r.evidence:
            lines.append("   " + _flat(r.content))
    return lines


# Every chunk is readable as a resource by this URI (search results link to it).
CHUNK_URI_TEMPLATE = "groundkit://{collection}/chunks/{chunk_id}"


def chunk_resource(collection: str, chunk_id: str) -> str:
    """The resource URI of one chunk."""
    return CHUNK_URI_TEMPLATE.format(collection=collection, chunk_id=chunk_id)


def compact_text(output: BaseModel) -> str:
    """The text block beside a tool's structured result: short lines a person or a model
    reads at a glance (source, offsets, chunk id, then the text), not the JSON again."""
    if isinstance(output, SearchOutput):
        head = (
            f"{output.total_results} result(s) from collection {output.collection!r} "
            f"({output.stage}{_generation(output.generation)}, {output.latency_ms:.1f} ms)"
        )
        lines = [head]
        if output.as_of:
            lines.append(f"as of {output.as_of}: each document as it stood then")
        if output.queries:
            lines.append("queries searched: " + " | ".join(_flat(q, 300) for q in output.queries))
        if output.degraded:
            lines.append(f"note: {output.degraded}")
        lines += _result_lines(output.results, with_collection=False, past=bool(output.as_of))
        if output.results:
            lines.append(
                "fetch_chunk(chunk_id) gives a result's whole text, verified against its "
                "source: call it before quoting."
            )
        return "\n".join(lines)
    if isinstance(output, MultiSearchOutput):
        names = ", ".join(output.collections)
        lines = [f"{output.total_results} result(s) fused from {names}"]
        if output.as_of:
            lines.append(f"as of {output.as_of}: each document as it stood then")
        lines += [f"note: {name}: {why}" for name, why in output.degraded.items()]
        lines += [f"failed: {f.collection}: {f.error}: {f.detail}" for f in output.failures]
        lines += _result_lines(output.results, with_collection=True, past=bool(output.as_of))
        return "\n".join(lines)
    if isinstance(output, FetchedChunk):
        replaced = output.replaced_at is not None
        version = _version(output.citation.version, replaced)
        if replaced:
            version += f" (replaced {output.replaced_at})"
        return "\n".join(
            [
                f"{output.verification}: {_where(output.citation)}{version} chunk_id "
                f"{output.citation.chunk_id} in collection {output.collection!r}",
                f"   {output.detail}",
                output.content,
            ]
        )
    if isinstance(output, AnswerCheck):
        verdict = "grounded" if output.ok else f"{len(output.problems)} problem(s)"
        counts = ", ".join(f"{n} {v}" for v, n in output.counts.items())
        lines = [f"{verdict}: {len(output.sentences)} sentence(s) ({counts or 'none'})"]
        scores = [
            f"citation {name} {value:.2f}"
            for name, value in (
                ("recall", output.citation_recall),
                ("precision", output.citation_precision),
            )
            if value is not None
        ]
        if scores:
            lines.append(", ".join(scores))
        lines += output.problems
        lines += [
            f"cited chunk {c.citation.chunk_id} {c.verification}: {c.detail}"
            for c in output.citations
            if c.verification == "moved"
        ]
        return "\n".join(lines)
    if isinstance(output, CollectionList):
        if not output.collections:
            return "no collections"
        lines = []
        for c in output.collections:
            if c.status != "ok":
                lines.append(f"{c.name}: damaged: {c.error}")
                continue
            model = (
                f"{c.embedding.model_name} ({c.embedding.dimensions}-d)"
                if c.embedding is not None
                else "none (bm25 only)"
            )
            lines.append(
                f"{c.name}: {c.documents} documents, {c.chunks} chunks"
                f"{_generation(c.generation)}, embedding {model}"
                + (f", vectors missing: {c.vectors_missing}" if c.vectors_missing else "")
                + (f", vector cache {c.vector_cache}" if c.vector_cache else "")
                + (
                    f", vectors unusable (searches answer from BM25 until an ingest): "
                    f"{c.vector_problem}"
                    if c.vector_problem
                    else ""
                )
            )
        return "\n".join(lines)
    return output.model_dump_json()


def _generation(generation: int | None) -> str:
    """The generation as a search or listing line shows it: nothing under a clearance."""
    return "" if generation is None else f", generation {generation}"


def tool_error(tool: str, kind: str, message: str) -> str:
    """Every tool error, one line: ``<tool> failed (<kind>): <reason>``."""
    return f"{tool} failed ({kind}): " + " ".join(message.split())


def _cited(results: list[RetrievalResult], collection: str, full: bool) -> list[CitedResult]:
    named = (
        r if r.collection or not collection else r.model_copy(update={"collection": collection})
        for r in results
    )
    return [CitedResult.model_validate(r.to_dict(full=full)) for r in named]


def _search_output(
    collection: str, response: SearchResponse, *, full: bool = False
) -> SearchOutput:
    meta = response.metadata
    return SearchOutput(
        collection=collection,
        mode=response.mode,
        stage=str(meta.get("stage", response.mode)),
        total_results=response.total_results,
        generation=meta.get("generation"),
        latency_ms=float(meta.get("latency_ms", 0.0)),
        results=_cited(response.results, collection, full),
        degraded=meta.get("degraded"),
        as_of=meta.get("as_of"),
        queries=meta.get("queries"),
        steps=meta.get("steps"),
    )


def _multi_output(response: MultiSearchResponse, *, full: bool = False) -> MultiSearchOutput:
    return MultiSearchOutput(
        collections=response.collections,
        mode=response.mode,
        total_results=response.total_results,
        latency_ms=float(response.metadata.get("latency_ms", 0.0)),
        results=_cited(response.results, "", full),
        failures=response.failures,
        degraded={
            name: str(entry["degraded"])
            for name, entry in response.metadata.get("per_collection", {}).items()
            if entry.get("degraded")
        },
        as_of=response.metadata.get("as_of"),
    )


class _Leased:
    """A registry collection leased for each search only, so opening it can fail
    inside ``search_collections`` and be reported there like any other failure."""

    def __init__(self, registry: CollectionRegistry, name: str) -> None:
        self._registry = registry
        self.name = name

    async def search(
        self,
        query: str | SearchRequest,
        top_k: int | None = None,
        **options: Unpack[SearchOptions],
    ) -> SearchResponse:
        async with self._registry.lease(self.name) as col:
            return await col.search(query, top_k, **options)


def _without(text: str, secret: str | None) -> str:
    """``text`` with ``secret`` cut out (the SDK logs tool errors at INFO): where it
    stands whole, not inside a word, so a one-letter query leaves the message readable."""
    if not secret or not secret.strip() or secret not in text:
        return text
    whole = re.compile(rf"(?<!\w){re.escape(secret)}(?!\w)")
    return whole.sub("<query>", text)


def _describe_invalid(tool: str, exc: ValidationError) -> str:
    """A one-line account of rejected arguments, naming fields but never echoing values."""
    problems = []
    for error in exc.errors(include_url=False, include_input=False, include_context=False):
        where = ".".join(str(part) for part in error["loc"]) or "arguments"
        problems.append(f"{where}: {error['msg']}")
    return tool_error(tool, "invalid arguments", "; ".join(problems))


# What each tool's annotations say: all of them only read, the same answer twice over.
_TITLES = {
    "search": "Search a collection",
    "search_collections": "Search several collections",
    "fetch_chunk": "Fetch and verify a chunk",
    "list_collections": "List collections",
    "verify_answer": "Check an answer against its sources",
}


_T = TypeVar("_T")


def build_server(registry: CollectionRegistry, *, name: str = "groundkit") -> MCPServer:
    """An MCP server answering from ``registry``'s collections (not started)."""
    try:
        from mcp.server.mcpserver import MCPServer
        from mcp.server.mcpserver.exceptions import (
            ResourceNotFoundError,
            ToolError,
            UnexpectedToolError,
        )
        from mcp.server.mcpserver.tools import Tool
        from mcp_types import CallToolResult, ResourceLink, TextContent, ToolAnnotations
    except ImportError as exc:
        raise ConfigurationError(SERVE_EXTRA_HINT) from exc
    from groundkit import __version__

    class _Tool(Tool):
        """Rejects unknown arguments and reports invalid ones in one plain line."""

        async def run(
            self, arguments: dict[str, Any], context: Any, convert_result: bool = False
        ) -> Any:
            known = set(self.parameters.get("properties", {}))
            unknown = sorted(set(arguments) - known)
            if unknown:
                raise ToolError(
                    tool_error(
                        self.name,
                        "invalid arguments",
                        f"unknown argument(s) {', '.join(map(repr, unknown))}; "
                        + (
                            f"expected {', '.join(sorted(known))}"
                            if known
                            else f"{self.name} takes no arguments"
                        ),
                    )
                )
            try:
                output = await super().run(arguments, context, convert_result=False)
            except UnexpectedToolError:
                raise
            except ToolError as exc:
                cause = exc.__cause__
                if isinstance(cause, ValidationError):
                    raise ToolError(_describe_invalid(self.name, cause)) from cause
                if isinstance(cause, ToolError):
                    # Ours, already in the one style; without the SDK's prefix.
                    raise ToolError(str(cause)) from None
                raise
            if not convert_result:
                return output
            converted = self.fn_metadata.convert_result(output)
            if not isinstance(converted, CallToolResult) or not isinstance(output, BaseModel):
                return converted
            # The structured result stays as the SDK built it; the text beside it is ours,
            # and each search result links to its chunk as a resource.
            content: list[Any] = [TextContent(type="text", text=compact_text(output))]
            if isinstance(output, SearchOutput | MultiSearchOutput):
                content += [
                    ResourceLink(
                        type="resource_link",
                        uri=chunk_resource(r.collection or "", r.citation.chunk_id),
                        name=f"chunk {r.citation.chunk_id}",
                        title=f"[{rank}] {_where(r.citation)}",
                        mime_type="text/plain",
                    )
                    for rank, r in enumerate(output.results, start=1)
                ]
            return converted.model_copy(update={"content": content})

    async def guarded(action: Callable[[], Awaitable[_T]], tool: str, secret: str | None) -> _T:
        """Run ``action``; any failure becomes a ToolError with a message safe to log."""
        try:
            return await action()
        except ToolError:
            raise
        except GroundkitError as exc:
            raise ToolError(tool_error(tool, kind_of(exc), _without(str(exc), secret))) from None
        except Exception as exc:
            kind = kind_of(exc)
            # Messages of unexpected errors may quote user text: type name only,
            # the rest at DEBUG for whoever runs the server.
            logger.error("%s failed unexpectedly (%s)", tool, kind)
            logger.debug("%s failure detail", tool, exc_info=True)
            raise ToolError(
                tool_error(tool, kind, "unexpected error; the server log has the detail")
            ) from None

    def requested(tool: str, query: str, as_of: str | None, **options: Any) -> SearchRequest:
        """A tool's search arguments as one ``SearchRequest``, checked there; a refused
        one is an invalid-arguments tool error that never echoes the query or moment."""
        when = None
        if as_of is not None:
            try:
                when = parse_moment(as_of)
            except ConfigurationError as exc:
                raise ToolError(tool_error(tool, "invalid arguments", f"as_of: {exc}")) from None
        try:
            return SearchRequest(query=query, as_of=when, **options)
        except RetrievalError as exc:
            raise ToolError(
                tool_error(tool, "invalid arguments", _without(str(exc), query))
            ) from None

    async def search(
        query: QueryArg,
        collection: CollectionArg = "default",
        mode: ModeArg = "bm25",
        top_k: TopKArg = 10,
        rerank: RerankArg = False,
        filters: FiltersArg = None,
        as_of: AsOfArg = None,
        expand: ExpandArg = None,
        mmr: MmrArg = None,
        reorder: ReorderArg = None,
        rewrite: RewriteArg = False,
        min_relevance: MinRelevanceArg = None,
        full: FullArg = False,
    ) -> SearchOutput:
        """Search one collection. Every result carries a citation: source, chunk_id,
        character offsets and the document version, and the headings it lies under. as_of
        searches the documents as they stood at that moment; expand adds the passage around
        each result (parent section or window of chunks); mmr diversifies; reorder arranges
        for a prompt; rewrite also searches the server glossary's rephrasings. Call
        fetch_chunk on a result before quoting it."""

        async def run() -> SearchOutput:
            request = requested(
                "search",
                query,
                as_of,
                top_k=top_k,
                mode=mode,
                rerank=rerank,
                filters=filters,
                expand=expand,
                mmr=mmr,
                reorder=reorder,
                rewrite=rewrite,
                min_relevance=min_relevance,
            )
            if rewrite and registry.rewriter is None:
                raise ToolError(
                    tool_error(
                        "search",
                        "ConfigurationError",
                        "rewrite=true: this server has no glossary (start it with --glossary FILE)",
                    )
                )
            async with registry.lease(collection) as col:
                try:
                    response = await col.search(request)
                    await load_evidence(response.results)
                except RerankerNotConfiguredError:
                    raise ToolError(
                        tool_error(
                            "search",
                            "RerankerNotConfiguredError",
                            "rerank=true: this server has no reranker (start it with --rerank)",
                        )
                    ) from None
                except ConfigurationError:
                    if mode == "bm25" or col.embedder is not None:
                        raise
                    manifest = await col.store.read_manifest()
                    if manifest is None:
                        raise ToolError(
                            tool_error(
                                "search",
                                "ConfigurationError",
                                f"mode {mode!r} needs vectors and collection {collection!r} "
                                "has none; ingest it with an embedder (grk ingest --embedder "
                                "MODEL)",
                            )
                        ) from None
                    raise ToolError(
                        tool_error(
                            "search",
                            "ConfigurationError",
                            f"collection {collection!r} uses {manifest.provider} model "
                            f"{manifest.model_name!r}, which this server cannot load; "
                            "only mode='bm25' is available",
                        )
                    ) from None
            return _search_output(collection, response, full=full)

        return await guarded(run, "search", query)

    async def search_collections_tool(
        query: QueryArg,
        collections: CollectionsArg,
        mode: ModeArg = "bm25",
        top_k: TopKArg = 10,
        rerank: RerankArg = False,
        filters: FiltersArg = None,
        as_of: AsOfArg = None,
        min_relevance: MinRelevanceArg = None,
        full: FullArg = False,
    ) -> MultiSearchOutput:
        """Search several collections at once; one ranking fused by rank, each result
        naming its collection. Collections that could not be searched are listed in
        failures, never silently left out. as_of searches each as it stood then."""

        async def run() -> MultiSearchOutput:
            request = requested(
                "search_collections",
                query,
                as_of,
                top_k=top_k,
                mode=mode,
                rerank=rerank,
                filters=filters,
                min_relevance=min_relevance,
            )
            known = set(await registry.names())
            unknown = [n for n in collections if n not in known]
            if unknown:
                raise ToolError(
                    tool_error(
                        "search_collections",
                        "StorageError",
                        f"no collection(s) {', '.join(map(repr, unknown))} (this server has: "
                        f"{', '.join(sorted(known)) or 'none'})",
                    )
                )
            response = await search_collections(
                [_Leased(registry, n) for n in collections], request
            )
            await load_evidence(response.results)
            return _multi_output(response, full=full)

        return await guarded(run, "search_collections", query)

    search_collections_tool.__name__ = "search_collections"

    async def fetch_chunk(
        chunk_id: ChunkIdArg,
        collection: CollectionArg = "default",
        version: VersionArg = None,
        full: FullArg = False,
    ) -> FetchedChunk:
        """One chunk with its citation, re-checked against its source now: verification is
        verified (the source holds this text at these offsets), moved (intact at
        current_start_offset..current_end_offset instead), drifted or unresolvable;
        read_from says where the source's text was read ("kept copy": the file is not on
        this host, the collection's copy of its text was). version picks a past
        version's chunk (a result's version); replaced_at says when that version stopped
        being current."""

        async def run() -> FetchedChunk:
            async with registry.lease(collection) as col:
                result = await col.fetch_chunk(chunk_id, version)
            return FetchedChunk.model_validate(
                {"collection": collection, **result.to_dict(full=full)}
            )

        return await guarded(run, "fetch_chunk", None)

    async def list_collections() -> CollectionList:
        """The collections this server can search, with their sizes and embedding model.
        One that cannot be read is listed with status 'damaged' and the reason."""

        async def run() -> CollectionList:
            names = await registry.names()
            return CollectionList(
                collections=[ListedCollection.of(i) for i in await registry.describe_each(names)]
            )

        return await guarded(run, "list_collections", None)

    async def verify_answer(
        answer: AnswerArg, chunk_ids: CitedChunksArg, collection: CollectionArg = "default"
    ) -> AnswerCheck:
        """Check an answer written from search results, sentence by sentence, against the
        sources as they read now. Marker [n] cites chunk_ids[n-1]. Each sentence gets a
        verdict: quoted (its quotes are in the cited spans), supported / weak /
        unsupported (its closest cited sentence is similar enough or not: similarity, not
        entailment), misquoted, uncited, dangling (a marker naming no chunk), drifted or
        unresolvable (the cited text is gone), no_claim. citations gives each cited chunk's
        own verdict (as fetch_chunk would): a chunk whose text moved still supports its
        sentences, and says where its text is now.
        citation_recall is the share of claims their citations support,
        citation_precision the share of citations needed (ALCE's measures)."""

        async def run() -> AnswerCheck:
            async with registry.lease(collection) as col:
                report = await col.verify_answer(answer, chunk_ids)
            return AnswerCheck(
                collection=collection,
                ok=report.ok,
                counts=report.counts,
                problems=report.problems,
                method=report.method,
                supported_threshold=report.supported_threshold,
                weak_threshold=report.weak_threshold,
                citation_recall=report.citation_recall,
                citation_precision=report.citation_precision,
                sentences=report.sentences,
                citations=report.citations,
            )

        return await guarded(run, "verify_answer", answer)

    async def read_chunk(collection: str, chunk_id: str) -> str:
        """The chunk's text exactly as indexed (fetch_chunk says whether its source still
        holds it)."""

        if not COLLECTION_NAME_PATTERN.fullmatch(collection):
            raise ResourceNotFoundError(f"no collection {collection!r}")
        try:
            async with registry.lease(collection) as col:
                return (await col.fetch_chunk(chunk_id)).content
        except GroundkitError as exc:
            # A missing chunk or collection reads as not found; the message is ours.
            raise ResourceNotFoundError(" ".join(str(exc).split())) from None

    tools = []
    for fn in (search, search_collections_tool, fetch_chunk, list_collections, verify_answer):
        title = _TITLES[fn.__name__]
        tools.append(
            _Tool.from_function(
                fn,
                title=title,
                # Docstrings keep their source indentation; hosts show the text as is.
                description=inspect.cleandoc(fn.__doc__ or ""),
                annotations=ToolAnnotations(
                    title=title,
                    read_only_hint=True,
                    destructive_hint=False,
                    idempotent_hint=True,
                    open_world_hint=False,
                ),
            )
        )
    # MCPServer's constructor calls logging.basicConfig, which would install a
    # handler on the root logger; a library must leave that to the application.
    root = logging.getLogger()
    placeholder = logging.NullHandler()
    root.addHandler(placeholder)
    try:
        server = MCPServer(name, version=__version__, instructions=_INSTRUCTIONS, tools=tools)
    finally:
        root.removeHandler(placeholder)
    server.resource(
        CHUNK_URI_TEMPLATE,
        name="chunk",
        title="A chunk of a collection",
        description="The text of one chunk exactly as it was indexed; search results link "
        "to these. Call fetch_chunk to re-check it against its source.",
        mime_type="text/plain",
    )(read_chunk)
    return server
