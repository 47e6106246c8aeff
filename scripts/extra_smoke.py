"""Use one extra for real, in an environment that has groundkit with that extra alone.

CI installs the wheel once per extra (``pip install 'groundkit-*.whl[pdf]'`` and so on),
each in a fresh virtual environment, and runs this with that environment's Python: every
file it reads, it writes itself, so nothing beyond the extra is needed.

    python scripts/extra_smoke.py EXTRA   # pdf, html, docx, pptx, epub, main-content, ...
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import tempfile
import textwrap
import threading
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import groundkit
import groundkit.contracts
import groundkit.extraction
import groundkit.ingestion
import groundkit.sync as gks

DATA = Path(__file__).resolve().parents[1] / "tests" / "data"


def _pdf_file(objects: list[bytes]) -> bytes:
    """A PDF of numbered ``objects`` (the first the catalog), with a correct
    cross-reference table."""
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, 1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % number + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % o for o in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (
        len(objects) + 1,
        xref,
    )
    return bytes(out)


def _pdf(text: str) -> bytes:
    """A one-page PDF showing ``text`` in Helvetica, with a correct cross-reference table."""
    return one_page_pdf(f"BT /F1 12 Tf 72 720 Td ({text}) Tj ET")


def one_page_pdf(content: str) -> bytes:
    """A one-page PDF whose page draws the content stream ``content`` (Helvetica as
    ``/F1``), with a correct cross-reference table."""
    stream = content.encode("latin-1")
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] "
        b"/Resources << /Font << /F1 4 0 R >> >> /Contents 5 0 R >>",
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
        b"<< /Length %d >>\nstream\n" % len(stream) + stream + b"\nendstream",
    ]
    return _pdf_file(objects)


def _scanned_pdf(text: str) -> bytes:
    """``_pdf(text)`` as a scan: pdfium renders it to gray pixels, and a one-page PDF holds
    those pixels as its only content (no text layer). pdfium is what the extra installs."""
    import zlib

    import pypdfium2

    document = pypdfium2.PdfDocument(_pdf(text))
    try:
        bitmap = document[0].render(scale=200 / 72, grayscale=True)
        width, height, stride = bitmap.width, bitmap.height, bitmap.stride
        buffer = bytes(bitmap.buffer)
        pixels = b"".join(buffer[r * stride : r * stride + width] for r in range(height))
    finally:
        document.close()
    image = zlib.compress(pixels)
    content = b"q 612 0 0 792 0 0 cm /Im1 Do Q"
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] "
        b"/Resources << /XObject << /Im1 4 0 R >> >> /Contents 5 0 R >>",
        b"<< /Type /XObject /Subtype /Image /Width %d /Height %d /ColorSpace /DeviceGray "
        b"/BitsPerComponent 8 /Filter /FlateDecode /Length %d >>\nstream\n"
        % (width, height, len(image))
        + image
        + b"\nendstream",
        b"<< /Length %d >>\nstream\n" % len(content) + content + b"\nendstream",
    ]
    return _pdf_file(objects)


def _epub(path: Path, text: str) -> None:
    """A one-chapter EPUB 3."""
    container = """<?xml version="1.0"?>
<container version="1.0" xmlns="urn:oasis:names:tc:opendocument:xmlns:container">
<rootfiles><rootfile full-path="OEBPS/content.opf" media-type="application/oebps-package+xml"/>
</rootfiles></container>"""
    opf = """<?xml version="1.0" encoding="utf-8"?>
<package xmlns="http://www.idpf.org/2007/opf" version="3.0" unique-identifier="id">
<metadata xmlns:dc="http://purl.org/dc/elements/1.1/">
<dc:identifier id="id">smoke-1</dc:identifier><dc:title>Smoke</dc:title>
<dc:language>en</dc:language><meta property="dcterms:modified">2026-01-01T00:00:00Z</meta>
</metadata>
<manifest>
<item id="nav" href="nav.xhtml" media-type="application/xhtml+xml" properties="nav"/>
<item id="c1" href="c1.xhtml" media-type="application/xhtml+xml"/>
</manifest>
<spine><itemref idref="c1"/></spine></package>"""
    nav = """<?xml version="1.0" encoding="utf-8"?>
<html xmlns="http://www.w3.org/1999/xhtml" xmlns:epub="http://www.idpf.org/2007/ops">
<head><title>nav</title></head><body><nav epub:type="toc"><ol>
<li><a href="c1.xhtml">One</a></li></ol></nav></body></html>"""
    chapter = f"""<?xml version="1.0" encoding="utf-8"?>
<html xmlns="http://www.w3.org/1999/xhtml"><head><title>One</title></head>
<body><h1>One</h1><p>{text}</p></body></html>"""
    with zipfile.ZipFile(path, "w") as book:
        book.writestr("mimetype", "application/epub+zip", compress_type=zipfile.ZIP_STORED)
        book.writestr("META-INF/container.xml", container)
        book.writestr("OEBPS/content.opf", opf)
        book.writestr("OEBPS/nav.xhtml", nav)
        book.writestr("OEBPS/c1.xhtml", chapter)


def _ingest_and_find(work: Path, name: str, query: str, **open_options: Any) -> None:
    async def run() -> None:
        async with groundkit.Collection.open(work / "idx", base_dir=work, **open_options) as col:
            report = await col.ingest(work / "docs")
            assert not report.failed, report.failed
            response = await col.search(query, top_k=1)
            top = response.results[0]
            assert top.source == f"docs/{name}", top.source
            checked = await col.verify(top)
            assert checked.ok, checked
            print(f"{name}: found and verified ({checked.verification})")

    asyncio.run(run())


def file_format(name: str, write: Callable[[Path], object], query: str, **options: Any) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        (work / "docs").mkdir()
        write(work / "docs" / name)
        _ingest_and_find(work, name, query, **options)


def smoke_pdf() -> None:
    file_format("kettle.pdf", lambda p: p.write_bytes(_pdf("The kettle boils water.")), "kettle")
    extraction = asyncio.run(
        groundkit.extraction.pdf_extractor().extract_bytes(_pdf("The kettle boils water."))
    )
    metadata = {"page_starts": list(extraction.page_starts), "geometry": extraction.geometry}
    rects = groundkit.contracts.rects_at(metadata, 4, 10)  # "kettle", drawn at x 72, y 720
    assert len(rects) == 1 and 72 <= rects[0].x0 < rects[0].x1 and rects[0].y0 < 720, rects
    print(f"kettle.pdf: rectangle {rects[0]}")


def smoke_pdf_legacy() -> None:
    """Only the verifier of documents ingested with pypdf: not an extractor for new ones."""
    from groundkit.extraction.pdf_legacy import pypdf_extractor

    extractor = pypdf_extractor()
    assert groundkit.extraction.active_extractors()[extractor.identity] is extractor
    text = asyncio.run(extractor.extract_bytes(_pdf("The kettle boils water."))).text
    assert "kettle" in text, text
    print(f"{extractor.identity}: extracts, for verification only")


def smoke_ocr() -> None:
    # Needs the tesseract program too (Debian tesseract-ocr), which .ci/run installs.
    file_format(
        "scan.pdf",
        lambda p: p.write_bytes(_scanned_pdf("The kettle boils water.")),
        "kettle",
        ingest=groundkit.IngestConfig(ocr="required"),
    )


def smoke_html() -> None:
    page = "<html><body><h1>Tea</h1><p>Green tea is brewed at 80 degrees.</p></body></html>"
    file_format("tea.html", lambda p: p.write_text(page, "utf-8"), "green tea")


def smoke_main_content() -> None:
    body = "Green tea is brewed at about 80 degrees, never with boiling water. " * 8
    page = (
        "<html><body><nav>Home | About</nav>"
        f"<article><h1>Tea</h1><p>{body}</p></article></body></html>"
    )
    config = groundkit.IngestConfig(html_extractor="main-content")
    file_format("tea.html", lambda p: p.write_text(page, "utf-8"), "green tea", ingest=config)


def smoke_docx() -> None:
    source = DATA / "python-docx-blk-paras-and-tables.docx"
    file_format("doc.docx", lambda p: p.write_bytes(source.read_bytes()), "semper facilisis")


def smoke_pptx() -> None:
    source = DATA / "python-pptx-txt-text.pptx"
    file_format("deck.pptx", lambda p: p.write_bytes(source.read_bytes()), "text")


def smoke_epub() -> None:
    file_format("book.epub", lambda p: _epub(p, "Oolong is rolled and roasted."), "oolong")


def _dense_and_hybrid(extras: str, embedder: groundkit.EmbeddingProtocol) -> None:
    async def run(work: Path) -> None:
        (work / "notes").mkdir()
        (work / "notes" / "tea.md").write_text("Green tea is brewed at about 80 degrees.\n")
        (work / "notes" / "bus.md").write_text("The night bus leaves at midnight.\n")
        async with groundkit.Collection.open(work / "idx", base_dir=work, embedder=embedder) as col:
            await col.ingest(work / "notes")
            for mode in ("dense", "hybrid"):
                response = await col.search("temperature for brewing", top_k=1, mode=mode)
                top = response.results[0]
                assert top.source == "notes/tea.md", (mode, top.source)
                assert not response.metadata.get("degraded"), response.metadata
                assert (await col.verify(top)).ok
        print(f"{extras}: dense and hybrid found and verified")

    with tempfile.TemporaryDirectory() as tmp:
        asyncio.run(run(Path(tmp)))


def smoke_dense_local() -> None:
    _dense_and_hybrid("dense,local", groundkit.SentenceTransformerEmbedder("all-MiniLM-L6-v2"))


def smoke_dense_onnx() -> None:
    """The int8 export is made in the cache on first use, then searched with; a second
    embedder loads it from the cache and embeds the same vectors."""
    with tempfile.TemporaryDirectory() as cache:
        os.environ["GROUNDKIT_CACHE_DIR"] = cache
        first = groundkit.SentenceTransformerEmbedder(
            "all-MiniLM-L6-v2", backend="onnx", quantize="int8"
        )
        _dense_and_hybrid("dense,onnx", first)
        again = groundkit.SentenceTransformerEmbedder(
            "all-MiniLM-L6-v2", backend="onnx", quantize="int8"
        )
        text = "Green tea is brewed at about 80 degrees."
        a, b = (asyncio.run(e.embed_query(text)) for e in (first, again))
        assert (a == b).all(), "the cached export embeds differently"
        print("dense,onnx: the cached int8 export gives the same vectors")


def _faq(work: Path) -> gks.SyncCollection:
    col = gks.Collection.open(work / "idx", "faq", base_dir=work)
    col.add_documents([{"id": "faq-1", "text": "Refunds are paid within 14 days."}])
    return col


def smoke_langchain() -> None:
    from groundkit.integrations.langchain import GroundkitRetriever, citation_of

    with tempfile.TemporaryDirectory() as tmp, _faq(Path(tmp)) as col:
        doc = GroundkitRetriever(collection=col, top_k=1).invoke("refunds")[0]
        assert col.fetch_chunk(citation_of(doc).chunk_id).verification == "verified"
    print("langchain: retrieved and verified")


def smoke_llama_index() -> None:
    from groundkit.integrations.llama_index import GroundkitRetriever, citation_of

    with tempfile.TemporaryDirectory() as tmp, _faq(Path(tmp)) as col:
        scored = GroundkitRetriever(col, top_k=1).retrieve("refunds")[0]
        assert col.fetch_chunk(citation_of(scored).chunk_id).verification == "verified"
    print("llama-index: retrieved and verified")


def smoke_haystack() -> None:
    from haystack import Pipeline

    from groundkit.integrations.haystack import GroundkitRetriever, citation_of

    with tempfile.TemporaryDirectory() as tmp, _faq(Path(tmp)) as col:
        pipeline = Pipeline()
        pipeline.add_component("retriever", GroundkitRetriever(col, top_k=1))
        out = pipeline.run({"retriever": {"query": "refunds"}})
        chunk_id = citation_of(out["retriever"]["documents"][0]).chunk_id
        assert col.fetch_chunk(chunk_id).verification == "verified"
    print("haystack: retrieved and verified")


def smoke_pandas() -> None:
    with tempfile.TemporaryDirectory() as tmp, _faq(Path(tmp)) as col:
        frame = col.search("refunds", top_k=1).to_pandas()
        assert list(frame["citation.chunk_id"]) == [col.search("refunds", top_k=1)[0].chunk_id]
    print("pandas: results as a DataFrame")


def smoke_postgres() -> None:
    # No server here: reaching one proves asyncpg is importable and used, and a refused
    # connection must come back as groundkit's own error.
    async def run() -> None:
        dsn = "postgresql://nobody@127.0.0.1:9/none"
        try:
            await groundkit.Collection.open(metadata_url=dsn, storage_uri=tempfile.mkdtemp())
        except groundkit.StorageError as exc:
            print(f"postgres: asyncpg used, refused connection reported: {exc}"[:160])
            return
        raise SystemExit("opened a collection on a closed port")

    asyncio.run(run())


def smoke_ray() -> None:
    # A throwaway Ray instance in this process, on 127.0.0.1; BM25 only (no model here).
    import os

    os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
    with tempfile.TemporaryDirectory() as tmp:
        docs = Path(tmp) / "docs"
        docs.mkdir()
        (docs / "a.md").write_text("# Refunds\n\nRefunds take five days.\n", encoding="utf-8")
        (docs / "b.md").write_text("# Shipping\n\nParcels ship on Monday.\n", encoding="utf-8")
        with gks.Collection.open(index_dir=Path(tmp) / "index", base_dir=tmp) as col:
            executor = groundkit.ingestion.RayExecutor("local")
            report = col.ingest(docs, executor=executor)
            assert report.added == ["docs/a.md", "docs/b.md"], report
            hit = col.search("refunds", top_k=1).results[0]
            assert col.fetch_chunk(hit.chunk_id).verification == "verified"
    print("ray: ingested on a local Ray instance and verified")


def smoke_serve() -> None:
    # The stdio MCP server: initialize, list the tools, then stdin closes and it exits.
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "tea.md").write_text("Green tea is brewed at about 80 degrees.\n")
        grk = [sys.executable, "-m", "groundkit"]
        index = ["--index-dir", f"{tmp}/idx"]
        subprocess.run([*grk, "ingest", tmp, "--base-dir", tmp, *index, "-q"], check=True)
        messages: list[dict[str, Any]] = [
            {
                "jsonrpc": "2.0",
                "id": 1,
                "method": "initialize",
                "params": {
                    "protocolVersion": "2025-06-18",
                    "capabilities": {},
                    "clientInfo": {"name": "smoke", "version": "0"},
                },
            },
            {"jsonrpc": "2.0", "method": "notifications/initialized"},
            {"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
        ]
        # A client waits for each reply before it closes stdin: closing stdin is the
        # protocol's shutdown, and a server may drop requests still in flight then.
        log_path = Path(tmp) / "serve.log"
        log = log_path.open("w")  # a file: a full pipe could stall the server
        with (
            log,
            subprocess.Popen(
                [*grk, "serve", *index],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=log,
                text=True,
            ) as server,
        ):
            assert server.stdin is not None and server.stdout is not None
            watchdog = threading.Timer(120, server.kill)  # a stalled server fails, not hangs
            watchdog.start()
            replies: dict[int, dict[str, Any]] = {}
            for message in messages:
                server.stdin.write(json.dumps(message) + "\n")
                server.stdin.flush()
                if "id" in message:
                    while message["id"] not in replies:
                        line = server.stdout.readline()
                        if not line:
                            raise SystemExit(f"serve ended early: {log_path.read_text()}")
                        reply = json.loads(line)
                        replies[reply.get("id", -1)] = reply
            server.stdin.close()
            code = server.wait(timeout=120)
            watchdog.cancel()
        tools = replies[2]["result"]["tools"]
        names = sorted(t["name"] for t in tools)
        assert "search" in names and code == 0, (names, log_path.read_text())
        print(f"serve: {len(names)} tools over stdio, exit code {code}")


def smoke_inspect() -> None:
    # grk inspect on a free port: a search page with its verdict, and a PDF page as a PNG.
    import httpx

    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "tea.pdf").write_bytes(_pdf("Green tea is brewed at about 80 degrees."))
        grk = [sys.executable, "-m", "groundkit"]
        index = f"{tmp}/idx"
        subprocess.run(
            [*grk, "ingest", tmp, "--base-dir", tmp, "--index-dir", index, "-q"], check=True
        )
        with subprocess.Popen(
            [*grk, "inspect", index, "--port", "0"], stderr=subprocess.PIPE, text=True
        ) as server:
            assert server.stderr is not None
            watchdog = threading.Timer(120, server.kill)  # a stalled server fails, not hangs
            watchdog.start()
            try:
                line = server.stderr.readline()
                if "citation inspector at " not in line:
                    raise SystemExit(f"inspect did not start: {line}")
                url = line.split(" at ", 1)[1].strip()
                page = httpx.get(url + "c/default/", params={"q": "green tea"})
                assert page.status_code == 200 and "verdict-verified" in page.text, page.text
                chunk = page.text.split('class="result-link" href="', 1)[1].split('"', 1)[0]
                shown = httpx.get(url.rstrip("/") + chunk)
                png = shown.text.split('<img src="', 1)[1].split('"', 1)[0]
                image = httpx.get(url.rstrip("/") + png)
                assert image.content.startswith(b"\x89PNG"), image.status_code
            finally:
                watchdog.cancel()
                server.terminate()
                server.wait(timeout=60)
        print(f"inspect: search, result and a {len(image.content)}-byte page image at {url}")


def smoke_test() -> None:
    # A user's test file: the grounded fixture and a conformance suite, run by pytest.
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        (work / "tea.md").write_text("Green tea is brewed at about 80 degrees.\n")
        (work / "pytest.ini").write_text("[pytest]\nasyncio_mode = auto\n")
        (work / "test_user.py").write_text(
            textwrap.dedent(
                """
                import asyncio
                from pathlib import Path

                import pytest

                import groundkit
                import groundkit.storage
                from groundkit.testing.conformance import MetadataStoreConformance

                HERE = Path(__file__).parent


                def test_answer_is_grounded(grounded):
                    async def search():
                        async with groundkit.Collection.open(HERE / "idx", base_dir=HERE) as col:
                            await col.ingest(HERE / "tea.md")
                            return await col.search("green tea")

                    grounded(["brewed at about 80 degrees"], asyncio.run(search()))


                class TestSQLite(MetadataStoreConformance):
                    @pytest.fixture
                    async def store(self, tmp_path):
                        path = tmp_path / "m.sqlite3"
                        store = await groundkit.storage.SQLiteMetadataStore.open(path)
                        yield store
                        await store.close()
                """
            )
        )
        done = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(work)],
            cwd=work,
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
        print(done.stdout[-600:])
        assert done.returncode == 0, done.stderr[-2000:]


SMOKES: dict[str, Callable[[], None]] = {
    "pdf": smoke_pdf,
    "ocr": smoke_ocr,
    "pdf-legacy": smoke_pdf_legacy,
    "html": smoke_html,
    "main-content": smoke_main_content,
    "docx": smoke_docx,
    "pptx": smoke_pptx,
    "epub": smoke_epub,
    "dense,local": smoke_dense_local,
    "dense,onnx": smoke_dense_onnx,
    "langchain": smoke_langchain,
    "llama-index": smoke_llama_index,
    "haystack": smoke_haystack,
    "pandas": smoke_pandas,
    "postgres": smoke_postgres,
    "ray": smoke_ray,
    "serve": smoke_serve,
    "inspect": smoke_inspect,
    "test": smoke_test,
}


def main(argv: list[str]) -> int:
    if len(argv) != 1 or argv[0] not in SMOKES:
        print(f"usage: extra_smoke.py {{{'|'.join(SMOKES)}}}", file=sys.stderr)
        return 2
    SMOKES[argv[0]]()
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
