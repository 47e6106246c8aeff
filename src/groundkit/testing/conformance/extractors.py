"""A conformance suite any ``ExtractorProtocol`` implementation must pass.

Subclass it with a ``Test*`` class that provides an ``extractor_factory`` fixture
returning a zero-argument callable that builds a fresh, identically configured
extractor, and a ``sample_files`` fixture: ``(file name, bytes)`` of at least one
file it reads, each holding some text. Optionally override ``damaged_files`` with
bytes it must refuse (a truncated container, a file of another format)::

    class TestMyExtractor(ExtractorConformance):
        @pytest.fixture
        def extractor_factory(self):
            return lambda: MyExtractor(...)

        @pytest.fixture
        def sample_files(self):
            return [("report.xyz", Path("tests/data/report.xyz").read_bytes())]

        @pytest.fixture
        def damaged_files(self):
            return [("cut.xyz", Path("tests/data/report.xyz").read_bytes()[:100])]

An ``extracted`` citation is checked by running the extractor named by its identity
again on the file's bytes (ingest reads ``extract_bytes``, verification
``extract_text`` or ``extract_bytes``), so the suite pins what that rests on: an
identity of the documented form that does not drift, the same extraction from the
same bytes on every call, every instance and every entry point, page offsets,
headings and character boxes that point into the text, and damaged input failing
as an ``IngestionError`` (never a library's own exception, never a hang of the
event loop).
"""

from __future__ import annotations

import asyncio
import itertools
import json
import re
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from groundkit.contracts import valid_outline, valid_page_starts
from groundkit.errors import IngestionError
from groundkit.extraction.base import BaseExtractor, Extraction, ExtractorProtocol
from groundkit.extraction.cache import stored_fields
from groundkit.utils.geometry import DamagedGeometryError, check_geometry, decode_page
from groundkit.utils.text import describe_unencodable

__all__ = ["IDENTITY_PART", "ExtractorConformance", "check_extraction", "mangled"]

Factory = Callable[[], ExtractorProtocol]
Samples = Sequence[tuple[str, bytes]]

# One ``+``-separated part of an identity: ``<distribution or layout>/<version>``
# (``beautifulsoup4/4.13.4``, ``groundkit-docx/1``; adr/0038-extractor-identities.md).
IDENTITY_PART = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._!-]*")


def check_identity(identity: object) -> None:
    """``"<distribution>/<version>"``, or a layout and distributions joined by ``+``."""
    assert isinstance(identity, str), f"identity is a {type(identity).__name__}, not a str"
    parts = identity.split("+")
    assert all(IDENTITY_PART.fullmatch(part) for part in parts), (
        f"identity {identity!r} is not '<distribution>/<version>' parts joined by '+'"
    )


def _check_text(extraction: Extraction) -> None:
    text = extraction.text
    assert isinstance(text, str), f"text is a {type(text).__name__}, not a str"
    # It is hashed and stored: a lone surrogate has no UTF-8.
    problem = describe_unencodable(text, "the text")
    assert problem is None, problem


def _check_page_starts(extraction: Extraction) -> None:
    """Where each page begins: from 0, strictly increasing, never past the end (a
    citation's page is found by bisecting them; chunks never cross one)."""
    starts, length = extraction.page_starts, len(extraction.text)
    assert isinstance(starts, tuple), f"page_starts is a {type(starts).__name__}"
    if not starts:
        return
    assert all(type(s) is int for s in starts), f"page starts are not all ints: {starts}"
    assert valid_page_starts(list(starts)), starts
    assert starts[0] == 0, f"the first page starts at {starts[0]}, not 0"
    assert all(a < b for a, b in itertools.pairwise(starts)), (
        f"page starts are not strictly increasing: {starts}"
    )
    assert starts[-1] <= length, f"a page starts at {starts[-1]}, past the text ({length})"


def _check_headings(extraction: Extraction) -> None:
    """``(offset, level 1-6, title)`` in offset order, each offset where a line of the
    text begins (the structure chunker cuts there; a result shows the heading path)."""
    text, headings = extraction.text, extraction.headings
    assert isinstance(headings, tuple), f"headings is a {type(headings).__name__}"
    last = 0
    for heading in headings:
        assert isinstance(heading, tuple) and len(heading) == 3, heading
        offset, level, title = heading
        assert type(offset) is int and type(level) is int, heading
        assert 0 <= offset < len(text), f"heading {heading} is outside the text ({len(text)})"
        assert offset == 0 or text[offset - 1] == "\n", (
            f"heading {heading} does not start a line: {text[max(0, offset - 20) : offset + 20]!r}"
        )
        assert 1 <= level <= 6, f"heading {heading} has level {level}, not 1-6"
        assert isinstance(title, str) and title.strip(), f"heading {heading} has no title"
        assert offset >= last, f"headings are not in offset order: {headings}"
        last = offset
    assert valid_outline([list(h) for h in headings]), (
        f"headings do not store as an outline: {headings}"
    )


def _check_geometry(extraction: Extraction) -> None:
    """Per page its frame and character boxes, each box on a character of that page:
    a citation's rectangles are read from it."""
    geometry = extraction.geometry
    if geometry is None:
        return
    starts, length = extraction.page_starts, len(extraction.text)
    assert isinstance(geometry, Mapping), f"geometry is a {type(geometry).__name__}"
    assert starts, "geometry without page starts: a rectangle could name no page"
    value = dict(geometry)
    assert check_geometry(value, len(starts)), "geometry is not one encoded entry per page"
    ends = [*starts[1:], length]
    for page, (start, end, entry) in enumerate(zip(starts, ends, value["pages"], strict=True), 1):
        try:
            lines = decode_page(entry[5])
        except DamagedGeometryError as exc:
            raise AssertionError(f"page {page}'s geometry does not decode: {exc}") from None
        for offsets in lines.offsets:
            assert all(start <= o < end for o in offsets), (
                f"page {page} ({start}..{end}) boxes characters outside it: {offsets}"
            )


def _check_fields(extraction: Extraction, identity: str) -> None:
    """Everything else as its type says, and storable as the extraction cache stores it."""
    assert extraction.title is None or isinstance(extraction.title, str), extraction.title
    assert isinstance(extraction.info, Mapping), extraction.info
    assert all(isinstance(k, str) and isinstance(v, str) for k, v in extraction.info.items()), (
        f"info must map str to str: {extraction.info!r}"
    )
    assert extraction.info_error is None or isinstance(extraction.info_error, str)
    assert extraction.unread is None or (
        isinstance(extraction.unread, str) and extraction.unread.strip()
    ), f"unread is {extraction.unread!r}: None or a reason"
    own = extraction.identity
    # A text that depends on more than the extractor (a PDF read by OCR) names it too.
    assert own is None or (isinstance(own, str) and own.startswith(identity + "+")), (
        f"the extraction's identity {own!r} does not extend the extractor's {identity!r}"
    )
    try:
        json.dumps(stored_fields(extraction), ensure_ascii=False)
    except (TypeError, ValueError) as exc:
        raise AssertionError(f"the extraction cannot be stored as JSON: {exc}") from None


def check_extraction(extraction: object, identity: str) -> None:
    """Every documented invariant of an ``Extraction`` from the extractor ``identity``;
    ``AssertionError`` naming the first one broken."""
    assert isinstance(extraction, Extraction), f"a {type(extraction).__name__}, not an Extraction"
    _check_text(extraction)
    _check_page_starts(extraction)
    _check_headings(extraction)
    _check_geometry(extraction)
    _check_fields(extraction, identity)


def _noise(size: int) -> bytes:
    """Bytes of no format, the same every run (a linear congruential sequence)."""
    state, out = 12345, bytearray()
    for _ in range(size):
        state = (state * 1103515245 + 12345) % (1 << 31)
        out.append(state >> 23)
    return bytes(out)


def mangled(data: bytes) -> list[tuple[str, bytes]]:
    """What a disk, a download or a hostile user makes of a good file: empty, cut short,
    overwritten in the middle, reversed."""
    size, third = len(data), len(data) // 3
    return [
        ("empty", b""),
        ("its first byte", data[:1]),
        ("its first 64 bytes", data[:64]),
        ("its first half", data[: size // 2]),
        ("all but its last byte", data[:-1]),
        ("its middle third zeroed", data[:third] + bytes(size - 2 * third) + data[size - third :]),
        ("reversed", data[::-1]),
        ("NUL bytes", bytes(64)),
        ("noise", _noise(4096)),
    ]


Outcome = tuple[str, object]


async def _outcome(extractor: ExtractorProtocol, data: bytes) -> Outcome:
    """``("text", extraction)`` or ``("refused", error type)``; any other exception is
    raised, failing the test."""
    try:
        return "text", await extractor.extract_bytes(data)
    except IngestionError as exc:
        return "refused", type(exc)


async def _refuses(work: Awaitable[Any], what: str) -> IngestionError:
    """``work`` must raise an ``IngestionError``, which is returned: returning, or
    raising anything else (a library's own exception, an ``OSError``), fails with what
    happened."""
    try:
        await work
    except IngestionError as exc:
        return exc
    except Exception as exc:
        raise AssertionError(
            f"{what}: {type(exc).__name__} escaped, not an IngestionError"
        ) from exc
    raise AssertionError(f"{what}: not refused (no IngestionError)")


async def _suspends(work: Awaitable[Any]) -> bool:
    """Whether ``work`` hands the event loop back before it is done: run as a task, it
    has started once the loop turns once, and a task that did all its work in that
    first step (blocking the loop the whole time) is done by then."""
    task = asyncio.ensure_future(work)
    await asyncio.sleep(0)
    suspended = not task.done()
    await task
    return suspended


async def _each_extraction(
    extractor: ExtractorProtocol, samples: Samples, check: Callable[[Extraction], None]
) -> None:
    """``check`` each sample's extraction, a failure naming the sample."""
    for name, data in samples:
        try:
            check(await extractor.extract_bytes(data))
        except AssertionError as exc:
            raise AssertionError(f"{name}: {exc}") from None


def _written(directory: Path, index: int, name: str, data: bytes) -> Path:
    path = directory / f"{index}-{Path(name).name or 'sample'}"
    path.write_bytes(data)
    return path


class ExtractorConformance:
    """Behaviour shared by every extractor."""

    @pytest.fixture
    def extractor(self, extractor_factory: Factory) -> ExtractorProtocol:
        """One instance from the implementer's factory."""
        return extractor_factory()

    @pytest.fixture
    def damaged_files(self) -> Samples:
        """``(file name, bytes)`` the extractor must refuse; override with some."""
        return ()

    async def test_satisfies_the_protocol(
        self, extractor: ExtractorProtocol, sample_files: Samples
    ) -> None:
        assert isinstance(extractor, ExtractorProtocol)
        assert sample_files, "sample_files must hold at least one file"
        for name, data in sample_files:
            assert isinstance(name, str) and name and isinstance(data, bytes) and data, name

    async def test_identity_has_the_documented_form(self, extractor: ExtractorProtocol) -> None:
        check_identity(extractor.identity)

    async def test_identity_is_stable(
        self, extractor: ExtractorProtocol, extractor_factory: Factory, sample_files: Samples
    ) -> None:
        """Verification finds the extractor by the identity recorded at ingest."""
        identity = extractor.identity
        assert extractor.identity == identity, f"identity {identity!r} changed on a 2nd read"
        for _, data in sample_files:
            await extractor.extract_bytes(data)
        assert extractor.identity == identity, f"identity {identity!r} changed by extracting"
        fresh = extractor_factory().identity
        assert fresh == identity, f"a new instance is {fresh!r}, not {identity!r}"

    async def test_samples_extract_to_well_formed_text(
        self, extractor: ExtractorProtocol, sample_files: Samples
    ) -> None:
        for name, data in sample_files:
            extraction = await extractor.extract_bytes(data)
            check_extraction(extraction, extractor.identity)
            assert extraction.text.strip(), f"{name}: no text (a sample must hold some)"

    async def test_same_bytes_same_extraction(
        self, extractor: ExtractorProtocol, extractor_factory: Factory, sample_files: Samples
    ) -> None:
        """Verification re-runs the extractor: any drift fails every citation into it."""
        fresh = extractor_factory()
        for name, data in sample_files:
            first = await extractor.extract_bytes(data)
            assert await extractor.extract_bytes(data) == first, f"{name}: differs on a 2nd call"
            assert await fresh.extract_bytes(data) == first, f"{name}: differs on a new instance"
            # A copy of the bytes, not the same object: what counts is what they hold.
            copy = bytes(bytearray(data))
            assert await extractor.extract_bytes(copy) == first, f"{name}: differs for a copy"

    async def test_every_entry_point_reads_the_same_text(
        self, extractor: ExtractorProtocol, sample_files: Samples, tmp_path: Path
    ) -> None:
        """Ingest extracts the file's bytes; a check reads the text alone
        (``extract_text`` where there is one): they must agree to the character."""
        for index, (name, data) in enumerate(sample_files):
            path = _written(tmp_path, index, name, data)
            from_bytes = await extractor.extract_bytes(data)
            from_file = await extractor.extract_file(path)
            assert from_file == from_bytes, f"{name}: extract_file differs from extract_bytes"
            assert await extractor.extract(path) == from_bytes.text, (
                f"{name}: extract(path) differs from extract_bytes(data).text"
            )
            if isinstance(extractor, BaseExtractor):
                assert await extractor.extract_text(data) == from_bytes.text, (
                    f"{name}: extract_text differs from extract_bytes(data).text"
                )

    async def test_page_starts_point_into_the_text(
        self, extractor: ExtractorProtocol, sample_files: Samples
    ) -> None:
        await _each_extraction(extractor, sample_files, _check_page_starts)

    async def test_headings_start_lines_in_order(
        self, extractor: ExtractorProtocol, sample_files: Samples
    ) -> None:
        await _each_extraction(extractor, sample_files, _check_headings)

    async def test_geometry_boxes_characters_of_their_page(
        self, extractor: ExtractorProtocol, sample_files: Samples
    ) -> None:
        await _each_extraction(extractor, sample_files, _check_geometry)

    async def test_other_fields_are_typed_and_storable(
        self, extractor: ExtractorProtocol, sample_files: Samples
    ) -> None:
        identity = extractor.identity
        await _each_extraction(
            extractor, sample_files, lambda extraction: _check_fields(extraction, identity)
        )

    async def test_damaged_files_are_ingestion_errors(
        self, extractor: ExtractorProtocol, damaged_files: Samples, tmp_path: Path
    ) -> None:
        if not damaged_files:
            pytest.skip("no damaged_files given")
        for index, (name, data) in enumerate(damaged_files):
            path = _written(tmp_path, index, name, data)
            await _refuses(extractor.extract_bytes(data), f"{name}: extract_bytes")
            await _refuses(extractor.extract_file(path), f"{name}: extract_file")
            await _refuses(extractor.extract(path), f"{name}: extract")
            if isinstance(extractor, BaseExtractor):
                await _refuses(extractor.extract_text(data), f"{name}: extract_text")

    async def test_mangled_bytes_fail_typed_or_extract_well(
        self, extractor: ExtractorProtocol, sample_files: Samples
    ) -> None:
        """Empty, truncated or overwritten bytes: an ``IngestionError`` (the file fails
        alone) or a well-formed extraction, the same on a second try; never a library's
        own exception, which would cross the public API."""
        seen: set[bytes] = set()
        for name, data in sample_files:
            for how, variant in mangled(data):
                if variant in seen:
                    continue
                seen.add(variant)
                try:
                    first = await _outcome(extractor, variant)
                except Exception as exc:
                    raise AssertionError(
                        f"{name}, {how}: {type(exc).__name__} escaped, not an IngestionError"
                    ) from exc
                if first[0] == "text":
                    try:
                        check_extraction(first[1], extractor.identity)
                    except AssertionError as exc:
                        raise AssertionError(f"{name}, {how}: {exc}") from None
                assert await _outcome(extractor, variant) == first, (
                    f"{name}, {how}: a second extraction differs"
                )

    async def test_an_unreadable_path_is_an_ingestion_error(
        self, extractor: ExtractorProtocol, tmp_path: Path
    ) -> None:
        """A file gone, or a directory where a file was: typed, never ``OSError``."""
        for path, what in ((tmp_path / "gone.bin", "a missing file"), (tmp_path, "a directory")):
            await _refuses(extractor.extract_file(path), f"extract_file of {what}")
            await _refuses(extractor.extract(path), f"extract of {what}")

    async def test_concurrent_extractions_are_those_of_one(
        self, extractor: ExtractorProtocol, sample_files: Samples
    ) -> None:
        """An ingest and the checks of a search run extractions side by side."""
        alone = [await extractor.extract_bytes(data) for _, data in sample_files]
        together = await asyncio.gather(
            *(extractor.extract_bytes(data) for _ in range(2) for _, data in sample_files)
        )
        assert list(together) == alone * 2, "extractions run together differ from one at a time"

    async def test_extraction_leaves_the_event_loop_free(
        self, extractor: ExtractorProtocol, sample_files: Samples, tmp_path: Path
    ) -> None:
        """Extraction is CPU work: done on the event loop, it would stall every other
        request for as long. Checked by whether the call ever yields, not by timing."""
        name, data = max(sample_files, key=lambda item: len(item[1]))
        path = _written(tmp_path, 0, name, data)
        assert await _suspends(extractor.extract_bytes(data)), (
            f"{name}: extract_bytes ran to the end without yielding the event loop"
        )
        assert await _suspends(extractor.extract_file(path)), (
            f"{name}: extract_file ran to the end without yielding the event loop"
        )
