"""Reading a citation back from its source: verified, drifted or unresolvable."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from groundkit import Citation, RetrievalError, resolve_citation, verify_citation
from groundkit.verification.sources import read_source, slice_span
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
    assert await read_source(cite(TEXT, "Intro"), base) == TEXT


def test_slice_span() -> None:
    citation = cite(TEXT, "dawn")
    assert slice_span(TEXT, citation) == "dawn"
    with pytest.raises(RetrievalError) as info:
        slice_span(TEXT[: citation.end_offset - 1], citation)
    assert info.value.verdict == "drifted"
    assert slice_span(TEXT[: citation.end_offset], citation) == "dawn"


# -- snapshot and extracted classes ------------------------------------------

SNAPSHOT_ID = "0123456789abcdef0123456789abcdef"


def snap(needle: str, document_id: str = SNAPSHOT_ID) -> Citation:
    return cite(
        TEXT,
        needle,
        source="https://example.com/page",
        source_class="snapshot",
        document_id=document_id,
    )


@pytest.fixture
def snapshots(tmp_path: Path) -> Path:
    root = tmp_path / "default.snapshots"
    write_tree(root, {SNAPSHOT_ID: TEXT})
    write_tree(tmp_path, {"secret": TEXT})
    return root


async def test_snapshot_verified_and_drifted(base: Path, snapshots: Path) -> None:
    citation = snap("Rocket 🚀 launch")
    assert await verify_citation(citation, "Rocket 🚀 launch", base, snapshot_dir=snapshots)
    (snapshots / SNAPSHOT_ID).write_text(TEXT.replace("Rocket", "Racket"), encoding="utf-8")
    assert not await verify_citation(citation, "Rocket 🚀 launch", base, snapshot_dir=snapshots)
    (snapshots / SNAPSHOT_ID).write_text("short", encoding="utf-8")
    with pytest.raises(RetrievalError) as info:
        await resolve_citation(citation, base, snapshot_dir=snapshots)
    assert info.value.verdict == "drifted"


async def test_snapshot_without_snapshot_dir(base: Path) -> None:
    with pytest.raises(RetrievalError, match="no snapshot_dir argument") as info:
        await resolve_citation(snap("Intro line."), base)
    assert info.value.verdict == "unresolvable"


@pytest.mark.parametrize(
    "document_id", ["../secret", "..", ".", "sub/x", "/etc/passwd", "a\\b", "x\x00", ""]
)
async def test_snapshot_document_id_is_not_a_path(
    base: Path, snapshots: Path, document_id: str
) -> None:
    citation = snap("Intro line.", document_id=document_id)
    with pytest.raises(RetrievalError, match="cannot name a snapshot") as info:
        await resolve_citation(citation, base, snapshot_dir=snapshots)
    assert info.value.verdict == "unresolvable"


async def test_snapshot_symlinked_out_is_refused(base: Path, snapshots: Path) -> None:
    (snapshots / SNAPSHOT_ID).unlink()
    (snapshots / SNAPSHOT_ID).symlink_to(snapshots.parent / "secret")
    with pytest.raises(RetrievalError, match="outside") as info:
        await resolve_citation(snap("Intro line."), base, snapshot_dir=snapshots)
    assert info.value.verdict == "unresolvable"


async def test_snapshot_missing_or_not_utf8(base: Path, snapshots: Path) -> None:
    (snapshots / SNAPSHOT_ID).write_bytes(b"\xff\xfe\xfa")
    with pytest.raises(RetrievalError, match="UTF-8") as info:
        await resolve_citation(snap("Intro line."), base, snapshot_dir=snapshots)
    assert info.value.verdict == "unresolvable"
    (snapshots / SNAPSHOT_ID).unlink()
    with pytest.raises(RetrievalError, match="cannot read") as info:
        await resolve_citation(snap("Intro line."), base, snapshot_dir=snapshots)
    assert info.value.verdict == "unresolvable"


async def test_extracted_with_an_inactive_identity(base: Path) -> None:
    from groundkit.extraction import active_extractors

    citation = cite(TEXT, "Intro line.", source_class="extracted", extractor="pypdf/0.0.1")
    with pytest.raises(RetrievalError) as info:
        await resolve_citation(citation, base)
    assert info.value.verdict == "unresolvable"
    assert "pypdf/0.0.1" in str(info.value)
    for identity in active_extractors():
        assert identity in str(info.value)
