"""Times are stored as the backend likes; users always see ISO-8601 strings in UTC."""

from __future__ import annotations

from datetime import UTC, datetime


def iso(value: float | datetime | None) -> str | None:
    if value is None:
        return None
    if isinstance(value, datetime):
        moment = value.astimezone(UTC) if value.tzinfo else value.replace(tzinfo=UTC)
    else:
        moment = datetime.fromtimestamp(float(value), UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")
