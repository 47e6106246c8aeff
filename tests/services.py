"""What tests that start servers or other processes share (PostgreSQL, S3, writers)."""

from __future__ import annotations

import asyncio
import os
import socket
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import NoReturn

import pytest

__all__ = ["REPO_ROOT", "free_port", "run_pythons", "unavailable"]

REPO_ROOT = Path(__file__).resolve().parent.parent
_SUBPROCESS_LIMIT = 300.0  # seconds


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def unavailable(reason: str) -> NoReturn:
    """Skip the tests that need this server, except under ``CI``: there they must run."""
    if os.environ.get("CI"):
        pytest.fail(reason)
    pytest.skip(reason)


async def run_pythons(code: str, argv: Sequence[Sequence[str]]) -> list[int]:
    """Run ``python -c code`` once per argument list, all at the same time; their exit codes.

    From the repository root, so ``code`` can import ``tests``. Five minutes at most.
    """
    procs = [
        await asyncio.create_subprocess_exec(sys.executable, "-c", code, *args, cwd=REPO_ROOT)
        for args in argv
    ]
    return list(
        await asyncio.wait_for(asyncio.gather(*(p.wait() for p in procs)), _SUBPROCESS_LIMIT)
    )
