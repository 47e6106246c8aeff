"""One loader for a mixed directory: each file goes to the loader for its extension.

Text, PDF and HTML files of one folder land in one collection (ADR 0013). A
file no loader takes is skipped and counted; a file whose loader needs an
extra that is not installed fails on its own, with the install command in the
report, while the rest of the folder ingests.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from groundkit.config import IngestConfig
from groundkit.contracts import Document
from groundkit.errors import ConfigurationError, IngestionError
from groundkit.ingestion.extracted import (
    DocxLoader,
    EpubLoader,
    HtmlLoader,
    PdfLoader,
    PptxLoader,
)
from groundkit.ingestion.files import FileLoader
from groundkit.ingestion.protocols import LoaderProtocol
from groundkit.utils.path_safety import to_relative

__all__ = ["RoutingLoader"]


class RoutingLoader:
    """``LoaderProtocol`` over several loaders; the first that accepts a path loads it.

    By default: ``FileLoader`` (UTF-8 text), ``PdfLoader``, ``HtmlLoader``,
    ``DocxLoader``, ``PptxLoader``, ``EpubLoader``, each configured from the same
    ``IngestConfig``.
    """

    def __init__(
        self,
        config: IngestConfig | None = None,
        *,
        loaders: Sequence[LoaderProtocol] | None = None,
    ) -> None:
        self.config = config or IngestConfig()
        self.loaders: tuple[LoaderProtocol, ...] = tuple(
            loaders
            if loaders is not None
            else (
                FileLoader(self.config),
                PdfLoader(self.config),
                HtmlLoader(self.config),
                DocxLoader(self.config),
                PptxLoader(self.config),
                EpubLoader(self.config),
            )
        )

    def loader_for(self, path: Path) -> LoaderProtocol | None:
        """The loader that takes ``path``, or None when it is to be skipped."""
        for loader in self.loaders:
            if loader.accepts(path):
                return loader
        return None

    def accepts(self, path: Path) -> bool:
        return self.loader_for(path) is not None

    async def load(self, path: Path, *, base_dir: Path) -> Document:
        loader = self.loader_for(path)
        if loader is None:
            raise IngestionError(
                f"{path.name}: no loader for {path.suffix or 'files without an extension'}"
            )
        try:
            return await loader.load(path, base_dir=base_dir)
        except ConfigurationError as exc:
            # A missing extra fails this file only; the reason names the install.
            raise IngestionError(f"{to_relative(path, base_dir)}: {exc}") from None
