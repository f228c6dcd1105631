"""The transport sweeper: with a transport (NATS JetStream, docs/NATS.md), publishes what
the database holds and no message names yet (every `sweep_interval`).

The database is the outbox: an enqueue publishes a wake-up after its commit, but a job
that fell due later (delayed, retried), was put back (reclaimed, released, replayed) or
whose publish failed is only in the database. Every worker sweeps its queues;
duplicates are harmless, since a message only leads to a fenced claim by id
(`heartq.worker.transport_fetch`). No event of its own: a publish that failed is tried again
at the next pass, and a pass that raised is logged by the runner (`maintenance_failed`).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

from heartq.store.interface import LeaseHolder

if TYPE_CHECKING:  # nats-py is optional: imported only when a transport is opened
    from heartq.transport.nats import NatsTransport

SWEEP_LIMIT = 1000
"""The most jobs one sweeper pass publishes: a backlog is published over several passes."""
SINCE_OVERLAP = 1.0
"""Each pass looks this many seconds behind the previous one's time too: a job committed
by a transaction that began before that pass (its times then older) is not missed."""
CATCH_UP_AFTER = 1.0
"""After a publish of this process failed, or its worker came back to NATS, the next pass
publishes every job runnable for this long (not `republish_after`): its wake-up may be
one that failed, or that NATS lost meanwhile."""


class Sweeper:
    """Maintenance service: publishes the jobs of this worker's queues that fell due
    (delayed, retried), were queued again (reclaimed, released, replayed) since its last
    pass, and every `republish_after` those still queued and runnable that long (a publish
    that failed, a message lost); after a publish of this process failed, or its worker
    came back to NATS (`catch_ups` grew), at the next pass those runnable for
    `CATCH_UP_AFTER`. Every worker sweeps: duplicates are harmless."""

    name = "transport_sweeper"

    def __init__(self, transport: NatsTransport, store: LeaseHolder, queues: Sequence[str]) -> None:
        self.transport = transport
        self.store = store
        self.queues = list(queues)
        self.interval = transport.options.sweep_interval
        self._since: float | None = None
        self._long_waiting_due = 0.0
        self._failures_seen = transport.catch_ups

    def run_once(self) -> int:
        if not self.transport.available:
            return 0  # `since` stays: the first pass after the outage catches up
        republish_after = self.transport.options.republish_after
        if self._since is None:
            self._since = self.store.clock() - republish_after
        failures = self.transport.catch_ups
        catch_up = failures != self._failures_seen  # a publish failed, NATS came back
        long_waiting = catch_up or time.monotonic() >= self._long_waiting_due
        now = self.store.clock()
        waiting_since = 0.0
        if long_waiting:
            waiting_since = now - (CATCH_UP_AFTER if catch_up else republish_after)
        jobs, now = self.store.due_for_publish(
            self.queues, self._since - SINCE_OVERLAP, waiting_since, SWEEP_LIMIT
        )
        if self.transport.publish(jobs):
            self._since = now
            self._failures_seen = failures
            if long_waiting:
                self._long_waiting_due = time.monotonic() + republish_after
        return 0  # publishing is not work for this worker's fetch loop to look for
