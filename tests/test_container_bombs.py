"""EPUB and DOCX whose markup would cost more to parse than the limits allow (ADR 0097).

A few kilobytes of runs of short tags unpack to megabytes of markup, and every tag
becomes objects of a parsed tree: gigabytes and minutes for one file. The limits are
lowered here so that small files cross them; each is checked before any parser runs.
"""

from __future__ import annotations

import io
import zipfile
from pathlib import Path

import docx
import ebooklib.epub
import pytest

from groundkit import Collection, IngestConfig, IngestionError
from groundkit.extraction import base as extraction_base
from groundkit.extraction import docx_extractor, epub_extractor
from groundkit.extraction import epub as epub_module


def _xhtml(body: str) -> bytes:
    return (
        '<?xml version="1.0"?><html xmlns="http://www.w3.org/1999/xhtml"><head><title>c'
        f"</title></head><body>{body}</body></html>"
    ).encode()


def _epub(chapters: dict[str, bytes], spine: list[str] | None = None) -> bytes:
    """An EPUB of ``chapters`` (id -> XHTML), read in ``spine`` order (default: as given)."""
    items = "".join(
        f'<item id="{i}" href="{i}.xhtml" media-type="application/xhtml+xml"/>' for i in chapters
    )
    refs = "".join(f'<itemref idref="{i}"/>' for i in (spine or list(chapters)))
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr(zipfile.ZipInfo("mimetype"), "application/epub+zip")
        archive.writestr(
            "META-INF/container.xml",
            '<?xml version="1.0"?><container version="1.0" '
            'xmlns="urn:oasis:names:tc:opendocument:xmlns:container"><rootfiles><rootfile '
            'full-path="OEBPS/content.opf" media-type="application/oebps-package+xml"/>'
            "</rootfiles></container>",
        )
        archive.writestr(
            "OEBPS/content.opf",
            '<?xml version="1.0"?><package xmlns="http://www.idpf.org/2007/opf" version="3.0" '
            'unique-identifier="id"><metadata xmlns:dc="http://purl.org/dc/elements/1.1/">'
            '<dc:identifier id="id">x</dc:identifier><dc:title>T</dc:title>'
            f"<dc:language>en</dc:language></metadata><manifest>{items}</manifest>"
            f"<spine>{refs}</spine></package>",
        )
        for name, content in chapters.items():
            archive.writestr(f"OEBPS/{name}.xhtml", content)
    return out.getvalue()


def _docx(paragraphs: int) -> bytes:
    """A DOCX of ``paragraphs`` paragraphs of one word each."""
    document = docx.Document()
    for _ in range(paragraphs):
        document.add_paragraph("w")
    out = io.BytesIO()
    document.save(out)
    return out.getvalue()


def _unparsed(*_: object, **__: object) -> None:
    raise AssertionError("parsed a file over the markup limit")


async def test_an_epub_chapter_over_the_part_limit_is_refused_before_parsing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    book = _epub({"c1": _xhtml("<p>w</p>" * 200)})  # some 400 marks in the chapter
    monkeypatch.setattr(extraction_base, "MAX_PART_MARKUP", 1000, raising=False)
    assert "w\n\nw" in (await epub_extractor().extract_bytes(book)).text
    monkeypatch.setattr(extraction_base, "MAX_PART_MARKUP", 300, raising=False)
    monkeypatch.setattr(epub_module, "body_text_and_headings", _unparsed)
    with pytest.raises(IngestionError, match=r"spine entry 1 holds \d+ marks .* limit of 300"):
        await epub_extractor().extract_bytes(book)


async def test_an_epub_chapter_over_the_part_size_is_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    book = _epub({"c1": _xhtml("<p>" + "w " * 2000 + "</p>")})
    monkeypatch.setattr(extraction_base, "MAX_PART_BYTES", 1000, raising=False)
    monkeypatch.setattr(epub_module, "body_text_and_headings", _unparsed)
    with pytest.raises(IngestionError, match=r"spine entry 1 is \d+ bytes, over the limit of 1000"):
        await epub_extractor().extract_bytes(book)


async def test_a_chapter_named_many_times_counts_each_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The container holds the chapter's marks once; its spine has them parsed 50 times.
    book = _epub({"c1": _xhtml("<p>w</p>" * 20)}, spine=["c1"] * 50)
    monkeypatch.setattr(extraction_base, "MAX_MARKUP", 1000, raising=False)
    monkeypatch.setattr(epub_module, "body_text_and_headings", _unparsed)
    with pytest.raises(IngestionError, match=r"more than 1000 marks .* to parse"):
        await epub_extractor().extract_bytes(book)


async def test_a_docx_over_the_markup_limit_is_refused_before_python_docx_opens_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    data = _docx(400)
    assert (await docx_extractor().extract_bytes(data)).text.count("w") == 400
    monkeypatch.setattr(extraction_base, "MAX_MARKUP", 1000, raising=False)
    monkeypatch.setattr(docx, "Document", _unparsed)
    with pytest.raises(IngestionError, match=r"DOCX holds more than 1000 marks of markup"):
        await docx_extractor().extract_bytes(data)


async def test_running_out_of_memory_fails_the_file_with_an_ingestion_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def out_of_memory(*_: object) -> None:
        raise MemoryError

    monkeypatch.setattr(epub_module, "body_text_and_headings", out_of_memory)
    with pytest.raises(IngestionError, match=r"ran out of memory"):
        await epub_extractor().extract_bytes(_epub({"c1": _xhtml("<p>w</p>")}))


async def test_the_spine_is_looked_up_in_one_pass(monkeypatch: pytest.MonkeyPatch) -> None:
    # ebooklib's lookup scans every item: once per spine entry, time quadratic in them.
    def scan(*_: object) -> None:
        raise AssertionError("looked an item up by scanning")

    monkeypatch.setattr(ebooklib.epub.EpubBook, "get_item_with_id", scan)
    chapters = {f"c{i}": _xhtml(f"<p>chapter {i}</p>") for i in range(3)}
    extraction = await epub_extractor().extract_bytes(_epub(chapters, spine=["c2", "c0", "c2"]))
    assert extraction.text.split("\n\f\n") == ["chapter 2", "chapter 0", "chapter 2"]


async def test_a_bomb_fails_alone_and_the_folder_ingests(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    base = tmp_path / "docs"
    base.mkdir()
    (base / "a.md").write_text("Green tea is steeped briefly.\n", encoding="utf-8")
    (base / "b.epub").write_bytes(_epub({"c1": _xhtml("<p>w</p>" * 2000)}))
    (base / "c.md").write_text("Black tea is steeped longer.\n", encoding="utf-8")
    monkeypatch.setattr(extraction_base, "MAX_MARKUP", 2000, raising=False)
    config = IngestConfig(extraction_cache_bytes=0)
    async with Collection.open(tmp_path / "idx", base_dir=base, ingest=config) as col:
        report = await col.ingest(base)
    assert report.added == ["a.md", "c.md"]
    [failure] = report.failed
    assert failure.source == "b.epub"
    assert "over the limit" in failure.reason and "2000 marks" in failure.reason
