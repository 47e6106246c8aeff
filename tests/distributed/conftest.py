"""A local Ray cluster for the distributed tests: started once, stopped by PID.

Head 3 CPUs (room for both embedding actors and a reading task once the worker
node is gone), one worker node with 2; every process on 127.0.0.1.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.distributed.cluster import RayCluster, loopback_driver, start_cluster
from tests.distributed.corpus import write_corpus

# Before anything imports Ray: it reads the token and the loopback setting once.
loopback_driver()


@pytest.fixture(scope="package")
def ray_cluster() -> Iterator[RayCluster]:
    pytest.importorskip("ray")
    try:
        cluster = start_cluster(head_cpus=3, worker_cpus=[2])
    except (OSError, RuntimeError) as exc:
        pytest.fail(f"the local Ray cluster did not start: {exc}")
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(scope="package")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The files every distributed test ingests (a folder under a base directory)."""
    base = tmp_path_factory.mktemp("ray-corpus")
    write_corpus(base / "docs", files=700, paragraphs=2)
    yield base
    shutil.rmtree(base, ignore_errors=True)
