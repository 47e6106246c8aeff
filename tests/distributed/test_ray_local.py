"""``RayExecutor("local")``: a throwaway Ray instance started by the ingest itself.

Its processes are started to die with the thread that started them (Linux
``PR_SET_PDEATHSIG``), so the thread that joins must outlive the ingest: each case runs
in a process of its own, because a driver whose instance dies exits on the spot.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.distributed.cluster import driver_environment, grk_ingest

pytest.importorskip("ray")


@pytest.fixture
def source(tmp_path: Path) -> Path:
    docs = tmp_path / "docs"
    docs.mkdir()
    for i in range(12):
        (docs / f"note{i:02d}.md").write_text(
            f"# Note {i}\n\nParcel {i} ships on day {i} of the refund window.\n",
            encoding="utf-8",
        )
    return docs


@pytest.mark.timeout(180)
def test_a_local_instance_lives_until_the_ingest_is_done(source: Path, tmp_path: Path) -> None:
    code = (
        "import groundkit.sync as gks\n"
        "from groundkit.ingestion import RayExecutor\n"
        f"with gks.Collection.open(index_dir={str(tmp_path / 'index')!r},\n"
        f"                         base_dir={str(source.parent)!r}) as col:\n"
        f"    report = col.ingest({str(source)!r},\n"
        "        executor=RayExecutor('local', files_per_task=2))\n"
        "    print('added', len(report.added), 'failed', len(report.failed))\n"
        "    hit = col.search('parcel 7 ships', top_k=1).results[0]\n"
        "    print('top', hit.source, col.fetch_chunk(hit.chunk_id).verification)\n"
        "    # A second ingest in the same process starts (and ends) an instance again.\n"
        f"    open({str(source / 'extra.md')!r}, 'w').write('# Extra\\n\\nLate parcel.\\n')\n"
        f"    again = col.ingest({str(source)!r}, executor=RayExecutor('local'))\n"
        "    print('again', len(again.added), len(again.unchanged))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env=driver_environment(),
        timeout=170,
    )
    assert done.returncode == 0, (done.stdout, done.stderr)
    lines = done.stdout.splitlines()
    assert "added 12 failed 0" in lines
    assert "top docs/note07.md verified" in lines
    assert "again 1 12" in lines


@pytest.mark.timeout(180)
def test_grk_ingest_ray_local(source: Path, tmp_path: Path) -> None:
    index = tmp_path / "index"
    done = subprocess.run(
        grk_ingest(source, index, "local"),
        capture_output=True,
        text=True,
        env=driver_environment(),
        timeout=170,
    )
    assert done.returncode == 0, done.stderr
    assert "added 12," in done.stdout and "failed 0" in done.stdout
