"""The loader seam: anything that turns a path into a ``Document``."""

from __future__ import annotations

from pathlib import Path
from typing import Protocol, runtime_checkable

from groundkit.contracts import Document

__all__ = ["LoaderProtocol"]


@runtime_checkable
class LoaderProtocol(Protocol):
    """Loads one file into a ``Document`` whose source is relative to ``base_dir``."""

    def accepts(self, path: Path) -> bool:
        """True when this loader handles ``path`` (by name only; no I/O)."""
        ...

    async def load(self, path: Path, *, base_dir: Path) -> Document:
        """Read ``path`` (absolute, or relative to ``base_dir``); raise ``IngestionError``
        with a reason on any failure."""
        ...
