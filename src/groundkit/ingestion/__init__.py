"""Loading sources and cutting them into chunks with exact offsets.

The loaders, the chunkers, the indexer a collection writes through, and the
executors that run per-file work elsewhere (``RayExecutor``). Each name here is
imported from its module on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from groundkit.utils.lazy import lazy_names as _lazy_names

if TYPE_CHECKING:
    from groundkit.ingestion.chunking import chunk_document, chunk_spans
    from groundkit.ingestion.dispatch import RoutingLoader
    from groundkit.ingestion.executor import IngestExecutor, LocalExecutor
    from groundkit.ingestion.extracted import (
        DocxLoader,
        EpubLoader,
        HtmlLoader,
        PdfLoader,
        PptxLoader,
    )
    from groundkit.ingestion.files import FileLoader
    from groundkit.ingestion.indexer import Indexer
    from groundkit.ingestion.outline import markdown_outline, rst_outline
    from groundkit.ingestion.protocols import LoaderProtocol
    from groundkit.ingestion.ray_executor import RayExecutor
    from groundkit.ingestion.url_loader import UrlLoader
    from groundkit.utils.url_safety import AddressPolicy

# The public names each module defines; imported on first use.
__getattr__, __dir__ = _lazy_names(
    __name__,
    globals(),
    {
        "groundkit.ingestion.chunking": ("chunk_document", "chunk_spans"),
        "groundkit.ingestion.dispatch": ("RoutingLoader",),
        "groundkit.ingestion.executor": ("IngestExecutor", "LocalExecutor"),
        "groundkit.ingestion.extracted": (
            "DocxLoader",
            "EpubLoader",
            "HtmlLoader",
            "PdfLoader",
            "PptxLoader",
        ),
        "groundkit.ingestion.files": ("FileLoader",),
        "groundkit.ingestion.indexer": ("Indexer",),
        "groundkit.ingestion.outline": ("markdown_outline", "rst_outline"),
        "groundkit.ingestion.protocols": ("LoaderProtocol",),
        "groundkit.ingestion.ray_executor": ("RayExecutor",),
        "groundkit.ingestion.url_loader": ("UrlLoader",),
        "groundkit.utils.url_safety": ("AddressPolicy",),
    },
)

__all__ = [
    "AddressPolicy",
    "DocxLoader",
    "EpubLoader",
    "FileLoader",
    "HtmlLoader",
    "Indexer",
    "IngestExecutor",
    "LoaderProtocol",
    "LocalExecutor",
    "PdfLoader",
    "PptxLoader",
    "RayExecutor",
    "RoutingLoader",
    "UrlLoader",
    "chunk_document",
    "chunk_spans",
    "markdown_outline",
    "rst_outline",
]
