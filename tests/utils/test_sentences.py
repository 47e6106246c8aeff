"""Sentence boundaries: exact slices that tile the text, and the cases prose throws at them."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from groundkit.utils.sentences import sentence_tiles
from groundkit.verification import sentence_spans


def sentences(text: str) -> list[str]:
    return [text[a:b] for a, b in sentence_spans(text)]


PIECES = st.sampled_from(
    [
        "Dr. Smith",
        "e.g. mice",
        "3.5 mg",
        "It rose.",
        "Why?",
        "Stop!",
        "“Quoted.”",
        "(see Fig. 2).",
        "これは文です。",
        "次？",
        "\n\n",
        "\n- item",
        "\n# Heading",
        " ",
        "\t",
        "U.S.",
        "J. R. Tolkien",
        "ok",
        "...",
        "…",
        ".",
    ]
)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(PIECES, st.text(max_size=12)), max_size=30).map("".join))
def test_tiles_cover_the_text_and_spans_are_trimmed_slices(text: str) -> None:
    tiles = sentence_tiles(text)
    if not text:
        assert tiles == []
    else:
        assert tiles[0][0] == 0 and tiles[-1][1] == len(text)
        assert all(a < b for a, b in tiles)
        assert all(p[1] == q[0] for p, q in itertools.pairwise(tiles))
        assert "".join(text[a:b] for a, b in tiles) == text
    spans = sentence_spans(text)
    for a, b in spans:
        piece = text[a:b]
        assert piece and piece == piece.strip()
        assert any(ta <= a and b <= tb for ta, tb in tiles)
    assert all(p[1] <= q[0] for p, q in itertools.pairwise(spans))
    # Nothing but whitespace is left out.
    covered = {i for a, b in spans for i in range(a, b)}
    assert all(text[i].isspace() for i in range(len(text)) if i not in covered)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "Dr. Smith went home. He was 3.5 m tall! Was he? Yes.",
            ["Dr. Smith went home.", "He was 3.5 m tall!", "Was he?", "Yes."],
        ),
        (
            "We used e.g. mice (see Fig. 2). Results were strong.",
            ["We used e.g. mice (see Fig. 2).", "Results were strong."],
        ),
        ("这是第一句。这是第二句！好吗？", ["这是第一句。", "这是第二句！", "好吗？"]),
        ('He said "stop." Then he left.', ['He said "stop."', "Then he left."]),
        ("J. R. R. Tolkien wrote it. Next one", ["J. R. R. Tolkien wrote it.", "Next one"]),
        (
            "Values (p < 0.05) rose. approx. three fell.",
            ["Values (p < 0.05) rose. approx. three fell."],
        ),
        ("Heading\n\nFirst para. Second", ["Heading", "First para.", "Second"]),
        ("Intro\n- one\n- two", ["Intro", "- one", "- two"]),
        ("Wait... What happened?! Nothing.", ["Wait...", "What happened?!", "Nothing."]),
        ("See example.com.Then more", ["See example.com.Then more"]),
        ("", []),
        ("   ", []),
    ],
)
def test_examples(text: str, expected: list[str]) -> None:
    assert sentences(text) == expected


def test_offsets_are_positions_not_searches() -> None:
    # The same sentence twice: each occurrence gets its own offsets.
    text = "Tea helps. Tea helps. Tea helps."
    assert sentence_spans(text) == [(0, 10), (11, 21), (22, 32)]
