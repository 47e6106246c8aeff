"""Run the README's code blocks marked ``<!-- base install -->`` with an installed groundkit.

CI installs the wheel, without extras, into a fresh virtual environment and runs these
blocks with it, so the README's promise that they work on ``pip install groundkit`` is
checked against what a user gets (tests/test_readme.py runs every block with the dev
install). Python blocks run in order in one directory, since they build on each other;
each bash block runs in a directory of its own, with the environment's ``grk`` first on
the PATH.

    python scripts/readme_blocks.py --bin /path/to/venv/bin [--readme README.md]
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

BLOCK = re.compile(r"(?:<!-- (?P<note>[^\n]*?) -->\n)?```(?P<lang>\w*)\n(?P<body>.*?)```", re.S)
MARK = "base install"


def base_blocks(readme: Path) -> list[tuple[str, str]]:
    """The (language, body) of every block the README marks as running on a base install."""
    text = readme.read_text(encoding="utf-8")
    return [(m["lang"], m["body"]) for m in BLOCK.finditer(text) if m["note"] == MARK]


def run(readme: Path, bin_dir: Path, work: Path) -> int:
    env = {
        **os.environ,
        "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
        "HF_HUB_OFFLINE": "1",
    }
    env.pop("PYTHONPATH", None)
    shared = work / "python"
    shared.mkdir()
    blocks = base_blocks(readme)
    if not blocks:
        print(f"no block of {readme} is marked <!-- {MARK} -->", file=sys.stderr)
        return 1
    for number, (lang, body) in enumerate(blocks, 1):
        if lang == "python":
            script = shared / f"block{number}.py"
            script.write_text(body, encoding="utf-8")
            argv, cwd = [str(bin_dir / "python"), str(script)], shared
        else:
            cwd = work / f"bash{number}"
            cwd.mkdir()
            argv = ["bash", "-euo", "pipefail", "-c", body]
        done = subprocess.run(
            argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=600, check=False
        )
        first = body.strip().splitlines()[0]
        if done.returncode != 0:
            print(f"FAILED block {number} ({lang}): {first}\n{body}\n{done.stderr}")
            return 1
        print(f"ok block {number} ({lang}): {first}")
    print(f"{len(blocks)} README blocks ran on the base install")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bin", type=Path, required=True, help="the environment's bin directory")
    parser.add_argument("--readme", type=Path, default=Path(__file__).parents[1] / "README.md")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="readme-base-") as work:
        return run(args.readme.resolve(), args.bin.resolve(), Path(work))


if __name__ == "__main__":
    raise SystemExit(main())
