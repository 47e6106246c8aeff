"""Facts about the machine and run, for the headers of generated reports."""

from __future__ import annotations

import json
import os
import platform
import re
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

__all__ = [
    "REPO_ROOT",
    "carried_sections",
    "command_line",
    "default_scifact_dir",
    "load_average",
    "machine_lines",
    "markdown_table",
    "print_worker_result",
    "rss_mb",
    "source_state",
    "write_section",
]

REPO_ROOT = Path(__file__).resolve().parents[1]


def rss_mb(field: str) -> float:
    """A memory figure of this process from ``/proc/self/status`` (``VmRSS``, ``VmHWM``), MB."""
    for line in Path("/proc/self/status").read_text(encoding="utf-8").splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    return float("nan")


def print_worker_result(result: dict[str, object]) -> int:
    """End a benchmark worker process: its peak RSS joins ``result``, printed as one JSON line."""
    result["rss_peak_mb"] = rss_mb("VmHWM")
    print(json.dumps(result))
    return 0


def default_scifact_dir() -> Path:
    """``shared/eval/scifact`` beside the repository (where the data is kept, read-only)."""
    return REPO_ROOT.parent / "shared" / "eval" / "scifact"


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8").splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def load_average() -> str:
    """The 1, 5 and 15 minute load averages, two decimals each, or ``n/a``."""
    try:
        return " ".join(f"{v:.2f}" for v in os.getloadavg())
    except OSError:
        return "n/a"


def _git(*args: str) -> str:
    try:
        proc = subprocess.run(
            ["git", *args], cwd=REPO_ROOT, capture_output=True, text=True, check=False, timeout=10
        )
    except (OSError, subprocess.SubprocessError):
        return ""
    return proc.stdout.rstrip() if proc.returncode == 0 else ""


def source_state() -> str:
    """The commit measured, and any uncommitted changes to the library's source."""
    commit = _git("rev-parse", "--short", "HEAD").strip() or "unknown"
    dirty = [line[3:] for line in _git("status", "--porcelain", "--", "src").splitlines() if line]
    if not dirty:
        return f"groundkit at commit {commit}, source clean"
    return f"groundkit at commit {commit} plus uncommitted changes in: " + ", ".join(dirty)


def command_line() -> str:
    """How this process was started, as a ``python -m`` command."""
    module = sys.modules["__main__"].__spec__
    name = module.name if module is not None else sys.argv[0]
    return " ".join(["python -m", name, *sys.argv[1:]])


def machine_lines() -> list[str]:
    """Markdown bullet lines: CPU, cores, Python, platform, load, date."""
    return [
        f"- CPU: {_cpu_model()}, `nproc` = {len(os.sched_getaffinity(0))}",
        f"- Python {platform.python_version()} on {platform.system()} {platform.release()}",
        f"- load average at the end of the run: {load_average()}",
        f"- {source_state()}",
        f"- date: {datetime.now(UTC).isoformat(timespec='seconds')}",
    ]


def markdown_table(header: list[str], rows: list[list[str]]) -> str:
    """A GitHub-flavoured Markdown table."""
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines.extend("| " + " | ".join(row) + " |" for row in rows)
    return "\n".join(lines)


# A report that is regenerated whole (docs/benchmarks.md) can also hold sections
# written by other benchmarks; they sit between these markers and are carried over.
_SECTION = re.compile(r"<!-- section:([\w-]+) -->\n.*?<!-- /section:\1 -->\n", re.S)


def write_section(path: Path, name: str, lines: list[str]) -> None:
    """Put ``lines`` into ``path`` as the marked section ``name``, replacing an earlier one."""
    block = (
        f"<!-- section:{name} -->\n"
        + "\n".join(lines).rstrip("\n")
        + f"\n<!-- /section:{name} -->\n"
    )
    text = path.read_text(encoding="utf-8") if path.exists() else ""
    for match in _SECTION.finditer(text):
        if match.group(1) == name:
            text = text[: match.start()] + block + text[match.end() :]
            break
    else:
        text = (text.rstrip("\n") + "\n\n" if text.strip() else "") + block
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


def carried_sections(path: Path) -> str:
    """The marked sections of ``path``, to append when the rest of it is rewritten."""
    if not path.exists():
        return ""
    blocks = [m.group(0) for m in _SECTION.finditer(path.read_text(encoding="utf-8"))]
    return "\n" + "\n".join(blocks) if blocks else ""
