"""A worker's side of a transport: the fetch step that pulls messages and claims their
jobs by id. The sweeper that publishes what the database holds and no message names is a
maintenance service (`heartq.maintenance.sweeper`).

Safety never depends on the transport: a message is acked only after the claim it led to
committed (or found nothing to claim), a claim is the database's fenced `claim_ids`, and
recovery (reaper, liveness probe, worker monitor) works on the database alone. When the
server is unreachable the worker's ordinary database claim runs instead.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from heartq import events
from heartq.model import ClaimedJob
from heartq.store.interface import LeaseHolder

if TYPE_CHECKING:  # nats-py is optional: imported only when a transport is opened
    from nats.aio.msg import Msg

    from heartq.transport.nats import NatsTransport

FETCH_WAIT_MAX = 0.5
"""An idle worker waits at most 0.5 s on one fetch, so a stop request (which cannot
interrupt a fetch) is heard within that."""


class TransportFetch:
    """The fetch loop's step while a transport is set (`Worker.run`)."""

    def __init__(
        self,
        transport: NatsTransport,
        store: LeaseHolder,
        worker_id: str,
        queues: Sequence[str],
        lease: float,
        wait: float,
        free_slots: Callable[[], int],
        start: Callable[[list[ClaimedJob], float], None],
        idle: Callable[[float], None],
    ) -> None:
        self.transport = transport
        self.store = store
        self.worker_id = worker_id
        self.queues = list(queues)
        self.lease = lease
        self.wait = min(wait, FETCH_WAIT_MAX)
        self._free_slots = free_slots
        self._start = start
        self._idle = idle
        self._next_queue = 0
        self._backstop_due = time.monotonic() + transport.options.backstop
        self._failing = False

    def claim_again_in(self, seconds: float) -> None:
        """Claim from the database again within `seconds` (the backstop comes sooner):
        a job its rate limit held back may start then, and no message names it (a
        rate-limited job is never published: its claim must count its key)."""
        self._backstop_due = min(self._backstop_due, time.monotonic() + seconds)

    @property
    def delivering(self) -> bool:
        """Whether the transport delivers now: connected, and its last fetch worked. A
        server that answers but refuses this deployment's consumer (docs/NATS.md, "Names")
        is not delivering: the worker then waits its poll interval between database
        claims, as without a transport, instead of asking again at once."""
        return self.transport.available and not self._failing

    def step(self, burst: bool) -> bool:
        """One round through the transport. False: the caller claims from the database
        this round instead (transport unreachable, the backstop is due, or nothing came
        in a burst run, which must then learn whether its queues are drained)."""
        if not self.transport.available or time.monotonic() >= self._backstop_due:
            self._backstop_due = time.monotonic() + self.transport.options.backstop
            return False
        free = self._free_slots()
        if free <= 0:
            self._idle(self.wait)  # a slot freeing up sets the wake-up event
            return True
        queue = self.queues[self._next_queue % len(self.queues)]
        self._next_queue += 1
        try:
            messages = self.transport.fetch(queue, free, self.wait / len(self.queues))
        except Exception:  # noqa: BLE001 - unreachable: the database claim runs instead
            self._failing = True
            return False
        self._failing = False
        if not messages:
            return not burst
        self._claim(messages)
        return True

    def _claim(self, messages: list[Msg]) -> None:
        named: dict[str, str] = {}
        for message in messages:
            try:
                body = json.loads(message.data)
                named[str(body["job_id"])] = str(body.get("queue", ""))
            except (ValueError, KeyError, TypeError):
                named.setdefault("", "")  # not ours: acked below, claims nothing
        sent_at = time.monotonic()
        try:
            jobs = self.store.claim_ids(self.worker_id, [i for i in named if i], self.lease)
        except Exception as exc:  # noqa: BLE001 - the database may blip: redeliver
            events.emit(
                events.CLAIM_FAILED, logging.WARNING, worker_id=self.worker_id, error=str(exc)
            )
            self.transport.nak(messages)
            self._idle(1.0)
            return
        self._start(jobs, sent_at)
        self.transport.ack(messages)  # the claim committed: the database owns the rest
        claimed = {job.id for job in jobs}
        if any(job_id not in claimed for job_id in named if job_id):
            # a job the claim by id does not take (its key must be counted: a rate key),
            # or one already taken: the database claim looks now, with its keys
            self.claim_again_in(0.0)
        for job_id, queue in named.items():
            if job_id not in claimed:
                events.emit(
                    events.JOB_SKIPPED_ACTIVE_ELSEWHERE,
                    logging.DEBUG,
                    job_id=job_id,
                    queue=queue,
                    worker_id=self.worker_id,
                    reason="not queued and runnable: running elsewhere, finished, "
                    "not yet due, keyed or unknown",
                )
