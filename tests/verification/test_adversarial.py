"""The shipped adversarial citation suite, run as CI runs it: every case gets its verdict."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from groundkit import InvalidSettingError
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


async def test_bad_arguments_are_refused_before_any_case_runs(tmp_path: Path) -> None:
    """An unknown verify option failed only once the first case's collection was made
    (a ``TypeError``), and a second run into the same directory hit ``FileExistsError``."""
    one = [ADVERSARIAL_CASES[0]]
    wrong: list[tuple[dict[str, object], str]] = [
        ({"workdir": 5}, "workdir must be a directory path"),
        ({"cases": "fabricated quote"}, "cases must be a list of AdversarialCase"),
        ({"cases": [ADVERSARIAL_CASES[0], "x"]}, r"cases\[1\] is a str"),
        ({"cases": one, "supported_treshold": 0.5}, "no option 'supported_treshold'"),
    ]
    for arguments, message in wrong:
        given: dict[str, object] = {"workdir": tmp_path, **arguments}
        with pytest.raises(InvalidSettingError, match=message):
            await run_adversarial(**given)  # type: ignore[arg-type]
    assert list(tmp_path.iterdir()) == []
    assert (await run_adversarial(tmp_path, cases=one)).ok
    with pytest.raises(InvalidSettingError, match="case-00' exists"):
        await run_adversarial(tmp_path, cases=one)
