"""Install torch for a dev install before the rest, choosing its build (``make test``).

From PyPI, torch on Linux is the CUDA build: several GB of GPU libraries that a machine
without an NVIDIA GPU never uses. So, unless the caller names a torch (``TORCH=...``),
on Linux without ``nvidia-smi`` this takes, in order:

1. a CPU build that pip can already reach without an index (a wheelhouse in pip's
   ``find-links``, as on the project's build machines);
2. the CPU build from PyTorch's own index, when that index answers;
3. otherwise nothing: the dev install then takes whatever the declared range resolves to.

Elsewhere (a GPU, macOS, Windows) it installs nothing and the range decides. Run with the
virtual environment's interpreter: ``python scripts/dev_torch.py [pip requirement...]``.
"""

from __future__ import annotations

import json
import platform
import shutil
import subprocess
import sys
import urllib.request

RANGE = "torch>=2.6,<3"  # the [local] extra's range (pyproject.toml)
CPU_INDEX = "https://download.pytorch.org/whl/cpu"


def pip(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pip", *args], capture_output=True, text=True, check=False
    )


def local_cpu_build() -> str | None:
    """``torch==<version>`` for a CPU build pip finds without any index, or None."""
    done = pip("install", "--dry-run", "--quiet", "--no-deps", "--no-index", "--report", "-", RANGE)
    if done.returncode != 0:
        return None
    try:
        report = json.loads(done.stdout)
        version = str(report["install"][0]["metadata"]["version"])
    except (ValueError, KeyError, IndexError, TypeError):
        return None
    return f"torch=={version}" if version.endswith("+cpu") else None


def index_answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/torch/", timeout=5):
            return True
    except (OSError, ValueError):
        return False


def choice() -> list[str]:
    """The pip arguments that install torch, or [] to leave it to the declared range."""
    if platform.system() != "Linux" or shutil.which("nvidia-smi"):
        return []
    found = local_cpu_build()
    if found is not None:
        return [found]
    if index_answers(CPU_INDEX):
        return [RANGE, "--index-url", CPU_INDEX]
    return []


def main(argv: list[str]) -> int:
    args = argv or choice()
    if not args:
        print("torch: left to the declared range")
        return 0
    print("torch:", " ".join(args))
    return subprocess.call([sys.executable, "-m", "pip", "install", "--quiet", *args])


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
