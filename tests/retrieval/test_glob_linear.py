"""Source globs match in time linear in the source, whatever the pattern.

The old translation to a backtracking regex (``*`` as ``[^/]*``, ``**`` as ``.*``) took
time exponential in the number of stars on a source that almost matched, inside ``re``
where no signal could stop it: ``grk search --where 'source.glob=***...zz'`` never
ended. The regex is kept below as the oracle of what a glob means, on inputs small
enough for it.
"""

from __future__ import annotations

import faulthandler
import re
from collections.abc import Iterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from groundkit.errors import InvalidQueryError
from groundkit.retrieval.filters import _glob_class, glob_pattern, parse_filters


def oracle(glob: str) -> re.Pattern[str]:
    """The documented semantics, as the regex groundkit used to compile (fine on small
    inputs)."""
    out: list[str] = []
    i = 0
    while i < len(glob):
        char = glob[i]
        if glob.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
            continue
        if glob.startswith("**", i):
            out.append(".*")
            i += 2
            continue
        if char == "*":
            out.append("[^/]*")
        elif char == "?":
            out.append("[^/]")
        elif char == "[":
            pattern, i = _glob_class(glob, i)
            out.append(pattern)
            continue
        else:
            out.append(re.escape(char))
        i += 1
    return re.compile("".join(out), re.DOTALL)


GLOB_PARTS = st.sampled_from(
    ["*", "**", "**/", "?", "/", "a", "b", ".", "[ab]", "[!a]", "[!/]", "[a-b]", "[]]", "\n"]
)
PATH_CHARS = st.sampled_from(["a", "b", "/", ".", "c", "]", "\n"])


@settings(max_examples=3000, deadline=None)
@given(st.lists(GLOB_PARTS, max_size=8).map("".join), st.lists(PATH_CHARS, max_size=12))
def test_a_glob_matches_what_the_regex_it_replaced_matched(glob: str, path: list[str]) -> None:
    text = "".join(path)
    assert glob_pattern(glob).fullmatch(text) == (oracle(glob).fullmatch(text) is not None)


@settings(max_examples=1000, deadline=None)
@given(st.text(alphabet="ab/*?[]!-.", max_size=10), st.text(alphabet="ab/.-[]", max_size=10))
def test_any_glob_text_matches_or_is_refused_as_the_regex_was(glob: str, text: str) -> None:
    try:
        expected = oracle(glob).fullmatch(text) is not None
    except InvalidQueryError:
        with pytest.raises(InvalidQueryError):
            glob_pattern(glob)
        return
    assert glob_pattern(glob).fullmatch(text) == expected


# (glob, a source it almost matches, one it matches)
PATHOLOGICAL = [
    pytest.param("*" * 60 + "zz", "a" * 200 + "z", "a" * 200 + "zz", id="60-stars"),
    pytest.param("*a*a*a*a*a*a*a*a*b", "a" * 3000, "a" * 3000 + "b", id="star-a-runs"),
    pytest.param("**a**a**a**a**a**a**b", "a/" * 1500, "a/" * 1500 + "b", id="double-stars"),
    pytest.param("**/a" * 40 + "/b", "/a" * 500, "/a" * 500 + "/b", id="dirs"),
    pytest.param("*/**/" * 30 + "x", "a/" * 400, "a/" * 400 + "x", id="star-then-dirs"),
    pytest.param("?*" * 40 + "b", "a" * 1000, "a" * 1000 + "b", id="one-then-star"),
    pytest.param("*a" * 20_000 + "b", "a" * 19_999 + "b", "a" * 20_000 + "b", id="long"),
]


@pytest.fixture
def hang_ends_the_run() -> Iterator[None]:
    """A regex that backtracks holds the GIL in C, where neither SIGALRM nor a timer
    thread (pytest-timeout's methods) is seen; faulthandler's watchdog is C too, and ends
    the process, so a hang fails the run instead of stalling it."""
    faulthandler.dump_traceback_later(120, exit=True)
    try:
        yield
    finally:
        faulthandler.cancel_dump_traceback_later()


@pytest.mark.timeout(60, method="thread")
@pytest.mark.usefixtures("hang_ends_the_run")
@pytest.mark.parametrize(("glob", "near", "match"), PATHOLOGICAL)
def test_a_pathological_glob_finishes(glob: str, near: str, match: str) -> None:
    flt = parse_filters({"source": {"glob": glob}})
    assert flt is not None
    assert not flt.matches({}, near)
    assert flt.matches({}, match)


def test_two_parses_of_one_glob_filter_are_equal() -> None:
    # Conditions compared as they were when a glob compiled to a regex (equal patterns).
    glob = {"source": {"glob": "docs/*/**/[!x]?.md"}}
    assert parse_filters(glob) == parse_filters(glob)
    assert parse_filters(glob) != parse_filters({"source": {"glob": "docs/*.md"}})
