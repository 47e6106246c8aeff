"""A two-file collection (tea, sky) for the answer-checking and provider-citation tests."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from groundkit import Collection, SearchResponse
from tests.support import write_tree

TEA = (
    "Tea is a drink. Green tea lowers blood pressure in adults, a trial of 400 people found. "
    "Black tea wants boiling water.\n"
)
SKY = "The sky is blue because air scatters short wavelengths of sunlight more strongly.\n"


@asynccontextmanager
async def tea_and_sky_collection(tmp_path: Path, **options: Any) -> AsyncIterator[Collection]:
    """``tea.txt`` and ``sky.txt`` ingested into a fresh collection."""
    base = tmp_path / "corpus"
    write_tree(base, {"tea.txt": TEA, "sky.txt": SKY})
    async with Collection.open(tmp_path / "index", base_dir=base, **options) as opened:
        await opened.ingest(base)
        yield opened


async def tea_and_sky(col: Collection) -> SearchResponse:
    """A search whose two results are the tea file, then the sky file."""
    response = await col.search("green tea blood pressure sky blue")
    assert [r.source for r in response.results] == ["tea.txt", "sky.txt"]
    return response
