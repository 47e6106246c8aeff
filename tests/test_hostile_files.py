"""Hostile filesystem entries: file names that are not UTF-8, FIFOs, sockets, devices,
and sources that grow past the size cap. One bad entry is one line of the report at
ingest and an ``unresolvable`` verdict at verification, never an abort or a hang.

Everything that could block on a FIFO runs under a timeout, and every FIFO is
released afterwards (``fifo_at``), so a regression fails instead of hanging the run.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import stat
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from groundkit import (
    Collection,
    ConfigurationError,
    IngestConfig,
    IngestionError,
    RetrievalError,
    check_citation,
    resolve_citation,
)
from groundkit.config import DEFAULT_MAX_FILE_BYTES
from groundkit.ingestion.dispatch import RoutingLoader
from groundkit.ingestion.files import FileLoader, discover_files
from groundkit.utils.file_reads import FileTooLargeError, NotRegularFileError, read_regular_file
from groundkit.utils.path_safety import printable_path
from tests.sources import HTML_PAGE, make_pdf
from tests.support import SMALL_CHUNKS, fifo_at, release_readers, write_tree

# Generous for a read that must return at once; a hang is what it catches.
PROMPT = 10.0

pytestmark = pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs POSIX FIFOs")


def bad_name(directory: Path, name: bytes, data: bytes) -> Path:
    """Create ``directory/name`` where ``name`` is not valid UTF-8."""
    raw = os.fsencode(directory) + b"/" + name
    with open(raw, "wb") as handle:
        handle.write(data)
    return Path(os.fsdecode(raw))


@pytest.fixture
def unix_socket(tmp_path: Path) -> Iterator[Path]:
    """A listening Unix socket named ``s.txt`` in a short directory (path length limit)."""
    short = Path(f"/tmp/gk-sock-{os.getpid()}-{id(tmp_path)}")
    short.mkdir()
    path = short / "s.txt"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(str(path))
    try:
        yield path
    finally:
        sock.close()
        path.unlink(missing_ok=True)
        short.rmdir()


class TestReadRegularFile:
    async def test_fifo_refused_without_waiting_for_a_writer(self, tmp_path: Path) -> None:
        with fifo_at(tmp_path / "pipe.txt") as pipe:
            call = asyncio.to_thread(read_regular_file, pipe)
            with pytest.raises(NotRegularFileError, match=r"not a regular file \(FIFO\)"):
                await asyncio.wait_for(call, PROMPT)

    def test_devices_sockets_and_directories(self, tmp_path: Path, unix_socket: Path) -> None:
        with pytest.raises(NotRegularFileError, match=r"\(character device\)"):
            read_regular_file("/dev/null")
        with pytest.raises(NotRegularFileError, match=r"\(socket\)"):
            read_regular_file(unix_socket)
        with pytest.raises(NotRegularFileError, match=r"\(directory\)"):
            read_regular_file(tmp_path)

    async def test_swapped_for_a_fifo_after_the_check_is_refused_on_the_descriptor(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        # The race: the path is a regular file when stat looks and a FIFO when it
        # is opened. The stat is answered from a regular file to place the swap
        # exactly in between; the open and the fstat are real.
        regular = tmp_path / "regular.txt"
        regular.write_text("x")
        real_stat = os.stat
        with fifo_at(tmp_path / "pipe.txt") as pipe:

            def stat_before_swap(path: object, **kwargs: bool) -> os.stat_result:
                target = regular if Path(str(path)) == pipe else path
                return real_stat(target, **kwargs)  # type: ignore[arg-type]

            monkeypatch.setattr(os, "stat", stat_before_swap)
            call = asyncio.to_thread(read_regular_file, pipe)
            with pytest.raises(NotRegularFileError, match="FIFO"):
                await asyncio.wait_for(call, PROMPT)

    def test_cap_is_exact(self, tmp_path: Path) -> None:
        path = tmp_path / "f.txt"
        path.write_bytes(b"12345")
        assert read_regular_file(path, 5) == b"12345"
        assert read_regular_file(path) == b"12345"
        with pytest.raises(FileTooLargeError, match="5 bytes exceeds the cap of 4 bytes"):
            read_regular_file(path, 4)
        empty = tmp_path / "empty.txt"
        empty.write_bytes(b"")
        assert read_regular_file(empty, 4) == b""

    @pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="needs Linux procfs")
    def test_read_stops_at_the_cap_when_the_size_said_less(self) -> None:
        # procfs files are regular files that stat as 0 bytes and read as more:
        # what a file growing between the stat and the read looks like.
        status = Path("/proc/self/status")
        assert os.stat(status).st_size == 0 and len(status.read_bytes()) > 100
        with pytest.raises(FileTooLargeError, match="grew past the cap of 100 bytes"):
            read_regular_file(status, 100)
        assert read_regular_file(status, 1_000_000).startswith(b"Name:")

    def test_symlink_refused_when_not_followed(self, tmp_path: Path) -> None:
        (tmp_path / "real.txt").write_text("text")
        (tmp_path / "link.txt").symlink_to(tmp_path / "real.txt")
        assert read_regular_file(tmp_path / "link.txt") == b"text"
        with pytest.raises(OSError):
            read_regular_file(tmp_path / "link.txt", follow_symlinks=False)


class TestPrintablePath:
    def test_undecodable_bytes_are_escaped_and_the_rest_kept(self) -> None:
        name = os.fsdecode(b"caf\xc3\xa9-\xff\xfe.txt")
        shown = printable_path(name)
        assert shown == "café-\\xff\\xfe.txt"
        assert shown.encode("utf-8") and json.loads(json.dumps(shown)) == shown
        assert printable_path("plain/ñame.md") == "plain/ñame.md"


class TestLoaders:
    async def test_fifo_is_a_load_failure_for_every_loader(self, tmp_path: Path) -> None:
        loader = RoutingLoader()
        for name in ("pipe.txt", "pipe.pdf", "pipe.html"):
            with fifo_at(tmp_path / name) as pipe:
                call = loader.load(pipe, base_dir=tmp_path)
                with pytest.raises(IngestionError, match=rf"^{name}: not a regular file \(FIFO\)"):
                    await asyncio.wait_for(call, PROMPT)

    async def test_name_not_utf8_is_a_load_failure_naming_it_escaped(self, tmp_path: Path) -> None:
        path = bad_name(tmp_path, b"b\xff.txt", b"bad name\n")
        with pytest.raises(IngestionError, match=r"^b\\xff\.txt: the file name is not valid UTF-8"):
            await FileLoader().load(path, base_dir=tmp_path)
        pdf = bad_name(tmp_path, b"r\xfe.pdf", make_pdf())
        with pytest.raises(IngestionError, match=r"^r\\xfe\.pdf: the file name is not valid"):
            await RoutingLoader().load(pdf, base_dir=tmp_path)

    def test_discovery_lists_accepted_names_whatever_they_are(
        self, tmp_path: Path, unix_socket: Path
    ) -> None:
        write_tree(tmp_path, {"a.txt": "a\n", "notes.bin": "b"})
        os.mkfifo(tmp_path / "pipe.txt")
        os.mkfifo(tmp_path / "pipe.bin")
        found = discover_files(tmp_path, (".txt",))
        assert [p.name for p in found.files] == ["a.txt", "pipe.txt"]
        assert found.skipped == 2  # notes.bin and pipe.bin: not accepted, never examined

    def test_a_fifo_as_the_root_is_an_error_naming_it(self, tmp_path: Path) -> None:
        os.mkfifo(tmp_path / "pipe.txt")
        with pytest.raises(IngestionError, match="is a FIFO, neither a file nor a directory"):
            discover_files(tmp_path / "pipe.txt", (".txt",))


def hostile_folder(base: Path) -> None:
    """Good files around each kind of bad entry, sorted so the bad ones sit in between."""
    write_tree(
        base,
        {
            "a.txt": "Alpha comes first in the folder.\n",
            "m.md": "Middle note about tidal lagoons.\n",
            "z.txt": "Zeta comes last in the folder.\n",
            "sub/deep.txt": "A nested note after a bad directory name.\n",
        },
    )
    bad_name(base, b"b\xff.txt", b"Bad name, good text.\n")
    (base / os.fsdecode(b"d\xe9r")).mkdir()
    bad_name(base / os.fsdecode(b"d\xe9r"), b"inner.txt", b"Inside a bad directory.\n")
    os.mkfifo(base / "p.txt")
    os.mkfifo(base / "q.pdf")


EXPECTED_FAILURES = {
    "b\\xff.txt": "the file name is not valid UTF-8",
    "d\\xe9r/inner.txt": "the file name is not valid UTF-8",
    "p.txt": "not a regular file (FIFO)",
    "q.pdf": "not a regular file (FIFO)",
}


class TestIngest:
    async def test_one_bad_entry_is_one_report_line(self, tmp_path: Path) -> None:
        base = tmp_path / "corpus"
        hostile_folder(base)
        try:
            async with Collection.open(tmp_path / "index", base_dir=base) as col:
                report = await asyncio.wait_for(col.ingest(base), PROMPT * 3)
                assert report.added == ["a.txt", "m.md", "sub/deep.txt", "z.txt"]
                failures = {f.source: f.reason for f in report.failed}
                assert set(failures) == set(EXPECTED_FAILURES)
                for source, reason in EXPECTED_FAILURES.items():
                    assert failures[source].startswith(f"{source}: {reason}"), failures[source]
                # The whole report round-trips through strict UTF-8 JSON.
                dumped = report.model_dump_json()
                assert dumped.encode("utf-8") and "\\udc" not in dumped
                assert json.loads(dumped)["failed"][0]["source"] == "b\\xff.txt"
                assert (await col.search("zeta last", 1)).results[0].source == "z.txt"
                # Again: the same lines, nothing pruned, nothing hung.
                again = await asyncio.wait_for(col.ingest(base), PROMPT * 3)
                assert again.unchanged == report.added and again.removed == []
                assert {f.source for f in again.failed} == set(EXPECTED_FAILURES)
        finally:
            release_readers(base / "p.txt")
            release_readers(base / "q.pdf")

    async def test_a_source_that_became_a_fifo_keeps_its_stored_version(
        self, tmp_path: Path
    ) -> None:
        base = tmp_path / "corpus"
        write_tree(base, {"a.txt": "Alpha text.\n", "b.txt": "Beta text.\n"})
        async with Collection.open(tmp_path / "index", base_dir=base) as col:
            await col.ingest(base)
            with fifo_at(base / "a.txt"):
                report = await asyncio.wait_for(col.ingest(base), PROMPT)
            assert [f.source for f in report.failed] == ["a.txt"]
            assert report.removed == [] and report.unchanged == ["b.txt"]

    async def test_device_under_an_accepted_name(self, tmp_path: Path) -> None:
        base = tmp_path / "corpus"
        write_tree(base, {"a.txt": "Alpha text.\n"})
        try:
            os.mknod(base / "null.txt", stat.S_IFCHR | 0o600, os.makedev(1, 3))
        except (PermissionError, OSError) as exc:
            pytest.skip(f"cannot create a device node here ({exc})")
        async with Collection.open(tmp_path / "index", base_dir=base) as col:
            report = await asyncio.wait_for(col.ingest(base), PROMPT)
        assert report.added == ["a.txt"]
        assert report.failed[0].reason == (
            "null.txt: not a regular file (character device); only regular files are read"
        )


async def test_base_directory_not_utf8_is_a_configuration_error(tmp_path: Path) -> None:
    base = Path(os.fsdecode(os.fsencode(tmp_path) + b"/c\xff"))
    base.mkdir()
    with pytest.raises(ConfigurationError, match=r"\(stored as '\.\./c\\xff'\) is not valid UTF-8"):
        await Collection.open(tmp_path / "index", base_dir=base)
    # Nothing half-recorded: the same index opens with a usable base afterwards.
    good = tmp_path / "good"
    write_tree(good, {"a.txt": "Alpha text.\n"})
    async with Collection.open(tmp_path / "index", base_dir=good) as col:
        assert (await col.ingest(good)).added == ["a.txt"]


async def mixed_collection(tmp_path: Path, ingest: IngestConfig | None = None) -> Collection:
    base = tmp_path / "corpus"
    write_tree(
        base,
        {
            "notes.md": "Tidal lagoons hold water behind a wall.\n\nThey release it slowly.\n",
            "keep.txt": "This file stays a regular file throughout.\n",
            "report.pdf": make_pdf(),
            "guide.html": HTML_PAGE.encode("cp1252"),
        },
    )
    col = await Collection.open(
        tmp_path / "index", base_dir=base, chunking=SMALL_CHUNKS, ingest=ingest
    )
    report = await col.ingest(base)
    assert not report.failed and len(report.added) == 4
    return col


async def chunks_of(col: Collection, source: str) -> list[str]:
    return [
        c.chunk_id async for batch in col.store.iter_chunks() for c in batch if c.source == source
    ]


class TestVerification:
    @pytest.mark.parametrize("source", ["notes.md", "report.pdf", "guide.html"])
    async def test_source_replaced_by_a_fifo_is_unresolvable_at_once(
        self, tmp_path: Path, source: str
    ) -> None:
        col = await mixed_collection(tmp_path)
        try:
            chunk_id = (await chunks_of(col, source))[0]
            healthy = (await chunks_of(col, "keep.txt"))[0]
            with fifo_at(col.base_dir / source):
                result = await asyncio.wait_for(col.fetch_chunk(chunk_id), PROMPT)
                assert result.verification == "unresolvable"
                assert result.detail == (
                    f"cannot check source {source!r}: it is not a regular file (FIFO); "
                    "only regular files are read"
                )
                stored = await col.store.get_chunk(chunk_id)
                assert stored is not None
                checked = await asyncio.wait_for(
                    check_citation(stored.citation, stored.content, col.base_dir), PROMPT
                )
                assert checked.verification == "unresolvable" and "FIFO" in checked.detail
                report = await asyncio.wait_for(col.verify_all(), PROMPT)
                assert report.unresolvable == len(await chunks_of(col, source))
                assert report.drifted == 0 and report.verified > 0
                assert (await col.fetch_chunk(healthy)).verification == "verified"
        finally:
            await col.close()

    async def test_source_grown_past_the_collections_cap(self, tmp_path: Path) -> None:
        cap = 120_000
        col = await mixed_collection(tmp_path, IngestConfig(max_file_bytes=cap))
        try:
            text_chunk = (await chunks_of(col, "notes.md"))[0]
            pdf_chunk = (await chunks_of(col, "report.pdf"))[0]
            notes = col.base_dir / "notes.md"
            # Appended text keeps every cited span where it was: only the cap refuses it.
            with notes.open("a", encoding="utf-8") as handle:
                handle.write("More lagoon notes.\n" * 7000)
            size = notes.stat().st_size
            result = await col.fetch_chunk(text_chunk)
            assert result.verification == "unresolvable"
            assert result.detail.startswith(
                f"cannot check source 'notes.md': {size} bytes exceeds the cap of {cap} bytes "
                "(IngestConfig.max_file_bytes"
            )
            stored = await col.store.get_chunk(text_chunk)
            assert stored is not None
            # Uncapped, the same citation still verifies: the cap alone refused it.
            uncapped = await check_citation(
                stored.citation, stored.content, col.base_dir, max_bytes=None
            )
            assert uncapped.ok
            with pytest.raises(RetrievalError, match="exceeds the cap of 1000 bytes") as info:
                await resolve_citation(stored.citation, col.base_dir, max_bytes=1000)
            assert info.value.verdict == "unresolvable"
            # An extracted source is capped on its file bytes, as its ingest was.
            pdf = col.base_dir / "report.pdf"
            pdf.write_bytes(pdf.read_bytes() + b"\n%" + b"x" * cap)
            result = await col.fetch_chunk(pdf_chunk)
            assert result.verification == "unresolvable" and "exceeds the cap" in result.detail
            report = await col.verify_all()
            assert report.unresolvable == len(await chunks_of(col, "notes.md")) + len(
                await chunks_of(col, "report.pdf")
            )
        finally:
            await col.close()

    async def test_default_cap_is_the_ingest_default(self, tmp_path: Path) -> None:
        col = await mixed_collection(tmp_path)
        try:
            stored = await col.store.get_chunk((await chunks_of(col, "keep.txt"))[0])
            assert stored is not None
            keep = col.base_dir / "keep.txt"
            os.truncate(keep, DEFAULT_MAX_FILE_BYTES)  # sparse: NUL bytes after the text
            assert (await check_citation(stored.citation, stored.content, col.base_dir)).ok
            os.truncate(keep, DEFAULT_MAX_FILE_BYTES + 1)
            over = await check_citation(stored.citation, stored.content, col.base_dir)
            assert over.verification == "unresolvable" and "exceeds the cap" in over.detail
        finally:
            await col.close()


# Runs in a fresh interpreter so the peak belongs to the verification reads alone.
_VERIFY_PEAK = textwrap.dedent(
    """
    import asyncio, json, os, resource, sys, tracemalloc
    from pathlib import Path
    from groundkit import Collection

    async def main(root):
        base = root / "corpus"
        base.mkdir()
        (base / "big.txt").write_text("A small source that will grow.\\n", encoding="utf-8")
        async with Collection.open(root / "index", base_dir=base) as col:
            await col.ingest(base)
            chunk = [c async for b in col.store.iter_chunks() for c in b][0].chunk_id
            # Once on the small file first, so what the checks import and build on first
            # use is not counted below: only what reading the source costs.
            await col.fetch_chunk(chunk)
            await col.verify_all()
            os.truncate(base / "big.txt", 200 * 1024 * 1024)  # sparse, 200 MB
            before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
            tracemalloc.start()
            fetched = await col.fetch_chunk(chunk)
            report = await col.verify_all()
            _, peak = tracemalloc.get_traced_memory()
            tracemalloc.stop()
            after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        print(json.dumps({
            "verdict": fetched.verification, "detail": fetched.detail,
            "unresolvable": report.unresolvable, "peak": peak,
            "rss_growth_kib": after - before,
        }))

    asyncio.run(main(Path(sys.argv[1])))
    """
)


def test_verification_memory_is_bounded_by_the_cap(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-c", _VERIFY_PEAK, str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    measured = json.loads(done.stdout)
    assert measured["verdict"] == "unresolvable" and measured["unresolvable"] == 1
    assert "exceeds the cap" in measured["detail"]
    # Refused by its size: nothing near the 200 MB is ever read (it was 458 MB).
    assert measured["peak"] < 4 * 1024 * 1024, measured
    assert measured["rss_growth_kib"] < 32 * 1024, measured


def test_grk_ingest_finishes_and_reports_each_bad_entry(tmp_path: Path) -> None:
    base = tmp_path / "corpus"
    hostile_folder(base)
    grk = Path(sys.executable).with_name("grk")
    env = {**os.environ, "PYTHONIOENCODING": "utf-8"}
    argv = [str(grk), "ingest", str(base), "--index-dir", str(tmp_path / "idx")]
    argv += ["--base-dir", str(base)]
    try:
        done = subprocess.run(
            argv, capture_output=True, text=True, env=env, timeout=120, check=False
        )
        assert done.returncode == 1, done.stderr
        assert "Traceback" not in done.stderr
        lines = done.stdout.splitlines()
        assert lines[0].startswith("added 4, updated 0, unchanged 0, removed 0, failed 4")
        assert sorted(lines[1:]) == sorted(
            f"  failed: {source}: {reason}" + rest
            for source, reason, rest in (
                ("b\\xff.txt", EXPECTED_FAILURES["b\\xff.txt"], NAME_ADVICE),
                ("d\\xe9r/inner.txt", EXPECTED_FAILURES["d\\xe9r/inner.txt"], NAME_ADVICE),
                ("p.txt", EXPECTED_FAILURES["p.txt"], FIFO_ADVICE),
                ("q.pdf", EXPECTED_FAILURES["q.pdf"], FIFO_ADVICE),
            )
        )
        done = subprocess.run(
            [*argv, "--json"], capture_output=True, text=True, env=env, timeout=120, check=False
        )
        assert done.returncode == 1 and "Traceback" not in done.stderr
        report = json.loads(done.stdout)
        assert sorted(f["source"] for f in report["failed"]) == sorted(EXPECTED_FAILURES)
        assert sorted(report["unchanged"]) == ["a.txt", "m.md", "sub/deep.txt", "z.txt"]
    finally:
        release_readers(base / "p.txt")
        release_readers(base / "q.pdf")


NAME_ADVICE = " (undecodable bytes shown as \\x escapes); rename the file to ingest it"
FIFO_ADVICE = "; only regular files are read"
