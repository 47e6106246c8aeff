"""grk's failures: exit code 2 and one line on stderr, never a traceback."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from groundkit.cli import main

DEEP = '{"team": ' + '{"eq": ' * 5000 + "1" + "}" * 5001


@pytest.fixture
def index(tmp_path: Path) -> Path:
    """An index directory with one collection ingested from a small folder."""
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.md").write_text("---\nteam: infra\n---\nCats purr at night.\n", encoding="utf-8")
    idx = tmp_path / "idx"
    code = main(["ingest", str(docs), "--index-dir", str(idx), "--base-dir", str(tmp_path), "-q"])
    assert code == 0
    return idx


def refused(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    """Run grk expecting a usage or configuration error; its one line of stderr."""
    code = main(list(argv))
    out, err = capsys.readouterr()
    assert code == 2, (out, err)
    assert "Traceback" not in err
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("grk: error: "), err
    return lines[0]


@pytest.mark.parametrize(
    ("where", "needle"),
    [
        # Python 3.11 and 3.12's parser gives up first ("the JSON filter nests too deeply");
        # 3.13's parses it and the filter's own depth check refuses it.
        (DEEP, "nest"),
        ('{"team": ' + '{"eq": ' * 100 + "1" + "}" * 101, "filters nest more than 3 levels deep"),
        ('{"team": {"in": [[1]]}}', "filters nest more than 3 levels deep"),
        (
            json.dumps({f"f{i}": 1 for i in range(65)}),
            "filters hold more than 64 conditions",
        ),
        (json.dumps({"team": {"in": list(range(5000))}}), "more than 4096 names and values"),
        ("team=\udcff", "--where is not valid UTF-8 (byte 0xff at character 5)"),
    ],
    ids=["json-5000-deep", "json-100-deep", "list-in-list", "conditions", "values", "bytes"],
)
def test_bad_filters_are_one_line_errors(
    capsys: pytest.CaptureFixture[str], index: Path, where: str, needle: str
) -> None:
    line = refused(capsys, "search", "cats", "--index-dir", str(index), "--where", where)
    assert needle in line


def test_a_json_number_too_long_to_read_is_a_usage_error(
    capsys: pytest.CaptureFixture[str], index: Path, tmp_path: Path
) -> None:
    # Python refuses to convert an integer of more than 4,300 digits with a ValueError
    # that is no JSONDecodeError: it was a traceback.
    huge = "1" + "0" * 5000
    line = refused(
        capsys, "search", "cats", "--index-dir", str(index), "--where", f'{{"n": {huge}}}'
    )
    assert line == (
        "grk: error: --where: a JSON number has too many digits to read (fields hold "
        "64-bit integers); quote it to keep it as text"
    )
    records = tmp_path / "big.jsonl"
    records.write_text(
        '{"id": "a", "text": "alpha"}\n'
        f'{{"id": "b", "text": "beta", "fields": {{"n": {huge}}}}}\n',
        encoding="utf-8",
    )
    fresh = tmp_path / "fresh"
    line = refused(capsys, "ingest", "--jsonl", str(records), "--index-dir", str(fresh), "-q")
    assert line.startswith("grk: error: --jsonl line 2: a JSON number has too many digits")
    assert not fresh.exists()


def test_arguments_that_are_not_utf8_are_named(
    capsys: pytest.CaptureFixture[str], index: Path, tmp_path: Path
) -> None:
    # Python hands argv bytes that are not UTF-8 over as U+DC80..U+DCFF.
    at = ["--index-dir", str(index)]
    line = refused(capsys, "search", "qqsecretqq \udced\udca0\udc80", *at)
    assert line == "grk: error: the query is not valid UTF-8 (byte 0xed at character 11)"
    line = refused(capsys, "fetch", "\udced\udca0\udc80", *at)
    assert "CHUNK_ID is not valid UTF-8 (byte 0xed at character 0)" in line
    fresh = tmp_path / "fresh"
    docs = tmp_path / "docs"
    line = refused(capsys, "ingest", str(docs), "--index-dir", str(fresh), "--meta", "t=\udcff")
    assert "--meta is not valid UTF-8" in line
    assert not fresh.exists()


@pytest.mark.parametrize("command", [["search", "cats"], ["fetch", "abc"], ["verify"]])
def test_a_damaged_collection_is_a_one_line_error(
    capsys: pytest.CaptureFixture[str], index: Path, command: list[str]
) -> None:
    (index / "default.sqlite3").write_bytes(os.urandom(8192))
    line = refused(capsys, *command, "--index-dir", str(index))
    assert "default.sqlite3" in line


def test_a_metadata_file_that_cannot_be_opened_is_a_one_line_error(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.md").write_text("Cats.\n", encoding="utf-8")
    (tmp_path / "idx" / "default.sqlite3").mkdir(parents=True)
    line = refused(capsys, "ingest", str(docs), "--index-dir", str(tmp_path / "idx"))
    assert "is a directory, not a groundkit collection" in line


def test_in_a_real_process_stderr_holds_one_line(index: Path) -> None:
    env = {**os.environ, "PYTHONIOENCODING": "utf-8"}
    grk = [sys.executable, "-m", "groundkit.cli"]
    at: list[bytes] = [b"--index-dir", os.fsencode(index)]
    argvs: list[list[bytes]] = [
        [b"search", b"cats", b"--where", DEEP.encode()],
        [b"search", b"\xed\xa0\x80"],
        [b"fetch", b"\xff\xfe"],
        [b"search", b"cats", b"--where", b"team=\xc3"],
    ]
    for argv in argvs:
        done = subprocess.run(
            [*grk, *argv, *at], capture_output=True, env=env, timeout=120, check=False
        )
        err = done.stderr.decode("utf-8")
        assert done.returncode == 2, err
        assert "Traceback" not in err and "Event loop is closed" not in err
        assert len(err.splitlines()) == 1 and err.startswith("grk: error: "), err


def test_a_document_postgres_cannot_store_is_named_not_quoted(
    tmp_path: Path, postgres_dsn: str, fresh: str
) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "nul.txt").write_text("qqmarkerqq holds a \x00 character\n", encoding="utf-8")
    argv = ["ingest", str(docs), "--base-dir", str(tmp_path), "-q", "--collection", fresh]
    done = subprocess.run(
        [sys.executable, "-m", "groundkit.cli", *argv, "--metadata-url", postgres_dsn],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 2, done.stderr
    assert done.stderr == (
        "grk: error: could not store 'docs/nul.txt': chunk 0 holds a NUL character (at 19), "
        "which PostgreSQL text cannot store\n"
    )


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["--top-k", "0"], "--top-k must be an integer from 1 to 1000, got 0"),
        (["--top-k", "5000"], "--top-k must be an integer from 1 to 1000, got 5000"),
        (
            ["--mmr", "2"],
            "--mmr is the relevance weight, a number from 0 to 1 (1: relevance only), got 2.0",
        ),
        (
            ["--mode", "dense", "--as-of", "2026-03-01"],
            "--as-of searches in bm25 mode only (vectors are kept for current versions "
            "alone), not --mode dense",
        ),
        (["--where", "team.zz=1"], "--where: filter 'team': unknown operator 'zz'"),
        (
            [
                "--collection",
                "default",
                "--collection",
                "default2",
                "--reorder",
                "lost-in-the-middle",
            ],
            "--reorder: searching several collections together does not take this option; "
            "search one --collection at a time",
        ),
    ],
    ids=["top-k-0", "top-k-big", "mmr", "as-of-dense", "where", "several"],
)
def test_search_errors_name_flags_not_python_arguments(
    capsys: pytest.CaptureFixture[str], index: Path, argv: list[str], expected: str
) -> None:
    line = refused(capsys, "search", "cats", "--index-dir", str(index), *argv)
    assert line.startswith("grk: error: " + expected)
    for python_name in ("top_k", "as_of", "filters", "expand=", "mode='", "embedder="):
        assert python_name not in line


@pytest.mark.parametrize("mode", ["dense", "hybrid"])
def test_a_vector_search_without_vectors_names_the_ingest_that_adds_them(
    capsys: pytest.CaptureFixture[str], index: Path, mode: str
) -> None:
    line = refused(capsys, "search", "cats", "--index-dir", str(index), "--mode", mode)
    assert line == (
        f"grk: error: --mode {mode} needs vectors, and collection 'default' has none; add "
        "them with 'grk ingest PATH --embedder MODEL' (for example --embedder "
        "all-MiniLM-L6-v2), then search again"
    )
    # The command it names is one grk's parser takes as written.
    from groundkit.cli import _ADD_VECTORS, _parser

    named = _parser().parse_args(_ADD_VECTORS.split()[1:])
    assert (named.command, named.path, named.embedder) == ("ingest", "PATH", "MODEL")


def test_the_query_is_named_as_the_cli_shows_it(
    capsys: pytest.CaptureFixture[str], index: Path
) -> None:
    line = refused(capsys, "search", "   ", "--index-dir", str(index))
    assert line == "grk: error: the query must be a non-empty string"


@pytest.mark.parametrize(
    ("value", "needle"),
    [
        ("2", "--min-relevance is a probability between 0 and 1"),
        ("0", "--min-relevance is a probability between 0 and 1"),
        ("auto", "--min-relevance applies to dense and hybrid searches"),
    ],
)
def test_min_relevance_is_named_by_its_flag(
    capsys: pytest.CaptureFixture[str], index: Path, value: str, needle: str
) -> None:
    # Refused before any model loads: the range, and BM25 (which has nothing to cut on).
    line = refused(capsys, "search", "cats", "--index-dir", str(index), "--min-relevance", value)
    assert needle in line
    assert "min_relevance" not in line


def test_min_relevance_that_is_no_number_is_a_usage_error(
    capsys: pytest.CaptureFixture[str], index: Path
) -> None:
    with pytest.raises(SystemExit) as stopped:
        main(["search", "cats", "--index-dir", str(index), "--min-relevance", "high"])
    assert stopped.value.code == 2
    assert "a probability between 0 and 1, or auto" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["--ray", "auto", "--ray-workers", "0"], "--ray-workers must be at least 1, got 0"),
        (["--ray", "  "], "--ray takes auto or a Ray cluster's HOST:PORT"),
    ],
    ids=["workers-0", "address-blank"],
)
def test_ray_flags_are_refused_by_their_names(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, argv: list[str], expected: str
) -> None:
    # Refused before Ray is imported or a collection opened.
    line = refused(capsys, "ingest", str(tmp_path), "--index-dir", str(tmp_path / "idx"), *argv)
    assert line == f"grk: error: {expected}"
    assert not (tmp_path / "idx").exists()


def test_ray_workers_that_is_no_number_is_a_usage_error(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    with pytest.raises(SystemExit) as stopped:
        main(["ingest", str(tmp_path), "--index-dir", str(tmp_path / "idx"), "--ray-workers", "x"])
    assert stopped.value.code == 2
    assert "argument --ray-workers: invalid int value: 'x'" in capsys.readouterr().err
    assert not (tmp_path / "idx").exists()


@pytest.mark.parametrize(
    ("argv", "argument"),
    [
        (["ingest", ""], "PATH|URL"),
        (["ingest", "--jsonl", ""], "--jsonl"),
        (["rebase", ""], "NEW_BASE"),
        (["ingest", "docs", "--base-dir", ""], "--base-dir"),
    ],
    ids=["ingest", "jsonl", "rebase", "base-dir"],
)
def test_an_empty_path_is_a_usage_error_not_the_current_directory(
    capsys: pytest.CaptureFixture[str],
    index: Path,
    monkeypatch: pytest.MonkeyPatch,
    argv: list[str],
    argument: str,
) -> None:
    # Run from the base directory: an empty path read as '.' would ingest it all.
    monkeypatch.chdir(index.parent)
    before = main(["collections", "--index-dir", str(index), "--json"])
    listed = capsys.readouterr().out
    with pytest.raises(SystemExit) as stopped:
        main([*argv, "--index-dir", str(index)])
    assert before == 0 and stopped.value.code == 2
    assert f"argument {argument}: is empty" in capsys.readouterr().err
    assert main(["collections", "--index-dir", str(index), "--json"]) == 0
    assert capsys.readouterr().out == listed  # nothing ingested, no base recorded


def test_a_refused_ingest_setting_names_its_flag(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.md").write_text("Cats purr.\n", encoding="utf-8")
    line = refused(
        capsys, "ingest", str(docs), "--index-dir", str(tmp_path / "idx"), "--ocr-languages", "!!"
    )
    assert line == (
        "grk: error: --ocr-languages '!!': expected tesseract language codes joined by '+', "
        "such as eng+deu"
    )
    assert not (tmp_path / "idx").exists()


def test_every_setting_flag_is_a_field_and_a_flag_of_grk_ingest() -> None:
    from groundkit.cli import SETTING_FLAGS, _parser
    from groundkit.config import ChunkingConfig, IngestConfig

    fields = set(IngestConfig.model_fields) | set(ChunkingConfig.model_fields)
    assert set(SETTING_FLAGS) <= fields
    ingest = next(
        action.choices["ingest"]
        for action in _parser()._actions
        if isinstance(action.choices, dict) and "ingest" in action.choices
    )
    flags = {flag for action in ingest._actions for flag in action.option_strings}
    assert set(SETTING_FLAGS.values()) <= flags


def test_a_refused_setting_lists_each_field_with_its_value() -> None:
    from groundkit import IngestConfig, InvalidSettingError

    with pytest.raises(InvalidSettingError) as refusal:
        IngestConfig(ocr_languages="eng+", keep_versions=-1)
    problems = {field: (reason, value) for field, reason, value in refusal.value.problems}
    assert set(problems) == {"ocr_languages", "keep_versions"}
    assert refusal.value.setting == "IngestConfig"
    assert problems["ocr_languages"][1] == "eng+"
    assert problems["keep_versions"][1] == -1
    assert isinstance(refusal.value, ValueError)


def test_a_cache_folder_under_an_unknown_home_is_a_one_line_error(
    capsys: pytest.CaptureFixture[str], index: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GROUNDKIT_CACHE_DIR", "~no-such-user-of-groundkit/cache")
    line = refused(capsys, "search", "cats", "--index-dir", str(index))
    assert "GROUNDKIT_CACHE_DIR='~no-such-user-of-groundkit/cache'" in line
    assert "full path" in line


def test_no_home_directory_for_the_caches_names_the_settings(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from groundkit.errors import ConfigurationError
    from groundkit.utils.cache_dir import default_cache_root

    def homeless() -> Path:
        raise RuntimeError("Could not determine home directory.")

    monkeypatch.setattr(Path, "home", staticmethod(homeless))
    with pytest.raises(ConfigurationError, match="set GROUNDKIT_CACHE_DIR"):
        default_cache_root({})
    assert default_cache_root({"XDG_CACHE_HOME": "/var/cache/u"}) == Path("/var/cache/u/groundkit")
    assert default_cache_root({"GROUNDKIT_CACHE_DIR": "/c"}) == Path("/c")


def test_control_characters_in_names_stay_on_their_line(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """A file name can hold a newline or a terminal escape: shown escaped, it can neither
    forge another report line nor drive the terminal."""
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "bad\nfailed: forged.txt").write_bytes(b"\xff\xfe")
    (docs / "tea\x1b[2J.txt").write_text("Green tea is steeped briefly.\n", encoding="utf-8")
    at = ["--index-dir", str(tmp_path / "idx"), "--base-dir", str(docs)]
    assert main(["ingest", str(docs), "-q", *at]) == 1
    _, err = capsys.readouterr()
    assert err.splitlines() == [err.rstrip("\n")]
    assert "bad\\nfailed: forged.txt" in err
    assert main(["ingest", str(docs), *at]) == 1
    out, _ = capsys.readouterr()
    [failed] = [line for line in out.splitlines() if "failed:" in line]
    assert "bad\\nfailed: forged.txt" in failed and "\x1b" not in out
    assert main(["search", "green tea", *at]) == 0
    out, _ = capsys.readouterr()
    assert "tea\\x1b[2J.txt [0:" in out and "\x1b" not in out
    # A base directory is stored and shown as well: escaped in the listing and a rebase.
    odd = tmp_path / "base\nforged: line\x1b[31m"
    odd.mkdir()
    (odd / "a.txt").write_text("Oolong is rolled.\n", encoding="utf-8")
    at = ["--index-dir", str(tmp_path / "idx2")]
    assert main(["ingest", str(odd), "--base-dir", str(odd), "-q", *at]) == 0
    assert main(["collections", *at]) == 0
    out, _ = capsys.readouterr()
    assert "base\\nforged: line\\x1b[31m" in out and "\x1b" not in out
    assert not any(line.startswith("forged") for line in out.splitlines())


def _grk(
    argv: list[str], env: dict[str, str], stdin: bytes | None = None, *, closed: bool = False
) -> subprocess.CompletedProcess[bytes]:
    """grk in a process of its own, fed ``stdin``, or with no stdin at all (``closed``)."""
    start = ["-c", _CLOSED_STDIN] if closed else ["-m", "groundkit.cli"]
    return subprocess.run(
        [sys.executable, *start, *argv],
        capture_output=True,
        env={**os.environ, **env},
        input=stdin,
        timeout=120,
        check=False,
    )


# grk as a shell runs it with ``<&-``: Python then starts with no sys.stdin at all.
_CLOSED_STDIN = (
    "import os, sys; os.close(0); sys.stdin = None; "
    "from groundkit.cli import main; raise SystemExit(main(sys.argv[1:]))"
)


def _ingested(tmp_path: Path, text: str) -> list[str]:
    """The flags of a collection holding ``docs/a.md`` with ``text``, ingested."""
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.md").write_text(text, encoding="utf-8")
    at = ["--index-dir", str(tmp_path / "idx"), "--base-dir", str(tmp_path)]
    assert main(["ingest", str(docs), "-q", *at]) == 0
    return at


def test_an_output_encoding_without_the_stored_characters_gets_escapes(tmp_path: Path) -> None:
    at = _ingested(tmp_path, "Café naïve — “quoted” fox.\n")
    for encoding in ("ascii", "latin-1"):
        env = {"PYTHONIOENCODING": encoding}
        human = _grk(["search", "fox", *at], env)
        assert human.returncode == 0 and b"Traceback" not in human.stderr, human.stderr
        assert "\\u201cquoted\\u201d" in human.stdout.decode(encoding)
        as_json = _grk(["search", "fox", "--json", *at], env)
        assert as_json.returncode == 0, as_json.stderr
        found = json.loads(as_json.stdout.decode(encoding))
        assert found["results"][0]["content"] == "Café naïve — “quoted” fox."
        from_stdin = _grk(["search", "-", *at], env, stdin="naïve".encode())
        assert from_stdin.returncode == 0, from_stdin.stderr
    bad = _grk(["search", "-", *at], {}, stdin=b"fo\xffx")
    assert bad.returncode == 2
    assert bad.stderr.decode() == (
        "grk: error: the query read from stdin is not valid UTF-8 (byte 0xff at character 2)\n"
    )


def test_a_closed_stdin_is_a_one_line_error(tmp_path: Path) -> None:
    at = _ingested(tmp_path, "Cats purr.\n")
    for argv, said in (
        (["search", "-"], "the query is read from stdin, but stdin is closed"),
        (["ingest", "--jsonl", "-"], "--jsonl - is read from stdin, but stdin is closed"),
        (["drop", "default"], "pass --yes to confirm"),
    ):
        done = _grk([*argv, *at], {}, closed=True)
        err = done.stderr.decode()
        assert done.returncode == 2 and "Traceback" not in err, err
        assert err.startswith("grk: error: ") and said in err and len(err.splitlines()) == 1


def test_an_index_dir_given_is_used_whatever_the_environment_says(
    capsys: pytest.CaptureFixture[str], index: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GROUNDKIT_METADATA_URL", "postgresql://nobody@127.0.0.1:1/nodb")
    monkeypatch.setenv("GROUNDKIT_STORAGE_URI", str(index.parent / "elsewhere"))
    assert main(["search", "cats", "--index-dir", str(index), "-q"]) == 0
    out, _ = capsys.readouterr()
    assert "a.md" in out
    assert not (index.parent / "elsewhere").exists()
    with pytest.raises(SystemExit) as usage:
        main(["search", "cats", "--index-dir", str(index), "--metadata-url", "postgresql://h/d"])
    _, err = capsys.readouterr()
    assert usage.value.code == 2
    assert err.splitlines()[-1] == "grk: error: give --index-dir or --metadata-url, not both"


@pytest.mark.parametrize(
    ("uri", "said"),
    [
        ("s3://", "names no bucket"),
        ("bogus://x/y", "unknown scheme 'bogus'"),
        ("file://relative/dir", "needs an absolute path"),
        ("", "storage_uri is empty"),
    ],
)
def test_a_storage_uri_that_names_no_place_is_refused_before_anything_is_made(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, uri: str, said: str
) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.md").write_text("Cats purr.\n", encoding="utf-8")
    idx = tmp_path / "idx"
    line = refused(capsys, "ingest", str(docs), "--index-dir", str(idx), "--storage-uri", uri)
    assert said in line
    assert not idx.exists() and sorted(p.name for p in tmp_path.iterdir()) == ["docs"]


def test_a_file_uri_is_the_directory_it_names(tmp_path: Path) -> None:
    from groundkit.storage.location import StoreLocation

    where = StoreLocation.resolve("x", index_dir=tmp_path, storage_uri=f"file://{tmp_path}/s")
    assert where.storage_uri == str(tmp_path / "s")


@pytest.mark.parametrize(
    "argv",
    [
        ["collections"],
        ["collections", "--json"],
        ["search", "cats"],
        ["ingest", "DOCS"],
        ["fetch", "0123"],
        ["serve"],
        ["inspect"],
        ["drop", "default", "--yes"],
    ],
    ids=lambda argv: "-".join(a for a in argv if a.isalpha()),
)
def test_an_index_dir_that_is_a_file_is_a_usage_error(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, argv: list[str]
) -> None:
    # Not "no collections" (exit 0), nor a failure to create one inside the file.
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.md").write_text("Cats purr at night.\n", encoding="utf-8")
    file = tmp_path / "notes.txt"
    file.write_text("not an index\n", encoding="utf-8")
    argv = [str(docs) if a == "DOCS" else a for a in argv]
    with pytest.raises(SystemExit) as stopped:
        main([*argv, "--index-dir", str(file), "--base-dir", str(tmp_path)])
    out, err = capsys.readouterr()
    assert stopped.value.code == 2 and out == ""
    assert f"grk: error: --index-dir {str(file)!r} is not a directory" in err, err
    assert "Traceback" not in err
    assert file.read_text(encoding="utf-8") == "not an index\n"


def test_grk_inspect_given_a_file_as_its_index_dir_names_it(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    file = tmp_path / "notes.txt"
    file.write_text("not an index\n", encoding="utf-8")
    with pytest.raises(SystemExit) as stopped:
        main(["inspect", str(file)])
    assert stopped.value.code == 2
    assert f"INDEX_DIR {str(file)!r} is not a directory" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("flags", "named"),
    [
        (["--host", "0.0.0.0"], "--host applies"),
        (["--port", "9000"], "--port applies"),
        (["--transport", "stdio", "--host", "127.0.0.1", "--port", "8000"], "--host and --port"),
    ],
    ids=["host", "port", "both-defaults-spelled-out"],
)
def test_http_flags_with_the_stdio_transport_are_refused(
    capsys: pytest.CaptureFixture[str], index: Path, flags: list[str], named: str
) -> None:
    line = refused(capsys, "serve", "--index-dir", str(index), *flags)
    assert named in line and "--transport http only" in line, line
