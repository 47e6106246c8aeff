"""Conformance suites for groundkit's seams, shipped so any implementation can prove itself.

Each suite is a class of pytest tests; subclass it in a ``Test*`` class that
provides one fixture yielding a fresh, empty store, and pytest runs every test
against it (as Haystack ships its document-store tests)::

    import pytest
    from groundkit.testing.conformance import MetadataStoreConformance

    class TestMyStore(MetadataStoreConformance):
        @pytest.fixture
        async def store(self, tmp_path):
            store = await MyStore.open(tmp_path / "db")
            yield store
            await store.close()

``VectorStoreConformance`` wants a ``vector_store`` fixture (``DIM``-wide
vectors), ``SnapshotStoreConformance`` a ``snapshot_store`` fixture, and
``PackStoreConformance`` (the lexical index's packs) a ``pack_store`` fixture
plus two hooks that reach a pack's stored bytes; ``ClaimJudgeConformance`` (the
answer check's contradiction judges) a ``judge_factory`` fixture;
``IngestExecutorConformance`` (where an ingest's per-file work runs) an ``executor``
fixture; ``LexicalIndexConformance`` (a BM25 or other lexical index) a ``build`` fixture
that indexes a corpus of analysed terms and returns a ``BuiltIndex``.
``ExtractorConformance`` wants an ``extractor_factory`` fixture (a fresh
extractor per call) and ``sample_files``, ``(file name, bytes)`` pairs of files with text;
``LoaderConformance`` a ``loader_factory`` fixture and ``sample_files``, ``(relative path,
bytes)`` of files it accepts; both take optional ``damaged_files`` it must refuse with
``IngestionError`` (and the loader suite ``rejected_names``). Both check determinism,
typed failures on damaged input, and that what they give is exactly what a citation check
reads back. ``EmbedderConformance`` wants an ``embedder_factory`` fixture and
``RerankerConformance`` a ``reranker_factory`` fixture (each a fresh, identically configured
instance per call); ``sample_texts``, ``sample_query`` and ``sample_candidates`` give them
input they really read, and ``TOLERANCE``/``BATCH_TOLERANCE`` loosen the vector comparisons
for an embedder whose vectors move a little with their batch (ONNX int8). They hold an
implementation to what groundkit checks at ingest and search time, so a defect shows in its
own tests first. The suites need pytest and pytest-asyncio (``asyncio_mode = "auto"``).
"""

from __future__ import annotations

# Raises ConfigurationError naming the install when pytest is missing.
import groundkit.testing.conformance._needs_pytest  # noqa: F401
from groundkit.testing.conformance.embedders import EmbedderConformance
from groundkit.testing.conformance.executors import IngestExecutorConformance
from groundkit.testing.conformance.extractors import ExtractorConformance
from groundkit.testing.conformance.judges import ClaimJudgeConformance
from groundkit.testing.conformance.lexical import BuiltIndex, LexicalIndexConformance
from groundkit.testing.conformance.loaders import LoaderConformance
from groundkit.testing.conformance.metadata import MetadataStoreConformance
from groundkit.testing.conformance.rerankers import RerankerConformance
from groundkit.testing.conformance.rewriters import RewriterConformance
from groundkit.testing.conformance.segments import PackStoreConformance
from groundkit.testing.conformance.snapshots import SnapshotStoreConformance
from groundkit.testing.conformance.vectors import DIM, VectorStoreConformance

__all__ = [
    "DIM",
    "BuiltIndex",
    "ClaimJudgeConformance",
    "EmbedderConformance",
    "ExtractorConformance",
    "IngestExecutorConformance",
    "LexicalIndexConformance",
    "LoaderConformance",
    "MetadataStoreConformance",
    "PackStoreConformance",
    "RerankerConformance",
    "RewriterConformance",
    "SnapshotStoreConformance",
    "VectorStoreConformance",
]
