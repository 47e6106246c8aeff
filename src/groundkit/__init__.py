"""groundkit: retrieval whose every result carries a citation you can verify."""

from __future__ import annotations

import importlib.metadata as _metadata
import logging as _logging

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

try:
    # One place for the version: pyproject.toml, read back from the installed distribution.
    __version__ = _metadata.version("groundkit")
except _metadata.PackageNotFoundError:  # imported from a source tree that was never installed
    __version__ = "0+unknown"

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
