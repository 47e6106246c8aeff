"""Where groundkit keeps host-local caches (segment packs, vector mirrors, exported models)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from groundkit.errors import ConfigurationError

__all__ = ["CACHE_DIR_ENV", "UNUSABLE_CACHE", "default_cache_root"]

CACHE_DIR_ENV = "GROUNDKIT_CACHE_DIR"
# What an unusable cache location raises on the way to a file there (a path with a NUL
# byte, no home directory, a folder that cannot be made): a cache that may be left out
# treats these as a miss.
UNUSABLE_CACHE = (OSError, ValueError, RuntimeError, ConfigurationError)


def default_cache_root(environ: Mapping[str, str] | None = None) -> Path:
    """Where groundkit caches files on this host: ``$GROUNDKIT_CACHE_DIR``, else
    ``$XDG_CACHE_HOME/groundkit``, else ``~/.cache/groundkit``.

    ``ConfigurationError`` when that place cannot be named: a ``~user`` prefix for an
    unknown user, or no home directory and neither variable set.
    """
    env = os.environ if environ is None else environ
    given = env.get(CACHE_DIR_ENV)
    if given:
        try:
            return Path(given).expanduser()
        except RuntimeError:  # pathlib: the ~ or ~user has no home directory
            raise ConfigurationError(
                f"{CACHE_DIR_ENV}={given!r}: its ~ names no known home directory; "
                "give the cache folder as a full path"
            ) from None
    xdg = env.get("XDG_CACHE_HOME")
    if xdg and os.path.isabs(xdg):
        return Path(xdg) / "groundkit"
    try:
        home = Path.home()
    except RuntimeError:
        raise ConfigurationError(
            f"no home directory to keep groundkit's caches in: set {CACHE_DIR_ENV} "
            "(or XDG_CACHE_HOME) to a folder"
        ) from None
    return home / ".cache" / "groundkit"
