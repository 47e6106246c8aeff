"""Reading a citation back from its source: verified, drifted or unresolvable."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from groundkit import Citation, RetrievalError, resolve_citation, verify_citation
from groundkit.retrieval.citations import read_source, slice_span
from tests.support import write_tree

TEXT = "Intro line.\r\n\r\nRocket 🚀 launch at dawn. 東京の朝。\n"


def cite(text: str, needle: str, source: str = "doc.txt", **over: object) -> Citation:
    start = text.index(needle)
    fields: dict[str, object] = dict(
        document_id="d",
        chunk_id="c",
        source=source,
        source_class="text",
        extractor=None,
        start_offset=start,
        end_offset=start + len(needle),
    )
    return Citation(**(fields | over))  # type: ignore[arg-type]


@pytest.fixture
def base(tmp_path: Path) -> Path:
    root = tmp_path / "base"
    write_tree(root, {"doc.txt": TEXT, "sub/dir/deep.md": "deep text", "outside_ok.txt": "x"})
    write_tree(tmp_path, {"outside.txt": TEXT})
    return root


@pytest.mark.parametrize("needle", ["Intro line.", "Rocket 🚀 launch", "東京の朝。", "\r\n\r\n"])
async def test_verified_spans(base: Path, needle: str) -> None:
    citation = cite(TEXT, needle)
    assert await resolve_citation(citation, base) == needle
    assert await verify_citation(citation, needle, base)


async def test_nested_source(base: Path) -> None:
    citation = cite("deep text", "text", source="sub/dir/deep.md")
    assert await verify_citation(citation, "text", base)


async def test_empty_span(base: Path) -> None:
    citation = cite(TEXT, "Intro").model_copy(update={"end_offset": 0})
    assert await resolve_citation(citation, base) == ""


async def test_same_length_edit_is_drift(base: Path) -> None:
    citation = cite(TEXT, "Rocket 🚀 launch")
    (base / "doc.txt").write_text(TEXT.replace("Rocket", "Racket"), encoding="utf-8", newline="")
    assert await verify_citation(citation, "Rocket 🚀 launch", base) is False


async def test_shifted_text_is_drift(base: Path) -> None:
    citation = cite(TEXT, "東京の朝。")
    (base / "doc.txt").write_text("New first line.\n" + TEXT, encoding="utf-8", newline="")
    assert await verify_citation(citation, "東京の朝。", base) is False


async def test_truncated_source_raises_drifted(base: Path) -> None:
    citation = cite(TEXT, "東京の朝。")
    (base / "doc.txt").write_text(TEXT[:10], encoding="utf-8")
    with pytest.raises(RetrievalError) as info:
        await verify_citation(citation, "東京の朝。", base)
    assert info.value.verdict == "drifted"


async def test_deleted_source_is_unresolvable(base: Path) -> None:
    citation = cite(TEXT, "Intro line.")
    (base / "doc.txt").unlink()
    with pytest.raises(RetrievalError) as info:
        await verify_citation(citation, "Intro line.", base)
    assert info.value.verdict == "unresolvable"


async def test_source_no_longer_utf8_is_unresolvable(base: Path) -> None:
    citation = cite(TEXT, "Intro line.")
    (base / "doc.txt").write_bytes(b"Intro line.\xff\xfe")
    with pytest.raises(RetrievalError) as info:
        await resolve_citation(citation, base)
    assert info.value.verdict == "unresolvable"


@pytest.mark.parametrize("source", ["../outside.txt", "sub/../../outside.txt"])
async def test_relative_escape_is_unresolvable(base: Path, source: str) -> None:
    assert (base / source).exists()  # the file is real; only containment refuses it
    citation = cite(TEXT, "Intro line.", source=source)
    with pytest.raises(RetrievalError) as info:
        await resolve_citation(citation, base)
    assert info.value.verdict == "unresolvable"


async def test_absolute_escape_is_unresolvable(base: Path) -> None:
    outside = str(base.parent / "outside.txt")
    with pytest.raises(RetrievalError) as info:
        await verify_citation(cite(TEXT, "Intro line.", source=outside), "Intro line.", base)
    assert info.value.verdict == "unresolvable"


async def test_absolute_path_inside_base_resolves(base: Path) -> None:
    inside = os.path.realpath(base / "doc.txt")
    assert await verify_citation(cite(TEXT, "Intro line.", source=inside), "Intro line.", base)


async def test_symlink_escape_is_unresolvable(base: Path) -> None:
    (base / "link.txt").symlink_to(base.parent / "outside.txt")
    with pytest.raises(RetrievalError) as info:
        await resolve_citation(cite(TEXT, "Intro line.", source="link.txt"), base)
    assert info.value.verdict == "unresolvable"


@pytest.mark.parametrize(
    ("source_class", "extractor"), [("extracted", "pdf-text@1"), ("snapshot", None)]
)
async def test_other_source_classes_are_unresolvable(
    base: Path, source_class: str, extractor: str | None
) -> None:
    citation = cite(TEXT, "Intro line.", source_class=source_class, extractor=extractor)
    with pytest.raises(RetrievalError) as info:
        await verify_citation(citation, "Intro line.", base)
    assert info.value.verdict == "unresolvable"


async def test_read_source_returns_whole_text(base: Path) -> None:
    assert await read_source("doc.txt", "text", base) == TEXT


def test_slice_span() -> None:
    citation = cite(TEXT, "dawn")
    assert slice_span(TEXT, citation) == "dawn"
    with pytest.raises(RetrievalError) as info:
        slice_span(TEXT[: citation.end_offset - 1], citation)
    assert info.value.verdict == "drifted"
    assert slice_span(TEXT[: citation.end_offset], citation) == "dawn"
