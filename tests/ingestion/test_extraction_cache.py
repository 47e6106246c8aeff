"""The host-local record of extractions: an unchanged file is not extracted again,
and a record is used only for exactly the bytes and run identity it was made from."""

from __future__ import annotations

import hashlib
import os
import stat
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from groundkit import Collection, IngestConfig
from groundkit.errors import IngestionError
from groundkit.extraction.base import Extraction
from groundkit.extraction.cache import (
    ExtractionCache,
    cached_extraction,
    extraction_cache,
    run_identity,
)
from groundkit.utils.geometry import PageFrame, encode_geometry
from tests.sources import make_pdf

pytest.importorskip("pypdfium2")
pytest.importorskip("fpdf")

PAGES = [
    "Espresso grinders need a fine burr setting for a short extraction.",
    "Tamping pressure of about fifteen kilograms gives an even puck.",
]


@pytest.fixture
def cache_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "cache"
    monkeypatch.setenv("GROUNDKIT_CACHE_DIR", str(root))
    return root / "extractions"


@pytest.fixture
def runs(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts pdfium reads of a PDF: whole extractions (``PdfExtractor._run``, ingest) and
    text-only reads (``PdfExtractor._text``, citation checks)."""
    from groundkit.extraction.pdf import PdfExtractor

    calls: list[int] = []
    whole, text_only = PdfExtractor._run, PdfExtractor._text

    def counted(self: Any, data: bytes, charset: str | None) -> Extraction:
        calls.append(len(data))
        return whole(self, data, charset)

    def counted_text(self: Any, data: bytes) -> str:
        calls.append(len(data))
        return text_only(self, data)

    monkeypatch.setattr(PdfExtractor, "_run", counted)
    monkeypatch.setattr(PdfExtractor, "_text", counted_text)
    return calls


def _folder(tmp_path: Path, pages: list[str] = PAGES) -> Path:
    docs = tmp_path / "docs"
    docs.mkdir(exist_ok=True)
    (docs / "guide.pdf").write_bytes(make_pdf(pages))
    (docs / "notes.md").write_text("# Notes\n\nMilk is steamed to sixty degrees.\n")
    return docs


async def _ingest(tmp_path: Path, docs: Path, config: IngestConfig | None = None) -> Any:
    async with Collection.open(tmp_path / "idx", base_dir=docs, ingest=config) as col:
        return await col.ingest(docs)


async def _search_verdict(tmp_path: Path, docs: Path, query: str) -> tuple[str, str]:
    async with Collection.open(tmp_path / "idx", base_dir=docs) as col:
        hit = (await col.search(query, 1)).results[0]
        return hit.content, (await col.verify(hit)).verification


async def test_an_unchanged_pdf_is_not_extracted_again(
    tmp_path: Path, cache_dir: Path, runs: list[int]
) -> None:
    docs = _folder(tmp_path)
    first = await _ingest(tmp_path, docs)
    assert first.added == ["guide.pdf", "notes.md"] and len(runs) == 1
    assert len(list(cache_dir.glob("*.gkx"))) == 1

    again = await _ingest(tmp_path, docs)
    assert again.unchanged == ["guide.pdf", "notes.md"]
    assert len(runs) == 1  # read back, not extracted

    # Citations are checked against a fresh extraction, never the record.
    text, verdict = await _search_verdict(tmp_path, docs, "tamping pressure puck")
    assert "Tamping pressure" in text and verdict == "verified"
    assert len(runs) == 2


async def test_edited_bytes_are_extracted(tmp_path: Path, cache_dir: Path, runs: list[int]) -> None:
    docs = _folder(tmp_path)
    await _ingest(tmp_path, docs)
    (docs / "guide.pdf").write_bytes(make_pdf([*PAGES, "Descaling every month keeps it clean."]))
    report = await _ingest(tmp_path, docs)
    assert report.updated == ["guide.pdf"] and len(runs) == 2
    text, verdict = await _search_verdict(tmp_path, docs, "descaling month")
    assert "Descaling" in text and verdict == "verified"


async def test_another_ocr_setting_is_another_record(
    tmp_path: Path, cache_dir: Path, runs: list[int]
) -> None:
    docs = _folder(tmp_path)
    await _ingest(tmp_path, docs, IngestConfig(ocr="off"))
    await _ingest(tmp_path, docs, IngestConfig(ocr="required"))
    assert len(runs) == 2
    assert len(list(cache_dir.glob("*.gkx"))) == 2


async def test_no_record_with_the_cache_off(
    tmp_path: Path, cache_dir: Path, runs: list[int]
) -> None:
    docs = _folder(tmp_path)
    config = IngestConfig(extraction_cache_bytes=0)
    await _ingest(tmp_path, docs, config)
    await _ingest(tmp_path, docs, config)
    assert len(runs) == 2 and not cache_dir.exists()


def _only_record(cache_dir: Path) -> Path:
    (record,) = cache_dir.glob("*.gkx")
    return record


async def test_a_damaged_record_is_a_miss_and_is_replaced(
    tmp_path: Path, cache_dir: Path, runs: list[int]
) -> None:
    docs = _folder(tmp_path)
    await _ingest(tmp_path, docs)
    record = _only_record(cache_dir)
    data = bytearray(record.read_bytes())
    data[-5] ^= 0xFF
    record.write_bytes(bytes(data))
    report = await _ingest(tmp_path, docs)
    assert report.unchanged == ["guide.pdf", "notes.md"] and len(runs) == 2
    await _ingest(tmp_path, docs)  # the record written anew is whole
    assert len(runs) == 2


@pytest.mark.parametrize("damage", ["truncated", "renamed", "group-writable", "fifo", "link"])
async def test_records_that_are_not_exactly_ours_are_not_used(
    tmp_path: Path, cache_dir: Path, runs: list[int], damage: str
) -> None:
    docs = _folder(tmp_path)
    await _ingest(tmp_path, docs)
    record = _only_record(cache_dir)
    if damage == "truncated":
        record.write_bytes(record.read_bytes()[:-10])
    elif damage == "renamed":
        # A whole record of other bytes under the same run identity, in this one's place.
        cache = ExtractionCache(cache_dir.parent)
        run = _run_of(docs)
        assert cache.put(run, bytes(32), Extraction(text="Grinders differ in burr shape."))
        (cache_dir / f"{cache.key(run, bytes(32))}.gkx").replace(record)
    elif damage == "group-writable":
        record.chmod(record.stat().st_mode | stat.S_IWGRP)
    elif damage == "fifo":
        record.unlink()
        os.mkfifo(record, 0o600)
    elif damage == "link":
        target = tmp_path / "elsewhere.gkx"
        target.write_bytes(record.read_bytes())
        record.unlink()
        record.symlink_to(target)
    before = len(runs)
    report = await _ingest(tmp_path, docs)
    assert "guide.pdf" in report.unchanged
    assert len(runs) == before + 1  # extracted again, and nothing was waited on


async def test_a_folder_others_can_write_is_not_used(
    tmp_path: Path, cache_dir: Path, runs: list[int]
) -> None:
    docs = _folder(tmp_path)
    await _ingest(tmp_path, docs)
    cache_dir.chmod(0o777)
    await _ingest(tmp_path, docs)
    assert len(runs) == 2


def _run_of(docs: Path) -> str:
    from groundkit.ingestion.extracted import pdf_extractor_for

    run = run_identity(pdf_extractor_for(IngestConfig())())
    assert run is not None
    return run


async def test_a_planted_record_never_makes_a_citation_verify(
    tmp_path: Path, cache_dir: Path
) -> None:
    """What a record says is stored as the document's text, but checks re-extract: a
    record that lies gives citations that are found drifted, never verified."""
    from groundkit.extraction.pdf import PdfExtractor
    from groundkit.ingestion.extracted import pdf_extractor_for

    docs = _folder(tmp_path)
    data = (docs / "guide.pdf").read_bytes()
    extractor = pdf_extractor_for(IngestConfig())()
    assert isinstance(extractor, PdfExtractor)
    real = await extractor.extract_bytes(data)
    lie = real.text.replace("fifteen", "ninety")
    planted = Extraction(
        text=lie, page_starts=real.page_starts, geometry=real.geometry, identity=real.identity
    )
    run = run_identity(extractor)
    assert run is not None
    assert ExtractionCache(cache_dir.parent).put(run, hashlib.sha256(data).digest(), planted)
    await _ingest(tmp_path, docs)
    text, verdict = await _search_verdict(tmp_path, docs, "ninety kilograms")
    assert "ninety" in text and verdict == "drifted"


def _broken(real: Extraction, damage: str) -> Extraction:
    """``real`` with one value no extractor writes and the store's readers refuse."""
    assert real.geometry is not None and len(real.page_starts) == 2
    pages = [list(p) for p in real.geometry["pages"]]
    if damage == "pages out of order":
        return replace(real, page_starts=real.page_starts[::-1])
    if damage == "heading level 0":
        return replace(real, headings=((0, 0, "Espresso"),))
    if damage == "headings out of order":
        return replace(real, headings=((40, 1, "Tamping"), (0, 1, "Espresso")))
    if damage == "geometry of another format":
        return replace(real, geometry={"format": 99, "pages": pages})
    if damage == "geometry of one page":
        return replace(real, geometry={**real.geometry, "pages": pages[:1]})
    pages[0][5] = "AAAA"  # base64 of bytes that are no zlib stream
    return replace(real, geometry={**real.geometry, "pages": pages})


@pytest.mark.parametrize(
    "damage",
    [
        "pages out of order",
        "heading level 0",
        "headings out of order",
        "geometry of another format",
        "geometry of one page",
        "a page blob that does not unpack",
    ],
)
async def test_a_planted_record_the_store_would_refuse_is_a_miss(
    tmp_path: Path, cache_dir: Path, runs: list[int], damage: str
) -> None:
    """A record whose checksum holds but whose values the store's readers refuse would
    leave a collection no search can read: it is extracted again instead."""
    from groundkit.ingestion.extracted import pdf_extractor_for

    docs = _folder(tmp_path)
    data = (docs / "guide.pdf").read_bytes()
    extractor = pdf_extractor_for(IngestConfig())()
    real = await extractor.extract_bytes(data)
    run = run_identity(extractor)
    assert run is not None
    digest = hashlib.sha256(data).digest()
    assert ExtractionCache(cache_dir.parent).put(run, digest, _broken(real, damage))
    before = len(runs)
    await _ingest(tmp_path, docs)
    assert len(runs) == before + 1  # the record was not used
    text, verdict = await _search_verdict(tmp_path, docs, "tamping pressure")
    assert "Tamping" in text and verdict == "verified"


async def test_a_failed_extraction_is_not_recorded(tmp_path: Path, cache_dir: Path) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "broken.pdf").write_bytes(b"%PDF-1.4 not really")
    report = await _ingest(tmp_path, docs)
    assert [f.source for f in report.failed] == ["broken.pdf"]
    assert not list(cache_dir.glob("*.gkx"))


def test_the_folder_stays_within_its_bound(tmp_path: Path) -> None:
    cache = ExtractionCache(tmp_path, max_bytes=1 << 30)
    folder = tmp_path / "extractions"
    texts = {i: os.urandom(6_000).hex() for i in range(12)}  # incompressible enough
    digests = {i: hashlib.sha256(str(i).encode()).digest() for i in texts}
    for i in range(4):
        assert cache.put("run", digests[i], Extraction(text=texts[i]))
    size = max(p.stat().st_size for p in folder.iterdir())
    for i, record in enumerate(sorted(folder.iterdir(), key=lambda p: p.name)):
        os.utime(record, (1_000 + i, 1_000 + i))  # long unused, in a known order
    bounded = ExtractionCache(tmp_path, max_bytes=10 * size + 100)
    assert bounded.get("run", digests[0]) is not None  # used now: kept past the others
    for i in range(4, 12):
        assert bounded.put("run", digests[i], Extraction(text=texts[i]))
    assert sum(p.stat().st_size for p in folder.iterdir()) <= bounded.max_bytes
    assert [bounded.get("run", digests[i]) is not None for i in range(12)] == [
        True,
        *[False] * 3,
        *[True] * 8,
    ]
    # Larger than a quarter of the bound: not kept at all.
    big = Extraction(text=os.urandom(3 * size).hex())
    assert not bounded.put("run", digests[1], big)


async def test_a_bound_far_beyond_memory_still_reads_records_back(
    tmp_path: Path, cache_dir: Path, runs: list[int]
) -> None:
    # A record used to be read with a buffer the size of the whole bound, so a bound of
    # a petabyte made every re-ingest fail with MemoryError.
    docs = _folder(tmp_path)
    config = IngestConfig(extraction_cache_bytes=1 << 50)
    assert (await _ingest(tmp_path, docs, config)).added
    report = await _ingest(tmp_path, docs, config)
    assert len(report.unchanged) == 2 and not report.failed and len(runs) == 1


_NEAR_ITS_MEMORY_LIMIT = """
import hashlib, resource, sys
from pathlib import Path
from groundkit.extraction.base import Extraction
from groundkit.extraction.cache import ExtractionCache

# Control characters are escaped six to one in JSON: the record needs some 180 MB.
extraction = Extraction(text="\\x01" * 30_000_000)
cache = ExtractionCache(Path(sys.argv[1]), max_bytes=1 << 40)
pages = int(Path("/proc/self/statm").read_text().split()[0])
limit = pages * resource.getpagesize() + 120_000_000
resource.setrlimit(resource.RLIMIT_AS, (limit, resource.RLIM_INFINITY))
print(cache.put("run", hashlib.sha256(b"bytes").digest(), extraction))
"""


@pytest.mark.skipif(not Path("/proc/self/statm").exists(), reason="needs /proc")
def test_a_record_too_large_for_the_memory_left_is_not_kept(tmp_path: Path) -> None:
    # Encoding the record used to raise MemoryError out of the ingest of a file whose
    # extraction had succeeded; now the record is only not written.
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-c", _NEAR_ITS_MEMORY_LIMIT, str(tmp_path)],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "False"
    assert not list(tmp_path.rglob("*.gkx*"))


def test_only_extractors_that_state_their_run_identity_are_cached() -> None:
    class Foreign:
        identity = "foreign/1"

    assert run_identity(Foreign()) is None  # type: ignore[arg-type]
    assert extraction_cache(0) is None
    assert extraction_cache(1 << 20) is extraction_cache(1 << 20)


def test_a_record_is_kept_only_for_the_code_that_made_it(tmp_path: Path) -> None:
    # HTML text follows groundkit's own decoding rules and Python's html.parser, neither
    # of which the extractor identity names: a record made before an upgrade of either
    # must not answer after it.
    import platform

    from groundkit.extraction import cache as cache_module
    from groundkit.extraction.html import html_extractor

    run = run_identity(html_extractor())
    assert run is not None and f"-{platform.python_version()}+" in run
    sources = Path(cache_module.__file__).parent
    copies = []
    for source in [*sources.glob("*.py"), sources.parent / "utils" / "geometry.py"]:
        copy = tmp_path / source.parent.name / source.name
        copy.parent.mkdir(exist_ok=True)
        copy.write_bytes(source.read_bytes())
        copies.append(copy)
    before = cache_module.code_fingerprint(copies)
    assert before is not None and before in run
    html = tmp_path / "extraction" / "html.py"
    html.write_text(html.read_text().replace('"cp1252", "latin-1"', '"latin-1"'))
    assert cache_module.code_fingerprint(copies) not in (None, before)
    html.unlink()
    assert cache_module.code_fingerprint(copies) is None


async def test_a_failure_is_raised_and_not_kept(tmp_path: Path) -> None:
    from groundkit.extraction.base import BaseExtractor

    class Failing(BaseExtractor):
        def _run(self, data: bytes, charset: str | None) -> Extraction:
            raise IngestionError("cannot read this")

    cache = ExtractionCache(tmp_path)
    with pytest.raises(IngestionError):
        await cached_extraction(Failing("failing/1", None), b"bytes", cache)
    assert not list((tmp_path / "extractions").glob("*.gkx"))


_texts = st.text(st.characters(codec="utf-8") | st.sampled_from(["\ud800", "\udfff", "\x00"]))


@st.composite
def _extractions(draw: st.DrawFn) -> Extraction:
    """Extractions as extractors make them: page offsets and headings in order, and
    geometry (when there is any) encoded for every page."""
    starts = tuple(sorted(draw(st.lists(st.integers(0, 10**9), max_size=5))))
    geometry = None
    boxed = draw(st.booleans())
    if starts and boxed:
        texts = draw(st.lists(st.text(max_size=4), min_size=len(starts), max_size=len(starts)))
        box = (1.0, 2.0, 3.0, 4.0)
        pages = [(at, text, [box] * len(text)) for at, text in zip(starts, texts, strict=True)]
        frames = [PageFrame(0.0, 0.0, 600.0, 800.0, 0)] * len(starts)
        geometry = encode_geometry(frames, pages)
    outline = st.tuples(st.integers(0, 10**6), st.integers(1, 6), _texts)
    headings = sorted(draw(st.lists(outline, max_size=4)))
    return Extraction(
        text=draw(_texts),
        page_starts=starts,
        title=draw(st.none() | _texts),
        info=draw(st.dictionaries(_texts, _texts, max_size=3)),
        info_error=draw(st.none() | _texts),
        headings=tuple(headings),
        geometry=geometry,
        identity=draw(st.none() | _texts),
        unread=draw(st.none() | _texts),
    )


@given(extraction=_extractions(), charset=st.none() | st.sampled_from(["utf-8", "latin-1"]))
def test_a_record_reads_back_as_the_extraction_it_was_made_from(
    tmp_path_factory: pytest.TempPathFactory, extraction: Extraction, charset: str | None
) -> None:
    cache = ExtractionCache(tmp_path_factory.mktemp("x"))
    run, digest = f"extractor/1\x00charset={charset or ''}", os.urandom(32)
    assert cache.put(run, digest, extraction)
    assert cache.get(run, digest) == extraction
    assert cache.get(run + "x", digest) is None
    assert cache.get(run, bytes(32)) is None
