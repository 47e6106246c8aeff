"""The shipped adversarial citation suite, run as CI runs it: every case gets its verdict."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from groundkit.testing.adversarial import (
    ADVERSARIAL_CASES,
    AdversarialReport,
    run_adversarial,
)


async def test_every_case_gets_its_verdict_comparing_terms(tmp_path: Path) -> None:
    report = await run_adversarial(tmp_path)
    assert [o.case.name for o in report.outcomes] == [c.name for c in ADVERSARIAL_CASES]
    assert report.ok, (
        report.table() + "\n" + "\n".join(f"{o.case.name}: {o.detail}" for o in report.failures)
    )


@pytest.mark.slow
async def test_every_case_gets_its_verdict_with_the_real_embedder(tmp_path: Path) -> None:
    from groundkit.providers.local import SentenceTransformerEmbedder

    embedder = SentenceTransformerEmbedder("all-MiniLM-L6-v2")  # the packaged copy, offline
    report = await run_adversarial(tmp_path, embedder=embedder)
    assert report.ok, (
        report.table() + "\n" + "\n".join(f"{o.case.name}: {o.detail}" for o in report.failures)
    )


def test_the_suite_covers_every_family_the_check_must_catch() -> None:
    families = {c.family for c in ADVERSARIAL_CASES}
    assert {
        "fabricated",
        "spliced",
        "misattributed",
        "tampered",
        "stale",
        "unicode",
        "markers",
        "benign",
    } <= families
    assert len({c.name for c in ADVERSARIAL_CASES}) == len(ADVERSARIAL_CASES)
    # Each attack family must be caught as a problem, never read as faithful.
    for case in ADVERSARIAL_CASES:
        if case.family not in {"benign"}:
            assert case.expected not in {"quoted", "supported"}, case.name


async def test_a_case_the_check_lets_through_fails_the_report(tmp_path: Path) -> None:
    # The same fabricated quote, wrongly expected to read as quoted: the report must
    # name it, or the suite could never fail.
    fabricated = next(c for c in ADVERSARIAL_CASES if c.name == "fabricated quote")
    wrong = dataclasses.replace(fabricated, name="expects the wrong verdict", expected="quoted")
    report = await run_adversarial(tmp_path, cases=[wrong])
    assert not report.ok
    assert [o.case.name for o in report.failures] == ["expects the wrong verdict"]
    assert report.failures[0].got == "misquoted"
    assert "| expects the wrong verdict | fabricated | quoted | misquoted | MISSED |" in (
        report.table()
    )


def test_an_empty_report_is_ok_and_prints_a_header() -> None:
    report = AdversarialReport()
    assert report.ok and report.failures == []
    assert report.table().splitlines()[0].startswith("| case |")
