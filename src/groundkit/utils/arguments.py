"""Command-line argument types shared by every ``grk`` command (standard library only, so
``grk``'s own module can import them without slowing its start)."""

from __future__ import annotations

import argparse
from pathlib import Path

__all__ = ["path_arg", "text_arg"]


def text_arg(text: str) -> str:
    """A path or URL argument, refused when empty: ``Path("")`` is the current directory,
    so an empty string would silently stand for all of it."""
    if not text:
        raise argparse.ArgumentTypeError("is empty; give a path (. for the current directory)")
    return text


def path_arg(text: str) -> Path:
    """A path argument, refused when empty (see ``text_arg``)."""
    return Path(text_arg(text))
