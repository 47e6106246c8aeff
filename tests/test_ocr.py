"""The tesseract engine on rendered pages: pinned identity, same words and boxes every run."""

from __future__ import annotations

import itertools
import json
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from evals.scanned import scanned_pdf
from groundkit.config import IngestConfig
from groundkit.errors import ConfigurationError, InvalidSettingError
from groundkit.extraction.ocr import GrayImage, OcrEngine, OcrLine, OcrWord, ocr_engine
from groundkit.extraction.pdf_ocr import (
    DeviceToPage,
    OcrEngineChangedError,
    lay_out,
    recorded_engine,
    split_ocr_identity,
)
from tests.ocr_support import pdfium_page_image, real_engine
from tests.services import REPO_ROOT

TEXT = "Tesseract reads scanned pages.\nSecond line of the first paragraph.\n\nA new paragraph."


@pytest.fixture
def fresh_engines() -> Iterator[None]:
    ocr_engine.cache_clear()
    yield
    ocr_engine.cache_clear()


def _words(lines: list[OcrLine]) -> list[str]:
    return [word.text for line in lines for word in line.words]


def test_identity_pins_versions_language_data_and_settings() -> None:
    engine = real_engine()
    assert re.fullmatch(
        r"tesseract/[\w.\-]+\+leptonica/[\w.\-]+\+eng@[0-9a-f]{12}\+oem1\+psm3\+300dpi",
        engine.identity,
    ), engine.identity
    assert ocr_engine("eng") is engine


def test_recognises_the_rendered_text_with_boxes_in_reading_order() -> None:
    engine = real_engine()
    image, _ = pdfium_page_image(scanned_pdf([TEXT], size=14))
    lines = engine.recognise(image)
    assert " ".join(_words(lines)) == " ".join(TEXT.split())
    # Two paragraphs: the third line starts the second.
    assert (lines[0].block, lines[0].paragraph) == (lines[1].block, lines[1].paragraph)
    assert (lines[2].block, lines[2].paragraph) != (lines[1].block, lines[1].paragraph)
    for line in lines:
        lefts = [word.left for word in line.words]
        assert lefts == sorted(lefts)
        for word in line.words:
            assert 0 <= word.left < word.right <= image.width
            assert 0 <= word.top < word.bottom <= image.height


def test_same_page_same_words_and_boxes_across_runs_and_processes(tmp_path: Path) -> None:
    engine = real_engine()
    data = scanned_pdf([TEXT], size=11)
    image, _ = pdfium_page_image(data)
    first = engine.recognise(image)
    # A second engine: the first remembers the page and would not run tesseract again.
    assert OcrEngine(str(shutil.which("tesseract")), "eng").recognise(image) == first
    (tmp_path / "scan.pdf").write_bytes(data)
    code = (
        "import json, sys\n"
        "from pathlib import Path\n"
        "from groundkit.extraction.ocr import ocr_engine\n"
        "from tests.ocr_support import pdfium_page_image\n"
        "image, _ = pdfium_page_image(Path(sys.argv[1]).read_bytes())\n"
        "lines = ocr_engine().recognise(image)\n"
        "print(json.dumps([[[w.text, w.left, w.top, w.right, w.bottom] for w in line.words]"
        " for line in lines]))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path / "scan.pdf")],
        capture_output=True,
        text=True,
        check=True,
        cwd=REPO_ROOT,
        timeout=120,
    )
    assert json.loads(done.stdout) == [
        [[w.text, w.left, w.top, w.right, w.bottom] for w in line.words] for line in first
    ]


def test_layout_joins_words_lines_and_paragraphs_and_boxes_each_character() -> None:
    engine = real_engine()
    image, to_page = pdfium_page_image(scanned_pdf([TEXT], size=14))
    text, boxes = lay_out(engine.recognise(image), to_page)
    assert text == TEXT
    assert len(boxes) == len(text)
    for char, box in zip(text, boxes, strict=True):
        assert (box is None) == (char in " \n")
        if box is not None:
            x0, y0, x1, y1 = box
            assert 0 <= x0 < x1 <= 595.3 and 0 <= y0 < y1 <= 841.9


def test_a_page_seen_lately_is_not_recognised_again(monkeypatch: pytest.MonkeyPatch) -> None:
    real_engine()
    engine = OcrEngine(str(shutil.which("tesseract")), "eng")  # remembers nothing yet
    image, _ = pdfium_page_image(scanned_pdf([TEXT], size=14))
    lines = engine.recognise(image)
    # With the program gone, only a page it has seen can still be answered.
    monkeypatch.setattr(engine, "_program", "/nonexistent/tesseract")
    assert engine.recognise(image) == lines
    with pytest.raises(ConfigurationError, match="cannot run tesseract"):
        engine.recognise(GrayImage(10, 10, b"\xff" * 100))


def test_a_blank_image_has_no_words() -> None:
    engine = real_engine()
    assert engine.recognise(GrayImage(400, 300, b"\xff" * 400 * 300)) == []


def test_device_to_page_maps_a_rotated_render_back_to_user_space() -> None:
    # /Rotate 90 on a landscape 800x600 page shown portrait: pixel (0, 0) is the
    # user-space origin, pixel x runs up the page, pixel y runs along it.
    def to_page(x: int, y: int) -> tuple[float, float]:
        return (y * 800 / 1000, x * 600 / 750)

    transform = DeviceToPage.from_corners(to_page, 750, 1000)
    assert transform(375, 500) == pytest.approx((400, 300))
    line = OcrLine(1, 1, ())
    assert lay_out([line], transform) == ("", [])


def test_bad_language_names_are_refused(fresh_engines: None) -> None:
    with pytest.raises(ConfigurationError, match="tesseract language names"):
        ocr_engine("eng; rm -rf /")


def test_missing_language_data_names_the_package(fresh_engines: None) -> None:
    real_engine()
    with pytest.raises(ConfigurationError, match="apt-get install tesseract-ocr-zzz"):
        ocr_engine("zzz")


def test_missing_tesseract_names_the_install(
    fresh_engines: None, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(ConfigurationError) as caught:
        ocr_engine()
    assert "pip install groundkit[ocr]" in str(caught.value)
    assert "apt-get install tesseract-ocr" in str(caught.value)


_WORD = st.text(alphabet=st.characters(categories=("L", "N", "P")), min_size=1, max_size=12).filter(
    lambda w: not any(c.isspace() for c in w)
)


@st.composite
def _recognised(draw: st.DrawFn) -> list[OcrLine]:
    lines: list[OcrLine] = []
    block, paragraph, top = 1, 1, 10
    for _ in range(draw(st.integers(0, 6))):
        if draw(st.booleans()):
            paragraph += 1
        words: list[OcrWord] = []
        left = 10
        for text in draw(st.lists(_WORD, min_size=1, max_size=5)):
            width = draw(st.integers(1, 200))
            words.append(OcrWord(text, left, top, left + width, top + 30))
            left += width + draw(st.integers(1, 20))
        lines.append(OcrLine(block, paragraph, tuple(words)))
        top += 40
    return lines


@given(_recognised(), st.sampled_from([0, 90, 180, 270]))
def test_layout_invariants(lines: list[OcrLine], rotation: int) -> None:
    # A 2000x3000 px render of a page, turned as pdfium turns it for /Rotate.
    def to_page(x: int, y: int) -> tuple[float, float]:
        u, v = x * 0.24, y * 0.24
        return {
            0: (u, 720 - v),
            90: (v, u),
            180: (480 - u, v),
            270: (720 - v, 480 - u),
        }[rotation]

    transform = DeviceToPage.from_corners(to_page, 2000, 3000)
    text, boxes = lay_out(lines, transform)
    assert len(boxes) == len(text)
    assert text.split() == [word.text for line in lines for word in line.words]
    assert text.count("\n") == sum(
        1 if (a.block, a.paragraph) == (b.block, b.paragraph) else 2
        for a, b in itertools.pairwise(lines)
    )
    position = 0
    for line in lines:
        for word in line.words:
            position = text.index(word.text, position)
            chars = boxes[position : position + len(word.text)]
            x0, y0 = to_page(word.left, word.top)
            x1, y1 = to_page(word.right, word.bottom)
            # The word's characters tile its box, in reading order along the line.
            assert all(box is not None for box in chars)
            union = (
                min(b[0] for b in chars if b),
                min(b[1] for b in chars if b),
                max(b[2] for b in chars if b),
                max(b[3] for b in chars if b),
            )
            assert union == pytest.approx((min(x0, x1), min(y0, y1), max(x0, x1), max(y0, y1)))
            position += len(word.text)
    assert all((box is None) == (char in " \n") for char, box in zip(text, boxes, strict=True))


def test_a_recorded_identity_names_the_languages_to_check_with(fresh_engines: None) -> None:
    engine = real_engine()
    recorded = f"groundkit-ocr/1+{engine.identity}"
    assert split_ocr_identity(f"groundkit-pdf/1+pypdfium2/5.0+ocr:{recorded}") == (
        "groundkit-pdf/1+pypdfium2/5.0",
        recorded,
    )
    assert split_ocr_identity("groundkit-pdf/1+pypdfium2/5.0") == (
        "groundkit-pdf/1+pypdfium2/5.0",
        None,
    )
    assert recorded_engine(recorded) is engine
    # Recognised with English and German: German data is needed here to check it.
    both = recorded.replace("+oem1", "+deu@0123456789ab+oem1")
    with pytest.raises(ConfigurationError, match="apt-get install tesseract-ocr-deu"):
        recorded_engine(both)
    with pytest.raises(OcrEngineChangedError) as caught:
        recorded_engine(recorded.replace("psm3", "psm6"))
    assert engine.identity in str(caught.value) and "psm6" in str(caught.value)


@pytest.mark.parametrize("languages", ["", "eng;deu", "eng+", "../eng", "eng deu"])
def test_ingest_config_refuses_what_is_not_a_language_list(languages: str) -> None:
    with pytest.raises(InvalidSettingError):
        IngestConfig(ocr_languages=languages)
    assert IngestConfig(ocr_languages="eng+chi_sim").ocr_languages == "eng+chi_sim"
    with pytest.raises(InvalidSettingError):
        IngestConfig(ocr="sometimes")  # type: ignore[arg-type]
