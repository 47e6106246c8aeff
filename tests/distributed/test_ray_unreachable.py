"""A Ray cluster that is not there, or does not answer, is said promptly (SPEC 2d.2).

No cluster is started here: a port nothing listens at (bound, noted, closed) stands for
a head that is down, and a socket that accepts connections but never speaks for a head
that hangs. Prompt means "before the timeout mark": a hang fails the test.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from groundkit import Collection
from groundkit.errors import ConfigurationError
from groundkit.ingestion import RayExecutor
from tests.distributed.cluster import driver_environment, grk_ingest

pytest.importorskip("ray")


def _dead_port() -> int:
    """A loopback port nothing listens at: bound to learn it, then closed."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def silent_head() -> Iterator[socket.socket]:
    """A listening socket that accepts (the kernel does) but never answers."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        s.listen(64)
        yield s


@pytest.fixture
def source(tmp_path: Path) -> Path:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.txt").write_text("hello retention\n")
    return docs


async def _ingest(source: Path, index: Path, executor: RayExecutor) -> None:
    async with Collection.open(index_dir=index, base_dir=source.parent) as col:
        await col.ingest(source, executor=executor)


@pytest.mark.timeout(30)
def test_an_address_nothing_listens_at_is_a_configuration_error(
    source: Path, tmp_path: Path
) -> None:
    address = f"127.0.0.1:{_dead_port()}"
    with pytest.raises(ConfigurationError) as caught:
        asyncio.run(_ingest(source, tmp_path / "index", RayExecutor(address)))
    text = str(caught.value)
    assert address in text
    assert "ray start --head" in text and "without --ray" in text


@pytest.mark.timeout(30)
def test_auto_pointing_at_a_dead_head_is_a_configuration_error(
    source: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # What a stale /tmp/ray/ray_current_cluster does: "auto" resolves to a head gone.
    dead = f"127.0.0.1:{_dead_port()}"
    monkeypatch.setenv("RAY_ADDRESS", dead)
    monkeypatch.setenv("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
    with pytest.raises(ConfigurationError, match="'auto'") as caught:
        asyncio.run(_ingest(source, tmp_path / "index", RayExecutor("auto")))
    assert dead in str(caught.value)


@pytest.mark.timeout(60)
def test_grk_ingest_ray_at_nothing_exits_2_with_one_error_line(
    source: Path, tmp_path: Path
) -> None:
    address = f"127.0.0.1:{_dead_port()}"
    done = subprocess.run(
        grk_ingest(source, tmp_path / "index", address),
        capture_output=True,
        text=True,
        env=driver_environment(),
        timeout=50,
    )
    assert done.returncode == 2, done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("grk: error:")]
    assert len(errors) == 1, done.stderr
    assert address in errors[0] and "without --ray" in errors[0]
    assert "Traceback" not in done.stderr


@pytest.mark.timeout(60)
def test_a_head_that_never_answers_is_bounded_by_connect_timeout(
    source: Path, tmp_path: Path, silent_head: socket.socket
) -> None:
    # In a process of its own: the abandoned ray.init thread must not outlive it either.
    port = silent_head.getsockname()[1]
    code = (
        "import asyncio, sys\n"
        "from pathlib import Path\n"
        "from groundkit import Collection\n"
        "from groundkit.errors import ConfigurationError\n"
        "from groundkit.ingestion import RayExecutor\n"
        "async def main():\n"
        f"    async with Collection.open(index_dir={str(tmp_path / 'index')!r},\n"
        f"                               base_dir={str(source.parent)!r}) as col:\n"
        f"        await col.ingest({str(source)!r},\n"
        f"            executor=RayExecutor('127.0.0.1:{port}', connect_timeout=2))\n"
        "try:\n"
        "    asyncio.run(main())\n"
        "except ConfigurationError as exc:\n"
        "    print('ERROR', exc)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env=driver_environment(),
        timeout=50,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("ERROR"), (done.stdout, done.stderr)
    assert f"127.0.0.1:{port}" in done.stdout and "within 2 s" in done.stdout


def test_connect_timeout_must_be_positive() -> None:
    for bad in (0, -1.0, float("nan"), True, "5"):
        with pytest.raises(ConfigurationError, match="connect_timeout"):
            RayExecutor("127.0.0.1:1", connect_timeout=bad)  # type: ignore[arg-type]


@pytest.mark.timeout(60)
def test_sigterm_ends_grk_ingest_stuck_connecting(
    source: Path, tmp_path: Path, silent_head: socket.socket
) -> None:
    port = silent_head.getsockname()[1]
    grk = subprocess.Popen(
        grk_ingest(source, tmp_path / "index", f"127.0.0.1:{port}"),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=driver_environment(),
        start_new_session=True,
    )
    held: list[socket.socket] = []
    try:
        # The reachability check connects and leaves; Ray's own connection comes
        # next: from then on grk is inside ray.init, waiting for an answer.
        silent_head.settimeout(40)
        while len(held) < 2:
            held.append(silent_head.accept()[0])
        assert grk.poll() is None, grk.stderr.read() if grk.stderr else ""
        grk.send_signal(signal.SIGTERM)
        returncode = grk.wait(timeout=30)
        stderr = grk.stderr.read() if grk.stderr else ""
        assert returncode == 128 + signal.SIGTERM, stderr
        assert "grk: terminated" in stderr
    finally:
        if grk.poll() is None:
            os.killpg(grk.pid, signal.SIGKILL)
            grk.wait()
        for conn in held:
            conn.close()
