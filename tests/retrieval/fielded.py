"""A corpus whose documents carry fields and sensitivity labels, for filter and clearance tests."""

from __future__ import annotations

from pathlib import Path

from groundkit import ChunkingConfig
from tests.support import write_tree

CHUNKS = ChunkingConfig(max_chars=400, overlap_chars=0)
QUERY = "solar panels"


def _doc(front: str, body: str) -> str:
    return f"---\n{front}\n---\n{body}\n"


def fielded_corpus() -> dict[str, str]:
    """30 "blue" documents that match the query strongly, 5 "red" ones that match it
    weakly, and labelled documents at every sensitivity level."""
    files: dict[str, str] = {}
    for i in range(30):
        files[f"blue/{i:02d}.md"] = _doc(
            f"team: blue\nyear: {2000 + i}\ntags: [solar, roof]",
            f"Solar panels and more solar panels on roof {i}. Solar panels everywhere.",
        )
    for i in range(5):
        files[f"red/{i}.md"] = _doc(
            f"team: red\nyear: {2010 + i}\ntags: [energy]\nrating: {i + 0.5}",
            f"A long note {i} about gardening, compost, tomatoes and beans, with one line on "
            "solar panels near the shed and much more about watering schedules.",
        )
    files["plain.txt"] = "Plain text about solar panels with no fields at all."
    for level in ("public", "internal", "confidential", "restricted"):
        files[f"labels/{level}.md"] = _doc(
            f"sensitivity: {level}\nteam: labels",
            f"The {level} memo on solar panels: budget for solar panels, codeword {level}.",
        )
    return files


def write_fielded(base: Path) -> Path:
    write_tree(base, fielded_corpus())
    return base
