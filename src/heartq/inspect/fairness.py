"""The fairness keys of each queue as every screen reads them: `heartq queues` and the
dashboard's queues page list each queue's busiest keys (jobs queued and running, weight),
`heartq stats` sums them up, a worker's metrics export how many keys have jobs waiting
and running per queue (never a label per key: keys are as many as an application's
accounts). Read here, from one statement (`Store.fair_usage`, an index probe per key and
a bounded count), so that no two screens disagree on a key."""

from __future__ import annotations

from typing import Any

from heartq.store.interface import Inspector

SHOWN = 10
"""Each queue's 10 busiest fairness keys are listed (the others counted)."""
COUNTED = 10_000
"""A key's queued jobs are counted up to 10,000; one at it is shown as `10000+`."""


def fair_keys(store: Inspector, shown: int = SHOWN) -> dict[str, dict[str, Any]]:
    """Per queue with fairness keys in use: `keys` (with jobs queued or running),
    `waiting` (keys with jobs queued), `running` (keys with jobs running), `queued` (their
    queued jobs, each key's counted up to `COUNTED`), `counted` (`COUNTED`), `busiest`
    (the first `shown` keys, most running then most queued first: `key`, `queued`,
    `more`, `running`, `weight`). Queues without keys in use are absent."""
    out: dict[str, dict[str, Any]] = {}
    for row in store.fair_usage(COUNTED):
        queue = out.setdefault(
            row["queue"],
            {"keys": 0, "waiting": 0, "running": 0, "queued": 0, "counted": COUNTED,
             "busiest": []},
        )  # fmt: skip
        queue["keys"] += 1
        queue["waiting"] += row["queued"] > 0
        queue["running"] += row["running"] > 0
        queue["queued"] += row["queued"]
        if len(queue["busiest"]) < shown:
            queue["busiest"].append(
                {k: row[k] for k in ("key", "queued", "more", "running", "weight")}
            )
    return out


def summary(by_queue: dict[str, dict[str, Any]], busiest: int = 5) -> dict[str, Any]:
    """`heartq stats`' `fairness`: the queues with keys in use, the keys, those with jobs
    waiting, their queued jobs, and the `busiest` keys over every queue (each with its
    `queue`), most running then most queued first."""
    keys = [dict(k, queue=q) for q, fair in by_queue.items() for k in fair["busiest"]]
    keys.sort(key=lambda k: (-k["running"], -k["queued"], k["queue"], k["key"]))
    return {
        "queues": len(by_queue),
        "keys": sum(f["keys"] for f in by_queue.values()),
        "waiting": sum(f["waiting"] for f in by_queue.values()),
        "queued": sum(f["queued"] for f in by_queue.values()),
        "busiest": keys[:busiest],
    }


def keys_in_use(store: Inspector) -> dict[str, tuple[int, int]]:
    """Per queue: how many fairness keys have jobs waiting and how many have jobs
    running, read without counting any backlog (what a metrics scrape exports)."""
    out: dict[str, tuple[int, int]] = {}
    for row in store.fair_usage(1):
        waiting, running = out.get(row["queue"], (0, 0))
        out[row["queue"]] = (waiting + (row["queued"] > 0), running + (row["running"] > 0))
    return out


def queued_text(key: dict[str, Any]) -> str:
    """A key's queued count as shown (a row of `fair_usage` or of `busiest`): `10000+`
    when it may hold more than was counted."""
    return f"{key['queued']}+" if key["more"] else str(key["queued"])


def weight_text(weight: float) -> str:
    """A weight as shown: `1`, `2.5`."""
    return f"{weight:g}"
