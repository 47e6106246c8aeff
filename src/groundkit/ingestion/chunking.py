"""Split text into chunks whose offsets are exact by construction.

Spans are computed, never searched for: every chunk is ``text[start:end]``
of the text it came from. Cuts prefer paragraph breaks, then sentence ends
(ASCII and CJK), then whitespace, and only as a last resort a hard cut at the
budget (between letters: never between a letter and its combining marks). Chunks
never begin or end with whitespace, and never cross the start of
a page (PDF page, slide, chapter) when the document records where pages begin.
The structure-aware strategies also never cross a heading: a section's chunks
start at its heading line (adr/0046-structure-chunking.md), except that ``structure``
joins a run of small sections (each under a quarter of the budget) into one chunk, so
the chunk count is bounded by the text's length, not by its headings (adr/0096).
"""

from __future__ import annotations

import re
from bisect import bisect_right
from collections.abc import Iterator, Sequence
from itertools import pairwise

from groundkit.config import ChunkingConfig
from groundkit.contracts import HEADINGS_KEY, PAGE_STARTS_KEY, Chunk, Document
from groundkit.utils.hashing import stable_id
from groundkit.utils.letters import inside_letter
from groundkit.utils.sentences import sentence_spans

__all__ = ["Span", "chunk_document", "chunk_gaps", "chunk_spans", "heading_starts"]

Span = tuple[int, int]

_PARAGRAPH_BREAK = re.compile(r"\n[ \t\r\f\v]*\n\s*")
# A Latin ender run is tried from its first character only (the look-behind): tried
# from each of its characters, a long run of dots not followed by a space (a dotted
# leader, ASCII art) took time quadratic in its length.
_SENTENCE_END = re.compile(
    r"(?<![.!?])[.!?]+[\"'\u201d\u2019)\]]*(?=\s)"
    r"|[\u3002\uff01\uff1f]+[\"'\u201d\u2019\u300d\u300f)\]]*"
)
_SPACE = re.compile(r"\s")


def _trim(text: str, start: int, end: int) -> Span | None:
    while start < end and text[start].isspace():
        start += 1
    while end > start and text[end - 1].isspace():
        end -= 1
    return (start, end) if start < end else None


def _first_non_space(text: str, pos: int) -> int | None:
    """Where ``text[pos:]`` starts once trimmed (``_trim``'s start), or None if blank."""
    while pos < len(text) and text[pos].isspace():
        pos += 1
    return pos if pos < len(text) else None


def _split_at(text: str, start: int, end: int, pattern: re.Pattern[str]) -> Iterator[Span]:
    """Trimmed pieces of ``text[start:end]`` between matches of ``pattern``.

    Matched in the slice, so nothing before ``start`` is seen by a look-behind.
    """
    cursor = start
    for match in pattern.finditer(text[start:end]):
        if pattern is _SENTENCE_END:
            # A CJK ender needs no space after it: the marks that follow it stay with it.
            cut = start + match.end()
            while cut < end and inside_letter(text, cut, cursor):
                cut += 1
        else:
            cut = start + match.start()
        piece = _trim(text, cursor, cut)
        if piece:
            yield piece
        cursor = max(cut, start + match.end())
    piece = _trim(text, cursor, end)
    if piece:
        yield piece


def _hard_split(text: str, start: int, end: int, budget: int) -> Iterator[Span]:
    """Cut an over-long run, at the last whitespace in the window when there is one."""
    while end - start > budget:
        window_end = start + budget
        cut = window_end
        for pos in range(window_end, start + budget // 2, -1):
            if text[pos - 1].isspace() or text[pos].isspace():
                cut = pos
                break
        else:
            # No space: cut between letters, never between a letter and its marks.
            while cut > start + 1 and inside_letter(text, cut, start):
                cut -= 1
            if inside_letter(text, cut, start):
                cut = window_end  # one letter longer than the budget: cut it
        piece = _trim(text, start, cut)
        if piece:
            yield piece
        start = cut
        while start < end and text[start].isspace():
            start += 1
    piece = _trim(text, start, end)
    if piece:
        yield piece


def _whole_letters(text: str, pieces: list[Span]) -> list[Span]:
    """``pieces`` (in order, trimmed) with a piece that starts on marks of the letter
    ending the one before (a CJK ender needs no space after it) giving them to it."""
    out: list[Span] = []
    for start, end in pieces:
        if out and out[-1][1] == start and inside_letter(text, start):
            cut = start
            while cut < end and inside_letter(text, cut):
                cut += 1
            out[-1] = (out[-1][0], cut)
            piece = _trim(text, cut, end)
            if piece:
                out.append(piece)
            continue
        out.append((start, end))
    return out


def _units(text: str, budget: int) -> list[Span]:
    units: list[Span] = []
    for p_start, p_end in _split_at(text, 0, len(text), _PARAGRAPH_BREAK):
        if p_end - p_start <= budget:
            units.append((p_start, p_end))
            continue
        for s_start, s_end in _split_at(text, p_start, p_end, _SENTENCE_END):
            if s_end - s_start <= budget:
                units.append((s_start, s_end))
            else:
                units.extend(_hard_split(text, s_start, s_end, budget))
    return units


def _segments(text: str, cuts: Sequence[int]) -> list[Span]:
    """``text`` cut at ``cuts`` (sorted offsets inside it) into consecutive pieces."""
    bounds = [0, *(c for c in cuts if 0 < c < len(text)), len(text)]
    return [(a, b) for a, b in pairwise(bounds) if b > a]


def _structured_units(
    text: str, budget: int, cuts: Sequence[int], lines: Sequence[int], sentences: bool
) -> list[Span]:
    """Units that never straddle a cut; a heading line is a unit of its own."""
    units: list[Span] = []
    heading_lines = set(lines)
    for seg_start, seg_end in _segments(text, cuts):
        body_start = seg_start
        if seg_start in heading_lines:
            line_end = text.find("\n", seg_start, seg_end)
            line_end = seg_end if line_end < 0 else line_end
            units.extend(_hard_split(text, seg_start, line_end, budget))
            body_start = line_end
        for p_start, p_end in _split_at(text, body_start, seg_end, _PARAGRAPH_BREAK):
            if not sentences and p_end - p_start <= budget:
                units.append((p_start, p_end))
                continue
            pieces = (
                _whole_letters(
                    text,
                    [(p_start + a, p_start + b) for a, b in sentence_spans(text[p_start:p_end])],
                )
                if sentences
                else list(_split_at(text, p_start, p_end, _SENTENCE_END))
            )
            for s_start, s_end in pieces:
                if s_end - s_start <= budget:
                    units.append((s_start, s_end))
                else:
                    units.extend(_hard_split(text, s_start, s_end, budget))
    return units


def _heading_with_next(
    text: str, units: list[Span], lines: Sequence[int], cuts: Sequence[int], budget: int
) -> list[Span]:
    """Sentence chunks: a heading line joins the sentence after it when both fit and
    no page starts between them, so no chunk is a bare title (the heading path names
    it anyway)."""
    # Where each heading's unit begins: its line, past any indent (units are trimmed).
    # Scanned forward only: trimming each heading's span to the end of the text also
    # walked back over trailing whitespace once per heading.
    starts = {start for h in lines if (start := _first_non_space(text, h)) is not None}
    out: list[Span] = []
    i = 0
    while i < len(units):
        start, end = units[i]
        if (
            start in starts
            and i + 1 < len(units)
            and units[i + 1][0] not in starts
            and units[i + 1][1] - start <= budget
            and bisect_right(cuts, start) == bisect_right(cuts, units[i + 1][0])
        ):
            end = units[i + 1][1]
            i += 1
        out.append((start, end))
        i += 1
    return out


def _join_small_sections(text: str, cuts: Sequence[int], pages: set[int], budget: int) -> list[int]:
    """``cuts`` less the heading starts between small sections joined into one chunk.

    A section (the text between two cuts, trimmed) shorter than a quarter of the
    budget is small. A run of small sections is packed like units: the next one
    joins the chunk while the whole run still fits the budget and no page starts
    between them. A section of a quarter of the budget or more is never joined and
    begins its chunks at its heading, as before. So a file of bare headings or
    one-line sections is cut into chunks of up to ``budget``, not one per heading,
    and the chunk count stays bounded by the text's length over the budget
    (adr/0096-small-sections-joined.md).
    """
    small = budget // 4
    kept: list[int] = []
    pending: list[int] = []  # the cuts since the run's last section
    paged = False  # one of them is a page start
    run: Span | None = None  # the open run of small sections, trimmed
    for seg_start, seg_end in _segments(text, cuts):
        if seg_start > 0:
            pending.append(seg_start)
            paged = paged or seg_start in pages
        span = _trim(text, seg_start, seg_end)
        if span is None:
            continue  # blank: no chunk of its own, joins nothing
        is_small = span[1] - span[0] < small
        if run is not None and is_small and not paged and span[1] - run[0] <= budget:
            run = (run[0], span[1])  # the cuts in between are dropped
        else:
            kept.extend(pending)
            run = span if is_small else None
        pending, paged = [], False
    kept.extend(pending)
    return kept


def heading_starts(outline: object) -> list[int]:
    """The offsets where a document's headings begin, from its stored outline."""
    if not isinstance(outline, list):
        return []
    starts = [e[0] for e in outline if isinstance(e, list) and e and type(e[0]) is int]
    return sorted(set(starts))


def chunk_spans(
    text: str,
    config: ChunkingConfig | None = None,
    *,
    page_starts: Sequence[int] = (),
    headings: Sequence[int] = (),
) -> list[Span]:
    """Chunk spans of ``text``: each at most ``max_chars`` long, in order.

    With ``page_starts`` (where each page, slide or chapter begins), no chunk and
    no overlap crosses a page start, so the page a citation names holds its span.
    ``headings`` (where each heading line begins) are honoured the same way by
    the ``structure`` and ``sentence`` strategies; ``fixed`` ignores them.
    """
    cfg = config or ChunkingConfig()
    budget, overlap = cfg.max_chars, cfg.effective_overlap
    starts = sorted(s for s in page_starts if s > 0)
    if cfg.strategy == "fixed":
        units = _units(text, budget)
    else:
        lines = sorted({h for h in headings if 0 <= h < len(text)})
        walls = sorted(set(starts) | {h for h in lines if h > 0})
        if cfg.strategy == "sentence":
            units = _structured_units(text, budget, walls, lines, True)
            return _heading_with_next(text, units, lines, walls, budget)
        starts = _join_small_sections(text, walls, set(starts), budget)
        units = _structured_units(text, budget, starts, lines, False)
    pages = [bisect_right(starts, unit[0]) for unit in units]
    spans: list[Span] = []
    i = 0
    while i < len(units):
        start = units[i][0]
        j = i + 1
        while j < len(units) and units[j][1] - start <= budget and pages[j] == pages[i]:
            j += 1
        end = units[j - 1][1]
        spans.append((start, end))
        if j == len(units):
            break
        # Start the next chunk at the earliest unit that lies inside the overlap
        # window and still leaves room for the next new unit; else at unit j.
        nxt = j
        for k in range(i + 1, j):
            if (
                end - units[k][0] <= overlap
                and units[j][1] - units[k][0] <= budget
                and pages[k] == pages[j]
            ):
                nxt = k
                break
        i = nxt
    return spans


def chunk_gaps(text: str, spans: Sequence[Span]) -> dict[str, str]:
    """The text between consecutive disjoint chunks, where it is not one space.

    Chunks are trimmed, so what lies between two of them is whitespace; kept
    with the document, it lets a context span (a parent section, a sentence
    window) be rebuilt from stored chunks as an exact slice of the source.
    """
    gaps: dict[str, str] = {}
    for index, ((_, end), (start, _)) in enumerate(pairwise(spans)):
        if start > end and text[end:start] != " ":
            gaps[str(index)] = text[end:start]
    return gaps


def chunk_document(document: Document, config: ChunkingConfig | None = None) -> list[Chunk]:
    """Chunks of ``document`` with ids stable across runs for the same content."""
    doc_hash = document.content_hash
    chunks: list[Chunk] = []
    page_starts = document.metadata.get(PAGE_STARTS_KEY)
    breaks = page_starts if isinstance(page_starts, list) else ()
    headings = heading_starts(document.metadata.get(HEADINGS_KEY))
    spans = chunk_spans(document.content, config, page_starts=breaks, headings=headings)
    for index, (start, end) in enumerate(spans):
        chunks.append(
            Chunk(
                chunk_id=stable_id(document.document_id, doc_hash, str(index)),
                document_id=document.document_id,
                chunk_index=index,
                content=document.content[start:end],
                start_offset=start,
                end_offset=end,
            )
        )
    return chunks
