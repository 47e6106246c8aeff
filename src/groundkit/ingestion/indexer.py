"""Ingest a path into a collection: load → hash → chunk → analyse → store → prune.

Each document is replaced in one transaction, so a crash leaves every document
either fully old or fully new. Pruning runs only after the whole scan
succeeded, and only for sources under the scanned root.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable
from pathlib import Path

from groundkit.config import ChunkingConfig, IngestConfig
from groundkit.contracts import Chunk, Document, IngestFailure, IngestReport
from groundkit.errors import ConfigurationError, IngestionError
from groundkit.index.analyzer import Analyzer
from groundkit.index.dense import VectorStoreProtocol
from groundkit.index.protocols import MetadataStoreProtocol, StoredChunk
from groundkit.ingestion.chunking import chunk_document
from groundkit.ingestion.files import FileLoader, discover_files
from groundkit.ingestion.protocols import LoaderProtocol
from groundkit.providers.identity import ensure_identity
from groundkit.providers.protocols import EmbeddingProtocol
from groundkit.telemetry import SPAN_INGEST, SPAN_INGEST_DOCUMENT, traced
from groundkit.utils.path_safety import is_within, to_relative

__all__ = ["Indexer", "ProgressCallback"]

logger = logging.getLogger("groundkit.ingest")

ProgressCallback = Callable[[int, int], None]


class Indexer:
    """Writes documents into one collection's store."""

    def __init__(
        self,
        store: MetadataStoreProtocol,
        base_dir: Path,
        *,
        loader: LoaderProtocol | None = None,
        chunking: ChunkingConfig | None = None,
        analyzer: Analyzer | None = None,
        ingest: IngestConfig | None = None,
        embedder: EmbeddingProtocol | None = None,
        vector_store: VectorStoreProtocol | None = None,
        embed_batch_chunks: int = 4096,
        collection: str | None = None,
    ) -> None:
        if (embedder is None) != (vector_store is None):
            raise ConfigurationError("an embedder and a vector store go together: give both")
        self._embedder = embedder
        self._vectors = vector_store
        self._embed_batch = max(1, embed_batch_chunks)
        self._store = store
        self._base = Path(os.path.realpath(base_dir))
        self._ingest = ingest or IngestConfig()
        self._loader: LoaderProtocol = loader or FileLoader(self._ingest)
        self._chunking = chunking or ChunkingConfig()
        self._analyzer = analyzer or Analyzer()
        self._lock = asyncio.Lock()
        # A label for telemetry only.
        self.collection = collection

    @property
    def base_dir(self) -> Path:
        return self._base

    async def ingest(
        self, path: str | Path, *, progress: ProgressCallback | None = None
    ) -> IngestReport:
        """Bring the collection in line with ``path`` (a file or a directory).

        Traced as ``groundkit.ingest`` (document counts) with one
        ``groundkit.ingest.document`` span per file; paths never reach a span.
        """
        with traced(SPAN_INGEST, collection=self.collection) as span:
            report = await self._ingest_path(path, progress)
            span.set(
                **{
                    "documents.added": len(report.added),
                    "documents.updated": len(report.updated),
                    "documents.unchanged": len(report.unchanged),
                    "documents.removed": len(report.removed),
                    "documents.failed": len(report.failed),
                    "documents.skipped": report.skipped,
                    "documents.embedded": report.embedded,
                    "generation": report.generation,
                }
            )
            return report

    async def _ingest_path(
        self, path: str | Path, progress: ProgressCallback | None
    ) -> IngestReport:
        root = Path(path)
        if not root.is_absolute():
            root = Path.cwd() / root
        if not root.exists():
            raise IngestionError(f"{str(path)!r} does not exist")
        if not is_within(root, self._base):
            raise IngestionError(
                f"{str(path)!r} is outside the collection's base directory {str(self._base)!r}"
            )
        async with self._lock:
            return await self._ingest_root(root, progress)

    async def _ingest_root(self, root: Path, progress: ProgressCallback | None) -> IngestReport:
        await self._store.set_analyzer(self._analyzer.identity)
        await self._bind_embedding()
        discovery = await asyncio.to_thread(discover_files, root, self._loader.accepts)
        known = await self._store.document_hashes()
        added: list[str] = []
        updated: list[str] = []
        unchanged: list[str] = []
        failed: list[IngestFailure] = []
        seen: set[str] = set()
        total = len(discovery.files)
        for done, file in enumerate(discovery.files, start=1):
            source = to_relative(file, self._base)
            seen.add(source)
            with traced(SPAN_INGEST_DOCUMENT, collection=self.collection) as span:
                try:
                    document = await self._loader.load(file, base_dir=self._base)
                    span.set(source_class=document.source_class)
                    if known.get(document.source) == document.content_hash:
                        unchanged.append(document.source)
                        span.set(outcome="unchanged")
                    else:
                        chunk_count = await self._store_document(document)
                        outcome = "updated" if document.source in known else "added"
                        (updated if outcome == "updated" else added).append(document.source)
                        span.set(outcome=outcome, chunk_count=chunk_count)
                except IngestionError as exc:
                    failed.append(IngestFailure(source=source, reason=str(exc)))
                    span.fail(exc)
                    span.set(outcome="failed")
                    # The reason names the source (a path or URL): DEBUG only.
                    logger.info("a document failed to ingest (%s)", type(exc).__name__)
                    logger.debug("ingest failed: %s", exc)
            if progress is not None:
                progress(done, total)
        removed = await self._prune(root, known, seen)
        embedded = await self._sync_vectors()
        return IngestReport(
            added=sorted(added),
            updated=sorted(updated),
            unchanged=sorted(unchanged),
            removed=removed,
            failed=sorted(failed, key=lambda f: f.source),
            skipped=discovery.skipped,
            embedded=embedded,
            generation=await self._store.generation(),
        )

    async def _bind_embedding(self) -> None:
        """Bind the collection to this embedder before anything is written (ADR 0011)."""
        if self._embedder is None or self._vectors is None:
            manifest = await self._store.read_manifest()
            if manifest is not None:
                raise ConfigurationError(
                    f"collection is bound to {manifest.model_name!r} ({manifest.provider}); "
                    "ingest with that embedder so its vectors stay in step with its text"
                )
            return
        identity = await ensure_identity(self._embedder)
        if identity.dimensions != self._vectors.dimensions:
            raise ConfigurationError(
                f"embedder makes {identity.dimensions}-d vectors but the vector store holds "
                f"{self._vectors.dimensions}-d ones"
            )
        await self._store.write_manifest(identity)

    async def _sync_vectors(self) -> int:
        """Embed every document whose content has no confirmed vectors; drop orphans.

        SQLite is written first and vectors are confirmed per document after
        they are stored, so a crash anywhere leaves documents this pass repairs
        and never a vector that hydrates to the wrong text.
        """
        if self._embedder is None or self._vectors is None:
            return 0
        missing = await self._store.documents_missing_vectors()
        batch: list[tuple[str, str, list[StoredChunk]]] = []
        size = 0
        for document_id in missing:
            chunks = await self._store.get_document_chunks(document_id)
            if not chunks:
                continue
            batch.append((document_id, chunks[0].document_hash, chunks))
            size += len(chunks)
            if size >= self._embed_batch:
                await self._embed(batch)
                batch, size = [], 0
        if batch:
            await self._embed(batch)
        orphans = await self._vectors.document_ids() - await self._store.document_ids()
        if orphans:
            await self._vectors.delete_documents(sorted(orphans))
        if missing or orphans:
            await self._vectors.optimize()
        return len(missing)

    async def _embed(self, batch: list[tuple[str, str, list[StoredChunk]]]) -> None:
        assert self._embedder is not None and self._vectors is not None
        texts = [c.content for _, _, chunks in batch for c in chunks]
        vectors = await self._embedder.embed_documents(texts)
        items = []
        start = 0
        for document_id, _, chunks in batch:
            end = start + len(chunks)
            items.append((document_id, [c.chunk_id for c in chunks], vectors[start:end]))
            start = end
        await self._vectors.upsert_documents(items)
        for document_id, content_hash, _ in batch:
            await self._store.mark_vectors_stored(document_id, content_hash)

    async def _store_document(self, document: Document) -> int:
        chunks, terms = await asyncio.to_thread(self._prepare, document)
        await self._store.replace_document(document, chunks, terms)
        return len(chunks)

    def _prepare(self, document: Document) -> tuple[list[Chunk], list[list[str]]]:
        chunks = chunk_document(document, self._chunking)
        if not chunks:
            raise IngestionError(f"{document.source}: no text to index")
        return chunks, [self._analyzer.terms(c.content) for c in chunks]

    async def _prune(self, root: Path, known: dict[str, str], seen: set[str]) -> list[str]:
        prefix = to_relative(root, self._base)
        if root.is_file():
            return []
        under = (lambda s: True) if prefix == "." else (lambda s: s.startswith(prefix + "/"))
        gone = sorted(s for s in known if under(s) and s not in seen)
        if gone:
            await self._store.delete_documents(gone)
        return gone
