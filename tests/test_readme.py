"""The README's Python example runs exactly as written."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def test_readme_python_examples_run(tmp_path: Path) -> None:
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), re.S)
    assert len(blocks) == 9, (
        "README has the BM25, dense, sync, in-memory, LangChain, LlamaIndex, Haystack, "
        "office-formats and answer-checking examples"
    )
    outputs = []
    for number, block in enumerate(blocks):
        script = tmp_path / f"example{number}.py"
        script.write_text(block, encoding="utf-8")
        env = {
            **os.environ,
            "HF_HUB_OFFLINE": "1",
            "LANCEDB_LOG": "error",
            "HAYSTACK_TELEMETRY_ENABLED": "False",
        }
        done = subprocess.run(
            [sys.executable, str(script)],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            check=False,
            env=env,
        )
        assert done.returncode == 0, done.stderr
        outputs.append(done.stdout)
    assert "added: ['notes/tea.md']" in outputs[0]
    assert "verified=True" in outputs[0]
    assert outputs[0].rstrip().endswith("verified")
    assert outputs[1].startswith("notes/tea.md ")
    fields, highlights, check = outputs[8].splitlines()
    assert fields == "{'team': 'kitchen', 'title': 'Oolong', 'year': 2024}"
    assert highlights == "['Oolong', 'Oolong', 'roasted']"
    assert check.startswith("verified ")
    kettle, verified = outputs[2].splitlines()
    assert kettle == "notes/kettle.md verified" and verified == "True"
    added, top, changed = outputs[3].splitlines()
    assert added == "['record://TCK-1', 'record://TCK-2']"
    assert top == "record://TCK-1 {'floor': 2} verified"
    assert changed == "['record://TCK-2'] ['record://TCK-1']"
    assert outputs[4].strip() == "record://faq-1 verified"
    assert outputs[5].strip() == "0 27 record://faq-2"
    assert outputs[6].strip() == "record://faq-1"
    added_files, docx_hit, pptx_hit = outputs[7].splitlines()
    assert added_files == "['handbook/oncall.docx', 'handbook/roadmap.pptx']"
    assert docx_hit == "handbook/oncall.docx None groundkit-docx/1"
    assert pptx_hit == "handbook/roadmap.pptx 2 groundkit-pptx/1"
