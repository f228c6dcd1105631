"""The state a job is shown in: its stored status, except that a job claimed ahead is
shown `claimed`, not `running`.

A worker started with `--prefetch N` holds up to N jobs in a buffer ahead of its free
slots (docs/design/claim.md, "Claim ahead"). In the database such a job is `running` under the
worker's lease, like a started one (the same heartbeat renews it, every reclaim and
cancel finds it), and only its column `claimed_ahead` says its code has not started.
The protocol needs it `running`; an operator needs to know it is not: shown as running,
three buffered jobs made `heartq workers` say "running 3 of 1 slots". So every screen
(the command line, `--json` included, the dashboard, the metrics) shows the state
decided here, and filters by it through `stored_filter`. The Python API
(`app.get_job`) keeps the stored status, with `claimed_ahead`.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from heartq.model import JobCount, JobStatus

CLAIMED = "claimed"
"""A job claimed ahead: held in its worker's buffer, leased, its code not started."""

SHOWN_STATUSES: tuple[str, ...] = (
    JobStatus.WAITING.value,
    JobStatus.BLOCKED.value,
    JobStatus.QUEUED.value,
    CLAIMED,
    JobStatus.RUNNING.value,
    JobStatus.SUCCEEDED.value,
    JobStatus.DEAD.value,
    JobStatus.CANCELLED.value,
)
"""Every state a job is shown in, in the order of its life."""

HELD = (CLAIMED, JobStatus.RUNNING.value)
"""The shown states of a job a worker holds under its lease (it has a worker, a lease,
a heartbeat; a cancel asks that worker)."""


def shown_status(job: Mapping[str, Any]) -> str:
    """`claimed` for a running job claimed ahead, else the stored status."""
    if job["status"] == JobStatus.RUNNING and job.get("claimed_ahead"):
        return CLAIMED
    return str(job["status"])


def shown(job: Mapping[str, Any]) -> dict[str, Any]:
    """The job document (`Store.get_job`, `list_jobs`, ...) with `status` as shown."""
    return dict(job, status=shown_status(job))


def stored_filter(status: str | None) -> tuple[str | None, bool | None]:
    """A shown state as the store's filters: `(status, claimed_ahead)` for `list_jobs`
    and `browse_jobs` (`running` is then the started jobs only)."""
    if status == CLAIMED:
        return JobStatus.RUNNING.value, True
    if status == JobStatus.RUNNING:
        return JobStatus.RUNNING.value, False
    return status, None


def shown_counts(counts: Iterable[JobCount]) -> Iterator[tuple[str, str, int]]:
    """`(queue, shown state, count)`: each queue's running jobs split into those claimed
    ahead and those started."""
    for c in counts:
        if c.status == JobStatus.RUNNING:
            yield c.queue, CLAIMED, c.claimed_ahead
            yield c.queue, c.status, c.count - c.claimed_ahead
        else:
            yield c.queue, c.status, c.count
