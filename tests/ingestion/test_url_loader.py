"""URL ingest against a real HTTP server on 127.0.0.1: fetch, refuse, snapshot, verify."""

from __future__ import annotations

import asyncio
import gzip
import json
import os
import ssl
import subprocess
import sys
import textwrap
import time
import zlib
from collections.abc import AsyncIterator, Iterator
from functools import cache
from pathlib import Path

import pytest

from evals.scanned import scanned_pdf
from groundkit import (
    Collection,
    IngestConfig,
    IngestionError,
    RetrievalError,
    RetrievalResult,
    check_citation,
    resolve_citation,
)
from groundkit.extraction import html_extractor, pdf_extractor
from groundkit.ingestion.url_loader import UrlLoader
from groundkit.storage.location import snapshot_dir_for
from groundkit.storage.snapshots import ORPHAN_GRACE_SECONDS, text_name
from groundkit.storage.sqlite import SQLiteMetadataStore
from groundkit.testing.conformance.helpers import (
    document_by_source,
    document_chunks,
    document_sources,
)
from groundkit.utils.url_safety import AddressPolicy
from tests.ocr_support import real_engine
from tests.sources import (
    HTML_PAGE,
    PAGES,
    Route,
    Site,
    gzip_bomb,
    make_pdf,
    raw_deflate,
    self_signed,
    stub_resolver,
)
from tests.support import SMALL_CHUNKS, fifo_at, write_tree

LOOPBACK = AddressPolicy.allowing("127.0.0.0/8")
TEXT = "Tidal power uses the rise and fall of the sea.\n\nIt is predictable, unlike wind.\n"


@pytest.fixture(scope="module")
def _site() -> Iterator[Site]:
    site = Site()
    try:
        yield site
    finally:
        site.close()


@pytest.fixture
def site(_site: Site) -> Site:
    _site.seen.clear()
    _site.routes.clear()
    _site.routes.update(
        {
            "/guide.html": Route(
                body=HTML_PAGE.encode("cp1252"),
                headers={"Content-Type": "text/html"},  # charset only in the page
            ),
            "/latin.html": Route(
                body="<p>Crème brûlée</p>".encode("cp1252"),
                headers={"Content-Type": "text/html; charset=ISO-8859-1"},
            ),
            "/tidal.txt": Route(body=TEXT.encode(), headers={"Content-Type": "text/plain"}),
            "/report.pdf": Route(body=make_pdf(), headers={"Content-Type": "application/pdf"}),
            "/moved": Route(302, headers={"Location": "/tidal.txt"}),
            "/big.txt": Route(body=b"x" * 5000, headers={"Content-Type": "text/plain"}),
            "/big-chunked.txt": Route(
                body=b"y" * 50_000, headers={"Content-Type": "text/plain"}, chunked=True
            ),
            "/stall.txt": Route(
                body=b"partial body " * 10,
                headers={"Content-Type": "text/plain"},
                stall_after=13,
                stall_seconds=3.0,
            ),
            "/image.png": Route(body=b"\x89PNG", headers={"Content-Type": "image/png"}),
            "/blank.txt": Route(body=b"  \n ", headers={"Content-Type": "text/plain"}),
            "/not-modified": Route(304),
            # Content types that lie: routed by the label, these were stored as text.
            "/mislabelled.pdf": Route(body=make_pdf(), headers={"Content-Type": "text/html"}),
            "/png-as-text": Route(
                body=b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR", headers={"Content-Type": "text/plain"}
            ),
            "/nul.html": Route(body=b"<p>one\x00two</p>", headers={"Content-Type": "text/html"}),
            "/login": Route(401, b"log in", headers={"WWW-Authenticate": "Basic"}),
            "/busy": Route(429, b"busy", headers={"Retry-After": "120"}),
        }
    )
    return _site


def loader(**over: object) -> UrlLoader:
    options: dict[str, object] = {"policy": LOOPBACK, "timeout": 5.0}
    options.update(over)
    return UrlLoader(**options)  # type: ignore[arg-type]


@pytest.fixture
async def col(tmp_path: Path) -> AsyncIterator[Collection]:
    base = tmp_path / "corpus"
    write_tree(base, {"local.md": "A local note about tidal lagoons.\n"})
    async with Collection.open(
        tmp_path / "index", base_dir=base, chunking=SMALL_CHUNKS, url_loader=loader()
    ) as opened:
        yield opened


class TestLoader:
    async def test_html(self, site: Site) -> None:
        document = await loader().load(site.url("/guide.html#top"))
        assert document.source == site.url("/guide.html")
        assert document.source_class == "snapshot" and document.extractor is None
        assert document.content.startswith("Café “Guide”\n\nEspresso basics")
        assert "scriptword" not in document.content
        assert document.fields == {"title": "Café “Guide”"}
        assert document.metadata["content_type"] == "text/html"
        assert document.metadata["extracted_with"] == html_extractor().identity

    async def test_header_charset(self, site: Site) -> None:
        document = await loader().load(site.url("/latin.html"))
        assert document.content == "Crème brûlée"

    @pytest.mark.parametrize(
        ("label", "codec", "media", "text"),
        [
            ("utf-16le", "utf-16-le", "text/plain", "Tidal power."),
            ("UTF-16BE", "utf-16-be", "text/plain", "Tidal power."),
            ("utf-16", "utf-16-le", "text/plain", "Tidal power."),  # no BOM: little-endian
            ("utf-16le", "utf-16-le", "text/html", "Tidal power."),
            ("utf-16le", "utf-16-le", "text/plain", "Tidal wörds."),
            ("utf-16", "utf-8", "text/plain", "Tidal wörds."),  # a label that lies: no NUL
        ],
    )
    async def test_header_utf16_without_bom(
        self, site: Site, label: str, codec: str, media: str, text: str
    ) -> None:
        # In the ASCII range UTF-16 is valid UTF-8 as well, a NUL beside every letter.
        site.routes["/utf16"] = Route(
            body=text.encode(codec), headers={"Content-Type": f"{media}; charset={label}"}
        )
        document = await loader().load(site.url("/utf16"))
        assert document.content == text

    async def test_text_kept_verbatim(self, site: Site) -> None:
        document = await loader().load(site.url("/tidal.txt"))
        assert document.content == TEXT
        assert "extracted_with" not in document.metadata

    async def test_pdf(self, site: Site) -> None:
        document = await loader().load(site.url("/report.pdf"))
        assert document.metadata["pages"] == len(PAGES)
        assert document.metadata["extracted_with"] == pdf_extractor().identity
        assert "Photovoltaic" in document.content

    async def test_a_pdf_fetched_again_unchanged_is_not_extracted_again(
        self, site: Site, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        from groundkit.extraction.pdf import PdfExtractor

        monkeypatch.setenv("GROUNDKIT_CACHE_DIR", str(tmp_path / "cache"))
        runs: list[int] = []
        real = PdfExtractor._run

        def counted(self: PdfExtractor, data: bytes, charset: str | None) -> object:
            runs.append(len(data))
            return real(self, data, charset)

        monkeypatch.setattr(PdfExtractor, "_run", counted)
        first = await loader().load(site.url("/report.pdf"))
        again = await loader().load(site.url("/report.pdf"))
        assert len(runs) == 1 and again == first
        off = await loader(extraction_cache_bytes=0).load(site.url("/report.pdf"))
        assert len(runs) == 2 and off == first
        site.routes["/report.pdf"] = Route(
            body=make_pdf(["Tidal turbines turn both ways."]),
            headers={"Content-Type": "application/pdf"},
        )
        changed = await loader().load(site.url("/report.pdf"))
        assert len(runs) == 3 and "Tidal turbines" in changed.content

    async def test_scanned_pdf_read_by_ocr_as_configured(self, site: Site) -> None:
        engine = real_engine()
        scan = scanned_pdf(["Tidal lagoons hold the sea back at low water."], size=14)
        site.routes["/scan.pdf"] = Route(body=scan, headers={"Content-Type": "application/pdf"})
        document = await loader().load(site.url("/scan.pdf"))
        assert document.content == "Tidal lagoons hold the sea back at low water."
        assert document.metadata["extracted_with"].endswith(f"+{engine.identity}")
        with pytest.raises(IngestionError, match=r"no text \(page 1 has no text layer.*OCR is off"):
            await loader(ocr="off").load(site.url("/scan.pdf"))

    async def test_redirect_refused_not_followed(self, site: Site) -> None:
        with pytest.raises(IngestionError, match=r"redirect \(HTTP 302\)"):
            await loader().load(site.url("/moved"))
        assert [s.path for s in site.seen] == ["/moved"]

    async def test_declared_size_over_cap(self, site: Site) -> None:
        with pytest.raises(IngestionError, match="announces 5000 bytes"):
            await loader(max_bytes=1000).load(site.url("/big.txt"))

    async def test_streamed_size_over_cap(self, site: Site) -> None:
        with pytest.raises(IngestionError, match="exceeds the cap of 10000"):
            await loader(max_bytes=10_000).load(site.url("/big-chunked.txt"))

    async def test_stall_times_out(self, site: Site) -> None:
        with pytest.raises(IngestionError, match=r"within 0\.5 s"):
            await loader(timeout=0.5).load(site.url("/stall.txt"))

    @pytest.mark.parametrize(
        ("path", "reason"),
        [
            ("/image.png", "'image/png' is not HTML, PDF or text"),
            ("/nothing-here", "HTTP 404"),
            ("/not-modified", r"HTTP 304 \(Not Modified, to a request that was not conditional"),
            ("/login", "HTTP 401; URL ingest sends no credentials"),
            ("/mislabelled.pdf", "the body is a PDF but the server calls it 'text/html'"),
            ("/png-as-text", "labelled 'text/plain' but holds NUL bytes"),
            ("/nul.html", "labelled 'text/html' but holds NUL bytes"),
            ("/busy", r"HTTP 429; the server asks to wait 120 s \(Retry-After\)"),
            ("/blank.txt", "no text"),
        ],
    )
    async def test_other_failures(self, site: Site, path: str, reason: str) -> None:
        with pytest.raises(IngestionError, match=reason):
            await loader().load(site.url(path))

    async def test_default_policy_refuses_loopback_before_any_request(self, site: Site) -> None:
        with pytest.raises(IngestionError, match="loopback"):
            await UrlLoader().load(site.url("/tidal.txt"))
        assert site.seen == []

    async def test_connection_pinned_to_checked_address(self, site: Site) -> None:
        # The name exists only in the stub resolver: the fetch must use the
        # address it returned, asked once, with the name in the Host header.
        calls: list[str] = []
        resolver = stub_resolver({"docs.example": ["127.0.0.1"]}, calls)
        document = await loader(resolver=resolver).load(
            f"http://docs.example:{site.port}/tidal.txt"
        )
        assert document.content == TEXT
        assert calls == ["docs.example"]
        assert site.seen[-1].headers["Host"] == f"docs.example:{site.port}"

    async def test_internationalised_host_name(self, site: Site) -> None:
        # Resolved, sent and stored as its IDNA A-label.
        calls: list[str] = []
        resolver = stub_resolver({"xn--bcher-kva.example": ["127.0.0.1"]}, calls)
        document = await loader(resolver=resolver).load(
            f"http://bücher.example:{site.port}/tidal.txt"
        )
        assert document.content == TEXT
        assert document.source == f"http://xn--bcher-kva.example:{site.port}/tidal.txt"
        assert calls == ["xn--bcher-kva.example"]
        assert site.seen[-1].headers["Host"] == f"xn--bcher-kva.example:{site.port}"

    async def test_unreachable(self) -> None:
        with pytest.raises(IngestionError, match="request failed"):
            await loader(timeout=2.0).load("http://127.0.0.1:1/")


MIB = 1024 * 1024


@cache
def stacked_bomb() -> bytes:
    """64 MiB of NULs gzipped twice: a few hundred bytes on the wire."""
    return gzip_bomb(64 * MIB, layers=2)


def encoded(body: bytes, coding: str, *, chunked: bool = False) -> Route:
    return Route(
        body=body,
        headers={"Content-Type": "text/plain", "Content-Encoding": coding},
        chunked=chunked,
    )


class TestOddResponses:
    async def test_a_content_type_sent_twice_is_the_last_one(self, site: Site) -> None:
        # Read as one string, "text/plain, text/html" named no known type: the page went
        # in as plain text, tags and all, under the content type "text/plain, text/html".
        page = b"<html><body><h1>Tidal</h1><p>Tidal power page.</p></body></html>"
        site.routes["/twice.html"] = Route(
            body=page,
            headers={"Content-Type": "text/plain"},
            repeated=(("Content-Type", "text/html"),),
        )
        document = await loader().load(site.url("/twice.html"))
        assert "<" not in document.content and "Tidal power page." in document.content
        assert document.metadata["content_type"] == "text/html"
        # The same type again without a charset keeps the one an earlier value gave.
        site.routes["/charset.html"] = Route(
            body="<p>Crème brûlée</p>".encode("cp1252"),
            headers={"Content-Type": "text/html; charset=windows-1252"},
            repeated=(("Content-Type", "text/html"),),
        )
        assert (await loader().load(site.url("/charset.html"))).content == "Crème brûlée"
        # An invalid value is passed over, not taken.
        site.routes["/junk.txt"] = Route(
            body=TEXT.encode(),
            headers={"Content-Type": "text/plain"},
            repeated=(("Content-Type", "junk"),),
        )
        assert (await loader().load(site.url("/junk.txt"))).content == TEXT

    async def test_the_cap_counts_decoded_bytes_when_a_length_is_announced(
        self, site: Site
    ) -> None:
        # Incompressible text: gzip makes it a little longer than it is.
        body = os.urandom(30_000).hex().encode()[:50_000]
        packed = gzip.compress(body, compresslevel=0)
        assert len(body) <= 50_000 < len(packed)
        site.routes["/packed.txt"] = encoded(packed, "gzip")
        document = await loader(max_bytes=50_000).load(site.url("/packed.txt"))
        assert document.content == body.decode()
        site.routes["/over.txt"] = encoded(gzip.compress(body + b"x" * 10_000), "gzip")
        with pytest.raises(IngestionError, match="cap of 50000"):
            await loader(max_bytes=50_000).load(site.url("/over.txt"))

    async def test_a_reset_connection_says_so(self, site: Site) -> None:
        site.routes["/reset.txt"] = Route(
            body=TEXT.encode(), headers={"Content-Type": "text/plain"}, reset_after=10
        )
        with pytest.raises(IngestionError, match=r"request failed \(\w+Error: .+\)"):
            await loader().load(site.url("/reset.txt"))


class TestContentCodings:
    """Every layer of content coding is undone in bounded steps; the cap counts the result."""

    async def test_gzip_then_deflate(self, site: Site) -> None:
        # Applied in the order listed: gzip first, then deflate over it.
        site.routes["/both.txt"] = encoded(
            zlib.compress(gzip.compress(TEXT.encode())), "gzip, deflate"
        )
        document = await loader().load(site.url("/both.txt"))
        assert document.content == TEXT

    @pytest.mark.parametrize(
        ("coding", "body"),
        [
            pytest.param("identity", TEXT.encode(), id="identity"),
            pytest.param("gzip", gzip.compress(TEXT.encode()), id="gzip"),
            pytest.param("x-gzip", gzip.compress(TEXT.encode()), id="x-gzip"),
            pytest.param("GZip", gzip.compress(TEXT.encode()), id="case"),
            pytest.param("deflate", zlib.compress(TEXT.encode()), id="deflate"),
            pytest.param("deflate", raw_deflate(TEXT.encode()), id="raw-deflate"),
            pytest.param("gzip, identity", gzip.compress(TEXT.encode()), id="with-identity"),
            pytest.param(
                "gzip",
                gzip.compress(TEXT.encode()[:20]) + gzip.compress(TEXT.encode()[20:]),
                id="gzip-members",
            ),
        ],
    )
    async def test_single_codings(self, site: Site, coding: str, body: bytes) -> None:
        site.routes["/coded.txt"] = encoded(body, coding, chunked=True)
        assert (await loader().load(site.url("/coded.txt"))).content == TEXT

    async def test_accept_encoding_offers_what_is_decoded(self, site: Site) -> None:
        await loader().load(site.url("/tidal.txt"))
        assert site.seen[-1].headers["Accept-Encoding"] == "gzip, deflate"

    async def test_stacked_gzip_bomb_stops_at_the_cap(self, site: Site) -> None:
        bomb = stacked_bomb()
        assert len(bomb) < 4096
        site.routes["/bomb.txt"] = encoded(bomb, "gzip, gzip")
        with pytest.raises(IngestionError, match=f"body exceeds the cap of {MIB} bytes"):
            await loader(max_bytes=MIB).load(site.url("/bomb.txt"))

    async def test_single_gzip_larger_than_the_cap(self, site: Site) -> None:
        site.routes["/big.gz.txt"] = encoded(gzip_bomb(3 * MIB, layers=1), "gzip")
        with pytest.raises(IngestionError, match=f"body exceeds the cap of {MIB} bytes$"):
            await loader(max_bytes=MIB).load(site.url("/big.gz.txt"))
        # Just under the cap it is read whole.
        under = b"tide " * (MIB // 5)
        site.routes["/under.gz.txt"] = encoded(gzip.compress(under), "gzip")
        document = await loader(max_bytes=MIB).load(site.url("/under.gz.txt"))
        assert document.content.encode() == under

    @pytest.mark.parametrize(
        ("coding", "reason"),
        [
            ("br", r"content coding 'br' is not supported \(gzip and deflate are\)"),
            ("zstd", "content coding 'zstd' is not supported"),
            ("gzip, snappy-x", "content coding 'snappy-x' is not supported"),
            ("compress", "content coding 'compress' is not supported"),
            ("gzip, gzip, gzip", r"3 stacked content codings \(gzip, gzip, gzip\) are more than"),
        ],
    )
    async def test_refused_codings_are_named(self, site: Site, coding: str, reason: str) -> None:
        site.routes["/odd.txt"] = encoded(gzip.compress(TEXT.encode()), coding)
        with pytest.raises(IngestionError, match=reason):
            await loader().load(site.url("/odd.txt"))

    async def test_corrupt_and_truncated_bodies(self, site: Site) -> None:
        site.routes["/corrupt.txt"] = encoded(b"\x1f\x8b" + b"not gzip at all" * 10, "gzip")
        with pytest.raises(IngestionError, match="the gzip content coding is corrupt"):
            await loader().load(site.url("/corrupt.txt"))
        site.routes["/cut.txt"] = encoded(gzip.compress(TEXT.encode())[:-6], "gzip")
        with pytest.raises(IngestionError, match="gzip content coding ends early"):
            await loader().load(site.url("/cut.txt"))
        site.routes["/trailing.txt"] = encoded(zlib.compress(TEXT.encode()) + b"junk", "deflate")
        with pytest.raises(IngestionError, match="deflate content coding has data after its end"):
            await loader().load(site.url("/trailing.txt"))

    async def test_failures_are_report_lines_and_store_nothing(
        self, col: Collection, site: Site
    ) -> None:
        site.routes["/bomb.txt"] = encoded(stacked_bomb(), "gzip, gzip")
        site.routes["/br.txt"] = encoded(b"\x0b\x02\x80hello\x03", "br")
        for path, reason in (
            ("/bomb.txt", "exceeds the cap"),
            ("/br.txt", "'br' is not supported"),
        ):
            report = await col.ingest(site.url(path))
            assert [f.source for f in report.failed] == [site.url(path)]
            assert reason in report.failed[0].reason
        assert await document_sources(col.store) == []


# In a fresh interpreter, so the peak is the fetch's alone: a stacked-gzip bomb
# served from a loopback server in the same process, fetched under a 1 MiB cap.
_URL_PEAK = textwrap.dedent(
    """
    import asyncio, json, resource, sys, tracemalloc
    from groundkit import IngestionError
    from groundkit.ingestion.url_loader import UrlLoader
    from groundkit.utils.url_safety import AddressPolicy
    from tests.sources import Route, Site, gzip_bomb

    CAP = int(sys.argv[1])
    site = Site()
    site.routes["/warm.txt"] = Route(body=b"warm up", headers={"Content-Type": "text/plain"})
    site.routes["/bomb.txt"] = Route(
        body=gzip_bomb(int(sys.argv[2]), layers=2),
        headers={"Content-Type": "text/plain", "Content-Encoding": "gzip, gzip"},
    )
    loader = UrlLoader(policy=AddressPolicy.allowing("127.0.0.0/8"), max_bytes=CAP, timeout=30)

    async def main():
        await loader.load(site.url("/warm.txt"))
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        tracemalloc.start()
        try:
            await loader.load(site.url("/bomb.txt"))
            error = None
        except IngestionError as exc:
            error = str(exc)
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        print(json.dumps({"error": error, "peak": peak, "rss_growth_kib": after - before}))

    asyncio.run(main())
    site.close()
    """
)


def test_stacked_gzip_peak_memory_is_within_twice_the_cap() -> None:
    cap = MIB
    done = subprocess.run(
        [sys.executable, "-c", _URL_PEAK, str(cap), str(64 * MIB)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=Path(__file__).resolve().parents[2],
        check=False,
    )
    assert done.returncode == 0, done.stderr
    measured = json.loads(done.stdout)
    assert measured["error"] is not None and "exceeds the cap of 1048576" in measured["error"]
    assert measured["peak"] <= 2 * cap, measured
    # The process as a whole did not take the 64 MiB either.
    assert measured["rss_growth_kib"] * 1024 <= 8 * cap, measured


async def test_https_pins_the_address_and_checks_the_name(tmp_path: Path) -> None:
    cert, key = self_signed(tmp_path, "secure.example")
    server_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_ctx.load_cert_chain(cert, key)
    names: list[str | None] = []
    server_ctx.sni_callback = lambda sock, name, ctx: names.append(name)
    site = Site(wrap=lambda sock: server_ctx.wrap_socket(sock, server_side=True))
    site.routes["/tidal.txt"] = Route(body=TEXT.encode(), headers={"Content-Type": "text/plain"})
    try:
        client_ctx = ssl.create_default_context(cafile=str(cert))
        calls: list[str] = []
        resolver = stub_resolver({"secure.example": ["127.0.0.1"]}, calls)
        document = await loader(resolver=resolver, verify=client_ctx).load(
            f"https://secure.example:{site.port}/tidal.txt"
        )
        assert document.content == TEXT
        assert names == ["secure.example"]  # SNI carried the name, not the address
        # The certificate names secure.example only: connecting by address fails.
        with pytest.raises(IngestionError, match="request failed"):
            await loader(verify=client_ctx).load(f"https://127.0.0.1:{site.port}/tidal.txt")
    finally:
        site.close()


class TestCollection:
    async def test_every_chunk_verifies_against_its_snapshot(
        self, col: Collection, site: Site, tmp_path: Path
    ) -> None:
        snapshots = snapshot_dir_for(tmp_path / "index", "default")
        assert col.snapshot_dir == snapshots
        for path in ("/guide.html", "/tidal.txt", "/report.pdf"):
            report = await col.ingest(site.url(path))
            assert report.added == [site.url(path)], report.failed
            record = await document_by_source(col.store, site.url(path))
            assert record is not None and record.source_class == "snapshot"
            named = snapshots / text_name(record.document_id, record.content_hash)
            stored = named.read_bytes().decode("utf-8")
            chunks = await document_chunks(col.store, record.document_id)
            # The snapshot is exactly the indexed text.
            assert all(stored[c.start_offset : c.end_offset] == c.content for c in chunks)
        await col.ingest(col.base_dir)  # the local folder too
        checked = 0
        for query in ("espresso crema", "tidal sea", "photovoltaic", "geothermal"):
            response = await col.search(query, 10)
            assert response.results, query
            checked += await assert_all_verify_snapshots(col, response.results)
        assert checked >= 4
        verify = await col.verify_all()
        assert verify.ok and verify.verified == await col.store.chunk_count()

        # Snapshot PDFs keep their page numbers.
        hits = (await col.search("geothermal", 5)).results
        pdf_hits = [h for h in hits if h.source == site.url("/report.pdf")]
        assert pdf_hits and pdf_hits[0].citation.page == 4

    async def test_changed_or_missing_snapshot(self, col: Collection, site: Site) -> None:
        await col.ingest(site.url("/tidal.txt"))
        record = await document_by_source(col.store, site.url("/tidal.txt"))
        assert record is not None and isinstance(col.snapshot_dir, Path)
        chunk_ids = [c.chunk_id for c in await document_chunks(col.store, record.document_id)]
        snapshot = col.snapshot_dir / text_name(record.document_id, record.content_hash)
        snapshot.write_text(TEXT.replace("Tidal", "Solar"), encoding="utf-8")
        assert (await col.fetch_chunk(chunk_ids[0])).verification == "drifted"
        snapshot.write_bytes(b"\xff\xfe")
        result = await col.fetch_chunk(chunk_ids[0])
        assert result.verification == "unresolvable" and "UTF-8" in result.detail
        snapshot.unlink()
        result = await col.fetch_chunk(chunk_ids[0])
        assert result.verification == "unresolvable" and "snapshot" in result.detail
        # Ingesting the same URL again repairs the snapshot.
        report = await col.ingest(site.url("/tidal.txt"))
        assert report.unchanged == [site.url("/tidal.txt")]
        assert (await col.fetch_chunk(chunk_ids[0])).verification == "verified"

    async def test_snapshot_replaced_by_a_fifo(self, col: Collection, site: Site) -> None:
        url = site.url("/tidal.txt")
        await col.ingest(url)
        record = await document_by_source(col.store, url)
        assert record is not None and isinstance(col.snapshot_dir, Path)
        chunk_id = (await document_chunks(col.store, record.document_id))[0].chunk_id
        with fifo_at(col.snapshot_dir / text_name(record.document_id, record.content_hash)):
            result = await asyncio.wait_for(col.fetch_chunk(chunk_id), 10)
            assert result.verification == "unresolvable"
            assert "not a regular file (FIFO)" in result.detail
            # Ingesting the URL again puts a regular snapshot back in its place.
            report = await asyncio.wait_for(col.ingest(url), 10)
            assert report.unchanged == [url]
        assert (await col.fetch_chunk(chunk_id)).verification == "verified"

    async def test_snapshot_dir_is_required(self, col: Collection, site: Site) -> None:
        await col.ingest(site.url("/tidal.txt"))
        hit = (await col.search("tidal", 1)).results[0]
        with pytest.raises(RetrievalError, match="snapshot_dir") as info:
            await resolve_citation(hit.citation, col.base_dir)
        assert info.value.verdict == "unresolvable"
        assert col.snapshot_dir is not None
        assert await resolve_citation(hit.citation, col.base_dir, snapshot_dir=col.snapshot_dir)

    async def test_fields_from_the_page_and_the_call(self, col: Collection, site: Site) -> None:
        url = site.url("/guide.html")
        report = await col.ingest(url, metadata={"team": "cafe"})
        assert report.added == [url]
        record = await document_by_source(col.store, url)
        assert record is not None
        assert record.fields == {"team": "cafe", "title": "Café “Guide”"}
        assert record.metadata["content_type"] == "text/html"
        assert (await col.ingest(url, metadata={"team": "cafe"})).unchanged == [url]
        assert (await col.ingest(url, metadata={"team": "bar"})).updated == [url]
        with pytest.raises(IngestionError, match="metadata argument"):
            await col.ingest(url, metadata={"team": ["a", 1]})
        assert site.seen[-1].path == "/guide.html" and len(site.seen) == 3

    async def test_the_default_loader_follows_the_ingest_config(self, tmp_path: Path) -> None:
        # read_fields=False used to be left out, so a fetched page's title still became a
        # field and a PDF with damaged info failed, advising the very setting given.
        config = IngestConfig(
            read_fields=False, html_extractor="main-content", ocr="off", ocr_languages="deu"
        )
        async with Collection.open(tmp_path / "index", base_dir=tmp_path, ingest=config) as col:
            made = col._url_loader
        assert made.read_fields is False
        assert (made.html_extractor, made.ocr, made.ocr_languages) == ("main-content", "off", "deu")
        assert made.extraction_cache_bytes == config.extraction_cache_bytes

    async def test_folder_ingest_never_prunes_urls(self, col: Collection, site: Site) -> None:
        await col.ingest(site.url("/tidal.txt"))
        await col.ingest(col.base_dir)
        (col.base_dir / "local.md").unlink()
        write_tree(col.base_dir, {"other.md": "Something else entirely.\n"})
        report = await col.ingest(col.base_dir)
        assert report.removed == ["local.md"]
        assert site.url("/tidal.txt") in await document_sources(col.store)
        assert (await col.verify_all()).ok

    async def test_update_and_failure_keep_store_and_snapshot_in_step(
        self, col: Collection, site: Site
    ) -> None:
        url = site.url("/tidal.txt")
        await col.ingest(url)
        site.routes["/tidal.txt"] = Route(
            body=b"Tidal power, revised.\n", headers={"Content-Type": "text/plain"}
        )
        report = await col.ingest(url)
        assert report.updated == [url]
        assert (await col.verify_all()).ok
        # A failed re-fetch keeps the stored version and its snapshot.
        site.routes["/tidal.txt"] = Route(500, b"down")
        report = await col.ingest(url)
        assert report.failed[0].source == url and "HTTP 500" in report.failed[0].reason
        assert (await col.search("revised", 1)).results
        assert (await col.verify_all()).ok

    async def test_stale_snapshot_files_are_removed(self, col: Collection, site: Site) -> None:
        await col.ingest(site.url("/tidal.txt"))
        assert isinstance(col.snapshot_dir, Path)
        (col.snapshot_dir / "0123456789abcdef0123456789abcdef").write_text("orphan")
        # Texts no row names and temp files go once past the grace period (a writer in
        # another process may be about to commit the row naming a younger one).
        hour_ago = time.time() - ORPHAN_GRACE_SECONDS - 60
        for name in ("feedfacefeedfacefeedfacefeedface.partial", "f" * 32 + "." + "0" * 64):
            (col.snapshot_dir / name).write_text("half")
            os.utime(col.snapshot_dir / name, (hour_ago, hour_ago))
        young = col.snapshot_dir / ("e" * 32 + "." + "0" * 64)
        young.write_text("in flight")
        await col.ingest(site.url("/guide.html"))
        names = sorted(p.name for p in col.snapshot_dir.iterdir())
        assert young.name in names
        assert len(names) == 3 and all(len(n) == 32 + 1 + 64 for n in names)

    async def test_refused_urls(self, col: Collection, site: Site) -> None:
        with pytest.raises(IngestionError, match="credentials"):
            await col.ingest(site.url("/tidal.txt?api_key=abc"))
        with pytest.raises(IngestionError, match="scheme 'ftp'"):
            await col.ingest("ftp://127.0.0.1/x")
        assert isinstance(col.store, SQLiteMetadataStore)
        index_dir = col.store.path.parent
        async with Collection.open(index_dir, "strict", base_dir=col.base_dir) as strict:
            report = await strict.ingest(site.url("/tidal.txt"))
            assert "loopback" in report.failed[0].reason
            assert await document_sources(strict.store) == []
        assert site.seen == []
        assert await document_sources(col.store) == []


async def assert_all_verify_snapshots(col: Collection, results: list[RetrievalResult]) -> int:
    """Like ``assert_all_verify``, with the collection's snapshot directory."""
    for result in results:
        checked = await check_citation(
            result.citation, result.content, col.base_dir, snapshot_dir=col.snapshot_dir
        )
        assert checked.ok, checked.detail
    return len(results)


async def test_dense_and_hybrid_over_every_source_class(site: Site, tmp_path: Path) -> None:
    pytest.importorskip("lancedb")
    from tests.support import ToyEmbedder

    base = tmp_path / "corpus"
    write_tree(base, {"notes.md": "Tidal lagoons hold water behind a wall.\n"})
    write_tree(base, {"report.pdf": make_pdf(), "guide.html": HTML_PAGE.encode("cp1252")})
    async with Collection.open(
        tmp_path / "index",
        base_dir=base,
        chunking=SMALL_CHUNKS,
        embedder=ToyEmbedder(),
        url_loader=loader(),
    ) as dense:
        await dense.ingest(base)
        report = await dense.ingest(site.url("/tidal.txt"))
        assert report.added == [site.url("/tidal.txt")] and report.embedded == 1
        classes = set()
        for mode in ("dense", "hybrid"):
            for query in ("tidal sea", "geothermal heat", "espresso"):
                results = (await dense.search(query, 10, mode=mode)).results
                assert results
                classes |= {r.source_class for r in results}
                await assert_all_verify_snapshots(dense, results)
        assert classes == {"text", "extracted", "snapshot"}
        assert (await dense.verify_all()).ok
