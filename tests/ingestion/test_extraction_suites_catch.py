"""The extractor and loader conformance suites fail an implementation that is broken in
a way citations would suffer from: a suite that passes anything proves nothing.

Each broken extractor is a small, correct one (UTF-8 text, pages split at form feeds,
``# `` lines as headings, a box per character) with one defect; each broken loader is
``FileLoader`` with one. The same suite test passes the implementation without it.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import itertools
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, ClassVar

import pytest

from groundkit.contracts import HEADINGS_KEY, Document
from groundkit.errors import IngestionError
from groundkit.extraction.base import BaseExtractor, Extraction, ExtractorProtocol, join_pages
from groundkit.extraction.sources import read_utf8
from groundkit.ingestion.files import FileLoader
from groundkit.ingestion.outline import as_outline
from groundkit.ingestion.protocols import LoaderProtocol
from groundkit.storage.names import document_id_for
from groundkit.testing.conformance.extractors import ExtractorConformance
from groundkit.testing.conformance.loaders import LoaderConformance
from groundkit.utils.geometry import Box, PageFrame, encode_geometry
from groundkit.utils.path_safety import to_relative

# -- extractors ---------------------------------------------------------------------

EXTRACTOR_SAMPLES = (
    ("guide.txt", b"# Guide\n\nIntro text.\n\n## Install\n\nRun it.\fPage two.\n# Usage\n"),
    ("plain.txt", "Just a line of text, 東京 🌊.\n\nAnother paragraph.".encode()),
)
EXTRACTOR_DAMAGED = (("latin1.txt", "café".encode("latin-1")),)
FRAME = PageFrame(0.0, 0.0, 600.0, 800.0, 0)


class PlainExtractor(BaseExtractor):
    """Correct: passes the whole suite."""

    def __init__(self) -> None:
        super().__init__("groundkit-plain/1", None)

    def _pages(self, data: bytes) -> list[str]:
        try:
            return data.decode("utf-8").split("\f")
        except UnicodeDecodeError:
            raise IngestionError("not UTF-8") from None

    def _headings(self, text: str) -> tuple[tuple[int, int, str], ...]:
        found: list[tuple[int, int, str]] = []
        offset = 0
        for line in text.split("\n"):
            marks = len(line) - len(line.lstrip("#"))
            if 1 <= marks <= 6 and line[marks : marks + 1] == " " and line[marks:].strip():
                found.append((offset, marks, line[marks:].strip()))
            offset += len(line) + 1
        return tuple(found)

    def _geometry(self, pages: list[str], starts: Sequence[int]) -> dict[str, Any]:
        boxed: list[tuple[int, str, list[Box | None]]] = []
        for start, page in zip(starts, pages, strict=True):
            boxes: list[Box | None] = [
                None if char == "\n" else (i * 6.0, 700.0, i * 6.0 + 6.0, 712.0)
                for i, char in enumerate(page)
            ]
            boxed.append((start, page, boxes))
        return encode_geometry([FRAME] * len(pages), boxed)

    def _run(self, data: bytes, charset: str | None) -> Extraction:
        pages = self._pages(data)
        text, starts = join_pages(pages)
        return Extraction(
            text=text,
            page_starts=starts,
            headings=self._headings(text),
            geometry=self._geometry(pages, starts),
        )


class NondeterministicText(PlainExtractor):
    _calls = itertools.count()

    def _run(self, data: bytes, charset: str | None) -> Extraction:
        found = super()._run(data, charset)
        return Extraction(text=found.text + f" ({next(self._calls)})")


class UnstableIdentity(PlainExtractor):
    _calls = itertools.count()

    @property
    def identity(self) -> str:
        return f"groundkit-plain/{next(self._calls)}"


class UnversionedIdentity(PlainExtractor):
    @property
    def identity(self) -> str:
        return "Plain text extractor"


class ChangedCopy(PlainExtractor):
    """Keyed on the bytes object, not on what it holds."""

    _first: ClassVar[dict[int, str]] = {}

    def _run(self, data: bytes, charset: str | None) -> Extraction:
        found = super()._run(data, charset)
        tag = self._first.setdefault(len(data), str(id(data)))
        return Extraction(text=found.text if tag == str(id(data)) else found.text + "!")


class DecreasingPageStarts(PlainExtractor):
    def _run(self, data: bytes, charset: str | None) -> Extraction:
        found = super()._run(data, charset)
        return Extraction(text=found.text, page_starts=found.page_starts[::-1])


class PagesNotFromZero(PlainExtractor):
    def _run(self, data: bytes, charset: str | None) -> Extraction:
        found = super()._run(data, charset)
        return Extraction(text=found.text, page_starts=tuple(s + 1 for s in found.page_starts))


class HeadingOutOfRange(PlainExtractor):
    def _run(self, data: bytes, charset: str | None) -> Extraction:
        found = super()._run(data, charset)
        ghost = (len(found.text) + 5, 1, "Ghost")
        return Extraction(text=found.text, headings=(*found.headings, ghost))


class HeadingMidLine(PlainExtractor):
    def _headings(self, text: str) -> tuple[tuple[int, int, str], ...]:
        return tuple((offset + 2, level, title) for offset, level, title in super()._headings(text))


class HeadingLevelSeven(PlainExtractor):
    def _headings(self, text: str) -> tuple[tuple[int, int, str], ...]:
        return tuple((offset, 7, title) for offset, _, title in super()._headings(text))


class HeadingsOutOfOrder(PlainExtractor):
    def _headings(self, text: str) -> tuple[tuple[int, int, str], ...]:
        return super()._headings(text)[::-1]


class BoxesOnTheNextPage(PlainExtractor):
    def _geometry(self, pages: list[str], starts: Sequence[int]) -> dict[str, Any]:
        return super()._geometry(pages, [s + len(pages[0]) + 3 for s in starts])


class NoText(PlainExtractor):
    def _run(self, data: bytes, charset: str | None) -> Extraction:
        self._pages(data)
        return Extraction(text="")


class LoneSurrogate(PlainExtractor):
    def _run(self, data: bytes, charset: str | None) -> Extraction:
        return Extraction(text=super()._run(data, charset).text + "\ud800")


class UnrelatedExtractionIdentity(PlainExtractor):
    def _run(self, data: bytes, charset: str | None) -> Extraction:
        return Extraction(text=super()._run(data, charset).text, identity="other/1")


class InfoNotText(PlainExtractor):
    def _run(self, data: bytes, charset: str | None) -> Extraction:
        text = super()._run(data, charset).text
        return Extraction(text=text, info={"pages": 3})  # type: ignore[dict-item]


class BareValueError(PlainExtractor):
    """Lets the decoder's own exception out."""

    def _pages(self, data: bytes) -> list[str]:
        return data.decode("utf-8").split("\f")


class ReadsDamageAnyway(PlainExtractor):
    """Never refuses: what is not UTF-8 becomes replacement characters."""

    def _pages(self, data: bytes) -> list[str]:
        return data.decode("utf-8", errors="replace").split("\f")


class FailsOnEmptyWithKeyError(PlainExtractor):
    def _run(self, data: bytes, charset: str | None) -> Extraction:
        if not data:
            raise KeyError("no data")
        return super()._run(data, charset)


class FileReadsDifferently(PlainExtractor):
    """``extract_file`` normalises line ends that ``extract_bytes`` keeps."""

    async def extract_file(self, path: Path) -> Extraction:
        return await self.extract_bytes(path.read_bytes().replace(b"\n\n", b"\n"))


class TextAloneDiffers(PlainExtractor):
    """What a citation check reads (``extract_text``) is not the ingested text."""

    def _text(self, data: bytes) -> str:
        return self._run(data, None).text.strip() + " "


class MissingFileIsOSError(PlainExtractor):
    async def extract_file(self, path: Path) -> Extraction:
        return await self.extract_bytes(path.read_bytes())


class BlocksTheLoop(PlainExtractor):
    async def extract_bytes(self, data: bytes, *, charset: str | None = None) -> Extraction:
        return self._run(data, charset)


@pytest.mark.parametrize(
    ("broken", "test"),
    [
        (NondeterministicText, "test_same_bytes_same_extraction"),
        (ChangedCopy, "test_same_bytes_same_extraction"),
        (UnstableIdentity, "test_identity_is_stable"),
        (UnversionedIdentity, "test_identity_has_the_documented_form"),
        (DecreasingPageStarts, "test_page_starts_point_into_the_text"),
        (PagesNotFromZero, "test_page_starts_point_into_the_text"),
        (HeadingOutOfRange, "test_headings_start_lines_in_order"),
        (HeadingMidLine, "test_headings_start_lines_in_order"),
        (HeadingLevelSeven, "test_headings_start_lines_in_order"),
        (HeadingsOutOfOrder, "test_headings_start_lines_in_order"),
        (BoxesOnTheNextPage, "test_geometry_boxes_characters_of_their_page"),
        (NoText, "test_samples_extract_to_well_formed_text"),
        (LoneSurrogate, "test_samples_extract_to_well_formed_text"),
        (UnrelatedExtractionIdentity, "test_other_fields_are_typed_and_storable"),
        (InfoNotText, "test_other_fields_are_typed_and_storable"),
        (BareValueError, "test_damaged_files_are_ingestion_errors"),
        (BareValueError, "test_mangled_bytes_fail_typed_or_extract_well"),
        (ReadsDamageAnyway, "test_damaged_files_are_ingestion_errors"),
        (FailsOnEmptyWithKeyError, "test_mangled_bytes_fail_typed_or_extract_well"),
        (FileReadsDifferently, "test_every_entry_point_reads_the_same_text"),
        (TextAloneDiffers, "test_every_entry_point_reads_the_same_text"),
        (MissingFileIsOSError, "test_an_unreadable_path_is_an_ingestion_error"),
        (BlocksTheLoop, "test_extraction_leaves_the_event_loop_free"),
    ],
)
async def test_the_extractor_suite_fails_a_broken_extractor(
    broken: type[PlainExtractor], test: str, tmp_path: Path
) -> None:
    suite = ExtractorConformance()
    with pytest.raises(AssertionError):
        await _run_extractor_test(suite, test, broken, tmp_path / "broken")
    # The same test passes the extractor without the defect.
    await _run_extractor_test(suite, test, PlainExtractor, tmp_path / "good")


async def test_the_correct_extractor_passes_the_whole_suite(tmp_path: Path) -> None:
    suite = ExtractorConformance()
    for number, test in enumerate(_tests_of(ExtractorConformance)):
        await _run_extractor_test(suite, test, PlainExtractor, tmp_path / str(number))


# -- loaders ------------------------------------------------------------------------

LOADER_SAMPLES = (
    ("notes/a.md", b"# Refunds\n\nRefunds are paid within fourteen days.\n"),
    ("b.txt", "Warranty claims need the receipt. 東京\n".encode()),
)
LOADER_DAMAGED = (("latin1.txt", "café".encode("latin-1")),)
LOADER_REJECTED = ("image.png", "report.pdf")


class NamedFromTheWorkingDirectory(FileLoader):
    """Reads a relative path from ``base_dir`` but names it from the working directory
    (what ``FileLoader`` once did): a bare ``ValueError`` for a name inside ``base_dir``."""

    async def load(self, path: Path, *, base_dir: Path) -> Document:
        document = await super().load(path, base_dir=base_dir)
        source = to_relative(path, base_dir)
        return document.model_copy(
            update={"source": source, "document_id": document_id_for(source)}
        )


class AbsoluteSource(FileLoader):
    async def load(self, path: Path, *, base_dir: Path) -> Document:
        document = await super().load(path, base_dir=base_dir)
        source = str(path.resolve())
        return document.model_copy(
            update={"source": source, "document_id": document_id_for(source)}
        )


class OwnDocumentIds(FileLoader):
    _ids = itertools.count()

    async def load(self, path: Path, *, base_dir: Path) -> Document:
        document = await super().load(path, base_dir=base_dir)
        return document.model_copy(update={"document_id": f"doc-{next(self._ids)}"})


class AcceptsExistingFilesOnly(FileLoader):
    def accepts(self, path: Path) -> bool:
        return super().accepts(path) and path.is_file()


class AcceptsPeeksAtTheDisk(FileLoader):
    """Same answers, but it stats every path it is asked about."""

    def accepts(self, path: Path) -> bool:
        with contextlib.suppress(OSError):
            path.stat()
        return super().accepts(path)


class NoContainment(FileLoader):
    """Reads any path it is given; the source is whatever ``relpath`` makes of it."""

    async def load(self, path: Path, *, base_dir: Path) -> Document:
        text = await asyncio.to_thread(read_utf8, path)
        source = Path(os.path.relpath(path, base_dir)).as_posix()
        return Document(document_id=document_id_for(source), source=source, content=text)


class BareReadErrors(FileLoader):
    """Reads with ``read_text``: its ``OSError`` and ``UnicodeDecodeError`` get out."""

    async def load(self, path: Path, *, base_dir: Path) -> Document:
        source = path.relative_to(base_dir).as_posix()
        text = await asyncio.to_thread(path.read_text, encoding="utf-8")
        return Document(document_id=document_id_for(source), source=source, content=text)


class DecodeErrorEscapes(FileLoader):
    """Fails a file that is not UTF-8 with the decoder's own exception."""

    async def load(self, path: Path, *, base_dir: Path) -> Document:
        try:
            return await super().load(path, base_dir=base_dir)
        except IngestionError as exc:
            if "UTF-8" in str(exc):
                raise UnicodeDecodeError("utf-8", b"\xff", 0, 1, "invalid start byte") from None
            raise


class LoadsBlankFiles(FileLoader):
    """Accepts a file with no text instead of failing it."""

    async def load(self, path: Path, *, base_dir: Path) -> Document:
        try:
            return await super().load(path, base_dir=base_dir)
        except IngestionError:
            source = path.relative_to(base_dir).as_posix()
            return Document(document_id=document_id_for(source), source=source, content=" ")


class NotesWithACounter(FileLoader):
    _loads = itertools.count()

    async def load(self, path: Path, *, base_dir: Path) -> Document:
        document = await super().load(path, base_dir=base_dir)
        return document.model_copy(update={"notes": (f"load {next(self._loads)}",)})


class TextNotAsOnDisk(FileLoader):
    """Strips the text, so offsets no longer land where verification reads."""

    async def load(self, path: Path, *, base_dir: Path) -> Document:
        document = await super().load(path, base_dir=base_dir)
        return document.model_copy(update={"content": document.content.strip()})


class OutlineOffLines(FileLoader):
    async def load(self, path: Path, *, base_dir: Path) -> Document:
        document = await super().load(path, base_dir=base_dir)
        metadata = dict(document.metadata)
        metadata[HEADINGS_KEY] = as_outline([(1, 1, "Shifted")])
        return document.model_copy(update={"metadata": metadata})


class ReadsOnTheLoop(FileLoader):
    async def load(self, path: Path, *, base_dir: Path) -> Document:
        source = path.relative_to(base_dir).as_posix()
        text = read_utf8(path)
        return Document(document_id=document_id_for(source), source=source, content=text)


@pytest.mark.parametrize(
    ("broken", "test"),
    [
        (AbsoluteSource, "test_load_gives_a_document_sourced_relative_to_base_dir"),
        (OwnDocumentIds, "test_load_gives_a_document_sourced_relative_to_base_dir"),
        (AcceptsExistingFilesOnly, "test_accepts_its_files_by_name"),
        (AcceptsPeeksAtTheDisk, "test_accepts_touches_no_file"),
        (NoContainment, "test_a_file_outside_base_dir_is_refused"),
        (BareReadErrors, "test_an_unreadable_path_is_an_ingestion_error"),
        (BareReadErrors, "test_damaged_files_are_ingestion_errors"),
        (DecodeErrorEscapes, "test_mangled_files_fail_typed_or_load_well"),
        (LoadsBlankFiles, "test_mangled_files_fail_typed_or_load_well"),
        (NotesWithACounter, "test_same_file_same_document"),
        (TextNotAsOnDisk, "test_the_text_is_what_verification_reads"),
        (OutlineOffLines, "test_load_gives_a_document_sourced_relative_to_base_dir"),
        (ReadsOnTheLoop, "test_loading_leaves_the_event_loop_free"),
        (NamedFromTheWorkingDirectory, "test_a_relative_path_loads_its_file_or_fails_typed"),
    ],
)
async def test_the_loader_suite_fails_a_broken_loader(
    broken: type[FileLoader], test: str, tmp_path: Path
) -> None:
    suite = LoaderConformance()
    with pytest.raises(AssertionError):
        await _run_loader_test(suite, test, broken, tmp_path / "broken")
    await _run_loader_test(suite, test, FileLoader, tmp_path / "good")


# -- running a suite's test by hand ---------------------------------------------------


def _tests_of(suite: type) -> list[str]:
    return sorted(name for name in dir(suite) if name.startswith("test_"))


async def _call(method: Callable[..., Any], values: dict[str, Any]) -> None:
    """``method`` with the fixtures it names, awaited when it is a coroutine."""
    wanted = inspect.signature(method).parameters
    result = method(**{name: values[name] for name in wanted})
    if inspect.isawaitable(result):
        await result


async def _run_extractor_test(
    suite: ExtractorConformance, test: str, kind: type[PlainExtractor], where: Path
) -> None:
    where.mkdir(parents=True)
    factory: Callable[[], ExtractorProtocol] = kind
    values = {
        "extractor": factory(),
        "extractor_factory": factory,
        "sample_files": EXTRACTOR_SAMPLES,
        "damaged_files": EXTRACTOR_DAMAGED,
        "tmp_path": where,
    }
    await _call(getattr(suite, test), values)


async def _run_loader_test(
    suite: LoaderConformance, test: str, kind: type[FileLoader], where: Path
) -> None:
    where.mkdir(parents=True)
    factory: Callable[[], LoaderProtocol] = kind
    values = {
        "loader": factory(),
        "loader_factory": factory,
        "sample_files": LOADER_SAMPLES,
        "rejected_names": LOADER_REJECTED,
        "damaged_files": LOADER_DAMAGED,
        "tmp_path": where,
    }
    await _call(getattr(suite, test), values)


async def test_the_correct_loader_passes_the_whole_suite(tmp_path: Path) -> None:
    suite = LoaderConformance()
    for number, test in enumerate(_tests_of(LoaderConformance)):
        await _run_loader_test(suite, test, FileLoader, tmp_path / str(number))
