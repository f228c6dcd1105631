"""Times are stored as the backend likes; users always see ISO-8601 strings in UTC."""

from __future__ import annotations

from datetime import UTC, datetime


def iso(value: float | datetime | None) -> str | None:
    moment = utc(value)
    if moment is None:
        return None
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def utc(value: float | datetime | None) -> datetime | None:
    """A time as a backend reads it (seconds since the epoch, or a datetime; a naive one
    is UTC) as an aware datetime in UTC."""
    if value is None:
        return None
    if isinstance(value, datetime):
        return value.astimezone(UTC) if value.tzinfo else value.replace(tzinfo=UTC)
    return datetime.fromtimestamp(float(value), UTC)
