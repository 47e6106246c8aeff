"""The layering of docs/architecture.md holds, and the check really catches a breach.

``lint-imports`` (import-linter) reads the contracts in pyproject.toml. The second
test copies the package, adds one upward import to a storage module, and expects
the same contracts to fail on the copy: a checker that cannot fail proves nothing.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
LINT = Path(sys.executable).with_name("lint-imports")


def _lint(package_root: Path, config: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(package_root)}
    return subprocess.run(
        [str(LINT), "--config", str(config), "--no-cache"],
        capture_output=True,
        text=True,
        env=env,
        cwd=package_root,
        timeout=300,
    )


@pytest.fixture(scope="module")
def lint_available() -> None:
    if not LINT.exists():
        pytest.fail("lint-imports is missing: pip install -e '.[dev]'")


def test_the_contracts_hold(lint_available: None) -> None:
    done = _lint(ROOT / "src", ROOT / "pyproject.toml")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "0 broken" in done.stdout


@pytest.mark.parametrize(
    ("module", "wrong_import", "contract"),
    [
        # storage importing upwards into ingestion
        ("storage/sqlite.py", "import groundkit.ingestion.indexer", "layers import downwards"),
        # the lexical side reaching a storage backend
        ("lexical/bm25.py", "import groundkit.storage.sqlite", "lexical side knows nothing"),
        # a core module reaching a surface
        ("retrieval/fusion.py", "import groundkit.cli", "Only the surfaces"),
        # the facade importing a backend library directly
        ("collection.py", "import lancedb", "Storage backends stay"),
        # the async facade reaching up into the blocking one
        ("collection.py", "import groundkit.sync", "layers import downwards"),
        # a framework retriever reaching the MCP service
        ("integrations/_common.py", "import groundkit.service", "Only the surfaces"),
    ],
)
def test_a_wrong_import_breaks_them(
    lint_available: None, tmp_path: Path, module: str, wrong_import: str, contract: str
) -> None:
    copy = tmp_path / "src"
    shutil.copytree(
        ROOT / "src" / "groundkit", copy / "groundkit", ignore=shutil.ignore_patterns("__pycache__")
    )
    target = copy / "groundkit" / module
    text = target.read_text(encoding="utf-8")
    marker = "from __future__ import annotations\n"
    target.write_text(text.replace(marker, marker + wrong_import + "\n", 1), encoding="utf-8")
    done = _lint(copy, ROOT / "pyproject.toml")
    assert done.returncode != 0, done.stdout
    broken = done.stdout[done.stdout.index("Broken contracts") :]
    assert contract in broken, done.stdout
