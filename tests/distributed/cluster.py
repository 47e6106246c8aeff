"""A local Ray cluster for tests and benchmarks: a head and worker nodes, 127.0.0.1 only.

Each node is a ``ray start --block`` process in a session of its own, so it and every
process it starts (raylet, workers, agents) can be found by session id and stopped by
PID. Ray rewrites a loopback ``--node-ip-address`` or ``--address`` into the host's
outward address (``ray._private.services.resolve_ip_for_localhost``); ``ray_node.py``
keeps the address as given, and with the node's IP at 127.0.0.1 Ray's gRPC servers
and agents listen there. The driver side (this process) resolves addresses the same
way unless ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0`` (set by ``loopback_driver``).
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

__all__ = [
    "RayCluster",
    "driver_environment",
    "grk_ingest",
    "listening_sockets",
    "loopback_driver",
    "not_on_loopback",
    "session_pids",
    "start_cluster",
]

_NODE = Path(__file__).with_name("ray_node.py")
_SRC = Path(__file__).resolve().parents[2] / "src"
_LOOPBACK = {"127.0.0.1", "::ffff:127.0.0.1"}


# The cluster's token (Ray's token authentication), the same for every process of this
# test run and nowhere on disk; no ~/.ray/auth_token is read or written.
TOKEN = secrets.token_hex(32)
_AUTH = {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": TOKEN}


def loopback_driver() -> None:
    """Make this process's Ray keep a 127.0.0.1 cluster address as given (before or
    after ``import ray``) and present the cluster's token."""
    os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
    os.environ["RAY_USAGE_STATS_ENABLED"] = "0"
    os.environ.update(_AUTH)
    constants = sys.modules.get("ray._private.ray_constants")
    if constants is not None:
        constants.ENABLE_RAY_CLUSTER = False  # type: ignore[attr-defined]


def node_environment() -> dict[str, str]:
    """What every node process runs with: this tree's groundkit, no hub, no reporting,
    node loss noticed within a few seconds."""
    env = dict(os.environ)
    env.pop("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", None)
    env.update(
        PYTHONPATH=os.pathsep.join(p for p in (str(_SRC), env.get("PYTHONPATH", "")) if p),
        RAY_USAGE_STATS_ENABLED="0",
        HF_HUB_OFFLINE="1",
        LANCEDB_LOG="error",
        RAY_health_check_period_ms="1000",
        RAY_health_check_failure_threshold="3",
        RAY_health_check_timeout_ms="1000",
        **_AUTH,
    )
    return env


def driver_environment() -> dict[str, str]:
    """What a driver in a process of its own runs with: no hub, no reporting, a
    loopback address kept as given."""
    return {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
        "RAY_USAGE_STATS_ENABLED": "0",
    }


def grk_ingest(source: Path, index: Path, address: str) -> list[str]:
    """The ``grk ingest SOURCE --ray ADDRESS`` command line, run by this Python."""
    return [
        sys.executable,
        "-m",
        "groundkit.cli",
        "ingest",
        str(source),
        "--index-dir",
        str(index),
        "--base-dir",
        str(source.parent),
        "--ray",
        address,
    ]


@dataclass
class RayCluster:
    address: str
    temp_dir: Path
    head: subprocess.Popen[bytes]
    workers: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def node_sessions(self) -> list[int]:
        return [self.head.pid, *(w.pid for w in self.workers)]

    def add_worker(self, num_cpus: int) -> subprocess.Popen[bytes]:
        """Start a worker node and wait until the cluster counts every node alive."""
        proc = _ray_start(
            ["--address", self.address, "--num-cpus", str(num_cpus)], self.temp_dir, "worker"
        )
        self.workers.append(proc)
        nodes = 1 + len(self.workers)
        _wait(lambda: _alive_nodes(self.address) == nodes, 90, "the worker node to join")
        return proc

    def kill_worker(self, proc: subprocess.Popen[bytes]) -> None:
        """SIGKILL every process of a worker node (its session), as a lost machine."""
        _kill_session(proc)
        self.workers.remove(proc)

    def stop(self) -> None:
        for proc in [*self.workers, self.head]:
            _kill_session(proc)
        shutil.rmtree(self.temp_dir, ignore_errors=True)


def _kill_session(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL a node's process group, then any process left in its session, and wait
    until none is left."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    deadline = time.monotonic() + 30
    while (left := session_pids(proc.pid)) and time.monotonic() < deadline:
        for pid in left:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.2)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(30)


def start_cluster(head_cpus: int, worker_cpus: list[int]) -> RayCluster:
    """A head node and one worker node per entry of ``worker_cpus``, all on 127.0.0.1."""
    # Short: Ray's unix socket paths under it must stay within ~107 characters.
    temp_dir = Path(tempfile.mkdtemp(prefix="grk-ray-", dir="/tmp"))
    port = _free_port()
    head = _ray_start(
        [
            "--head",
            "--port",
            str(port),
            "--num-cpus",
            str(head_cpus),
            "--include-dashboard=false",
            "--temp-dir",
            str(temp_dir),
        ],
        temp_dir,
        "head",
    )
    cluster = RayCluster(address=f"127.0.0.1:{port}", temp_dir=temp_dir, head=head)
    try:
        _wait(lambda: _alive_nodes(cluster.address) >= 1, 90, "the head node")
        for cpus in worker_cpus:
            cluster.add_worker(cpus)
    except BaseException:
        cluster.stop()
        raise
    return cluster


def _ray_start(args: list[str], temp_dir: Path, name: str) -> subprocess.Popen[bytes]:
    log = open(temp_dir / f"{name}-{time.monotonic_ns()}.log", "wb")  # noqa: SIM115
    return subprocess.Popen(
        [
            sys.executable,
            str(_NODE),
            "start",
            "--block",
            "--node-ip-address",
            "127.0.0.1",
            "--disable-usage-stats",
            *args,
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        env=node_environment(),
        start_new_session=True,
    )


def _alive_nodes(address: str) -> int:
    """Nodes the cluster's GCS counts alive (0 while it is not up)."""
    code = (
        "import sys, ray._private.services as s; s.resolve_ip_for_localhost = lambda h: h\n"
        "import ray\n"
        f"ray.init(address={address!r}, log_to_driver=False, logging_level='ERROR')\n"
        "print(sum(1 for n in ray.nodes() if n['Alive']))\n"
    )
    try:
        done = subprocess.run(
            [sys.executable, "-c", code],
            capture_output=True,
            text=True,
            timeout=60,
            env=node_environment(),
        )
    except subprocess.TimeoutExpired:
        return 0
    lines = done.stdout.strip().splitlines()
    return int(lines[-1]) if done.returncode == 0 and lines and lines[-1].isdigit() else 0


def _wait(ready: object, seconds: float, what: str) -> None:
    assert callable(ready)
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if ready():
            return
        time.sleep(0.5)
    raise RuntimeError(f"timed out waiting for {what}")


def _free_port() -> int:
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def session_pids(sid: int) -> list[int]:
    """Every live process whose session id is ``sid`` (a node and all it started)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        if int(fields[3]) == sid and fields[0] != "Z":
            found.append(int(entry.name))
    return found


def _decode(address: str) -> str:
    """An address of /proc/net/tcp{,6} (hex, host byte order per 32-bit word)."""
    raw = bytes.fromhex(address)
    words = b"".join(raw[i : i + 4][::-1] for i in range(0, len(raw), 4))
    if len(words) == 4:
        return ".".join(str(b) for b in words)
    import ipaddress

    ip = ipaddress.IPv6Address(words)
    return f"::ffff:{ip.ipv4_mapped}" if ip.ipv4_mapped is not None else str(ip)


def listening_sockets(pids: list[int]) -> list[tuple[int, str, int]]:
    """``(pid, address, port)`` of every TCP socket in LISTEN state the processes hold."""
    listening: dict[str, tuple[str, int]] = {}
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            parts = line.split()
            if parts[3] == "0A":  # LISTEN
                host, port = parts[1].split(":")
                listening[parts[9]] = (_decode(host), int(port, 16))
    found = []
    for pid in pids:
        try:
            fds = list(Path(f"/proc/{pid}/fd").iterdir())
        except OSError:
            continue
        for fd in fds:
            try:
                target = os.readlink(fd)
            except OSError:
                continue
            if target.startswith("socket:["):
                inode = target[len("socket:[") : -1]
                if inode in listening:
                    found.append((pid, *listening[inode]))
    return found


def not_on_loopback(sockets: list[tuple[int, str, int]]) -> list[tuple[int, str, int]]:
    """The sockets bound anywhere but 127.0.0.1 (another address, or a wildcard)."""
    return [s for s in sockets if s[1] not in _LOOPBACK]
