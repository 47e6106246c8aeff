"""Ingest a path into a collection: load → hash → chunk → analyse → store → prune.

Each document is replaced in one transaction, so a crash leaves every document
either fully old or fully new. Pruning runs only after the whole scan
succeeded, and only for sources under the scanned root.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from groundkit.config import ChunkingConfig, IngestConfig
from groundkit.contracts import (
    FIELDS_KEY,
    GAPS_KEY,
    STORED_TEXT_CLASSES,
    Chunk,
    Document,
    FieldValue,
    IngestFailure,
    IngestReport,
    IngestWarning,
    metadata_without_gaps,
    record_id_of,
)
from groundkit.errors import ConfigurationError, IngestionError, RecordNotFoundError, kind_of
from groundkit.ingestion.chunking import chunk_document, chunk_gaps
from groundkit.ingestion.dispatch import RoutingLoader
from groundkit.ingestion.executor import IngestExecutor, IngestPlan, PreparedFile
from groundkit.ingestion.fields import check_fields
from groundkit.ingestion.files import discover_files, unportable_name
from groundkit.ingestion.index_text import index_texts_of
from groundkit.ingestion.progress import ProgressCallback, Reporter, embed_in_slices
from groundkit.ingestion.protocols import LoaderProtocol
from groundkit.lexical.analyzer import Analyzer
from groundkit.providers import checked
from groundkit.providers.factory import recipe_for
from groundkit.providers.identity import ensure_identity, identity_of
from groundkit.providers.protocols import EmbeddingProtocol
from groundkit.storage._rows import same_metadata
from groundkit.storage.binding import bind_for_ingest
from groundkit.storage.names import check_snapshot_id, document_id_for
from groundkit.storage.protocols import (
    DocumentState,
    MetadataStoreProtocol,
    SnapshotStore,
    VectorStoreProtocol,
    stored_metadata,
)
from groundkit.storage.reconcile import reconcile_vectors
from groundkit.storage.snapshots import (
    KEPT_SUFFIX,
    ORPHAN_GRACE_SECONDS,
    LocalSnapshots,
    ObjectSnapshots,
    SnapshotLocation,
    as_snapshot_store,
    kept_name,
    names_of,
    pack_kept,
    store_kept,
    store_text,
    text_name,
)
from groundkit.storage.versions import version_start
from groundkit.telemetry import SPAN_INGEST, SPAN_INGEST_DOCUMENT, traced
from groundkit.utils.hashing import sha256_text
from groundkit.utils.path_safety import is_within, printable_path, to_relative
from groundkit.utils.text import describe_unencodable

if TYPE_CHECKING:
    from groundkit.ingestion.url_loader import UrlLoader

__all__ = ["Indexer", "ProgressCallback"]

logger = logging.getLogger("groundkit.ingest")

# Fields given to an ingest call, as the caller passes them (checked before use).
FieldsArgument = Mapping[str, object]


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
        write_batch_chunks: int = 512,
        collection: str | None = None,
        snapshot_dir: SnapshotLocation | None = None,
    ) -> None:
        if (embedder is None) != (vector_store is None):
            raise ConfigurationError("an embedder and a vector store go together: give both")
        self._embedder = embedder
        self._vectors = vector_store
        self._embed_batch = max(1, embed_batch_chunks)
        self._write_batch = max(1, write_batch_chunks)
        self._store = store
        self._base = Path(os.path.realpath(base_dir))
        self._ingest = ingest or IngestConfig()
        self._loader: LoaderProtocol = loader or RoutingLoader(self._ingest)
        self._snapshots = as_snapshot_store(snapshot_dir)
        if self._ingest.keep_sources:
            _check_keeps(self._snapshots)
        # Whether this indexer swept the snapshot store yet (its first record write does).
        self._swept = False
        self._chunking = chunking or ChunkingConfig()
        self._analyzer = analyzer or Analyzer()
        self._lock = asyncio.Lock()
        # A label for telemetry only.
        self.collection = collection

    @property
    def base_dir(self) -> Path:
        return self._base

    async def ingest(
        self,
        path: str | Path,
        *,
        progress: ProgressCallback | None = None,
        metadata: FieldsArgument | None = None,
        valid_as_of: datetime | None = None,
        executor: IngestExecutor | None = None,
    ) -> IngestReport:
        """Bring the collection in line with ``path`` (a file or a directory).

        ``metadata`` adds fields to every document of this run, over the ones
        its file states; invalid fields raise ``IngestionError`` before
        anything is read. A changed document keeps its previous version as a
        past one (``IngestConfig.keep_versions`` bounds how many); the new
        version is current from ``valid_as_of`` (timezone-aware, not in the
        future) when given, else from now. Traced as ``groundkit.ingest`` (document counts) with
        one ``groundkit.ingest.document`` span per file; paths never reach a span.

        With an ``executor`` the files are read, prepared (and embedded, by an
        executor that embeds) there, and committed here in discovery order through
        the same writer (``groundkit.ingestion.executor``).
        """
        fields = _argument_fields(metadata)
        version_start(valid_as_of, time.time())  # refused before anything is read
        if executor is not None and not isinstance(self._loader, RoutingLoader):
            # An executor rebuilds the built-in loaders from the config where it reads;
            # a loader object of the caller's own would be silently left out.
            raise ConfigurationError(
                "an executor reads files with groundkit's own loaders, rebuilt from the "
                f"IngestConfig; this ingest was given {type(self._loader).__name__}: "
                "ingest without an executor to use it"
            )
        with traced(SPAN_INGEST, collection=self.collection) as span:
            report = await self._ingest_path(path, progress, fields, valid_as_of, executor)
            span.set(**_report_counts(report))
            return report

    async def _ingest_path(
        self,
        path: str | Path,
        progress: ProgressCallback | None,
        fields: dict[str, FieldValue],
        valid_as_of: datetime | None,
        executor: IngestExecutor | None = None,
    ) -> IngestReport:
        root = Path(path)
        if not root.is_absolute():
            root = Path.cwd() / root
        try:
            exists = root.exists()
        except OSError as exc:  # a name too long, a directory it may not search
            raise IngestionError(f"{str(path)!r} cannot be looked up: {exc.strerror}") from None
        if not exists:
            raise IngestionError(f"{str(path)!r} does not exist")
        if not is_within(root, self._base):
            raise IngestionError(
                f"{str(path)!r} is outside the collection's base directory {str(self._base)!r}"
            )
        # Discovery walks the real path, so the sources it finds are named from it; the
        # documents the run may call unchanged or prune must be looked up under the same
        # name, not under a symlink's (which found none, so nothing was ever pruned).
        root = Path(os.path.realpath(root))
        reporter = Reporter(progress, log_every=self._ingest.progress_log_seconds)
        async with self._lock, reporter.logging():
            return await self._ingest_root(root, reporter, fields, valid_as_of, executor)

    async def _ingest_root(
        self,
        root: Path,
        reporter: Reporter,
        fields: dict[str, FieldValue],
        valid_as_of: datetime | None,
        executor: IngestExecutor | None = None,
    ) -> IngestReport:
        await self._bind()
        repairs = await self._reconcile()
        discovery = await asyncio.to_thread(discover_files, root, self._loader.accepts)
        # Only what this ingest can add, change or prune: one file, or one folder's.
        prefix = to_relative(root, self._base)
        if root.is_file():
            known = await self._store.document_states(sources=[prefix])
        else:
            known = await self._store.document_states(under=None if prefix == "." else prefix)
        tally = _Tally(known)
        total = len(discovery.files)
        reporter.update("discover", done=total, total=total)
        writer = _Writer(
            self,
            reuse=await self._vectors_present(),
            reporter=reporter,
            valid_as_of=valid_as_of,
        )
        if executor is not None:
            await self._execute(executor, discovery.files, fields, writer, reporter, tally)
        # With an executor every file was taken above; the loop below reads them here.
        for done, file in enumerate(discovery.files if executor is None else [], start=1):
            source = to_relative(file, self._base)
            tally.seen.add(source)
            with traced(SPAN_INGEST_DOCUMENT, collection=self.collection) as span:
                try:
                    # Before any loader runs: a name that is not UTF-8 could not be
                    # stored, and the report names it escaped (ADR 0027).
                    bad_name = unportable_name(source)
                    if bad_name is not None:
                        source = printable_path(source)
                        raise bad_name
                    document = _with_fields(
                        await self._loader.load(file, base_dir=self._base), fields
                    )
                    span.set(source_class=document.source_class)
                    tally.note(document.source, document.notes)
                    if _unchanged(document, known):
                        await self._unchanged_file(document, writer, tally, span)
                    else:
                        tally.stored(document.source, await writer.add(document), span)
                except IngestionError as exc:
                    tally.fail(source, str(exc), span)
                    span.fail(exc)
                    # The reason names the source (a path or URL): DEBUG only.
                    logger.info("a document failed to ingest (%s)", kind_of(exc))
                    logger.debug("ingest failed: %s", exc)
            reporter.update("read", done=done, total=total)
        await writer.finish()
        tally.failed += writer.failed
        unlisted = [to_relative(folder, self._base) for folder, _ in discovery.unlisted]
        for source, (_, reason) in zip(unlisted, discovery.unlisted, strict=True):
            # A failure line of its own; what is stored from under it stays, unpruned.
            tally.failed.append(
                IngestFailure(
                    source=source if unportable_name(source) is None else printable_path(source),
                    reason=f"cannot list this folder ({reason}); the documents stored from "
                    "under it are kept as they were",
                )
            )
        before = time.time()
        removed = await self._prune(root, known, tally.seen, unlisted)
        await self._sync_vectors(writer)
        if (removed or tally.updated) and await self._has_kept_copies():
            # Deleted files' copies and replaced texts' go now (a current row's is
            # kept); see ``sweep_snapshots``.
            await self.sweep_snapshots(
                [document_id_for(s) for s in [*removed, *tally.updated]], gone_before=before
            )
        reporter.finish()
        added, updated, unchanged = writer.outcomes(tally.added, tally.updated, tally.unchanged)
        return IngestReport(
            added=added,
            updated=updated,
            unchanged=unchanged,
            removed=removed,
            failed=sorted(tally.failed, key=lambda f: f.source),
            warnings=sorted(tally.warnings, key=lambda w: w.source),
            skipped=discovery.skipped,
            embedded=writer.documents_embedded,
            chunks_embedded=writer.chunks_embedded,
            chunks_reused=writer.chunks_reused,
            repairs=repairs,
            generation=await self._store.generation(),
        )

    async def _reconcile(self) -> list[str]:
        """Check the vector side against the store and repair it before writing (ADR 0029)."""
        if self._vectors is None:
            return []
        repairs = await reconcile_vectors(self._store, self._vectors)
        for note in repairs:
            logger.warning("vector store repaired: %s", note)
        return repairs

    async def _bind(self) -> None:
        """Bind the collection to this analyzer and embedder before anything is written
        (ADR 0011); see ``groundkit.storage.binding``."""
        identity = None
        if self._embedder is not None and self._vectors is not None:
            identity = await ensure_identity(self._embedder)
            if identity.dimensions != self._vectors.dimensions:
                raise ConfigurationError(
                    f"embedder makes {identity.dimensions}-d vectors but the vector store holds "
                    f"{self._vectors.dimensions}-d ones"
                )
        await bind_for_ingest(
            self._store,
            analyzer=self._analyzer.identity,
            embedding=identity,
            chunker=self._chunking.identity,
            collection=self.collection,
        )

    async def _vectors_present(self) -> bool:
        """Whether stored vectors may be reused (skips the lookups on a first ingest)."""
        return self._vectors is not None and await self._vectors.count() > 0

    async def _execute(
        self,
        executor: IngestExecutor,
        files: Sequence[Path],
        fields: dict[str, FieldValue],
        writer: _Writer,
        reporter: Reporter,
        tally: _Tally,
    ) -> None:
        """Take ``executor``'s results in discovery order and commit the prepared ones;
        the executor is closed (its workers released) however this ends."""
        plan = await self._plan(files, fields, tally.known, writer, executor)
        total = len(files)
        results = executor.run(plan)
        done = 0
        try:
            async for item in results:
                if done == total:
                    raise IngestionError(f"the executor returned more results than {total} files")
                tally.seen.add(to_relative(files[done], self._base))
                done += 1
                with traced(SPAN_INGEST_DOCUMENT, collection=self.collection) as span:
                    tally.note(item.source, item.notes)
                    if item.outcome == "failed":
                        tally.fail(item.source, item.reason, span)
                    elif item.outcome == "unchanged" and item.document is not None:
                        await self._unchanged_file(item.document, writer, tally, span)
                    elif item.outcome == "unchanged":
                        tally.unchanged.append(item.source)
                        span.set(outcome="unchanged")
                    else:
                        tally.stored(item.source, await writer.add_prepared(item), span)
                reporter.update("read", done=done, total=total)
        finally:
            close = getattr(results, "aclose", None)
            if close is not None:
                await close()
        if done != total:
            raise IngestionError(f"the executor returned {done} results for {total} files")

    async def _plan(
        self,
        files: Sequence[Path],
        fields: dict[str, FieldValue],
        known: dict[str, DocumentState],
        writer: _Writer,
        executor: IngestExecutor,
    ) -> IngestPlan:
        """What ``executor`` needs to prepare ``files``; the embedder's recipe only for
        an executor that embeds (``ConfigurationError`` when it cannot be shipped)."""
        recipe = identity = None
        if self._embedder is not None and getattr(executor, "embeds", False):
            recipe = recipe_for(self._embedder)
            bound = identity_of(self._embedder)
            identity = (bound.provider, bound.model_name, bound.dimensions)
        return IngestPlan(
            files=tuple(str(f) for f in files),
            base_dir=str(self._base),
            ingest=self._ingest,
            chunking=self._chunking,
            analyzer=self._analyzer.config,
            analyzer_version=self._analyzer.version,
            fields=fields,
            known=known,
            embedder=recipe,
            identity=identity,
            stored_hashes=self._stored_hashes if writer.reuse else None,
        )

    async def _stored_hashes(self, hashes: Sequence[str]) -> set[str]:
        """Which chunk texts already have a stored vector (reused, not embedded again)."""
        assert self._vectors is not None
        return set(await self._vectors.vectors_by_content(list(hashes)))

    async def _sync_vectors(self, writer: _Writer) -> None:
        """Embed documents still without confirmed vectors; drop orphan vectors.

        The ingest loop embeds what it writes as it goes. What remains here is
        repair: documents left without vectors by an interrupted earlier run
        (SQLite is written first, vectors are confirmed after they are stored),
        and vectors whose document is gone (ADR 0011).
        """
        if self._vectors is None:
            return
        missing = await self._store.documents_missing_vectors()
        for i in range(0, len(missing), _REPAIR_DOCUMENTS):
            part = missing[i : i + _REPAIR_DOCUMENTS]
            grouped = await self._store.get_chunks_for_documents(part)
            for document_id in part:
                rows = grouped.get(document_id)
                if rows:
                    texts = self.index_texts([r.chunk for r in rows], rows[0].metadata)
                    await writer.queue_vectors(
                        _VectorJob(
                            document_id,
                            rows[0].document_hash,
                            [r.chunk_id for r in rows],
                            [sha256_text(t) for t in texts],
                            texts,
                        )
                    )
        await writer.flush_vectors()
        orphans = await self._vectors.document_ids() - await self._store.document_ids()
        if orphans:
            await self._vectors.delete_documents(sorted(orphans))
            await self._store.bump_vectors_generation()
        if writer.documents_embedded or orphans:
            await self._vectors.optimize()

    async def _embed_and_store(
        self, jobs: list[_VectorJob], reuse: bool, reporter: Reporter | None = None
    ) -> tuple[int, int]:
        """Vectors for ``jobs``: reused by chunk content hash where stored, else embedded.

        Returns ``(chunks embedded, chunks reused)``. Vectors are stored before
        the documents are marked, so a crash in between only costs a re-embed.
        """
        assert self._embedder is not None and self._vectors is not None
        # Vectors an executor made are stored as they are, never embedded again.
        ready: dict[str, npt.NDArray[np.float32]] = {}
        for job in jobs:
            ready.update(job.ready or {})
        by_hash: dict[str, npt.NDArray[np.float32]] = {}
        if reuse:
            by_hash.update(
                await self._vectors.vectors_by_content(
                    [h for j in jobs for h in j.chunk_hashes if h not in ready]
                )
            )
        todo: dict[str, str] = {}  # hash -> text, first occurrence order
        reused = 0
        for job in jobs:
            for content_hash, text in zip(job.chunk_hashes, job.texts, strict=True):
                if content_hash in ready:
                    continue
                if content_hash in by_hash:
                    reused += 1
                elif content_hash not in todo:
                    todo[content_hash] = text
        by_hash.update(ready)
        reporter = reporter or Reporter(None)
        if reused or ready:
            reporter.update("embed", add=reused + sum(len(j.ready or ()) for j in jobs))
        if todo:
            await self._load_model(reporter)
            vectors = await embed_in_slices(
                functools.partial(checked.documents, self._embedder),
                list(todo.values()),
                (lambda n: reporter.update("embed", add=n)) if reporter.active else None,
                granule=_batch_of(self._embedder),
            )
            by_hash.update(zip(todo, vectors, strict=True))
        await self._vectors.upsert_documents(
            [
                (job.document_id, job.chunk_ids, np.stack([by_hash[h] for h in job.chunk_hashes]))
                for job in jobs
            ],
            content_hashes={job.document_id: job.chunk_hashes for job in jobs},
        )
        await self._store.mark_vectors_stored_many(
            [(job.document_id, job.document_hash) for job in jobs]
        )
        return len(todo) + len(ready), reused

    async def _load_model(self, reporter: Reporter) -> None:
        """Load a local model before the first batch, announced (it can take seconds)."""
        embedder = self._embedder
        load = getattr(embedder, "load", None)
        if getattr(embedder, "loaded", True) or not callable(load):
            return
        name = getattr(embedder, "model_name", "the embedding model")
        reporter.update("model", done=0, total=1, detail=f"loading {name}")
        began = time.perf_counter()
        await load()
        seconds = time.perf_counter() - began
        reporter.update("model", done=1, total=1, detail=f"loaded {name} in {seconds:.1f} s")

    def _prepare(self, document: Document) -> tuple[Document, list[Chunk], list[list[str]]]:
        return prepare_document(document, self._chunking, self._analyzer)

    def index_texts(self, chunks: Sequence[Chunk], metadata: Mapping[str, Any]) -> list[str]:
        return index_texts(chunks, metadata, self._chunking)

    async def _prune(
        self,
        root: Path,
        known: dict[str, DocumentState],
        seen: set[str],
        unlisted: Sequence[str] = (),
    ) -> list[str]:
        """The stored documents under ``root`` whose files the scan did not find, deleted;
        never one under a folder the scan could not list (``unlisted``)."""
        prefix = to_relative(root, self._base)
        if root.is_file():
            return []
        under = (lambda s: True) if prefix == "." else (lambda s: s.startswith(prefix + "/"))
        hidden = tuple(f"{folder}/" for folder in unlisted)
        # URL documents and records live beside the files, not under them: a
        # folder scan has no say over them.
        gone = sorted(
            s
            for s, state in known.items()
            if under(s)
            and s not in seen
            and not s.startswith(hidden)
            and state.source_class not in STORED_TEXT_CLASSES
        )
        if not gone:
            return []
        # A writer that removed some of them first reports those; this run does not.
        return sorted(await self._store.delete_documents(gone))

    async def ingest_url(
        self,
        url: str,
        loader: UrlLoader,
        *,
        metadata: FieldsArgument | None = None,
        valid_as_of: datetime | None = None,
    ) -> IngestReport:
        """Fetch ``url`` and store it as a ``snapshot`` document with its local copy.

        ``metadata`` and ``valid_as_of`` as for ``ingest``.

        A URL refused on its face (scheme, userinfo, credential-shaped query)
        raises ``IngestionError`` and is never named in a report. Anything that
        goes wrong from resolution on is a failure in the report, and a
        previously stored version of the URL stays as it was. The snapshot is
        written before the row naming it commits, so the document is never
        visible without it.

        Traced as ``groundkit.ingest`` with document counts, never the URL.
        """
        fields = _argument_fields(metadata)
        version_start(valid_as_of, time.time())
        with traced(SPAN_INGEST, collection=self.collection) as span:
            report = await self._ingest_url(url, loader, fields, valid_as_of)
            span.set(**_report_counts(report))
            return report

    async def _ingest_url(
        self,
        url: str,
        loader: UrlLoader,
        fields: dict[str, FieldValue],
        valid_as_of: datetime | None,
    ) -> IngestReport:
        if self._snapshots is None:
            raise ConfigurationError("URL ingest needs a snapshot directory; use a Collection")
        source = loader.check(url).source
        failed: list[IngestFailure] = []
        document: Document | None = None
        try:
            document = _with_fields(await loader.load(url), fields)
        except (IngestionError, ConfigurationError) as exc:
            failed.append(IngestFailure(source=source, reason=str(exc)))
            logger.debug("URL ingest failed: %s", exc)
        async with self._lock:
            await self._bind()
            repairs = await self._reconcile()
            wanted = [document.source] if document is not None else []
            known = await self._store.document_states(sources=wanted)
            writer = _Writer(self, reuse=await self._vectors_present(), valid_as_of=valid_as_of)
            status: dict[str, list[str]] = {"added": [], "updated": [], "unchanged": []}
            if document is not None:
                try:
                    outcome = await self._store_snapshot_document(document, known, writer)
                except IngestionError as exc:
                    failed.append(IngestFailure(source=source, reason=str(exc)))
                else:
                    status[outcome].append(document.source)
            await self._sync_vectors(writer)
            repairs += await self._first_write_checks(sweep=False)
            await self.sweep_snapshots()
            return IngestReport(
                added=status["added"],
                updated=status["updated"],
                unchanged=status["unchanged"],
                failed=failed,
                embedded=writer.documents_embedded,
                chunks_embedded=writer.chunks_embedded,
                chunks_reused=writer.chunks_reused,
                repairs=repairs,
                generation=await self._store.generation(),
            )

    async def sweep_snapshots(
        self, gone: Sequence[str] = (), *, gone_before: float | None = None
    ) -> None:
        """Remove stored texts no document names (URL snapshots, records and files'
        kept copies), reading the store after the write that removed them. Texts of
        the documents ``gone`` (just deleted or replaced) written before ``gone_before``
        (default: now) go at once; any other text no row names goes once it is older
        than ``ORPHAN_GRACE_SECONDS``, so a writer in another process between its text
        and its commit keeps it. A failure is logged: the next sweep tries again."""
        assert self._snapshots is not None
        cutoff = time.time() if gone_before is None else gone_before
        keep: list[str] = []
        async for r in self._store.iter_documents():
            keep += names_of(r.document_id, r.content_hash, r.source_class)
        try:
            if isinstance(self._snapshots, _SWEEPS_WITH_GRACE):
                await self._snapshots.remove_stale(
                    keep, grace=ORPHAN_GRACE_SECONDS, gone=gone, gone_before=cutoff
                )
            else:
                await self._snapshots.remove_stale(keep)
        except OSError as exc:  # the next sweep tries again
            logger.warning("could not remove stale snapshots: %s", exc.strerror or exc)

    async def keep_copy(self, document: Document) -> bool:
        """Store ``document``'s kept copy (``IngestConfig.keep_sources``) before its row
        commits; True when it had to be written. ``OSError`` when it cannot be."""
        if self._snapshots is None:
            raise ConfigurationError(
                "keep_sources needs a snapshot store to keep the texts in; use a Collection"
            )
        name = kept_name(document.document_id, document.content_hash)
        return await store_kept(self._snapshots, name, document.content)

    async def _unchanged_file(
        self, document: Document, writer: _Writer, tally: _Tally, span: traced
    ) -> None:
        if self._ingest.keep_sources:
            # Its row names this copy: put it there if it is not (a collection that
            # kept none before, or a copy removed).
            await self._keep_unchanged(document, writer)
        tally.unchanged.append(document.source)
        span.set(outcome="unchanged")

    async def _keep_unchanged(self, document: Document, writer: _Writer) -> None:
        """An unchanged file's kept copy, put back when missing or unusable. A failure
        is logged, not fatal: the row stands, and its citations read the file.

        On an object store a copy listed at the size its text packs to is taken as
        there (one listing per ingest, not a request per file); a local copy is read
        back and checked. Either way a citation checks the copy against its hash
        whenever it reads one."""
        try:
            listed = await writer.kept_sizes()
            if listed is not None:
                name = kept_name(document.document_id, document.content_hash)
                if listed.get(name) == len(pack_kept(document.content)):
                    return
            await self.keep_copy(document)
        except OSError as exc:
            logger.warning("could not keep a source's text: %s", exc.strerror or exc)

    async def _has_kept_copies(self) -> bool:
        """Whether a sweep after a file ingest may find kept copies to remove."""
        if self._snapshots is None:
            return False
        if self._ingest.keep_sources:
            return True
        names = getattr(self._snapshots, "names", None)
        if not callable(names):
            return False
        try:
            listed: set[str] = await names()
        except OSError:
            return False
        return any(n.endswith(KEPT_SUFFIX) for n in listed)

    async def _first_write_checks(self, *, sweep: bool = True) -> list[str]:
        """At this indexer's first write of stored texts: sweep texts no row names (an
        interrupted run's, once past the grace period; unless the caller sweeps) and
        report documents whose text is missing (search leaves them out)."""
        if self._swept:
            return []
        self._swept = True
        if sweep:
            await self.sweep_snapshots()
        try:
            missing = await self.texts_missing()
        except OSError as exc:  # the next writer looks again
            logger.warning("could not list the stored texts: %s", exc.strerror or exc)
            return []
        if not missing:
            return []
        sources = sorted(missing.values())
        shown = ", ".join(repr(s) for s in sources[:5])
        more = f" and {len(sources) - 5} more" if len(sources) > 5 else ""
        note = (
            f"{len(sources)} URL or record documents have no stored text ({shown}{more}): "
            "search leaves them out and verify reports them unresolvable until they are "
            "ingested or added again"
        )
        logger.warning("%d URL or record documents have no stored text", len(sources))
        return [note]

    async def texts_missing(self) -> dict[str, str]:
        """``{document_id: source}`` of URL and record documents whose stored text is
        not there (written by an earlier version whose write was interrupted, or
        removed by hand): read from one listing of the snapshot store. Empty when the
        store cannot list its names."""
        names = getattr(self._snapshots, "names", None)
        if not callable(names):
            return {}
        states: dict[str, DocumentState] = {}
        for prefix in _STORED_TEXT_PREFIXES:
            states.update(await self._store.document_states(under=prefix))
        stored = [
            (document_id_for(source), source, state.content_hash)
            for source, state in states.items()
            if state.source_class in STORED_TEXT_CLASSES
        ]
        if not stored:
            return {}
        present: set[str] = await names()
        return {
            document_id: source
            for document_id, source, content_hash in stored
            if text_name(document_id, content_hash) not in present and document_id not in present
        }

    async def ingest_documents(self, documents: Sequence[Document]) -> IngestReport:
        """Store documents whose text is kept in the snapshot store (in-memory records).

        Each is added, updated, or left unchanged (same text, class and fields), by
        its source. Each text is stored first, under a name its bytes decide, and
        only then the row naming it commits: a record is never visible without its
        text, and a run cut short leaves each record as it was or as it was meant
        to be. A text already stored is not rewritten (an unchanged record's is put
        back if it went missing). A text that cannot be written is a failure in the
        report, and its record is not stored. Documents are checked by the caller;
        traced as ``groundkit.ingest``.
        """
        if self._snapshots is None:
            raise ConfigurationError("in-memory documents need a snapshot store; use a Collection")
        snapshots = self._snapshots
        with traced(SPAN_INGEST, collection=self.collection) as span:
            reporter = Reporter(None, log_every=self._ingest.progress_log_seconds)
            async with self._lock, reporter.logging():
                await self._bind()
                repairs = await self._reconcile()
                known = await self._store.document_states(sources=[d.source for d in documents])
                writer = _Writer(self, reuse=await self._vectors_present(), reporter=reporter)
                added: list[str] = []
                updated: list[str] = []
                unchanged: list[str] = []
                failed: list[IngestFailure] = []
                for document in documents:
                    if _unchanged(document, known):
                        unchanged.append(document.source)
                        # Its row names this text already: put it back if it is gone.
                        try:
                            await store_text(
                                snapshots,
                                text_name(document.document_id, document.content_hash),
                                document.content,
                            )
                        except OSError as exc:
                            failed.append(_text_failure(document, exc))
                        continue
                    await writer.add(document)
                    (updated if document.source in known else added).append(document.source)
                await writer.finish()
                failed += writer.failed
                await self._sync_vectors(writer)
                repairs += await self._first_write_checks()
                reporter.finish()
                added, updated, unchanged = writer.outcomes(added, updated, unchanged)
                report = IngestReport(
                    added=added,
                    updated=updated,
                    unchanged=unchanged,
                    failed=sorted(failed, key=lambda f: f.source),
                    embedded=writer.documents_embedded,
                    chunks_embedded=writer.chunks_embedded,
                    chunks_reused=writer.chunks_reused,
                    repairs=repairs,
                    generation=await self._store.generation(),
                )
            span.set(**_report_counts(report))
            return report

    async def delete_stored(self, sources: Sequence[str], *, missing_ok: bool) -> IngestReport:
        """Delete stored-text documents (records) by source, with their text and vectors.

        A source that names no such document raises ``IngestionError`` before
        anything is deleted, unless ``missing_ok``.
        """
        if self._snapshots is None:
            raise ConfigurationError("in-memory documents need a snapshot store; use a Collection")
        async with self._lock:
            known = await self._store.document_states(sources=sources)
            present = [s for s in sources if s in known and known[s].source_class == "record"]
            missing = [s for s in sources if s not in present]
            if missing and not missing_ok:
                shown = ", ".join(repr(record_id_of(s) or s) for s in missing[:5])
                more = f" (and {len(missing) - 5} more)" if len(missing) > 5 else ""
                raise RecordNotFoundError(
                    f"no record {shown}{more} in collection {self.collection!r}; nothing was "
                    "deleted (pass missing_ok=True to delete the ones that exist)"
                )
            removed: list[str] = []
            if present:
                before = time.time()
                removed = sorted(await self._store.delete_documents(present))
                await self.sweep_snapshots(
                    [document_id_for(s) for s in removed], gone_before=before
                )
                await self._sync_vectors(_Writer(self, reuse=False))
            return IngestReport(removed=removed, generation=await self._store.generation())

    async def _store_snapshot_document(
        self, document: Document, known: dict[str, DocumentState], writer: _Writer
    ) -> str:
        """Write the snapshot, then the document naming it (and its vectors); returns
        the outcome. An unchanged document's snapshot is put back if it is gone."""
        assert self._snapshots is not None
        check_snapshot_id(document.document_id)
        if _unchanged(document, known):
            try:
                await store_text(
                    self._snapshots,
                    text_name(document.document_id, document.content_hash),
                    document.content,
                )
            except OSError as exc:
                raise IngestionError(_text_failure(document, exc).reason) from None
            return "unchanged"
        await writer.add(document)
        await writer.finish()
        if writer.failed:
            raise IngestionError(writer.failed[0].reason)
        if document.source in writer.left_as_is:
            return "unchanged"
        return "updated" if document.source in known else "added"


# Kept copies written at once by one writer (their writes wait on storage, not the CPU).
_COPY_WRITES = 8
# Documents whose chunks one repair read fetches.
_REPAIR_DOCUMENTS = 200
# Snapshot stores whose sweep spares young texts (a third-party one sweeps as it can).
_SWEEPS_WITH_GRACE = (LocalSnapshots, ObjectSnapshots)
# Where URL and record sources lie in source order ("under" these, as folders).
_STORED_TEXT_PREFIXES = ("record:/", "http:/", "https:/")


def _check_keeps(store: SnapshotStore | None) -> None:
    """``keep_sources`` needs a store that holds bytes: refused before anything is read."""
    if store is None:
        raise ConfigurationError(
            "keep_sources needs a snapshot store to keep the texts in; use a Collection"
        )
    if not callable(getattr(store, "write_bytes", None)):
        raise ConfigurationError(
            f"keep_sources needs a snapshot store that stores bytes (a local directory or an "
            f"object-store URI); {type(store).__name__} does not"
        )


def _text_failure(document: Document, exc: OSError) -> IngestFailure:
    """A document whose text could not be stored (so it was not stored either)."""
    return IngestFailure(
        source=document.source,
        reason=f"{document.source}: cannot store its text ({exc.strerror or exc})",
    )


@dataclass(frozen=True, slots=True)
class _VectorJob:
    """One document's chunks waiting for vectors."""

    document_id: str
    document_hash: str
    chunk_ids: list[str]
    chunk_hashes: list[str]
    texts: list[str]
    # Vectors already made for some of its chunks (by an executor), by content hash.
    ready: dict[str, npt.NDArray[np.float32]] | None = None


class _Tally:
    """What one file ingest did to each file, for its report (either loop fills it)."""

    def __init__(self, known: dict[str, DocumentState]) -> None:
        self.known = known
        self.added: list[str] = []
        self.updated: list[str] = []
        self.unchanged: list[str] = []
        self.failed: list[IngestFailure] = []
        self.warnings: list[IngestWarning] = []
        self.seen: set[str] = set()

    def note(self, source: str, notes: Sequence[str]) -> None:
        self.warnings.extend(IngestWarning(source=source, reason=n) for n in notes)

    def fail(self, source: str, reason: str, span: traced) -> None:
        self.failed.append(IngestFailure(source=source, reason=reason))
        span.set(outcome="failed")

    def stored(self, source: str, chunk_count: int, span: traced) -> None:
        outcome = "updated" if source in self.known else "added"
        (self.updated if outcome == "updated" else self.added).append(source)
        span.set(outcome=outcome, chunk_count=chunk_count)


class _Writer:
    """Batches one ingest's writes: documents into SQLite, then their vectors.

    Documents are written a group at a time (one transaction each) and their
    chunks embedded once enough have gathered, straight from memory, so a
    bulk ingest neither pays a transaction per file nor reads its own chunks
    back. Everything pending is written by ``finish``.
    """

    def __init__(
        self,
        indexer: Indexer,
        *,
        reuse: bool,
        reporter: Reporter | None = None,
        valid_as_of: datetime | None = None,
    ) -> None:
        self._indexer = indexer
        self._reuse = reuse
        self._reporter = reporter or Reporter(None)
        self._valid_as_of = valid_as_of
        self._ready: dict[str, dict[str, npt.NDArray[np.float32]]] = {}
        self._docs: list[tuple[Document, list[Chunk], list[list[str]]]] = []
        self._doc_chunks = 0
        self._jobs: list[_VectorJob] = []
        self._job_chunks = 0
        self.documents_embedded = 0
        self.chunks_embedded = 0
        self.chunks_reused = 0
        # Documents left out because their text could not be stored first.
        self.failed: list[IngestFailure] = []
        # Sources the store left as they were: another writer had stored just what this
        # one would have, since this ingest read the store (``replace_documents``).
        self.left_as_is: set[str] = set()
        self._kept_sizes: dict[str, int] | None = None
        self._kept_listed = False

    async def kept_sizes(self) -> dict[str, int] | None:
        """The snapshot store's ``{name: size}``, listed once for this ingest; None for a
        store that lists no sizes (a local directory: its copies are read back)."""
        if not self._kept_listed:
            self._kept_listed = True
            sizes = getattr(self._indexer._snapshots, "sizes", None)
            if callable(sizes):
                self._kept_sizes = await sizes()
        return self._kept_sizes

    async def add(self, document: Document) -> int:
        """Prepare ``document`` (chunk and analyse) and queue it; returns its chunk count."""
        document, chunks, terms = await asyncio.to_thread(self._indexer._prepare, document)
        self._reporter.update("chunk", add=len(chunks))
        self._docs.append((document, chunks, terms))
        self._doc_chunks += len(chunks)
        if self._doc_chunks >= self._indexer._write_batch:
            await self._flush_documents()
        return len(chunks)

    @property
    def reuse(self) -> bool:
        return self._reuse

    async def add_prepared(self, item: PreparedFile) -> int:
        """Queue a document an executor prepared (with the vectors it made, if any)."""
        assert item.document is not None
        self._reporter.update("chunk", add=len(item.chunks))
        if item.vectors:
            self._ready[item.document.document_id] = item.vectors
        self._docs.append((item.document, item.chunks, item.terms))
        self._doc_chunks += len(item.chunks)
        if self._doc_chunks >= self._indexer._write_batch:
            # The vectors are at hand: stored and confirmed with their documents, so
            # a driver lost later leaves these documents whole.
            await self._flush_documents()
            await self.flush_vectors()
        return len(item.chunks)

    async def finish(self) -> None:
        await self._flush_documents()
        await self.flush_vectors()

    def outcomes(
        self, added: Sequence[str], updated: Sequence[str], unchanged: Sequence[str]
    ) -> tuple[list[str], list[str], list[str]]:
        """A report's added, updated and unchanged sources, sorted, as the writes went: a
        document that failed is in none; one the store left as another writer had stored
        it is unchanged."""
        lost = {f.source for f in self.failed}
        left = self.left_as_is - lost
        return (
            sorted(s for s in added if s not in lost and s not in left),
            sorted(s for s in updated if s not in lost and s not in left),
            sorted({*unchanged, *(s for s in (*added, *updated) if s in left)}),
        )

    async def _flush_documents(self) -> None:
        docs, self._docs, self._doc_chunks = self._docs, [], 0
        docs = await self._store_texts(docs)
        if not docs:
            return
        left = await self._indexer._store.replace_documents(
            docs,
            valid_as_of=self._valid_as_of,
            keep_versions=self._indexer._ingest.keep_versions,
        )
        self.left_as_is.update(left)
        await self._restore_texts([d for d, _, _ in docs])
        stored = sum(len(chunks) for _, chunks, _ in docs)
        self._reporter.update("store", add=stored, total=self._reporter.done_of("chunk"))
        if self._indexer._embedder is None:
            return
        for document, chunks, _ in docs:
            texts = self._indexer.index_texts(chunks, document.metadata)
            await self.queue_vectors(
                _VectorJob(
                    document.document_id,
                    document.content_hash,
                    [c.chunk_id for c in chunks],
                    [sha256_text(t) for t in texts],
                    texts,
                    self._ready.pop(document.document_id, None),
                )
            )

    async def _store_texts(
        self, docs: list[tuple[Document, list[Chunk], list[list[str]]]]
    ) -> list[tuple[Document, list[Chunk], list[list[str]]]]:
        """Store the text of each URL or record document (and, with ``keep_sources``,
        each file's kept copy) before the row naming it can commit; those whose text
        cannot be stored are left out (``failed``)."""
        snapshots = self._indexer._snapshots
        copies = await self._keep_copies([d for d, _, _ in docs])
        kept: list[tuple[Document, list[Chunk], list[list[str]]]] = []
        for item in docs:
            document = item[0]
            if document.document_id in copies:
                problem = copies[document.document_id]
                if problem is not None:
                    self.failed.append(_text_failure(document, problem))
                    continue
            elif document.source_class in STORED_TEXT_CLASSES:
                if snapshots is None:
                    raise ConfigurationError(
                        f"{document.source}: its text needs a snapshot store; use a Collection"
                    )
                name = text_name(document.document_id, document.content_hash)
                try:
                    await store_text(snapshots, name, document.content)
                except OSError as exc:
                    self.failed.append(_text_failure(document, exc))
                    continue
            kept.append(item)
        return kept

    async def _restore_texts(self, documents: list[Document]) -> None:
        """Put back any text of ``documents`` gone between its write and the commit of
        its row: another process's delete of the same document sweeps the texts it
        finds written before it and named by no row, which this one's was until now.
        A text that cannot be put back is logged; ``texts_missing`` reports it."""
        snapshots = self._indexer._snapshots
        exists = getattr(snapshots, "exists", None)
        if snapshots is None or not callable(exists):
            return
        kept_too = self._indexer._ingest.keep_sources
        for document in documents:
            if document.source_class in STORED_TEXT_CLASSES:
                name = text_name(document.document_id, document.content_hash)
            elif kept_too:
                name = kept_name(document.document_id, document.content_hash)
            else:
                continue
            try:
                if await exists(name):
                    continue
                logger.info(
                    "%s: its stored text was swept meanwhile; writing it again", document.source
                )
                if document.source_class in STORED_TEXT_CLASSES:
                    await store_text(snapshots, name, document.content)
                else:
                    await self._indexer.keep_copy(document)
            except OSError as exc:
                logger.warning(
                    "%s: could not put its stored text back: %s",
                    document.source,
                    exc.strerror or exc,
                )

    async def _keep_copies(self, documents: list[Document]) -> dict[str, OSError | None]:
        """With ``keep_sources``, the kept copies of the files among ``documents``, a few
        at a time (each is a durable write of its own, which waits on the disk or the
        object store, not the CPU): ``{document_id: None, or why it failed}``."""
        if not self._indexer._ingest.keep_sources:
            return {}
        files = [d for d in documents if d.source_class not in STORED_TEXT_CLASSES]
        limit = asyncio.Semaphore(_COPY_WRITES)

        async def keep(document: Document) -> OSError | None:
            async with limit:
                try:
                    await self._indexer.keep_copy(document)
                except OSError as exc:
                    return exc
                return None

        outcomes = await asyncio.gather(*(keep(d) for d in files))
        return {d.document_id: o for d, o in zip(files, outcomes, strict=True)}

    async def queue_vectors(self, job: _VectorJob) -> None:
        self._reporter.count("embed", add_total=len(job.chunk_ids))
        self._jobs.append(job)
        self._job_chunks += len(job.chunk_ids)
        if self._job_chunks >= self._indexer._embed_batch:
            await self.flush_vectors()

    async def flush_vectors(self) -> None:
        jobs, self._jobs, self._job_chunks = self._jobs, [], 0
        if not jobs:
            return
        # Reuse is looked up only when the table had vectors before this ingest:
        # on a bulk first ingest every lookup would scan a growing table for
        # nothing but the odd repeated chunk.
        embedded, reused = await self._indexer._embed_and_store(jobs, self._reuse, self._reporter)
        self.documents_embedded += len(jobs)
        self.chunks_embedded += embedded
        self.chunks_reused += reused


def _batch_of(embedder: object) -> int:
    """The batch size an embedder runs its texts in, where it says (1 where not)."""
    size = getattr(embedder, "batch_size", None)
    return size if type(size) is int and size >= 1 else 1


def prepare_document(
    document: Document, chunking: ChunkingConfig, analyzer: Analyzer
) -> tuple[Document, list[Chunk], list[list[str]]]:
    """Chunk and analyse ``document``; it comes back with its chunk gaps recorded."""
    chunks = chunk_document(document, chunking)
    if not chunks:
        raise IngestionError(f"{document.source}: no text to index")
    gaps = chunk_gaps(document.content, [(c.start_offset, c.end_offset) for c in chunks])
    metadata = metadata_without_gaps(document.metadata)
    if gaps:
        metadata[GAPS_KEY] = gaps
    if metadata != document.metadata:
        document = document.model_copy(update={"metadata": metadata})
    texts = index_texts(chunks, document.metadata, chunking)
    return document, chunks, [analyzer.terms(t) for t in texts]


def index_texts(
    chunks: Sequence[Chunk], metadata: Mapping[str, Any], chunking: ChunkingConfig
) -> list[str]:
    """What each chunk is analysed and embedded as (groundkit/ingestion/index_text.py)."""
    pairs = [(c.content, c.start_offset) for c in chunks]
    return index_texts_of(pairs, metadata, contextual=chunking.contextual)


def _argument_fields(metadata: FieldsArgument | None) -> dict[str, FieldValue]:
    """The ingest call's fields, checked before anything is read."""
    return {} if metadata is None else check_fields(metadata, "metadata argument")


def _with_fields(document: Document, fields: dict[str, FieldValue]) -> Document:
    """``document`` with ``fields`` over its own, all checked; ``IngestionError`` otherwise.

    Checked here as well as in the loaders, so a custom loader's document
    cannot store what a built-in one would refuse. Its text must encode as
    UTF-8 (an extractor can yield a lone surrogate): it is hashed and stored.
    """
    problem = describe_unencodable(document.content, f"{document.source}: its text")
    if problem is not None:
        raise IngestionError(problem)
    own = document.metadata.get(FIELDS_KEY, {})
    merged = check_fields({**own, **fields} if isinstance(own, Mapping) else own, document.source)
    metadata = {k: v for k, v in document.metadata.items() if k != FIELDS_KEY}
    if merged:
        metadata[FIELDS_KEY] = merged
    # As JSON, types included: ``==`` would keep a loader's 1 where the caller gave true.
    if same_metadata(metadata, document.metadata):
        return document
    return document.model_copy(update={"metadata": metadata})


def _unchanged(document: Document, known: Mapping[str, DocumentState]) -> bool:
    """Same text, same metadata (fields included) and, for extracted text, the same
    extractor, whose offsets the stored chunks depend on."""
    state = known.get(document.source)
    return (
        state is not None
        and state.content_hash == document.content_hash
        and state.source_class == document.source_class
        and state.extractor == document.extractor
        # The gaps are derived at ingest from the text and the bound chunker: equal
        # text means equal gaps, so only the loader's metadata is compared.
        # As JSON, types included: ``==`` takes 1, True and 1.0 for one value.
        and same_metadata(
            metadata_without_gaps(state.metadata),
            metadata_without_gaps(stored_metadata(document.metadata)),
        )
    )


def _report_counts(report: IngestReport) -> dict[str, int]:
    """An ingest report as span attributes (counts only, never sources)."""
    return {
        "documents.added": len(report.added),
        "documents.updated": len(report.updated),
        "documents.unchanged": len(report.unchanged),
        "documents.removed": len(report.removed),
        "documents.failed": len(report.failed),
        "documents.skipped": report.skipped,
        "documents.embedded": report.embedded,
        "generation": report.generation,
    }
