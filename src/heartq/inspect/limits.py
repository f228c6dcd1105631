"""The concurrency and rate keys in use, as every screen reads them: `heartq stats`
sums them up, the dashboard's overview lists each key, a worker's metrics export the
due jobs each rate key holds back (`heartq_rate_limited_jobs`). Read here, and judged
at their limit here, so that no two screens can disagree on a key."""

from __future__ import annotations

from functools import cached_property
from typing import Any

from heartq.store.interface import Inspector

BUSIEST = 5
"""`heartq stats` names the 5 busiest keys of each kind (`--json`: `busiest`)."""


class LimitsInUse:
    """The keys in use, each kind read from the store when first asked for and kept:
    a screen reads only the kind it shows (a worker's metrics, at every scrape, only
    the rate keys)."""

    def __init__(self, store: Inspector) -> None:
        self._store = store

    @cached_property
    def concurrency(self) -> list[dict[str, Any]]:
        """Each concurrency key with jobs queued or running (`Store.concurrency_usage`:
        `key`, `running`, `queued`, `limit`), busiest first."""
        return self._store.concurrency_usage()

    @cached_property
    def rate(self) -> list[dict[str, Any]]:
        """Each rate key and limit with jobs queued or running, by the database's clock
        (`Store.rate_usage`: `key`, `limit`, `started`, `next_start_in`, `waiting`,
        `queued`, `running`), most due jobs waiting first."""
        return self._store.rate_usage()

    def summary(self) -> dict[str, dict[str, Any]]:
        """`heartq stats`' `concurrency` and `rate_limits`: how many keys, how many at
        their limit, the jobs they hold, the busiest."""
        keys, rated = self.concurrency, self.rate
        return {
            "concurrency": {
                "keys": len(keys),
                "at_limit": sum(1 for k in keys if concurrency_at_limit(k)),
                "queued": sum(k["queued"] for k in keys),
                "busiest": keys[:BUSIEST],
            },
            "rate_limits": {
                "keys": len(rated),
                "at_limit": sum(1 for r in rated if rate_at_limit(r)),
                "waiting": sum(r["waiting"] for r in rated),
                "busiest": rated[:BUSIEST],
            },
        }


def limits_in_use(store: Inspector) -> LimitsInUse:
    """The concurrency and rate keys in use: what `heartq stats`, the dashboard and the
    metrics read them through (each kind read once, when first asked for)."""
    return LimitsInUse(store)


def concurrency_at_limit(key: dict[str, Any]) -> bool:
    """A concurrency key whose running jobs fill its limit: its queued jobs wait."""
    return bool(key["limit"]) and key["running"] >= key["limit"]


def rate_at_limit(key: dict[str, Any]) -> bool:
    """A rate key whose starts this period reached its limit: its next start waits
    (`next_start_in` seconds)."""
    return key["next_start_in"] is not None
