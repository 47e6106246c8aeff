"""What a user's pip makes of the package: the extras resolve from the public index alone.

A fresh virtual environment, the machine's own wheel directory and pip configuration
turned off, and ``pip install --dry-run`` of ``.[local,dense]``: the resolver must find a
torch inside the range the package declares (not one exact build), with
sentence-transformers and LanceDB beside it. Nothing is installed; pip reads the
packages' metadata from PyPI, so the test needs the registry (it skips without it, except
in CI, where a missing registry is a failure).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tomllib
import venv
import zipfile
from pathlib import Path

import httpx
import pytest
from packaging.requirements import Requirement
from packaging.version import Version

from tests.services import unavailable

ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.slow


def _pypi_reachable() -> bool:
    try:
        return httpx.head("https://pypi.org/simple/torch/", timeout=10).status_code < 500
    except httpx.HTTPError:
        return False


def _declared_torch() -> Requirement:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    (torch,) = [
        Requirement(r)
        for r in project["optional-dependencies"]["local"]
        if Requirement(r).name == "torch"
    ]
    return torch


def test_the_local_extra_declares_a_torch_range() -> None:
    torch = _declared_torch()
    assert not any(spec.operator in ("==", "===") for spec in torch.specifier), torch
    assert len(torch.specifier) >= 2, f"an upper and a lower bound: {torch}"


def test_local_and_dense_resolve_from_the_public_index(tmp_path: Path) -> None:
    if not _pypi_reachable():
        unavailable("the PyPI registry (https://pypi.org) is not reachable")
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True)
    pip = env_dir / "bin" / "pip"
    report = tmp_path / "report.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    env["PIP_CONFIG_FILE"] = os.devnull  # no machine-wide index or wheel directory
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    done = subprocess.run(
        [
            str(pip),
            "install",
            "--dry-run",
            "--quiet",
            "--report",
            str(report),
            f"{ROOT}[local,dense]",
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=900,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    chosen = {
        item["metadata"]["name"].lower(): item
        for item in json.loads(report.read_text(encoding="utf-8"))["install"]
    }
    assert {"torch", "sentence-transformers", "lancedb"} <= set(chosen)
    torch = chosen["torch"]
    assert Version(torch["metadata"]["version"]) in _declared_torch().specifier
    # From the public index, not a file on this machine.
    assert torch["download_info"]["url"].startswith("https://"), torch["download_info"]


def _source_copy(target: Path) -> Path:
    """The files a source distribution builds from, without anything built in place."""
    target.mkdir(parents=True)
    for name in ("pyproject.toml", "setup.py", "README.md", "LICENSE"):
        (target / name).write_bytes((ROOT / name).read_bytes())
    shutil.copytree(
        ROOT / "src", target / "src", ignore=shutil.ignore_patterns("*.so", "__pycache__")
    )
    return target


@pytest.mark.parametrize("compiler", ["cc", "false"])
def test_the_compiled_kernel_is_built_when_it_can_be(tmp_path: Path, compiler: str) -> None:
    # With a C compiler the wheel carries the BM25 kernel; without one (CC=false) the
    # build still succeeds and the package searches with numpy (the same results).
    source = _source_copy(tmp_path / "src-tree")
    env = dict(os.environ, CC=compiler, PIP_NO_INDEX="1")
    command = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation"]
    proc = subprocess.run(
        [*command, "-q", "-w", str(tmp_path / "wheels"), str(source)],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    (wheel,) = (tmp_path / "wheels").glob("groundkit-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "groundkit/lexical/bm25.py" in names
    kernels = [n for n in names if n.startswith("groundkit/lexical/_kernel") and n.endswith(".so")]
    assert len(kernels) == (1 if compiler == "cc" else 0)
