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
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from glob import glob
from pathlib import Path
from typing import Any

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
    owner: tuple[int, int] | None  # (uid, gid) the server runs as, when not this process's

    def stop(self) -> None:
        _run(
            [str(self.pg_ctl), "stop", "-D", str(self.data_dir), "-m", "fast"],
            self.owner,
            self.data_dir.parent,
        )
        shutil.rmtree(self.data_dir.parent, ignore_errors=True)


def _run(
    args: list[str], owner: tuple[int, int] | None, cwd: Path
) -> subprocess.CompletedProcess[str]:
    """Run a PostgreSQL tool, as ``owner`` when given (no ``runuser`` or ``sudo`` needed)."""
    as_owner: dict[str, Any] = {}
    if owner is not None:
        as_owner = {"user": owner[0], "group": owner[1], "extra_groups": []}
    return subprocess.run(
        args, capture_output=True, text=True, check=False, timeout=120, cwd=cwd, **as_owner
    )


def find_pg_bin() -> Path | None:
    """The directory holding ``initdb`` and ``pg_ctl``: PATH first, then Debian's layout."""
    found = shutil.which("initdb")
    if found and shutil.which("pg_ctl"):
        return Path(found).resolve().parent
    candidates = sorted(
        glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(Path(p).parts[4])
    )
    return Path(candidates[-1]).parent if candidates else None


def _unprivileged(workdir: Path) -> tuple[int, int] | None:
    """``initdb`` refuses to run as root (as CI does): the server runs as another user."""
    if os.geteuid() != 0:
        return None
    for name in ("postgres", "nobody"):
        with contextlib.suppress(KeyError):
            entry = pwd.getpwnam(name)
            for path in (workdir, *workdir.rglob("*")):
                os.chown(path, entry.pw_uid, entry.pw_gid)
            return entry.pw_uid, entry.pw_gid
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
        owner = _unprivileged(workdir)
        data = workdir / "data"
        base = [
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
        icu = _run([*base, "--locale-provider=icu", "--icu-locale=en-US"], owner, workdir)
        if icu.returncode != 0:  # a build without ICU: the libc collation will have to do
            shutil.rmtree(data, ignore_errors=True)
            plain = _run(base, owner, workdir)
            if plain.returncode != 0:
                raise RuntimeError(f"initdb failed: {plain.stderr.strip()}")
        (workdir / "pw").unlink()
        port = free_port()
        options = " ".join(
            ["-c listen_addresses=127.0.0.1", f"-c port={port}", f"-k {workdir}", *_FAST]
        )
        started = _run(
            [
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
            owner,
            workdir,
        )
        if started.returncode != 0:
            log = (workdir / "server.log").read_text(errors="replace")[-2000:]
            raise RuntimeError(f"pg_ctl start failed: {started.stderr.strip()}\n{log}")
    except BaseException:
        shutil.rmtree(workdir, ignore_errors=True)
        raise
    dsn = f"postgresql://{_USER}:{password}@127.0.0.1:{port}/postgres"
    return PostgresServer(dsn=dsn, data_dir=data, pg_ctl=bindir / "pg_ctl", owner=owner)


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


@pytest.fixture
async def fresh(postgres_dsn: str) -> AsyncIterator[str]:
    """A collection name no other test uses; its schema is dropped afterwards."""
    import asyncpg

    from groundkit.storage.postgres import schema_name

    name = f"t{uuid.uuid4().hex[:12]}"
    yield name
    conn = await asyncpg.connect(postgres_dsn)
    try:
        await conn.execute(f'DROP SCHEMA IF EXISTS "{schema_name(name)}" CASCADE')
    finally:
        await conn.close()
