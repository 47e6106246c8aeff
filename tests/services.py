"""What the fixtures that start a server for the tests share (PostgreSQL, S3)."""

from __future__ import annotations

import os
import socket
from typing import NoReturn

import pytest

__all__ = ["free_port", "unavailable"]


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
