"""The fetch strategy of a worker with a transport (docs/NATS.md): messages name the
jobs to claim, and the database's claim by id takes them. The sweeper that publishes
what the database holds and no message names is a maintenance service
(`heartq.maintenance.sweeper`).

Safety never depends on the transport: a message is acked only after the claim it led to
committed (or found nothing to claim), a claim is the database's fenced `claim_ids`, and
recovery (lease reclaimer, liveness probe, worker monitor) works on the database alone. When the
server is unreachable, and as a backstop, the worker's ordinary database claim
(`ClaimFetch`) runs instead.

Here in the worker rather than in `heartq.transport`: it is the worker's side, built on
the claimer and the fetch loop's `Round`; the transport package stays the connection,
which the app uses too.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING

from heartq import events
from heartq.errors import ConfigError
from heartq.model import Claim, Reclaimed
from heartq.transport.health import Unanswered
from heartq.worker.claimer import Claimer, ClaimFetch, Round
from heartq.worker.ledger import Ledger

if TYPE_CHECKING:  # nats-py is optional: imported only when a transport is opened
    from nats.aio.msg import Msg

    from heartq.transport.nats import NatsTransport

FETCH_WAIT_MAX = 0.5
"""An idle worker waits at most 0.5 s on one fetch, so a stop request (which cannot
interrupt a fetch) is heard within that."""
CONNECT_WAIT = 2.0
"""At startup, a transport gets 2 s to answer before the worker starts polling instead."""
STALE_CHECK_EVERY = 1.0
"""An idle worker on NATS asks the database at most this often whether a job waits that
no wake-up brought (`TransportFetch._missed`)."""
NEVER = 365 * 86400.0
"""Seconds ahead: a `since` for `due_for_publish` that finds nothing fallen due."""


class TransportFetch:
    """The fetch loop's strategy while a transport is set (`Worker.run`).

    `ack_wait` (`NatsOptions.ack_wait_for`) is checked when the worker is built: a
    message must not come back while the job it led to may still run. `idle` is the
    worker's wait for a wake-up (a freed slot, a stop).

    Whether NATS delivers is the transport's `health`, read before each round without
    waiting (`heartq.transport.consuming`): while it names a reason (the stream electing
    a leader, a consumer or a node that does not answer, a disconnection) the worker is
    *degraded* and claims from the database at once and then at its poll interval, as
    without a transport, and says so once (`transport_degraded`, with the reason); when
    NATS answers again it says that too (`transport_resumed`) and catches up: it claims
    from the database whenever a pull brings nothing until a database claim finds
    nothing, and its sweeper publishes what waits."""

    def __init__(
        self,
        transport: NatsTransport,
        claimer: Claimer,
        ledger: Ledger,
        *,
        ack_wait: float,
        idle: Callable[[float], None],
    ) -> None:
        self.transport = transport
        self.claimer = claimer
        self.database = ClaimFetch(claimer, ledger)
        self.store = claimer.store
        self.worker_id = claimer.id
        self.events = claimer.events
        self.queues = list(claimer.queues)
        self.lease = claimer.lease
        self.wait = min(claimer.settings.poll_interval, FETCH_WAIT_MAX)
        self.ack_wait = ack_wait
        self._free_slots = ledger.free_slots
        self._idle = idle
        self._next_queue = 0
        self._backstop_due = time.monotonic() + transport.options.backstop
        self._degraded: tuple[str, str] | None = None
        """Why NATS does not deliver, while it does not (None: it does)."""
        self._degraded_at = 0.0
        self._announced = False
        self._catching_up = False
        self._stale_check_due = 0.0

    def prepare(self, stop: threading.Event) -> None:
        """Start watching the consumers, and bind them now if the server answers within
        a moment; if not, the worker starts anyway (claiming from the database) and the
        watch binds them when it does. A consumer whose ack_wait is too short is refused
        here (ConfigError)."""
        transport = self.transport
        transport.consumers(self.queues, self.ack_wait)
        deadline = time.monotonic() + CONNECT_WAIT
        while not transport.available and time.monotonic() < deadline:
            if stop.wait(0.05):
                return
        if not transport.available:
            return
        try:
            transport.prepare(self.queues, self.ack_wait)
        except ConfigError:
            raise
        except Exception as exc:  # noqa: BLE001 - bound by the watch instead
            self._degraded, self._degraded_at = ("binding", str(exc)), time.monotonic()
            self._announced = True  # said here, in NATS's words
            self.events.emit(
                events.TRANSPORT_UNAVAILABLE,
                logging.WARNING,
                server=transport.options.server,
                error=str(exc) or type(exc).__name__,
            )

    def round(self, burst: bool) -> Round:
        """The transport's round when it delivers, else (degraded, the backstop due, or
        nothing came in a burst run, which must then learn whether its queues are
        drained, or while catching up) a database claim; after which the loop goes back
        to a delivering transport at once, and to the database within the claim's
        `rate_wait` (rate-limited jobs come from the database: `claim_again_in`)."""
        trouble = self.transport.health()
        if trouble is None:
            if self._degraded is not None:
                self._resume()
            if self.step(burst):
                return Round(busy=True)
        else:
            self._degrade(trouble)
        claimed = self.database.round(burst)
        if self._catching_up and claimed.claimed == 0 and not claimed.busy:
            self._catching_up = False  # the database holds nothing more for us
        if claimed.busy:
            return claimed
        if claimed.rate_wait is not None:
            self.claim_again_in(self.claimer.idle_wait(claimed.rate_wait))
        if self.delivering:
            return replace(claimed, idle=None)  # back to the transport at once
        return claimed

    def _degrade(self, trouble: tuple[str, str]) -> None:
        """NATS does not deliver: say why, once (a disconnection is the transport's
        `transport_unavailable`), and claim from the database meanwhile."""
        if self._degraded is None:
            self._degraded_at = time.monotonic()
            self._announced = False
        self._degraded = trouble
        word, detail = trouble
        if not self._announced and word != "disconnected":
            self._announced = True
            self.events.emit(
                events.TRANSPORT_DEGRADED,
                logging.WARNING,
                worker_id=self.worker_id,
                server=self.transport.options.server,
                reason=word,
                detail=detail,
                fallback="claiming from the database at once, then every poll interval, "
                "until NATS answers",
            )

    def _resume(self) -> None:
        """NATS delivers again: say so, and catch up what it may have missed."""
        assert self._degraded is not None
        self.events.emit(
            events.TRANSPORT_RESUMED,
            worker_id=self.worker_id,
            server=self.transport.options.server,
            reason=self._degraded[0],
            degraded_for=round(time.monotonic() - self._degraded_at, 3),
        )
        self._degraded = None
        self._catching_up = True
        self.transport.request_catch_up()

    @property
    def on_reclaimed(self) -> Callable[[list[Reclaimed]], None]:
        return self.republish

    def republish(self, reclaimed: list[Reclaimed]) -> None:
        """The lease reclaimer (or the monitor, or the probe) put jobs back in the queue: publish
        them now, marked as recoveries with the reason, rather than at the sweeper's next
        pass. A publish that fails is left to the sweeper (the database is the outbox)."""
        by_reason: dict[str, list[Reclaimed]] = {}
        for job in reclaimed:  # one publish per reason: a gone worker's jobs share theirs
            reason = f"{job.crash.get('detected_by')}: {job.crash.get('reason')}"
            by_reason.setdefault(reason, []).append(job)
        for reason, jobs in by_reason.items():
            published = self.transport.publish([(j.job_id, j.queue) for j in jobs], reason)
            for job in jobs:
                self.events.emit(
                    events.JOB_REPUBLISHED,
                    logging.DEBUG if published else logging.WARNING,
                    job_id=job.job_id,
                    queue=job.queue,
                    recovery=reason,
                    published=published,
                )

    def claim_again_in(self, seconds: float) -> None:
        """Claim from the database again within `seconds` (the backstop comes sooner):
        a job its rate limit held back may start then, and no message names it (a
        rate-limited job is never published: its claim must count its key)."""
        self._backstop_due = min(self._backstop_due, time.monotonic() + seconds)

    @property
    def delivering(self) -> bool:
        """Whether the transport delivers now. A server that answers but refuses this
        deployment's consumer (docs/NATS.md, "Names"), or a stream or consumer that
        does not answer, is not delivering: the worker then waits its poll interval
        between database claims, as without a transport, instead of asking again at
        once."""
        return self._degraded is None and self.transport.health() is None

    def step(self, burst: bool) -> bool:
        """One round through the transport. False: `round` claims from the database
        this round instead (the backstop is due, NATS met trouble, or nothing came in a
        burst run or while catching up)."""
        if time.monotonic() >= self._backstop_due:
            self._backstop_due = time.monotonic() + self.transport.options.backstop
            return False
        free = self._free_slots()
        if free <= 0:
            self._idle(self.wait)  # a slot freeing up sets the wake-up event
            return True
        fetchable = self._fetchable()
        if not fetchable:  # every queue paused: the database claim obeys too
            self._idle(self.wait)
            return True
        queue, cap = fetchable[self._next_queue % len(fetchable)]
        self._next_queue += 1
        free = free if cap is None else min(free, cap)
        try:
            messages = self.transport.fetch(queue, free, self.wait / len(fetchable))
        except Unanswered as exc:  # the database claim runs instead, at once
            if exc.reason != "slow":  # one pull unanswered: a claim, not yet an episode
                self._degrade((exc.reason, exc.detail))
            return False
        if not messages:
            return not burst and not self._catching_up and not self._missed()
        self._claim(messages)
        return True

    def _fetchable(self) -> list[tuple[str, int | None]]:
        """The queues to fetch from now, each with the most its cap lets this worker
        take (None: its free slots): those an operator paused are left in the stream
        (`heartq.worker.controls`)."""
        controls = self.claimer.controls
        if controls is not None and not controls.fresh():
            return []
        if controls is None or controls.open(self.queues):
            return [(queue, None) for queue in self.queues]
        running = (run.job.queue for run in self.claimer.ledger.running())
        groups = controls.plan(self.queues, running)
        return [(queue, group.limit) for group in groups for queue in group.queues]

    def _missed(self) -> bool:
        """Whether a job waits that NATS did not deliver: a pull brought nothing to a
        worker with free slots, yet a job has been queued and runnable `stale_after`.
        Its wake-up was lost (a stream that acked it, then re-elected its leader and
        delivered nothing for seconds; a publish that failed in another process): the
        database claims it now rather than at the backstop, and goes on claiming
        whenever a pull brings nothing until a claim finds nothing (catching up).
        Asked at most every `STALE_CHECK_EVERY` (one read, LIMIT 1), and never with
        `stale_after` 0."""
        stale_after = self.transport.options.stale_after
        now = time.monotonic()
        if not stale_after or now < self._stale_check_due:
            return False
        self._stale_check_due = now + STALE_CHECK_EVERY
        try:
            clock = self.store.clock()
            found, _ = self.store.due_for_publish(
                self.queues, clock + NEVER, clock - stale_after, 1
            )
        except Exception:  # noqa: BLE001 - the database may blip: the backstop stays
            return False
        if found:
            self._catching_up = True  # wake-ups are missing: the database until it is dry
        return bool(found)

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
            self.claimer.ledger.request_sweep()  # it may have committed, its answer lost
            self.events.emit(
                events.CLAIM_FAILED, logging.WARNING, worker_id=self.worker_id, error=str(exc)
            )
            self.transport.nak(messages)
            self._idle(1.0)
            return
        self.claimer.start(self.claimer.without_paused(Claim(jobs)), sent_at, via="nats")
        self.transport.ack(messages)  # the claim committed: the database owns the rest
        claimed = {job.id for job in jobs}
        if any(job_id not in claimed for job_id in named if job_id):
            # a job the claim by id does not take (its key must be counted: a rate key),
            # or one already taken: the database claim looks now, with its keys
            self.claim_again_in(0.0)
        for job_id, queue in named.items():
            if job_id not in claimed:
                self.events.emit(
                    events.JOB_SKIPPED_ACTIVE_ELSEWHERE,
                    logging.DEBUG,
                    job_id=job_id,
                    queue=queue,
                    worker_id=self.worker_id,
                    reason="not queued and runnable: running elsewhere, finished, "
                    "not yet due, keyed or unknown",
                )
