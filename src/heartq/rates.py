"""Rate limits as people write them: `"100/m"` is at most 100 attempt starts in any
minute. Parsed once, where a limit is given (`@app.task(rate_limit=...)`, an enqueue's
`rate_limit=`, `heartq enqueue --rate-limit`), so a bad one is one `ConfigError` line
there and never reaches the database; the store keeps the count and the period.

The form is `N/PERIOD`: `N` a whole number of starts, `PERIOD` a unit (`s`, `m`, `h`)
with an optional multiplier before it (`3/10s`, `500/15m`, `2/1.5h`), without spaces.
How the limit is enforced is the claim's: docs/design/limits.md, "Rate limits".
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from heartq.errors import ConfigError

UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0}
"""Seconds per unit of a rate limit's period."""
MAX_COUNT = 100_000
"""At most 100,000 starts per period: a claim counts a key's starts within its period
(one index entry each), so a limit is a bound on what each claim of the key reads."""
MIN_PERIOD = 0.1
"""Periods shorter than 0.1 s would be finer than the worker's wake-ups can honour."""
MAX_PERIOD = 86_400.0
"""At most a day: the starts counted are the executions of jobs still kept, and
succeeded jobs are kept 7 days by default (`job_retention`)."""

_SPEC = re.compile(r"(\d+)/(\d+(?:\.\d+)?)?([smh])", re.ASCII)
"""Written without spaces, as the examples are: `"5/ s"` or `" 10/m"` is refused, not
guessed at (matched whole: `fullmatch`)."""


@dataclass(frozen=True)
class RateLimit:
    """At most `count` attempt starts in any `period` seconds."""

    count: int
    period: float

    @property
    def spec(self) -> str:
        """The limit written back the usual way (`100/m`, `3/10s`)."""
        return format_rate(self.count, self.period)


def parse_rate(spec: object, what: str = "rate_limit") -> RateLimit:
    """`"100/m"` as a `RateLimit`; `ConfigError` (one line, naming `what`) for anything
    else."""
    if not isinstance(spec, str):
        raise ConfigError(f"{what} must be text like '100/m', got {spec!r}")
    found = _SPEC.fullmatch(spec)
    if found is None:
        raise ConfigError(
            f"{what} {spec!r} is not N/PERIOD: write it like '10/s', '100/m', '5/h' or "
            f"'3/10s' (starts per period; units s, m, h; no spaces)"
        )
    period = float(found.group(2) or 1) * UNITS[found.group(3)]
    return checked(int(found.group(1)), period, f"{what} {spec!r}")


def checked(count: int, period: float, what: str = "rate_limit") -> RateLimit:
    """A count and a period within the bounds (`MAX_COUNT`, `MIN_PERIOD`, `MAX_PERIOD`);
    `ConfigError` naming `what` otherwise."""
    if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= MAX_COUNT:
        raise ConfigError(f"{what}: the count must be 1 to {MAX_COUNT:,}, got {count!r}")
    if (
        isinstance(period, bool)
        or not isinstance(period, int | float)
        or not math.isfinite(period)
        or not MIN_PERIOD <= period <= MAX_PERIOD
    ):
        raise ConfigError(f"{what}: the period must be {MIN_PERIOD:g} s to 24 h, got {period!r} s")
    return RateLimit(count, float(period))


def format_rate(count: int, period: float) -> str:
    """A stored limit as people write it: the largest unit that divides the period."""
    for unit, seconds in (("h", 3600.0), ("m", 60.0), ("s", 1.0)):
        times = period / seconds
        if times >= 1 and times == round(times):
            return f"{count}/{unit}" if times == 1 else f"{count}/{int(times)}{unit}"
    return f"{count}/{period:g}s"
