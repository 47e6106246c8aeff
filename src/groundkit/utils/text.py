"""Whether a string can be stored and hashed: UTF-8 encodability, checked once at the edges.

A Python ``str`` may hold a lone surrogate (U+D800 to U+DFFF): ``"\\ud800"`` typed
by hand, a command-line argument that was not valid UTF-8 (Python decodes those
bytes to U+DC80..U+DCFF), a broken UTF-16 pair out of a PDF. UTF-8 has no
encoding for one, so SQLite, PostgreSQL and SHA-256 all fail on it deep inside
a call. Inputs are checked where they enter instead, and the caller is told
which argument is at fault; the offending text itself is never quoted.
"""

from __future__ import annotations

__all__ = ["describe_unencodable", "first_unencodable"]


def first_unencodable(text: str) -> int | None:
    """The index of the first character UTF-8 cannot encode, or None when there is none."""
    if text.isascii():
        return None
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        return exc.start
    return None


def describe_unencodable(text: str, what: str) -> str | None:
    """A message saying ``what`` cannot be encoded as UTF-8, or None when it can.

    The message gives the position and code point of the first bad character,
    never the surrounding text (``what`` may be a query or a chunk).
    """
    index = first_unencodable(text)
    if index is None:
        return None
    return (
        f"{what} cannot be encoded as UTF-8: character {index} is a lone surrogate "
        f"(U+{ord(text[index]):04X})"
    )
