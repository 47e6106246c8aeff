"""``Collection``: the facade most applications use.

A local collection is one SQLite file under an index directory plus a base
directory its sources are relative to. The base is stored relative to the
index directory, so moving both together keeps every citation resolvable
(adr/0004-portable-sources.md). A shared collection keeps its metadata in
PostgreSQL and its vectors and snapshots under a storage URI, so processes on
several hosts can open it (adr/0025-shared-collections.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import logging
import os
import re
import threading
import time
import warnings
import weakref
from collections.abc import Callable, Coroutine, Generator, Iterable, Mapping, Sequence
from datetime import datetime
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, Concatenate, ParamSpec, TypeVar, Unpack, overload

from groundkit.config import AnalyzerConfig, ChunkingConfig, IngestConfig, RetrievalConfig
from groundkit.contracts import (
    STORED_TEXT_CLASSES,
    AnswerReport,
    Citation,
    DeleteReport,
    DocumentRecord,
    ErasureReport,
    FetchResult,
    IngestReport,
    MultiSearchResponse,
    OptimizeReport,
    Record,
    RetrievalResult,
    SearchResponse,
    fields_of,
    record_source,
)
from groundkit.errors import (
    ChunkNotFoundError,
    ConfigurationError,
    IngestionError,
    InvalidInputError,
    InvalidQueryError,
    InvalidSettingError,
)
from groundkit.lexical.analyzer import Analyzer, bound_analyzer
from groundkit.lexical.live import LiveIndex
from groundkit.providers.identity import ensure_identity
from groundkit.providers.protocols import EmbedderFactory, EmbeddingProtocol
from groundkit.retrieval.request import SearchOptions, SearchRequest
from groundkit.retrieval.rerank import RerankerProtocol
from groundkit.retrieval.rewriting import QueryRewriterProtocol
from groundkit.retrieval.search import Retriever
from groundkit.retrieval.sensitivity import check_clearance, visible
from groundkit.storage._rows import never_written
from groundkit.storage.binding import check_embedding
from groundkit.storage.location import CollectionStores, StoreLocation
from groundkit.storage.names import document_id_for
from groundkit.storage.object_segments import ObjectSegments
from groundkit.storage.protocols import (
    ErasingVectorStore,
    MetadataStoreProtocol,
    StoredChunk,
    VectorErasure,
    VectorStoreProtocol,
)
from groundkit.storage.segments import LocalSegments
from groundkit.storage.snapshots import (
    ORPHAN_GRACE_SECONDS,
    LocalSnapshots,
    ObjectSnapshots,
    SnapshotLocation,
    kept_name,
    names_of,
    text_name,
)
from groundkit.telemetry import SPAN_FETCH_CHUNK, traced
from groundkit.utils.path_safety import is_within, printable_path, to_relative, utf8_encodable
from groundkit.utils.text import describe_unencodable

if TYPE_CHECKING:
    # Imported where they are used: a process that only searches never loads the
    # ingest pipeline, the extractors or the verifier (nor httpx, PyYAML, rapidfuzz).
    from groundkit.ingestion.executor import IngestExecutor
    from groundkit.ingestion.indexer import Indexer, ProgressCallback
    from groundkit.ingestion.records import RecordInput
    from groundkit.ingestion.url_loader import UrlLoader
    from groundkit.verification.claims import ClaimJudge
    from groundkit.verification.verifier import Verifier, VerifyReport

__all__ = ["Collection"]

logger = logging.getLogger("groundkit.collection")

P = ParamSpec("P")
T = TypeVar("T")

# The public attributes an open ``Collection`` has besides its methods (set in
# ``__init__``; a test keeps this list equal to them). ``groundkit.sync`` mirrors the
# plain values among them.
COLLECTION_ATTRIBUTES = frozenset(
    {
        "base_dir",
        "clearance",
        "embedder",
        "location",
        "loop",
        "max_file_bytes",
        "name",
        "opened_generation",
        "reranker",
        "rewriter",
        "snapshot_dir",
        "snapshots",
        "store",
        "vector_store",
    }
)


_RIGHT_FORMS = (
    "open it with\n"
    "    async with groundkit.Collection.open(...) as col:\n"
    "or\n"
    "    col = await groundkit.Collection.open(...)\n"
    "and in blocking code (no event loop) with\n"
    "    with groundkit.sync.Collection.open(...) as col:"
)


class _Opener(Coroutine[Any, Any, "Collection"]):
    """Lets ``Collection.open(...)`` be awaited, used with ``async with``, or handed
    to anything that takes a coroutine (``asyncio.run``, ``create_task``).

    Used as the collection itself (an ``await`` forgotten) or with a plain ``with``,
    it raises a ``TypeError`` that shows the right forms. Nothing has run by then
    (the opening coroutine is made on first await), so no "never awaited" warning
    follows the error.
    """

    def __init__(self, factory: Callable[[], Coroutine[Any, Any, Collection]]) -> None:
        self._factory = factory
        self._running: Coroutine[Any, Any, Collection] | None = None
        self._collection: Collection | None = None

    def _coroutine(self) -> Coroutine[Any, Any, Collection]:
        if self._running is None:
            self._running = self._factory()
        return self._running

    def __await__(self) -> Generator[Any, None, Collection]:
        return self._coroutine().__await__()

    def send(self, value: Any) -> Any:
        return self._coroutine().send(value)

    def throw(self, typ: Any, val: Any = None, tb: Any = None) -> Any:
        coroutine = self._coroutine()
        if val is None and tb is None:
            return coroutine.throw(typ)
        return coroutine.throw(typ, val, tb)

    def close(self) -> None:
        if self._running is not None:
            self._running.close()

    # Runtime only: type checkers keep flagging a missing ``await`` or a plain ``with``
    # on the opener themselves, as they would without these.
    if not TYPE_CHECKING:

        def __getattr__(self, name: str) -> Any:
            # Only for what a collection has: probes of other names (asyncio's of cr_code,
            # a framework's duck typing) still get the usual AttributeError.
            if name.startswith("_") or not (
                hasattr(Collection, name) or name in COLLECTION_ATTRIBUTES
            ):
                raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
            raise TypeError(
                f"Collection.open(...) was not awaited: .{name} was asked of the opener, not of "
                f"a collection; {_RIGHT_FORMS}"
            )

        def __enter__(self) -> Collection:
            raise TypeError(
                f"Collection.open(...) is asynchronous and cannot be used with a plain 'with'; "
                f"{_RIGHT_FORMS}"
            )

        def __exit__(self, *exc_info: object) -> None:
            """Never reached (``__enter__`` refuses); here so ``with`` gets to ``__enter__``."""

    async def __aenter__(self) -> Collection:
        self._collection = await self._coroutine()
        return self._collection

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._collection is not None:
            await self._collection.close()


def _homed(
    method: Callable[Concatenate[Collection, P], Coroutine[Any, Any, T]],
) -> Callable[Concatenate[Collection, P], Coroutine[Any, Any, T]]:
    """A public coroutine method that first checks it runs on the collection's loop."""

    @functools.wraps(method)
    async def on_home(self: Collection, /, *args: P.args, **kwargs: P.kwargs) -> T:
        self._claim_loop()
        return await method(self, *args, **kwargs)

    return on_home


class Collection:
    """Ingest, search, fetch and verify one named collection."""

    def __init__(
        self,
        *,
        stores: CollectionStores,
        base_dir: Path,
        retrieval: RetrievalConfig,
        chunking: ChunkingConfig,
        analyzer: Analyzer,
        ingest: IngestConfig,
        embedder: EmbeddingProtocol | None = None,
        reranker: RerankerProtocol | None = None,
        url_loader: UrlLoader | None = None,
        clearance: str | None = None,
        opened_generation: int = 0,
        created: bool = False,
        rewriter: QueryRewriterProtocol | None = None,
    ) -> None:
        self._reranker = reranker
        self._rewriter = rewriter
        # The event loop this collection was opened on: its stores belong to it.
        # groundkit.sync and the framework retrievers run calls there.
        self.loop: asyncio.AbstractEventLoop | None = _running_loop()
        self._loop_lock = threading.Lock()
        # The most restricted label this collection object may return (None: all).
        self._clearance = check_clearance(clearance)
        self._stores = stores
        self.location = stores.location
        # Where URL documents keep the text they were indexed from; ``snapshot_dir``
        # is the directory for local snapshots, else the store itself.
        self.snapshots = stores.snapshots
        self.snapshot_dir: SnapshotLocation | None = (
            self.snapshots.directory
            if isinstance(self.snapshots, LocalSnapshots)
            else self.snapshots
        )
        self._given_url_loader = url_loader
        self.name = stores.location.name
        self.store: MetadataStoreProtocol = stores.metadata
        self.base_dir = base_dir
        self._embedder = embedder
        self.vector_store = stores.vectors
        # The store's generation when this object was opened, read before the
        # vector handle: a write landing in between shows as a newer generation.
        self.opened_generation = opened_generation
        self._retrieval = retrieval
        self._analyzer = analyzer
        # Verification (and anything showing a source) reads it under the same cap its
        # ingest read it with.
        self.max_file_bytes = ingest.max_file_bytes
        self._chunking = chunking
        self._ingest_config = ingest
        self._made_indexer: Indexer | None = None
        self._retriever: Retriever | None = None
        self._reopen = asyncio.Lock()
        # The lexical index, once something needed it; shared by searches and writes.
        self._live: LiveIndex | None = None
        self._merging: asyncio.Task[bool] | None = None
        # Repairs made while opening, reported by the next ingest.
        self._pending_repairs: list[str] = list(stores.repairs)
        # URL and record documents whose stored text search found present.
        self._texts_seen: set[str] = set()
        # What the last write stored but could not save in derived state (reported once).
        self._pending_notices: list[str] = []
        # This object created the collection: if nothing was ever written to it when it
        # closes (a first ingest that failed), it is removed rather than left behind.
        self._created = created
        # ... and the directories it made for it (the index directory and missing
        # parents), removed with it while nothing else is there.
        self._made_dirs: tuple[Path, ...] = ()
        self._closed = False
        self._closing: asyncio.Future[None] | None = None
        # Like an unclosed file: a ResourceWarning when this object is collected, or the
        # interpreter exits, without ``close`` (adr/0049-closing-at-exit.md).
        self._left_open = weakref.finalize(
            self, _warn_left_open, self.name, stores.location.describe_root()
        )

    # Fixed at open: the retriever, verification and fetches all read them, so a later
    # assignment could take effect in some of them and not others (adr/0076-open-arguments.md).
    @property
    def clearance(self) -> str | None:
        """The most restricted label this collection object may return (None: all)."""
        return self._clearance

    @clearance.setter
    def clearance(self, value: object) -> None:
        _fixed_at_open("clearance")

    @property
    def embedder(self) -> EmbeddingProtocol | None:
        """The embedding model dense and hybrid searches use (None: BM25 only)."""
        return self._embedder

    @embedder.setter
    def embedder(self, value: object) -> None:
        _fixed_at_open("embedder")

    @property
    def reranker(self) -> RerankerProtocol | None:
        """The cross-encoder ``search(rerank=True)`` uses."""
        return self._reranker

    @reranker.setter
    def reranker(self, value: object) -> None:
        _fixed_at_open("reranker")

    @property
    def rewriter(self) -> QueryRewriterProtocol | None:
        """The query rewriter ``search(rewrite=True)`` uses."""
        return self._rewriter

    @rewriter.setter
    def rewriter(self, value: object) -> None:
        _fixed_at_open("rewriter")

    @classmethod
    def open(
        cls,
        index_dir: str | Path | None = None,
        name: str = "default",
        *,
        location: StoreLocation | None = None,
        create: bool = True,
        rebuild_damaged: bool = False,
        metadata_url: str | None = None,
        storage_uri: str | Path | None = None,
        storage_options: Mapping[str, str] | None = None,
        base_dir: str | Path | None = None,
        retrieval: RetrievalConfig | None = None,
        chunking: ChunkingConfig | None = None,
        analyzer: AnalyzerConfig | None = None,
        ingest: IngestConfig | None = None,
        embedder: EmbeddingProtocol | None = None,
        embedder_for: EmbedderFactory | None = None,
        reranker: RerankerProtocol | None = None,
        url_loader: UrlLoader | None = None,
        clearance: str | None = None,
        rewriter: QueryRewriterProtocol | None = None,
    ) -> _Opener:
        """Open or create a collection; ``await`` it, use ``async with``, or pass it to
        ``asyncio.run`` (it is a coroutine). For blocking use, ``groundkit.sync``.

        The keywords fall in five groups (adr/0076-open-arguments.md); each has a default,
        so most programs give ``index_dir``, ``name`` and ``base_dir``, and ``embedder``
        for dense or hybrid search.

        *Where it is stored.* ``index_dir`` and ``name`` for a collection on this host;
        for a shared one, ``metadata_url`` (``postgresql://...``) instead of ``index_dir``,
        with ``storage_uri`` (a shared directory or ``s3://bucket/prefix``) for vectors and
        snapshots, configured by ``storage_options`` (LanceDB's keys) or the ``AWS_*``
        environment. ``location`` (a resolved ``StoreLocation``) says the same in one
        object and is refused beside any of those. ``create=False`` refuses a collection no
        ingest has created yet (``StorageError``); ``rebuild_damaged=True`` moves a damaged
        local metadata file aside and starts anew (reported by the next ingest; vectors are
        reused by chunk text), where otherwise damage is a ``StorageError`` that says so.

        *Where sources are read.* ``base_dir`` defaults to the one stored with the
        collection, or the current directory for a new one (stored as an absolute path for
        a shared collection; each host may pass its own). ``url_loader`` fetches URL
        ingests (default ``UrlLoader()``, public addresses only); their snapshots live in
        ``<index_dir>/<name>.snapshots``.

        *Models.* With an ``embedder`` the collection keeps vectors (``<index_dir>/<name>.lance``)
        and searches in ``dense`` and ``hybrid`` modes, bound to that embedder's identity
        from its first dense ingest on. Without one, ``embedder_for`` may build one from the
        collection's manifest when it is bound to one (run once, in a worker thread).
        ``reranker`` serves ``search(rerank=True)``; ``rewriter`` (a
        ``QueryRewriterProtocol``, e.g. ``GlossaryRewriter.from_file("terms.toml")``)
        serves ``search(rewrite=True)``.

        *Settings.* ``retrieval``, ``chunking``, ``analyzer`` and ``ingest`` are the four
        config models. Without ``chunking``, an existing collection is chunked the way it
        is bound to; a different ``chunking`` is refused at the next ingest. Without
        ``analyzer``, it is analysed the way it is bound to; a different ``analyzer`` is
        an ``IndexIdentityError`` at the first search or ingest.

        *Access.* ``clearance`` (one of ``SENSITIVITY_LEVELS``) hides every document
        labelled above it from search, ``fetch_chunk`` and ``verify``
        (adr/0021-sensitivity.md).

        *Opening.* A collection already written whose lexical index is in local files,
        each of them remembered as having passed its checks (adr/0075-check-cache.md), has
        that index (and, without an embedder, its retriever) opened here, not by the
        first search: a few statements and a map per file, whatever the collection's size.
        Otherwise the first search opens it and checks the files, as before. What fails
        here is raised by the first search or write.
        """
        check_clearance(clearance)
        _check_settings(retrieval=retrieval, chunking=chunking, analyzer=analyzer, ingest=ingest)
        _check_flags(create=create, rebuild_damaged=rebuild_damaged)
        _check_paths(index_dir=index_dir, base_dir=base_dir)
        _check_models(embedder=embedder, reranker=reranker, rewriter=rewriter)
        if embedder_for is not None and not callable(embedder_for):
            raise InvalidSettingError(
                "embedder_for must be a function of the manifest, not "
                f"{type(embedder_for).__name__}"
            )
        if location is not None:
            given = {
                "index_dir": index_dir,
                "name": None if name == "default" else name,
                "metadata_url": metadata_url,
                "storage_uri": storage_uri,
                "storage_options": storage_options,
            }
            if doubled := [key for key, value in given.items() if value is not None]:
                raise InvalidSettingError(
                    f"location already says where the collection is; leave out "
                    f"{', '.join(doubled)}, or give them without location"
                )
        where = location or StoreLocation.resolve(
            name,
            index_dir=index_dir,
            metadata_url=metadata_url,
            storage_uri=storage_uri,
            storage_options=storage_options,
        )

        async def factory() -> Collection:
            # Built first: a bad stem language must fail before a store is opened.
            text_analyzer = Analyzer(analyzer)
            created = create and not await where.exists()
            # The directories this open makes, the index directory and any missing parents
            # (removed with an unused collection).
            made_dirs = (
                await asyncio.to_thread(_missing_dirs, where.index_dir)
                if created and where.index_dir is not None
                else ()
            )
            try:
                stores = await where.open(create=create, rebuild_damaged=rebuild_damaged)
            except BaseException:
                if created:
                    await _remove_created(where, made_dirs)
                raise
            chosen = embedder
            try:
                base = await _resolve_base(stores.metadata, where.index_dir, base_dir)
                # A collection keeps the analyzer version its terms were made with, and
                # without settings given, the settings too.
                text_analyzer = bound_analyzer(
                    await stores.metadata.get_analyzer(),
                    text_analyzer,
                    configured=analyzer is not None,
                )
                generation = await stores.metadata.generation()
                chosen_chunking = chunking or _bound_chunking(await stores.metadata.get_chunker())
                manifest = await stores.metadata.read_manifest()
                if chosen is None and embedder_for is not None and manifest is not None:
                    chosen = await asyncio.to_thread(embedder_for, manifest)
                if chosen is not None:
                    identity = await ensure_identity(
                        chosen, log_every=(ingest or IngestConfig()).progress_log_seconds
                    )
                    check_embedding(manifest, identity, where.name)
                    await stores.open_vectors(identity.dimensions)
            except BaseException:
                await stores.close()
                if created:  # nothing of a failed first open stays behind
                    await _remove_created(where, made_dirs)
                raise
            opened = cls(
                stores=stores,
                base_dir=base,
                retrieval=retrieval or RetrievalConfig(),
                chunking=chosen_chunking,
                analyzer=text_analyzer,
                ingest=ingest or IngestConfig(),
                embedder=chosen,
                reranker=reranker,
                url_loader=url_loader,
                clearance=clearance,
                opened_generation=generation,
                created=created,
                rewriter=rewriter,
            )
            opened._made_dirs = made_dirs
            if (
                generation > 0
                and isinstance(stores.segments, LocalSegments)
                and await stores.segments.remembered()
            ):
                # Paid here rather than by the first search, and only when every pack's
                # checks are remembered (storage/check_cache.py): opening the lexical index
                # is then a few statements and a map per pack, whatever the collection's
                # size, so a command that never searches pays no read of the index. A
                # BM25 collection's retriever is a few statements more; a dense one's
                # also checks its vectors, left to the first search. What fails here
                # (another analyzer, say) is raised where it always was: by the first
                # search or write, which tries again.
                try:
                    await (opened._lexical() if chosen is not None else opened.retriever())
                except Exception as exc:
                    logger.debug("the collection's index opens at first use: %s", exc)
                except BaseException:
                    await opened.close()
                    raise
            return opened

        return _Opener(factory)

    def _claim_loop(self) -> None:
        """Take the running loop as this collection's own, or refuse it.

        A collection belongs to the loop it was opened on while that loop runs: its
        locks and connections serve one loop at a time, and a call from a second loop
        running meanwhile (another thread's ``asyncio.run``) could leave both waiting
        on each other. Once that loop has ended, the next one to use it takes it over,
        as successive ``asyncio.run`` calls of a script do."""
        current = asyncio.get_running_loop()
        with self._loop_lock:
            home = self.loop
            if home is current:
                return
            if home is not None and home.is_running() and not home.is_closed():
                raise ConfigurationError(
                    "this collection belongs to an event loop running in another thread "
                    "(the one it was opened on, or the loop that took it over once that one "
                    "ended, such as groundkit's background loop after a blocking call: "
                    "Collection.loop); await "
                    "groundkit.sync.run_async(call, home=collection.loop) from this loop, "
                    "or open the collection here"
                )
            self.loop = current

    @_homed
    async def close(self) -> None:
        """Finish a merge in progress, then close the stores. A collection this object
        created and nothing was ever written to (its first ingest failed, or found nothing
        to store) is removed, so a mistaken first run leaves no collection behind (with
        its base directory). Idempotent.

        A cancelled ``close`` still finishes closing before it raises: cut short, it left
        the stores open for good (a second ``close`` does nothing)."""
        if self._closing is None:
            self._closed = True
            self._closing = asyncio.ensure_future(self._close_now())
            first = True
        else:
            first = False
        closing = self._closing
        try:
            await asyncio.shield(closing)
        except asyncio.CancelledError:
            if not closing.done():
                await asyncio.wait({closing})
            raise
        except Exception:
            if first:
                raise  # reported once, to the caller that closed

    async def _close_now(self) -> None:
        self._left_open.detach()
        merging, self._merging = self._merging, None
        if merging is not None:
            with contextlib.suppress(Exception):
                await merging
        retriever, self._retriever = self._retriever, None
        if retriever is not None:
            await retriever.close()  # a row preload still reading stops here
        self._live = None
        remove = False
        if self._created:
            try:
                remove = await _never_written(self.store)
            except Exception:  # the store is unusable; closing is what is left to do
                remove = False
        await self._stores.close()
        if remove:
            await _remove_created(self.location, self._made_dirs)

    @property
    def closed(self) -> bool:
        """True once ``close`` was called."""
        return self._closed

    def _report_left_open(self) -> None:
        """Emit now the ResourceWarning of a collection never closed (at most once; none
        after ``close``): for an exit hook about to close it, as ``groundkit.sync``'s."""
        self._left_open()

    @_homed
    async def rebase(self, base_dir: str | Path, *, force: bool = False) -> tuple[int, int]:
        """Record ``base_dir`` as the directory this collection's sources are relative to
        (after the source tree moved), and use it from now on.

        Checks up to 200 file sources first and returns ``(found, checked)``; when none
        of them exists under ``base_dir`` it raises ``ConfigurationError`` instead of
        recording a base that resolves nothing, unless ``force``.
        """
        self._stores.refuse_writes()
        _check_flags(force=force)
        if not isinstance(base_dir, str | os.PathLike):
            raise InvalidSettingError(
                f"the new base directory must be a path (str or os.PathLike), "
                f"not {type(base_dir).__name__}"
            )
        try:
            base = Path(os.path.realpath(base_dir))
            is_directory = base.is_dir()
        except (OSError, ValueError) as exc:  # a NUL in it, a name too long
            raise InvalidSettingError(
                f"the new base directory {os.fspath(base_dir)!r} cannot name a directory ({exc})"
            ) from None
        if not is_directory:
            raise InvalidSettingError(f"the new base directory {str(base)!r} is not a directory")
        sources = [
            r.source async for r in self.store.iter_documents() if r.source_class != "snapshot"
        ][:_REBASE_SAMPLE]
        found = sum(1 for s in sources if (base / s).is_file())
        if sources and not found and not force:
            raise ConfigurationError(
                f"none of {len(sources)} sources of collection {self.name!r} (such as "
                f"{sources[0]!r}) is under {str(base)!r}; check the path, or force it"
            )
        index_dir = self.location.index_dir
        recorded = str(base) if index_dir is None else os.path.relpath(base, index_dir)
        if not utf8_encodable(recorded):
            raise ConfigurationError(
                f"the base directory '{printable_path(str(base))}' is not valid UTF-8"
            )
        await self.store.set_base_dir(recorded)
        self.base_dir = base
        self._made_indexer = None  # made again, with the new base, when next needed
        return found, len(sources)

    @property
    def _url_loader(self) -> UrlLoader:
        if self._given_url_loader is None:
            from groundkit.ingestion.url_loader import UrlLoader

            config = self._ingest_config
            self._given_url_loader = UrlLoader(
                read_fields=config.read_fields,
                html_extractor=config.html_extractor,
                ocr=config.ocr,
                ocr_languages=config.ocr_languages,
                extraction_cache_bytes=config.extraction_cache_bytes,
            )
        return self._given_url_loader

    @property
    def _indexer(self) -> Indexer:
        if self._made_indexer is None:
            self._made_indexer = self._make_indexer()
        return self._made_indexer

    def _make_indexer(self) -> Indexer:
        from groundkit.ingestion.indexer import Indexer

        return Indexer(
            self.store,
            self.base_dir,
            chunking=self._chunking,
            analyzer=self._analyzer,
            ingest=self._ingest_config,
            embedder=self.embedder,
            vector_store=self.vector_store,
            collection=self.name,
            snapshot_dir=self.snapshots,
        )

    @_homed
    async def generation(self) -> int:
        return await self.store.generation()

    @_homed
    async def ingest(
        self,
        path: str | Path,
        *,
        metadata: Mapping[str, object] | None = None,
        progress: ProgressCallback | None = None,
        valid_as_of: datetime | None = None,
        executor: IngestExecutor | None = None,
    ) -> IngestReport:
        """Add, update and prune documents under ``path`` (inside the base directory).

        An ``http://`` or ``https://`` string is fetched instead, through this
        collection's ``UrlLoader`` (public addresses only unless it was opened
        with another policy), and kept as a snapshot document.

        ``metadata`` gives every document of this call these fields, over the
        ones its file states (front matter, PDF info, HTML meta). Values are
        ``str``, ``int``, ``float``, ``bool`` or lists of one of them, dates as
        ISO strings; anything else raises ``IngestionError`` before any file is
        read. Fields are not sticky: the next ingest of a file stores the
        fields that call gives it.

        A changed document keeps its previous version, searchable with
        ``search(as_of=...)`` (``IngestConfig.keep_versions`` bounds how many are
        kept); the new version is current from ``valid_as_of`` (timezone-aware)
        when given, else from now. The lexical index absorbs the write without a
        rebuild: searches of this object, and of every process that has the
        collection open, see it on their next call.

        ``executor`` runs the per-file work elsewhere, e.g.
        ``RayExecutor(address=...)`` on a Ray cluster; this object still commits,
        so the result is the same as without one. A URL ingest takes none
        (``ConfigurationError``): one page is fetched here.
        """
        from groundkit.ingestion.executor import IngestExecutor
        from groundkit.utils.url_safety import looks_like_url

        if not isinstance(path, str | os.PathLike):
            raise InvalidInputError(
                f"ingest takes a path (str or os.PathLike) or an http(s) URL, "
                f"not {type(path).__name__}"
            )
        if progress is not None and not callable(progress):
            raise InvalidInputError(
                f"progress must be a function taking an IngestProgress, not "
                f"{type(progress).__name__}"
            )
        self._stores.refuse_writes()
        is_url = isinstance(path, str) and looks_like_url(path.strip())
        if executor is not None and (is_url or not isinstance(executor, IngestExecutor)):
            raise ConfigurationError(
                "a URL is fetched and ingested by this process: ingest it without an executor"
                if is_url
                else f"executor must be an IngestExecutor (such as RayExecutor), not "
                f"{type(executor).__name__}"
            )
        try:
            if is_url:
                report = await self._indexer.ingest_url(
                    str(path).strip(), self._url_loader, metadata=metadata, valid_as_of=valid_as_of
                )
            else:
                report = await self._indexer.ingest(
                    path,
                    progress=progress,
                    metadata=metadata,
                    valid_as_of=valid_as_of,
                    executor=executor,
                )
        finally:
            await self._after_write()
        return self._with_pending_repairs(report)

    @_homed
    async def add_documents(
        self,
        records: Iterable[RecordInput],
        *,
        metadata: Mapping[str, object] | None = None,
    ) -> IngestReport:
        """Add or replace in-memory documents: text that is not a file, by the caller's id.

        Each item is a ``groundkit.Record``, a mapping ``{"id": ..., "text": ...,
        "fields": {...}}``, a plain ``str``, or a LangChain ``Document``, LlamaIndex
        ``Document``/``TextNode`` or Haystack ``Document`` (its id, its text, its
        metadata as fields). A text or document without an id gets ``text-`` and 32
        hex digits of its text's SHA-256, so adding it again changes nothing. A record
        is stored as a ``record`` document whose source is ``record://<id>``; its text
        is kept in the collection's snapshot store, and its citations verify against
        that stored text. Adding an id again replaces that record (``updated``); the
        same text and fields change nothing (``unchanged``, by content hash).
        ``metadata`` gives every record these fields, over its own, as for ``ingest``.

        The whole batch is checked first: an invalid id (1-256 characters, no
        control characters, no surrounding whitespace), an id given twice, empty
        text or invalid fields raise ``IngestionError`` naming each problem, and
        nothing is stored. Folder ingests never prune records.
        """
        from groundkit.ingestion.fields import check_fields
        from groundkit.ingestion.records import record_documents

        self._stores.refuse_writes()
        fields = check_fields(metadata, "metadata argument") if metadata is not None else None
        documents = record_documents(records, fields)
        try:
            report = await self._indexer.ingest_documents(documents)
        finally:
            await self._after_write()
        return self._with_pending_repairs(report)

    @_homed
    async def delete_documents(
        self, ids: Iterable[str], *, missing_ok: bool = False
    ) -> IngestReport:
        """Deprecated, kept for one release: use ``delete(records=ids)``.

        Deletes in-memory documents by id, with their stored text and vectors;
        ``IngestionError`` before anything is deleted when an id names no record here,
        unless ``missing_ok=True``. The report lists what went in ``removed``.
        """
        from groundkit.ingestion.records import record_sources

        _deprecated("Collection.delete_documents(ids)", "Collection.delete(records=ids)")
        self._stores.refuse_writes()
        try:
            return await self._indexer.delete_stored(record_sources(ids), missing_ok=missing_ok)
        finally:
            await self._after_write()

    def _with_pending_repairs(self, report: IngestReport) -> IngestReport:
        update: dict[str, list[str]] = {}
        if self._pending_repairs:
            pending, self._pending_repairs = self._pending_repairs, []
            update["repairs"] = [*pending, *report.repairs]
        if self._pending_notices:
            notices, self._pending_notices = self._pending_notices, []
            update["notices"] = [*report.notices, *notices]
        return report.model_copy(update=update) if update else report

    @_homed
    async def retriever(self) -> Retriever:
        """The current Retriever: caught up if the text changed since its last search
        (segments mapped, not rebuilt), its vector handle moved forward if the vectors
        did (another process's ingest)."""
        generation, vectors_generation = await self.store.generations()
        async with self._reopen:
            if self._retriever is None:
                self._retriever = await Retriever.open(
                    self.store,
                    self._retrieval,
                    analyzer=self._analyzer,
                    embedder=self.embedder,
                    vector_store=self.vector_store,
                    reranker=self.reranker,
                    collection=self.name,
                    clearance=self.clearance,
                    lexical=await self._lexical(),
                    rewriter=self.rewriter,
                )
            elif self._retriever.generation != generation:
                await self._retriever.refresh()
                await self._retriever.refresh_vectors(vectors_generation)
            elif (
                self._retriever.vectors_generation != vectors_generation
                or self._retriever.vector_problem is not None
            ):
                # A vector side found wanting is looked at again on every search,
                # so a repair made by another process is picked up at once.
                await self._retriever.refresh_vectors(vectors_generation)
            return self._retriever

    @_homed
    async def search(
        self,
        query: str | SearchRequest,
        top_k: int | None = None,
        **options: Unpack[SearchOptions],
    ) -> SearchResponse:
        """See ``Retriever.search``; catches up with the store first if it moved on.

        ``query`` is the text with the options as keywords (``SearchRequest``'s
        fields: mode, rerank, filters, as_of, expand, mmr, reorder, rewrite), or a
        ``SearchRequest`` holding them all; either way the request is made (and
        checked) once, by ``Retriever.search``, inside its trace span.

        A URL or record document whose stored text is missing (an earlier version's
        interrupted write, or a file removed by hand) is left out of the results, which
        cannot be verified; ``metadata["missing_text"]`` counts the documents left out.
        """
        retriever = await self.retriever()
        response = await retriever.search(query, top_k, **options)
        return await self._without_missing_texts(response)

    async def _without_missing_texts(self, response: SearchResponse) -> SearchResponse:
        """``response`` without results whose document's stored text is missing. Each
        document is looked at once: a text written by this version is stored before its
        row, and every later one too."""
        exists = getattr(self.snapshots, "exists", None)
        fresh = {
            r.source: r.document_id
            for r in response.results
            if r.source_class in STORED_TEXT_CLASSES and r.document_id not in self._texts_seen
        }
        if not fresh or not callable(exists):
            return response
        states = await self.store.document_states(sources=list(fresh))
        missing: set[str] = set()
        for source, document_id in fresh.items():
            state = states.get(source)
            if state is None:
                continue  # gone since the search: verify says so
            named = text_name(document_id, state.content_hash)
            if await exists(named) or await exists(document_id):
                if len(self._texts_seen) >= _TEXTS_SEEN_MAX:
                    self._texts_seen.clear()
                self._texts_seen.add(document_id)
            else:
                missing.add(document_id)
        if not missing:
            return response
        logger.warning(
            "%d documents left out of results: their stored text is missing", len(missing)
        )
        kept = [r for r in response.results if r.document_id not in missing]
        meta = {**response.metadata, "missing_text": len(missing)}
        return response.model_copy(
            update={"results": kept, "total_results": len(kept), "metadata": meta}
        )

    # -- the lexical index and writes ---------------------------------------------

    async def _lexical(self) -> LiveIndex:
        if self._live is None:
            self._live = await LiveIndex.open(
                self.store,
                self._stores.segments,
                k1=self._retrieval.bm25_k1,
                b=self._retrieval.bm25_b,
            )
        return self._live

    async def _after_write(self) -> None:
        """Bring the persisted lexical index up to the store after a write of this
        object, and start a merge if the policy wants one (it runs in the
        background; ``close`` waits for it). Searches catch up on their own."""
        if self._live is None and (
            self._stores.segments is None or await self.store.generation() == 0
        ):
            return  # nothing to persist: the index is built when a search needs it
        live = await self._lexical()
        notice = await live.commit()
        if notice is not None:
            self._pending_notices.append(notice)
        if self._merging is None and live.merge_due():
            self._merging = asyncio.create_task(self._merge())

    async def _merge(self) -> bool:
        try:
            assert self._live is not None
            return await self._live.merge()
        except Exception as exc:  # a failed merge leaves the index as it was
            logger.warning("a lexical merge failed and was abandoned: %s", exc)
            return False
        finally:
            self._merging = None

    @_homed
    async def optimize(self) -> OptimizeReport:
        """Merge the lexical index into one segment, dropping removed chunks, and
        persist it (what ``grk optimize`` runs). Searches go on meanwhile."""
        self._stores.refuse_writes()
        if self._merging is not None:
            with contextlib.suppress(Exception):
                await self._merging
        live = await self._lexical()
        await live.commit()
        before = live.segment_count
        merged = await live.merge(everything=True)
        if self.snapshots is not None:
            # Texts no document names (an interrupted write's), past the grace period.
            await self._indexer.sweep_snapshots()
        return OptimizeReport(
            segments_before=before, segments_after=live.segment_count, merged=merged
        )

    @_homed
    async def delete(
        self,
        *,
        ids: Sequence[str] = (),
        sources: Sequence[str] = (),
        records: Sequence[str | Record] = (),
        erase: bool = False,
        document_ids: Sequence[str] | None = None,
    ) -> DeleteReport:
        """Remove documents, every version of them, with their vectors and snapshots.

        Name them any of three ways, mixed freely: ``ids`` are document ids, as
        results carry them (``result.citation.document_id``); ``sources`` are stored
        sources (a path relative to the base directory, or a URL as it was
        ingested); ``records`` are the caller's ids given to ``add_documents`` (or
        the ``Record`` objects themselves). The metadata store goes first, in one
        transaction: from then on no search returns the documents. Their vectors
        and snapshot copies follow in the same call. Names that match nothing are
        listed in ``missing``, as given; nothing is refused for being missing. The
        documents are looked up by key, so a delete costs the same in a small
        collection and a large one. ``document_ids=`` is the deprecated spelling
        of ``ids=``.

        A delete leaves copies in the collection's files (free pages, older vector
        versions, index files in their grace period) until later writes reuse them.
        ``erase=True`` removes those too: the documents' rows, the terms only they
        used, the lexical index's files rewritten without them, their stored texts,
        their vectors with every older version of the vector table, the change log
        naming them, and the metadata store's free pages and write-ahead log; the
        report's ``erasure`` says what went (adr/0053-erasure.md). It rewrites files
        of the whole collection, so it takes about as long as an optimize; running
        it again after an interruption completes it.
        """
        _check_flags(erase=erase)
        self._stores.refuse_writes()
        if document_ids is not None:
            _deprecated("Collection.delete(document_ids=...)", "Collection.delete(ids=...)")
            if ids:
                raise ConfigurationError("pass ids= only; document_ids= is its deprecated name")
            ids = document_ids
        wanted_ids = _strings(ids, "ids")
        # Each name as given, beside the source the store holds it under: a record is
        # named by the caller's id, stored as record://<id>.
        given_sources = _strings(sources, "sources")
        wanted = [(s, self._stored_source(s)) for s in given_sources]
        wanted += [(r, record_source(r)) for r in _record_ids(records)]
        found = await self.store.find_documents(
            document_ids=wanted_ids,
            sources=[*(stored for _, stored in wanted), *given_sources],
        )
        by_id = {r.document_id: r for r in found}
        by_source = {r.source: r for r in found}
        # A source named exactly as stored is that document, whatever a path of that
        # name would mean from the working directory (or with its spaces trimmed).
        wanted = [
            (given, given if n < len(given_sources) and given in by_source else stored)
            for n, (given, stored) in enumerate(wanted)
        ]
        chosen: dict[str, DocumentRecord] = {}
        named: dict[str, list[str]] = {}  # each chosen document's names, as given
        missing: list[str] = []
        unmatched: list[str] = []  # the stored sources of names that matched nothing
        for document_id in wanted_ids:
            if document_id in by_id:
                chosen[document_id] = by_id[document_id]
                named.setdefault(document_id, []).append(document_id)
            else:
                missing.append(document_id)
        for given, stored in wanted:
            record = by_source.get(stored)
            if record is None:
                missing.append(given)
                unmatched.append(stored)
            else:
                chosen[record.document_id] = record
                named.setdefault(record.document_id, []).append(given)
        if erase:
            # Documents asked for but already gone (an erase interrupted after its
            # rows went) may still have texts: they are erased too.
            gone = [*chosen, *(i for i in wanted_ids if i not in by_id)]
            gone += [document_id_for(stored) for stored in unmatched]
            erasure = await self._erase(chosen, gone)
            return DeleteReport(
                deleted=sorted(r.source for r in chosen.values()),
                missing=missing,
                erasure=erasure,
            )
        vectors = await self._vectors_for_delete() if chosen else None
        try:
            if chosen:
                before = time.time()  # their texts written since are a re-add's: kept
                removed = await self.store.delete_documents(
                    sorted(r.source for r in chosen.values())
                )
                # One another writer removed since the look-up is theirs to report.
                for document_id, record in list(chosen.items()):
                    if record.source not in removed:
                        del chosen[document_id]
                        missing.extend(named[document_id])
                if vectors is not None and chosen:
                    await vectors.delete_documents(sorted(chosen))
                if self.snapshots is not None and await self._has_stored_texts(chosen):
                    await self._indexer.sweep_snapshots(sorted(chosen), gone_before=before)
        finally:
            if chosen:
                await self._after_write()
        return DeleteReport(deleted=sorted(r.source for r in chosen.values()), missing=missing)

    async def _has_stored_texts(self, chosen: Mapping[str, DocumentRecord]) -> bool:
        """Whether any of ``chosen`` has a text in the snapshot store: a URL's or a
        record's, or a file's kept copy (``IngestConfig.keep_sources``)."""
        if any(r.source_class in STORED_TEXT_CLASSES for r in chosen.values()):
            return True
        wanted = {kept_name(r.document_id, r.content_hash) for r in chosen.values()}
        # One listing, not a look-up per document (on object storage, a request each).
        names = getattr(self.snapshots, "names", None)
        if callable(names):
            try:
                return not wanted.isdisjoint(await names())
            except OSError:
                return True  # the sweep finds out, and logs what it cannot do
        return False

    async def _erase(self, chosen: Mapping[str, DocumentRecord], gone: list[str]) -> ErasureReport:
        """The steps of an erasing delete, in order (adr/0053-erasure.md): rows and
        unused terms, vectors and the table's older versions, stored texts, the
        lexical index's files, then the metadata store's own files. Each step also
        finishes what an interrupted erase left, so running it again completes it."""
        if self._merging is not None:
            with contextlib.suppress(Exception):
                await self._merging
        vectors = await self._vectors_for_delete()
        started = time.time()
        unfinished: list[str] = []
        lexical_done = False
        try:
            rows = await self.store.erase_documents(sorted(r.source for r in chosen.values()))
            vector = VectorErasure()
            if vectors is not None:
                if isinstance(vectors, ErasingVectorStore):
                    keep = await self.store.document_ids()
                    vector = await vectors.erase_documents(sorted(chosen), keep=keep)
                else:
                    vector = VectorErasure(rows=await vectors.delete_documents(sorted(chosen)))
                    unfinished.append(
                        "the vector store cannot erase older copies of rows; its own "
                        "documentation says how long it keeps them"
                    )
                await self.store.bump_vectors_generation()
            snapshots = await self._erase_snapshots(gone, started)
            live = await self._lexical()
            written, removed = await live.erase(self._remove_packs_now)
            lexical_done = True
            compacted = await self.store.compact()
        finally:
            if not lexical_done:
                with contextlib.suppress(Exception):
                    await self._after_write()
        if compacted.unfinished is not None:
            unfinished.append(compacted.unfinished)
        if self._stores.segments is not None and not isinstance(
            self._stores.segments, (LocalSegments, ObjectSegments)
        ):
            unfinished.append(
                "the lexical index's old files are removed only after their grace period"
            )
        return ErasureReport(
            documents=rows.documents,
            versions=rows.versions,
            chunks=rows.chunks,
            terms=rows.terms,
            vector_rows=vector.rows,
            vector_versions=vector.versions,
            vector_bytes=vector.bytes_removed,
            packs_written=written,
            packs_removed=removed,
            snapshots=snapshots,
            bytes_vacuumed=compacted.bytes_reclaimed,
            unfinished=unfinished,
        )

    async def _erase_snapshots(self, gone: list[str], started: float) -> int:
        """Delete every stored text of the ``gone`` documents written before the erase
        ``started`` (each version's), at once, and every other text no document names
        once past the sweep's grace period (a text written just now may be another
        writer's, whose row has not committed yet); returns how many. A failure is
        raised, not logged: an erase that leaves a text behind must say so."""
        if self.snapshots is None:
            return 0
        keep: list[str] = []
        async for r in self.store.iter_documents():
            keep += names_of(r.document_id, r.content_hash, r.source_class)
        if isinstance(self.snapshots, LocalSnapshots | ObjectSnapshots):
            removed = await self.snapshots.remove_stale(
                keep, grace=ORPHAN_GRACE_SECONDS, gone=gone, gone_before=started
            )
        else:  # another library's store sweeps without a grace period
            removed = await self.snapshots.remove_stale(keep)
        return len(removed)

    async def _remove_packs_now(self, keep: list[str]) -> int:
        """Delete the lexical index's files that ``keep`` does not name, with no grace
        period (called under the index's writer lock). A process that still maps one
        keeps reading its pages until it lets go; on Linux nothing else can reach them."""
        files = self._stores.segments
        if not isinstance(files, (LocalSegments, ObjectSegments)):
            return 0
        previous, files.grace_seconds = files.grace_seconds, 0.0  # read at every sweep
        try:
            return await files.remove_unreferenced(keep)
        finally:
            files.grace_seconds = previous

    @_homed
    async def purge_versions(self, keep: int = 0) -> int:
        """Remove all but the ``keep`` newest past versions of every document (their
        chunks and lexical postings); returns how many versions went."""
        if isinstance(keep, bool) or not isinstance(keep, int) or keep < 0:
            raise InvalidSettingError(f"keep must be an integer >= 0, got {keep!r}")
        self._stores.refuse_writes()
        try:
            return await self.store.purge_versions(keep)
        finally:
            await self._after_write()

    def _stored_source(self, given: str) -> str:
        """``given`` as the store spells sources: a URL as ingest normalised it, a
        path that names a file relative to the base directory, else as given."""
        from groundkit.utils.url_safety import looks_like_url

        text = given.strip()
        if looks_like_url(text):
            try:
                return self._url_loader.check(text).source
            except (IngestionError, ConfigurationError):
                return text
        path = Path(text)
        try:
            if path.is_absolute() or path.exists():
                resolved = Path(os.path.realpath(path))
                if is_within(resolved, self.base_dir):
                    return to_relative(resolved, self.base_dir)
        except (OSError, ValueError):  # no file can have this name (too long, a NUL): as given
            pass
        return text

    async def _vectors_for_delete(self) -> VectorStoreProtocol | None:
        """The vector store whose rows a delete must remove too (None: no vectors).

        A collection bound to an embedder has vectors even when this object was
        opened without one: the table is opened by its recorded dimensions.
        """
        if self.vector_store is not None:
            return self.vector_store
        manifest = await self.store.read_manifest()
        if manifest is None:
            return None
        try:
            return await self._stores.open_vectors(manifest.identity.dimensions)
        except ConfigurationError as exc:
            raise ConfigurationError(
                f"collection {self.name!r} has vectors, and deleting documents removes "
                f"theirs too: {exc}"
            ) from None

    @_homed
    async def fetch_chunk(self, chunk_id: str, version: int | None = None) -> FetchResult:
        """A stored chunk and whether its source still holds it (traced as
        ``groundkit.fetch_chunk``, with the verdict but never the text).

        ``version`` picks a document version (as a result or citation names it);
        without it, the current chunk, else the newest past one. A past version is
        checked against the source as it is now (usually ``drifted``), and the
        result names the version and when it was replaced.

        The source is read like an ingest reads it: a regular file, at most
        ``IngestConfig.max_file_bytes`` (this collection's), else ``unresolvable``."""
        return (await self._fetch(chunk_id, version))[0]

    @_homed
    async def fetch_in_source(
        self, chunk_id: str, version: int | None = None
    ) -> tuple[FetchResult, str | None]:
        """``fetch_chunk``, together with the whole source text its verdict was reached
        on (None when the source could not be read), the source read once: what a viewer
        needs to show the verdict and the span where it stands (``grk inspect``)."""
        return await self._fetch(chunk_id, version)

    async def _fetch(self, chunk_id: str, version: int | None) -> tuple[FetchResult, str | None]:
        if not isinstance(chunk_id, str):
            # A result or citation passed whole would otherwise reach SQLite, whose
            # refusal reads like a damaged database.
            raise InvalidQueryError(
                f"fetch_chunk takes a chunk id (a str, such as result.chunk_id), not "
                f"{type(chunk_id).__name__}"
            )
        problem = describe_unencodable(chunk_id, "the chunk id")
        if problem is not None:
            raise InvalidQueryError(problem)
        with traced(SPAN_FETCH_CHUNK, collection=self.name) as span:
            if version is not None and (
                isinstance(version, bool)
                or not isinstance(version, int)
                or not 1 <= version <= _MAX_VERSION
            ):
                raise InvalidQueryError(
                    f"version must be an integer from 1 to {_MAX_VERSION}, got {version!r}"
                )
            verifier = self._verifier()
            stored = await self.store.get_chunk(chunk_id, version)
            if stored is None and version is not None:
                # The id may be right and the version wrong: say which, for a chunk the
                # caller may see (one hidden by the clearance stays unknown).
                other = await self.store.get_chunk(chunk_id)
                if other is not None and self._visible(other):
                    raise ChunkNotFoundError(
                        f"chunk {chunk_id!r} in collection {self.name!r} has no version "
                        f"{version}; its newest is version {other.version}"
                    )
            if stored is None or not self._visible(stored):
                raise verifier.hidden(chunk_id)
            result, text = await verifier.fetch_read(stored)
            span.set(source_class=result.citation.source_class, verification=result.verification)
            return result, text

    @overload
    async def verify(self) -> VerifyReport: ...

    @overload
    async def verify(
        self, target: RetrievalResult | FetchResult | Citation, *, content: str | None = None
    ) -> FetchResult: ...

    async def verify(
        self,
        target: RetrievalResult | FetchResult | Citation | None = None,
        *,
        content: str | None = None,
    ) -> VerifyReport | FetchResult:
        """Check one result, fetched chunk or citation against its source, now.

        A ``RetrievalResult`` or ``FetchResult``: whether its source still holds its
        ``content`` at its offsets, read from this collection's base directory, or its
        snapshot store for a URL or record, as a ``FetchResult`` (``.ok``,
        ``.verification``, ``.detail``). A ``Citation`` is checked against ``content``
        when given, else against the text this collection stored for its chunk. A
        result of another collection, or a chunk hidden by the clearance or unknown
        (for a bare citation), is a ``RetrievalError``. The verdict, current offsets
        and detail are the ones ``check_citation``, ``check_quote`` and
        ``verify_answer`` (its ``citations``) give for the same span (ADR 0056).

        To re-verify the whole collection, ``verify_all()``; ``verify()`` with no
        argument is its deprecated spelling, kept for one release.
        """
        self._claim_loop()  # as ``_homed`` does; mypy cannot see an overload through it
        if target is None:
            if content is not None:
                raise InvalidQueryError("content= goes with a citation to verify")
            _deprecated(
                "Collection.verify() with no argument", "Collection.verify_all()", homed=False
            )
            return await self._verifier().verify_all()
        return await self._verifier().verify(target, content)

    @_homed
    async def verify_each(
        self, targets: SearchResponse | Sequence[RetrievalResult | FetchResult]
    ) -> list[FetchResult]:
        """``verify`` on each result (or fetched chunk) of ``targets``, in order, reading each
        source once: a page of results from one long PDF re-extracts it once, not once a
        result. Each verdict is the one ``verify`` gives for that result alone."""
        items: list[RetrievalResult | FetchResult]
        if isinstance(targets, SearchResponse):
            items = list(targets.results)
        elif isinstance(targets, str | bytes | Mapping) or not isinstance(targets, Iterable):
            raise InvalidQueryError(
                f"verify_each takes a SearchResponse or a list of results, not "
                f"{type(targets).__name__}"
            )
        else:
            items = list(targets)
        return await self._verifier().verify_each(items)

    @_homed
    async def verify_all(self) -> VerifyReport:
        """Re-verify every chunk of the collection, reading each source once (as
        ``fetch_chunk`` does); the ``VerifyReport`` counts each verdict and lists
        the chunks that no longer verify."""
        return await self._verifier().verify_all()

    @_homed
    async def verify_answer(
        self,
        answer: str,
        cited: SearchResponse | MultiSearchResponse | Sequence[RetrievalResult] | Sequence[str],
        *,
        markers: Mapping[str, str] | None = None,
        marker_pattern: str | re.Pattern[str] | None = None,
        supported_threshold: float | None = None,
        weak_threshold: float | None = None,
        claim_judge: ClaimJudge | None = None,
    ) -> AnswerReport:
        """Check ``answer``, written from this collection's ``cited`` results, sentence
        by sentence (``groundkit.verify_answer``): sources read from this collection's
        base directory and snapshot store under its read cap, unquoted sentences
        compared with its embedder when it has one, else by shared terms, then read
        by ``claim_judge`` (default ``RuleClaimJudge``) for a contradiction.

        ``cited`` may also be the chunk ids the answer was written from, in marker
        order; an id this collection does not hold (or hides) is a ``RetrievalError``.
        A cited result whose chunk the clearance hides is a ``ChunkNotFoundError``, as
        in ``verify``, wherever the result object came from."""
        return await self._verifier().verify_answer(
            answer,
            cited,
            markers=markers,
            marker_pattern=marker_pattern,
            supported_threshold=supported_threshold,
            weak_threshold=weak_threshold,
            claim_judge=claim_judge,
        )

    def _verifier(self) -> Verifier:
        """This collection's citation checks, as its sources, clearance and embedder
        stand now."""
        from groundkit.verification.verifier import Verifier

        return Verifier(
            name=self.name,
            store=self.store,
            base_dir=self.base_dir,
            snapshots=self.snapshots,
            max_bytes=self.max_file_bytes,
            visible=self._visible,
            embedder=self.embedder,
            analyzer=self._analyzer,
            admits=None if self.clearance is None else self._admits,
        )

    def _admits(self, metadata: Mapping[str, Any]) -> bool:
        return visible(fields_of(metadata), self.clearance)

    def _visible(self, stored: StoredChunk) -> bool:
        return visible(fields_of(stored.metadata), self.clearance)


def _check_settings(**given: object) -> None:
    """``InvalidSettingError`` for a settings argument that is not its config model
    (a plain dict, say), naming the model to build."""
    models = {
        "retrieval": RetrievalConfig,
        "chunking": ChunkingConfig,
        "analyzer": AnalyzerConfig,
        "ingest": IngestConfig,
    }
    for name, value in given.items():
        model = models[name]
        if value is not None and not isinstance(value, model):
            raise InvalidSettingError(
                f"{name} must be a {model.__name__} (groundkit.{model.__name__}(...)), "
                f"not {type(value).__name__}"
            )


def _check_flags(**given: object) -> None:
    """``InvalidSettingError`` for a switch that is not ``True`` or ``False``: these
    switches erase, rebuild or create, and ``erase="no"`` must not erase."""
    for name, value in given.items():
        if not isinstance(value, bool):
            raise InvalidSettingError(f"{name} must be True or False, not {value!r}")


def _check_paths(**given: object) -> None:
    """``InvalidSettingError`` for a directory argument that is no path (a number, bytes),
    which would otherwise fail inside ``pathlib`` as a ``TypeError``."""
    for name, value in given.items():
        if value is None:
            continue
        if not isinstance(value, str | os.PathLike) or isinstance(os.fspath(value), bytes):
            raise InvalidSettingError(
                f"{name} must be a directory path (str or os.PathLike), not {type(value).__name__}"
            )


# What each model argument must be able to do, by method: looked up on the class, so no
# property of the object (an embedder's lazily loaded model) is run to check it.
_MODEL_METHODS = {
    "embedder": ("embed_documents", "embed_query"),
    "reranker": ("rerank",),
    "rewriter": ("rewrite",),
}


def _check_models(**given: object) -> None:
    """``InvalidSettingError`` for an ``embedder``, ``reranker`` or ``rewriter`` that lacks
    the methods its protocol needs (a model name given as a string, say): it would fail
    later, at the first ingest or search, as an ``AttributeError``."""
    for name, value in given.items():
        if value is None:
            continue
        missing = [m for m in _MODEL_METHODS[name] if not _has_method(value, m)]
        if missing:
            hint = (
                "; for a model by name, groundkit.SentenceTransformerEmbedder(name)"
                if name == "embedder" and isinstance(value, str)
                else ""
            )
            raise InvalidSettingError(
                f"{name} must be an object with {' and '.join(m + '()' for m in missing)} "
                f"(see its protocol), "
                f"not {type(value).__name__}{hint}"
            )


def _has_method(value: object, name: str) -> bool:
    """Whether ``value`` has a callable ``name``, on its class or set on the object."""
    own = getattr(value, "__dict__", None)
    found = own.get(name) if isinstance(own, dict) else None
    return callable(getattr(type(value), name, None)) or callable(found)


def _fixed_at_open(name: str) -> None:
    raise ConfigurationError(
        f"a collection's {name} is fixed when it opens; open it again with "
        f"Collection.open(..., {name}=...)"
    )


def _warn_left_open(name: str, where: str) -> None:
    warnings.warn(
        f"unclosed collection {name!r} in {where}: use 'async with' or close()",
        ResourceWarning,
        stacklevel=1,
    )


# Set by groundkit.sync around a blocking call: the deprecations met on the loop's
# thread are kept here and warned about in the caller's thread, where its warning
# filters apply and the warning can point at its line.
DEPRECATIONS: contextvars.ContextVar[list[str] | None] = contextvars.ContextVar(
    "groundkit_deprecations", default=None
)


def _deprecated(old: str, new: str, *, homed: bool = True) -> None:
    """Warn, pointed at the caller of the method that calls this (``homed``: through
    ``_homed``'s frame), that ``old`` goes with the next release (a blocking caller is
    warned in its own thread)."""
    from groundkit.verification.verdict import deprecation

    message = deprecation(old, new)
    kept = DEPRECATIONS.get()
    if kept is not None:
        kept.append(message)
        return
    warnings.warn(message, DeprecationWarning, stacklevel=4 if homed else 3)


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


def _strings(values: Sequence[str], what: str) -> list[str]:
    """``values`` checked: a list of non-empty strings (a bare string is refused,
    since it would be read as its characters)."""
    if isinstance(values, str | bytes) or not isinstance(values, Iterable):
        raise ConfigurationError(f"{what} must be a list of strings, not {type(values).__name__}")
    out = list(values)
    for value in out:
        if not isinstance(value, str) or not value.strip():
            raise ConfigurationError(f"{what} must hold non-empty strings, got {value!r}")
        problem = describe_unencodable(value, f"a value of {what}")
        if problem is not None:
            raise ConfigurationError(problem)
    return out


def _record_ids(records: Sequence[str | Record]) -> list[str]:
    """The caller's ids of ``records`` (ids or ``Record`` objects), checked like any id."""
    from groundkit.ingestion.records import check_record_id

    if isinstance(records, str | bytes | Record) or not isinstance(records, Iterable):
        raise ConfigurationError(
            f"records must be a list of record ids, not {type(records).__name__}"
        )
    out: list[str] = []
    for item in records:
        record_id = item.id if isinstance(item, Record) else item
        try:
            out.append(check_record_id(record_id, "a value of records"))
        except IngestionError as exc:
            raise ConfigurationError(str(exc)) from None
    return out


# File sources rebase() looks for under a new base directory before recording it.
# The largest version a store can hold (a signed 64-bit integer in SQLite and PostgreSQL).
_MAX_VERSION = 2**63 - 1
_REBASE_SAMPLE = 200
# Documents whose stored text search remembers as present (then it starts over).
_TEXTS_SEEN_MAX = 100_000


def _missing_dirs(path: Path) -> tuple[Path, ...]:
    """``path`` and those of its parents that do not exist, deepest first: the
    directories making ``path`` creates."""
    missing: list[Path] = []
    current = path.absolute()
    while not current.exists() and current.parent != current:
        missing.append(current)
        current = current.parent
    return tuple(missing)


async def _remove_created(location: StoreLocation, made_dirs: tuple[Path, ...] = ()) -> None:
    """Remove a collection this process created and never wrote to, and the directories
    the same open made (deepest first, while each is empty; never one that was there
    before); a failure to do so is logged, never raised over the error that led here."""
    try:
        # Checked again where it is removed: another process may have opened it meanwhile.
        if await location.exists() and not await location.drop_unwritten():
            logger.info("the new collection %s is kept: another process uses it", location.name)
            return
        for directory in made_dirs:
            try:
                await asyncio.to_thread(directory.rmdir)
            except OSError:  # not empty: something else lives there, and so in its parents
                break
    except Exception as exc:
        logger.warning("could not remove the unused new collection %s (%s)", location.name, exc)


async def _never_written(store: MetadataStoreProtocol) -> bool:
    """Whether no document was ever written: the generation counts every write, and
    binding the embedder (a dense first ingest) is the one write that stores none."""
    return never_written(await store.generation(), await store.read_manifest())


async def _resolve_base(
    store: MetadataStoreProtocol, index_dir: Path | None, base_dir: str | Path | None
) -> Path:
    """The base directory: given, else stored, else the current one (then stored).

    Stored relative to the index directory when there is one (so both can move
    together), absolute for a shared collection.
    """
    stored = await store.get_base_dir()
    if base_dir is None and stored is not None:
        if index_dir is None:
            return Path(os.path.realpath(stored))
        return Path(os.path.realpath(index_dir / stored))
    base = Path(os.path.realpath(base_dir if base_dir is not None else Path.cwd()))
    if stored is None:
        recorded = str(base) if index_dir is None else os.path.relpath(base, index_dir)
        if not utf8_encodable(recorded):
            # Stored with the collection, so it must be text (ADR 0027).
            raise ConfigurationError(
                f"the base directory '{printable_path(str(base))}' (stored as "
                f"'{printable_path(recorded)}') is not valid UTF-8 (undecodable bytes shown "
                "as \\x escapes); rename it or choose another base_dir"
            )
        await store.set_base_dir(recorded)
    return base


def _bound_chunking(identity: str | None) -> ChunkingConfig:
    """The chunking a collection is bound to (the default for a new one, or for an
    identity this version cannot read: the next ingest then says why it refuses)."""
    return ChunkingConfig.from_identity(identity) or ChunkingConfig()
