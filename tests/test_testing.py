"""The groundkit.testing pytest plugin: unit checks, then a sample project run through pytester."""

from __future__ import annotations

import asyncio
import importlib.metadata
import subprocess
import sys
import textwrap
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from groundkit import Collection, InvalidQueryError, NotGroundedError, RetrievalResult
from groundkit.testing import Grounding, assert_answer_grounded, assert_grounded, check_grounded
from tests.support import write_tree

pytest_plugins = ["pytester"]

TEA = (
    "Green tea is brewed at about 80 degrees.\n\nBlack tea wants boiling water and four minutes.\n"
)
COFFEE = "An espresso is pulled in about 25 seconds.\n"


@pytest.fixture
async def col(tmp_path: Path) -> AsyncIterator[Collection]:
    base = tmp_path / "corpus"
    write_tree(base, {"tea.md": TEA, "coffee.txt": COFFEE})
    async with Collection.open(tmp_path / "index", base_dir=base) as opened:
        await opened.ingest(base)
        yield opened


async def _results(col: Collection, query: str) -> list[RetrievalResult]:
    return list((await col.search(query)).results)


async def test_grounded_answer_passes_from_async_code(col: Collection) -> None:
    results = await _results(col, "tea temperature espresso")
    outcomes = assert_grounded(
        ["Green tea is brewed at about 80 degrees.", "pulled in about 25 seconds"],
        results,
        base_dir=col.base_dir,
    )
    assert [o.ok for o in outcomes] == [True, True]
    check = outcomes[0].check
    assert check is not None and check.citation.source == "tea.md"


def test_grounded_answer_passes_from_plain_code(tmp_path: Path) -> None:
    base = tmp_path / "corpus"
    write_tree(base, {"tea.md": TEA})

    async def search() -> list[RetrievalResult]:
        async with Collection.open(tmp_path / "index", base_dir=base) as c:
            await c.ingest(base)
            return list((await c.search("green tea")).results)

    results = asyncio.run(search())
    assert_grounded(["brewed at about 80 degrees"], results, base_dir=base)


async def test_failure_message_names_each_quote_and_why(col: Collection) -> None:
    results = await _results(col, "tea espresso")
    tea = next(r for r in results if r.source == "tea.md")
    with pytest.raises(NotGroundedError) as info:
        assert_grounded(
            [
                "Green tea is brewed at about 80 degrees.",
                "Green tea is brewed at about 100 degrees.",
                ("pulled in about 25 seconds", tea.chunk_id),
                ("anything", "no-such-chunk"),
                "Matcha is whisked.",
            ],
            results,
            base_dir=col.base_dir,
        )
    message = str(info.value)
    assert isinstance(info.value, AssertionError)
    assert message.startswith("4 of 5 quotes not grounded in the 2 results:")
    assert "quote 1 " not in message
    assert "quote 2 'Green tea is brewed at about 100 degrees.'\n" in message
    assert (
        f"not found in any of the 2 results; nearest: not in 'tea.md' [0:{len(TEA) - 1}]; the "
        "span matches its first 29 characters ('Green tea is brewed at about '), then reads "
        "'80 degrees."
    ) in message
    assert f"quote 3 'pulled in about 25 seconds' (chunk {tea.chunk_id})" in message
    assert "not found in the cited span: not in 'tea.md'" in message
    assert "cites chunk 'no-such-chunk', which is not among the 2 results" in message
    assert message.endswith("quote 5 'Matcha is whisked.'\n    not found in any of the 2 results")


async def test_drifted_and_unresolvable_sources(col: Collection) -> None:
    results = await _results(col, "tea espresso")
    (col.base_dir / "tea.md").write_text(TEA.replace("80", "85"), encoding="utf-8")
    (col.base_dir / "coffee.txt").unlink()
    outcomes = await check_grounded(
        ["Green tea is brewed at about 80 degrees.", "pulled in about 25 seconds"],
        results,
        base_dir=col.base_dir,
    )
    assert [o.ok for o in outcomes] == [False, False]
    first, second = (o.problem or "" for o in outcomes)
    assert first.startswith("span drifted: 'tea.md' [0:")
    assert second.startswith("source unresolvable: cannot read source 'coffee.txt'")


async def test_a_quote_in_a_span_that_moved_fails_saying_so(col: Collection) -> None:
    # The quote is still in the source, but not where its citation says: a test of
    # grounding fails until the corpus is re-ingested, and says the span moved.
    results = await _results(col, "green tea brewed")
    (col.base_dir / "tea.md").write_text("A heading.\n\n" + TEA, encoding="utf-8")
    (outcome,) = await check_grounded(
        ["Green tea is brewed at about 80 degrees."], results, base_dir=col.base_dir
    )
    assert not outcome.ok and outcome.check is not None and outcome.check.verdict == "moved"
    assert (outcome.problem or "").startswith("span moved (its text is intact elsewhere")


async def test_no_quotes_or_no_results_fail(col: Collection) -> None:
    results = await _results(col, "tea")
    with pytest.raises(NotGroundedError, match="no quotes to check"):
        assert_grounded([], results, base_dir=col.base_dir)
    with pytest.raises(NotGroundedError, match="there are no results to ground it in"):
        assert_grounded(["Green tea"], [], base_dir=col.base_dir)


async def test_a_bare_string_is_refused_not_read_letter_by_letter(col: Collection) -> None:
    """Each letter of a made-up quote is somewhere in the results: read as a list of
    one-letter quotes, "Bananas" would pass."""
    results = await _results(col, "green tea")
    with pytest.raises(InvalidQueryError, match="not one string"):
        assert_grounded("Bananas", results, base_dir=col.base_dir)
    with pytest.raises(InvalidQueryError, match="not one string"):
        await check_grounded("Bananas", results, base_dir=col.base_dir)
    with pytest.raises(NotGroundedError, match="Bananas"):
        assert_grounded(["Bananas"], results, base_dir=col.base_dir)


@pytest.mark.parametrize(
    ("quotes", "message"),
    [
        ([123], "quote 1 must be a str"),
        ([("q", "c", "x")], "quote 1 must be a str or a"),
        (["Green tea", "  "], "quote 2 is empty"),
        (None, "must be a list of quotes"),
    ],
)
async def test_malformed_quotes_are_query_errors(
    col: Collection, quotes: Any, message: str
) -> None:
    results = await _results(col, "green tea")
    with pytest.raises(InvalidQueryError, match=message):
        assert_grounded(quotes, results, base_dir=col.base_dir)


@pytest.mark.parametrize("results", [None, "tea", [1]])
async def test_malformed_results_are_query_errors(col: Collection, results: Any) -> None:
    with pytest.raises(InvalidQueryError, match="results"):
        assert_grounded(["Green tea"], results, base_dir=col.base_dir)


async def test_grounding_binds_the_directories(col: Collection) -> None:
    response = await col.search("espresso")
    grounding = Grounding(col.base_dir)
    assert grounding(["An espresso is pulled"], response)[0].ok
    outcomes = await grounding.check(["A latte"], response)
    assert outcomes[0].problem == "not found in any of the 1 results"


def test_registered_as_a_pytest_plugin() -> None:
    entry = [e for e in importlib.metadata.entry_points(group="pytest11") if e.name == "groundkit"]
    assert [e.value for e in entry] == ["groundkit.testing.plugin"]


def test_the_asserts_need_no_pytest(tmp_path: Path) -> None:
    # A script, or another test runner: pytest made unimportable in a fresh interpreter.
    (tmp_path / "tea.md").write_text("Green tea is brewed at about 80 degrees.\n", "utf-8")
    code = textwrap.dedent(
        """
        import asyncio, sys
        sys.modules["pytest"] = None
        import groundkit
        from groundkit.testing import NotGroundedError, assert_grounded

        async def main():
            async with groundkit.Collection.open(sys.argv[1] + "/idx", base_dir=sys.argv[1]) as col:
                await col.ingest(sys.argv[1])
                return await col.search("green tea")

        response = asyncio.run(main())
        assert_grounded(["brewed at about 80 degrees"], response, base_dir=sys.argv[1])
        try:
            assert_grounded(["brewed at 100 degrees"], response, base_dir=sys.argv[1])
        except NotGroundedError as exc:
            print("refused:", exc)
        try:
            import groundkit.testing.conformance
        except groundkit.ConfigurationError as exc:
            print("conformance:", exc)
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "refused: " in done.stdout
    assert "pip install 'groundkit[test]'" in done.stdout


# -- a user's project, run by pytest itself --------------------------------------

SAMPLE_TEST = """
import asyncio
from pathlib import Path

from groundkit import Collection

HERE = Path(__file__).parent


def search(query):
    async def run():
        async with Collection.open(HERE / ".index", base_dir=HERE / "docs") as col:
            await col.ingest(HERE / "docs")
            return (await col.search(query)).results

    return asyncio.run(run())


def test_grounded_answer(grounded):
    results = search("how hot should green tea be")
    grounded(["Green tea is brewed at about 80 degrees."], results)


def test_altered_quote(grounded):
    results = search("how hot should green tea be")
    grounded(["Green tea is brewed at about 100 degrees."], results)


def test_source_edited_after_the_answer(grounded):
    results = search("how hot should green tea be")
    (HERE / "docs" / "tea.md").write_text("Green tea is brewed cool.\\n", encoding="utf-8")
    grounded([("Green tea is brewed at about 80 degrees.", results[0].chunk_id)], results)
"""


def test_sample_project_grounded_passes_altered_fails(pytester: pytest.Pytester) -> None:
    pytester.makefile(".md", **{"docs/tea": TEA})
    pytester.makeini("[pytest]\ngroundkit_base_dir = docs\n")
    pytester.makepyfile(test_answer=SAMPLE_TEST)
    run = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    run.assert_outcomes(passed=1, failed=2)
    run.stdout.fnmatch_lines(
        [
            "*NotGroundedError: 1 of 1 quotes not grounded in the 1 results:",
            "*quote 1 'Green tea is brewed at about 100 degrees.'",
            "*not found in any of the 1 results; nearest: not in 'tea.md' *; the span matches "
            "its first 29 characters ('Green tea is brewed at about '), then reads '80 degrees.*",
        ]
    )
    run.stdout.fnmatch_lines(
        [
            "*quote 1 'Green tea is brewed at about 80 degrees.' (chunk *)",
            "*span drifted: 'tea.md' is now 26 characters long; the citation ends at *",
        ]
    )
    run.stdout.fnmatch_lines(
        [
            "FAILED test_answer.py::test_altered_quote - *",
            "FAILED test_answer.py::test_source_edited_after_the_answer - *",
        ]
    )


# -- whole answers ----------------------------------------------------------------


async def test_assert_answer_grounded_passes_and_returns_the_report(col: Collection) -> None:
    response = await col.search("green tea degrees espresso seconds")
    assert [r.source for r in response.results] == ["tea.md", "coffee.txt"]
    report = assert_answer_grounded(
        'Green tea is brewed at about 80 degrees [1]. An espresso takes "about 25 seconds" [2].',
        response,
        base_dir=col.base_dir,
    )
    assert [s.verdict for s in report.sentences] == ["supported", "quoted"]


async def test_assert_answer_grounded_names_each_failing_sentence(col: Collection) -> None:
    response = await col.search("green tea degrees espresso seconds")
    answer = (
        "Green tea is brewed at about 80 degrees [1]. "
        "Espresso machines were invented on the moon [2]. "
        "Everyone drinks tea every single morning. "
        "See also [5]."
    )
    with pytest.raises(NotGroundedError) as caught:
        assert_answer_grounded(answer, response, base_dir=col.base_dir)
    message = str(caught.value)
    assert message.splitlines()[0] == "3 problem(s) in an answer of 4 sentence(s):"
    assert "sentence 2 [unsupported] 'Espresso machines were invented on the moon [2].'" in message
    assert "sentence 3 [uncited] 'Everyone drinks tea every single morning.'" in message
    assert "sentence 4 [dangling] 'See also [5].': marker '5' names no result" in message
    # allow= lets a verdict through; an answer citing nothing always fails.
    with pytest.raises(NotGroundedError, match="cites nothing"):
        assert_answer_grounded(
            "Everyone drinks tea every morning.", response, base_dir=col.base_dir, allow={"uncited"}
        )
    with pytest.raises(InvalidQueryError, match="not problems"):
        assert_answer_grounded("x", response, base_dir=col.base_dir, allow={"quoted"})


SAMPLE_ANSWER_TEST = """
import asyncio
from pathlib import Path

from groundkit import Collection

HERE = Path(__file__).parent


def search(query):
    async def run():
        async with Collection.open(HERE / ".index", base_dir=HERE / "docs") as col:
            await col.ingest(HERE / "docs")
            return await col.search(query)

    return asyncio.run(run())


def test_grounded(grounded_answer):
    grounded_answer("Green tea is brewed at about 80 degrees [1].", search("green tea"))


def test_ungrounded(grounded_answer):
    grounded_answer("Green tea is brewed at about 80 degrees [2].", search("green tea"))
"""


def test_sample_project_grounded_answer_fixture(pytester: pytest.Pytester) -> None:
    pytester.makefile(".md", **{"docs/tea": TEA})
    pytester.makeini("[pytest]\ngroundkit_base_dir = docs\n")
    pytester.makepyfile(test_answer=SAMPLE_ANSWER_TEST)
    run = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    run.assert_outcomes(passed=1, failed=1)
    run.stdout.fnmatch_lines(
        [
            "*NotGroundedError: 1 problem(s) in an answer of 1 sentence(s):",
            # fnmatch reads [...] as a character class: ? stands for each bracket.
            "*sentence 1 ?dangling? 'Green tea is brewed at about 80 degrees ?2?.': marker '2' "
            "names no result (there are 1; numbers count from 1)",
        ]
    )
