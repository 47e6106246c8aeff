"""What a new process loads: ``grk --version`` and ``grk search`` import only what they use.

These check which modules are loaded, never how long anything took (timings are
evals/bench_coldstart.py's).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from groundkit import cli
from groundkit.cli import main

# Loaded by `grk search` in BM25 mode: none of them is needed to answer it.
NOT_FOR_SEARCH = (
    "httpx",
    "yaml",
    "rapidfuzz",
    "regex",
    "groundkit.ingestion.indexer",
    "groundkit.ingestion.url_loader",
    "groundkit.extraction",
    "groundkit.verification.verifier",
    "groundkit.service.server",
    "groundkit.service.collections",
    "numpy.ma",  # np.unique imports it: about 18 ms
)


def _loaded_after(argv: list[str], cwd: Path) -> tuple[str, set[str]]:
    """Run ``grk argv`` in a fresh interpreter; its stdout and the modules it loaded."""
    code = (
        "import json, sys\n"
        "from groundkit.cli import main\n"
        f"code = main({argv!r})\n"
        "print('\\nMODULES ' + json.dumps(sorted(sys.modules)))\n"
        "sys.exit(code)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=cwd, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr[-2000:]
    out, _, modules = done.stdout.rpartition("\nMODULES ")
    return out, set(json.loads(modules))


def _top(modules: set[str]) -> set[str]:
    return {m.split(".")[0] for m in modules}


def test_version_loads_nothing_it_does_not_print(tmp_path: Path) -> None:
    out, modules = _loaded_after(["--version"], tmp_path)
    assert out.startswith("grk (groundkit) ") and "BM25 kernel: " in out
    assert not _top(modules) & {
        "numpy",
        "pydantic",
        "httpx",
        "aiosqlite",
        "opentelemetry",
        "asyncio",
        "tomllib",
    }
    assert not {m for m in modules if m.startswith("groundkit.")} - {
        "groundkit.cli",
        "groundkit.errors",
        "groundkit.lexical",
        "groundkit.lexical._kernel",
        "groundkit.service",
        "groundkit.service.moments",
        "groundkit.storage",
        "groundkit.storage.versions",
        "groundkit.utils",
        "groundkit.utils.lazy",
        "groundkit.utils.text",
    }


def test_version_says_what_the_parser_says(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--version"]) == 0
    quick = capsys.readouterr().out
    # Anything besides the bare option goes through the full parser's version action.
    with pytest.raises(SystemExit) as exited:
        main(["--quiet", "--version"])
    assert exited.value.code == 0
    assert capsys.readouterr().out == quick
    from groundkit import __version__
    from groundkit.lexical.bm25 import compiled_kernel

    assert quick.startswith(f"grk (groundkit) {__version__}, BM25 kernel: ")
    assert ("BM25 kernel: compiled" in quick) == compiled_kernel()


def test_only_the_version_option_makes_the_version_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Making it reads the distribution's metadata: other commands must not pay for it."""
    (tmp_path / "a.md").write_text("Cats are small carnivorous mammals.\n", encoding="utf-8")
    common = ["--index-dir", str(tmp_path / "idx"), "--base-dir", str(tmp_path), "-q"]

    def refuse() -> str:
        raise AssertionError("the version line was made")

    monkeypatch.setattr(cli, "_version_line", refuse)
    assert main(["ingest", str(tmp_path / "a.md"), *common]) == 0
    assert main(["search", "cats", *common]) == 0
    assert "a.md" in capsys.readouterr().out
    with pytest.raises(AssertionError, match="version line"):
        main(["--quiet", "--version"])


def test_search_loads_neither_ingest_nor_verification(tmp_path: Path) -> None:
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "a.md").write_text("Cats are small carnivorous mammals.\n", encoding="utf-8")
    (corpus / "b.md").write_text("Dogs are loyal.\n", encoding="utf-8")
    common = ["--index-dir", str(tmp_path / "idx"), "--base-dir", str(tmp_path)]
    assert main(["ingest", str(corpus), *common, "-q"]) == 0
    # A changed file retires its old chunk: the index has an overlay to read.
    (corpus / "b.md").write_text("Dogs are loyal companions.\n", encoding="utf-8")
    assert main(["ingest", str(corpus), *common, "-q"]) == 0
    out, modules = _loaded_after(["search", "cats", *common, "--json"], tmp_path)
    assert json.loads(out)["results"][0]["citation"]["source"] == "corpus/a.md"
    loaded = {m for m in NOT_FOR_SEARCH if m in modules or m in _top(modules)}
    assert not loaded


async def test_open_readies_the_lexical_index_of_a_written_collection(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A collection kept in local files opens its lexical index in ``Collection.open``
    (a fixed cost once its packs' checks are remembered): the first search loads no
    pack. A collection nothing was written to yet opens none."""
    from groundkit import Collection
    from groundkit.storage import check_cache, segments

    loads: list[str] = []
    real = segments.LocalSegments._load_pack

    def counted(self: segments.LocalSegments, entry: dict[str, Any], check: Any) -> Any:
        loads.append(str(entry["name"]))
        return real(self, entry, check)

    monkeypatch.setattr(segments.LocalSegments, "_load_pack", counted)
    # Files written this instant are recorded too (the one-second rule is tested apart).
    monkeypatch.setattr(check_cache, "SETTLED_NS", 0)
    async with Collection.open(tmp_path / "empty", base_dir=tmp_path) as col:
        assert loads == []
    async with Collection.open(tmp_path / "idx", base_dir=tmp_path) as col:
        await col.add_documents([{"id": "a", "text": "Cats are small carnivorous mammals."}])
    loads.clear()
    # No process has checked the new packs yet: open reads none, the first search does.
    async with Collection.open(tmp_path / "idx", base_dir=tmp_path) as col:
        assert loads == []
        await col.search("cats")
    assert loads
    loads.clear()
    async with Collection.open(tmp_path / "idx", base_dir=tmp_path) as col:
        opened = list(loads)
        response = await col.search("cats")
    assert opened and loads == opened  # segment and vocabulary, at open only
    assert len(response.results) == 1
