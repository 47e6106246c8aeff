"""Where groundkit keeps host-local caches (segment packs, vector mirrors, exported models)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

__all__ = ["CACHE_DIR_ENV", "default_cache_root"]

CACHE_DIR_ENV = "GROUNDKIT_CACHE_DIR"


def default_cache_root(environ: Mapping[str, str] | None = None) -> Path:
    """Where groundkit caches files on this host: ``$GROUNDKIT_CACHE_DIR``, else
    ``$XDG_CACHE_HOME/groundkit``, else ``~/.cache/groundkit``."""
    env = os.environ if environ is None else environ
    given = env.get(CACHE_DIR_ENV)
    if given:
        return Path(given).expanduser()
    xdg = env.get("XDG_CACHE_HOME")
    base = Path(xdg) if xdg and os.path.isabs(xdg) else Path.home() / ".cache"
    return base / "groundkit"
