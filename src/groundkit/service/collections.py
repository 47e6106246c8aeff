"""The server's collections: found in one index directory (or one PostgreSQL database),
opened on first use, reused.

A long-running server must answer from what is on disk *now*. A ``Collection``
notices a new generation and catches its lexical index up (no rebuild), and moves
its vector handle forward when only the vectors changed, on the next search. One thing it cannot
notice by itself is handled here, by comparing the generation before each
request: a collection that became bound to an embedder since it was opened is
reopened with that embedder, so dense and hybrid start to work.

Nor can it notice being dropped, or dropped and made again under its name, by
another process: its store goes on reading what was removed. So each request also
checks that the store is still the one opened (a stat of a local file, the uid of a
shared one) and otherwise opens the collection again by name.

A replaced collection is closed once the last request using it has finished,
so a re-ingest never pulls a store out from under a running search.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict

from groundkit.collection import Collection
from groundkit.config import RetrievalConfig
from groundkit.contracts import CollectionManifest, EmbeddingIdentity
from groundkit.errors import (
    CollectionNotFoundError,
    ConfigurationError,
    GroundkitError,
    StorageError,
    kind_of,
)
from groundkit.providers.factory import embedder_for_manifest
from groundkit.providers.protocols import EmbedderFactory, EmbeddingProtocol
from groundkit.retrieval.rerank import RerankerProtocol
from groundkit.retrieval.rewriting import QueryRewriterProtocol
from groundkit.retrieval.sensitivity import check_clearance, visible
from groundkit.storage.location import CollectionStores, StoreLocation
from groundkit.storage.protocols import ChunkOwners
from groundkit.storage.reconcile import vector_problem, vectors_missing
from groundkit.storage.sqlite import SQLiteMetadataStore

__all__ = ["CollectionInfo", "CollectionRegistry"]

logger = logging.getLogger("groundkit.service")

# A collection that cannot be read is read again this many times, after growing pauses,
# before it is called damaged: another process may be dropping or making it again.
_REREADS = 2
_REREAD_PAUSE_S = 0.05


class CollectionInfo(BaseModel):
    """One collection as ``list_collections`` describes it.

    ``status`` is ``"damaged"`` when the collection's stores could not be read;
    ``error`` then says why in one line, and the counts are None (unknown).
    ``analyzer`` is the analyzer identity the collection is bound to (None before its
    first ingest), ``size_bytes`` what its files take in the index directory (None for
    a shared collection), and ``base_dir`` the directory its sources resolve against,
    which only ``describe(..., full=True)`` fills in (the MCP tool never shows it).
    ``past_versions`` counts the earlier document versions kept for ``as_of``
    searches; it takes a pass over the documents, so only ``full=True`` fills it in.
    ``vectors_missing`` counts the chunks of a collection bound to an embedder that
    have no vectors yet (an ingest interrupted, or still running; the next ingest
    completes them), None for one without an embedder.
    ``vector_problem`` says why a collection bound to an embedder cannot use its vectors
    now (the vector table missing, unreadable, another width, short of rows): the
    check a search makes before it degrades to BM25 (``vector_problem()``), so dense
    and hybrid searches answer from BM25 until the next ingest rebuilds them. None
    when the vectors are usable, or the collection has none. The collection's
    ``status`` stays ``"ok"``: its text and counts are sound.
    ``vector_cache`` is set for vectors on object storage searched through this host's
    cache (adr/0061-vector-cache.md): ``"cached"``, ``"on"`` before this process's
    first search, or ``"uncached: <why>"`` when searches read the object store (the
    version's files exceed the cache's budget, say); None otherwise.

    Under a registry's clearance the counts are those of the documents (and
    versions) it admits, as for a collection holding nothing else; ``generation``
    and ``size_bytes``, figures of the whole store that move with documents the
    clearance hides, are None.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    documents: int | None
    chunks: int | None
    generation: int | None
    embedding: EmbeddingIdentity | None
    status: Literal["ok", "damaged"] = "ok"
    error: str | None = None
    analyzer: str | None = None
    size_bytes: int | None = None
    base_dir: str | None = None
    past_versions: int | None = None
    vectors_missing: int | None = None
    vector_cache: str | None = None
    vector_problem: str | None = None


@dataclass(eq=False)
class _Entry:
    collection: Collection
    generation: int
    uid: str  # tells a collection from one made later under its name
    users: int = 0
    retired: bool = False


class CollectionRegistry:
    """Collections of one index directory by name, for concurrent requests.

    ``embedder_for`` builds the embedder a bound collection recorded; the
    default handles sentence-transformers models, like the CLI. Embedders are
    shared between collections bound to the same model, so a model loads once.
    ``rewriter`` (a glossary, say) serves every collection's ``search(rewrite=True)``.
    """

    def __init__(
        self,
        index_dir: str | Path | None = None,
        *,
        metadata_url: str | None = None,
        storage_uri: str | Path | None = None,
        storage_options: Mapping[str, str] | None = None,
        base_dir: str | Path | None = None,
        retrieval: RetrievalConfig | None = None,
        reranker: RerankerProtocol | None = None,
        embedder_for: EmbedderFactory = embedder_for_manifest,
        clearance: str | None = None,
        rewriter: QueryRewriterProtocol | None = None,
    ) -> None:
        # Every collection is opened with it: nothing above it leaves the server.
        self.clearance = check_clearance(clearance)
        # Validated now, with a placeholder name: a bad URL fails at start-up.
        self._where = StoreLocation.resolve(
            "default",
            index_dir=index_dir,
            metadata_url=metadata_url,
            storage_uri=storage_uri,
            storage_options=storage_options,
        )
        self.index_dir = self._where.index_dir
        self.base_dir = Path(os.path.realpath(base_dir)) if base_dir is not None else None
        self.reranker = reranker
        self.rewriter = rewriter
        self._retrieval = retrieval
        self._embedder_for = embedder_for
        self._embedders: dict[tuple[str, str], EmbeddingProtocol | None] = {}
        self._embedder_lock = threading.Lock()
        self._entries: dict[str, _Entry] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        self._closed = False

    @property
    def where(self) -> str:
        """What the collections live in, safe to print (no password)."""
        return self._where.describe_root()

    def location(self, name: str) -> StoreLocation:
        return self._where.with_name(name)

    async def names(self) -> list[str]:
        """Names of the collections in the index directory or database, sorted."""
        return await self._where.list_collections()

    async def describe_each(self, names: list[str], *, full: bool = False) -> list[CollectionInfo]:
        """``describe`` of each of ``names`` in turn, leaving out one dropped meanwhile."""
        infos = []
        for name in names:
            try:
                infos.append(await self.describe(name, full=full))
            except CollectionNotFoundError:
                continue
        return infos

    async def describe(self, name: str, *, full: bool = False) -> CollectionInfo:
        """Sizes and embedding identity of ``name``, read without opening it for search
        (so no embedding model is loaded).

        ``CollectionNotFoundError`` when there is no collection ``name``. One that exists but
        cannot be read (a damaged file, a schema of another version) is described
        as ``status="damaged"`` with the reason, so a listing still shows the rest.
        """
        await self._check_known(name)
        try:
            return await self._read_info_again(name, full)
        except CollectionNotFoundError:
            raise  # dropped as it was read
        except Exception as exc:
            if isinstance(exc, GroundkitError):
                reason = " ".join(str(exc).split())
            else:  # its message may quote stored values: the type name only
                reason = f"unexpected {kind_of(exc)}"
                logger.debug("describing collection %s failed", name, exc_info=True)
            # "Damaged" is the listing's status; the reason may be a read-only directory.
            logger.warning("collection %s cannot be read (%s)", name, kind_of(exc))
            return CollectionInfo(
                name=name,
                documents=None,
                chunks=None,
                generation=None,
                embedding=None,
                status="damaged",
                error=reason,
            )

    async def _read_info_again(self, name: str, full: bool) -> CollectionInfo:
        """``_read_info``, read again after a pause when it fails: a collection that
        another process is dropping or making again can look damaged for a moment (its
        write-ahead log removed before its file), and is then gone or whole. Damage
        stays, and is reported from the last read."""
        for attempt in range(_REREADS):
            try:
                return await self._read_info(name, full)
            except StorageError:
                await asyncio.sleep(_REREAD_PAUSE_S * (attempt + 1))
                await self._check_known(name)  # gone for good: CollectionNotFoundError
        return await self._read_info(name, full)

    async def _read_info(self, name: str, full: bool) -> CollectionInfo:
        location = self.location(name)
        stores = await location.open(create=False)
        try:
            store = stores.metadata
            manifest = await store.read_manifest()
            base: str | None = None
            past: int | None = None
            generation: int | None = None
            size: int | None = None
            if self.clearance is None:
                documents, chunks = len(await store.document_ids()), await store.chunk_count()
                generation, size = await store.generation(), await location.disk_usage()
                if full:
                    past = 0
                    async for record in store.iter_documents():
                        past += record.past_versions
            else:
                documents, chunks, versions = _admitted(await store.chunk_owners(), self.clearance)
                past = versions if full else None
            if full:
                stored = await store.get_base_dir()
                if self.base_dir is not None:
                    base = str(self.base_dir)
                elif stored is not None:
                    root = location.index_dir
                    base = os.path.realpath(stored if root is None else root / stored)
            return CollectionInfo(
                name=name,
                documents=documents,
                chunks=chunks,
                generation=generation,
                embedding=manifest.identity if manifest is not None else None,
                analyzer=await store.get_analyzer(),
                size_bytes=size,
                base_dir=base,
                past_versions=past,
                # A figure of the whole store: withheld under a clearance, as the others.
                vectors_missing=(
                    await vectors_missing(store)
                    if manifest is not None and self.clearance is None
                    else None
                ),
                vector_cache=self._cache_state(name, location) if manifest is not None else None,
                vector_problem=(
                    await self._vector_problem(stores, manifest) if manifest is not None else None
                ),
            )
        finally:
            await stores.close()

    async def _vector_problem(
        self, stores: CollectionStores, manifest: CollectionManifest
    ) -> str | None:
        """What a search would find wrong with the collection's vectors, or None: the check
        a search makes first (``vector_problem``: the table's damage flag, its owner stamp
        and width, one count on each side), then one read of the ``document_id`` column,
        which fails on the damage a search meets only when it reads the rows. A
        whole-store figure: under a clearance, only that something is wrong."""
        try:
            vectors = await stores.open_vectors(manifest.identity.dimensions)
            problem = await vector_problem(stores.metadata, vectors)
            if problem is None:
                # Data files deleted or cut short pass the counts (they come from the
                # table's manifest): one column read in full finds them, as a search would.
                try:
                    await vectors.document_ids()
                except StorageError as exc:
                    return f"the vector table's rows cannot be read ({exc})"
        except ConfigurationError:
            return None  # a shared collection without storage_uri: no vectors to check
        except StorageError as exc:
            problem = str(exc)
        if problem is None or self.clearance is None:
            return problem
        return "the vectors cannot serve dense search now; the next ingest rebuilds them"

    def _cache_state(self, name: str, location: StoreLocation) -> str | None:
        """The open collection's vector cache state, else whether searches would use one."""
        entry = self._entries.get(name)
        state = getattr(entry.collection.vector_store if entry else None, "cache_state", None)
        if isinstance(state, str):
            return state
        cached = location.vector_cache is not None and isinstance(location.storage_root, str)
        return "on" if cached else None

    @asynccontextmanager
    async def lease(self, name: str) -> AsyncIterator[Collection]:
        """The collection ``name`` for the duration of one request.

        Raises ``StorageError`` naming ``name`` when there is no such collection.
        """
        entry = await self._acquire(name)
        try:
            yield entry.collection
        finally:
            await self._release(entry)

    async def manifest(self, name: str) -> CollectionManifest | None:
        """The embedding identity ``name`` is bound to, if any."""
        async with self.lease(name) as collection:
            return await collection.store.read_manifest()

    async def close(self) -> None:
        """Close every open collection; requests still running keep theirs until they end."""
        self._closed = True
        entries = list(self._entries.values())
        self._entries.clear()
        for entry in entries:
            entry.retired = True
            if entry.users == 0:
                await self._close_entry(entry)

    async def _acquire(self, name: str) -> _Entry:
        """An entry fit for the next request, counted as in use (see ``_release``)."""
        if self._closed:
            raise StorageError("the collection registry is closed")
        entry = self._entries.get(name)
        if entry is not None and await self._use_if_fresh(entry):
            return entry
        async with self._locks.setdefault(name, asyncio.Lock()):
            entry = self._entries.get(name)
            if entry is not None:
                if await self._use_if_fresh(entry):
                    return entry
                del self._entries[name]
                entry.retired = True
                if entry.users == 0:
                    await self._close_entry(entry)
            entry = await self._open(name)
            entry.users += 1
            self._entries[name] = entry
            return entry

    async def _release(self, entry: _Entry) -> None:
        entry.users -= 1
        if entry.retired and entry.users == 0:
            await self._close_entry(entry)

    async def _use_if_fresh(self, entry: _Entry) -> bool:
        """Count ``entry`` as in use if it can serve the next request as it is.

        Counted before the check awaits anything, so a concurrent request that
        retires the entry cannot close it underneath this one.
        """
        entry.users += 1
        try:
            fresh = await self._fresh(entry)
        except BaseException:
            await self._release(entry)
            raise
        if not fresh:
            await self._release(entry)
        return fresh

    async def _fresh(self, entry: _Entry) -> bool:
        collection = entry.collection
        if await self._replaced(entry):
            return False
        generation = await collection.generation()
        if generation == entry.generation:
            return True
        if collection.embedder is None and await collection.store.read_manifest() is not None:
            return False  # bound to an embedder since it was opened
        entry.generation = generation  # the Collection catches up by itself
        return True

    async def _replaced(self, entry: _Entry) -> bool:
        """Whether the collection was dropped (and perhaps made again under its name)
        since ``entry`` opened it: its store would go on reading what was removed.
        A local file is compared by one stat; a shared store by its uid (one read)."""
        store = entry.collection.store
        if isinstance(store, SQLiteMetadataStore):
            return store.replaced()
        try:
            return await store.collection_uid() != entry.uid
        except StorageError:  # its tables are gone: reopening names what is there now
            return True

    async def _check_known(self, name: str) -> None:
        names = await self.names()
        if name not in names:
            have = ", ".join(names) if names else "none"
            raise CollectionNotFoundError(f"unknown collection {name!r} (this server has: {have})")

    async def _open(self, name: str) -> _Entry:
        await self._check_known(name)
        collection = await Collection.open(
            location=self.location(name),
            create=False,
            base_dir=self.base_dir,
            retrieval=self._retrieval,
            embedder_for=self._embedder,
            reranker=self.reranker,
            clearance=self.clearance,
            rewriter=self.rewriter,
        )
        logger.info("opened collection %s (dense: %s)", name, collection.embedder is not None)
        try:
            uid = await collection.store.collection_uid()
        except BaseException:
            await collection.close()
            raise
        return _Entry(collection, collection.opened_generation, uid)

    def _embedder(self, manifest: CollectionManifest) -> EmbeddingProtocol | None:
        """One embedder per recorded model, shared by every collection bound to it
        (runs in a worker thread, so a model loads off the event loop)."""
        key = (manifest.provider, manifest.model_name)
        with self._embedder_lock:
            if key not in self._embedders:
                self._embedders[key] = self._embedder_for(manifest)
            return self._embedders[key]

    async def _close_entry(self, entry: _Entry) -> None:
        try:
            await entry.collection.close()
        except Exception:  # best effort: the replacement is already open
            logger.debug("closing a replaced collection failed", exc_info=True)


def _admitted(owners: ChunkOwners, clearance: str) -> tuple[int, int, int]:
    """Current documents, their chunks, and past versions that ``clearance`` admits
    (each version is judged on its own fields, as searches of the past judge it)."""
    n = len(owners.fields)
    admitted = np.fromiter((visible(f, clearance) for f in owners.fields), np.bool_, count=n)
    current = (
        np.ones(n, dtype=np.bool_)
        if owners.current is None
        else np.asarray(owners.current, dtype=np.bool_)
    )
    shown = admitted & current
    chunks = int(np.count_nonzero(shown[owners.owners])) if owners.owners.size else 0
    return int(np.count_nonzero(shown)), chunks, int(np.count_nonzero(admitted & ~current))
