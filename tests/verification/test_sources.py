"""Reading a citation back from its source: verified, moved, drifted or unresolvable."""

from __future__ import annotations

import os
import re
import unicodedata
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from groundkit import (
    Citation,
    InvalidQueryError,
    RetrievalError,
    check_citation,
    check_quote,
    check_receipts,
    resolve_citation,
    verify_answer,
)
from groundkit.storage.names import document_id_for
from groundkit.storage.snapshots import LocalSnapshots
from groundkit.utils.path_safety import PathEscapeError
from groundkit.verification.sources import read_source, slice_span
from groundkit.verification.verdict import verify_citation
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
    result = await check_citation(citation, needle, base)
    assert result.ok and result.verification == "verified", result.detail


async def test_nested_source(base: Path) -> None:
    citation = cite("deep text", "text", source="sub/dir/deep.md")
    assert (await check_citation(citation, "text", base)).ok


async def test_empty_span(base: Path) -> None:
    citation = cite(TEXT, "Intro").model_copy(update={"end_offset": 0})
    assert await resolve_citation(citation, base) == ""


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"max_bytes": "20"}, "max_bytes must be a positive integer or None, not '20'"),
        ({"max_bytes": 0}, "max_bytes must be a positive integer or None, not 0"),
        ({"max_bytes": 1.5}, "max_bytes must be a positive integer or None, not 1.5"),
        ({"snapshot_dir": 5}, "snapshot_dir must be a directory"),
        ({"snapshot_dir": b"/tmp"}, "snapshot_dir must be a directory"),
        ({"snapshot_dir": "snap\x00shots"}, "holds a NUL character"),
        ({"base": "ba\x00se"}, "holds a NUL character"),
    ],
)
async def test_a_bad_read_argument_is_refused_by_every_check(
    base: Path, options: dict[str, Any], named: str
) -> None:
    """A bad argument raises ``InvalidQueryError`` before anything is read: it is not a
    verdict (a cap of 0 made every source 'too large'), and never a bare ``TypeError``
    or ``ValueError`` from the read."""
    citation = cite(TEXT, "Intro line.", source="missing.txt")
    where = options.pop("base", base)
    receipt = citation.to_annotation("Intro line.")
    checks: list[Callable[[], Awaitable[object]]] = [
        lambda: check_citation(citation, "Intro line.", where, **options),
        lambda: resolve_citation(citation, where, **options),
        lambda: check_quote("Intro", citation, where, content="Intro line.", **options),
        lambda: check_receipts([receipt], where, **options),
        lambda: verify_answer("A claim with no marker at all.", [], where, **options),
    ]
    for check in checks:
        with pytest.raises(InvalidQueryError, match=re.escape(named)):
            await check()


@pytest.mark.parametrize(
    ("update", "named"),
    [
        ({"start_offset": -7, "end_offset": len(TEXT)}, "start_offset"),
        ({"start_offset": 30, "end_offset": 20}, "not a valid one"),
        ({"start_offset": "0"}, "start_offset"),
        ({"source_class": "evil"}, "source_class"),
    ],
)
async def test_a_citation_made_without_checks_is_refused_by_every_check(
    base: Path, update: dict[str, Any], named: str
) -> None:
    """A citation from ``model_copy(update=...)`` is checked again by the deprecated
    ``verify_citation`` and by ``check_quote`` as by ``check_citation``: a negative start
    sliced from the end and verified, a bad source class verified, others raised
    pydantic's or Python's own error."""
    bad = cite(TEXT, "Intro line.").model_copy(update=update)
    content = TEXT[-7:] if update.get("start_offset") == -7 else "Intro line."
    with pytest.raises(InvalidQueryError, match=named):
        await check_citation(bad, content, base)
    with pytest.raises(InvalidQueryError, match=named):
        await check_quote("Intro", bad, base, content=content)
    with pytest.warns(DeprecationWarning), pytest.raises(InvalidQueryError, match=named):
        await verify_citation(bad, content, base)


async def test_verify_citation_checks_its_arguments(base: Path) -> None:
    citation = cite(TEXT, "Intro line.")
    with pytest.warns(DeprecationWarning), pytest.raises(InvalidQueryError, match="NoneType"):
        await verify_citation(None, "Intro line.", base)  # type: ignore[arg-type]
    with pytest.warns(DeprecationWarning), pytest.raises(InvalidQueryError, match="a str"):
        await verify_citation(citation, None, base)  # type: ignore[arg-type]


async def test_same_length_edit_is_drift(base: Path) -> None:
    citation = cite(TEXT, "Rocket 🚀 launch")
    (base / "doc.txt").write_text(TEXT.replace("Rocket", "Racket"), encoding="utf-8", newline="")
    result = await check_citation(citation, "Rocket 🚀 launch", base)
    assert result.verification == "drifted" and not result.ok
    assert result.current_start_offset == citation.start_offset and result.similarity


async def test_shifted_text_is_moved(base: Path) -> None:
    # A line put in front shifts the span without changing a word: moved, with where the
    # text is now (every entry point says so; tests/verification/test_edits_table.py).
    citation = cite(TEXT, "東京の朝。")
    (base / "doc.txt").write_text("New first line.\n" + TEXT, encoding="utf-8", newline="")
    result = await check_citation(citation, "東京の朝。", base)
    assert result.verification == "moved" and not result.ok
    start = citation.start_offset + len("New first line.\n")
    assert (result.current_start_offset, result.current_end_offset) == (start, start + 5)


async def test_truncated_source_is_drifted(base: Path) -> None:
    citation = cite(TEXT, "東京の朝。")
    (base / "doc.txt").write_text(TEXT[:10], encoding="utf-8")
    result = await check_citation(citation, "東京の朝。", base)
    assert result.verification == "drifted"
    assert "is now 10 characters long" in result.detail


async def test_empty_span_past_the_end_is_drifted(base: Path) -> None:
    """An empty slice past the end is empty too: that must not read as the span holding
    its (empty) text, where ``verify_citation`` says the source no longer reaches it."""
    (base / "doc.txt").write_text("short", encoding="utf-8")
    citation = cite(TEXT, "東京の朝。").model_copy(update={"start_offset": 40, "end_offset": 40})
    result = await check_citation(citation, "", base)
    assert result.verification == "drifted"
    assert "is now 5 characters long; the citation ends at 40" in result.detail
    with pytest.warns(DeprecationWarning), pytest.raises(RetrievalError) as raised:
        await verify_citation(citation, "", base)
    assert raised.value.verdict == "drifted"
    at_end = citation.model_copy(update={"start_offset": 5, "end_offset": 5})
    assert (await check_citation(at_end, "", base)).verification == "verified"


async def test_deleted_source_is_unresolvable(base: Path) -> None:
    citation = cite(TEXT, "Intro line.")
    (base / "doc.txt").unlink()
    result = await check_citation(citation, "Intro line.", base)
    assert result.verification == "unresolvable" and "cannot read" in result.detail


@pytest.mark.parametrize(
    ("data", "named"),
    [
        ("Intro line.".encode("utf-16"), "UTF-16 text"),
        (b"%PDF-1.4\n%\xe2\xe3\xcf\xd3\n", "a PDF"),
        (b"Intro line.\xff", ""),
    ],
)
async def test_a_source_no_longer_text_says_what_it_holds(
    base: Path, data: bytes, named: str
) -> None:
    (base / "doc.txt").write_bytes(data)
    result = await check_citation(cite(TEXT, "Intro line."), "Intro line.", base)
    assert result.verification == "unresolvable"
    assert "no longer valid UTF-8" in result.detail
    assert (f"(it holds {named} now)" in result.detail) == bool(named)


async def test_nfc_to_nfd_is_drifted_with_the_reason(base: Path) -> None:
    text = "Caf\u00e9 au lait. Cr\u00e8me br\u00fbl\u00e9e at dawn.\n"
    (base / "doc.txt").write_text(text, encoding="utf-8")
    citation = cite(text, "Cr\u00e8me br\u00fbl\u00e9e")
    decomposed = unicodedata.normalize("NFD", text)
    (base / "doc.txt").write_text(decomposed, encoding="utf-8")
    result = await check_citation(citation, "Cr\u00e8me br\u00fbl\u00e9e", base)
    assert result.verification == "drifted"
    assert "Unicode normalization changed" in result.detail
    start, end = result.current_start_offset, result.current_end_offset
    assert start is not None and end is not None
    assert decomposed[start:end] == unicodedata.normalize("NFD", "Cr\u00e8me br\u00fbl\u00e9e")
    assert result.similarity is not None and 0 < result.similarity < 1


async def test_verify_citation_is_a_deprecated_alias(base: Path) -> None:
    citation = cite(TEXT, "Intro line.")
    with pytest.warns(DeprecationWarning, match=r"verify_citation .* use check_citation"):
        assert await verify_citation(citation, "Intro line.", base) is True
    (base / "doc.txt").write_text("New first line.\n" + TEXT, encoding="utf-8", newline="")
    with pytest.warns(DeprecationWarning):
        assert await verify_citation(citation, "Intro line.", base) is False  # moved
    # Its contract for its last release: an unreadable source raises, as it did.
    (base / "doc.txt").unlink()
    with pytest.warns(DeprecationWarning), pytest.raises(RetrievalError) as info:
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
    result = await check_citation(cite(TEXT, "Intro line.", source=outside), "Intro line.", base)
    assert result.verification == "unresolvable" and "refused" in result.detail


async def test_absolute_path_inside_base_resolves(base: Path) -> None:
    inside = os.path.realpath(base / "doc.txt")
    assert (await check_citation(cite(TEXT, "Intro line.", source=inside), "Intro line.", base)).ok


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
    result = await check_citation(citation, "Intro line.", base)
    assert result.verification == "unresolvable"


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

# A stored text is read only under the id its source gives.
SNAPSHOT_ID = document_id_for("https://example.com/page")


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
    result = await check_citation(citation, "Rocket 🚀 launch", base, snapshot_dir=snapshots)
    assert result.ok
    (snapshots / SNAPSHOT_ID).write_text(TEXT.replace("Rocket", "Racket"), encoding="utf-8")
    result = await check_citation(citation, "Rocket 🚀 launch", base, snapshot_dir=snapshots)
    assert result.verification == "drifted"
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
    with pytest.raises(RetrievalError, match=r"^refused: ") as info:
        await resolve_citation(citation, base, snapshot_dir=snapshots)
    assert info.value.verdict == "unresolvable"
    # Nor does the store take it for a name, whoever asks.
    with pytest.raises(PathEscapeError, match="cannot name a snapshot"):
        await LocalSnapshots(snapshots).read(document_id)


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
