"""The suite's longest files start first under `make test` (adr/0084)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

import pytest

from tests.conftest import LONGEST_FIRST, pytest_collection_modifyitems

ROOT = Path(__file__).resolve().parent.parent


class _Item:
    def __init__(self, nodeid: str) -> None:
        self.nodeid = nodeid
        self.markers: list[Any] = []

    def add_marker(self, marker: Any) -> None:
        self.markers.append(marker)


def test_each_longest_first_entry_names_test_files() -> None:
    for prefix in LONGEST_FIRST:
        path = ROOT / prefix
        files = [path] if path.is_file() else sorted(path.glob("test_*.py"))
        assert files, f"{prefix} names no test file"


def test_the_longest_files_come_first_and_the_rest_keep_their_order() -> None:
    ids = [
        "tests/a/test_one.py::t1",
        "tests/distributed/test_ray_ingest.py::t2",
        "tests/b/test_two.py::t3",
        "tests/evals/test_quality_guard.py::t4",
        "tests/a/test_one.py::t5",
        "tests/evals/test_quality_guard.py::t6",
    ]
    items = [_Item(i) for i in ids]
    pytest_collection_modifyitems(cast(list[pytest.Item], items))
    assert [i.nodeid.rsplit("::", 1)[1] for i in items] == ["t4", "t6", "t2", "t1", "t3", "t5"]


def test_make_test_keeps_each_file_on_one_worker() -> None:
    # The order only pays when a file runs whole on the worker it was handed to, and
    # xdist hands files out as collected (by default it puts the largest first).
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    assert "--dist loadfile" in makefile
    assert "--no-loadscope-reorder" in makefile
