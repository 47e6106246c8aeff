"""Fixtures for the service tests: an index directory with two ingested collections."""

from __future__ import annotations

import socket
from dataclasses import dataclass
from pathlib import Path

import pytest

pytest.importorskip("mcp")

from groundkit import Collection
from tests.support import CORPUS, SMALL_CHUNKS, write_tree

NOTES = {"notes/lab.md": "The lab notebook records every centrifuge run.\n"}


@dataclass(frozen=True)
class Served:
    """An index with collections ``default`` (the shared corpus) and ``notes``."""

    base: Path
    index: Path

    def source(self, rel: str) -> Path:
        return self.base / rel


async def ingest(index: Path, base: Path, name: str, path: Path) -> None:
    async with Collection.open(index, name, base_dir=base, chunking=SMALL_CHUNKS) as col:
        report = await col.ingest(path)
        assert not report.failed


@pytest.fixture
async def served(tmp_path: Path) -> Served:
    base = tmp_path / "base"
    write_tree(base / "docs", CORPUS)
    write_tree(base, NOTES)
    index = tmp_path / "index"
    await ingest(index, base, "default", base / "docs")
    await ingest(index, base, "notes", base / "notes")
    return Served(base=base, index=index)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port
