"""The inspector's routes: search, a result in its source, a PDF page, an answer check.

Each request leases its collection from a ``CollectionRegistry`` (as ``grk serve``
does), so the pages show what the index holds now and a re-ingest never pulls a store
from under a request. Verdicts come from the collection's own checks (``verify``,
``fetch_chunk``, ``verify_answer``); the page never decides one itself.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import cast
from urllib.parse import parse_qsl

from starlette.applications import Starlette
from starlette.requests import ClientDisconnect, Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import Route

from groundkit.collection import Collection
from groundkit.contracts import (
    PDF_EXTRACTOR_PREFIXES,
    Citation,
    FetchResult,
    RetrievalResult,
    SearchMode,
    fields_of,
)
from groundkit.errors import (
    ChunkNotFoundError,
    CollectionNotFoundError,
    GroundkitError,
    StorageError,
)
from groundkit.extraction.pdf_pages import PageImage, render_pdf_page
from groundkit.retrieval.sensitivity import visible
from groundkit.service.collections import CollectionRegistry
from groundkit.service.inspector import pages
from groundkit.service.inspector.page_cache import PageCache
from groundkit.utils.file_reads import read_regular_file
from groundkit.utils.path_safety import PathEscapeError, ensure_within

__all__ = ["PAGE_SCALE", "build_app"]

logger = logging.getLogger("groundkit.service")

# Pixels per PDF point in a rendered page (108 dpi): legible, and a letter page stays
# under a megapixel.
PAGE_SCALE = 1.5
# Source text shown on either side of a span.
CONTEXT_CHARS = 4000
# Pages drawn for one citation (a span crossing more pages shows the first ones).
MAX_SHEETS = 4
MAX_TOP_K = 50
# An answer form's body, at most.
MAX_FORM_BYTES = 256 * 1024
MAX_ANSWER_IDS = 100

Handler = Callable[[Request], Awaitable[Response]]


class _NotFound(Exception):
    """A path that names nothing the reader may see (404, same text either way)."""


class Inspector:
    """The handlers, over one registry and the collections it may show."""

    def __init__(
        self,
        registry: CollectionRegistry,
        *,
        collections: Sequence[str] | None = None,
        scale: float = PAGE_SCALE,
        cache: PageCache | None = None,
    ) -> None:
        self.registry = registry
        self.only = frozenset(collections) if collections else None
        self.scale = scale
        self.cache = cache if cache is not None else PageCache()

    async def names(self) -> list[str]:
        found = await self.registry.names()
        return [n for n in found if self.only is None or n in self.only]

    async def _known(self, request: Request) -> str:
        name = str(request.path_params["collection"])
        if name not in await self.names():
            raise _NotFound(f"no collection {name!r}")
        return name

    # --- pages -------------------------------------------------------------------

    async def home(self, request: Request) -> Response:
        names = await self.names()
        if len(names) == 1:
            return RedirectResponse(pages.col_url(names[0]), status_code=303)
        return _html(pages.collections_page(names, self.registry.where))

    async def search(self, request: Request) -> Response:
        name = await self._known(request)
        params = request.query_params
        query = params.get("q", "")
        mode = params.get("mode", "bm25")
        try:
            top_k = int(params.get("top_k", "10"))
        except ValueError:
            top_k = -1
        if mode not in pages.MODES or not 1 <= top_k <= MAX_TOP_K:
            message = f"mode is one of {', '.join(pages.MODES)}; top k from 1 to {MAX_TOP_K}"
            body = pages.search_page(name, query, "bm25", 10, None, message)
            return _html(body, 400)
        if not query.strip():
            return _html(pages.search_page(name, query, mode, top_k, None))
        async with self.registry.lease(name) as col:
            try:
                response = await col.search(query, top_k=top_k, mode=cast(SearchMode, mode))
            except GroundkitError as exc:
                return _html(pages.search_page(name, query, mode, top_k, None, str(exc)), 400)
            rows = await _checked(col, response.results)
        return _html(pages.search_page(name, query, mode, top_k, rows))

    async def chunk(self, request: Request) -> Response:
        name = await self._known(request)
        chunk_id = str(request.path_params["chunk_id"])
        async with self.registry.lease(name) as col:
            try:
                fetched, text = await col.fetch_in_source(chunk_id)
            except ChunkNotFoundError:
                raise _NotFound(f"no chunk {chunk_id!r}") from None
            source, source_error = _source_view(fetched, text)
            sheets, note = await self._sheets(col, name, fetched)
        return _html(pages.result_page(name, fetched, source, source_error, sheets, note))

    async def page(self, request: Request) -> Response:
        name = await self._known(request)
        document_id = str(request.path_params["document_id"])
        try:
            number = int(str(request.path_params["number"]))
        except ValueError:
            raise _NotFound("no such page") from None
        async with self.registry.lease(name) as col:
            found = await col.store.find_documents(document_ids=[document_id])
            record = next((r for r in found if r.document_id == document_id), None)
            if record is None or not visible(fields_of(record.metadata), col.clearance):
                raise _NotFound(f"no document {document_id!r}")
            if not _is_pdf(record.extractor):
                raise _NotFound("not a PDF document")
            try:
                image = await self._render(col, name, document_id, record.source, number)
            except GroundkitError as exc:
                raise _NotFound(str(exc)) from None
        return Response(
            image.png,
            media_type="image/png",
            # The image shows the page's text: corpus text, so not kept by the browser.
            headers={"cache-control": "no-store"},
        )

    async def answer(self, request: Request) -> Response:
        name = await self._known(request)
        if request.method in ("GET", "HEAD"):  # Starlette answers HEAD with GET's route
            ids = request.query_params.get("ids", "")
            return _html(pages.answer_page(name, "", ids, None))
        form = await _form(request)
        answer, ids_text = form.get("answer", ""), form.get("ids", "")
        chunk_ids = [line.strip() for line in ids_text.splitlines() if line.strip()]
        if not answer.strip() or not chunk_ids or len(chunk_ids) > MAX_ANSWER_IDS:
            message = f"give an answer and from 1 to {MAX_ANSWER_IDS} chunk ids, one a line"
            return _html(pages.answer_page(name, answer, ids_text, None, message), 400)
        async with self.registry.lease(name) as col:
            try:
                report = await col.verify_answer(answer, chunk_ids)
            except GroundkitError as exc:
                return _html(pages.answer_page(name, answer, ids_text, None, str(exc)), 400)
        return _html(pages.answer_page(name, answer, ids_text, report))

    async def css(self, request: Request) -> Response:
        return Response(
            pages.CSS,
            media_type="text/css",
            headers={"cache-control": "private, max-age=300"},
        )

    # --- PDF pages ---------------------------------------------------------------

    async def _sheets(
        self, col: Collection, name: str, fetched: FetchResult
    ) -> tuple[list[pages.SheetView], str | None]:
        """The cited pages rendered, with boxes where the span is (only while the
        source still reads as indexed: boxes over a changed page would mislead)."""
        citation = fetched.citation
        if not _is_pdf(citation.extractor) or citation.page is None:
            return [], None
        last = citation.end_page or citation.page
        numbers = list(range(citation.page, min(last, citation.page + MAX_SHEETS - 1) + 1))
        note: str | None = None
        if not citation.rects:
            note = "This citation carries no page rectangles (indexed without page geometry)."
        elif fetched.verification != "verified":
            note = f"No boxes drawn: the source reads {fetched.verification} now."
        sheets: list[pages.SheetView] = []
        for number in numbers:
            try:
                image = await self._render(col, name, citation.document_id, citation.source, number)
            except GroundkitError as exc:
                return sheets, f"The page cannot be shown: {exc}"
            boxes: tuple[pages.Box, ...] = ()
            if fetched.verification == "verified":
                boxes = _boxes(citation, number, image)
            src = pages.col_url(name, "page", citation.document_id, f"{number}.png")
            sheets.append(pages.SheetView(number, src, image.width, image.height, boxes))
        return sheets, note

    async def _render(
        self, col: Collection, name: str, document_id: str, source: str, number: int
    ) -> PageImage:
        path = _source_path(col, source)
        try:
            stat = await asyncio.to_thread(os.stat, path)
        except OSError:
            raise StorageError(f"the PDF {source!r} is not on this host") from None
        key = (name, document_id, str(path), stat.st_mtime_ns, stat.st_size, number, self.scale)
        cached = self.cache.get(key)
        if cached is not None:
            return cached
        data = await asyncio.to_thread(_read_pdf, path, source, col.max_file_bytes)
        image = await asyncio.to_thread(render_pdf_page, data, number, self.scale)
        self.cache.put(key, image)
        return image


def _boxes(citation: Citation, number: int, image: PageImage) -> tuple[pages.Box, ...]:
    out = []
    for rect in citation.rects:
        if rect.page != number:
            continue
        corners = (rect.x0, rect.y0, rect.x1, rect.y1)
        out.append(pages.Box(rect=corners, pixels=image.frame.box(*corners)))
    return tuple(out)


def _is_pdf(extractor: str | None) -> bool:
    """Whether a document was read as a PDF (whatever its file name ends with)."""
    return (extractor or "").startswith(PDF_EXTRACTOR_PREFIXES)


def _source_path(col: Collection, source: str) -> Path:
    try:
        return ensure_within(source, Path(col.base_dir))
    except PathEscapeError as exc:
        raise StorageError(f"refused: {exc}") from None


def _read_pdf(path: Path, source: str, max_bytes: int | None) -> bytes:
    """The PDF's bytes, read as verification reads them (regular file, the collection's cap)."""
    try:
        return read_regular_file(path, max_bytes, follow_symlinks=False)
    except OSError as exc:
        raise StorageError(f"cannot read {source!r}: {exc.strerror or exc}") from None


async def _checked(col: Collection, results: Sequence[RetrievalResult]) -> list[pages.ResultRow]:
    """Each result with its verdict, each source read once; a result whose check itself
    fails (not a verdict: an error) shows that error instead."""
    try:
        verdicts = await col.verify_each(results)
    except GroundkitError:
        rows = []
        for result in results:
            try:
                rows.append(pages.ResultRow(result, await col.verify(result)))
            except GroundkitError as exc:
                rows.append(pages.ResultRow(result, None, str(exc)))
        return rows
    return [pages.ResultRow(r, v) for r, v in zip(results, verdicts, strict=True)]


def _source_view(
    fetched: FetchResult, text: str | None
) -> tuple[pages.SourceView | None, str | None]:
    """The source around the span as it read for the verdict: the cited span when it
    verifies, its new place when it moved, the closest passage when it drifted."""
    if text is None:
        return None, fetched.detail
    citation = fetched.citation
    mark = "span"
    start, end = citation.start_offset, citation.end_offset
    if fetched.verification != "verified":
        if fetched.current_start_offset is None or fetched.current_end_offset is None:
            return None, fetched.detail
        start, end = fetched.current_start_offset, fetched.current_end_offset
        mark = "span" if fetched.verification == "moved" else "closest"
    if end > len(text):
        return None, fetched.detail
    first, last = max(0, start - CONTEXT_CHARS), min(len(text), end + CONTEXT_CHARS)
    view = pages.SourceView(
        before=text[first:start],
        span=text[start:end],
        after=text[end:last],
        clipped_before=first > 0,
        clipped_after=last < len(text),
        mark=mark,
    )
    return view, None


async def _form(request: Request) -> dict[str, str]:
    """A url-encoded form body, capped; the first value of each name."""
    body = b""
    async for piece in request.stream():
        body += piece
        if len(body) > MAX_FORM_BYTES:
            raise _TooLarge
    out: dict[str, str] = {}
    for key, value in parse_qsl(body.decode("utf-8", "replace"), keep_blank_values=True):
        out.setdefault(key, value)
    return out


class _TooLarge(Exception):
    """A request body over ``MAX_FORM_BYTES``."""


def _html(body: str, status: int = 200) -> HTMLResponse:
    # Pages hold corpus text: never kept by a shared cache or the browser's disk.
    return HTMLResponse(body, status_code=status, headers={"cache-control": "no-store"})


def _guarded(handler: Handler) -> Handler:
    """Errors as pages: a 404 that names nothing, a 413, and a 500 that says no more
    than its type (a message may quote stored values; the log has the rest)."""

    async def run(request: Request) -> Response:
        try:
            return await handler(request)
        except _NotFound as exc:
            return _html(pages.error_page("Not found", str(exc)), 404)
        except _TooLarge:
            return _html(pages.error_page("Too large", "the form is too large"), 413)
        except ClientDisconnect:
            # The browser went away mid-request (a tab closed): nothing failed here, and
            # there is no one to answer.
            logger.debug("inspector client left before its request was read")
            return Response(status_code=499)
        except CollectionNotFoundError as exc:  # dropped since the name was checked
            return _html(pages.error_page("Not found", str(exc)), 404)
        except GroundkitError as exc:
            return _html(pages.error_page("Error", str(exc)), 400)
        except Exception as exc:
            logger.exception("inspector request failed")
            return _html(pages.error_page("Error", f"unexpected {type(exc).__name__}"), 500)

    return run


def build_app(
    registry: CollectionRegistry,
    *,
    collections: Sequence[str] | None = None,
    scale: float = PAGE_SCALE,
) -> Starlette:
    """The inspector as an ASGI application (without the token gate: ``serve_inspector``
    adds it). ``collections`` limits what it shows (default: every one)."""
    inspector = Inspector(registry, collections=collections, scale=scale)
    routes = [
        Route("/", _guarded(inspector.home)),
        Route("/static/inspector.css", _guarded(inspector.css)),
        Route("/c/{collection}/", _guarded(inspector.search)),
        Route("/c/{collection}/chunk/{chunk_id}", _guarded(inspector.chunk)),
        Route(
            "/c/{collection}/page/{document_id}/{number}.png",
            _guarded(inspector.page),
        ),
        Route("/c/{collection}/answer", _guarded(inspector.answer), methods=["GET", "POST"]),
    ]

    async def not_found(request: Request, exc: Exception) -> Response:
        return _html(pages.error_page("Not found", "nothing here"), 404)

    return Starlette(routes=routes, exception_handlers={404: not_found, 405: not_found})
