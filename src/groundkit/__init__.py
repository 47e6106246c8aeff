"""groundkit: retrieval whose every result carries a citation you can verify.

The top level holds what an application uses: ``Collection``, the results and
citations it returns, the functions that search and verify, the configuration, the
errors, and the embedders, rerankers and judges a collection takes. Stores,
indexes, loaders, extractors and the server live in their subpackages
(``groundkit.storage``, ``groundkit.lexical``, ``groundkit.ingestion``,
``groundkit.extraction``, ``groundkit.retrieval``, ``groundkit.verification``,
``groundkit.service``, ``groundkit.providers``); blocking use is ``groundkit.sync``.

``import groundkit`` loads almost nothing: each public name is imported from its
module the first time it is used (PEP 562), so a program, or ``grk``, pays only
for the parts it touches. Type checkers see the imports below as usual.
"""

from __future__ import annotations

import importlib as _importlib
import logging as _logging
import typing as _typing
import warnings as _warnings

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
)
from groundkit.utils.lazy import lazy_names as _lazy_names

if _typing.TYPE_CHECKING:
    from groundkit.collection import Collection
    from groundkit.config import (
        AnalyzerConfig,
        ChunkingConfig,
        ChunkStrategy,
        IngestConfig,
        RelevanceCalibration,
        RetrievalConfig,
    )
    from groundkit.contracts import (
        ANSWER_PROBLEMS,
        SENSITIVITY_LEVELS,
        AnswerReport,
        AnswerSentence,
        AnswerVerdict,
        Citation,
        CollectionFailure,
        ContextKind,
        ContextSpan,
        DeleteReport,
        ErasureReport,
        Evidence,
        EvidenceMethod,
        EvidenceSpan,
        FetchResult,
        Highlights,
        IngestFailure,
        IngestProgress,
        IngestReport,
        IngestWarning,
        MultiSearchResponse,
        OptimizeReport,
        QuoteCheck,
        QuoteVerdict,
        ReadFrom,
        Record,
        RetrievalResult,
        Scores,
        SearchMode,
        SearchResponse,
        SourceClass,
        Verification,
    )
    from groundkit.ingestion import AddressPolicy, UrlLoader
    from groundkit.providers import (
        EmbeddingProtocol,
        OllamaEmbedder,
        OpenAICompatibleEmbedder,
        SentenceTransformerEmbedder,
    )
    from groundkit.retrieval import (
        CrossEncoderReranker,
        GlossaryRewriter,
        QueryRewriterProtocol,
        RerankerProtocol,
        SearchRequest,
        search_collections,
    )
    from groundkit.verification import (
        ChatClaimJudge,
        ClaimJudge,
        EntailmentModelJudge,
        Receipt,
        RuleClaimJudge,
        VerifyReport,
        check_citation,
        check_quote,
        check_receipts,
        read_receipts,
        resolve_citation,
        verify_answer,
        write_receipts,
    )

    __version__: str

# The public names each module defines; imported on first use.
_DEFINED_IN: dict[str, tuple[str, ...]] = {
    "groundkit.collection": ("Collection",),
    "groundkit.config": (
        "AnalyzerConfig",
        "ChunkingConfig",
        "ChunkStrategy",
        "IngestConfig",
        "RelevanceCalibration",
        "RetrievalConfig",
    ),
    "groundkit.contracts": (
        "ANSWER_PROBLEMS",
        "SENSITIVITY_LEVELS",
        "AnswerReport",
        "AnswerSentence",
        "AnswerVerdict",
        "Citation",
        "CollectionFailure",
        "ContextKind",
        "ContextSpan",
        "DeleteReport",
        "ErasureReport",
        "Evidence",
        "EvidenceMethod",
        "EvidenceSpan",
        "FetchResult",
        "Highlights",
        "IngestFailure",
        "IngestProgress",
        "IngestReport",
        "IngestWarning",
        "MultiSearchResponse",
        "OptimizeReport",
        "QuoteCheck",
        "QuoteVerdict",
        "ReadFrom",
        "Record",
        "RetrievalResult",
        "Scores",
        "SearchMode",
        "SearchResponse",
        "SourceClass",
        "Verification",
    ),
    "groundkit.ingestion": ("AddressPolicy", "UrlLoader"),
    "groundkit.providers": (
        "EmbeddingProtocol",
        "OllamaEmbedder",
        "OpenAICompatibleEmbedder",
        "SentenceTransformerEmbedder",
    ),
    "groundkit.retrieval": (
        "CrossEncoderReranker",
        "GlossaryRewriter",
        "QueryRewriterProtocol",
        "RerankerProtocol",
        "SearchRequest",
        "search_collections",
    ),
    "groundkit.verification": (
        "ChatClaimJudge",
        "ClaimJudge",
        "EntailmentModelJudge",
        "Receipt",
        "RuleClaimJudge",
        "VerifyReport",
        "check_citation",
        "check_quote",
        "check_receipts",
        "read_receipts",
        "resolve_citation",
        "verify_answer",
        "write_receipts",
    ),
}

# Names the top level exported before its surface was narrowed. Each still resolves for
# one release from the first of ``_HOMES`` that exports it, with a DeprecationWarning
# naming the new import; none is in ``__all__`` or ``dir(groundkit)``
# (adr/0066-public-surface.md).
_MOVED = frozenset(
    {
        "FILTER_OPERATORS",
        "MAX_TOP_K",
        "SPAN_ATTRIBUTES",
        "SPAN_NAMES",
        "Analyzer",
        "BM25Index",
        "Chunk",
        "ClaimJudgement",
        "ClaimPair",
        "CollectionInfo",
        "CollectionManifest",
        "CollectionRegistry",
        "Document",
        "DocumentRecord",
        "DocxExtractor",
        "DocxLoader",
        "EmbeddingIdentity",
        "EpubExtractor",
        "EpubLoader",
        "Extraction",
        "ExtractorProtocol",
        "FileLoader",
        "FusedHit",
        "HtmlExtractor",
        "HtmlLoader",
        "Indexer",
        "IngestExecutor",
        "LanceDBVectorStore",
        "LexicalIndexProtocol",
        "LoaderProtocol",
        "LocalExecutor",
        "MainContentHtmlExtractor",
        "MetadataStoreProtocol",
        "PdfExtractor",
        "PdfLoader",
        "PostgresMetadataStore",
        "PptxExtractor",
        "PptxLoader",
        "RayExecutor",
        "Retriever",
        "RoutingLoader",
        "SQLiteMetadataStore",
        "SnapshotStore",
        "StoreLocation",
        "SyncCollection",
        "VectorHit",
        "VectorStoreProtocol",
        "active_extractors",
        "build_server",
        "chunk_document",
        "chunk_spans",
        "convex_combination",
        "ensure_identity",
        "heading_path_at",
        "identity_of",
        "load_evidence",
        "lost_in_the_middle",
        "markdown_outline",
        "mmr_order",
        "reciprocal_rank_fusion",
        "record_id_of",
        "resolve_model",
        "rst_outline",
        "run_server",
        "sentence_spans",
    }
)
_HOMES = (
    "groundkit.config",
    "groundkit.contracts",
    "groundkit.extraction",
    "groundkit.ingestion",
    "groundkit.lexical",
    "groundkit.providers",
    "groundkit.retrieval",
    "groundkit.service",
    "groundkit.storage",
    "groundkit.sync",
    "groundkit.telemetry",
    "groundkit.verification",
)
# Aliases that were already deprecated: they go with the next release, not elsewhere.
_RETIRING: dict[str, tuple[str, str]] = {
    "verify_citation": (
        "groundkit.verification.verdict",
        "groundkit.check_citation(citation, content, base_dir).ok",
    ),
    "verify_quote": (
        "groundkit.verification.quotes",
        "groundkit.check_quote(quote, cited, base_dir).ok",
    ),
}


def _moved_names() -> dict[str, tuple[str, str]]:
    """Each old top-level name: the module it now comes from, and what to write instead
    (imports the homes' packages, which cost little: their names load on first use)."""
    moved: dict[str, tuple[str, str]] = {}
    for home in _HOMES:
        exported = _importlib.import_module(home).__all__
        for name in _MOVED.intersection(exported).difference(moved):
            moved[name] = (home, f"from {home} import {name}")
    return {**moved, **_RETIRING}


def _version() -> str:
    import importlib.metadata

    try:
        # One place for the version: pyproject.toml, read back from the installed distribution.
        return importlib.metadata.version("groundkit")
    except importlib.metadata.PackageNotFoundError:  # a source tree that was never installed
        return "0+unknown"


_public, __dir__ = _lazy_names(__name__, globals(), _DEFINED_IN, computed={"__version__": _version})


def __getattr__(name: str) -> object:
    if name not in _MOVED and name not in _RETIRING:
        return _public(name)
    home, instead = _moved_names()[name]
    # Not kept in the namespace: every use warns, and the name stays out of vars() and dir().
    _warnings.warn(
        f"groundkit.{name} is deprecated and will be removed in the next release; use {instead}",
        DeprecationWarning,
        stacklevel=2,
    )
    return getattr(_importlib.import_module(home), name)


# A library configures no handlers; this only silences "no handler" fallbacks.
_logging.getLogger("groundkit").addHandler(_logging.NullHandler())

__all__ = [
    "ANSWER_PROBLEMS",
    "SENSITIVITY_LEVELS",
    "AddressPolicy",
    "AnalyzerConfig",
    "AnswerReport",
    "AnswerSentence",
    "AnswerVerdict",
    "ChatClaimJudge",
    "ChunkNotFoundError",
    "ChunkStrategy",
    "ChunkingConfig",
    "Citation",
    "ClaimJudge",
    "Collection",
    "CollectionFailure",
    "CollectionNotFoundError",
    "ConfigurationError",
    "ContextKind",
    "ContextSpan",
    "CrossEncoderReranker",
    "DeleteReport",
    "EmbeddingProtocol",
    "EntailmentModelJudge",
    "ErasureReport",
    "Evidence",
    "EvidenceMethod",
    "EvidenceSpan",
    "FetchResult",
    "GlossaryRewriter",
    "GroundkitError",
    "Highlights",
    "IndexIdentityError",
    "IngestConfig",
    "IngestFailure",
    "IngestProgress",
    "IngestReport",
    "IngestWarning",
    "IngestionError",
    "InvalidInputError",
    "InvalidQueryError",
    "InvalidSettingError",
    "MultiSearchResponse",
    "NotGroundedError",
    "OllamaEmbedder",
    "OpenAICompatibleEmbedder",
    "OptimizeReport",
    "QueryRewriterProtocol",
    "QuoteCheck",
    "QuoteVerdict",
    "ReadFrom",
    "Receipt",
    "ReceiptError",
    "Record",
    "RecordNotFoundError",
    "RelevanceCalibration",
    "RerankerNotConfiguredError",
    "RerankerProtocol",
    "RetrievalConfig",
    "RetrievalError",
    "RetrievalResult",
    "RuleClaimJudge",
    "Scores",
    "SearchMode",
    "SearchRequest",
    "SearchResponse",
    "SentenceTransformerEmbedder",
    "SourceClass",
    "StorageError",
    "UrlLoader",
    "Verification",
    "VerifyReport",
    "__version__",
    "check_citation",
    "check_quote",
    "check_receipts",
    "read_receipts",
    "resolve_citation",
    "search_collections",
    "verify_answer",
    "write_receipts",
]
