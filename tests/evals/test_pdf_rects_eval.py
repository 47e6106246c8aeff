"""The rectangle eval: its judge refuses what is off, and its report is written whole."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from evals.machine import write_section
from evals.pdf_layouts import layout, run_offsets
from evals.pdf_rects import run

pytest.importorskip("pypdfium2")


def test_the_judge_refuses_a_shifted_box_and_one_over_two_lines() -> None:
    from evals.pdf_layouts import judge

    pdf = layout("plain")
    text = "\n".join(run.text for run in pdf.runs)  # offsets of our own: runs one per line
    offsets = run_offsets(text, [0], [r for r in pdf.runs if r.page == 1])
    first, second = pdf.runs[0], pdf.runs[1]
    box = first.box(0, len(first.text))
    exact = [(1, *box)]
    assert judge(0, len(first.text), exact, pdf.runs[: len(offsets)], offsets).ok
    shifted = [(1, box[0] + 3, box[1], box[2] + 3, box[3])]
    assert not judge(0, len(first.text), shifted, pdf.runs[: len(offsets)], offsets).covers
    wide = [(1, box[0], box[1], box[2] + 20, box[3])]
    assert not judge(0, len(first.text), wide, pdf.runs[: len(offsets)], offsets).tight
    both = (*second.box(0, len(second.text)),)
    merged = [(1, min(box[0], both[0]), both[1], max(box[2], both[2]), box[3])]
    end = offsets[1] + len(second.text)
    verdict = judge(0, end, merged, pdf.runs[: len(offsets)], offsets)
    assert verdict.covers and not verdict.per_line


async def test_report(tmp_path: Path) -> None:
    lines = await run(argparse.Namespace(repeat=1, long_pages=3))
    out = tmp_path / "quality.md"
    write_section(out, "pdf-rects", lines)
    report = out.read_text(encoding="utf-8")
    assert "| **all** | 11 |" in report and "bytes per page" in report
    assert "pdfium takes" in report and "What the geometry costs a search" in report
