"""One delete (ids, sources, records) and one verify (a target) with ``verify_all`` for
the whole collection, on real SQLite collections; the old call forms warn."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest

import groundkit.sync as gks
from groundkit import (
    Citation,
    Collection,
    ConfigurationError,
    DeleteReport,
    FetchResult,
    InvalidQueryError,
    Record,
    VerifyReport,
)
from tests.support import SMALL_CHUNKS


async def _sources(col: Collection, query: str) -> list[str]:
    return sorted({r.source for r in (await col.search(query, 50)).results})


async def test_delete_takes_ids_sources_and_records_in_one_call(ingested: Collection) -> None:
    await ingested.add_documents(
        [Record(id="TCK-1", text="The kettle leaks."), {"id": "TCK-2", "text": "Kettle descaled."}]
    )
    wind = (await ingested.search("offshore wind turbines")).results[0]
    assert wind.source == "energy/wind.txt"
    report = await ingested.delete(
        ids=[wind.document_id, "no-such-id"],
        sources=["energy/solar.md", "nowhere.md"],
        records=["TCK-1", Record(id="TCK-2", text="ignored"), "TCK-9"],
    )
    assert isinstance(report, DeleteReport)
    assert report.deleted == sorted(
        ["energy/wind.txt", "energy/solar.md", "record://TCK-1", "record://TCK-2"]
    )
    # Each name that matched nothing is listed as it was given, in order.
    assert report.missing == ["no-such-id", "nowhere.md", "TCK-9"]
    assert await _sources(ingested, "wind solar kettle") == []
    assert (await ingested.verify_all()).ok


async def test_a_record_and_a_file_may_share_a_name(
    collection: Collection, corpus_dir: Path
) -> None:
    # records= names the caller's id, sources= a stored source: the same text is two
    # different documents, and each keyword deletes only its own.
    (corpus_dir / "notes.txt").write_text("Notes on the pump.\n", encoding="utf-8")
    await collection.ingest(corpus_dir / "notes.txt")
    await collection.add_documents([{"id": "notes.txt", "text": "A record about pumps."}])
    report = await collection.delete(records=["notes.txt"])
    assert (report.deleted, report.missing) == (["record://notes.txt"], [])
    assert await _sources(collection, "pump") == ["notes.txt"]
    report = await collection.delete(sources=["notes.txt"], records=["notes.txt"])
    assert (report.deleted, report.missing) == (["notes.txt"], ["notes.txt"])


async def test_a_source_named_as_stored_is_that_document(
    collection: Collection, corpus_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A name spelled exactly as a stored source deletes that document, though a path of
    that name would mean another file from the working directory, or with its spaces
    trimmed."""
    for name in ("x.md", "d0/x.md", "a.md", " a.md"):
        (corpus_dir / name).parent.mkdir(parents=True, exist_ok=True)
        (corpus_dir / name).write_text(f"Kettle note {name.strip()!r}.\n", encoding="utf-8")
        await collection.ingest(corpus_dir / name)
    monkeypatch.chdir(corpus_dir / "d0")  # where "x.md" is a path to d0/x.md
    report = await collection.delete(sources=["x.md", " a.md"])
    assert (report.deleted, report.missing) == ([" a.md", "x.md"], [])
    assert await _sources(collection, "kettle note") == ["a.md", "d0/x.md"]
    # A name no document is stored under still goes by the path it names.
    report = await collection.delete(sources=[str(corpus_dir / "d0" / "x.md")])
    assert report.deleted == ["d0/x.md"]


@pytest.mark.parametrize(
    ("keyword", "value", "problem"),
    [
        ("ids", "doc:a", "ids must be a list of strings, not str"),
        ("sources", 7, "sources must be a list of strings, not int"),
        ("records", "TCK-1", "records must be a list of record ids, not str"),
        ("records", [" padded "], "starts or ends with whitespace"),
        ("records", [b"bytes"], "must be a str"),
    ],
)
async def test_delete_refuses_what_cannot_name_a_document(
    ingested: Collection, keyword: str, value: object, problem: str
) -> None:
    with pytest.raises(ConfigurationError, match=problem):
        await ingested.delete(**{keyword: value})  # type: ignore[arg-type]
    assert (await ingested.search("solar panels")).results  # nothing went


async def test_the_old_delete_forms_warn_and_still_work(ingested: Collection) -> None:
    await ingested.add_documents([{"id": "a", "text": "alpha text"}])
    solar = (await ingested.search("photovoltaic silicon")).results[0]
    with pytest.warns(DeprecationWarning, match=r"use Collection\.delete\(ids=\.\.\.\)") as seen:
        report = await ingested.delete(document_ids=[solar.document_id])
    assert seen[0].filename == __file__
    assert report.deleted == ["energy/solar.md"]
    with pytest.warns(DeprecationWarning), pytest.raises(ConfigurationError, match="ids= only"):
        await ingested.delete(ids=["x"], document_ids=["y"])
    with pytest.warns(DeprecationWarning, match=r"delete\(records=ids\)") as seen:
        removed = await ingested.delete_documents(["a"])
    assert seen[0].filename == __file__
    assert removed.removed == ["record://a"]  # the old return type, for one release


async def test_verify_checks_one_target_and_verify_all_the_collection(
    ingested: Collection,
) -> None:
    top = (await ingested.search("offshore wind")).results[0]
    checked = await ingested.verify(top)
    assert isinstance(checked, FetchResult) and checked.ok
    assert (await ingested.verify(top.citation, content=top.content)).ok
    assert not (await ingested.verify(top.citation, content="Not what it says.")).ok
    report = await ingested.verify_all()
    assert isinstance(report, VerifyReport) and report.ok and report.verified > 1
    with pytest.warns(DeprecationWarning, match=r"use Collection\.verify_all\(\)") as seen:
        old = await ingested.verify()
    assert seen[0].filename == __file__
    assert old == report
    with pytest.raises(InvalidQueryError, match="content= goes with a citation"):
        await ingested.verify(content="text")  # type: ignore[call-overload]


async def test_verify_each_gives_each_results_own_verdict_reading_each_source_once(
    ingested: Collection, corpus_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from groundkit.verification import sources, verifier

    response = await ingested.search("wind solar energy", 20)
    assert len({r.source for r in response.results}) < len(response.results)
    alone = [await ingested.verify(r) for r in response.results]
    reads: list[str] = []
    real = sources.read_source

    async def counted(citation: Citation, *args: object, **kwargs: object) -> str:
        reads.append(citation.source)
        return await real(citation, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(verifier, "read_source", counted)
    together = await ingested.verify_each(response)
    assert together == alone
    assert sorted(reads) == sorted({r.source for r in response.results})
    # An edited source: its results' verdicts change with it, as they would one by one.
    edited = response.results[0]
    path = corpus_dir / edited.source
    path.write_text("Rewritten.\n" + path.read_text(encoding="utf-8").replace("wind", "breeze"))
    monkeypatch.setattr(verifier, "read_source", real)
    again = await ingested.verify_each(response.results)
    assert again == [await ingested.verify(r) for r in response.results]
    assert again[0].verification != "verified"


async def test_fetch_in_source_gives_the_text_the_verdict_was_reached_on(
    ingested: Collection, corpus_dir: Path
) -> None:
    from groundkit import resolve_citation

    top = (await ingested.search("offshore wind")).results[0]
    fetched, text = await ingested.fetch_in_source(top.chunk_id)
    assert fetched == await ingested.fetch_chunk(top.chunk_id)
    assert text is not None
    assert text[top.start_offset : top.end_offset] == await resolve_citation(
        top.citation, corpus_dir
    )
    (corpus_dir / top.source).unlink()
    gone, none = await ingested.fetch_in_source(top.chunk_id)
    assert gone.verification == "unresolvable" and none is None


def test_the_blocking_collection_has_the_same_delete_and_verify(
    tmp_path: Path, corpus_dir: Path
) -> None:
    with gks.Collection.open(tmp_path / "index", base_dir=corpus_dir, chunking=SMALL_CHUNKS) as col:
        col.ingest(corpus_dir)
        col.add_documents([{"id": "r1", "text": "A stored record about tea."}])
        top = col.search("offshore wind").results[0]
        assert col.verify(top).ok
        assert col.verify_all().ok
        report = col.delete(ids=[top.document_id], records=["r1", "r2"])
        assert (report.deleted, report.missing) == (["energy/wind.txt", "record://r1"], ["r2"])
        assert col.verify_all().ok


def test_the_blocking_collection_warns_at_the_callers_line(
    tmp_path: Path, corpus_dir: Path
) -> None:
    """A deprecated call on the blocking collection runs on groundkit's loop thread; its
    warning is raised back in the caller's thread, pointing at the caller's line, so the
    default filters (and ``-W error``) treat it as the caller's."""
    with gks.Collection.open(tmp_path / "index", base_dir=corpus_dir, chunking=SMALL_CHUNKS) as col:
        col.ingest(corpus_dir)
        col.add_documents([{"id": "r1", "text": "A stored record about tea."}])
        with pytest.warns(DeprecationWarning, match="verify_all") as caught:
            report = col.verify()
        assert report.ok
        assert [w.filename for w in caught] == [__file__]
        with pytest.warns(DeprecationWarning, match="records=") as caught:
            col.delete_documents(["r1"])
        assert [w.filename for w in caught] == [__file__]
        # Without a deprecated form, nothing is warned.
        with warnings.catch_warnings():
            warnings.simplefilter("error", DeprecationWarning)
            col.verify_all()
