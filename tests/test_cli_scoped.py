"""grk with --where, --clearance and several --collection options."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from groundkit.cli import main
from tests.retrieval.fielded import write_fielded
from tests.support import write_tree


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def index(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> list[str]:
    base = write_fielded(tmp_path / "base")
    write_tree(base / "extra", {"e.md": "---\nteam: red\n---\nsolar panels in the extra set\n"})
    opts = ["--index-dir", str(tmp_path / "idx"), "--base-dir", str(base)]
    assert run(capsys, "ingest", str(base / "red"), *opts)[0] == 0
    assert run(capsys, "ingest", str(base / "blue"), *opts)[0] == 0
    assert run(capsys, "ingest", str(base / "labels"), *opts)[0] == 0
    assert run(capsys, "ingest", str(base / "extra"), *opts, "--collection", "extra")[0] == 0
    return opts


def results(out: str) -> list[dict[str, Any]]:
    return list(json.loads(out)["results"])


@pytest.mark.parametrize(
    "where",
    [
        ["team=red"],
        ["team.in=[red, green]"],
        ['{"team": {"eq": "red"}}'],
        ["rating.gte=0.5", "rating.lte=4.5"],
        ['{"rating": {"between": [0, 5]}}'],
    ],
)
def test_where_forms(
    index: list[str], capsys: pytest.CaptureFixture[str], where: list[str]
) -> None:
    args = [a for w in where for a in ("--where", w)]
    code, out, _ = run(capsys, "search", "solar panels", *index, "--top-k", "5", "--json", *args)
    assert code == 0
    found = results(out)
    assert len(found) == 5
    assert {r["fields"]["team"] for r in found} == {"red"}


@pytest.mark.parametrize(
    ("where", "needle"),
    [
        ("colour=red", "unknown field 'colour'"),
        ("team.like=red", "unknown operator 'like'"),
        ("{not json", "not valid JSON"),
        ("team", "expected FIELD=VALUE"),
        ("year.gt=soon", "a str value for a field holding number"),
        ('{"source": {"glob": "red/[z-a].md"}}', "glob 'red/[z-a].md': the range z-a runs"),
        ("source.glob=red/[!]", "glob 'red/[!]': the '[' at character 4 opens a class"),
        # Refused as the library refuses them, never dropped into an unfiltered search.
        ('{"source": {}}', "filter 'source' has no conditions"),
        ('{"nosuch": {}}', "filter 'nosuch' has no conditions"),
        ("{}", "the filter has no conditions"),
        ('{"source": "x", "source": "y"}', "the key 'source' is given twice"),
        ('{"year": {"gte": 1, "gte": 2}}', "the key 'gte' is given twice"),
    ],
)
def test_bad_where_is_an_error(
    index: list[str], capsys: pytest.CaptureFixture[str], where: str, needle: str
) -> None:
    code, out, err = run(capsys, "search", "solar", *index, "--where", where)
    assert code == 2 and out == ""
    assert needle in err and "Traceback" not in err


def test_clearance(index: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "search", "memo codeword", *index, "--top-k", "50", "--json")
    everything = {r["citation"]["source"] for r in results(out)}
    assert "labels/restricted.md" in everything
    code, out, _ = run(
        capsys,
        "search",
        "memo codeword",
        *index,
        "--top-k",
        "50",
        "--json",
        "--clearance",
        "internal",
    )
    cleared = {r["citation"]["source"] for r in results(out)}
    assert code == 0 and cleared == everything - {"labels/confidential.md", "labels/restricted.md"}
    secret = next(
        r for r in results(run(capsys, "search", "codeword restricted", *index, "--json")[1])
    )
    code, _, err = run(
        capsys, "fetch", str(secret["citation"]["chunk_id"]), *index, "--clearance", "public"
    )
    assert code == 2 and "no chunk" in err
    with pytest.raises(SystemExit) as usage:
        main(["search", "x", *index, "--clearance", "secret"])
    assert usage.value.code == 2 and "invalid choice: 'secret'" in capsys.readouterr().err


def test_several_collections(index: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["search", "solar panels", *index, "--collection", "default", "--collection", "extra"]
    code, out, _ = run(capsys, *argv, "--json", "--where", "team=red")
    assert code == 0
    payload = json.loads(out)
    assert payload["collections"] == ["default", "extra"] and payload["failures"] == []
    assert {r["collection"] for r in payload["results"]} == {"default", "extra"}
    code, again, _ = run(capsys, *argv, "--json", "--where", "team=red")
    assert json.loads(again)["results"] == payload["results"]
    code, text, _ = run(capsys, *argv)
    assert code == 0 and "extra: extra/e.md" in text
    with pytest.raises(SystemExit) as usage:
        main(["verify", *index, "--collection", "default", "--collection", "extra"])
    assert usage.value.code == 2 and "takes one --collection" in capsys.readouterr().err
    code, _, err = run(capsys, *argv, "--collection", "missing")
    assert code == 2 and "no collection 'missing'" in err


def test_of_several_collections_one_that_cannot_answer_is_a_failure_line(
    index: list[str], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    # A damaged collection among several is reported and the others still answer, exit 1;
    # alone, or all of them, it is an error (exit 2); a name that is no collection, too.
    (tmp_path / "idx" / "broken.sqlite3").write_bytes(b"not a database at all" * 10)
    names = ["--collection", "default", "--collection", "broken", "--collection", "extra"]
    code, out, err = run(capsys, "search", "solar panels", *index, *names, "--json")
    payload = json.loads(out)
    assert code == 1 and err == ""
    assert payload["collections"] == ["default", "broken", "extra"]
    ((failure),) = payload["failures"]
    assert failure["collection"] == "broken" and failure["error"] == "StorageError"
    assert "not an SQLite database" in failure["detail"]
    assert {r["collection"] for r in payload["results"]} == {"default", "extra"}
    code, text, _ = run(capsys, "search", "solar panels", *index, *names)
    assert code == 1 and "  failed: collection 'broken': StorageError: " in text
    assert "extra: extra/e.md" in text
    # Dense without vectors anywhere: no collection could be searched.
    code, _, err = run(
        capsys,
        "search",
        "solar",
        *index,
        "--collection",
        "default",
        "--collection",
        "extra",
        "--mode",
        "dense",
    )
    assert code == 2 and err.startswith("grk: error: no collection could be searched (default: ")
    assert "--mode dense needs vectors" in err
    code, _, err = run(capsys, "search", "solar", *index, "--collection", "broken")
    assert code == 2 and "not an SQLite database" in err
    code, _, err = run(capsys, "search", "solar", *index, *names, "--collection", "nope")
    assert code == 2 and "no collection 'nope'" in err
