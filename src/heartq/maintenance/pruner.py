"""The pruner: deletes inactive/stopped workers and succeeded/cancelled jobs past their
retention (every `prune_interval`, default 10 min; retention 7 days), keeping the ids of
the succeeded ones in a trace that jobs enqueued later may depend on (forgotten after
`success_trace_retention`, 30 days from their creation). Dead jobs stay until purged
(`heartq dlq purge`), and so do the jobs they block, unless `blocked_retention` is set: a
dead job that holds blocked jobs for longer cancels them. Event: `pruned`.

And the vacuum of the jobs table between autovacuum's runs (`JobsVacuum`, every
`vacuum_interval`, default 5 s, PostgreSQL): the space a finished job's dead row versions
held is reused by the next jobs' rows instead of extending the table.
"""

from __future__ import annotations

import time

from heartq.config import Settings
from heartq.event_stream import EventStream
from heartq.events import PRUNED
from heartq.store.interface import Administrator


class Pruner:
    """Deletes inactive/stopped workers and succeeded/cancelled jobs past retention, and
    tells `events` what it deleted."""

    name = "pruner"

    def __init__(self, store: Administrator, settings: Settings, events: EventStream) -> None:
        self.store = store
        self.events = events
        self.interval = settings.prune_interval
        self.worker_retention = settings.worker_retention
        self.job_retention = settings.job_retention
        self.success_trace_retention = settings.success_trace_retention
        self.blocked_retention = settings.blocked_retention

    def run_once(self) -> int:
        counts = self.store.prune(
            self.worker_retention,
            self.job_retention,
            success_trace_retention=self.success_trace_retention,
            blocked_retention=self.blocked_retention,
        )
        if counts.workers or counts.jobs or counts.blocked:
            self.events.emit(
                PRUNED, workers=counts.workers, jobs=counts.jobs, blocked=counts.blocked
            )
        return counts.workers + counts.jobs + counts.blocked


VACUUM_SHARE = 10.0
"""A vacuum's next pass comes at least ten times its last pass's length after it: while
another session holds the horizon back nothing can be removed, each pass reads every
page written since, and the passes spread out instead of taking a worker's maintenance
thread (or the server) over."""


class JobsVacuum:
    """Vacuums the jobs table every `interval` (`Administrator.vacuum_jobs`) unless any
    worker or autovacuum did within it, or less often while a pass takes long
    (`VACUUM_SHARE`)."""

    name = "vacuum"

    def __init__(self, store: Administrator, interval: float) -> None:
        self.store = store
        self.every = interval
        self.interval = interval

    def run_once(self) -> int:
        started = time.monotonic()
        self.store.vacuum_jobs(since=self.every)
        self.interval = max(self.every, VACUUM_SHARE * (time.monotonic() - started))
        return 0
