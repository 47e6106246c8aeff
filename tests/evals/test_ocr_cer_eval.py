"""The OCR eval: its error rates, its scans, and a small run written as a section."""

from __future__ import annotations

from pathlib import Path

import pytest

from evals import ocr_cer
from evals.machine import write_section
from evals.ocr_cer import Scan, cer, wer
from evals.scanned import scanned_pdf
from tests.ocr_support import real_engine

pytest.importorskip("pypdfium2")


def test_error_rates_count_whitespace_runs_as_one_space() -> None:
    assert cer("a  b\nc", "a b c") == 0.0
    assert cer("a b x", "a b c") == pytest.approx(1 / 5)
    assert cer("", "abcd") == 1.0
    assert wer("the cat sat", "the cat sat down") == pytest.approx(1 / 4)


def test_scans_are_made_the_same_every_time_and_have_no_text_layer() -> None:
    import pypdfium2

    damaged = Scan("Times", 9, dpi=100, skew=1.0, blur=1.0, speckle=0.01)
    assert damaged.pdf() == damaged.pdf()
    assert damaged.damaged and not Scan("Times", 9).damaged
    assert damaged.file_name == "times-9-pt-at-100-dpi-skewed-1-blurred-1-px-1-0-speckle.pdf"
    document = pypdfium2.PdfDocument(scanned_pdf(["Some text."], rotate=270))
    try:
        page = document[0]
        assert page.get_rotation() == 270
        assert page.get_textpage().count_chars() == 0
    finally:
        document.close()


@pytest.mark.slow
async def test_a_small_run_is_written_as_a_section(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    engine = real_engine()
    scans = (Scan("Helvetica", 14), Scan("Times", 11, dpi=75))
    monkeypatch.setattr(ocr_cer, "SETTINGS", scans)
    (tmp_path / "scans").mkdir()
    rows = await ocr_cer.measure(tmp_path / "scans")
    assert [r.scan for r in rows] == list(scans)
    assert rows[0].cer == 0.0 and 0.0 <= rows[1].cer < 0.05
    tally = await ocr_cer.verify_citations(
        tmp_path / "scans", tmp_path / "index", scans[0].file_name
    )
    assert tally.chunks and tally.chunks_verified == tally.chunks and not tally.failed
    assert tally.results_checked and tally.results_verified == tally.results_checked
    lines = ocr_cer._report(rows, tally, engine.identity, scans[0].file_name)
    out = tmp_path / "quality.md"
    write_section(out, ocr_cer.SECTION, lines)
    text = out.read_text(encoding="utf-8")
    assert "<!-- section:ocr -->" in text and "| Helvetica 14 pt at 200 dpi | 0.00% |" in text
