"""The shipped conformance suites, run on stores written outside groundkit's package.

What a third party does to prove a store: subclass the suite, give it a fixture.
"""

from __future__ import annotations

import pytest

from groundkit.testing.conformance import (
    DIM,
    SnapshotStoreConformance,
    VectorStoreConformance,
)
from tests.storage.memory_stores import MemorySnapshots, MemoryVectorStore


class TestMemoryVectorStore(VectorStoreConformance):
    @pytest.fixture
    def vector_store(self) -> MemoryVectorStore:
        return MemoryVectorStore(DIM)


class TestMemorySnapshots(SnapshotStoreConformance):
    @pytest.fixture
    def snapshot_store(self) -> MemorySnapshots:
        return MemorySnapshots()
