"""Document fields through ingest: from files, from the caller, stored, compared, refused."""

from __future__ import annotations

import datetime as dt
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from groundkit import Collection, IngestConfig, IngestionError, check_citation
from groundkit.contracts import Document
from groundkit.ingestion import Indexer
from groundkit.ingestion.files import FileLoader
from groundkit.storage import SQLiteMetadataStore
from groundkit.testing.conformance.helpers import (
    document_by_source,
    document_chunks,
    document_sources,
    put_document,
)
from tests.sources import make_pdf
from tests.support import SMALL_CHUNKS, make_document, write_tree

NOTE = """---
title: Brewing green tea
year: 2023
tags: [tea, green]
---
Green tea is steeped at about eighty degrees.

Boiling water makes it bitter.
"""

HTML = b"""<html><head><title>Moka pots</title>
<meta name="Description" content="How a moka pot brews.">
<meta name="author" content="Ann">
<meta name="author" content="Second author, ignored">
<meta name="keywords" content="coffee, stove">
<meta property="og:title" content="not a field">
</head><body><p>Moka pots brew coffee on a stove.</p></body></html>"""


@pytest.fixture
async def col(tmp_path: Path) -> AsyncIterator[Collection]:
    base = tmp_path / "corpus"
    write_tree(base, {"tea.md": NOTE, "plain.txt": "Black tea tolerates boiling water.\n"})
    async with Collection.open(tmp_path / "index", base_dir=base, chunking=SMALL_CHUNKS) as c:
        yield c


async def _fields(col: Collection, source: str) -> dict[str, object]:
    record = await document_by_source(col.store, source)
    assert record is not None
    return dict(record.fields)


async def test_front_matter_becomes_fields_and_stays_in_the_text(col: Collection) -> None:
    report = await col.ingest(col.base_dir)
    assert report.added == ["plain.txt", "tea.md"] and not report.failed
    assert await _fields(col, "tea.md") == {
        "tags": ["tea", "green"],
        "title": "Brewing green tea",
        "year": 2023,
    }
    assert await _fields(col, "plain.txt") == {}
    record = await document_by_source(col.store, "plain.txt")
    assert record is not None and record.metadata == {}
    # Offsets count from the top of the file, front matter included.
    response = await col.search("eighty degrees")
    top = response.results[0]
    assert top.source == "tea.md"
    assert NOTE[top.start_offset : top.end_offset] == top.content
    assert (await check_citation(top.citation, top.content, col.base_dir)).ok
    assert top.fields["title"] == "Brewing green tea"
    assert top.metadata == {"fields": top.fields}


async def test_caller_fields_apply_to_every_document_and_win(col: Collection) -> None:
    report = await col.ingest(col.base_dir, metadata={"year": 2025, "team": "kitchen"})
    assert report.added == ["plain.txt", "tea.md"]
    assert await _fields(col, "tea.md") == {
        "tags": ["tea", "green"],
        "team": "kitchen",
        "title": "Brewing green tea",
        "year": 2025,
    }
    assert await _fields(col, "plain.txt") == {"team": "kitchen", "year": 2025}


async def test_a_metadata_change_alone_restores_the_document(col: Collection) -> None:
    await col.ingest(col.base_dir, metadata={"team": "a"})
    generation = await col.generation()
    same = await col.ingest(col.base_dir, metadata={"team": "a"})
    assert same.unchanged == ["plain.txt", "tea.md"] and same.generation == generation
    moved = await col.ingest(col.base_dir, metadata={"team": "b"})
    assert moved.updated == ["plain.txt", "tea.md"] and moved.generation > generation
    assert await _fields(col, "plain.txt") == {"team": "b"}
    # Not sticky: ingesting without the argument stores what the files say.
    dropped = await col.ingest(col.base_dir)
    assert dropped.updated == ["plain.txt", "tea.md"]
    assert await _fields(col, "plain.txt") == {}
    assert "team" not in await _fields(col, "tea.md")
    # The search index follows: results carry the fields stored now.
    response = await col.search("boiling water")
    assert all("team" not in r.fields for r in response.results)


async def test_front_matter_edit_is_an_update(col: Collection) -> None:
    await col.ingest(col.base_dir)
    (col.base_dir / "tea.md").write_text(NOTE.replace("2023", "2024"), encoding="utf-8")
    report = await col.ingest(col.base_dir)
    assert report.updated == ["tea.md"] and report.unchanged == ["plain.txt"]
    assert (await _fields(col, "tea.md"))["year"] == 2024


@pytest.mark.parametrize(
    ("metadata", "reason"),
    [
        ({"when": dt.date(2024, 1, 1)}, "ISO 8601"),
        ({"nested": {"a": 1}}, "nested mappings"),
        ({"bad key": 1}, "not allowed"),
        ({"none": None}, "leave the key out"),
    ],
)
async def test_invalid_caller_fields_refuse_the_call(
    col: Collection, metadata: dict[str, object], reason: str
) -> None:
    with pytest.raises(IngestionError, match=f"^metadata argument: .*{reason}"):
        await col.ingest(col.base_dir, metadata=metadata)
    assert await col.generation() == 0
    assert await document_sources(col.store) == []


async def test_odd_front_matter_is_a_warning_and_the_file_is_indexed(col: Collection) -> None:
    write_tree(
        col.base_dir,
        {"odd.md": "---\ntitle: ok\nauthor:\n  name: Ann\n---\nText.\n"},
    )
    report = await col.ingest(col.base_dir)
    assert report.added == ["odd.md", "plain.txt", "tea.md"]
    assert report.failed == []
    [warning] = report.warnings
    assert warning.source == "odd.md"
    assert warning.reason.startswith("front matter line 3: field 'author' is a mapping")
    record = await document_by_source(col.store, "odd.md")
    assert record is not None and record.fields == {"title": "ok"}


async def test_deeply_nested_toml_front_matter_is_a_warning(col: Collection) -> None:
    nested = "[" * 5000 + "]" * 5000
    labelled = f"+++\nsensitivity = 'secret'\na = {nested}\n+++\nText.\n"
    write_tree(
        col.base_dir,
        {"deep.md": f"+++\na = {nested}\n+++\nDeep text.\n", "labelled.md": labelled},
    )
    report = await col.ingest(col.base_dir)
    assert report.added == ["deep.md", "plain.txt", "tea.md"]
    [warning] = report.warnings
    assert warning.source == "deep.md"
    # Said once: the note names the front matter itself.
    assert warning.reason == (
        "front matter is TOML nested too deeply to read; no fields read from it"
    )
    assert await _fields(col, "deep.md") == {}
    [failure] = report.failed
    assert failure.reason.startswith(
        "labelled.md: front matter is TOML nested too deeply to read, and it names a "
        "'sensitivity' label"
    )


async def test_an_unreadable_label_fails_that_file_only(col: Collection) -> None:
    write_tree(col.base_dir, {"broken.md": "---\ntitle: ok\nsensitivity: secret\n---\nText.\n"})
    report = await col.ingest(col.base_dir)
    assert report.added == ["plain.txt", "tea.md"]
    [failure] = report.failed
    assert failure.source == "broken.md"
    assert "sensitivity" in failure.reason
    assert await document_by_source(col.store, "broken.md") is None


async def test_read_fields_off_ignores_what_files_say(tmp_path: Path) -> None:
    base = tmp_path / "corpus"
    write_tree(
        base,
        {
            "tea.md": NOTE,
            "broken.md": "---\na: null\n---\nText.\n",
            "moka.html": HTML,
            "bad-date.pdf": _pdf_with_bad_date(),
        },
    )
    config = IngestConfig(read_fields=False)
    async with Collection.open(tmp_path / "index", base_dir=base, ingest=config) as col:
        report = await col.ingest(base, metadata={"team": "x"})
        assert report.failed == []
        for source in ("tea.md", "broken.md", "moka.html", "bad-date.pdf"):
            assert await _fields(col, source) == {"team": "x"}


def _pdf_with_bad_date() -> bytes:
    good = make_pdf(["One page."], info={"creation_date": dt.datetime(2024, 3, 1, tzinfo=dt.UTC)})
    # Same length, so the cross-reference table stays right: month 13.
    assert b"D:20240301" in good
    return good.replace(b"D:20240301", b"D:20241301")


async def test_pdf_and_html_info(tmp_path: Path) -> None:
    base = tmp_path / "corpus"
    created = dt.datetime(2024, 3, 1, 12, 30, 5, tzinfo=dt.UTC)
    info = {"title": "Energy report", "author": "Ann", "subject": "Power", "creation_date": created}
    write_tree(
        base,
        {
            "report.pdf": make_pdf(["Solar panels on page one."], info=info),
            "moka.html": HTML,
            "bad-date.pdf": _pdf_with_bad_date(),
        },
    )
    async with Collection.open(tmp_path / "index", base_dir=base) as col:
        report = await col.ingest(base)
        assert report.added == ["moka.html", "report.pdf"]
        [failure] = report.failed
        assert failure.source == "bad-date.pdf"
        assert "CreationDate is not a valid PDF date" in failure.reason
        assert await _fields(col, "report.pdf") == {
            "author": "Ann",
            "created": "2024-03-01T12:30:05+00:00",
            "subject": "Power",
            "title": "Energy report",
        }
        record = await document_by_source(col.store, "report.pdf")
        assert record is not None and record.metadata["page_starts"] == [0]
        assert await _fields(col, "moka.html") == {
            "author": "Ann",
            "description": "How a moka pot brews.",
            "keywords": ["coffee", "stove"],
            "title": "Moka pots",
        }
        # The info does not touch the text, so citations still verify by re-extraction.
        for query in ("solar panels", "moka pots"):
            [hit, *_] = (await col.search(query)).results
            assert (await check_citation(hit.citation, hit.content, col.base_dir)).ok
        again = await col.ingest(base)
        assert again.unchanged == ["moka.html", "report.pdf"]


async def test_old_top_level_title_is_restored_under_fields(tmp_path: Path) -> None:
    """A document stored before fields existed (title beside page data) is rewritten."""
    base = tmp_path / "corpus"
    write_tree(base, {"moka.html": HTML})
    async with Collection.open(tmp_path / "index", base_dir=base) as col:
        await col.ingest(base)
        record = await document_by_source(col.store, "moka.html")
        assert record is not None
        old = Document(
            document_id=record.document_id,
            source=record.source,
            content=(await document_chunks(col.store, record.document_id))[0].content,
            source_class="extracted",
            extractor=record.extractor,
            metadata={"title": "Moka pots"},
        )
        _, chunks, terms = make_document("moka.html", [old.content], document_id=old.document_id)
        await put_document(col.store, old, chunks, terms)
        report = await col.ingest(base)
        assert report.updated == ["moka.html"]
        assert await _fields(col, "moka.html") != {}


class FieldLoader(FileLoader):
    """A custom loader whose documents carry whatever fields it is given."""

    def __init__(self, fields: object) -> None:
        super().__init__(IngestConfig(extensions=(".notes",)))
        self.fields = fields

    async def load(self, path: Path, *, base_dir: Path) -> Document:
        document = await super().load(path, base_dir=base_dir)
        metadata = {"loader": "notes", "fields": self.fields}
        return document.model_copy(update={"metadata": metadata})


@pytest.mark.parametrize("fields", [{"a": {"b": 1}}, ["not", "a", "mapping"], {"x y": 1}])
async def test_custom_loader_fields_are_checked(
    store: SQLiteMetadataStore, tmp_path: Path, fields: object
) -> None:
    base = tmp_path / "base"
    write_tree(base, {"x.notes": "field notes about herons"})
    config = IngestConfig(extensions=(".notes",))
    indexer = Indexer(store, base, loader=FieldLoader(fields), ingest=config)
    report = await indexer.ingest(base)
    [failure] = report.failed
    assert failure.reason.startswith("x.notes: ")
    assert await document_by_source(store, "x.notes") is None


async def test_custom_loader_fields_are_stored(store: SQLiteMetadataStore, tmp_path: Path) -> None:
    base = tmp_path / "base"
    write_tree(base, {"x.notes": "field notes about herons"})
    config = IngestConfig(extensions=(".notes",))
    indexer = Indexer(store, base, loader=FieldLoader({"b": (1, 2), "a": "x"}), ingest=config)
    await indexer.ingest(base, metadata={"c": True})
    record = await document_by_source(store, "x.notes")
    assert record is not None
    assert record.metadata == {"loader": "notes", "fields": {"a": "x", "b": [1, 2], "c": True}}
    assert (await indexer.ingest(base, metadata={"c": True})).unchanged == ["x.notes"]
