"""The chunk count is bounded by the text's length over the budget, not by its headings.

A file of bare headings made one chunk per heading: 1 MB of ``# h`` lines was 250,000
chunks (adr/0096-small-sections-joined.md). Small sections are now joined up to the
budget, so no Markdown, however many headings it has, yields more chunks than
``bound`` allows; page starts are still never crossed, so each page may add one.
"""

from __future__ import annotations

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from groundkit import ChunkingConfig
from groundkit.config import ChunkStrategy
from groundkit.contracts import (
    HEADINGS_KEY,
    PAGE_STARTS_KEY,
    Document,
    heading_path_at,
    opening_heading,
)
from groundkit.ingestion import chunk_document, chunk_spans
from groundkit.ingestion.chunking import heading_starts
from groundkit.ingestion.index_text import index_text, index_texts_of
from groundkit.ingestion.outline import as_outline, markdown_headings, markdown_outline
from tests.ingestion.test_structure_chunking import assert_exact_slices


def bound(text: str, config: ChunkingConfig, pages: int) -> float:
    """The most chunks ``fixed`` and ``structure`` make of ``text`` (the ADR's proof).

    With ``n`` characters, budget ``b`` and ``s = b // 4``: a section of ``s`` or
    more gives at most ``4L/b + 2`` chunks and there are at most ``n/s`` of them;
    each run of small sections is one chunk and ends at a large section, a page
    start, the text's end, or with the next small section past the budget (at most
    ``2n/b`` such pairs).
    """
    n, budget = len(text), config.max_chars
    return 6 * n / budget + 3 * n / (budget // 4) + 2 * pages + 2


_TITLE = st.sampled_from(["h", "Install", "API", "東京", "x" * 30, ""])
_BODY = st.sampled_from(["", "", "Body.", "One. Two.", "word " * 12, "y" * 90, "\n"])
_LINE = st.one_of(
    st.builds(lambda level, title: "#" * level + " " + title, st.integers(1, 6), _TITLE),
    st.builds(lambda title, rule: title + "\n" + rule, _TITLE, st.sampled_from(["===", "---"])),
    _BODY,
)
# Heading-heavy Markdown: mostly headings, bodies short or missing.
HEADING_HEAVY = st.lists(
    st.tuples(_LINE, st.sampled_from(["\n", "\n\n", "\r\n", "\n \n"])), max_size=400
).map(lambda parts: "".join(line + sep for line, sep in parts))


@st.composite
def configs(draw: st.DrawFn) -> ChunkingConfig:
    strategy: ChunkStrategy = draw(st.sampled_from(["structure", "fixed"]))
    max_chars = draw(st.integers(min_value=32, max_value=2000))
    overlap = draw(st.integers(min_value=0, max_value=max_chars // 2))
    return ChunkingConfig(strategy=strategy, max_chars=max_chars, overlap_chars=overlap)


@settings(max_examples=300, deadline=None)
@given(text=HEADING_HEAVY, config=configs(), data=st.data())
@example(text="# h\n" * 400, config=ChunkingConfig(), data=None)
@example(text="# h\n\n" * 400, config=ChunkingConfig(max_chars=32, overlap_chars=0), data=None)
def test_chunk_count_is_bounded_by_length_over_budget(
    text: str, config: ChunkingConfig, data: st.DataObject | None
) -> None:
    # Pages begin at line starts.
    lines = [i + 1 for i, ch in enumerate(text[:-1]) if ch == "\n"]
    pages: list[int] = []
    if data is not None and lines:
        pages = sorted(set(data.draw(st.lists(st.sampled_from(lines), max_size=5))))
    outline = markdown_outline(text)
    document = Document(
        document_id="d",
        source="d.md",
        content=text or " ",
        metadata={HEADINGS_KEY: outline, PAGE_STARTS_KEY: pages},
    )
    spans = chunk_spans(text, config, page_starts=pages, headings=heading_starts(outline))
    assert len(spans) <= bound(text, config, len(pages)), (len(spans), len(text))
    assert_exact_slices(text, spans, config)
    if config.strategy == "structure":  # ``fixed`` cuts pages between paragraphs
        assert not [p for s, e in spans for p in pages if s < p < e]
    if text.strip():
        chunks = chunk_document(document, config)
        assert [(c.start_offset, c.end_offset) for c in chunks] == spans
        assert all(c.content == text[c.start_offset : c.end_offset] for c in chunks)


def test_a_file_of_bare_headings_is_packed_up_to_the_budget() -> None:
    # One chunk per heading before: 100,000 chunks of 3 characters for these 400 KB.
    text = "# h\n" * 100_000  # the chunker's own bound: the whole outline, uncapped
    headings = heading_starts(as_outline(markdown_headings(text)))
    assert len(headings) == 100_000
    spans = chunk_spans(text, ChunkingConfig(), headings=headings)
    full = ("# h\n" * 400).strip()  # 1,599 characters: 400 headings fit the budget
    assert [text[a:b] for a, b in spans] == [full] * 250
    # Contiguous runs, each starting at a heading line.
    assert all(a % 4 == 0 for a, _ in spans)


def test_small_sections_are_joined_and_full_ones_keep_their_own_chunks() -> None:
    config = ChunkingConfig(max_chars=200, overlap_chars=0)  # small: under 50 characters
    body = "A sentence long enough to make this section stand on its own."
    text = f"# Guide\n\n## Install\n\npip install it\n\n## Usage\n\n{body}\n\n## Notes\n\nNone.\n"
    headings = heading_starts(markdown_outline(text))
    pieces = [text[a:b] for a, b in chunk_spans(text, config, headings=headings)]
    assert pieces == [
        "# Guide\n\n## Install\n\npip install it",
        f"## Usage\n\n{body}",
        "## Notes\n\nNone.",
    ]


def test_small_sections_are_not_joined_across_a_page() -> None:
    text = "# a\n# b\n# c\n# d\n"
    headings = heading_starts(markdown_outline(text))
    spans = chunk_spans(text, ChunkingConfig(max_chars=32, overlap_chars=0), headings=headings)
    assert [text[a:b] for a, b in spans] == ["# a\n# b\n# c\n# d"]
    paged = chunk_spans(
        text, ChunkingConfig(max_chars=32, overlap_chars=0), headings=headings, page_starts=[8]
    )
    assert [text[a:b] for a, b in paged] == ["# a\n# b", "# c\n# d"]


def test_sentence_chunks_are_unchanged_one_per_heading() -> None:
    # ``sentence`` keeps one chunk per sentence and per bare heading by design.
    text = "# a\n# b\n"
    headings = heading_starts(markdown_outline(text))
    spans = chunk_spans(text, ChunkingConfig(strategy="sentence"), headings=headings)
    assert [text[a:b] for a, b in spans] == ["# a", "# b"]


# --- the heading path of a joined chunk ---------------------------------------------


def _joined(text: str) -> tuple[dict[str, object], list[tuple[int, int]]]:
    outline = markdown_outline(text)
    config = ChunkingConfig(max_chars=400, overlap_chars=0)
    return {HEADINGS_KEY: outline}, chunk_spans(text, config, headings=heading_starts(outline))


@pytest.mark.parametrize(
    ("text", "path"),
    [
        # A title, then a section's heading, then its text: under both.
        (
            "# Kettles\n\n## Boiling\n\nWater boils.\n\n## Storing\n\nKeep it dry.\n",
            ["Kettles", "Boiling"],
        ),
        # Body text first: the path where the chunk starts.
        ("# Q\n\nFirst answer.\n\n# R\n\nSecond answer.\n", ["Q"]),
        # Headings only: the last of them.
        ("# a\n# b\n## c\n", ["b", "c"]),
        # A document's front matter is passed over.
        ("---\ntitle: T\n---\n# H\n\n## S\n\nText.\n", ["H", "S"]),
        ("+++\ntitle = 'T'\n+++\n# H\n\nText.\n", ["H"]),
        # A thematic break is body text.
        ("Intro.\n\n---\n\n# H\n\nText.\n", []),
    ],
)
def test_a_joined_chunk_is_under_the_headings_it_opens_with(text: str, path: list[str]) -> None:
    metadata, spans = _joined(text)
    ((start, end),) = spans  # small sections: one chunk
    at = opening_heading(metadata, start, text[start:end])
    assert heading_path_at(metadata, at) == path
    chunk = chunk_document(
        Document(document_id="d", source="d.md", content=text, metadata=metadata),
        ChunkingConfig(max_chars=400, overlap_chars=0),
    )
    # The contextual prefix is read from the same place, one chunk or all of them.
    (only,) = chunk
    one = index_text(only.content, only.start_offset, metadata, contextual=True)
    assert index_texts_of([(only.content, only.start_offset)], metadata, contextual=True) == [one]
    assert one.startswith(" > ".join(path) + "\n\n" if path else only.content[:5])


def test_a_damaged_outline_reads_the_path_at_the_chunk_start() -> None:
    assert opening_heading({HEADINGS_KEY: [["x", 1, "a"]]}, 0, "# a\n\nText") == 0
    assert opening_heading({HEADINGS_KEY: "not a list"}, 3, "Text") == 3
