"""The shipped conformance suites fail a store that is broken in a way that matters: a
suite that passes anything proves nothing. Each store here is the in-memory one with
one defect."""

from __future__ import annotations

from collections.abc import Iterable

import pytest

from groundkit.testing.conformance import SnapshotStoreConformance
from tests.storage.memory_stores import MemorySnapshots


class MatchesAPart(MemorySnapshots):
    """Says a snapshot matches when the new text is any part of it."""

    async def matches(self, document_id: str, content: str) -> bool:
        try:
            return content.encode("utf-8") in await self.read(document_id)
        except FileNotFoundError:
            return False


class MatchesLoosely(MemorySnapshots):
    """Compares texts with case, surrounding space and line ends ignored."""

    async def matches(self, document_id: str, content: str) -> bool:
        def loose(text: str) -> str:
            return text.replace("\r\n", "\n").strip().casefold()

        try:
            stored = (await self.read(document_id)).decode("utf-8")
        except FileNotFoundError:
            return False
        return loose(stored) == loose(content)


class ReadsKeepTwice(MemorySnapshots):
    """Looks ``keep`` up once per stored id, so a generator is spent on the first."""

    async def remove_stale(self, keep: Iterable[str]) -> list[str]:
        removed = sorted(k for k in self._blobs if k not in keep)
        for key in removed:
            del self._blobs[key]
        return removed


@pytest.mark.parametrize(
    ("broken", "test"),
    [
        (MatchesAPart, "test_matches_only_the_exact_text"),
        (MatchesLoosely, "test_matches_only_the_exact_text"),
        (ReadsKeepTwice, "test_remove_stale_keeps_the_named"),
    ],
)
async def test_the_snapshot_suite_fails_a_broken_store(
    broken: type[MemorySnapshots], test: str
) -> None:
    suite = SnapshotStoreConformance()
    with pytest.raises(AssertionError):
        await getattr(suite, test)(broken())
    # The same test passes the store without the defect.
    await getattr(suite, test)(MemorySnapshots())
