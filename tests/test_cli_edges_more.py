"""grk at its edges: output it cannot write, files that are no files, empty paths given to
grk serve and grk inspect, moments before year 1, and flags named as typed."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from collections.abc import Sequence
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

import groundkit.cli as cli
from groundkit.cli import main
from groundkit.errors import ConfigurationError, IngestionError
from groundkit.retrieval.rewriting import MAX_GLOSSARY_BYTES, GlossaryRewriter
from tests.support import fifo_at

FIFO_REFUSED = "not a regular file (FIFO); only regular files are read"
EARLY = "0001-01-01T00:00:00+01:00"  # 31 December of year 0 in UTC


@pytest.fixture
def at(tmp_path: Path) -> list[str]:
    """The location flags of a collection ingested from ``docs/a.md``."""
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.md").write_text("Install the widget with care.\n", encoding="utf-8")
    flags = ["--index-dir", str(tmp_path / "idx"), "--base-dir", str(tmp_path)]
    assert main(["ingest", str(docs), "-q", *flags]) == 0
    return flags


def refused(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    """Run grk expecting exit 2 with one ``grk: error:`` line; that line."""
    code = main(list(argv))
    out, err = capsys.readouterr()
    assert code == 2, (out, err)
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("grk: error: "), err
    return lines[0]


def grk(argv: Sequence[str], stdout: int | None = None, shell: str = "") -> tuple[int, str]:
    """grk in a process of its own, with stdout as given (``shell``: a redirection the
    shell applies, as ``>&-``); its exit code and stderr."""
    command = [sys.executable, "-m", "groundkit.cli", *argv]
    if shell:
        command = ["sh", "-c", f'exec "$@" {shell}', "sh", *command]
    done = subprocess.run(command, stdout=stdout, stderr=subprocess.PIPE, timeout=120, check=False)
    return done.returncode, done.stderr.decode()


def to_a_gone_reader(argv: Sequence[str]) -> tuple[int, str]:
    """grk writing to a pipe whose reader has already gone (``grk ... | head`` once head
    has exited): its first write fails with EPIPE."""
    read, write = os.pipe()
    os.close(read)
    try:
        return grk(argv, stdout=write)
    finally:
        os.close(write)


# --- output that cannot be written -------------------------------------------------------


@pytest.mark.parametrize(
    "argv",
    [["--version"], ["collections"], ["search", "widget"], ["search", "widget", "--json"]],
    ids=["version", "collections", "search", "search-json"],
)
def test_output_to_a_full_device_is_one_error_line(at: list[str], argv: list[str]) -> None:
    with open("/dev/full", "wb") as full:
        code, err = grk([*argv, *(at if argv != ["--version"] else [])], stdout=full.fileno())
    assert code == 2, err
    assert err == "grk: error: cannot write the output: No space left on device\n"


def test_output_with_stdout_closed_is_an_error_not_lost(at: list[str]) -> None:
    code, err = grk(["search", "widget", *at], shell=">&-")
    assert code == 2, err
    assert err == "grk: error: cannot write the output: standard output is closed\n"
    # A command with nothing to print has nothing to lose.
    code, err = grk(["ingest", str(Path(at[1]).parent / "docs"), "-q", *at], shell=">&-")
    assert (code, err) == (0, "")


def test_a_reader_gone_is_not_an_error(at: list[str]) -> None:
    for argv in (["--version"], ["search", "widget", *at], ["--help"]):
        assert to_a_gone_reader(argv) == (0, "")


def test_a_reader_gone_keeps_the_problems_found(tmp_path: Path, at: list[str]) -> None:
    (tmp_path / "docs" / "a.md").unlink()  # its chunk no longer verifies
    assert to_a_gone_reader(["verify", *at]) == (1, "")
    assert to_a_gone_reader(["delete", "docs/nothing.md", *at]) == (1, "")
    (tmp_path / "more").mkdir()
    (tmp_path / "more" / "b.md").write_text("Install the gadget.\n", encoding="utf-8")
    os.mkfifo(tmp_path / "more" / "c.md")  # a failure line: not a regular file
    code, err = to_a_gone_reader(["ingest", str(tmp_path / "more"), "-q", *at])
    assert (code, err) == (1, "grk: failed: more/c.md: " + FIFO_REFUSED + "\n")


# --- files that are not regular files ----------------------------------------------------


@pytest.mark.timeout(60)
def test_a_glossary_that_is_a_fifo_is_refused_not_waited_on(tmp_path: Path) -> None:
    with (
        fifo_at(tmp_path / "terms.toml") as fifo,
        pytest.raises(ConfigurationError, match="not a regular file") as caught,
    ):
        GlossaryRewriter.from_file(fifo)
    assert "terms.toml" in str(caught.value)


def test_a_glossary_that_is_a_device_is_refused() -> None:
    with pytest.raises(ConfigurationError, match=r"'/dev/null' cannot be read: not a regular"):
        GlossaryRewriter.from_file("/dev/null")


def test_a_glossary_over_the_cap_is_refused_naming_it(tmp_path: Path) -> None:
    big = tmp_path / "big.toml"
    with big.open("wb") as out:
        out.truncate(MAX_GLOSSARY_BYTES + 1)
    with pytest.raises(ConfigurationError, match=r"big\.toml' is too large"):
        GlossaryRewriter.from_file(big)


# A read blocked in asyncio's worker thread would hold up the loop's shutdown after
# SIGALRM; the thread method ends the run instead.
@pytest.mark.timeout(60, method="thread")
def test_grk_search_refuses_a_glossary_fifo(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, at: list[str]
) -> None:
    with fifo_at(tmp_path / "terms.toml") as fifo:
        line = refused(capsys, "search", "widget", "--glossary", str(fifo), *at)
    assert str(fifo) in line and "not a regular file (FIFO)" in line


# A read blocked in asyncio's worker thread would hold up the loop's shutdown after
# SIGALRM; the thread method ends the run instead.
@pytest.mark.timeout(60, method="thread")
def test_grk_ingest_refuses_a_jsonl_fifo_and_device(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, at: list[str]
) -> None:
    with fifo_at(tmp_path / "records.jsonl") as fifo:
        line = refused(capsys, "ingest", "--jsonl", str(fifo), "--collection", "j", *at)
    assert line.startswith(f"grk: error: --jsonl {str(fifo)!r}: cannot read (not a regular")
    line = refused(capsys, "ingest", "--jsonl", "/dev/null", "--collection", "j", *at)
    assert "--jsonl '/dev/null': cannot read (not a regular file (character device)" in line


def test_grk_ingest_refuses_jsonl_over_the_cap(
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    at: list[str],
) -> None:
    monkeypatch.setattr(cli, "MAX_JSONL_BYTES", 1024 * 1024)
    records = tmp_path / "records.jsonl"
    records.write_text('{"id": "r1", "text": "' + "x" * (1024 * 1024) + '"}\n', encoding="utf-8")
    line = refused(capsys, "ingest", "--jsonl", str(records), "--collection", "j", *at)
    assert line.startswith(f"grk: error: --jsonl {str(records)!r}: too large")
    assert "the cap is 1 MiB" in line
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(records.read_bytes())))
    line = refused(capsys, "ingest", "--jsonl", "-", "--collection", "j", *at)
    assert line == "grk: error: --jsonl -: stdin holds more than the cap is 1 MiB"


# --- empty paths -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "argument"),
    [
        (["serve", "--index-dir", ""], "--index-dir"),
        (["serve", "--base-dir", ""], "--base-dir"),
        (["serve", "--glossary", ""], "--glossary"),
        (["inspect", ""], "INDEX_DIR"),
        (["inspect", "--index-dir", ""], "--index-dir"),
        (["inspect", "--base-dir", ""], "--base-dir"),
    ],
    ids=[
        "serve-index-dir",
        "serve-base-dir",
        "serve-glossary",
        "inspect",
        "inspect-index-dir",
        "inspect-base-dir",
    ],
)
def test_an_empty_path_to_serve_or_inspect_is_a_usage_error(
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    argv: list[str],
    argument: str,
) -> None:
    monkeypatch.chdir(tmp_path)  # read as '.', the path would name this directory
    with pytest.raises(SystemExit) as stopped:
        main(argv)
    assert stopped.value.code == 2
    assert f"argument {argument}: is empty" in capsys.readouterr().err


# --- moments before year 1 ----------------------------------------------------------------


def test_valid_as_of_before_year_one_is_a_usage_error(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, at: list[str]
) -> None:
    docs = str(tmp_path / "docs")
    line = refused(capsys, "ingest", docs, "--collection", "early", "--valid-as-of", EARLY, *at)
    assert line.startswith(f"grk: error: --valid-as-of: valid_as_of {EARLY} falls before")
    assert main(["collections", "--json", *at]) == 0
    assert '"early"' not in capsys.readouterr().out  # refused before it was created
    # The first moment that is one is taken.
    assert main(["ingest", docs, "-q", "--valid-as-of", "0001-01-01T01:00:00+01:00", *at]) == 0


async def test_the_library_refuses_valid_as_of_before_year_one(tmp_path: Path) -> None:
    from groundkit import Collection

    (tmp_path / "a.md").write_text("Install the widget.\n", encoding="utf-8")
    early = datetime(1, 1, 1, tzinfo=timezone(timedelta(hours=1)))
    async with Collection.open(tmp_path / "idx", base_dir=tmp_path) as col:
        with pytest.raises(IngestionError, match="falls before 0001-01-01T00:00:00 in UTC"):
            await col.ingest(tmp_path / "a.md", valid_as_of=early)


# --- flags named as typed ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["search", "widget", "--rerank", ""], "--rerank takes a cross-encoder's model name"),
        (["search", "widget", "--rerank", " "], "--rerank takes a cross-encoder's model name"),
        (
            ["fetch", "abc", "--version", str(2**64)],
            f"--version must be an integer from 1 to {2**63 - 1}, got {2**64}",
        ),
        (
            ["ingest", "https://example.com/", "--ray", "auto"],
            "--ray ingests a PATH; a URL is fetched by this process",
        ),
    ],
    ids=["rerank-empty", "rerank-blank", "fetch-version", "ray-url"],
)
def test_flags_are_named_as_typed_before_anything_is_opened(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, argv: list[str], expected: str
) -> None:
    index = tmp_path / "none"  # no collection: the flag is checked before one is looked for
    line = refused(capsys, *argv, "--index-dir", str(index))
    assert line.startswith("grk: error: " + expected), line
    assert not index.exists()
