"""Quote checks: the quote inside the cited span, the span as indexed, every source class."""

from __future__ import annotations

import unicodedata
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from groundkit import (
    Citation,
    Collection,
    InvalidQueryError,
    RetrievalError,
    RetrievalResult,
    check_quote,
)
from groundkit.utils.url_safety import AddressPolicy
from groundkit.verification import quotes, sources
from groundkit.verification.quotes import QuoteChecker, normalize_quote, verify_quote
from tests.sources import PAGES, Route, Site, make_pdf
from tests.support import whole_file_citation, write_tree

TEA = (
    "Green tea is steeped at about eighty degrees \u2014 never boiling.\r\n"
    "The leaves are \u201cdelicate\u201d and  turn bitter\nquickly.\n\n"
    "Black tea tolerates boiling water.\n"
)


NORMALISED = {
    "\u201cquoted\u201d \u2018and\u2019 \u00abguillemets\u00bb": '"quoted" \'and\' "guillemets"',
    "a \u2013 b \u2014 c \u2212 d \u2010 e": "a - b - c - d - e",
    "wait\u2026": "wait...",
    "  many \t spaces\n\nand\u00a0lines  ": "many spaces and lines",
    "soft\u00adhyphen zero\u200bwidth \ufeffbom": "softhyphen zerowidth bom",
    "cafe\u0301": "caf\u00e9",
    "Case Stays": "Case Stays",
    "": "",
}


@pytest.mark.parametrize("raw", NORMALISED)
def test_normalize_quote(raw: str) -> None:
    assert normalize_quote(raw) == NORMALISED[raw]


_PIECES = [*"abc XY.,\n\t\u00a0", "\u201c", "\u201d", "\u2014", "\u2026", "e\u0301", "\u00ad"]


@given(st.lists(st.sampled_from(_PIECES), max_size=40).map("".join), st.data())
def test_located_offsets_slice_the_quote(text: str, data: st.DataObject) -> None:
    normal, origin = quotes._normalized(text)
    assert len(origin) == len(normal)
    if not normal:
        return
    i = data.draw(st.integers(0, len(normal) - 1))
    j = data.draw(st.integers(i + 1, len(normal)))
    wanted = normal[i:j].strip()
    if not wanted:
        return
    at = normal.find(wanted)
    start, end = origin[at][0], origin[at + len(wanted) - 1][1]
    # The range covers the quote (a "." found inside "…" takes the whole "…").
    assert wanted in normalize_quote(text[start:end])
    assert normalize_quote(text[start:end]) == wanted or "\u2026" in text[start:end]


@pytest.fixture
async def col(tmp_path: Path) -> AsyncIterator[Collection]:
    base = tmp_path / "corpus"
    write_tree(base, {"tea.md": TEA, "report.pdf": make_pdf(), "other.txt": "Coffee beans.\n"})
    async with Collection.open(tmp_path / "index", base_dir=base) as opened:
        report = await opened.ingest(base)
        assert not report.failed
        yield opened


async def _hit(col: Collection, query: str, source: str) -> RetrievalResult:
    for result in (await col.search(query)).results:
        if result.source == source:
            return result
    raise AssertionError(f"no hit in {source}")


@pytest.mark.parametrize(
    "quote",
    [
        "steeped at about eighty degrees",
        'The leaves are "delicate" and turn bitter quickly.',
        "degrees - never boiling",
        "  Black tea tolerates\nboiling water. ",
    ],
)
async def test_faithful_quotes_verify(col: Collection, quote: str) -> None:
    hit = await _hit(col, "green tea leaves", "tea.md")
    check = await check_quote(quote, hit, col.base_dir)
    assert check.ok and check.verdict == "verified", check.detail
    assert check.start_offset is not None and check.end_offset is not None
    text = (col.base_dir / "tea.md").read_bytes().decode("utf-8")
    assert normalize_quote(text[check.start_offset : check.end_offset]) == normalize_quote(quote)


@pytest.mark.parametrize(
    ("quote", "hint"),
    [
        ("steeped at about ninety degrees", "first 17 characters"),
        ("Green Tea is steeped", "first 6 characters"),
        ("Coffee beans.", "no part of it"),
        ("   ", "empty"),
    ],
)
async def test_altered_quotes_fail(col: Collection, quote: str, hint: str) -> None:
    hit = await _hit(col, "green tea leaves", "tea.md")
    check = await check_quote(quote, hit, col.base_dir)
    assert check.verdict == "not_in_span" and not check.ok
    assert hint in check.detail
    assert (check.start_offset, check.end_offset) == (None, None)


@pytest.mark.parametrize("text", ["녹차는 혈압을 낮춘다.", "বাংলা ভাষা কোনো দিন", "Café crème brûlée."])
async def test_a_decomposed_source_holds_the_composed_quote(tmp_path: Path, text: str) -> None:
    """Hangul jamo and some Indic vowel signs compose under NFC without being combining
    marks: read one character at a time, decomposed Korean never matched a composed quote."""
    source = unicodedata.normalize("NFD", text)
    assert normalize_quote(source) == unicodedata.normalize("NFC", text)
    write_tree(tmp_path, {"nfd.txt": source})
    citation = whole_file_citation("nfd.txt", source)
    quote = unicodedata.normalize("NFC", text.split()[1])
    check = await check_quote(quote, citation, tmp_path, content=source)
    assert check.verdict == "verified", check.detail
    assert check.start_offset is not None and check.end_offset is not None
    assert normalize_quote(source[check.start_offset : check.end_offset]) == quote


# Yoruba "ọkọ̀" (boat) is "ọkọ" (husband) with a grave accent no precomposed letter holds,
# "x̣" has no precomposed form, and Devanagari "कि" is "क" with a vowel sign.
MARKED = "Ọkọ̀ náà wọ́ lọ. Nx̣a kitab कि.\n"


@pytest.mark.parametrize(
    ("quote", "holds"),
    [
        ("Ọkọ̀ náà", True),
        ("Ọkọ", False),
        ("wọ", False),
        ("wọ́", True),
        ("\u0300 náà", False),
        ("Nx", False),
        ("Nx̣a", True),
        ("कि", True),
        ("क", False),
    ],
)
async def test_a_quote_never_splits_a_letter_from_its_marks(
    tmp_path: Path, quote: str, holds: bool
) -> None:
    """A substring match that stops before a combining mark (or starts on one) quotes
    another letter: the mark changes the word."""
    assert unicodedata.is_normalized("NFC", MARKED)
    write_tree(tmp_path, {"marked.txt": MARKED})
    citation = whole_file_citation("marked.txt", MARKED)
    check = await check_quote(quote, citation, tmp_path, content=MARKED)
    assert check.verdict == ("verified" if holds else "not_in_span"), check.detail
    if holds:
        assert check.start_offset is not None and check.end_offset is not None
        assert normalize_quote(MARKED[check.start_offset : check.end_offset]) == quote


async def test_drifted_span_fails_even_with_the_quote(col: Collection) -> None:
    hit = await _hit(col, "green tea leaves", "tea.md")
    path = col.base_dir / "tea.md"
    path.write_bytes(TEA.replace("eighty", "EIGHTY").encode("utf-8"))
    check = await check_quote("Black tea tolerates", hit, col.base_dir)
    assert check.verdict == "drifted"
    assert "the quote is in the indexed text" in check.detail
    path.write_bytes(b"Short.\n")
    check = await check_quote("Black tea tolerates", hit, col.base_dir)
    assert check.verdict == "drifted" and "is now 7 characters long" in check.detail


async def test_a_span_that_moved_intact_says_moved_with_where_the_quote_is(
    col: Collection,
) -> None:
    hit = await _hit(col, "green tea leaves", "tea.md")
    path = col.base_dir / "tea.md"
    head = "A line put in front.\n\n"
    path.write_bytes((head + TEA).encode("utf-8"))
    check = await check_quote("Black tea tolerates", hit, col.base_dir)
    assert check.verdict == "moved" and check.found and not check.ok, check.detail
    assert check.start_offset is not None and check.end_offset is not None
    assert (head + TEA)[check.start_offset : check.end_offset] == "Black tea tolerates"
    # The span's verdict is the one Collection.verify gives, offsets and all.
    span = await col.verify(hit)
    assert span.verification == "moved"
    assert span.current_start_offset == hit.start_offset + len(head)
    assert "Coffee" not in check.detail
    missing = await check_quote("Coffee beans", hit, col.base_dir)
    assert missing.verdict == "not_in_span" and "the span itself moved" in missing.detail


async def test_verify_quote_is_a_deprecated_alias(col: Collection) -> None:
    hit = await _hit(col, "green tea leaves", "tea.md")
    with pytest.warns(DeprecationWarning, match=r"verify_quote .* use check_quote"):
        assert await verify_quote("Black tea tolerates", hit, col.base_dir) is True
    with pytest.warns(DeprecationWarning):
        assert await verify_quote("Coffee beans", hit, col.base_dir) is False
    (col.base_dir / "tea.md").unlink()
    with pytest.warns(DeprecationWarning), pytest.raises(RetrievalError) as info:
        await verify_quote("Black tea tolerates", hit, col.base_dir)
    assert info.value.verdict == "unresolvable"


async def test_unresolvable_source(col: Collection) -> None:
    hit = await _hit(col, "green tea leaves", "tea.md")
    (col.base_dir / "tea.md").unlink()
    check = await check_quote("Black tea tolerates", hit, col.base_dir)
    assert check.verdict == "unresolvable" and "cannot read" in check.detail
    elsewhere = await check_quote("Black tea", hit, col.base_dir / "nowhere")
    assert elsewhere.verdict == "unresolvable"


async def test_extracted_source(col: Collection) -> None:
    hit = await _hit(col, "photovoltaic panels sunlight", "report.pdf")
    assert hit.source_class == "extracted"
    quote = "Photovoltaic panels convert sunlight"
    assert PAGES[0].startswith(quote)
    check = await check_quote(quote, hit, col.base_dir)
    assert check.ok and check.citation.page == 1
    altered = await check_quote("Photovoltaic panels convert moonlight", hit, col.base_dir)
    assert altered.verdict == "not_in_span"


async def test_fetch_results_and_bare_citations(col: Collection) -> None:
    hit = await _hit(col, "green tea leaves", "tea.md")
    fetched = await col.fetch_chunk(hit.chunk_id)
    assert (await check_quote("Black tea tolerates", fetched, col.base_dir)).ok
    citation = hit.citation
    assert (await check_quote("Black tea", citation, col.base_dir, content=hit.content)).ok
    # A citation given other text than its span holds: the span does not verify (the
    # text is found elsewhere in the source, so it reads as moved there).
    other = await check_quote("Black", citation, col.base_dir, content="Black")
    assert other.verdict == "moved" and not other.ok
    with pytest.raises(InvalidQueryError, match="content="):
        await check_quote("Black tea", citation, col.base_dir)
    with pytest.raises(InvalidQueryError, match="bare Citation"):
        await check_quote("Black tea", hit, col.base_dir, content=hit.content)


async def test_checker_reads_each_source_once(
    col: Collection, monkeypatch: pytest.MonkeyPatch
) -> None:
    reads: list[str] = []
    real = sources.read_source

    async def counting(
        citation: Citation, base: Path, *, snapshot_dir: Path | None = None, **options: Any
    ) -> str:
        reads.append(citation.source)
        return await real(citation, base, snapshot_dir=snapshot_dir, **options)

    monkeypatch.setattr(quotes, "read_source", counting)
    results = (await col.search("tea boiling water leaves")).results
    checker = QuoteChecker(col.base_dir)
    for result in results:
        for quote in ("tea", "water"):
            await checker.check(quote, result)
    assert sorted(reads) == sorted({r.source for r in results})


# -- snapshot (URL) sources ------------------------------------------------------


@pytest.fixture(scope="module")
def site() -> Iterator[Site]:
    served = Site()
    served.routes["/tidal.txt"] = Route(
        body=b"Tidal power uses the rise and fall of the sea.\n",
        headers={"Content-Type": "text/plain"},
    )
    try:
        yield served
    finally:
        served.close()


async def test_snapshot_source(tmp_path: Path, site: Site) -> None:
    from groundkit import UrlLoader

    loader = UrlLoader(policy=AddressPolicy.allowing("127.0.0.0/8"), timeout=5.0)
    base = tmp_path / "corpus"
    base.mkdir()
    async with Collection.open(tmp_path / "index", base_dir=base, url_loader=loader) as c:
        await c.ingest(site.url("/tidal.txt"))
        hit = (await c.search("tidal power")).results[0]
        assert hit.source_class == "snapshot" and c.snapshot_dir is not None
        quote = "the rise and fall of the sea"
        check = await check_quote(quote, hit, c.base_dir, snapshot_dir=c.snapshot_dir)
        assert check.ok
        missing = await check_quote(quote, hit, c.base_dir)
        assert missing.verdict == "unresolvable" and "snapshot_dir" in missing.detail
        assert unicodedata.is_normalized("NFC", hit.content)
