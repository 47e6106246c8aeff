"""Rules every store applies to document versions: when a version starts, how many
past ones are kept."""

from __future__ import annotations

from datetime import UTC, datetime

from groundkit.errors import ConfigurationError, IngestionError

__all__ = ["check_keep", "version_start"]

# How far ahead of this host's clock a caller's valid_as_of may be (clock skew).
_FUTURE_SLACK_SECONDS = 60.0


# The earliest moment a version can start: the first one UTC text can name.
_FIRST_MOMENT = datetime(1, 1, 1, tzinfo=UTC).timestamp()


def version_start(valid_as_of: datetime | None, now: float) -> float:
    """When a version written now becomes current: ``valid_as_of`` if given, else now.

    A naive datetime is ambiguous (whose local time?) and a moment in the future
    would make the version current before it is valid: both are refused.
    """
    if valid_as_of is None:
        return now
    if not isinstance(valid_as_of, datetime):
        raise IngestionError(f"valid_as_of must be a datetime, got {type(valid_as_of).__name__}")
    if valid_as_of.tzinfo is None or valid_as_of.utcoffset() is None:
        raise IngestionError(
            "valid_as_of must carry a time zone, e.g. datetime(2026, 3, 1, tzinfo=UTC)"
        )
    start = valid_as_of.timestamp()
    if start > now + _FUTURE_SLACK_SECONDS:
        raise IngestionError(f"valid_as_of {valid_as_of.isoformat()} is in the future")
    if start < _FIRST_MOMENT:
        # Stored as ISO 8601 text in UTC, which has no year 0: refused here, not in the
        # middle of the write (0001-01-01T00:00:00+01:00 is such a moment).
        raise IngestionError(
            f"valid_as_of {valid_as_of.isoformat()} falls before 0001-01-01T00:00:00 in UTC, "
            "the earliest moment a version can be valid from"
        )
    return start


def check_keep(keep: int | None) -> None:
    """A retention setting: ``None`` (keep every past version) or a count >= 0."""
    if keep is None:
        return
    if isinstance(keep, bool) or not isinstance(keep, int) or keep < 0:
        raise ConfigurationError(
            f"keep_versions must be None (keep all) or an integer >= 0, got {keep!r}"
        )
