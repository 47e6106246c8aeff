"""Snapshot files: where they live, exact bytes, atomic replacement, clean-up."""

from __future__ import annotations

from pathlib import Path

import pytest

from groundkit.storage.location import snapshot_dir_for
from groundkit.storage.snapshots import (
    remove_stale_snapshots,
    snapshot_matches,
    snapshot_path,
    write_snapshot,
)
from groundkit.utils.path_safety import PathEscapeError

DOC = "0123456789abcdef0123456789abcdef"


def test_location(tmp_path: Path) -> None:
    assert snapshot_dir_for(tmp_path, "default") == tmp_path / "default.snapshots"


def test_exact_content_and_replacement(tmp_path: Path) -> None:
    root = tmp_path / "c.snapshots"
    text = "line one\r\nemoji 🚀 and 東京\n"
    path = write_snapshot(root, DOC, text)
    assert path == snapshot_path(root, DOC)
    assert path.read_bytes() == text.encode("utf-8")  # no newline translation
    assert snapshot_matches(path, text)
    write_snapshot(root, DOC, "second version")
    assert path.read_text(encoding="utf-8") == "second version"
    assert sorted(p.name for p in root.iterdir()) == [DOC]  # no temp file left
    assert not snapshot_matches(path, text)
    assert not snapshot_matches(root / "missing", "")


@pytest.mark.parametrize("document_id", ["../x", "a/b", "..", "", ".hidden", DOC + ".partial"])
def test_unusable_ids(tmp_path: Path, document_id: str) -> None:
    with pytest.raises(PathEscapeError):
        snapshot_path(tmp_path, document_id)


def test_remove_stale(tmp_path: Path) -> None:
    root = tmp_path / "c.snapshots"
    keep = "a" * 32
    for name in (keep, "b" * 32, "c" * 32 + ".partial"):
        write_snapshot(root, "x" * 32, "")  # make sure the directory exists
        (root / name).write_text(name, encoding="utf-8")
    (root / "subdir").mkdir()
    assert remove_stale_snapshots(root, [keep]) == ["b" * 32, "c" * 32 + ".partial", "x" * 32]
    assert sorted(p.name for p in root.iterdir()) == [keep, "subdir"]
    assert remove_stale_snapshots(tmp_path / "absent", []) == []
