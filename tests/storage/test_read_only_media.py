"""A collection on a read-only filesystem: searched and checked there, never written.

Each test builds a collection in ``rw/``, then runs a child process in a user and mount
namespace of its own (``unshare -rm``) where ``ro/`` is ``rw/`` bind-mounted read-only:
the kernel refuses every write there, as on a read-only volume or image layer, and the
mount goes with the namespace. Skipped where namespaces are not allowed.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

import groundkit.sync as gs
from groundkit.storage.location import metadata_path
from groundkit.storage.sqlite import SCHEMA_VERSION

REPO = Path(__file__).resolve().parents[2]
_UNSHARE = shutil.which("unshare")


def _mount_script(rw: Path, ro: Path, command: str) -> list[str]:
    assert _UNSHARE is not None
    return [
        _UNSHARE,
        "-rm",
        "sh",
        "-c",
        f"mount --bind '{rw}' '{ro}' && mount -o remount,bind,ro '{ro}' && {command}",
    ]


def _namespaces_work(tmp: Path) -> bool:
    if _UNSHARE is None or not sys.platform.startswith("linux"):
        return False
    rw, ro = tmp / "probe-rw", tmp / "probe-ro"
    rw.mkdir()
    ro.mkdir()
    probe = _mount_script(rw, ro, f"! touch '{ro}/x' 2>/dev/null")
    try:
        done = subprocess.run(probe, capture_output=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0 and not (rw / "x").exists()


@pytest.fixture
def mounts(tmp_path: Path) -> tuple[Path, Path]:
    if not _namespaces_work(tmp_path):
        pytest.skip("needs unshare -rm and read-only bind mounts (Linux user namespaces)")
    rw, ro = tmp_path / "rw", tmp_path / "ro"
    (rw / "docs").mkdir(parents=True)
    ro.mkdir()
    (rw / "docs" / "tea.md").write_text(
        "# Tea\n\nGreen tea is steeped briefly in water below boiling.\n\n"
        "Black tea takes boiling water and a longer steep.\n",
        encoding="utf-8",
    )
    (rw / "docs" / "kettle.txt").write_text(
        "A kettle whistles when the water boils.\n", encoding="utf-8"
    )
    with gs.Collection.open(rw / "idx", base_dir=rw) as col:
        report = col.ingest(rw / "docs")
    assert len(report.added) == 2
    return rw, ro


_CHILD_HEAD = f"""
import json, sys
sys.path.insert(0, {str(REPO)!r})
import groundkit, groundkit.sync as gs
out = {{}}
"""


def _child(rw: Path, ro: Path, body: str) -> tuple[list[str], dict[str, str]]:
    """The command running ``body`` (Python that fills ``out``) with ``ro`` mounted
    read-only, and its environment."""
    script = rw.parent / "child.py"
    script.write_text(
        _CHILD_HEAD + textwrap.dedent(body) + "\nprint(json.dumps(out))\n", encoding="utf-8"
    )
    command = f"cd '{ro}' && exec '{sys.executable}' '{script}'"
    return _mount_script(rw, ro, command), {**os.environ, "PYTHONPATH": str(REPO)}


def _in_read_only(rw: Path, ro: Path, body: str) -> dict[str, Any]:
    """Run ``body`` with ``ro`` mounted read-only; its ``out``, and its stderr."""
    argv, env = _child(rw, ro, body)
    done = subprocess.run(argv, capture_output=True, text=True, timeout=300, check=False, env=env)
    assert done.returncode == 0, done.stderr
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    result["stderr"] = done.stderr
    return result


def _holding_a_write(rw: Path) -> subprocess.Popen[str]:
    """A process that wrote a record to ``rw/idx`` and keeps the collection open (its
    log beside the store) until a line on its stdin; it prints HELD once written."""
    script = f"""
import sys, groundkit.sync as gs
col = gs.Collection.open({str(rw / "idx")!r}, base_dir={str(rw)!r})
col.add_documents([{{"id": "held", "text": "Walmarker stays in the log"}}])
print("HELD", flush=True)
sys.stdin.readline()
col.close()
"""
    return subprocess.Popen(
        [sys.executable, "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )


def _refusal(rw: Path, ro: Path) -> str:
    """The ``StorageError`` opening and searching ``ro/idx`` raises (it must raise one)."""
    got = _in_read_only(
        rw,
        ro,
        """
        try:
            with gs.Collection.open("idx", base_dir=".") as col:
                col.search("tea")
        except groundkit.StorageError as exc:
            out["error"] = str(exc)
        """,
    )
    return str(got["error"])


def _hits(col: Any, query: str, **kw: Any) -> list[tuple[str, float]]:
    return [(r.citation.chunk_id, r.score) for r in col.search(query, **kw).results]


def test_searches_verifies_and_fetches_as_on_writable_storage(mounts: tuple[Path, Path]) -> None:
    rw, ro = mounts
    with gs.Collection.open(rw / "idx", base_dir=rw) as col:
        expected = [[c, s] for c, s in _hits(col, "boiling water tea", top_k=5)]
        chunks = col.verify_all().verified
    before = {p.name: p.read_bytes() for p in (rw / "idx").iterdir() if p.is_file()}
    got = _in_read_only(
        rw,
        ro,
        """
        with gs.Collection.open("idx", base_dir=".") as col:
            results = col.search("boiling water tea", top_k=5).results
            out["hits"] = [[r.citation.chunk_id, r.score] for r in results]
            out["verified"] = [col.verify(r).verification for r in results]
            out["fetched"] = col.fetch_chunk(results[0].citation.chunk_id).verification
            out["report"] = col.verify_all().verified
        """,
    )
    assert got["hits"] == expected
    assert set(got["verified"]) == {"verified"}
    assert got["fetched"] == "verified"
    assert got["report"] == chunks >= 2
    # Read as immutable: nothing appeared beside the file, nothing changed.
    assert {p.name: p.read_bytes() for p in (rw / "idx").iterdir() if p.is_file()} == before


def test_every_write_is_refused_before_it_reads_anything(mounts: tuple[Path, Path]) -> None:
    rw, ro = mounts
    got = _in_read_only(
        rw,
        ro,
        """
        import asyncio
        with gs.Collection.open("idx", base_dir=".") as col:
            calls = {
                "ingest": lambda: col.ingest("no-such-folder"),
                "add_documents": lambda: col.add_documents([{"id": "r", "text": "tea"}]),
                "delete": lambda: col.delete(sources=["docs/tea.md"]),
                "optimize": col.optimize,
                "purge_versions": col.purge_versions,
                "rebase": lambda: col.rebase(".", force=True),
            }
            for name, call in calls.items():
                try:
                    call()
                    out[name] = "written"
                except groundkit.StorageError as exc:
                    out[name] = str(exc)
            out["after"] = len(col.search("water", top_k=5).results)
        """,
    )
    for name in ("ingest", "add_documents", "delete", "optimize", "purge_versions", "rebase"):
        assert "is on a read-only filesystem" in got[name], (name, got[name])
        assert "copy the index directory to writable storage" in got[name]
    assert got["after"] == 2


def test_a_new_collection_there_is_refused_with_the_reason(mounts: tuple[Path, Path]) -> None:
    rw, ro = mounts
    got = _in_read_only(
        rw,
        ro,
        """
        import os
        try:
            gs.Collection.open("idx", "other", base_dir=".")
            out["opened"] = True
        except groundkit.StorageError as exc:
            out["error"] = str(exc)
        out["files"] = sorted(os.listdir("idx"))
        """,
    )
    assert "opened" not in got
    assert "other.sqlite3" in got["error"] and "read-only filesystem" in got["error"]
    assert not [name for name in got["files"] if name.startswith(("other", ".other"))]


def test_the_cli_searches_and_refuses_an_ingest(mounts: tuple[Path, Path]) -> None:
    rw, ro = mounts
    grk = Path(sys.executable).with_name("grk")
    command = (
        f"cd '{ro}' && '{grk}' search kettle --index idx --json"
        f" && '{grk}' ingest docs --index idx; echo rc=$?"
    )
    done = subprocess.run(
        _mount_script(rw, ro, command), capture_output=True, text=True, timeout=300, check=False
    )
    first = done.stdout[: done.stdout.rindex("rc=")]
    assert json.loads(first)["results"][0]["citation"]["source"] == "docs/kettle.txt"
    assert done.stdout.strip().endswith("rc=2")
    assert "read-only filesystem" in done.stderr


def test_a_log_left_beside_the_file_is_read_through(mounts: tuple[Path, Path]) -> None:
    """A writer on another mount keeps its log and shared-memory file beside the store:
    a reader on the read-only mount sees what it committed."""
    rw, ro = mounts
    holder = _holding_a_write(rw)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "HELD"
        assert Path(f"{metadata_path(rw / 'idx', 'default')}-wal").exists()
        got = _in_read_only(
            rw,
            ro,
            """
            with gs.Collection.open("idx", base_dir=".") as col:
                results = col.search("Walmarker", top_k=1).results
                out["source"] = results[0].citation.source
                out["verified"] = col.verify(results[0]).verification
                try:
                    col.add_documents([{"id": "other", "text": "more"}])
                except groundkit.StorageError as exc:
                    out["refused"] = str(exc)
            """,
        )
    finally:
        holder.communicate("done\n", timeout=60)
    assert got["source"] == "record://held"
    assert got["verified"] == "verified"
    assert "read-only filesystem" in got["refused"]


def test_a_change_through_another_mount_is_caught(mounts: tuple[Path, Path]) -> None:
    """An immutable read holds only while nothing writes the file: a write through a
    writable mount is caught at the next search, which says to open again."""
    rw, ro = mounts
    argv, env = _child(
        rw,
        ro,
        """
        with gs.Collection.open("idx", base_dir=".") as col:
            out["before"] = len(col.search("water", top_k=5).results)
            print("READY", flush=True)
            sys.stdin.readline()
            try:
                col.search("water", top_k=5)
                out["after"] = "searched"
            except groundkit.StorageError as exc:
                out["after"] = str(exc)
        with gs.Collection.open("idx", base_dir=".") as col:
            out["reopened"] = len(col.search("Laterword", top_k=5).results)
        """,
    )
    child = subprocess.Popen(
        argv,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "READY"
        with gs.Collection.open(rw / "idx", base_dir=rw) as col:
            col.add_documents([{"id": "later", "text": "Laterword about tea"}])
        stdout, stderr = child.communicate("go\n", timeout=300)
    finally:
        if child.poll() is None:
            child.kill()
    assert child.returncode == 0, stderr
    got = json.loads(stdout.strip().splitlines()[-1])
    assert got["before"] == 2
    assert "changed since this process opened it read-only" in got["after"]
    assert got["reopened"] == 1


def test_an_older_collection_says_how_to_bring_it_up_to_date(mounts: tuple[Path, Path]) -> None:
    rw, ro = mounts
    with sqlite3.connect(metadata_path(rw / "idx", "default")) as conn:
        conn.execute("UPDATE state SET schema_version = ? WHERE id = 1", (SCHEMA_VERSION - 1,))
    error = _refusal(rw, ro)
    assert "written by an older groundkit" in error
    assert "open it once on writable storage" in error


def test_missing_index_files_are_rebuilt_in_memory(mounts: tuple[Path, Path]) -> None:
    """The lexical index's files cannot be saved there: each process rebuilds them from
    the store, says so, and answers the same."""
    rw, ro = mounts
    with gs.Collection.open(rw / "idx", base_dir=rw) as col:
        expected = [[c, s] for c, s in _hits(col, "kettle boils", top_k=3)]
    shutil.rmtree(rw / "idx" / "default.segments")
    got = _in_read_only(
        rw,
        ro,
        """
        import logging
        logging.basicConfig(level=logging.WARNING)
        with gs.Collection.open("idx", base_dir=".") as col:
            out["hits"] = [
                [r.citation.chunk_id, r.score] for r in col.search("kettle boils", top_k=3).results
            ]
        """,
    )
    assert got["hits"] == expected
    assert "not saved" in got["stderr"]
    assert not (rw / "idx" / "default.segments").exists()


def test_dense_and_hybrid_search_read_the_vectors(mounts: tuple[Path, Path]) -> None:
    rw, ro = mounts
    from tests.support import ToyEmbedder

    with gs.Collection.open(rw / "dense", base_dir=rw, embedder=ToyEmbedder()) as col:
        col.ingest(rw / "docs")
        expected = {m: _hits(col, "green tea", mode=m, top_k=2) for m in ("dense", "hybrid")}
    got = _in_read_only(
        rw,
        ro,
        """
        from tests.support import ToyEmbedder
        with gs.Collection.open("dense", base_dir=".", embedder=ToyEmbedder()) as col:
            for mode in ("dense", "hybrid"):
                results = col.search("green tea", mode=mode, top_k=2).results
                out[mode] = [[r.citation.chunk_id, r.score] for r in results]
                out[mode + "-verified"] = col.verify(results[0]).verification
        """,
    )
    for mode in ("dense", "hybrid"):
        assert got[mode] == [[c, s] for c, s in expected[mode]]
        assert got[mode + "-verified"] == "verified"


async def test_the_mcp_server_serves_from_a_read_only_mount(mounts: tuple[Path, Path]) -> None:
    """``grk serve`` over stdio, started inside the namespace: search, a verified fetch,
    and a write through the writable mount seen by the next search (the server opens the
    collection again, as it does one dropped and made anew)."""
    from mcp import Client, StdioServerParameters
    from mcp.client.stdio import stdio_client

    from tests.service.test_server import call

    rw, ro = mounts
    grk = Path(sys.executable).with_name("grk")
    command = f"cd '{ro}' && exec '{grk}' serve --index-dir idx --base-dir ."
    argv = _mount_script(rw, ro, command)
    params = StdioServerParameters(
        command=argv[0],
        args=argv[1:],
        env={**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONIOENCODING": "utf-8"},
    )
    with (rw.parent / "serve.log").open("w", encoding="utf-8") as errlog:
        async with Client(stdio_client(params, errlog=errlog)) as client:
            found = await call(client, "search", query="kettle whistles", top_k=1)
            top = found["results"][0]
            assert top["citation"]["source"] == "docs/kettle.txt"
            fetched = await call(client, "fetch_chunk", chunk_id=top["citation"]["chunk_id"])
            assert fetched["verification"] == "verified"
            # Written through the writable mount meanwhile: the server opens it again.
            with gs.Collection.open(rw / "idx", base_dir=rw) as col:
                col.add_documents([{"id": "later", "text": "Laterword about kettles"}])
            found = await call(client, "search", query="Laterword", top_k=1)
            assert found["results"][0]["citation"]["source"] == "record://later"


def test_a_log_without_its_index_file_says_what_to_do(mounts: tuple[Path, Path]) -> None:
    """A writer killed outright leaves its log; without the log's shared-memory file
    SQLite cannot read it on a read-only mount, and the error says how to fold it in."""
    rw, ro = mounts
    store = metadata_path(rw / "idx", "default")
    holder = _holding_a_write(rw)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "HELD"
    finally:
        holder.kill()
        holder.wait(timeout=60)
    assert Path(f"{store}-wal").stat().st_size > 0
    Path(f"{store}-shm").unlink()
    error = _refusal(rw, ro)
    assert "write-ahead log" in error
    assert "open it once on writable storage" in error
    # Which is what it takes: opened writable once, the log is folded in.
    with gs.Collection.open(rw / "idx", base_dir=rw) as col:
        assert col.search("Walmarker").results[0].citation.source == "record://held"
