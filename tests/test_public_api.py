"""The public surface: exactly these names, each importable."""

from __future__ import annotations

import importlib
import importlib.metadata
import subprocess
import sys

import groundkit

EXPECTED_ALL = [
    "AddressPolicy",
    "Analyzer",
    "AnalyzerConfig",
    "BM25Index",
    "Chunk",
    "ChunkingConfig",
    "Citation",
    "Collection",
    "CollectionFailure",
    "CollectionInfo",
    "CollectionManifest",
    "CollectionRegistry",
    "ConfigurationError",
    "CrossEncoderReranker",
    "Document",
    "DocumentRecord",
    "EmbeddingIdentity",
    "EmbeddingProtocol",
    "Extraction",
    "ExtractorProtocol",
    "FILTER_OPERATORS",
    "FetchResult",
    "FileLoader",
    "FusedHit",
    "GroundkitError",
    "Highlights",
    "HtmlExtractor",
    "HtmlLoader",
    "IndexIdentityError",
    "Indexer",
    "IngestConfig",
    "IngestFailure",
    "IngestReport",
    "IngestionError",
    "LanceDBVectorStore",
    "LexicalIndexProtocol",
    "LoaderProtocol",
    "MAX_TOP_K",
    "MetadataStoreProtocol",
    "MultiSearchResponse",
    "NotGroundedError",
    "OllamaEmbedder",
    "OpenAICompatibleEmbedder",
    "PdfExtractor",
    "PdfLoader",
    "PostgresMetadataStore",
    "QuoteCheck",
    "QuoteVerdict",
    "RerankerNotConfiguredError",
    "RerankerProtocol",
    "RetrievalConfig",
    "RetrievalError",
    "RetrievalResult",
    "Retriever",
    "RoutingLoader",
    "SENSITIVITY_LEVELS",
    "SPAN_ATTRIBUTES",
    "SPAN_NAMES",
    "SQLiteMetadataStore",
    "SearchMode",
    "SearchResponse",
    "SentenceTransformerEmbedder",
    "SnapshotStore",
    "SourceClass",
    "StorageError",
    "UrlLoader",
    "VectorHit",
    "VectorStoreProtocol",
    "Verification",
    "VerifyReport",
    "__version__",
    "active_extractors",
    "build_server",
    "check_quote",
    "chunk_document",
    "chunk_spans",
    "convex_combination",
    "ensure_identity",
    "identity_of",
    "reciprocal_rank_fusion",
    "resolve_citation",
    "resolve_model",
    "run_server",
    "search_collections",
    "verify_citation",
    "verify_quote",
]


def test_all_is_pinned() -> None:
    assert sorted(EXPECTED_ALL) == EXPECTED_ALL  # keep the literal sorted
    assert sorted(groundkit.__all__) == EXPECTED_ALL
    assert len(groundkit.__all__) == len(set(groundkit.__all__))


def test_every_name_is_importable() -> None:
    fresh = importlib.import_module("groundkit")
    namespace: dict[str, object] = {}
    exec("from groundkit import *", namespace)
    for name in EXPECTED_ALL:
        assert getattr(fresh, name) is not None, name
        assert name in namespace, name


def test_version_matches_distribution() -> None:
    assert groundkit.__version__ == importlib.metadata.version("groundkit")


def test_importing_groundkit_loads_no_optional_dependency() -> None:
    # groundkit.testing too: pytest loads it in every run where groundkit is installed.
    code = (
        "import sys, groundkit, groundkit.testing; "
        "heavy = {'torch', 'sentence_transformers', 'transformers', 'lancedb', 'pyarrow', "
        "'mcp', 'uvicorn', 'starlette', 'opentelemetry.sdk', 'pypdf', 'bs4'}; "
        "print(sorted(heavy & set(sys.modules)))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"
