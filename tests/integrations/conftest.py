"""A small mixed collection (files and records) the retriever tests share."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

import groundkit
import groundkit.sync as gks

# Set before the frameworks are imported: no telemetry leaves a test run.
os.environ["HAYSTACK_TELEMETRY_ENABLED"] = "False"
os.environ["LANGCHAIN_TRACING_V2"] = "false"
os.environ["LANGSMITH_TRACING"] = "false"

NOTES = {
    "tea/green.md": "Green tea is brewed at about 80 degrees for two minutes.\n",
    "tea/black.md": "Black tea wants boiling water and four minutes.\n",
    "coffee/espresso.md": "Espresso is pressed through fine coffee at nine bars.\n",
}
TICKETS = [
    {
        "id": "TCK-1",
        "text": "The kettle on floor two leaks when it is full.",
        "fields": {"floor": 2},
    },
    {
        "id": "TCK-2",
        "text": "The espresso machine needs descaling every month.",
        "fields": {"floor": 3},
    },
]


def build(base: Path) -> None:
    for name, text in NOTES.items():
        path = base / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")


@pytest.fixture
def sync_collection(tmp_path: Path) -> Iterator[gks.SyncCollection]:
    build(tmp_path / "base")
    with gks.Collection.open(tmp_path / "idx", base_dir=tmp_path / "base") as col:
        col.ingest(tmp_path / "base")
        col.add_documents(TICKETS)
        yield col


@pytest.fixture
async def async_collection(tmp_path: Path) -> AsyncIterator[groundkit.Collection]:
    build(tmp_path / "base")
    async with groundkit.Collection.open(tmp_path / "idx", base_dir=tmp_path / "base") as col:
        await col.ingest(tmp_path / "base")
        await col.add_documents(TICKETS)
        yield col
