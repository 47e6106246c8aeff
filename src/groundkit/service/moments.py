"""Moments in time as people type them: ``grk --as-of`` and the MCP ``as_of`` argument.

One reading for both surfaces, so a moment means the same thing on the command line
and from an LLM host: an ISO 8601 date is midnight UTC of that day, a date and time
without an offset is UTC, and one with an offset (``Z``, ``+02:00``) is taken as given.
"""

from __future__ import annotations

from datetime import UTC, date, datetime

from groundkit.errors import ConfigurationError

__all__ = ["MOMENT_EXAMPLES", "parse_moment"]

MOMENT_EXAMPLES = "2026-03-01, 2026-03-01T12:00:00Z or 2026-03-01T14:00:00+02:00"

# Longer than any ISO 8601 date-time (with microseconds and an offset) could be.
_MAX_CHARS = 64
_EXPECTED = f"not an ISO 8601 date or date-time (such as {MOMENT_EXAMPLES})"


def parse_moment(text: str) -> datetime:
    """``text`` as a timezone-aware datetime.

    Raises ``ConfigurationError`` when it is not an ISO 8601 date or date-time. The
    message never repeats ``text``: a caller that wants it there adds it.
    """
    given = text.strip()
    if not given or len(given) > _MAX_CHARS:
        raise ConfigurationError(_EXPECTED)
    try:
        day = date.fromisoformat(given)
    except ValueError:
        pass
    else:
        return datetime(day.year, day.month, day.day, tzinfo=UTC)
    try:
        moment = datetime.fromisoformat(given)
    except ValueError:
        raise ConfigurationError(_EXPECTED) from None
    if moment.tzinfo is None or moment.utcoffset() is None:
        return moment.replace(tzinfo=UTC)
    return moment
