"""The workers as operators are shown them, from the command line and the dashboard
alike: how long ago each was heard from, whether an `active` one is gone, the jobs it
holds (`running`: started; `claimed_ahead`: in its `--prefetch` buffer, not started,
taking no slot), and how many attempts' code it abandoned (`abandoned`, from its
registry row: its pulse writes it within about a second of a change)."""

from __future__ import annotations

from typing import Any

from heartq import display
from heartq.store.interface import Registry

GONE_HINT = (
    "its process is gone; its jobs are reclaimed by the next maintenance pass or `heartq reclaim`"
)
"""What `gone` means, in every command that shows it."""

CLAIMED_AHEAD_HINT = (
    "jobs a worker claimed ahead of its free slots (--prefetch) and holds, not started: "
    "each starts when one of its slots frees up"
)
"""What a worker's `claimed_ahead` count (a job's `claimed` state) means, wherever shown."""

ABANDONED_HINT = (
    "attempts whose end was decided (timed out, cancelled, lease lost) while their code "
    "still runs; each holds its slot until it returns (a thread cannot be stopped: choose "
    "the process pool for tasks that must be)"
)
"""What a worker's `abandoned` count means, wherever it is shown."""


def workers(store: Registry, include_all: bool, now: float | None = None) -> list[dict[str, Any]]:
    """The registry's workers (only active ones unless `include_all`) with
    `heartbeat_age` and `gone`, by the database's clock (`now`, read if not given):
    what `heartq workers`, `heartq stats` and the dashboard show."""
    now = store.clock() if now is None else now
    listed = store.list_workers(include_all=include_all)
    return with_liveness(store, with_heartbeat_age(listed, now))


def with_heartbeat_age(workers: list[dict[str, Any]], now: float) -> list[dict[str, Any]]:
    """The store's worker objects plus `heartbeat_age`: seconds since the last heartbeat,
    by the database's clock. `now` is read before the listing, so a heartbeat that lands
    in between is dated after it: its age is 0, not a few milliseconds below."""
    out = []
    for worker in workers:
        seconds = display.age(worker.get("last_heartbeat_at"), now)
        age = None if seconds is None else round(max(0.0, seconds), 3)
        out.append(dict(worker, heartbeat_age=age))
    return out


def with_liveness(store: Registry, workers: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The workers plus `gone`: True for an `active` worker whose liveness lock is free
    (its process died and no maintenance pass has reclaimed its jobs yet). Read only: the command
    that shows it reclaims nothing."""
    active = [w["id"] for w in workers if w["status"] == "active"]
    gone = set(store.liveness_free(active))
    return [dict(w, gone=w["id"] in gone) for w in workers]
