"""Containment checks: no read ever leaves the directory it was granted."""

from __future__ import annotations

import os
from pathlib import Path

from groundkit.errors import InvalidQueryError

__all__ = [
    "PathEscapeError",
    "base_directory",
    "ensure_within",
    "is_within",
    "printable_path",
    "to_relative",
    "utf8_encodable",
]


class PathEscapeError(ValueError):
    """A path resolves outside its allowed base (after following symlinks)."""


def base_directory(value: object, what: str = "the base directory") -> Path:
    """``value`` as the directory reads are confined to; ``InvalidQueryError`` for
    anything that is not a path (``None``, a number), which ``Path`` would refuse with a
    bare ``TypeError`` or, for ``""``, take for the current directory."""
    if isinstance(value, str | os.PathLike) and os.fspath(value) not in ("", b""):
        path = os.fsdecode(value)
        if "\x00" in path:
            # ``Path`` takes it, and every later use fails with a bare ``ValueError``.
            raise InvalidQueryError(f"{what} {path!r} holds a NUL character; no path does")
        return Path(path)
    shown = "an empty string" if value == "" else type(value).__name__
    raise InvalidQueryError(f"{what} must be a path (str or os.PathLike), not {shown}")


def is_within(path: Path, base: Path) -> bool:
    """True when the real ``path`` lies inside the real ``base``."""
    try:
        Path(os.path.realpath(path)).relative_to(os.path.realpath(base))
    except ValueError:
        return False
    return True


def ensure_within(path: str | Path, base: Path) -> Path:
    """Resolve ``path`` (relative paths against ``base``) and prove it stays in ``base``.

    Symlinks are followed before the check, so a link pointing out is refused.
    """
    text = str(path)
    if not text or "\x00" in text:
        raise PathEscapeError(f"invalid path {text!r}")
    candidate = Path(text)
    if not candidate.is_absolute():
        candidate = base / candidate
    real = Path(os.path.realpath(candidate))
    real_base = Path(os.path.realpath(base))
    try:
        real.relative_to(real_base)
    except ValueError:
        raise PathEscapeError(f"{text!r} resolves outside {str(real_base)!r}") from None
    return real


def to_relative(path: Path, base: Path) -> str:
    """POSIX path of ``path`` relative to the real ``base``.

    The link's own name is kept when ``path`` is a symlink inside ``base``;
    otherwise the fully resolved path is used.
    """
    real_base = os.path.realpath(base)
    try:
        return Path(os.path.abspath(path)).relative_to(real_base).as_posix()
    except ValueError:
        return Path(os.path.realpath(path)).relative_to(real_base).as_posix()


def utf8_encodable(text: str) -> bool:
    """True when ``text`` encodes as UTF-8: a file name whose bytes were not UTF-8
    comes back from the OS with lone surrogates (``os.fsdecode``) and does not."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def printable_path(text: str) -> str:
    """``text`` with its undecodable bytes shown as ``\\xNN`` escapes, safe to print and
    to put in JSON; the rest of the name is left as it is."""
    try:
        raw = text.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:
        return text.encode("utf-8", "backslashreplace").decode("utf-8")
    return raw.decode("utf-8", "backslashreplace")
