"""The SnapshotStore conformance suite, run against a local directory and S3 (moto)."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from groundkit.storage.snapshots import LocalSnapshots, ObjectSnapshots, as_snapshot_store
from groundkit.testing.conformance import SnapshotStoreConformance
from tests.s3_support import S3Server


class TestLocalSnapshotsConformance(SnapshotStoreConformance):
    @pytest.fixture
    def snapshot_store(self, tmp_path: Path) -> LocalSnapshots:
        made = as_snapshot_store(tmp_path / "snaps")
        assert isinstance(made, LocalSnapshots)
        return made


class TestObjectSnapshotsConformance(SnapshotStoreConformance):
    @pytest.fixture
    def snapshot_store(self, s3_server: S3Server) -> ObjectSnapshots:
        bucket = f"gk-{uuid.uuid4().hex[:12]}"
        s3_server.create_bucket(bucket)
        made = as_snapshot_store(f"s3://{bucket}/snaps", s3_server.storage_options)
        assert isinstance(made, ObjectSnapshots)
        return made
