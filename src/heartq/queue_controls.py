"""What an operator decided of a queue while its workers run: paused, or each worker's
share of it capped (`heartq queues pause|resume|scale`, `App.pause_queue`,
`App.resume_queue`, `App.scale_queue`, the dashboard's queue page).

Why stored, and read by the workers rather than sent to them: a worker started after the
decision obeys it as well as one that was running (a restart, a new deployment), and the
database is the one place every worker of a queue already reads. Each worker reads the
controls of its queues once a second (`heartq.worker.controls`), so a decision takes
effect on the whole fleet within about a second, and costs a primary-key lookup per
worker a second.

`concurrency` caps the jobs of the queue that ONE worker runs at once (as Oban's and
Sidekiq's per-node limits do): three workers of a queue scaled to 2 run at most 6 of its
jobs. A fleet-wide count of a kind of job is what a concurrency key is for
(docs/design/limits.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from heartq.errors import ConfigError


@dataclass(frozen=True)
class QueueControl:
    """One queue's controls as stored."""

    queue: str
    paused: bool = False
    """No job of the queue starts while it is paused; running ones finish, queued ones
    keep their place."""
    concurrency: int | None = None
    """At most this many of the queue's jobs run at once on each worker (None: as many as
    the worker's own concurrency allows; 0 pauses the queue as well)."""
    changed_at: float | None = None
    """When it was last changed (Unix time), and `changed_by` who changed it."""
    changed_by: str | None = None

    @property
    def holds_back(self) -> bool:
        """Whether this control keeps a worker from claiming the queue at all."""
        return self.paused or self.concurrency == 0

    def as_dict(self) -> dict[str, Any]:
        """As `heartq queues --json` prints it."""
        return {
            "queue": self.queue,
            "paused": self.paused,
            "concurrency": self.concurrency,
            "changed_at": self.changed_at,
            "changed_by": self.changed_by,
        }


def check_queue_name(queue: object) -> str:
    """A queue name an operator gave, or `ConfigError` in one line."""
    if not isinstance(queue, str) or not queue.strip():
        raise ConfigError(f"a queue name must be a non-empty string, not {queue!r}")
    return queue


def check_concurrency(concurrency: object) -> int | None:
    """A per-worker cap an operator gave (None: no cap), or `ConfigError` in one line."""
    if concurrency is None:
        return None
    if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 0:
        raise ConfigError(
            f"a queue's concurrency must be a whole number, 0 or more, not {concurrency!r}"
        )
    return concurrency

