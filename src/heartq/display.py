"""How times, durations, JSON values and errors read to an operator: the same words on
the command line (`heartq.cli.render`) and in the dashboard (`heartq.dashboard`)."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any


def plural(n: int, word: str, words: str | None = None) -> str:
    """`1 attempt`, `2 attempts`: a count and its noun as English says them (`words`: a
    plural not made with an s, `1 dependency`, `2 dependencies`)."""
    return f"{n} {word if n == 1 else (words or word + 's')}"


def epoch_of(value: str | None) -> float | None:
    """An ISO-8601 time from the store (`...Z`) as seconds since the epoch."""
    if not value:
        return None
    try:
        return datetime.fromisoformat(value).timestamp()
    except ValueError:
        return None


def fmt_time(value: str | None) -> str:
    """`2024-05-01 12:00:01.123Z` (UTC, as stored), or `-`."""
    return value.replace("T", " ") if value else "-"


def fmt_seconds(seconds: float | None) -> str:
    """A duration an operator reads at a glance: 850ms, 12.3s, 4m05s, 2h03m, 3d04h."""
    if seconds is None:
        return "-"
    sign = "-" if seconds < 0 else ""
    s = abs(seconds)
    if s < 1:
        return f"{sign}{s * 1000:.0f}ms"
    if s < 60:
        return f"{sign}{s:.1f}s"
    if s < 3600:
        return f"{sign}{int(s // 60)}m{int(s % 60):02d}s"
    if s < 86400:
        return f"{sign}{int(s // 3600)}h{int(s % 3600 // 60):02d}m"
    return f"{sign}{int(s // 86400)}d{int(s % 86400 // 3600):02d}h"


def age(value: str | None, now: float) -> float | None:
    moment = epoch_of(value)
    return None if moment is None else now - moment


def fmt_ago(value: str | None, now: float) -> str:
    """`12.3s ago`, or `in 4.0s` for a time still to come, or `-`."""
    seconds = age(value, now)
    if seconds is None:
        return "-"
    if seconds < 0:
        return f"in {fmt_seconds(-seconds)}"
    return f"{fmt_seconds(seconds)} ago"


def compact_json(value: Any, limit: int | None = None) -> str:
    text = json.dumps(value, ensure_ascii=False, separators=(", ", ": "), default=str)
    if limit is not None and len(text) > limit:
        return text[: limit - 3] + "..."
    return text


def last_line(text: str | None, limit: int = 300) -> str:
    """The line of an error that says what happened (a traceback's last line)."""
    if not text:
        return ""
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[-1][:limit] if lines else ""
