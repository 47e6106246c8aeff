"""Conformance suites for the storage seams, shipped so any store can prove itself.

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
fixture. The suites need pytest and
pytest-asyncio (``asyncio_mode = "auto"``).
"""

from __future__ import annotations

# Raises ConfigurationError naming the install when pytest is missing.
import groundkit.testing.conformance._needs_pytest  # noqa: F401
from groundkit.testing.conformance.executors import IngestExecutorConformance
from groundkit.testing.conformance.judges import ClaimJudgeConformance
from groundkit.testing.conformance.metadata import MetadataStoreConformance
from groundkit.testing.conformance.rewriters import RewriterConformance
from groundkit.testing.conformance.segments import PackStoreConformance
from groundkit.testing.conformance.snapshots import SnapshotStoreConformance
from groundkit.testing.conformance.vectors import DIM, VectorStoreConformance

__all__ = [
    "DIM",
    "ClaimJudgeConformance",
    "IngestExecutorConformance",
    "MetadataStoreConformance",
    "PackStoreConformance",
    "RewriterConformance",
    "SnapshotStoreConformance",
    "VectorStoreConformance",
]
