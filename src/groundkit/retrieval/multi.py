"""Searching several collections at once, fused by reciprocal rank.

Scores of different collections are not comparable (BM25 statistics differ per
collection), so only ranks are fused. Every collection is searched with the
same arguments and its own clearance; one that fails is listed in the
response's ``failures`` and the rest still answer (adr/0022-multi-collection.md).
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Sequence
from typing import Any, Protocol, Unpack

from groundkit.config import RetrievalConfig
from groundkit.contracts import (
    CollectionFailure,
    MultiSearchResponse,
    RetrievalResult,
    SearchResponse,
    with_fused,
)
from groundkit.errors import GroundkitError, InvalidQueryError, RetrievalError, kind_of
from groundkit.retrieval._tasks import all_or_nothing
from groundkit.retrieval.fusion import reciprocal_rank_fusion
from groundkit.retrieval.request import SearchOptions, SearchRequest

__all__ = ["SearchableCollection", "search_collections"]


def _failed(name: str, exc: GroundkitError) -> CollectionFailure:
    return CollectionFailure(collection=name, error=kind_of(exc), detail=str(exc))


class SearchableCollection(Protocol):
    """What multi-collection search needs of a collection (``Collection`` has it)."""

    name: str

    async def search(
        self,
        query: str | SearchRequest,
        top_k: int | None = None,
        **options: Unpack[SearchOptions],
    ) -> SearchResponse: ...


async def search_collections(
    collections: Sequence[SearchableCollection],
    query: str | SearchRequest,
    top_k: int | None = None,
    *,
    rrf_k: int = 60,
    **options: Unpack[SearchOptions],
) -> MultiSearchResponse:
    """Search every collection and fuse the rankings; each result names its collection.

    ``query`` is a string with the options as keywords, or a ``SearchRequest``; the
    options that rework one collection's ranking (``SearchRequest.SINGLE_COLLECTION``:
    expand, mmr, reorder, rewrite) are refused. ``as_of`` searches each collection as
    it stood then (bm25 only, as for ``Collection.search``) and is echoed in
    ``metadata["as_of"]``.

    Bad arguments raise ``RetrievalError`` before any collection is searched.
    A collection raising a groundkit error is reported in ``failures``; if
    every collection fails, ``RetrievalError`` lists them all. Ties in the
    fused order break on ``(collection, chunk_id)``, so the order is the same
    on every run.
    """
    started = time.perf_counter()
    if isinstance(collections, str | bytes) or not isinstance(collections, Sequence):
        raise InvalidQueryError(
            f"search_collections takes a list of collections, not {type(collections).__name__}"
        )
    for position, collection in enumerate(collections):
        if not isinstance(getattr(collection, "name", None), str) or not callable(
            getattr(collection, "search", None)
        ):
            raise InvalidQueryError(
                f"collections[{position}] is a {type(collection).__name__}, not a collection "
                "(an open groundkit.Collection)"
            )
        if hasattr(collection, "aio") and not inspect.iscoroutinefunction(collection.search):
            # A groundkit.sync collection: its blocking search would run on this loop.
            raise InvalidQueryError(
                f"collections[{position}] is a groundkit.sync collection; pass its .aio "
                "(the async Collection) here, or call groundkit.sync.search_collections"
            )
    if isinstance(rrf_k, bool) or not isinstance(rrf_k, int) or rrf_k < 1:
        raise InvalidQueryError(f"rrf_k must be a positive integer, got {rrf_k!r}")
    names = [c.name for c in collections]
    if not names:
        raise InvalidQueryError("search_collections needs at least one collection")
    if len(set(names)) != len(names):
        raise InvalidQueryError(f"collections are named more than once: {sorted(names)}")
    # Every option is checked here: a bad one is the caller's, not a collection's.
    request = SearchRequest.of(query, top_k, **options)
    request.check_single_collection()
    k = request.k(RetrievalConfig())
    each = request.replace(top_k=k)
    query, mode, as_of = request.query, request.mode, request.as_of

    async def one(collection: SearchableCollection) -> SearchResponse | CollectionFailure:
        try:
            pending: Any = collection.search(each)
        except GroundkitError as exc:
            return _failed(collection.name, exc)
        if not inspect.isawaitable(pending):
            # A blocking search, run on the event loop: the caller's mistake, raised.
            raise InvalidQueryError(
                f"collection {collection.name!r}: search returned a "
                f"{type(pending).__name__}, not an awaitable (search_collections takes "
                "async collections)"
            )
        try:
            answer: SearchResponse = await pending
        except GroundkitError as exc:
            return _failed(collection.name, exc)
        return answer

    # A failure that is not groundkit's (a bug) cancels the other searches rather
    # than leaving them running after this call has raised.
    answers = await all_or_nothing(*(one(c) for c in collections))
    failures = [a for a in answers if isinstance(a, CollectionFailure)]
    if len(failures) == len(collections):
        listed = "; ".join(f"{f.collection}: {f.error}: {f.detail}" for f in failures)
        raise RetrievalError(f"no collection could be searched ({listed})")
    by_key: dict[tuple[str, str], RetrievalResult] = {}
    rankings: list[list[tuple[str, str]]] = []
    per_collection: dict[str, Any] = {}
    for name, answer in zip(names, answers, strict=True):
        if isinstance(answer, CollectionFailure):
            continue
        ranking = [(name, r.chunk_id) for r in answer.results]
        by_key.update(zip(ranking, answer.results, strict=True))
        rankings.append(ranking)
        per_collection[name] = {
            "total_results": answer.total_results,
            "stage": answer.metadata.get("stage"),
            "stale_dropped": answer.metadata.get("stale_dropped", 0),
        }
        if answer.metadata.get("degraded"):
            per_collection[name]["degraded"] = answer.metadata["degraded"]
    fused = reciprocal_rank_fusion(rankings, k=rrf_k)[:k]
    results = [
        by_key[hit.key].model_copy(
            update={
                "score": hit.score,
                "collection": hit.key[0],
                "scores": with_fused(by_key[hit.key].scores, hit.score),
            }
        )
        for hit in fused
    ]
    return MultiSearchResponse(
        query=query,
        mode=mode,
        collections=names,
        results=results,
        total_results=len(results),
        failures=failures,
        metadata={
            "fusion": "rrf",
            "rrf_k": rrf_k,
            "latency_ms": round((time.perf_counter() - started) * 1000, 3),
            "per_collection": per_collection,
            **({} if as_of is None else {"as_of": as_of.isoformat()}),
        },
    )
