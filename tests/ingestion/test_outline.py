"""The Markdown and reStructuredText outline scanners (ingestion/outline.py)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from groundkit.ingestion.outline import (
    as_outline,
    markdown_headings,
    markdown_outline,
    rst_headings,
    rst_outline,
)


def titles(text: str) -> list[tuple[int, str]]:
    return [(level, title) for _, level, title in markdown_headings(text)]


def checked(text: str, found: list[tuple[int, int, str]]) -> None:
    """The properties every outline keeps: offsets sorted and at line starts."""
    offsets = [offset for offset, _, _ in found]
    assert offsets == sorted(offsets)
    for offset, level, title in found:
        assert 0 <= offset < len(text)
        assert offset == 0 or text[offset - 1] == "\n"
        assert 1 <= level <= 6
        assert title and title == " ".join(title.split())


def line_at(text: str, offset: int) -> str:
    end = text.find("\n", offset)
    return text[offset : end if end >= 0 else len(text)]


def is_subsequence(small: str, large: str) -> bool:
    chars = iter(large)
    return all(char in chars for char in small)


class TestMarkdown:
    def test_atx_offsets_levels_and_titles(self) -> None:
        text = "# Guide\n\nIntro.\n\n## Install ##\n\nSteps.\n\n   ###### Deep\n"
        install, deep = text.index("## Install"), text.index("   ######")
        assert markdown_headings(text) == [
            (0, 1, "Guide"),
            (install, 2, "Install"),
            (deep, 6, "Deep"),
        ]
        assert markdown_outline(text) == [[0, 1, "Guide"], [17, 2, "Install"], [40, 6, "Deep"]]

    @pytest.mark.parametrize(
        "line",
        ["#hashtag", "####### seven", "    # four spaces is code", "\t# tab is code", "#5 on"],
    )
    def test_not_a_heading(self, line: str) -> None:
        assert markdown_headings(f"{line}\n\ntext\n") == []

    def test_closing_hashes_and_empty_headings(self) -> None:
        assert titles("# foo#\n") == [(1, "foo#")]
        assert titles("## foo ###   \n") == [(2, "foo")]
        assert titles("#\n\n## ##\n\n### \n") == []
        assert titles("#\tTabbed\n") == [(1, "Tabbed")]

    def test_setext(self) -> None:
        text = "Title\n=====\n\nBody text.\n\nPart two\n---\n"
        assert markdown_headings(text) == [(0, 1, "Title"), (25, 2, "Part two")]
        assert text[25:].startswith("Part two")

    def test_setext_needs_a_one_line_paragraph(self) -> None:
        # Under a longer paragraph the underline is taken as an accident (a rule).
        assert titles("first line\nsecond line\n---\n") == []
        assert titles("first line\nsecond line\n===\n") == []
        # Nor under a blank line, a list item or a quote.
        assert titles("\n---\n") == []
        assert titles("- item\n---\n") == []
        assert titles("1. step\n===\n") == []
        assert titles("> quoted\n---\n") == []
        # A thematic break with spaces is never an underline.
        assert titles("Text\n- - -\n") == []

    def test_atx_interrupts_a_paragraph(self) -> None:
        text = "Some text\n# Heading\nmore\n"
        assert markdown_headings(text) == [(10, 1, "Heading")]

    def test_fences_are_skipped(self) -> None:
        text = (
            "# Before\n"
            "```python\n# comment\nTitle\n=====\n```\n"
            "~~~~\n## not\n~~~\n## still not\n~~~~\n"
            "````\n```\n# inside\n````\n"
            "## After\n"
        )
        assert titles(text) == [(1, "Before"), (2, "After")]

    def test_backtick_fence_with_backticks_in_info_is_not_a_fence(self) -> None:
        assert titles("```a`b\n# Real\n") == [(1, "Real")]

    def test_unclosed_fence_runs_to_the_end(self) -> None:
        assert titles("# One\n```\n# Two\n") == [(1, "One")]

    def test_indented_code_and_lazy_continuation(self) -> None:
        assert titles("text\n\n    # code\n    more code\n\n# Real\n") == [(1, "Real")]
        # An indented line after a paragraph continues it; the underline is then
        # under a two-line paragraph.
        assert titles("Para\n    continued\n---\n") == []

    def test_html_comments_are_skipped(self) -> None:
        assert titles("<!--\n# hidden\n-->\n# Shown\n") == [(1, "Shown")]
        assert titles("<!-- one line -->\n# Shown\n") == [(1, "Shown")]

    def test_front_matter_is_not_an_outline(self) -> None:
        text = "---\ntitle: Guide\ntags: [a]\n---\n# Guide\n"
        assert markdown_headings(text) == [(text.index("# Guide"), 1, "Guide")]
        toml = '+++\ntitle = "x"\n+++\nTitle\n=====\n'
        assert markdown_headings(toml) == [(toml.index("Title"), 1, "Title")]
        # Without its closing line it is no front matter: a rule, then text.
        assert titles("---\nText\n\nTitle\n===\n") == [(1, "Title")]

    def test_bom_and_crlf(self) -> None:
        text = "\ufeff# One\r\n\r\nTwo\r\n===\r\n"
        assert markdown_headings(text) == [(0, 1, "One"), (10, 1, "Two")]
        assert text[10:].startswith("Two")

    def test_inline_markup_is_stripped(self) -> None:
        assert titles("# **Bold** and *em* and _u_\n") == [(1, "Bold and em and u")]
        assert titles("# The `__init__` method\n") == [(1, "The __init__ method")]
        assert titles("# [Docs](https://example.com) and ![logo](x.png)\n") == [
            (1, "Docs and logo")
        ]
        assert titles("# snake_case stays, 2 * 3 too\n") == [(1, "snake_case stays, 2 * 3 too")]
        assert titles("# Escaped \\*star\\*\n") == [(1, "Escaped *star*")]
        assert titles("#   spaced    out   \n") == [(1, "spaced out")]

    def test_headings_of_long_backtick_runs(self) -> None:
        # Each title was seconds of regex backtracking, so a file of such headings held
        # an ingest for an hour (the suite's timeout fails this test without the fix).
        text = ("# " + "`" * 999 + "a\n\n") * 600
        assert titles(text) == [(1, "a")] * 600
        assert titles("# ``a` and ``b``\n") == [(1, "a` and b")]

    def test_no_headings(self) -> None:
        assert markdown_outline("") == []
        assert markdown_outline("just text\n\nand more\n") == []


class TestRst:
    def test_levels_follow_first_appearance(self) -> None:
        text = (
            "=====\nTitle\n=====\n\n"
            "Intro.\n\n"
            "Section\n-------\n\nText.\n\n"
            "Sub\n~~~\n\n"
            "Other\n-----\n"
        )
        found = rst_headings(text)
        assert [(level, title) for _, level, title in found] == [
            (1, "Title"),
            (2, "Section"),
            (3, "Sub"),
            (2, "Other"),
        ]
        # An overlined title starts at its overline.
        assert found[0][0] == 0
        for offset, _, title in found[1:]:
            assert text[offset:].startswith(title)
        assert rst_outline(text) == as_outline(found)

    def test_overline_and_underline_styles_differ(self) -> None:
        text = "====\nA\n====\n\nB\n====\n"
        assert [(level, title) for _, level, title in rst_headings(text)] == [(1, "A"), (2, "B")]

    def test_overlined_title_may_be_inset(self) -> None:
        assert rst_headings("-----------\n  Inset   \n-----------\n") == [(0, 1, "Inset")]

    def test_not_titles(self) -> None:
        # Underline too short; an indented line (a block quote or literal block);
        # a transition between paragraphs; a mismatched overline.
        text = (
            "Too short\n-----\n\n"
            "Literal::\n\n    code\n    ----\n\n"
            "Para.\n\n----------\n\nMore.\n\n"
            "=====\nMismatch\n------\n"
        )
        assert rst_headings(text) == []

    def test_a_title_follows_a_blank_line(self) -> None:
        assert rst_headings("para line\nTitle\n-----\n") == []

    def test_styles_past_six_are_level_six(self) -> None:
        chars = "=-~^+*#"
        text = "".join(f"T{c}\n{c * 4}\n\n" for c in chars)
        levels = [level for _, level, _ in rst_headings(text)]
        assert levels == [1, 2, 3, 4, 5, 6, 6]

    def test_inline_markup_is_stripped(self) -> None:
        text = "``grk`` and *this* and `Docs <https://x>`_\n=============================================\n"
        assert rst_headings(text) == [(0, 1, "grk and this and Docs")]

    def test_crlf(self) -> None:
        text = "Intro\r\n\r\nTitle\r\n=====\r\n"
        assert rst_headings(text) == [(9, 1, "Title")]


# --- properties -------------------------------------------------------------------

_ATOMS = [
    "#", "##", "###", "####", "#######", " ", "  ", "    ", "\t", "text", "Word", "=", "===",
    "-", "---", "~~~", "```", "*", "_", "`", "\\", ">", "- ", "1. ", "<!--", "-->", "[a](b)",
    "+++", "::", "é",
]  # fmt: skip
_LINE = st.lists(st.sampled_from(_ATOMS), max_size=6).map("".join)
_TEXT = st.lists(_LINE, max_size=25).flatmap(
    lambda lines: st.sampled_from(["\n", "\r\n"]).map(lambda end: end.join(lines))
)


@given(_TEXT)
def test_markdown_offsets_are_line_starts_whose_line_holds_the_title(text: str) -> None:
    found = markdown_headings(text)
    checked(text, found)
    for offset, _, title in found:
        line = " ".join(line_at(text, offset).split())
        assert is_subsequence(title, line), (title, line)


@given(_TEXT)
def test_rst_offsets_are_line_starts_whose_line_holds_the_title(text: str) -> None:
    found = rst_headings(text)
    checked(text, found)
    for offset, _, title in found:
        line = " ".join(line_at(text, offset).split())
        if not is_subsequence(title, line):  # an overline: the title is the next line
            following = text.index("\n", offset) + 1
            line = " ".join(line_at(text, following).split())
        assert is_subsequence(title, line), (title, line)


_WORDS = st.lists(st.sampled_from(["Alpha", "beta", "Gamma", "delta", "2024"]), min_size=1)
_SECTION = st.tuples(st.integers(1, 6), _WORDS.map(" ".join), st.booleans())


@given(st.lists(_SECTION, max_size=8))
def test_rendered_markdown_headings_come_back(sections: list[tuple[int, str, bool]]) -> None:
    parts: list[str] = []
    expected: list[tuple[int, int, str]] = []
    offset = 0
    for level, title, setext in sections:
        if setext and level <= 2:
            block = f"{title}\n{'=' if level == 1 else '-' * 3}\n\nSome body text.\n\n"
        else:
            block = f"{'#' * level} {title}\n\nSome body text.\n\n"
        expected.append((offset, level, title))
        parts.append(block)
        offset += len(block)
    assert markdown_headings("".join(parts)) == expected


@given(st.lists(st.tuples(st.sampled_from("=-~^"), _WORDS.map(" ".join)), max_size=8))
def test_rendered_rst_titles_come_back(sections: list[tuple[str, str]]) -> None:
    text = "".join(f"{title}\n{char * len(title)}\n\nBody.\n\n" for char, title in sections)
    found = rst_headings(text)
    assert [title for _, _, title in found] == [title for _, title in sections]
    order = list(dict.fromkeys(char for char, _ in sections))
    assert [level for _, level, _ in found] == [order.index(c) + 1 for c, _ in sections]
