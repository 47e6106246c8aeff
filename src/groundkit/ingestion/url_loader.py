"""Fetch one http(s) URL into a ``snapshot`` document, refusing anything unsafe.

Every check in utils/url_safety.py runs before a request is made. The
connection goes to the address that was checked (the name travels in the Host
header and, for https, in SNI and certificate checking), so DNS rebinding has
no second answer to use. Redirects are errors, the body is capped in bytes
(counted after every content coding is undone, in bounded steps) and the whole
fetch in time. The body is routed by Content-Type to the HTML or PDF
extractor or kept as text; the resulting text is the document's content and,
written by the Indexer, its snapshot.
"""

from __future__ import annotations

import asyncio
import importlib.metadata
import re
import ssl
from dataclasses import dataclass
from typing import Any, Literal

import httpx

from groundkit.config import DEFAULT_EXTRACTION_CACHE_BYTES
from groundkit.contracts import Document
from groundkit.errors import IngestionError
from groundkit.extraction import (
    Extraction,
    ExtractorProtocol,
    decode_body,
    html_extractor,
    main_content_extractor,
)
from groundkit.extraction.cache import cached_extraction, extraction_cache
from groundkit.extraction.pdf_ocr import OcrMode
from groundkit.ingestion.content_coding import (
    ACCEPT_ENCODING,
    BodyDecoder,
    encoded_limit,
    parse_codings,
)
from groundkit.ingestion.extracted import (
    extracted_document_parts,
    pdf_extractor_with_ocr,
)
from groundkit.ingestion.outline import markdown_headings, rst_headings
from groundkit.storage.names import document_id_for
from groundkit.utils.url_safety import (
    PUBLIC_ONLY,
    AddressPolicy,
    CheckedURL,
    Resolver,
    check_url,
    resolve_checked,
)

__all__ = ["DEFAULT_URL_MAX_BYTES", "DEFAULT_URL_TIMEOUT", "UrlLoader"]

DEFAULT_URL_MAX_BYTES = 20 * 1024 * 1024
DEFAULT_URL_TIMEOUT = 30.0

_HTML_TYPES = frozenset({"text/html", "application/xhtml+xml"})
_PDF_TYPES = frozenset({"application/pdf"})
# Text bodies whose headings make the document's outline.
_OUTLINED_TEXT = {
    "text/markdown": markdown_headings,
    "text/x-markdown": markdown_headings,
    "text/x-rst": rst_headings,
}
_ACCEPT = "text/html, application/xhtml+xml, application/pdf, text/plain;q=0.9, text/*;q=0.8"


def _user_agent() -> str:
    try:
        version = importlib.metadata.version("groundkit")
    except importlib.metadata.PackageNotFoundError:
        version = "unknown"
    return f"groundkit/{version} (+citation snapshot)"


@dataclass(frozen=True)
class _Body:
    data: bytes
    media_type: str
    charset: str | None


_MEDIA_TYPE = re.compile(r"[!#$%&'*+.^_`|~0-9a-z-]+/[!#$%&'*+.^_`|~0-9a-z-]+")


def _media_type(header: str | None) -> tuple[str, str | None]:
    if not header:
        return "", None
    parts = [p.strip() for p in header.split(";")]
    charset = None
    for param in parts[1:]:
        name, _, value = param.partition("=")
        if name.strip().lower() == "charset":
            charset = value.strip().strip("\"'") or None
    return parts[0].lower(), charset


def _content_type(values: list[str]) -> tuple[str, str | None]:
    """The media type and charset of a response's ``Content-Type`` headers, as the Fetch
    standard reads them: a header sent twice (or one listing several, comma-separated)
    is the last valid type, keeping a charset an earlier value of the same type gave.
    Read as one string, ``text/html, text/html`` named no type groundkit knows, and
    an HTML page was stored as plain text, markup and all."""
    chosen: tuple[str, str | None] = ("", None)
    for value in values:
        for item in value.split(","):
            media_type, charset = _media_type(item.strip())
            if not _MEDIA_TYPE.fullmatch(media_type) or media_type == "*/*":
                continue
            if media_type == chosen[0] and charset is None:
                charset = chosen[1]
            chosen = (media_type, charset)
    return chosen


def _why(exc: httpx.HTTPError) -> str:
    """What went wrong with a request; a connection reset carries no message of its own."""
    text = str(exc) or str(exc.__cause__ or exc.__context__ or "")
    if text:
        return f"{type(exc).__name__}: {text}"
    if isinstance(exc, httpx.ReadError | httpx.RemoteProtocolError):
        return f"{type(exc).__name__}: the server closed or reset the connection"
    return type(exc).__name__


def _status_hint(response: httpx.Response) -> str:
    """What a non-200 answer asks of the user, when its status says more than its number."""
    status = response.status_code
    if status == 304:
        # Not a redirect: the request was not conditional, so the server is confused.
        return " (Not Modified, to a request that was not conditional); not ingested"
    if status in (401, 403, 407):
        return "; URL ingest sends no credentials, so a page behind a login cannot be fetched"
    wait = response.headers.get("retry-after", "").strip()
    if status in (429, 503) and wait:
        shown = f"{wait} s" if wait.isdigit() else wait[:40]
        return f"; the server asks to wait {shown} (Retry-After) before ingesting it again"
    return ""


class UrlLoader:
    """Fetches http(s) URLs under an address policy (public addresses only by default).

    ``resolver`` replaces the system resolver (tests use a stub); ``verify`` is
    passed to httpx (an ``ssl.SSLContext`` to trust a private CA). Nothing is
    read from the environment: no proxy, no certificate override.
    ``read_fields`` takes document fields from an HTML page's title and meta
    tags or a PDF's document info. ``html_extractor="main-content"`` reads only a
    page's main content (trafilatura, the ``main-content`` extra). ``ocr`` and
    ``ocr_languages`` read a PDF's scanned pages as ``IngestConfig`` says.
    ``extraction_cache_bytes`` bounds the host's record of extractions (ADR 0088): a
    page or PDF fetched again with the same bytes is not extracted (or OCR'd) again;
    ``0`` keeps none.
    """

    def __init__(
        self,
        *,
        policy: AddressPolicy = PUBLIC_ONLY,
        resolver: Resolver | None = None,
        max_bytes: int = DEFAULT_URL_MAX_BYTES,
        timeout: float = DEFAULT_URL_TIMEOUT,
        verify: ssl.SSLContext | bool = True,
        read_fields: bool = True,
        html_extractor: Literal["full", "main-content"] = "full",
        ocr: OcrMode = "auto",
        ocr_languages: str = "eng",
        extraction_cache_bytes: int = DEFAULT_EXTRACTION_CACHE_BYTES,
    ) -> None:
        if max_bytes < 1 or not timeout > 0:
            raise ValueError("max_bytes and timeout must be positive")
        self.extraction_cache_bytes = extraction_cache_bytes
        self.read_fields = read_fields
        self.html_extractor = html_extractor
        self.ocr = ocr
        self.ocr_languages = ocr_languages
        self.policy = policy
        self.max_bytes = max_bytes
        self.timeout = timeout
        self._resolver = resolver
        self._verify = verify

    def check(self, url: str) -> CheckedURL:
        """The checks that need no network; ``IngestionError`` when the URL is refused."""
        return check_url(url)

    async def load(self, url: str) -> Document:
        """Fetch ``url`` into a ``snapshot`` document; ``IngestionError`` with a reason otherwise.

        A missing extra for the body's type raises ``ConfigurationError``.
        """
        checked = self.check(url)
        try:
            async with asyncio.timeout(self.timeout):
                body = await self._fetch(checked)
        except TimeoutError:
            raise IngestionError(
                f"{checked.source}: no complete answer within {self.timeout:g} s"
            ) from None
        extraction, extractor = await self._extract(checked, body)
        if not extraction.text.strip():
            unread = f" ({extraction.unread})" if extraction.unread else ""
            raise IngestionError(f"{checked.source}: the response has no text{unread}")
        metadata: dict[str, Any] = {"content_type": body.media_type}
        try:
            parts, notes = extracted_document_parts(extraction, read_fields=self.read_fields)
            metadata.update(parts)
        except IngestionError as exc:
            raise IngestionError(f"{checked.source}: {exc}") from None
        if extractor is not None:
            # Provenance only: a snapshot verifies against its stored copy,
            # never by running this extractor again.
            metadata["extracted_with"] = extraction.identity or extractor.identity
        return Document(
            document_id=document_id_for(checked.source),
            source=checked.source,
            content=extraction.text,
            source_class="snapshot",
            metadata=metadata,
            notes=notes,
        )

    async def _fetch(self, checked: CheckedURL) -> _Body:
        address = await resolve_checked(checked, self.policy, self._resolver)
        target = checked.url.copy_with(host=str(address).split("%", 1)[0])
        extensions: dict[str, Any] = {}
        if checked.url.scheme == "https" and checked.address is None:
            # TLS to the pinned address, but SNI and the certificate check use the name.
            extensions["sni_hostname"] = checked.host.rstrip(".")
        headers = {
            "Host": checked.host_header,
            "Accept": _ACCEPT,
            # Only what content_coding.py undoes in bounded steps.
            "Accept-Encoding": ACCEPT_ENCODING,
            "User-Agent": _user_agent(),
        }
        source = checked.source
        extensions["timeout"] = httpx.Timeout(self.timeout).as_dict()
        request = httpx.Request("GET", target, headers=headers, extensions=extensions)
        try:
            # The transport itself, not a Client: a Client logs every request's
            # full URL (query string included) at INFO on the "httpx" logger.
            # A transport never follows redirects.
            async with httpx.AsyncHTTPTransport(verify=self._verify, trust_env=False) as transport:
                response = await transport.handle_async_request(request)
                try:
                    return await self._read(source, response)
                finally:
                    await response.aclose()
        except httpx.HTTPError as exc:
            raise IngestionError(f"{source}: request failed ({_why(exc)})") from None
        except ssl.SSLError as exc:
            raise IngestionError(f"{source}: TLS failed ({exc})") from None

    async def _read(self, source: str, response: httpx.Response) -> _Body:
        status = response.status_code
        if 300 <= status < 400 and status != 304:
            raise IngestionError(
                f"{source}: answered with a redirect (HTTP {status}); redirects are never "
                "followed, ingest the final URL itself if you trust it"
            )
        if status != 200:
            raise IngestionError(f"{source}: answered HTTP {status}{_status_hint(response)}")
        media_type, charset = _content_type(response.headers.get_list("content-type"))
        if not (
            media_type in _HTML_TYPES or media_type in _PDF_TYPES or media_type.startswith("text/")
        ):
            shown = media_type or "none"
            raise IngestionError(
                f"{source}: content type {shown!r} is not HTML, PDF or text; not ingested"
            )
        try:
            codings = parse_codings(", ".join(response.headers.get_list("content-encoding")))
        except IngestionError as exc:
            raise IngestionError(f"{source}: {exc}") from None
        # The cap counts decoded bytes: an encoded body may announce a little more than
        # the text it holds (the decoder's own allowance). Under chunked transfer the
        # length is not the body's (RFC 9112, 6.3), and is not read.
        declared = response.headers.get("content-length")
        chunked = "chunked" in response.headers.get("transfer-encoding", "").lower()
        allowed = encoded_limit(self.max_bytes) if codings else self.max_bytes
        if declared is not None and declared.isdigit() and not chunked and int(declared) > allowed:
            raise IngestionError(
                f"{source}: announces {int(declared)} bytes, over the cap of {self.max_bytes}"
            )
        try:
            data = await self._decoded_body(response, codings)
        except IngestionError as exc:
            raise IngestionError(f"{source}: {exc}") from None
        return _Body(data, media_type, charset)

    async def _decoded_body(self, response: httpx.Response, codings: tuple[str, ...]) -> bytes:
        """The body with every content coding undone, in bounded steps (content_coding.py).

        The cap counts the bytes after the last layer, checked after each step of
        at most ``STEP`` bytes, so a stacked-gzip bomb stops one step past the cap.
        """
        decoder = BodyDecoder(codings, self.max_bytes)
        pieces: list[bytes] = []
        size = 0
        async for raw in response.aiter_raw():
            for piece in decoder.feed(raw):
                size += len(piece)
                if size > self.max_bytes:
                    raise IngestionError(f"body exceeds the cap of {self.max_bytes} bytes")
                pieces.append(piece)
        decoder.close()
        return b"".join(pieces)

    async def _extract(
        self, checked: CheckedURL, body: _Body
    ) -> tuple[Extraction, ExtractorProtocol | None]:
        if body.media_type not in _PDF_TYPES:
            _refuse_binary(checked.source, body)
        extractor: ExtractorProtocol | None = None
        if body.media_type in _HTML_TYPES:
            extractor = (
                main_content_extractor()
                if self.html_extractor == "main-content"
                else html_extractor()
            )
        elif body.media_type in _PDF_TYPES:
            extractor = pdf_extractor_with_ocr(self.ocr, self.ocr_languages)
        if extractor is None:
            text = await asyncio.to_thread(decode_body, body.data, body.charset, markup=False)
            _refuse_nul(checked.source, body, text)
            outline_of = _OUTLINED_TEXT.get(body.media_type)
            headings = tuple(await asyncio.to_thread(outline_of, text)) if outline_of else ()
            return Extraction(text=text, headings=headings), None
        try:
            cache = extraction_cache(self.extraction_cache_bytes)
            extraction = await cached_extraction(extractor, body.data, cache, charset=body.charset)
        except IngestionError as exc:
            raise IngestionError(f"{checked.source}: {exc}") from None
        if body.media_type not in _PDF_TYPES:
            _refuse_nul(checked.source, body, extraction.text)
        return extraction, extractor


def _refuse_binary(source: str, body: _Body) -> None:
    """A PDF labelled as HTML or text is refused, not read as text.

    Routing follows Content-Type and nothing else, so a mislabelled PDF would
    become a snapshot of its raw bytes.
    """
    if body.data.lstrip()[:5] == b"%PDF-":
        raise IngestionError(
            f"{source}: the body is a PDF but the server calls it {body.media_type!r}; not "
            "ingested (download the file and ingest it, or have the server label it "
            "application/pdf)"
        )


def _refuse_nul(source: str, body: _Body, text: str) -> None:
    """Text holding NUL came from a binary body under a text label: refused, not stored."""
    if "\0" in text:
        raise IngestionError(
            f"{source}: the body is labelled {body.media_type!r} but holds NUL bytes, so it is "
            "binary, or text in a charset the server does not name; not ingested"
        )
