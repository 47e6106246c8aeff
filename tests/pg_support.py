"""A throwaway PostgreSQL server for tests, and the session fixture that provides one.

``postgres_dsn`` uses ``GROUNDKIT_TEST_POSTGRES_DSN`` when it is set; otherwise it runs
``initdb`` into a temporary directory and starts a private server on 127.0.0.1 with a free
port, stopped at the end of the session. When no server can be had the PostgreSQL tests are
skipped, except under ``CI``, where they fail: CI must never pass by skipping them.

The server's default collation is ICU ``en-US`` when the build has ICU, so the stores are
tested against a collation that does not sort by bytes (as most real databases do not).
"""

from __future__ import annotations

import contextlib
import os
import pwd
import secrets
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from glob import glob
from pathlib import Path

import pytest

from tests.services import free_port, unavailable

__all__ = ["DSN_ENV", "PostgresServer", "find_pg_bin", "postgres_dsn", "start_postgres"]

DSN_ENV = "GROUNDKIT_TEST_POSTGRES_DSN"
_USER = "groundkit"
# Durability is worth nothing in a throwaway cluster; these make it several times faster.
_FAST = ("-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off")


@dataclass
class PostgresServer:
    dsn: str
    data_dir: Path
    pg_ctl: Path
    run_as: list[str]

    def stop(self) -> None:
        subprocess.run(
            [*self.run_as, str(self.pg_ctl), "stop", "-D", str(self.data_dir), "-m", "fast"],
            capture_output=True,
            check=False,
            timeout=60,
        )
        shutil.rmtree(self.data_dir.parent, ignore_errors=True)


def find_pg_bin() -> Path | None:
    """The directory holding ``initdb`` and ``pg_ctl``: PATH first, then Debian's layout."""
    found = shutil.which("initdb")
    if found and shutil.which("pg_ctl"):
        return Path(found).resolve().parent
    candidates = sorted(
        glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(Path(p).parts[4])
    )
    return Path(candidates[-1]).parent if candidates else None


def _unprivileged(workdir: Path) -> list[str]:
    """``initdb`` refuses to run as root (as CI does): run the server as another user."""
    if os.geteuid() != 0:
        return []
    for name in ("postgres", "nobody"):
        with contextlib.suppress(KeyError):
            entry = pwd.getpwnam(name)
            for path in (workdir, *workdir.rglob("*")):
                os.chown(path, entry.pw_uid, entry.pw_gid)
            return ["runuser", "-u", name, "--"]
    raise RuntimeError("running as root and no unprivileged user to run PostgreSQL as")


def start_postgres() -> PostgresServer:
    """initdb a fresh cluster in a temporary directory and start it on 127.0.0.1."""
    bindir = find_pg_bin()
    if bindir is None:
        raise RuntimeError("PostgreSQL server binaries (initdb, pg_ctl) not found")
    # As root the server runs as another user, who must be able to reach the directory:
    # /tmp rather than a TMPDIR that may sit in root's home.
    workdir = Path(
        tempfile.mkdtemp(prefix="groundkit-pg-", dir="/tmp" if os.geteuid() == 0 else None)
    )
    try:
        password = secrets.token_urlsafe(16)
        (workdir / "pw").write_text(password)
        run_as = _unprivileged(workdir)
        data = workdir / "data"
        base = [
            *run_as,
            str(bindir / "initdb"),
            "-D",
            str(data),
            "-U",
            _USER,
            "--pwfile",
            str(workdir / "pw"),
            "--auth-local=trust",
            "--auth-host=scram-sha-256",
            "--encoding=UTF8",
            "--locale=C.UTF-8",
            "--no-sync",
        ]
        icu = subprocess.run(
            [*base, "--locale-provider=icu", "--icu-locale=en-US"],
            capture_output=True,
            text=True,
            check=False,
        )
        if icu.returncode != 0:  # a build without ICU: the libc collation will have to do
            shutil.rmtree(data, ignore_errors=True)
            subprocess.run(base, capture_output=True, text=True, check=True)
        (workdir / "pw").unlink()
        port = free_port()
        options = " ".join(
            ["-c listen_addresses=127.0.0.1", f"-c port={port}", f"-k {workdir}", *_FAST]
        )
        started = subprocess.run(
            [
                *run_as,
                str(bindir / "pg_ctl"),
                "start",
                "-w",
                "-t",
                "60",
                "-D",
                str(data),
                "-l",
                str(workdir / "server.log"),
                "-o",
                options,
            ],
            capture_output=True,
            text=True,
            check=False,
        )
        if started.returncode != 0:
            log = (workdir / "server.log").read_text(errors="replace")[-2000:]
            raise RuntimeError(f"pg_ctl start failed: {started.stderr.strip()}\n{log}")
    except BaseException:
        shutil.rmtree(workdir, ignore_errors=True)
        raise
    dsn = f"postgresql://{_USER}:{password}@127.0.0.1:{port}/postgres"
    return PostgresServer(dsn=dsn, data_dir=data, pg_ctl=bindir / "pg_ctl", run_as=run_as)


@pytest.fixture(scope="session")
def postgres_dsn() -> Iterator[str]:
    """A DSN of a PostgreSQL server for this session (skipped locally, failed in CI, if none)."""
    given = os.environ.get(DSN_ENV)
    if given:
        yield given
        return
    try:
        server = start_postgres()
    except (OSError, RuntimeError, subprocess.SubprocessError) as exc:
        unavailable(f"no PostgreSQL server for the tests: {exc}")
    try:
        yield server.dsn
    finally:
        server.stop()
