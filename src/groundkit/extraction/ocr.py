"""Words and their pixel boxes from a page image, through the system's tesseract.

The ``tesseract`` program (Debian ``tesseract-ocr``) is run directly rather than
through a wrapper: a per-call environment (``OMP_THREAD_LIMIT=1``), an image
passed on stdin with no temporary file, and errors that are this module's own
(adr/0073-ocr.md). The engine's identity pins what its words depend on: the
tesseract and leptonica versions, a hash of each language's data, and the fixed
settings below. Same image and same identity: same words, same boxes.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import threading
from collections import OrderedDict
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from groundkit.errors import ConfigurationError, IngestionError

__all__ = [
    "OCR_DPI",
    "OCR_INSTALL",
    "GrayImage",
    "OcrEngine",
    "OcrLine",
    "OcrWord",
    "ocr_engine",
]

# The resolution pages are rendered at for recognition: tesseract's models are
# trained on text of roughly this size, and it is part of the identity.
OCR_DPI = 300
# Automatic page segmentation without orientation detection; LSTM engine only.
_PSM = 3
_OEM = 1
# One page, whatever its size, may take no longer than this.
_TIMEOUT_SECONDS = 300.0
# Pages an engine remembers the words of, by image hash: checking several citations
# into one scanned PDF recognises its pages once, not once per citation.
_REMEMBERED_PAGES = 64

OCR_INSTALL = "pip install groundkit[ocr] and apt-get install tesseract-ocr"
_LANGUAGES = re.compile(r"[A-Za-z0-9_]+(\+[A-Za-z0-9_]+)*")
_DATA_DIR = re.compile(r'"(.+)"')


@dataclass(frozen=True, slots=True)
class OcrWord:
    """One recognised word and its box in image pixels (top-left origin, right/bottom exclusive)."""

    text: str
    left: int
    top: int
    right: int
    bottom: int


@dataclass(frozen=True, slots=True)
class OcrLine:
    """A line's words in reading order; ``block`` and ``paragraph`` say where it stands."""

    block: int
    paragraph: int
    words: tuple[OcrWord, ...]


@dataclass(frozen=True, slots=True)
class GrayImage:
    """8-bit grayscale pixels, row after row with no padding (what a page render gives),
    and the resolution they were rendered at (``OCR_DPI`` unless a page too large for it
    was rendered at less: extraction/pdf_ocr.py)."""

    width: int
    height: int
    pixels: bytes
    dpi: int = OCR_DPI

    def __post_init__(self) -> None:
        if self.width <= 0 or self.height <= 0 or len(self.pixels) != self.width * self.height:
            raise ValueError(
                f"{len(self.pixels)} bytes do not make a {self.width}x{self.height} gray image"
            )
        if self.dpi <= 0:
            raise ValueError(f"a gray image at {self.dpi} dpi")

    def pgm(self) -> bytes:
        """The image as binary PGM, a format tesseract reads from stdin."""
        return f"P5\n{self.width} {self.height}\n255\n".encode("ascii") + self.pixels


def _run(args: list[str], *, data: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    env = dict(os.environ)
    # One thread: the run does not depend on how many cores the host has, and
    # concurrent ingests do not oversubscribe them.
    env["OMP_THREAD_LIMIT"] = "1"
    try:
        return subprocess.run(
            args,
            input=data,
            capture_output=True,
            env=env,
            timeout=_TIMEOUT_SECONDS,
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise IngestionError(
            f"tesseract did not finish a page in {_TIMEOUT_SECONDS:.0f} s"
        ) from None
    except OSError as exc:
        raise ConfigurationError(
            f"cannot run tesseract ({exc.strerror or exc}); OCR needs {OCR_INSTALL}"
        ) from None


def _versions(program: str) -> str:
    """``tesseract/5.3.0+leptonica/1.82.0`` from ``tesseract --version``."""
    done = _run([program, "--version"])
    out = (done.stdout + done.stderr).decode("utf-8", "replace")
    tesseract = re.search(r"tesseract\s+v?(\S+)", out)
    leptonica = re.search(r"leptonica-(\S+)", out)
    if done.returncode != 0 or tesseract is None or leptonica is None:
        raise ConfigurationError(
            f"{program} --version did not name tesseract's and leptonica's versions; "
            f"OCR needs {OCR_INSTALL}"
        )
    return f"tesseract/{tesseract.group(1)}+leptonica/{leptonica.group(1)}"


def _language_data(program: str, languages: str) -> str:
    """``eng@1a2b3c4d5e6f`` per language: the first 12 hex digits of its data's sha256."""
    done = _run([program, "--list-langs"])
    out = (done.stdout + done.stderr).decode("utf-8", "replace")
    found = _DATA_DIR.search(out)
    if done.returncode != 0 or found is None:
        raise ConfigurationError(f"{program} --list-langs did not say where its language data is")
    directory = Path(found.group(1))
    parts: list[str] = []
    for language in languages.split("+"):
        path = directory / f"{language}.traineddata"
        try:
            digest = hashlib.sha256(path.read_bytes()).hexdigest()
        except OSError:
            raise ConfigurationError(
                f"tesseract has no language data for {language!r} in {directory}: "
                f"apt-get install tesseract-ocr-{language.lower().replace('_', '-')}"
            ) from None
        parts.append(f"{language}@{digest[:12]}")
    return "+".join(parts)


def _tsv_lines(tsv: str) -> list[OcrLine]:
    """Word rows of tesseract's TSV grouped into lines, in the order it wrote them."""
    lines: list[OcrLine] = []
    current: tuple[int, int, int] | None = None
    words: list[OcrWord] = []
    for row in tsv.splitlines()[1:]:
        cells = row.split("\t")
        if len(cells) < 12 or cells[0] != "5":
            continue
        text = cells[11].strip()
        if not text:
            continue
        block, paragraph, line = int(cells[2]), int(cells[3]), int(cells[4])
        left, top, width, height = (int(c) for c in cells[6:10])
        if (block, paragraph, line) != current:
            if words and current is not None:
                lines.append(OcrLine(current[0], current[1], tuple(words)))
            current, words = (block, paragraph, line), []
        words.append(OcrWord(text, left, top, left + width, top + height))
    if words and current is not None:
        lines.append(OcrLine(current[0], current[1], tuple(words)))
    return lines


class OcrEngine:
    """tesseract with fixed settings for ``languages``; get it from ``ocr_engine()``."""

    def __init__(self, program: str, languages: str) -> None:
        self._program = program
        self.languages = languages
        self.dpi = OCR_DPI  # the resolution pages are rendered at when they fit (GrayImage.dpi)
        self._seen: OrderedDict[bytes, tuple[OcrLine, ...]] = OrderedDict()
        self._seen_lock = threading.Lock()
        self.identity = (
            f"{_versions(program)}+{_language_data(program, languages)}"
            f"+oem{_OEM}+psm{_PSM}+{OCR_DPI}dpi"
        )

    def __repr__(self) -> str:
        return f"OcrEngine({self.identity!r})"

    def recognise(self, image: GrayImage) -> list[OcrLine]:
        """The words on ``image`` (told to tesseract as rendered at ``image.dpi``), line
        by line in reading order (block, paragraph, line, word). Confidence is not used:
        every word tesseract reports is kept, so the text is what the engine read, not a
        filtered view.

        The same image gives the same words, so a page seen lately is answered from
        memory (the engine's identity pins everything the words depend on)."""
        pgm = image.pgm()
        digest = hashlib.sha256(b"%d dpi\n" % image.dpi)
        digest.update(pgm)
        key = digest.digest()
        with self._seen_lock:
            if key in self._seen:
                self._seen.move_to_end(key)
                return list(self._seen[key])
        lines = self._recognise(pgm, image.dpi)
        with self._seen_lock:
            self._seen[key] = tuple(lines)
            while len(self._seen) > _REMEMBERED_PAGES:
                self._seen.popitem(last=False)
        return lines

    def _recognise(self, pgm: bytes, dpi: int) -> list[OcrLine]:
        done = _run(
            [
                self._program,
                "stdin",
                "stdout",
                "-l",
                self.languages,
                "--oem",
                str(_OEM),
                "--psm",
                str(_PSM),
                "--dpi",
                str(dpi),
                "tsv",
            ],
            data=pgm,
        )
        if done.returncode != 0:
            message = done.stderr.decode("utf-8", "replace").strip().splitlines()
            raise IngestionError(
                f"tesseract failed on a page (exit {done.returncode}): "
                + (message[-1] if message else "no message")
            )
        return _tsv_lines(done.stdout.decode("utf-8", "replace"))


@cache
def ocr_engine(languages: str = "eng") -> OcrEngine:
    """The process's engine for ``languages`` (tesseract's ``eng+deu`` form).

    ``ConfigurationError`` naming the install when tesseract or the language data is missing.
    """
    if not _LANGUAGES.fullmatch(languages):
        raise ConfigurationError(
            f"OCR languages {languages!r} are not tesseract language names joined by '+'"
        )
    program = shutil.which("tesseract")
    if program is None:
        raise ConfigurationError(f"OCR needs the tesseract program: {OCR_INSTALL}")
    return OcrEngine(program, languages)
