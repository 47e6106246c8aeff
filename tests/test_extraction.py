"""Extractors on real files: deterministic text, page offsets, charsets, missing extras."""

from __future__ import annotations

import importlib.metadata
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from groundkit import ConfigurationError, IngestionError
from groundkit.extraction import (
    PAGE_SEPARATOR,
    ExtractorProtocol,
    active_extractors,
    decode_body,
    docx_extractor,
    epub_extractor,
    html_extractor,
    main_content_extractor,
    pdf_extractor,
    pptx_extractor,
)
from groundkit.extraction.pdf_legacy import pypdf_extractor
from tests.sources import HTML_PAGE, PAGES, image_only_pdf, make_pdf

_ALL = (
    pdf_extractor,
    pypdf_extractor,
    html_extractor,
    main_content_extractor,
    docx_extractor,
    pptx_extractor,
    epub_extractor,
)


def _clear_caches() -> None:
    for cached in (
        pdf_extractor,
        pypdf_extractor,
        html_extractor,
        docx_extractor,
        pptx_extractor,
        epub_extractor,
        main_content_extractor,
        active_extractors,
    ):
        cached.cache_clear()


@pytest.fixture
def without(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[str], None]]:
    """Make a module unimportable (as if its extra were not installed) for one test."""

    def block(module: str) -> None:
        monkeypatch.setitem(sys.modules, module, None)
        _clear_caches()

    yield block
    monkeypatch.undo()
    _clear_caches()


class TestPdf:
    async def test_pages_and_offsets(self, tmp_path: Path) -> None:
        path = tmp_path / "doc.pdf"
        path.write_bytes(make_pdf())
        extraction = await pdf_extractor().extract_file(path)
        text, starts = extraction.text, extraction.page_starts
        assert len(starts) == len(PAGES) and starts[0] == 0
        pages = text.split(PAGE_SEPARATOR)
        assert len(pages) == len(PAGES)
        for number, (start, page) in enumerate(zip(starts, pages, strict=True), start=1):
            assert text[start : start + len(page)] == page
            # The distinctive first word of each page survives extraction intact,
            # Greek and Cyrillic included.
            assert PAGES[number - 1].split()[0] in page
        assert await pdf_extractor().extract(path) == text

    async def test_same_bytes_same_text(self, tmp_path: Path) -> None:
        data = make_pdf()
        first = await pdf_extractor().extract_bytes(data)
        second = await pdf_extractor().extract_bytes(data)
        assert first == second

    def test_identity_is_distribution_and_version(self) -> None:
        extractor = pdf_extractor()
        version = importlib.metadata.version("pypdfium2")
        assert extractor.identity == f"groundkit-pdf/1+pypdfium2/{version}"
        assert isinstance(extractor, ExtractorProtocol)
        assert pdf_extractor() is extractor  # memoised

    async def test_password_protected_is_refused(self) -> None:
        with pytest.raises(IngestionError, match="needs a password"):
            await pdf_extractor().extract_bytes(make_pdf(user_password="hunter2"))

    async def test_empty_user_password_opens(self) -> None:
        # Encrypted with only an owner password: readers open it without asking.
        extraction = await pdf_extractor().extract_bytes(make_pdf(PAGES[:1], user_password=""))
        assert "Photovoltaic" in extraction.text

    @pytest.mark.parametrize("cut", [0.25, 0.5, 0.9, 0.99])
    async def test_truncated_is_refused(self, cut: float) -> None:
        data = make_pdf()
        with pytest.raises(IngestionError, match="not a readable PDF"):
            await pdf_extractor().extract_bytes(data[: int(len(data) * cut)])

    @pytest.mark.parametrize("data", [b"", b"hello, not a pdf", b"%PDF-1.4\n" + b"\x00" * 64])
    async def test_garbage_is_refused(self, data: bytes) -> None:
        with pytest.raises(IngestionError):
            await pdf_extractor().extract_bytes(data)

    async def test_image_only_has_no_text(self) -> None:
        extraction = await pdf_extractor().extract_bytes(image_only_pdf())
        assert extraction.text.strip() == ""
        assert extraction.page_starts == (0,)

    async def test_unreadable_file(self, tmp_path: Path) -> None:
        with pytest.raises(IngestionError, match="cannot read"):
            await pdf_extractor().extract(tmp_path / "missing.pdf")


class TestHtml:
    async def test_content_only(self) -> None:
        extraction = await html_extractor().extract_bytes(HTML_PAGE.encode("cp1252"))
        text = extraction.text
        for hidden in ("scriptword", "commentword", "noscriptword", "templateword", "color"):
            assert hidden not in text
        assert extraction.title == "Café “Guide”"
        assert text.startswith("Café “Guide”\n\nEspresso basics\n\n")
        assert "forcing hot water through finely ground coffee.\nCrema sits on top." in text
        assert "\n\nRistretto\n\nLungo\n\n" in text
        assert "  grind   fine\n  tamp    firm" in text  # <pre> keeps its spacing
        assert text.endswith("dose 18 g")

    async def test_whitespace_normalised(self) -> None:
        html = b"<p>a\t\tb\xc2\xa0 c</p>\n\n\n<div>  </div><p>\n d </p>"
        assert (await html_extractor().extract_bytes(html)).text == "a b c\n\nd"

    async def test_no_title(self) -> None:
        extraction = await html_extractor().extract_bytes(b"<p>only a paragraph</p>")
        assert extraction.title is None
        assert extraction.page_starts == ()

    async def test_deep_nesting(self) -> None:
        depth = 3000
        html = ("<div>" * depth + "deep" + "</div>" * depth).encode()
        assert (await html_extractor().extract_bytes(html)).text == "deep"

    async def test_a_pre_of_millions_of_blank_lines(self) -> None:
        # Its blank lines were dropped one at a time from the front, quadratic in their
        # number: hours for this 6 MB page (the suite's timeout fails it without the fix).
        html = b"<p>before</p><pre>" + b"\n" * 6_000_000 + b"  kept\n\n  lines \n" + b"</pre>"
        text = (await html_extractor().extract_bytes(html)).text
        assert text == "before\n\n  kept\n\n  lines"

    async def test_file_and_bytes_agree(self, tmp_path: Path) -> None:
        path = tmp_path / "page.html"
        path.write_bytes(HTML_PAGE.encode("cp1252"))
        from_file = await html_extractor().extract(path)
        assert from_file == (await html_extractor().extract_bytes(path.read_bytes())).text

    def test_identity(self) -> None:
        version = importlib.metadata.version("beautifulsoup4")
        assert html_extractor().identity == f"beautifulsoup4/{version}"


class TestDecode:
    def test_utf8_first(self) -> None:
        # Declared latin-1, but the bytes are valid UTF-8: UTF-8 wins.
        assert decode_body("naïve".encode(), "iso-8859-1") == "naïve"

    def test_bom(self) -> None:
        assert decode_body(b"\xef\xbb\xbfhi") == "hi"
        assert decode_body("hi".encode("utf-16")) == "hi"

    def test_declared_then_meta(self) -> None:
        data = '<meta charset="shift_jis"><p>東京</p>'.encode("shift_jis")
        assert "東京" in decode_body(data)
        # The server's charset comes before the page's own declaration.
        data = "<meta charset='utf-8'>café".encode("cp1252")
        assert decode_body(data, "windows-1252").endswith("café")

    def test_latin1_labels_mean_windows_1252(self) -> None:
        data = "“quoted”".encode("cp1252")
        assert decode_body(data, "ISO-8859-1") == "“quoted”"

    def test_undeclared_or_unknown_falls_back_to_replacement(self) -> None:
        assert decode_body(b"caf\xe9") == "caf\ufffd"
        assert decode_body(b"caf\xe9", "no-such-charset") == "caf\ufffd"
        assert decode_body(b"caf\xe9", "rot13") == "caf\ufffd"  # not a text encoding

    def test_a_label_naming_a_codec_that_refuses_everything_is_ignored(self) -> None:
        # Python's "undefined" codec raises a bare UnicodeError for any input.
        assert decode_body(b"caf\xe9", "undefined") == "caf\ufffd"
        data = b"<meta charset='undefined'><p>caf\xe9</p>"
        assert decode_body(data).endswith("caf\ufffd</p>")

    @pytest.mark.parametrize(
        "label", ["unicode_escape", "raw_unicode_escape", "punycode", "idna", "utf-7", "rot13"]
    )
    def test_a_python_codec_that_is_no_web_encoding_is_ignored(self, label: str) -> None:
        # Such a codec rewrites the text (escapes become line ends, lone surrogates): the
        # bytes read as UTF-8 with U+FFFD, as for a label no one knows.
        data = b"\\u0041 \\ud800 C:\\new caf\xe9"
        expected = "\\u0041 \\ud800 C:\\new caf\ufffd"
        assert decode_body(data, label) == expected
        page = b"<meta charset='" + label.encode() + b"'>" + data
        assert decode_body(page).endswith(expected)

    @pytest.mark.parametrize(
        ("label", "text"),
        [
            ("Shift_JIS", "日本"),
            ("windows-1251", "мир"),
            ("ISO-8859-2", "łódź"),
            ("gb2312", "中文"),
        ],
    )
    def test_web_encodings_are_read(self, label: str, text: str) -> None:
        data = text.encode(label)
        assert decode_body(data, label) == text

    @pytest.mark.parametrize("label", ["utf-16", "UTF-16LE", "utf-16be"])
    def test_a_meta_utf16_label_reads_as_utf8(self, label: str) -> None:
        # A <meta> readable as ASCII was not written in UTF-16 (WHATWG): the bytes are
        # not decoded pairwise into CJK, whether their count is even or odd.
        for word in (b"lemur", b"lemurs"):
            data = b"<meta charset='" + label.encode() + b"'><p>caf\xe9 " + word + b"</p>"
            assert decode_body(data).endswith("caf\ufffd " + word.decode() + "</p>")

    def test_meta_ignored_for_plain_text(self) -> None:
        data = b"<meta charset='cp1252'> caf\xe9"
        assert decode_body(data, markup=False).endswith("caf\ufffd")


class TestRegistry:
    def test_all_active(self) -> None:
        active = active_extractors()
        assert set(active) == {e().identity for e in _ALL}
        assert all(active[key].identity == key for key in active)

    def test_missing_pdf_extra_hides_only_pdf(self, without: Callable[[str], None]) -> None:
        without("pypdfium2")
        with pytest.raises(ConfigurationError, match=r"pip install groundkit\[pdf\]"):
            pdf_extractor()
        assert set(active_extractors()) == {e().identity for e in _ALL if e is not pdf_extractor}

    def test_legacy_pdf_extractor_only_where_pypdf_is(self, without: Callable[[str], None]) -> None:
        # Documents ingested with pypdf verify where it is installed; new ones never use it.
        assert active_extractors()[pypdf_extractor().identity] is pypdf_extractor()
        without("pypdf")
        with pytest.raises(ConfigurationError, match=r"pip install groundkit\[pdf-legacy\]"):
            pypdf_extractor()
        assert set(active_extractors()) == {e().identity for e in _ALL if e is not pypdf_extractor}

    def test_missing_html_extra_hides_only_html(self, without: Callable[[str], None]) -> None:
        without("bs4")
        with pytest.raises(ConfigurationError, match=r"pip install groundkit\[html\]"):
            html_extractor()
        # EPUB chapters are read by the HTML rules, so it needs bs4 too.
        assert set(active_extractors()) == {
            e().identity for e in _ALL if e not in (html_extractor, epub_extractor)
        }

    def test_importing_groundkit_loads_neither_library(self) -> None:
        code = (
            "import sys, groundkit, groundkit.extraction, groundkit.verification.sources; "
            "print(sorted({'pypdf', 'pypdfium2', 'bs4'} & set(sys.modules)))"
        )
        done = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, check=True
        )
        assert done.stdout.strip() == "[]"
