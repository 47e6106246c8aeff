"""A document's outline is bounded: deepest levels dropped first, with a note."""

from __future__ import annotations

from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from groundkit import Collection
from groundkit.contracts import HEADINGS_KEY, heading_path_at
from groundkit.extraction import Extraction
from groundkit.ingestion.extracted import extracted_document_parts, extracted_metadata
from groundkit.ingestion.files import FileLoader
from groundkit.ingestion.outline import (
    MAX_OUTLINE_HEADINGS,
    Heading,
    as_outline,
    bounded_outline,
    iter_markdown_headings,
    markdown_headings,
    markdown_outline,
)

headings_lists = st.lists(st.integers(1, 6), max_size=40).map(
    lambda levels: [(i * 3, level, f"t{i}") for i, level in enumerate(levels)]
)


def reference(headings: list[Heading], limit: int) -> list[list[int | str]]:
    """Every heading down to the deepest level whose headings, with all shallower
    ones, fit in ``limit``."""
    for deepest in range(6, 0, -1):
        kept = [h for h in headings if h[1] <= deepest]
        if len(kept) <= limit:
            return as_outline(kept)
    return []


@given(headings=headings_lists, limit=st.integers(0, 25))
def test_the_kept_outline_is_every_heading_down_to_the_deepest_level_that_fits(
    headings: list[Heading], limit: int
) -> None:
    kept, note = bounded_outline(iter(headings), limit)
    assert kept == reference(headings, limit)
    assert len(kept) <= limit
    assert (note is None) == (len(kept) == len(headings))
    # A kept path is the full path with its deepest titles left off, never another one.
    full = {HEADINGS_KEY: as_outline(headings)}
    for offset in range(0, 3 * len(headings) + 1):
        short = heading_path_at({HEADINGS_KEY: kept}, offset)
        assert heading_path_at(full, offset)[: len(short)] == short


def test_a_small_outline_is_kept_whole() -> None:
    text = "# A\n\n## B\n\ntext\n"
    assert bounded_outline(iter_markdown_headings(text)) == (
        as_outline(markdown_headings(text)),
        None,
    )
    assert markdown_outline(text) == [[0, 1, "A"], [5, 2, "B"]]


def test_the_notes_say_what_was_cut() -> None:
    many = [(i, 2, "s") for i in range(30)]
    kept, note = bounded_outline([(0, 1, "Top"), *many], 10)
    assert kept == [[0, 1, "Top"]]
    assert note == "outline cut to heading level 1: 31 headings, more than 10; " + (
        "deeper headings give no heading paths and no cuts"
    )
    kept, note = bounded_outline(many, 10)
    assert kept == []
    assert note is not None and note.startswith("outline left out: 30 headings, more than 10")
    kept, note = bounded_outline([(i, 1 + i % 3, "x") for i in range(30)], 25)
    assert [entry[1] for entry in kept] == [1, 2] * 10
    assert note is not None and note.startswith("outline cut to heading levels 1-2: 30 headings")


async def test_a_file_of_too_many_headings_ingests_with_a_warning(tmp_path: Path) -> None:
    base = tmp_path / "docs"
    base.mkdir()
    sections = "".join(
        f"# Part {p}\n\n" + "".join("## Step\n\nboil the kettle\n\n" for _ in range(700))
        for p in range(100)
    )
    (base / "manual.md").write_text(sections + "## Step\n\nzebra kettle\n")
    (base / "small.md").write_text("# Guide\n\n## Install\n\nzebra tea\n")
    document = await FileLoader().load(base / "manual.md", base_dir=base)
    assert len(document.metadata[HEADINGS_KEY]) == 100  # the parts only
    assert document.notes[-1].startswith("outline cut to heading level 1: 70,101 headings")
    async with Collection.open(tmp_path / "idx", base_dir=base) as col:
        report = await col.ingest(base)
        assert [(w.source, w.reason) for w in report.warnings] == [
            ("manual.md", document.notes[-1])
        ]
        found = {r.source: r.heading_path for r in (await col.search("zebra", 5)).results}
    # The manual's last step is under its last part; the small file keeps its full path.
    assert found == {"manual.md": ["Part 99"], "small.md": ["Guide", "Install"]}


def test_an_extraction_with_too_many_headings_is_cut_alike() -> None:
    headings = tuple((i, 1 + i % 2, f"h{i}") for i in range(MAX_OUTLINE_HEADINGS + 2))
    extraction = Extraction(text="x" * (MAX_OUTLINE_HEADINGS + 2), headings=headings)
    outline = extracted_metadata(extraction, read_fields=False)[HEADINGS_KEY]
    assert len(outline) == (MAX_OUTLINE_HEADINGS + 2) // 2
    assert {entry[1] for entry in outline} == {1}
    (note,) = extracted_document_parts(extraction, read_fields=False)[1]
    assert note.startswith("outline cut to heading level 1")
