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
    assert len(blocks) == 3, "README has the BM25, the dense and the answer-checking example"
    outputs = []
    for number, block in enumerate(blocks):
        script = tmp_path / f"example{number}.py"
        script.write_text(block, encoding="utf-8")
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "LANCEDB_LOG": "error"}
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
    fields, highlights, check = outputs[2].splitlines()
    assert fields == "{'team': 'kitchen', 'title': 'Oolong', 'year': 2024}"
    assert highlights == "['Oolong', 'Oolong', 'roasted']"
    assert check.startswith("verified ")
