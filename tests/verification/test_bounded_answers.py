"""Answer checks stay linear and bounded: one forward pass, off the event loop, caller
patterns time-limited.

The scanning is checked against a plain reference (the obvious rescanning
algorithm, written out here) on generated answers; the shapes that used to take
minutes are checked for their result; the event loop is shown to serve other
coroutines while a long answer is checked, by counting what they got done.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from groundkit import Collection, RetrievalError, verify_answer
from groundkit.utils.sentences import sentence_spans
from groundkit.verification import answers
from groundkit.verification.markers import (
    DEFAULT_MARKER_PATTERN,
    Marker,
    find_markers,
    marker_pattern,
)
from groundkit.verification.quotes import _normalized, normalize_quote
from tests.answer_support import tea_and_sky, tea_and_sky_collection


@pytest.fixture
async def col(tmp_path: Path) -> AsyncIterator[Collection]:
    async with tea_and_sky_collection(tmp_path) as opened:
        yield opened


# -- the reference: what the scanning must find, by the obvious quadratic route --------

_QUOTE_REFERENCE = re.compile(
    r'"(?P<a>[^"\n]{1,4000})"|\u201c(?P<b>[^\u201d]{1,4000})\u201d'
    r"|\u00ab(?P<c>[^\u00bb]{1,4000})\u00bb|\u300c(?P<d>[^\u300d]{1,4000})\u300d"
    r"|\u300e(?P<e>[^\u300f]{1,4000})\u300f"
)


def reference_quotes(answer: str) -> list[tuple[int, int]]:
    out = []
    for m in _QUOTE_REFERENCE.finditer(answer):
        for g in "abcde":
            text = m.group(g)
            if text is not None and text.strip():
                out.append((m.start(g), m.end(g)))
    return out


def reference_sentences(
    answer: str, markers: list[Marker]
) -> list[tuple[int, int, list[Marker], list[tuple[int, int]]]]:
    """Every marker and quote placed by scanning all sentences from the start."""
    chars = list(answer)
    for m in markers:
        chars[m.start : m.end] = " " * (m.end - m.start)
    blanked = "".join(chars)
    spans = [list(s) for s in answers._split_lead_ins(blanked, sentence_spans(blanked))]
    quotes = reference_quotes(answer)
    for qa, qb in quotes:
        inside = [i for i, (a, b) in enumerate(spans) if a < qb and b > qa]
        if len(inside) > 1:
            spans[inside[0] : inside[-1] + 1] = [[spans[inside[0]][0], spans[inside[-1]][1]]]
    found: list[tuple[int, int, list[Marker], list[tuple[int, int]]]] = [
        (a, b, [], []) for a, b in spans
    ]
    for m in markers:
        if not found:
            found.append((m.start, m.end, [], []))
        owner = len(found) - 1
        for i, (a, b, _, _) in enumerate(found):
            if a <= m.start < b:
                owner = i
                break
            if a > m.start:
                owner = max(i - 1, 0)
                break
        a, b, ms, qs = found[owner]
        ms.append(m)
        found[owner] = (min(a, m.start), max(b, m.end), ms, qs)
    for qa, qb in quotes:
        for a, b, _, qs in found:
            if a <= qa and qb <= b:
                qs.append((qa, qb))
                break
    return found


_PIECES = [
    "Tea",
    " helps",
    " lowers risk",
    ".",
    "?",
    ":",
    " ",
    "\n",
    "\n\n",
    '"',
    "\u201c",
    "\u201d",
    "\u00ab",
    "\u00bb",
    "\u300c",
    "\u300d",
    "[1]",
    "[2, 3]",
    "[^a]",
    "\u30101\u3011",
    " It",
    "Dr.",
    "- ",
    "Here is what I found: ",
]
answers_text = st.lists(st.sampled_from(_PIECES), max_size=60).map("".join)


@settings(max_examples=400, deadline=None)
@given(answers_text)
def test_one_pass_scanning_matches_the_rescanning_reference(answer: str) -> None:
    markers = find_markers(answer)
    assert answers._find_quotes(answer) == reference_quotes(answer)
    got = [(s.start, s.end, s.markers, s.quotes) for s in answers._sentences(answer, markers)]
    assert got == reference_sentences(answer, markers)


@settings(max_examples=300, deadline=None)
@given(answers_text)
def test_cutting_markers_out_of_any_range_matches_the_reference(answer: str) -> None:
    markers = find_markers(answer)
    for start in range(0, len(answer) + 1, 7):
        for end in (start, start + 5, len(answer)):
            plain = [answer[start:end]]
            kept = [m for m in markers if start <= m.start and m.end <= end]
            for m in reversed(kept):
                head = plain[0][: m.start - start]
                if not answer[m.end : m.end + 1].isalnum():
                    head = head.rstrip()  # the space before a marker goes unless a word follows
                plain[0] = head + plain[0][m.end - start :]
            assert answers._cut(answer, start, end, markers) == " ".join(plain[0].split())


@given(st.text(alphabet=st.characters(max_codepoint=127), max_size=60))
def test_ascii_quotes_normalise_by_the_short_route_as_by_the_long_one(text: str) -> None:
    assert normalize_quote(text) == _normalized(text)[0]


# -- shapes that used to take minutes ---------------------------------------------------


async def test_blank_lines_lone_openers_and_one_long_sentence(col: Collection) -> None:
    response = await tea_and_sky(col)
    blank = "Green tea lowers blood pressure in adults [1]." + "\n" * 150_000 + "Sky [2]."
    report = await col.verify_answer(blank, response)
    assert [s.verdict for s in report.sentences] == ["supported", "supported"]

    openers = "\u201c" * 100_000 + " Green tea lowers blood pressure in adults [1]."
    report = await col.verify_answer(openers, response)
    assert len(report.sentences) == 1 and report.sentences[0].markers == ["1"]
    assert report.sentences[0].quotes == []

    # One sentence holding thousands of quotes and markers: each quote is cut
    # free of the markers inside it alone.
    many = " ".join(['"Tea is a drink [1]" [1],'] * 6000) + " end [1]."
    report = await col.verify_answer(many, response)
    (only,) = report.sentences
    assert only.verdict == "quoted" and len(only.quotes) == 6000
    assert all(q.ok for q in only.quotes)


# -- the event loop stays free ------------------------------------------------------


def long_answer(chars: int) -> str:
    pieces = [
        "Green tea lowers blood pressure in adults [1].",
        '"Tea is a drink" [1].',
        "The sky is blue because air scatters sunlight [2].",
        "Tea is popular everywhere.",
        "Mars is red [7].",
    ]
    out: list[str] = []
    size = 0
    while size < chars:
        piece = pieces[len(out) % len(pieces)]
        out.append(piece)
        size += len(piece) + 1
    return " ".join(out)[:chars]


async def test_other_coroutines_run_while_a_long_answer_is_checked(col: Collection) -> None:
    response = await tea_and_sky(col)
    ticks = 0
    stop = asyncio.Event()

    async def ticker() -> None:
        nonlocal ticks
        while not stop.is_set():
            ticks += 1
            await asyncio.sleep(0.001)

    counting = asyncio.create_task(ticker())
    await asyncio.sleep(0)
    big = asyncio.create_task(col.verify_answer(long_answer(200_000), response))
    await asyncio.sleep(0)
    before = ticks
    # A small check started after the long one is answered before it.
    small = await col.verify_answer("Green tea lowers blood pressure in adults [1].", response)
    small_finished_first = not big.done()
    report = await big
    stop.set()
    await counting
    assert small.ok and small_finished_first
    assert len(report.sentences) > 5000
    # The loop went round during the check: a check held on the loop allows no tick at all
    # (how many depends on the machine's load, so only that there were some is asserted).
    assert ticks - before >= 2


async def test_the_standalone_function_also_checks_off_the_loop(col: Collection) -> None:
    response = await tea_and_sky(col)
    big = asyncio.create_task(verify_answer(long_answer(100_000), response, col.base_dir))
    await asyncio.sleep(0)
    rounds = 0
    while not big.done():
        rounds += 1
        await asyncio.sleep(0.001)
    # Held on the loop, the check would end within the task's first step: no round at all.
    assert rounds >= 2
    assert (await big).counts["dangling"] > 0


# -- a caller's marker pattern is bounded -------------------------------------------


@pytest.mark.parametrize(
    ("pattern", "answer"),
    [
        # A repeat inside a repeat: each run of a's splits 2^n ways before failing.
        (r"(?:a+)+b", "Tea " + "a" * 30_000 + "!"),
        # Alternatives matching the same text, repeated.
        (r"\[(a|aa)+\]", "Tea [" + "a" * 40 + "!"),
    ],
)
async def test_a_catastrophic_marker_pattern_is_stopped_with_a_typed_error(
    col: Collection, pattern: str, answer: str
) -> None:
    response = await tea_and_sky(col)
    with pytest.raises(RetrievalError, match="backtracks without bound") as caught:
        await col.verify_answer(answer, response, marker_pattern=pattern)
    assert repr(pattern) in str(caught.value)
    # The same pattern compiled by re is bounded the same way.
    with pytest.raises(RetrievalError, match="backtracks without bound"):
        await verify_answer(answer, response, col.base_dir, marker_pattern=re.compile(pattern))


def test_caller_patterns_keep_their_flags_and_refuse_what_cannot_be_bounded() -> None:
    loud = marker_pattern(re.compile(r"\(DOC: (\w+)\)", re.IGNORECASE))
    assert [m.labels for m in find_markers("Tea (doc: t).", loud)] == [("t",)]
    with pytest.raises(RetrievalError, match="at most 1000"):
        marker_pattern("a" * 1001)
    with pytest.raises(RetrievalError, match="of bytes"):
        marker_pattern(re.compile(rb"\[(\d+)\]"))  # type: ignore[arg-type]


def test_the_default_pattern_is_used_as_it_is() -> None:
    assert marker_pattern(None) is DEFAULT_MARKER_PATTERN
    assert marker_pattern(DEFAULT_MARKER_PATTERN) is DEFAULT_MARKER_PATTERN


async def test_the_mcp_server_answers_another_client_during_a_long_check(tmp_path: Path) -> None:
    from mcp import Client

    from groundkit.service import CollectionRegistry, build_server

    async with tea_and_sky_collection(tmp_path) as col:
        ids = [r.chunk_id for r in (await tea_and_sky(col)).results]
    registry = CollectionRegistry(tmp_path / "index")
    server = build_server(registry)
    try:
        async with Client(server) as first, Client(server) as second:
            arguments = {"answer": long_answer(200_000), "chunk_ids": ids}
            long_call = asyncio.create_task(first.call_tool("verify_answer", arguments))
            await asyncio.sleep(0)
            listed = await second.call_tool("list_collections", {})
            answered_first = not long_call.done()
            checked = await long_call
    finally:
        await registry.close()
    assert not listed.is_error and not checked.is_error
    assert answered_first
