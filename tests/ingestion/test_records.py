"""In-memory documents: records with caller ids, stored as their own source class and
verified against the stored record."""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from groundkit import Collection, IngestionError, Record
from groundkit.cli import main
from groundkit.contracts import record_id_of
from groundkit.ingestion.records import check_record_id
from groundkit.storage.snapshots import LocalSnapshots
from tests.support import SMALL_CHUNKS


@pytest.fixture
async def col(tmp_path: Path) -> AsyncIterator[Collection]:
    (tmp_path / "base").mkdir()
    opened = await Collection.open(tmp_path / "idx", base_dir=tmp_path / "base")
    yield opened
    await opened.close()


def snapshot_file(col: Collection, document_id: str) -> Path:
    """The record's stored text: ``<document_id>.<hash of its bytes>``, the only one."""
    assert isinstance(col.snapshots, LocalSnapshots)
    (found,) = col.snapshots.directory.glob(f"{document_id}.*")
    return found


async def test_add_replace_unchanged_and_delete(col: Collection) -> None:
    report = await col.add_documents(
        [
            Record(id="TCK-1", text="The kettle leaks when it is full.", fields={"team": "hw"}),
            {"id": "TCK-2", "text": "Descale the kettle every month."},
        ]
    )
    assert report.added == ["record://TCK-1", "record://TCK-2"]
    generation = report.generation
    # The same text and fields again: nothing changes, not even the generation.
    again = await col.add_documents(
        [{"id": "TCK-1", "text": "The kettle leaks when it is full.", "fields": {"team": "hw"}}]
    )
    assert again.unchanged == ["record://TCK-1"] and not again.changed
    assert again.generation == generation
    # New text under the same id replaces the record; fields alone update it too.
    replaced = await col.add_documents([{"id": "TCK-2", "text": "Descale it every week."}])
    assert replaced.updated == ["record://TCK-2"]
    refielded = await col.add_documents(
        [{"id": "TCK-1", "text": "The kettle leaks when it is full.", "fields": {"team": "sw"}}]
    )
    assert refielded.updated == ["record://TCK-1"]
    hits = (await col.search("descale")).results
    assert [h.content for h in hits] == ["Descale it every week."]
    assert hits[0].source_class == "record" and hits[0].extractor is None
    assert record_id_of(hits[0].source) == "TCK-2"
    top = (await col.search("kettle leaks")).results[0]
    assert top.fields == {"team": "sw"}
    # Deleting removes the record, its stored text and its chunks.
    stored = snapshot_file(col, top.document_id)
    assert stored.read_text("utf-8") == "The kettle leaks when it is full."
    removed = await col.delete(records=["TCK-1"])
    assert removed.deleted == ["record://TCK-1"]
    assert not stored.exists()
    assert (await col.search("kettle leaks")).total_results == 0


async def test_citations_verify_against_the_stored_record(col: Collection) -> None:
    await col.add_documents([{"id": "row/7", "text": "Invoices are due in thirty days."}])
    top = (await col.search("invoices due")).results[0]
    assert (await col.fetch_chunk(top.chunk_id)).verification == "verified"
    path = snapshot_file(col, top.document_id)
    path.write_text("Invoices are due in sixty days.", encoding="utf-8")
    assert (await col.fetch_chunk(top.chunk_id)).verification == "drifted"
    path.unlink()
    fetched = await col.fetch_chunk(top.chunk_id)
    assert fetched.verification == "unresolvable"
    assert "stored text of 'record://row/7'" in fetched.detail
    # Adding the record again repairs its stored text, though nothing else changed.
    report = await col.add_documents([{"id": "row/7", "text": "Invoices are due in thirty days."}])
    assert report.unchanged == ["record://row/7"]
    assert (await col.fetch_chunk(top.chunk_id)).verification == "verified"


async def test_a_bad_batch_stores_nothing(col: Collection) -> None:
    await col.add_documents([{"id": "keep", "text": "already here"}])
    generation = await col.generation()
    with pytest.raises(IngestionError) as caught:
        await col.add_documents(
            [
                {"id": "ok", "text": "fine"},
                {"id": " pad", "text": "x"},
                {"id": "empty", "text": "   "},
                {"id": "dup", "text": "a"},
                {"id": "dup", "text": "b"},
                {"id": "f", "text": "x", "fields": {"bad name": 1}},
                {"id": "k", "text": "x", "extra": 1},
                {"text": "no id"},
                b"not a record",
            ]
        )
    message = str(caught.value)
    assert message.startswith("7 invalid record(s), nothing was stored: record 1")
    assert "(and 2 more)" in message
    assert await col.generation() == generation
    assert (await col.search("fine")).total_results == 0
    with pytest.raises(IngestionError, match="iterable of records, texts or documents"):
        await col.add_documents({"id": "x", "text": "y"})


async def test_deleting_records_lists_the_ids_that_name_none(col: Collection) -> None:
    await col.add_documents([{"id": "a", "text": "alpha text"}, {"id": "b", "text": "beta text"}])
    report = await col.delete(records=["a", "zzz"])
    assert (report.deleted, report.missing) == (["record://a"], ["zzz"])
    assert (await col.search("alpha")).total_results == 0
    assert (await col.search("beta")).total_results == 1


async def test_the_deprecated_delete_documents_still_refuses_unknown_ids(col: Collection) -> None:
    await col.add_documents([{"id": "a", "text": "alpha text"}, {"id": "b", "text": "beta text"}])
    with (
        pytest.warns(DeprecationWarning, match=r"delete\(records=ids\)"),
        pytest.raises(IngestionError, match="no record 'zzz'"),
    ):
        await col.delete_documents(["a", "zzz"])
    assert (await col.search("alpha")).total_results == 1  # nothing was deleted
    with pytest.warns(DeprecationWarning):
        report = await col.delete_documents(["a", "zzz"], missing_ok=True)
    assert report.removed == ["record://a"]


@pytest.mark.parametrize(
    ("record_id", "problem"),
    [
        ("", "empty"),
        ("x" * 257, "at most 256"),
        (" lead", "whitespace"),
        ("trail\t", "whitespace"),
        ("tab\there", "control character (U+0009)"),
        ("nul\x00", "control character"),
        ("bad\ud800", "lone surrogate"),
        (7, "must be a str"),
    ],
)
def test_id_rules(record_id: object, problem: str) -> None:
    with pytest.raises(IngestionError, match=re.escape(problem)):
        check_record_id(record_id)


@pytest.mark.parametrize("record_id", ["a", "TCK-4711", "row/7", "ä ö ü", "x" * 256, "a:b//c"])
def test_ids_that_are_fine(record_id: str) -> None:
    assert check_record_id(record_id) == record_id


async def test_folder_ingests_never_prune_records(tmp_path: Path, col: Collection) -> None:
    await col.add_documents([{"id": "r", "text": "a record beside files"}])
    (tmp_path / "base" / "f.txt").write_text("a file", encoding="utf-8")
    report = await col.ingest(tmp_path / "base")
    assert report.added == ["f.txt"] and report.removed == []
    (tmp_path / "base" / "f.txt").unlink()
    report = await col.ingest(tmp_path / "base")
    assert report.removed == ["f.txt"]
    assert (await col.search("record beside")).total_results == 1
    assert (await col.verify_all()).ok


async def test_call_metadata_applies_over_record_fields(col: Collection) -> None:
    await col.add_documents(
        [{"id": "a", "text": "sensitive plan", "fields": {"team": "x", "year": 2020}}],
        metadata={"team": "ops", "sensitivity": "internal"},
    )
    top = (await col.search("plan")).results[0]
    assert top.fields == {"sensitivity": "internal", "team": "ops", "year": 2020}
    with pytest.raises(IngestionError, match="metadata argument"):
        await col.add_documents([{"id": "b", "text": "t"}], metadata={"x": {"nested": 1}})


@hsettings(max_examples=40, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    texts=st.lists(
        st.text(
            st.characters(blacklist_categories=["Cs"], blacklist_characters="\x00"),
            min_size=1,
            max_size=400,
        ).filter(str.strip),
        min_size=1,
        max_size=4,
    )
)
async def test_every_citation_is_an_exact_slice_of_the_stored_record(
    tmp_path_factory: pytest.TempPathFactory, texts: list[str]
) -> None:
    root = tmp_path_factory.mktemp("records")
    async with Collection.open(root / "idx", base_dir=root, chunking=SMALL_CHUNKS) as col:
        await col.add_documents([{"id": f"r{i}", "text": t} for i, t in enumerate(texts)])
        report = await col.verify_all()
        assert report.ok and report.verified > 0
        async for batch in col.store.iter_chunks():
            for chunk in batch:
                text = texts[int(record_id_of(chunk.source)[1:])]  # type: ignore[index]
                assert text[chunk.start_offset : chunk.end_offset] == chunk.content


def test_grk_ingest_jsonl(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    jsonl = tmp_path / "tickets.jsonl"
    rows = [
        {"id": "T-1", "text": "Printer on floor two jams on A3.", "fields": {"floor": 2}},
        {"id": "T-2", "text": "VPN drops every hour."},
    ]
    jsonl.write_text("\n".join(json.dumps(r) for r in rows) + "\n\n", encoding="utf-8")
    where = ["--index-dir", str(tmp_path / "idx"), "--base-dir", str(tmp_path)]
    assert main(["ingest", "--jsonl", str(jsonl), *where, "--meta", "desk=helpdesk"]) == 0
    assert "added 2" in capsys.readouterr().out
    assert main(["search", "printer jams", *where, "--json"]) == 0
    found = json.loads(capsys.readouterr().out)["results"][0]
    assert found["citation"]["source"] == "record://T-1"
    assert found["fields"] == {"floor": 2, "desk": "helpdesk"}
    assert main(["fetch", found["citation"]["chunk_id"], *where]) == 0
    assert "verified" in capsys.readouterr().out
    assert main(["ingest", "--jsonl", str(jsonl), *where, "--meta", "desk=helpdesk"]) == 0
    assert "unchanged 2" in capsys.readouterr().out
    jsonl.write_text('{"id": "T-3", "text": "ok"}\n{"id": "T-4", "text": \n', encoding="utf-8")
    assert main(["ingest", "--jsonl", str(jsonl), *where]) == 2
    assert "--jsonl line 2: not valid JSON" in capsys.readouterr().err
    # Record problems name lines too, counting the blank ones the records skip.
    jsonl.write_text(
        '{"id": "a", "text": "alpha"}\n\n{"id": "b", "text": ""}\n{"id": "a", "text": "again"}\n',
        encoding="utf-8",
    )
    assert main(["ingest", "--jsonl", str(jsonl), *where]) == 2
    assert capsys.readouterr().err == (
        "grk: error: 2 invalid record(s), nothing was stored: --jsonl line 3 ('b'): no text to "
        "index; --jsonl line 4: id 'a' is also given by --jsonl line 1\n"
    )
    # A key given twice is refused, not settled by keeping the last.
    jsonl.write_text('{"id": "c", "text": "gamma", "id": "d"}\n', encoding="utf-8")
    assert main(["ingest", "--jsonl", str(jsonl), *where]) == 2
    assert "--jsonl line 1: the key 'id' is given twice" in capsys.readouterr().err
    assert main(["search", "gamma", *where, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["results"] == []
    assert main(["ingest", *where]) == 2
    assert "one of them" in capsys.readouterr().err
