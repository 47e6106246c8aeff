"""groundkit: retrieval whose every result carries a citation you can verify.

``import groundkit`` loads almost nothing: each public name is imported from its
module the first time it is used (PEP 562), so a program, or ``grk``, pays only
for the parts it touches. Type checkers see the imports below as usual.
"""

from __future__ import annotations

import logging as _logging
import typing as _typing

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
from groundkit.utils.lazy import lazy_names as _lazy_names

if _typing.TYPE_CHECKING:
    from groundkit.collection import Collection
    from groundkit.config import (
        MAX_TOP_K,
        AnalyzerConfig,
        ChunkingConfig,
        ChunkStrategy,
        IngestConfig,
        RetrievalConfig,
    )
    from groundkit.contracts import (
        ANSWER_PROBLEMS,
        SENSITIVITY_LEVELS,
        AnswerReport,
        AnswerSentence,
        AnswerVerdict,
        Chunk,
        Citation,
        CollectionFailure,
        CollectionManifest,
        ContextKind,
        ContextSpan,
        DeleteReport,
        Document,
        DocumentRecord,
        EmbeddingIdentity,
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
        QuoteCheck,
        QuoteVerdict,
        ReadFrom,
        Record,
        RetrievalResult,
        SearchMode,
        SearchResponse,
        SourceClass,
        Verification,
        heading_path_at,
        record_id_of,
    )
    from groundkit.extraction import (
        DocxExtractor,
        EpubExtractor,
        Extraction,
        ExtractorProtocol,
        HtmlExtractor,
        MainContentHtmlExtractor,
        PdfExtractor,
        PptxExtractor,
        active_extractors,
    )
    from groundkit.ingestion.chunking import chunk_document, chunk_spans
    from groundkit.ingestion.dispatch import RoutingLoader
    from groundkit.ingestion.executor import IngestExecutor, LocalExecutor
    from groundkit.ingestion.extracted import (
        DocxLoader,
        EpubLoader,
        HtmlLoader,
        PdfLoader,
        PptxLoader,
    )
    from groundkit.ingestion.files import FileLoader
    from groundkit.ingestion.indexer import Indexer
    from groundkit.ingestion.outline import markdown_outline, rst_outline
    from groundkit.ingestion.protocols import LoaderProtocol
    from groundkit.ingestion.ray_executor import RayExecutor
    from groundkit.ingestion.url_loader import UrlLoader
    from groundkit.lexical.analyzer import Analyzer
    from groundkit.lexical.bm25 import BM25Index
    from groundkit.lexical.protocols import LexicalIndexProtocol
    from groundkit.providers import (
        EmbeddingProtocol,
        OllamaEmbedder,
        OpenAICompatibleEmbedder,
        SentenceTransformerEmbedder,
        ensure_identity,
        identity_of,
        resolve_model,
    )
    from groundkit.retrieval.diversity import lost_in_the_middle, mmr_order
    from groundkit.retrieval.evidence import load_evidence
    from groundkit.retrieval.filters import FILTER_OPERATORS
    from groundkit.retrieval.fusion import FusedHit, convex_combination, reciprocal_rank_fusion
    from groundkit.retrieval.multi import search_collections
    from groundkit.retrieval.request import SearchRequest
    from groundkit.retrieval.rerank import CrossEncoderReranker, RerankerProtocol
    from groundkit.retrieval.rewriting import GlossaryRewriter, QueryRewriterProtocol
    from groundkit.retrieval.search import Retriever
    from groundkit.service import CollectionInfo, CollectionRegistry, build_server, run_server
    from groundkit.storage.lancedb import LanceDBVectorStore
    from groundkit.storage.location import StoreLocation
    from groundkit.storage.postgres import PostgresMetadataStore
    from groundkit.storage.protocols import (
        MetadataStoreProtocol,
        SnapshotStore,
        VectorHit,
        VectorStoreProtocol,
    )
    from groundkit.storage.sqlite import SQLiteMetadataStore
    from groundkit.sync import SyncCollection
    from groundkit.telemetry import SPAN_ATTRIBUTES, SPAN_NAMES
    from groundkit.utils.sentences import sentence_spans
    from groundkit.utils.url_safety import AddressPolicy
    from groundkit.verification.answers import verify_answer
    from groundkit.verification.claims import ClaimJudge, ClaimJudgement, ClaimPair, RuleClaimJudge
    from groundkit.verification.judges import ChatClaimJudge, EntailmentModelJudge
    from groundkit.verification.quotes import check_quote, verify_quote
    from groundkit.verification.receipts import (
        Receipt,
        check_receipts,
        read_receipts,
        write_receipts,
    )
    from groundkit.verification.sources import resolve_citation
    from groundkit.verification.verdict import check_citation, verify_citation
    from groundkit.verification.verifier import VerifyReport

    __version__: str

# The public names each module defines; imported on first use.
_DEFINED_IN: dict[str, tuple[str, ...]] = {
    "groundkit.collection": ("Collection",),
    "groundkit.config": (
        "MAX_TOP_K",
        "AnalyzerConfig",
        "ChunkingConfig",
        "ChunkStrategy",
        "IngestConfig",
        "RetrievalConfig",
    ),
    "groundkit.contracts": (
        "ANSWER_PROBLEMS",
        "SENSITIVITY_LEVELS",
        "AnswerReport",
        "AnswerSentence",
        "AnswerVerdict",
        "Chunk",
        "Citation",
        "CollectionFailure",
        "CollectionManifest",
        "ContextKind",
        "ContextSpan",
        "DeleteReport",
        "Document",
        "DocumentRecord",
        "EmbeddingIdentity",
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
        "QuoteCheck",
        "QuoteVerdict",
        "ReadFrom",
        "Record",
        "RetrievalResult",
        "SearchMode",
        "SearchResponse",
        "SourceClass",
        "Verification",
        "heading_path_at",
        "record_id_of",
    ),
    "groundkit.extraction": (
        "DocxExtractor",
        "EpubExtractor",
        "Extraction",
        "ExtractorProtocol",
        "HtmlExtractor",
        "MainContentHtmlExtractor",
        "PdfExtractor",
        "PptxExtractor",
        "active_extractors",
    ),
    "groundkit.ingestion.chunking": ("chunk_document", "chunk_spans"),
    "groundkit.ingestion.dispatch": ("RoutingLoader",),
    "groundkit.ingestion.executor": ("IngestExecutor", "LocalExecutor"),
    "groundkit.ingestion.extracted": (
        "DocxLoader",
        "EpubLoader",
        "HtmlLoader",
        "PdfLoader",
        "PptxLoader",
    ),
    "groundkit.ingestion.files": ("FileLoader",),
    "groundkit.ingestion.indexer": ("Indexer",),
    "groundkit.ingestion.outline": ("markdown_outline", "rst_outline"),
    "groundkit.ingestion.protocols": ("LoaderProtocol",),
    "groundkit.ingestion.ray_executor": ("RayExecutor",),
    "groundkit.ingestion.url_loader": ("UrlLoader",),
    "groundkit.lexical.analyzer": ("Analyzer",),
    "groundkit.lexical.bm25": ("BM25Index",),
    "groundkit.lexical.protocols": ("LexicalIndexProtocol",),
    "groundkit.providers": (
        "EmbeddingProtocol",
        "OllamaEmbedder",
        "OpenAICompatibleEmbedder",
        "SentenceTransformerEmbedder",
        "ensure_identity",
        "identity_of",
        "resolve_model",
    ),
    "groundkit.retrieval.diversity": ("lost_in_the_middle", "mmr_order"),
    "groundkit.retrieval.evidence": ("load_evidence",),
    "groundkit.retrieval.filters": ("FILTER_OPERATORS",),
    "groundkit.retrieval.fusion": ("FusedHit", "convex_combination", "reciprocal_rank_fusion"),
    "groundkit.retrieval.multi": ("search_collections",),
    "groundkit.retrieval.request": ("SearchRequest",),
    "groundkit.retrieval.rerank": ("CrossEncoderReranker", "RerankerProtocol"),
    "groundkit.retrieval.rewriting": ("GlossaryRewriter", "QueryRewriterProtocol"),
    "groundkit.retrieval.search": ("Retriever",),
    "groundkit.service": ("CollectionInfo", "CollectionRegistry", "build_server", "run_server"),
    "groundkit.storage.lancedb": ("LanceDBVectorStore",),
    "groundkit.storage.location": ("StoreLocation",),
    "groundkit.storage.postgres": ("PostgresMetadataStore",),
    "groundkit.storage.protocols": (
        "MetadataStoreProtocol",
        "SnapshotStore",
        "VectorHit",
        "VectorStoreProtocol",
    ),
    "groundkit.storage.sqlite": ("SQLiteMetadataStore",),
    "groundkit.sync": ("SyncCollection",),
    "groundkit.telemetry": ("SPAN_ATTRIBUTES", "SPAN_NAMES"),
    "groundkit.utils.sentences": ("sentence_spans",),
    "groundkit.utils.url_safety": ("AddressPolicy",),
    "groundkit.verification.answers": ("verify_answer",),
    "groundkit.verification.claims": (
        "ClaimJudge",
        "ClaimJudgement",
        "ClaimPair",
        "RuleClaimJudge",
    ),
    "groundkit.verification.judges": ("ChatClaimJudge", "EntailmentModelJudge"),
    "groundkit.verification.quotes": ("check_quote", "verify_quote"),
    "groundkit.verification.receipts": (
        "Receipt",
        "check_receipts",
        "read_receipts",
        "write_receipts",
    ),
    "groundkit.verification.sources": ("resolve_citation",),
    "groundkit.verification.verdict": ("check_citation", "verify_citation"),
    "groundkit.verification.verifier": ("VerifyReport",),
}


def _version() -> str:
    import importlib.metadata

    try:
        # One place for the version: pyproject.toml, read back from the installed distribution.
        return importlib.metadata.version("groundkit")
    except importlib.metadata.PackageNotFoundError:  # a source tree that was never installed
        return "0+unknown"


__getattr__, __dir__ = _lazy_names(
    __name__, globals(), _DEFINED_IN, computed={"__version__": _version}
)

# A library configures no handlers; this only silences "no handler" fallbacks.
_logging.getLogger("groundkit").addHandler(_logging.NullHandler())

__all__ = [
    "ANSWER_PROBLEMS",
    "FILTER_OPERATORS",
    "MAX_TOP_K",
    "SENSITIVITY_LEVELS",
    "SPAN_ATTRIBUTES",
    "SPAN_NAMES",
    "AddressPolicy",
    "Analyzer",
    "AnalyzerConfig",
    "AnswerReport",
    "AnswerSentence",
    "AnswerVerdict",
    "BM25Index",
    "ChatClaimJudge",
    "Chunk",
    "ChunkStrategy",
    "ChunkingConfig",
    "Citation",
    "ClaimJudge",
    "ClaimJudgement",
    "ClaimPair",
    "Collection",
    "CollectionFailure",
    "CollectionInfo",
    "CollectionManifest",
    "CollectionRegistry",
    "ConfigurationError",
    "ContextKind",
    "ContextSpan",
    "CrossEncoderReranker",
    "DeleteReport",
    "Document",
    "DocumentRecord",
    "DocxExtractor",
    "DocxLoader",
    "EmbeddingIdentity",
    "EmbeddingProtocol",
    "EntailmentModelJudge",
    "EpubExtractor",
    "EpubLoader",
    "ErasureReport",
    "Evidence",
    "EvidenceMethod",
    "EvidenceSpan",
    "Extraction",
    "ExtractorProtocol",
    "FetchResult",
    "FileLoader",
    "FusedHit",
    "GlossaryRewriter",
    "GroundkitError",
    "Highlights",
    "HtmlExtractor",
    "HtmlLoader",
    "IndexIdentityError",
    "Indexer",
    "IngestConfig",
    "IngestExecutor",
    "IngestFailure",
    "IngestProgress",
    "IngestReport",
    "IngestWarning",
    "IngestionError",
    "LanceDBVectorStore",
    "LexicalIndexProtocol",
    "LoaderProtocol",
    "LocalExecutor",
    "MainContentHtmlExtractor",
    "MetadataStoreProtocol",
    "MultiSearchResponse",
    "NotGroundedError",
    "OllamaEmbedder",
    "OpenAICompatibleEmbedder",
    "PdfExtractor",
    "PdfLoader",
    "PostgresMetadataStore",
    "PptxExtractor",
    "PptxLoader",
    "QueryRewriterProtocol",
    "QuoteCheck",
    "QuoteVerdict",
    "RayExecutor",
    "ReadFrom",
    "Receipt",
    "ReceiptError",
    "Record",
    "RerankerNotConfiguredError",
    "RerankerProtocol",
    "RetrievalConfig",
    "RetrievalError",
    "RetrievalResult",
    "Retriever",
    "RoutingLoader",
    "RuleClaimJudge",
    "SQLiteMetadataStore",
    "SearchMode",
    "SearchRequest",
    "SearchResponse",
    "SentenceTransformerEmbedder",
    "SnapshotStore",
    "SourceClass",
    "StorageError",
    "StoreLocation",
    "SyncCollection",
    "UrlLoader",
    "VectorHit",
    "VectorStoreProtocol",
    "Verification",
    "VerifyReport",
    "__version__",
    "active_extractors",
    "build_server",
    "check_citation",
    "check_quote",
    "check_receipts",
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
    "read_receipts",
    "reciprocal_rank_fusion",
    "record_id_of",
    "resolve_citation",
    "resolve_model",
    "rst_outline",
    "run_server",
    "search_collections",
    "sentence_spans",
    "verify_answer",
    "verify_citation",
    "verify_quote",
    "write_receipts",
]
