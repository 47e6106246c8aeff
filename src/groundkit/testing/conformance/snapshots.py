"""A conformance suite any ``SnapshotStore`` implementation must pass.

Subclass it with a ``Test*`` class that provides a ``snapshot_store`` fixture
yielding a fresh, empty store whose ``location`` ends in ``snaps``::

    class TestMySnapshots(SnapshotStoreConformance):
        @pytest.fixture
        def snapshot_store(self, tmp_path): ...

Ids that cannot name a plain file or object are refused before any path or key
is formed (``PathEscapeError``), on writes and reads alike.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from groundkit.contracts import Citation
from groundkit.storage.names import document_id_for
from groundkit.storage.protocols import SnapshotStore
from groundkit.utils.path_safety import PathEscapeError
from groundkit.verification.sources import resolve_citation

__all__ = ["SnapshotStoreConformance"]

DOC = "0123456789abcdef0123456789abcdef"
OTHER = "f" * 32
THIRD = "a" * 32
UNSAFE = ("../escape", "a/b", ".hidden", "x" * 200, "", DOC + ".partial")
Snapshots = Any  # a SnapshotStore implementation


class SnapshotStoreConformance:
    """Behaviour shared by every snapshot store."""

    async def test_satisfies_the_protocol(self, snapshot_store: Snapshots) -> None:
        assert isinstance(snapshot_store, SnapshotStore)
        assert snapshot_store.location.endswith("snaps")

    async def test_write_read_match(self, snapshot_store: Snapshots) -> None:
        store = snapshot_store
        assert not await store.matches(DOC, "text")
        with pytest.raises(FileNotFoundError):
            await store.read(DOC)
        await store.write(DOC, "Gezeiten – tidal\r\ntext 🌊")
        assert await store.read(DOC) == "Gezeiten – tidal\r\ntext 🌊".encode()
        assert await store.matches(DOC, "Gezeiten – tidal\r\ntext 🌊")
        await store.write(DOC, "second")
        assert await store.read(DOC) == b"second" and not await store.matches(DOC, "Gezeiten")

    async def test_matches_only_the_exact_text(self, snapshot_store: Snapshots) -> None:
        """An ingest skips rewriting a snapshot that ``matches`` the new text: a store that
        also matched a part of it, or a text equal but for case, spacing or line ends,
        would keep a stale snapshot that citations are then checked against."""
        store = snapshot_store
        text = "Tide table \u2013 high water at 06:12\r\nLow water at 12:30 \U0001f30a"
        await store.write(DOC, text)
        assert await store.matches(DOC, text)
        near = (
            text[:-2],
            text[1:],
            text[5:20],
            text.upper(),
            text + " ",
            text.replace("\r\n", "\n"),
            "",
        )
        for other in near:
            assert not await store.matches(DOC, other), other
        assert not await store.matches(OTHER, text)

    async def test_remove_stale_keeps_the_named(self, snapshot_store: Snapshots) -> None:
        store = snapshot_store
        await store.write(DOC, "keep")
        await store.write(OTHER, "drop")
        assert await store.remove_stale([DOC]) == [OTHER]
        assert await store.read(DOC) == b"keep"
        assert await store.remove_stale([DOC]) == []
        # ``keep`` may be any iterable, read once (a generator of ids, say): in both
        # orders, so a store that looks ids up in it one by one loses one of them.
        for order in ((DOC, THIRD), (THIRD, DOC)):
            await store.write(THIRD, "also keep")
            await store.write(OTHER, "drop again")
            assert await store.remove_stale(name for name in order) == [OTHER]
            assert await store.read(DOC) == b"keep"
            assert await store.read(THIRD) == b"also keep"

    @pytest.mark.parametrize("bad", UNSAFE)
    async def test_unsafe_ids_are_refused_everywhere(
        self, snapshot_store: Snapshots, bad: str
    ) -> None:
        with pytest.raises(PathEscapeError):
            await snapshot_store.write(bad, "nope")
        with pytest.raises(PathEscapeError):
            await snapshot_store.read(bad)

    async def test_citations_read_through_the_store(self, snapshot_store: Snapshots) -> None:
        # A stored text is read under the id its source gives (``document_id_for``).
        page = document_id_for("https://example.org/page")
        await snapshot_store.write(page, "alpha beta gamma")
        citation = Citation(
            document_id=page,
            chunk_id="c",
            source="https://example.org/page",
            source_class="snapshot",
            extractor=None,
            start_offset=6,
            end_offset=10,
        )
        text = await resolve_citation(citation, Path("."), snapshot_dir=snapshot_store)
        assert text == "beta"
