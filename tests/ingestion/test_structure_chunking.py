"""The structure-aware chunkers (adr/0046-structure-chunking.md), by property.

Over generated Markdown-ish documents, with the headings ``markdown_outline``
finds: every strategy cuts exact, trimmed, bounded slices in order; ``structure``
and ``sentence`` never cross a heading or a page and start a chunk at every
heading line; ``sentence`` chunks never overlap; ``fixed`` ignores headings; the
recorded gaps rebuild the text between any run of chunks exactly; the heading path
is the stack of enclosing headings; a chunking's identity names it.
"""

from __future__ import annotations

from itertools import pairwise
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from groundkit import ChunkingConfig, ConfigurationError
from groundkit.config import ChunkStrategy
from groundkit.contracts import GAPS_KEY, HEADINGS_KEY, Document, heading_path_at
from groundkit.ingestion import chunk_document, chunk_spans
from groundkit.ingestion.chunking import Span, chunk_gaps, heading_starts
from groundkit.ingestion.index_text import heading_paths, index_text
from groundkit.ingestion.indexer import index_texts
from groundkit.ingestion.outline import markdown_outline
from groundkit.retrieval.context import rebuild_text, section_bounds
from groundkit.storage.protocols import StoredChunk

STRATEGIES: tuple[ChunkStrategy, ...] = ("fixed", "structure", "sentence")

# --- generated documents --------------------------------------------------------

_WORD = st.sampled_from(
    [
        "alpha",
        "Beta",
        "gamma",
        "delta",
        "Über",
        "東京大学",
        "e.g.",
        "3.5",
        "Dr.",
        "J.",
        "naïve",
        "🚀",
        "x" * 45,
        "y" * 130,  # longer than the smallest budgets: a hard cut
    ]
)
_ENDER = st.sampled_from([".", "!", "?", "。", "", ".)", '."'])
_SENTENCE = st.builds(
    lambda words, ender: " ".join(words) + ender, st.lists(_WORD, min_size=1, max_size=8), _ENDER
)
_PARAGRAPH = st.builds(
    lambda sentences, joiner: joiner.join(sentences),
    st.lists(_SENTENCE, min_size=1, max_size=5),
    st.sampled_from([" ", "\n", "  ", "\t"]),
)
_TITLE = st.lists(
    st.sampled_from(["Install", "Linux", "Guide", "API", "東京", "*Notes*"]), min_size=1, max_size=3
)
_ATX = st.builds(
    lambda indent, level, title, close: " " * indent + "#" * level + " " + " ".join(title) + close,
    st.integers(0, 3),
    st.integers(1, 6),
    _TITLE,
    st.sampled_from(["", " ##", "   "]),
)
_SETEXT = st.builds(
    lambda title, rule: " ".join(title) + "\n" + rule, _TITLE, st.sampled_from(["===", "---"])
)
_BLOCK = st.one_of(
    _PARAGRAPH,
    _PARAGRAPH,
    _ATX,
    _ATX,
    _SETEXT,
    st.sampled_from(["", "   ", "```\n# not a heading\n```", "- item one\n- item two", "---"]),
)
_SEPARATOR = st.sampled_from(["\n", "\n\n", "\n\n\n", "\r\n", "\r\n\r\n", "\n \n"])


@st.composite
def documents(draw: st.DrawFn) -> str:
    blocks = draw(st.lists(_BLOCK, max_size=14))
    out = draw(st.sampled_from(["", "\n", "  "]))
    for block in blocks:
        out += block + draw(_SEPARATOR)
    return out


@st.composite
def configs(draw: st.DrawFn, strategy: ChunkStrategy | None = None) -> ChunkingConfig:
    chosen: ChunkStrategy = draw(st.sampled_from(STRATEGIES)) if strategy is None else strategy
    max_chars = draw(st.integers(min_value=32, max_value=400))
    contextual = draw(st.booleans())
    if chosen == "sentence":
        return ChunkingConfig(strategy=chosen, max_chars=max_chars, contextual=contextual)
    overlap = draw(st.integers(min_value=0, max_value=max_chars // 2))
    return ChunkingConfig(
        strategy=chosen, max_chars=max_chars, overlap_chars=overlap, contextual=contextual
    )


@st.composite
def page_starts(draw: st.DrawFn, text: str) -> list[int]:
    if not text or not draw(st.booleans()):
        return []
    picked = draw(st.lists(st.integers(0, len(text) - 1), max_size=4))
    return sorted({0, *picked})


def headings_of(text: str) -> list[int]:
    return heading_starts(markdown_outline(text))


def skip_space(text: str, at: int) -> int:
    while at < len(text) and text[at].isspace():
        at += 1
    return at


# --- the properties -------------------------------------------------------------


def assert_exact_slices(text: str, spans: list[Span], config: ChunkingConfig) -> None:
    previous = -1
    covered = bytearray(len(text))
    for start, end in spans:
        assert 0 <= start < end <= len(text)
        assert end - start <= config.max_chars
        assert not text[start].isspace() and not text[end - 1].isspace()
        assert start > previous
        previous = start
        covered[start:end] = b"\x01" * (end - start)
    # Nothing but whitespace is left out of every chunk.
    assert [i for i, ch in enumerate(text) if not ch.isspace() and not covered[i]] == []
    for (_, prev_end), (start, end) in pairwise(spans):
        assert end > prev_end
        assert prev_end - start <= config.effective_overlap


def assert_walls_kept(
    text: str,
    spans: list[Span],
    config: ChunkingConfig,
    *,
    headings: list[int],
    pages: list[int],
) -> set[Span]:
    """No chunk crosses a page start. ``sentence`` crosses no heading; ``structure``
    crosses one only in a chunk made wholly of small sections (shorter than a quarter
    of the budget, adr/0096-small-sections-joined.md), and a section of a quarter of
    the budget or more starts a chunk at its heading line (its first non-blank
    character: chunks are trimmed). Returns the chunks that join sections."""
    small = config.max_chars // 4
    lines = {h for h in headings if 0 <= h < len(text)}
    inner_pages = {p for p in pages if 0 < p < len(text)}
    bounds = [0, *sorted(inner_pages | {h for h in lines if h > 0}), len(text)]
    sections: list[tuple[int, int, int]] = []  # (wall, first, end) of non-blank ones
    for wall, stop in pairwise(bounds):
        first, end = skip_space(text, wall), stop
        while end > first and text[end - 1].isspace():
            end -= 1
        if first < end:
            sections.append((wall, first, end))
    joined: set[Span] = set()
    for start, end in spans:
        assert not [p for p in inner_pages if start < p < end], (start, end, pages)
        if [h for h in lines if start < h < end]:
            assert config.strategy == "structure", (start, end, headings)
            inside = [(a, b) for _, a, b in sections if a < end and b > start]
            assert all(b - a < small for a, b in inside), (start, end, inside)
            joined.add((start, end))
    starts = {start for start, _ in spans}
    for wall, first, end in sections:
        if wall in lines and (config.strategy == "sentence" or end - first >= small):
            assert first in starts, (wall, spans)
    return joined


@settings(max_examples=300)
@given(data=st.data(), text=documents(), config=configs())
@example(data=None, text="# A\n\nOne. Two.\n\n## B\n\nThree.\n", config=ChunkingConfig())
def test_every_strategy_cuts_exact_trimmed_bounded_ordered_slices(
    data: Any, text: str, config: ChunkingConfig
) -> None:
    headings = headings_of(text)
    pages = data.draw(page_starts(text)) if data is not None else []
    spans = chunk_spans(text, config, page_starts=pages, headings=headings)
    assert_exact_slices(text, spans, config)
    document = Document(
        document_id="d",
        source="d.md",
        content=text or " ",
        metadata={HEADINGS_KEY: markdown_outline(text), "page_starts": pages},
    )
    if text.strip():
        chunks = chunk_document(document, config)
        assert [(c.start_offset, c.end_offset) for c in chunks] == spans
        assert all(text[c.start_offset : c.end_offset] == c.content for c in chunks)


@settings(max_examples=300)
@given(
    data=st.data(),
    text=documents(),
    strategy=st.sampled_from(["structure", "sentence"]),
)
@example(
    data=None,
    text="Intro text here.\n\n  # Indented\nBody one. Body two.\n\nTitle\n===\nMore.\n",
    strategy="sentence",
)
def test_structure_strategies_never_cross_a_heading_or_page(
    data: Any, text: str, strategy: ChunkStrategy
) -> None:
    config = data.draw(configs(strategy)) if data is not None else ChunkingConfig(strategy=strategy)
    headings = headings_of(text)
    pages = data.draw(page_starts(text)) if data is not None else []
    spans = chunk_spans(text, config, page_starts=pages, headings=headings)
    assert_exact_slices(text, spans, config)
    joined = assert_walls_kept(text, spans, config, headings=headings, pages=pages)
    if strategy == "sentence":
        for (_, prev_end), (start, _) in pairwise(spans):
            assert prev_end <= start
    # A chunk lies in one section, the one its start is in, unless it joins small ones.
    outline = {HEADINGS_KEY: markdown_outline(text)}
    for start, end in spans:
        sec_start, sec_end = section_bounds(outline, start)
        assert sec_start <= start
        assert sec_end is None or end <= sec_end or (start, end) in joined


# Any text, and headings anywhere (extractors place them by their own rules).
_ANY_TEXT = st.lists(
    st.one_of(
        st.characters(exclude_categories=["Cs"]),
        st.sampled_from(["\n\n", ". ", "。", "# ", "\n", " ", "\u3000", "x" * 40, "東京"]),
    ),
    max_size=300,
).map("".join)


@settings(max_examples=300)
@given(data=st.data(), text=_ANY_TEXT, strategy=st.sampled_from(["structure", "sentence"]))
def test_headings_anywhere_are_never_crossed(data: Any, text: str, strategy: ChunkStrategy) -> None:
    config = data.draw(configs(strategy))
    size = max(len(text) - 1, 0)
    headings = sorted(set(data.draw(st.lists(st.integers(0, size), max_size=6)))) if text else []
    pages = data.draw(page_starts(text))
    spans = chunk_spans(text, config, page_starts=pages, headings=headings)
    assert_exact_slices(text, spans, config)
    assert_walls_kept(text, spans, config, headings=headings, pages=pages)


@pytest.mark.parametrize("indent", ["", "  "])
def test_a_sentence_heading_joins_no_sentence_across_a_page(indent: str) -> None:
    text = f"{indent}# Title\n\nBody sentence here."
    body = text.index("Body")
    config = ChunkingConfig(strategy="sentence")
    joined = chunk_spans(text, config, headings=[0])
    assert [text[a:b] for a, b in joined] == [text.strip()]
    split = chunk_spans(text, config, headings=[0], page_starts=[0, body])
    assert [text[a:b] for a, b in split] == ["# Title", "Body sentence here."]


def test_an_indented_heading_starts_its_chunk_at_the_hash() -> None:
    text = "Some intro.\n\n   ## Deep\nText under it.\n"
    (heading,) = headings_of(text)
    assert text[heading:].startswith("   ##")
    for strategy in ("structure", "sentence"):
        # A budget under four times each section: neither is joined to the other.
        config = ChunkingConfig(strategy=strategy, max_chars=32, overlap_chars=0)
        spans = chunk_spans(text, config, headings=[heading])
        assert heading + 3 in {start for start, _ in spans}
        assert not [s for s in spans if s[0] < heading + 3 < s[1]]
    # A sentence chunk joins an indented heading to its first sentence too.
    spans = chunk_spans(text, ChunkingConfig(strategy="sentence"), headings=[heading])
    assert [text[a:b] for a, b in spans] == ["Some intro.", "## Deep\nText under it."]


def test_sentence_chunks_of_many_headings_before_a_long_blank_tail() -> None:
    # Each heading's start was trimmed against the whole rest of the text, walking back
    # over the blank tail once per heading: hours here (the suite's timeout fails this
    # test without the fix).
    text = "".join(f"# H{i}\n\nBody {i}.\n\n" for i in range(20_000)) + "\n" * 1_000_000
    spans = chunk_spans(text, ChunkingConfig(strategy="sentence"), headings=headings_of(text))
    assert [text[a:b] for a, b in spans] == [f"# H{i}\n\nBody {i}." for i in range(20_000)]


def test_contextual_index_texts_of_a_file_of_many_headings() -> None:
    # Each chunk's heading path was found by walking the whole outline from the top:
    # half an hour for this 1 MB file (the suite's timeout fails this test without the
    # fix). One pass gives each chunk the path heading_path_at gives it. (A budget of
    # 32 keeps each section a chunk of its own: none is under a quarter of it.)
    text = "".join(f"{'#' * (i % 6 + 1)} H{i}\n\nBody {i}.\n\n" for i in range(40_000))
    metadata: dict[str, Any] = {HEADINGS_KEY: markdown_outline(text)}
    document = Document(document_id="d", source="h.md", content=text, metadata=metadata)
    config = ChunkingConfig(contextual=True, max_chars=32, overlap_chars=0)
    chunks = chunk_document(document, config)
    texts = index_texts(chunks, metadata, config)
    assert len(texts) == 40_000
    assert texts[-1] == "H39996 > H39997 > H39998 > H39999\n\n#### H39999\n\nBody 39999."
    for i in (0, 1, 5, 6, 7, 20_001):
        chunk = chunks[i]
        one = index_text(chunk.content, chunk.start_offset, metadata, contextual=True)
        assert texts[i] == one


_HEADING = st.tuples(st.integers(0, 60), st.integers(1, 6), st.sampled_from(["A", "b", ""]))
_ENTRY = _HEADING.map(list)


@settings(max_examples=200)
@given(
    outline=st.lists(_HEADING, max_size=12).map(lambda found: [list(h) for h in sorted(found)]),
    offsets=st.lists(st.integers(0, 70), max_size=6),
    ordered=st.booleans(),
)
def test_heading_paths_agree_with_heading_path_at(
    outline: list[list[Any]], offsets: list[int], ordered: bool
) -> None:
    # Outlines as the ingest writes them and a read checks them (valid_outline).
    metadata = {HEADINGS_KEY: outline}
    chosen = sorted(offsets) if ordered else offsets
    assert heading_paths(metadata, chosen) == [heading_path_at(metadata, o) for o in chosen]
    assert [heading_path_at(metadata, o) for o in chosen] == [
        naive_heading_path(outline, o) for o in chosen
    ]


@settings(max_examples=200)
@given(
    outline=st.lists(
        st.one_of(_ENTRY, st.just(["not", "an", "entry"]), st.just([1, 2]), st.just("x")),
        max_size=8,
    ),
    offsets=st.lists(st.integers(0, 70), max_size=6),
)
def test_a_damaged_outline_never_raises(outline: list[Any], offsets: list[int]) -> None:
    # A stored outline is checked when read; one that is not (a caller's own metadata)
    # gives some path or none, never an exception from a result's heading path.
    metadata = {HEADINGS_KEY: outline}
    for offset in offsets:
        assert isinstance(heading_path_at(metadata, offset), list)
    assert len(heading_paths(metadata, sorted(offsets))) == len(offsets)


def test_sentence_chunks_join_a_heading_with_its_first_sentence() -> None:
    text = "# Guide\n\nRun it. Then stop.\n\n## Next\n\nDone.\n"
    spans = chunk_spans(text, ChunkingConfig(strategy="sentence"), headings=headings_of(text))
    assert [text[a:b] for a, b in spans] == [
        "# Guide\n\nRun it.",
        "Then stop.",
        "## Next\n\nDone.",
    ]


@settings(max_examples=200)
@given(text=documents(), config=configs("fixed"))
def test_fixed_ignores_headings(text: str, config: ChunkingConfig) -> None:
    headings = headings_of(text)
    assert chunk_spans(text, config, headings=headings) == chunk_spans(text, config)


def stored(text: str, spans: list[Span], metadata: dict[str, Any]) -> list[StoredChunk]:
    return [
        StoredChunk(
            key=i,
            chunk_id=f"c{i}",
            chunk_index=i,
            content=text[a:b],
            start_offset=a,
            end_offset=b,
            document_id="d",
            source="d.md",
            document_hash="h",
            ingested_at="2026-01-01T00:00:00Z",
            source_class="text",
            extractor=None,
            metadata=metadata,
        )
        for i, (a, b) in enumerate(spans)
    ]


@settings(max_examples=200)
@given(data=st.data(), text=documents(), config=configs())
def test_gaps_and_chunks_rebuild_any_run_exactly(
    data: Any, text: str, config: ChunkingConfig
) -> None:
    spans = chunk_spans(text, config, headings=headings_of(text))
    gaps = chunk_gaps(text, spans)
    # Only whitespace lies between chunks (the store refuses anything else).
    assert all(key.isdigit() and not value.strip() for key, value in gaps.items())
    assert all(value != " " for value in gaps.values())
    if not spans:
        return
    chunks = stored(text, spans, {GAPS_KEY: gaps})
    assert rebuild_text(chunks, gaps) == text[spans[0][0] : spans[-1][1]]
    low = data.draw(st.integers(0, len(spans) - 1))
    high = data.draw(st.integers(low, len(spans) - 1))
    run = chunks[low : high + 1]
    assert rebuild_text(run, gaps) == text[spans[low][0] : spans[high][1]]


def test_rebuild_refuses_a_missing_gap() -> None:
    text = "One.\n\n\nTwo."
    spans = chunk_spans(text, ChunkingConfig(strategy="sentence"))
    assert len(spans) == 2
    chunks = stored(text, spans, {})
    assert rebuild_text(chunks, chunk_gaps(text, spans)) == text
    assert rebuild_text(chunks, {}) is None
    assert rebuild_text(chunks, {"0": "\n"}) is None  # the wrong width


def test_rebuild_without_recorded_gaps_joins_only_touching_chunks() -> None:
    """``gaps`` None (a document stored before gaps were recorded): no gap is guessed,
    not even one character wide, which may be a line break rather than a space."""
    text = "Aaaa aaaa.\nBbbb bbbb. Cccc."
    spans = [(0, 10), (11, 21), (22, 27)]
    assert [text[a:b] for a, b in spans] == ["Aaaa aaaa.", "Bbbb bbbb.", "Cccc."]
    chunks = stored(text, spans, {})
    assert rebuild_text(chunks[:1], None) == "Aaaa aaaa."
    assert rebuild_text(chunks[:2], None) is None
    assert rebuild_text(chunks[1:], None) is None
    assert rebuild_text(chunks[1:], {}) == "Bbbb bbbb. Cccc."  # recorded: one space
    word = "k" * 40
    touching = stored(word, [(0, 20), (20, 40)], {})
    assert rebuild_text(touching, None) == word
    overlapping = stored(word, [(0, 25), (15, 40)], {})
    assert rebuild_text(overlapping, None) == word


def naive_heading_path(outline: list[list[int | str]], offset: int) -> list[str]:
    """The headings at or before ``offset`` that no later heading (at or before it) of
    the same or a higher level closes."""
    before = [(int(o), int(level), str(title)) for o, level, title in outline if int(o) <= offset]
    return [
        title
        for i, (_, level, title) in enumerate(before)
        if all(later > level for _, later, _ in before[i + 1 :])
    ]


@settings(max_examples=200)
@given(data=st.data(), text=documents())
@example(data=None, text="# A\n\n### B\n\n## C\n\nx\n")
def test_heading_path_is_the_stack_of_enclosing_headings(data: Any, text: str) -> None:
    outline = markdown_outline(text)
    metadata = {HEADINGS_KEY: outline}
    offsets = [int(o) for o, _, _ in outline] + [int(o) + 1 for o, _, _ in outline]
    offsets += [0, len(text)]
    if data is not None and text:
        offsets += data.draw(st.lists(st.integers(0, len(text)), max_size=10))
    for offset in offsets:
        assert heading_path_at(metadata, offset) == naive_heading_path(outline, offset)
    if text == "# A\n\n### B\n\n## C\n\nx\n":
        assert heading_path_at(metadata, len(text) - 2) == ["A", "C"]


def test_heading_path_of_no_or_malformed_outline_is_empty() -> None:
    assert heading_path_at({}, 5) == []
    assert heading_path_at({HEADINGS_KEY: "nope"}, 5) == []
    assert heading_path_at({HEADINGS_KEY: [[0, 1]]}, 5) == []
    assert heading_path_at({HEADINGS_KEY: [[0, "1", "A"]]}, 5) == []


@settings(max_examples=200)
@given(config=configs())
def test_identity_round_trips(config: ChunkingConfig) -> None:
    restored = ChunkingConfig.from_identity(config.identity)
    assert restored is not None
    assert restored.identity == config.identity
    assert (restored.strategy, restored.max_chars, restored.contextual) == (
        config.strategy,
        config.max_chars,
        config.contextual,
    )
    assert restored.effective_overlap == config.effective_overlap
    assert chunk_spans("A sentence. Another one.\n\n# H\n\nMore.", restored) == chunk_spans(
        "A sentence. Another one.\n\n# H\n\nMore.", config
    )


@given(
    identity=st.one_of(
        st.text(max_size=40),
        st.builds(
            lambda parts: ":".join(parts),
            st.lists(
                st.sampled_from(
                    [
                        *("chunker/1", "chunker/2", "fixed", "sentence", "structure", "bogus"),
                        *("16", "32", "400", "0", "200", "-1", "contextual", "x", ""),
                    ]
                ),
                max_size=6,
            ),
        ),
    )
)
def test_from_identity_returns_none_or_a_config_with_that_identity(identity: str) -> None:
    made = ChunkingConfig.from_identity(identity)
    assert made is None or made.identity == identity


def test_from_identity_refuses_what_it_did_not_write() -> None:
    assert ChunkingConfig.from_identity(None) is None
    assert ChunkingConfig.from_identity("chunker/1:sentence:400:200") is None
    assert ChunkingConfig.from_identity("chunker/1:fixed:100:60") is None  # overlap > half
    assert ChunkingConfig.from_identity("chunker/1:fixed:400:0:other") is None
    assert ChunkingConfig.from_identity("chunker/1:fixed:0400:0") is None
    sentence = ChunkingConfig.from_identity("chunker/1:sentence:400:0:contextual")
    assert sentence == ChunkingConfig(strategy="sentence", max_chars=400, contextual=True)


@pytest.mark.parametrize("overlap", [1, 200, 10_000])
def test_sentence_with_an_overlap_is_refused(overlap: int) -> None:
    with pytest.raises(ConfigurationError, match="do not overlap"):
        ChunkingConfig(strategy="sentence", overlap_chars=overlap)


def test_sentence_without_an_overlap_has_none() -> None:
    for config in (
        ChunkingConfig(strategy="sentence"),
        ChunkingConfig(strategy="sentence", overlap_chars=0),
    ):
        assert config.effective_overlap == 0
        assert config.identity == "chunker/1:sentence:1600:0"
