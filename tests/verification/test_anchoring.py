"""Re-anchoring: a span whose text moved is found again; a changed one is drifted, with
the closest passage; a repeated one is reported ambiguous, never guessed."""

from __future__ import annotations

import unicodedata
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rapidfuzz import fuzz

from groundkit import ChunkingConfig, Collection, check_citation
from groundkit.storage.protocols import StoredChunk
from groundkit.verification.anchoring import (
    CONTEXT_CHARS,
    MAX_COMPARED_CHARS,
    MAX_OCCURRENCES,
    ChunkIndex,
    reanchor,
)
from tests.support import whole_file_citation, write_tree

PASSAGE = "Green tea lowers blood pressure in adults, a trial of 400 people found."


def test_moved_exactly() -> None:
    before = f"Intro.\n\n{PASSAGE}\n"
    after = f"A new first paragraph, added later.\n\nIntro.\n\n{PASSAGE}\n"
    start = before.index(PASSAGE)
    anchor = reanchor(after, PASSAGE, start)
    assert anchor.outcome == "moved" and anchor.start is not None and anchor.end is not None
    assert after[anchor.start : anchor.end] == PASSAGE
    assert anchor.similarity == 1.0


def test_edited_is_drifted_with_the_closest_passage() -> None:
    edited = PASSAGE.replace("400", "4,000")
    text = f"Intro.\n\n{edited}\n\nOutro about something else entirely.\n"
    anchor = reanchor(text, PASSAGE, 8)
    assert anchor.outcome == "drifted"
    assert anchor.start is not None and anchor.end is not None
    assert "Green tea lowers" in text[anchor.start : anchor.end]
    assert anchor.similarity is not None and 0.9 < anchor.similarity < 1.0


def test_deleted_is_drifted_and_dissimilar() -> None:
    text = "Nothing of the kind is written here any more; the page is about cats.\n"
    anchor = reanchor(text, PASSAGE, 0)
    assert anchor.outcome == "drifted"
    assert anchor.similarity is not None and anchor.similarity < 0.6
    assert reanchor("", PASSAGE, 0).similarity == 0.0


def _long_text(words: int) -> str:
    return " ".join(f"w{i * 7919 % 100_003:x}" for i in range(words))


def test_a_long_edited_span_is_compared_a_bounded_number_of_times(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each comparison costs the product of the two lengths: refining the closest
    passage offset by offset made a long span's check cubic in its length."""
    text = _long_text(12_000)
    start = 20_000
    content = text[start : start + 16_000].replace("a", "A")
    calls = 0
    ratio = fuzz.ratio

    def counted(a: str, b: str) -> float:
        nonlocal calls
        calls += 1
        return float(ratio(a, b))

    monkeypatch.setattr(fuzz, "ratio", counted)
    anchor = reanchor(text, content, start)
    assert anchor.outcome == "drifted" and anchor.start == start
    assert anchor.similarity is not None and anchor.similarity > 0.9
    assert calls < 100


async def test_a_span_longer_than_any_chunk_gets_no_closest_passage(tmp_path: Path) -> None:
    text = _long_text(MAX_COMPARED_CHARS // 5)
    assert len(text) > MAX_COMPARED_CHARS
    write_tree(tmp_path, {"long.txt": text.replace("a", "A", 1)})
    citation = whole_file_citation("long.txt", text)
    result = await check_citation(citation, text, tmp_path)
    assert result.verification == "drifted"
    assert result.similarity is None and result.current_start_offset is None
    assert f"no closest passage is looked for: the indexed text is {len(text)}" in result.detail


def test_duplicated_passage_is_ambiguous_unless_the_context_tells() -> None:
    text = f"First: {PASSAGE} Second: {PASSAGE}"
    bare = reanchor(text, PASSAGE, 0)
    assert bare.outcome == "ambiguous" and bare.start is None and bare.occurrences == 2
    told = reanchor(text, PASSAGE, 0, prefix="Second: ", suffix="")
    assert told.outcome == "moved" and told.start == text.rindex(PASSAGE)
    same = reanchor(f"x {PASSAGE} x {PASSAGE}", PASSAGE, 0, prefix="x ", suffix="")
    assert same.outcome == "ambiguous"  # both occurrences match the context equally


@settings(max_examples=200, deadline=None)
@given(
    st.text(min_size=0, max_size=40),
    st.text(min_size=1, max_size=60),
    st.text(min_size=0, max_size=40),
    st.text(min_size=1, max_size=40),
)
def test_an_insertion_above_a_unique_span_is_always_found(
    head: str, span: str, tail: str, inserted: str
) -> None:
    before = head + span + tail
    if before.count(span) != 1:
        return
    after = inserted + before
    anchor = reanchor(after, span, len(head))
    if after.count(span) == 1:
        assert anchor.outcome == "moved" and anchor.start == len(inserted) + len(head)
    else:
        end = len(head) + len(span)
        prefix = before[max(0, len(head) - CONTEXT_CHARS) : len(head)]
        suffix = before[end : end + CONTEXT_CHARS]
        anchor = reanchor(after, span, len(head), prefix=prefix, suffix=suffix)
        assert anchor.outcome in {"moved", "ambiguous"}
        if anchor.outcome == "moved":
            assert anchor.start is not None and after[anchor.start : anchor.end] == span


def _at(text: str, span: str) -> list[int]:
    """Every place ``span`` starts in ``text``, overlapping ones too ("aa" twice in "aaa")."""
    return [i for i in range(len(text) - len(span) + 1) if text.startswith(span, i)]


_ACCENTED = [*"abc .", "\u00e9", "\u00fc", "\u00c5", "\u1ea1", "\ud55c", "e\u0301\u0323"]


@settings(max_examples=200)
@given(
    st.lists(st.sampled_from(_ACCENTED), max_size=20).map("".join),
    st.lists(st.sampled_from(_ACCENTED), min_size=1, max_size=20).map("".join),
    st.lists(st.sampled_from(_ACCENTED), max_size=20).map("".join),
)
def test_a_source_renormalized_is_found_by_canonical_equivalence(
    head: str, span: str, tail: str
) -> None:
    span = unicodedata.normalize("NFC", span)
    before = unicodedata.normalize("NFC", head + span + tail)
    if before[len(head) : len(head) + len(span)] != span or len(_at(before, span)) != 1:
        return
    after = unicodedata.normalize("NFD", before)
    anchor = reanchor(after, span, len(head))
    whole = [
        i
        for i in _at(after, span)
        if not (i + len(span) < len(after) and unicodedata.combining(after[i + len(span)]))
    ]
    if whole:  # found as it is; an "a" that an accent now follows is part of another letter
        assert anchor.outcome == "moved" and anchor.start in whole, anchor
        return
    assert anchor.outcome == "renormalized", anchor
    assert anchor.start is not None and anchor.end is not None
    assert unicodedata.normalize("NFC", after[anchor.start : anchor.end]) == span
    assert anchor.similarity is not None and anchor.similarity < 1


def _context_by_scan(chunks: Sequence[Any], start: int, end: int) -> tuple[str, str]:
    """The indexed context read the plain way, every chunk in turn: what ``ChunkIndex``
    must give."""
    prefix, prefix_end = "", -1
    suffix, suffix_start = "", -1
    for c in chunks:
        a, b = c.start_offset, c.end_offset
        if a < start:
            stop = min(b, start)
            lo = max(a, stop - CONTEXT_CHARS)
            if stop > prefix_end or (stop == prefix_end and stop - lo > len(prefix)):
                prefix, prefix_end = c.content[lo - a : stop - a], stop
        if b > end:
            begin = max(a, end)
            hi = min(b, begin + CONTEXT_CHARS)
            if suffix_start < 0 or begin < suffix_start:
                suffix, suffix_start = c.content[begin - a : hi - a], begin
    return prefix, suffix


def test_indexed_context_comes_from_overlapping_chunks() -> None:
    class C:
        def __init__(self, text: str, a: int, b: int) -> None:
            self.content, self.start_offset, self.end_offset = text[a:b], a, b

    text = "".join(chr(ord("a") + i % 26) for i in range(300))
    chunks = [C(text, 0, 120), C(text, 100, 220), C(text, 200, 300)]
    prefix, suffix = ChunkIndex(chunks).context(100, 220)
    assert prefix == text[68:100] and suffix == text[220:252]
    assert ChunkIndex(chunks).context(0, 120) == ("", text[120:152])
    assert _context_by_scan(chunks, 100, 220) == (prefix, suffix)


@dataclass(frozen=True)
class _Chunk:
    content: str
    start_offset: int
    end_offset: int


_TEXT = "".join(chr(ord("a") + i % 26) + chr(ord("A") + i % 7) for i in range(150))
_spans = st.tuples(st.integers(0, len(_TEXT)), st.integers(0, 120)).map(
    lambda p: (p[0], min(len(_TEXT), p[0] + p[1]))
)


@settings(max_examples=300, deadline=None)
@given(st.lists(_spans, max_size=12), _spans)
def test_the_chunk_index_gives_the_context_every_chunk_would(
    layout: list[tuple[int, int]], span: tuple[int, int]
) -> None:
    """``ChunkIndex`` finds in log time what reading every chunk finds, ties (equal
    starts, chunks over the span's end) included."""
    chunks = [_Chunk(_TEXT[a:b], a, b) for a, b in layout]
    assert ChunkIndex(chunks).context(*span) == _context_by_scan(chunks, *span)


async def test_context_is_read_once_per_document_however_many_chunks_are_repeated(
    tmp_path: Path,
) -> None:
    """A long document whose text is now there twice asked the store for all its chunks
    once per chunk (quadratic in them)."""
    paragraphs = [f"Paragraph {i} talks about topic {i * 7} and nothing else." for i in range(40)]
    text = "\n\n".join(paragraphs) + "\n"
    base = tmp_path / "corpus"
    write_tree(base, {"long.txt": text})
    chunking = ChunkingConfig(max_chars=120, overlap_chars=20)
    async with Collection.open(tmp_path / "index", base_dir=base, chunking=chunking) as col:
        await col.ingest(base)
        (base / "long.txt").write_text("Intro.\n\n" + text + text, encoding="utf-8")
        calls = 0
        read = col.store.get_chunks_for_documents

        async def counted(document_ids: Sequence[str]) -> dict[str, list[StoredChunk]]:
            nonlocal calls
            calls += 1
            return await read(document_ids)

        col.store.get_chunks_for_documents = counted  # type: ignore[method-assign]
        report = await col.verify_all()
    assert report.verified == 0 and report.drifted > 10
    assert calls == 1


@pytest.fixture
async def col(tmp_path: Path) -> AsyncIterator[Collection]:
    base = tmp_path / "corpus"
    write_tree(base, {"tea.txt": f"Intro.\n\n{PASSAGE}\n"})
    async with Collection.open(tmp_path / "index", base_dir=base) as opened:
        await opened.ingest(base)
        yield opened


async def test_fetch_and_verify_report_moved_and_a_reingest_clears_it(col: Collection) -> None:
    hit = (await col.search("green tea blood pressure")).results[0]
    path = col.base_dir / "tea.txt"
    path.write_text(f"A paragraph added on top.\n\nIntro.\n\n{PASSAGE}\n", encoding="utf-8")
    fetched = await col.fetch_chunk(hit.chunk_id)
    assert fetched.verification == "moved" and fetched.moved and not fetched.ok
    now = path.read_text(encoding="utf-8")
    assert fetched.current_start_offset is not None and fetched.current_end_offset is not None
    assert now[fetched.current_start_offset : fetched.current_end_offset] == hit.content
    assert "intact at" in fetched.detail
    assert (await col.verify(hit)).verification == "moved"
    report = await col.verify_all()
    assert (report.moved, report.drifted, len(report.relocated)) == (1, 0, 1)
    assert not report.ok
    await col.ingest(col.base_dir)
    again = (await col.search("green tea blood pressure")).results[0]
    assert (await col.fetch_chunk(again.chunk_id)).verification == "verified"
    assert (await col.verify_all()).ok


async def test_a_duplicated_document_is_ambiguous(col: Collection) -> None:
    hit = (await col.search("green tea blood pressure")).results[0]
    text = (col.base_dir / "tea.txt").read_text(encoding="utf-8")
    (col.base_dir / "tea.txt").write_text("New head.\n" + text + text, encoding="utf-8")
    fetched = await col.fetch_chunk(hit.chunk_id)
    assert fetched.verification == "drifted"
    assert "appears 2 times" in fetched.detail and "not guessed" in fetched.detail
    assert fetched.current_start_offset is None


async def test_neighbouring_chunks_tell_duplicates_apart(tmp_path: Path) -> None:
    base = tmp_path / "corpus"
    # Small chunks, so the passage has neighbours whose text differs on each side.
    paragraphs = [f"Paragraph {i} talks about topic number {i} at length." for i in range(6)]
    write_tree(base, {"doc.txt": "\n\n".join(paragraphs) + "\n"})
    chunking = ChunkingConfig(max_chars=60, overlap_chars=20)
    async with Collection.open(tmp_path / "index", base_dir=base, chunking=chunking) as c:
        await c.ingest(base)
        hit = next(r for r in (await c.search("topic number 3")).results if "3" in r.content)
        text = (base / "doc.txt").read_text(encoding="utf-8")
        # The passage is copied to the top (without its surroundings) and the file shifted.
        (base / "doc.txt").write_text(hit.content + "\n\nAdded.\n\n" + text, encoding="utf-8")
        fetched = await c.fetch_chunk(hit.chunk_id)
    assert fetched.verification == "moved", fetched.detail
    now = (base / "doc.txt").read_text(encoding="utf-8")
    assert fetched.current_start_offset == now.rindex(hit.content)


async def test_an_edited_chunk_is_drifted_with_the_closest_passage(col: Collection) -> None:
    hit = (await col.search("green tea blood pressure")).results[0]
    edited = f"Intro.\n\n{PASSAGE.replace('400', '40')}\n"
    (col.base_dir / "tea.txt").write_text(edited, encoding="utf-8")
    fetched = await col.fetch_chunk(hit.chunk_id)
    assert fetched.verification == "drifted"
    assert fetched.similarity is not None and fetched.similarity > 0.9
    assert "closest passage" in fetched.detail


def test_a_letter_inside_a_decomposed_one_is_not_another_occurrence() -> None:
    # "a" then "ạ" (U+1EA1) decomposed: the second "a" carries a dot below.
    anchor = reanchor("aa\u0323", "a", 0)
    assert (anchor.outcome, anchor.start, anchor.end) == ("moved", 0, 1)
    # Where every occurrence is part of another letter, none is the indexed text: the
    # nearest one's whole letters are the closest passage. One occurrence counts no more.
    anchor = reanchor("xa\u0323 ya\u0323", "a", 0)
    assert (anchor.outcome, anchor.start, anchor.end) == ("drifted", 1, 3)
    assert anchor.similarity is not None and anchor.similarity < 1
    anchor = reanchor("Intro. no\u0308.", "no", 0)
    assert (anchor.outcome, anchor.start, anchor.end) == ("drifted", 7, 10)
    # A first character that joins the letter before it: Hangul jamo, a mark.
    assert reanchor("\u1112\u1161\u11ab", "\u1161\u11ab", 0).outcome == "drifted"
    assert reanchor("\u0301ab", "\u0301ab", 5).outcome == "moved"  # nothing before it


async def test_a_count_past_the_cap_says_it_is_a_floor(col: Collection) -> None:
    # Occurrences are counted up to MAX_OCCURRENCES: 1,500 of them are "at least 1000".
    hit = (await col.search("green tea blood pressure")).results[0]
    text = (col.base_dir / "tea.txt").read_text(encoding="utf-8")
    (col.base_dir / "tea.txt").write_text("New head.\n" + text * 1500, encoding="utf-8")
    fetched = await col.fetch_chunk(hit.chunk_id)
    assert fetched.verification == "drifted"
    assert f"appears at least {MAX_OCCURRENCES} times" in fetched.detail
