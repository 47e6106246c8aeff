"""What every extractor shares: the result type, the protocol, the plumbing.

Ingest and citation checks call the very same extractor objects, so an
``extracted`` citation is verified by re-running what produced it. Output must
depend on the input bytes and the library version only.
"""

from __future__ import annotations

import asyncio
import gc
import importlib.metadata
import io
import zipfile
import zlib
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, TypeVar, runtime_checkable

from groundkit.errors import ConfigurationError, IngestionError
from groundkit.extraction.sources import read_capped
from groundkit.utils.path_safety import printable_path

__all__ = [
    "MAX_MARKUP",
    "MAX_PART_BYTES",
    "MAX_PART_MARKUP",
    "MAX_TEXT_CHARS",
    "MAX_UNPACKED_BYTES",
    "PAGE_SEPARATOR",
    "BaseExtractor",
    "Extraction",
    "ExtractorProtocol",
    "TextBudget",
    "check_zip_container",
    "composite_identity",
    "distribution_identity",
    "join_pages",
]

# Between the text of two PDF pages. A form feed marks the page; the newlines
# around it make the boundary a paragraph break for the chunker. Changing it
# changes every offset, so it is part of what the extractor identity stands for.
PAGE_SEPARATOR = "\n\f\n"


@dataclass(frozen=True, slots=True)
class Extraction:
    """Extracted text plus what citations need to describe it."""

    text: str
    # Offset in ``text`` where each page begins: a PDF page, a PPTX slide, an EPUB chapter
    # (empty for the other formats).
    page_starts: tuple[int, ...] = ()
    title: str | None = None
    # Descriptive values as the file states them, for document fields: PDF
    # title/author/subject/creation_date, HTML <meta> description/author/keywords.
    # Never part of the text, so citations do not depend on them.
    info: Mapping[str, str] = field(default_factory=dict)
    # Why the descriptive values could not be read (the text still was); an
    # ingest that reads fields fails the file on it.
    info_error: str | None = None
    # The outline, ``(offset, level 1-6, title)`` per heading in offset order, where
    # ``offset`` is where the heading's line begins in ``text`` (HTML h1-h6, DOCX
    # heading styles). Never part of the text, so citations do not depend on it.
    headings: tuple[tuple[int, int, str], ...] = ()
    # Where each character stands on its page (PDF only): the encoded metadata value
    # (groundkit/utils/geometry.py), stored under ``GEOMETRY_KEY`` for citation rectangles.
    geometry: Mapping[str, Any] | None = None
    # The identity this particular text depends on, when it is not the extractor's own
    # (a PDF whose pages needed OCR names the OCR engine too). The document records it,
    # and verification re-runs the extractor registered under it.
    identity: str | None = None
    # Pages left without text and why (PDF pages with no text layer that OCR did
    # not read); the loader fails an empty extraction with it and warns otherwise.
    unread: str | None = None


@runtime_checkable
class ExtractorProtocol(Protocol):
    """Deterministic bytes → text: same bytes and same identity, same text."""

    @property
    def identity(self) -> str:
        """``"<distribution>/<version>"`` of the library doing the work."""
        ...

    async def extract(self, path: Path) -> str:
        """The text of the file at ``path`` (already containment-checked by the caller)."""
        ...

    async def extract_file(self, path: Path) -> Extraction:
        """Like ``extract``, with page offsets and title."""
        ...

    async def extract_bytes(self, data: bytes, *, charset: str | None = None) -> Extraction:
        """Extract from bytes (a fetched body); ``charset`` is what the server declared."""
        ...


def distribution_identity(distribution: str) -> str:
    try:
        return f"{distribution}/{importlib.metadata.version(distribution)}"
    except importlib.metadata.PackageNotFoundError:
        raise ConfigurationError(
            f"{distribution} is importable but not installed as a distribution, so its "
            "version (part of every extracted citation) is unknown; reinstall it with pip"
        ) from None


def composite_identity(layout: str, *distributions: str) -> str:
    """An identity for an extractor whose text depends on groundkit's own layout rules
    (``layout``, a name and revision such as ``"groundkit-docx/1"``) and on several
    libraries: ``"groundkit-docx/1+python-docx/1.2.0"``. Changing either changes
    offsets, so either change is a new identity (adr/0038-extractor-identities.md)."""
    return "+".join([layout, *(distribution_identity(d) for d in distributions)])


# Office files and EPUBs are ZIP containers; what their members may unpack to in
# all, as the container declares it (a member cannot be read past its declared
# size), so a small file cannot expand into gigabytes of XML.
MAX_UNPACKED_BYTES = 256 * 1024 * 1024
_MAX_MEMBERS = 50_000
# What one extraction from such a container may read in all (``TextBudget``): as
# much text as its parts may unpack to.
MAX_TEXT_CHARS = MAX_UNPACKED_BYTES
# What parsing a container's markup may cost (adr/0097-container-parse-cost.md). Bytes
# do not bound it: a run of short tags compresses some 600:1 and every element and
# attribute becomes objects of a parsed tree, some 130-250 bytes each in lxml (DOCX,
# PPTX, the EPUB's package files) and 650-850 in BeautifulSoup (an EPUB chapter),
# plus the work of reading each. So the marks that make them, ``<`` and ``=``, are
# counted in every member before any library parses one: at most ``MAX_MARKUP`` in
# all (python-docx and python-pptx hold every part's tree at once: some 0.75 GB and
# 45 s at worst), and in an EPUB chapter (parsed alone, then dropped) at most
# ``MAX_PART_MARKUP`` marks and ``MAX_PART_BYTES`` bytes (a tree of some 0.6 GB at
# worst). A 300-chapter novel has some 250,000 marks, a 1,000-page Word document
# 250,000 to 800,000; binary members (images, fonts) add about 1 per 128 bytes.
MAX_MARKUP = 3_000_000
MAX_PART_MARKUP = 500_000
MAX_PART_BYTES = 16 * 1024 * 1024
_MARKS = (b"<", b"=")
_READ_CHUNK = 1024 * 1024


def _marks(chunk: bytes) -> int:
    return sum(chunk.count(mark) for mark in _MARKS)


def check_zip_container(data: bytes, kind: str) -> None:
    """``IngestionError`` unless ``data`` is a ZIP whose members unpack to at most
    ``MAX_UNPACKED_BYTES`` (checked from the central directory, nothing unpacked) and
    hold at most ``MAX_MARKUP`` marks of markup (counted as they unpack, a chunk at a
    time, before any library parses them)."""
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            members = archive.infolist()
            if len(members) > _MAX_MEMBERS:
                raise IngestionError(
                    f"{kind} holds {len(members)} parts, over the limit of {_MAX_MEMBERS}"
                )
            total = sum(member.file_size for member in members)
            if total > MAX_UNPACKED_BYTES:
                raise IngestionError(
                    f"{kind} unpacks to {total} bytes, over the limit of {MAX_UNPACKED_BYTES}"
                )
            _count_markup(archive, members, kind)
    except IngestionError:
        raise
    except (zipfile.BadZipFile, zipfile.LargeZipFile, ValueError, OSError):
        raise IngestionError(
            f"not a readable {kind} (not a ZIP container: damaged or truncated?)"
        ) from None


# What reading a member can raise: damaged data, an unknown compression method, an
# encrypted member. Its marks are counted as far as it reads; the library reading
# the container meets the same error and fails the file as it did before.
_UNREADABLE: tuple[type[Exception], ...] = (zipfile.BadZipFile, zlib.error, EOFError)
_UNREADABLE += (NotImplementedError, RuntimeError, ValueError, OSError)


def _count_markup(archive: zipfile.ZipFile, members: list[zipfile.ZipInfo], kind: str) -> None:
    limit = MAX_MARKUP
    found = 0
    for member in members:
        if member.is_dir():
            continue
        try:
            with archive.open(member) as part:
                while chunk := part.read(_READ_CHUNK):
                    found += _marks(chunk)
                    if found > limit:
                        raise IngestionError(
                            f"{kind} holds more than {limit} marks of markup ('<' and '='), "
                            "over the limit of what may be parsed (a decompression bomb?)"
                        )
        except _UNREADABLE:
            continue


class TextBudget:
    """What one extraction from a container may read, counted as it reads.

    ``check_zip_container`` caps the parts as the container declares them, but a part
    can be read more than once: an EPUB spine or a PPTX slide list naming one part many
    times, a DOCX cell merged down many rows (python-docx gives its text once per row).
    A few kilobytes could so expand into gigabytes of text; past ``MAX_TEXT_CHARS``
    characters (or ``_MAX_MEMBERS`` chapters or slides) the extraction fails instead,
    before memory runs out.
    """

    def __init__(self, kind: str) -> None:
        self._kind = kind
        self._limit = MAX_TEXT_CHARS
        self._used = 0
        self._marks = 0

    def take(self, text: str) -> str:
        """``text``, once it is counted."""
        self.spend(len(text))
        return text

    def spend(self, amount: int) -> None:
        self._used += amount
        if self._used > self._limit:
            raise IngestionError(
                f"{self._kind} reads as more than {self._limit} characters of text, over "
                "the limit (does it name one part many times?)"
            )

    def parse(self, content: bytes, what: str) -> None:
        """Count a part about to be parsed alone (an EPUB chapter): ``IngestionError``
        when it is over ``MAX_PART_BYTES`` bytes or ``MAX_PART_MARKUP`` marks of
        markup, or when the parts so counted (one named many times, each time) hold
        more than ``MAX_MARKUP`` marks in all. Checked before the part is parsed."""
        if len(content) > MAX_PART_BYTES:
            raise IngestionError(
                f"{self._kind}: {what} is {len(content)} bytes, over the limit of "
                f"{MAX_PART_BYTES} for one part"
            )
        marks = _marks(content)
        if marks > MAX_PART_MARKUP:
            raise IngestionError(
                f"{self._kind}: {what} holds {marks} marks of markup ('<' and '='), over "
                f"the limit of {MAX_PART_MARKUP} for one part"
            )
        self._marks += marks
        if self._marks > MAX_MARKUP:
            raise IngestionError(
                f"{self._kind} holds more than {MAX_MARKUP} marks of markup ('<' and '=') "
                "to parse, over the limit (does it name one part many times?)"
            )

    def count(self, parts: int, what: str) -> None:
        """Refuse more ``parts`` (chapters, slides) than a container may hold."""
        if parts > _MAX_MEMBERS:
            raise IngestionError(
                f"{self._kind} lists {parts} {what}, over the limit of {_MAX_MEMBERS}"
            )


def join_pages(pages: list[str]) -> tuple[str, tuple[int, ...]]:
    """Pages (slides, chapters) joined by ``PAGE_SEPARATOR``, and where each starts."""
    starts: list[int] = []
    offset = 0
    for page in pages:
        starts.append(offset)
        offset += len(page) + len(PAGE_SEPARATOR)
    return PAGE_SEPARATOR.join(pages), tuple(starts)


def _read_bytes(path: Path) -> bytes:
    # A regular file only: a FIFO or device is refused at once, never waited on.
    try:
        return read_capped(path)
    except IngestionError as exc:
        raise IngestionError(f"cannot read {printable_path(path.name)!r}: {exc}") from None
    except OSError as exc:
        raise IngestionError(
            f"cannot read {printable_path(path.name)!r}: {exc.strerror or exc}"
        ) from None


_T = TypeVar("_T")


def _within_memory(work: Callable[[], _T]) -> _T:
    """``work()``, with running out of memory an ``IngestionError`` for this file.

    A ``MemoryError``'s traceback holds the frames that hold what filled memory (a
    parsed tree), so raised on, it kept memory full while the thread handed it to the
    event loop; that ran out again, the worker thread died and the ingest waited for it
    forever. So the error is dropped here, its tree collected, and a plain
    ``IngestionError`` raised in its place once memory is back."""
    try:
        return work()
    except MemoryError:
        pass
    # Outside the handler: the error and its frames are gone; the trees they held
    # are cycles (a parent and its children), freed by a collection.
    gc.collect()
    raise IngestionError(
        "ran out of memory extracting its text (the file needs more memory than this process has)"
    )


class BaseExtractor(ABC):
    """Shared plumbing: file and bytes entry points run the same sync function in a thread."""

    def __init__(self, identity: str, module: Any) -> None:
        self._identity = identity
        self._module = module

    @property
    def identity(self) -> str:
        return self._identity

    @property
    def run_identity(self) -> str:
        """Everything besides the bytes (and a declared charset) that this extractor's
        output depends on: its identity, plus the settings of a configured one. Equal
        run identities and bytes give equal extractions (extraction/cache.py)."""
        return self._identity

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._identity!r})"

    @abstractmethod
    def _run(self, data: bytes, charset: str | None) -> Extraction:
        """The extraction itself; runs in a worker thread."""

    def _text(self, data: bytes) -> str:
        """The text alone (runs in a worker thread): what a citation check compares. An
        extractor that can read it for less than a whole extraction overrides this."""
        return self._run(data, None).text

    async def extract(self, path: Path) -> str:
        return await asyncio.to_thread(_within_memory, lambda: self._text(_read_bytes(path)))

    async def extract_text(self, data: bytes) -> str:
        """``extract_bytes(data).text``, for what it may cost less to read."""
        return await asyncio.to_thread(_within_memory, lambda: self._text(data))

    async def extract_file(self, path: Path) -> Extraction:
        return await asyncio.to_thread(_within_memory, lambda: self._run(_read_bytes(path), None))

    async def extract_bytes(self, data: bytes, *, charset: str | None = None) -> Extraction:
        return await asyncio.to_thread(_within_memory, lambda: self._run(data, charset))
