"""JetStream as a delivery channel for job ids (docs/NATS.md).

One stream per deployment (default `HEARTQ_<deployment id>`, the id stored in the
queue's database: `names.py`) with a subject per queue (`<prefix>.<queue>`), work-queue
retention (a message is gone once acked), and one durable pull consumer per queue shared
by every worker of that deployment and queue, explicit ack. A message is `{"job_id",
"queue"}`: a wake-up, never a right to run.

nats-py is asyncio; heartq's worker and `App.enqueue` are threads. So a transport owns an
event loop on a daemon thread and every call is a bounded wait on it: an unreachable,
frozen or electing server costs a caller at most its timeout, and when not connected,
nothing (the database is the outbox, the sweeper publishes later). An enqueue waits for
nothing at all: its wake-ups go to the background publisher (`publisher.py`). A worker's
pulls, acks and the watch of its consumers are `consuming.py`'s; a server that answers
nothing is left for another node of the list (`suspect_server`).

The URL's servers and options: `servers.py`, `settings.py`; the stream: `stream.py`.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import json
import logging
import os
import threading
import time
import weakref
from collections.abc import Callable, Coroutine, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import nats
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.errors import NoRespondersError
from nats.js import JetStreamContext
from nats.js.errors import NotFoundError

from heartq import events
from heartq.transport.consuming import Consumers
from heartq.transport.health import Unanswered
from heartq.transport.names import NatsNames
from heartq.transport.publisher import Publisher, Wakeup
from heartq.transport.settings import NatsOptions
from heartq.transport.stream import ensure_stream

if TYPE_CHECKING:
    from heartq.event_stream import EventStream

T = TypeVar("T")

CALL_TIMEOUT = 5.0
"""The longest a call that makes something on the server waits (a stream, a consumer)."""
QUICK_TIMEOUT = 1.0
"""The longest a publish waits for the stream's ack, and a check for its answer."""
PUBLISH_WAIT = 2.0
"""The longest a synchronous publish (a worker's sweeper, a recovery) keeps its caller."""
SERVER_CHECK_TIMEOUT = 0.5
"""A server that does not answer a request within this is taken for frozen: the client
moves to another (`suspect_server`)."""
SERVER_CHECK_EVERY = 2.0
"""The server is checked at most this often."""
FIRST_CONNECT_WAIT = 2.0
"""A new transport's first synchronous publish (a worker's sweeper, a recovery) waits up
to 2 s for the first connection attempt; later ones never wait. An enqueue's wake-ups
never wait: they are published in the background (`publisher.py`)."""
CLOSE_FLUSH = 2.0
"""`close` (and the end of the program) waits up to 2 s for the wake-ups handed to the
background publisher to be sent, when connected: a script that enqueues and exits has
its jobs woken, not left to the sweeper."""

_open: weakref.WeakSet[NatsTransport] = weakref.WeakSet()


@atexit.register
def _flush_at_exit() -> None:
    """Send what the transports still hold before the interpreter ends (their threads
    are daemons: they would just stop)."""
    for transport in list(_open):
        transport.flush(CLOSE_FLUSH)


class NatsTransport:
    """A JetStream connection on its own event loop thread (module docstring).

    `deployment`: reads the queue database's deployment id (`Link.deployment_id`), which
    the default names carry. It is called once, on first use (a publish, a worker's
    prepare or fetch), not here: a worker opens its transport before its database
    answers. `events`: the app's stream, told when the server comes and goes and when a
    worker's consumers are bound."""

    def __init__(self, url: str, deployment: Callable[[], str], events: EventStream) -> None:
        self.options = NatsOptions.parse(url)
        self._deployment = deployment
        self.events = events
        self._names: NatsNames | None = None
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="heartq-transport", daemon=True
        )
        self._thread.start()
        self._nc: Client | None = None
        self._js: JetStreamContext | None = None
        self._admin: JetStreamContext | None = None
        self._consumers: Consumers | None = None
        self._stream_ready = False
        self._mismatch_said: set[str] = set()
        self.stream_seen = 0.0
        """When the stream last answered (a publish acked, a check): monotonic."""
        self._checking = False
        self._checked_at = -SERVER_CHECK_EVERY
        self._disconnect_reason = "disconnected"
        self._closed = False
        self._was_up: bool | None = None
        self._first_attempt = threading.Event()
        self.catch_ups = 0
        """How many times a publish failed (or a wake-up was dropped), or a worker came
        back to NATS, so far: a worker's sweeper that sees it grow publishes at its next
        pass what waits (`Sweeper`), rather than after `republish_after`."""
        self._publisher = Publisher(
            self._loop,
            self._send,
            lambda: self.available,
            max_age=self.options.republish_after,
            on_failed=self._publish_failed,
        )
        self._connecting = asyncio.run_coroutine_threadsafe(self._connect(), self._loop)
        asyncio.run_coroutine_threadsafe(self._publisher.run(), self._loop)
        _open.add(self)

    # -- connection --------------------------------------------------------------------
    async def _connect(self) -> None:
        """Try until connected (or closed); nats-py then reconnects by itself."""
        while not self._closed:
            try:
                options = self.options
                self._nc = await nats.connect(
                    servers=options.urls,
                    allow_reconnect=True,
                    max_reconnect_attempts=-1,
                    reconnect_time_wait=options.reconnect_wait,
                    connect_timeout=options.connect_timeout,
                    ping_interval=options.ping_interval,
                    max_outstanding_pings=options.max_outstanding_pings,
                    dont_randomize=not options.randomize,
                    error_cb=self._on_error,
                    disconnected_cb=self._on_disconnected,
                    reconnected_cb=self._on_reconnected,
                )
                self._js = self._nc.jetstream(timeout=QUICK_TIMEOUT)
                self._admin = self._nc.jetstream(timeout=CALL_TIMEOUT)
                self._report(True)
                self._first_attempt.set()
                return
            except Exception as exc:  # noqa: BLE001 - unreachable: tell once, try again
                self._report(False, str(exc) or type(exc).__name__)
                self._first_attempt.set()
                await asyncio.sleep(self.options.reconnect_wait)

    async def _on_error(self, exc: Exception) -> None:
        """nats-py reports every failed attempt here, and keeps trying by itself (also
        for the first connection: it does not return until connected). Before the first
        connection this is the news that the server is unreachable; after it, the
        state changes (`_on_disconnected`) say it all."""
        if self._nc is None:
            self._report(False, str(exc) or type(exc).__name__)
            self._first_attempt.set()

    async def _on_disconnected(self) -> None:
        if not self._closed:  # a close is no outage
            reason, self._disconnect_reason = self._disconnect_reason, "disconnected"
            self._report(False, reason)

    async def _on_reconnected(self) -> None:
        self._stream_ready = False  # looked at again: the server may have lost its state
        if self._consumers is not None:
            self._consumers.reconnected()
        self._report(True)

    def _report(self, up: bool, error: str = "") -> None:
        """`transport_available` / `transport_unavailable` once per change of state."""
        if self._was_up is up:
            return
        self._was_up = up
        if up:
            self.events.emit(events.TRANSPORT_AVAILABLE, server=self.options.server)
        else:
            self.events.emit(
                events.TRANSPORT_UNAVAILABLE,
                logging.WARNING,
                server=self.options.server,
                error=error,
                fallback="jobs stay in the database: enqueues commit, the sweeper "
                "publishes them later, workers poll the database meanwhile",
            )

    @property
    def available(self) -> bool:
        """Connected now (a publish or fetch may still fail: callers fall back)."""
        nc = self._nc
        return nc is not None and nc.is_connected and not self._closed

    def call(self, coro: Coroutine[Any, Any, T], timeout: float = CALL_TIMEOUT) -> T:
        """Run `coro` on the transport's loop and wait at most `timeout` for it
        (`TimeoutError` past it, the coroutine cancelled)."""
        future = asyncio.run_coroutine_threadsafe(coro, self._loop)
        try:
            return future.result(timeout)
        except BaseException:
            future.cancel()
            raise

    def flush(self, timeout: float) -> bool:
        """Wait up to `timeout` for the background publisher to send what it holds (the
        first connection attempt included: a script's first enqueue opened the
        transport); at once once it is known unreachable: it would only wait for it."""
        if self._closed or self._publisher.wait_idle(0):
            return True
        deadline = time.monotonic() + timeout
        self._first_attempt.wait(timeout)
        if not self.available:
            return False
        return self._publisher.wait_idle(max(0.0, deadline - time.monotonic()))

    def close(self) -> None:
        """Send the enqueues' wake-ups still held (`CLOSE_FLUSH`), drain nothing else
        (messages not acked are delivered again: harmless) and stop."""
        if self._closed:
            return
        self.flush(CLOSE_FLUSH)
        _open.discard(self)
        self._closed = True
        self._was_up = False
        nc = self._nc
        if nc is not None:
            with contextlib.suppress(Exception):
                self.call(nc.close(), 2.0)
        with contextlib.suppress(Exception):
            self.call(self._end_tasks(), 2.0)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=2.0)
        if not self._thread.is_alive():
            self._loop.close()

    @staticmethod
    async def _end_tasks() -> None:
        """Cancel every task left on the loop (the connect loop still trying an
        unreachable server, nats-py's own) and wait until each has ended, as
        `asyncio.run` does before it closes its loop. A task cancelled but not yet run
        when the loop stops stays pending, and Python prints `Task was destroyed but it
        is pending!` at exit: a scary line for an enqueue that worked."""
        here = asyncio.current_task()
        tasks = [task for task in asyncio.all_tasks() if task is not here]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    @property
    def names(self) -> NatsNames:
        """This deployment's stream, subjects and consumers (read from the database once;
        raises while it cannot be read)."""
        if self._names is None:
            self._names = self.options.names(self._deployment())
        return self._names

    # -- publishing --------------------------------------------------------------------
    def publish_later(self, jobs: Sequence[tuple[str, str]]) -> None:
        """Hand `(job_id, queue)` wake-ups to the background publisher and return at
        once (an enqueue, right after its commit: `publisher.py`). Never raises: a
        wake-up not sent is the sweeper's."""
        if not jobs:
            return
        try:
            names = self.names
        except Exception:  # noqa: BLE001 - the database is the outbox
            self._publish_failed()
            return
        now = time.monotonic()
        self._publisher.put(
            [
                Wakeup(names.subject(queue), _body(job_id, queue, None), names.stream, now)
                for job_id, queue in jobs
            ]
        )

    def _publish_failed(self) -> None:
        self.request_catch_up()

    def request_catch_up(self) -> None:
        """Wake-ups may be missing: the sweeper publishes what waits at its next pass."""
        self.catch_ups += 1

    async def _send(self, batch: Sequence[Wakeup]) -> list[bool]:
        """The background publisher's round: the stream made if need be, then every
        wake-up published at once; one answer each."""
        if self._js is None or self._admin is None:
            return [False] * len(batch)
        js = self._js
        try:
            await self._ensure_stream(self.names)
        except Exception:  # noqa: BLE001 - tried again with the wake-ups
            return [False] * len(batch)
        sent = await asyncio.gather(
            *(js.publish(w.subject, w.body, stream=w.stream) for w in batch),
            return_exceptions=True,
        )
        answers = [not isinstance(answer, BaseException) for answer in sent]
        if all(answers):
            self.stream_seen = time.monotonic()
        else:
            self._stream_ready = False  # deleted meanwhile? looked at again next round
            if any(isinstance(a, asyncio.TimeoutError) for a in sent):
                self.suspect_server()
        return answers

    def publish(self, jobs: Sequence[tuple[str, str]], recovery: str | None = None) -> bool:
        """Publish `(job_id, queue)` wake-ups, acked by the stream; False (never an
        exception) when not connected or any failed: the jobs are safe in the database
        and the sweeper publishes them later. `recovery`: why a reclaimed job is back (a
        message's `recovery` field, for whoever reads the stream)."""
        if not jobs:
            return True
        self._first_attempt.wait(FIRST_CONNECT_WAIT)
        if not self.available:
            return False
        try:
            self.call(self._publish(self.names, jobs, recovery), PUBLISH_WAIT)
            return True
        except Exception:  # noqa: BLE001 - the database is the outbox
            self._stream_ready = False  # deleted meanwhile? looked at again next time
            self._publish_failed()
            return False

    async def _publish(
        self, names: NatsNames, jobs: Sequence[tuple[str, str]], recovery: str | None
    ) -> None:
        js, _ = self.jetstream()
        await self._ensure_stream(names)
        sends = [
            js.publish(names.subject(queue), _body(job_id, queue, recovery), stream=names.stream)
            for job_id, queue in jobs
        ]
        await asyncio.gather(*sends)
        self.stream_seen = time.monotonic()

    async def _ensure_stream(self, names: NatsNames) -> None:
        """Create the stream when missing, with the URL's stream settings; use one that
        exists as it is, saying once how it differs from them (`stream.py`)."""
        if self._stream_ready:
            return
        js, admin = self.jetstream()
        differ = await ensure_stream(js, admin, names, self.options.stream_settings())
        if differ and names.stream not in self._mismatch_said:
            self._mismatch_said.add(names.stream)
            self.events.emit(
                events.TRANSPORT_STREAM_MISMATCH,
                logging.WARNING,
                server=self.options.server,
                stream=names.stream,
                differences=differ,
                action="heartq uses the stream as it is: change it (nats stream edit) "
                "or delete it for heartq to make it anew",
            )
        self._stream_ready = True

    # -- consuming (a worker's: `consuming.py`) -----------------------------------------
    def consumers(self, queues: Sequence[str], ack_wait: float) -> Consumers:
        """This worker's consumers of `queues`, watched from now on (made once)."""
        if self._consumers is None:
            with contextlib.suppress(Exception):  # read here, not on the loop's thread
                _ = self.names  # (the watch reads it again once the database answers)
            self._consumers = Consumers(self, queues, ack_wait)
            self._consumers.start()
        return self._consumers

    def prepare(self, queues: Sequence[str], ack_wait: float) -> None:
        """Create the stream and each queue's durable consumer when missing, now,
        refusing a consumer whose ack_wait is not `ack_wait` or longer (ConfigError).
        Raises when the server cannot be reached or refuses them."""
        self.consumers(queues, ack_wait).bind_now()

    def health(self) -> tuple[str, str] | None:
        """Why NATS does not deliver to this worker now (`consuming.py`), or None."""
        if self._consumers is None:
            return ("binding", "no consumers yet")
        return self._consumers.health()

    def fetch(self, queue: str, limit: int, timeout: float) -> list[Msg]:
        """Up to `limit` messages of `queue`, waiting up to `timeout` for the first (and
        `PULL_GRACE` for JetStream's answer). Raises `Unanswered` when NATS does not
        deliver (the caller claims from the database)."""
        if self._consumers is None:
            raise Unanswered("binding", "no consumers yet")
        return self._consumers.fetch(queue, limit, timeout)

    def ack(self, messages: Sequence[Msg]) -> None:
        """Ack, best effort: a lost ack only means the message comes back (harmless)."""
        if self._consumers is not None:
            self._consumers.settle(messages, nak=False)

    def nak(self, messages: Sequence[Msg]) -> None:
        """Ask for redelivery now (the claim failed: the database was unreachable)."""
        if self._consumers is not None:
            self._consumers.settle(messages, nak=True)

    # -- what `consuming.py` uses ------------------------------------------------------
    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        return self._loop

    @property
    def connected(self) -> bool:
        """`available`, as read on the transport's loop."""
        return self.available

    def client(self) -> Client:
        assert self._nc is not None
        return self._nc

    def jetstream(self) -> tuple[JetStreamContext, JetStreamContext]:
        """The quick context (1 s: publishes, probes) and the admin one (creations)."""
        assert self._js is not None and self._admin is not None
        return self._js, self._admin

    async def check_stream(self) -> None:
        """Whether the stream answers (its leader, on a cluster), made (or joined) first
        when it has not been yet, or is gone; raises what kept it from answering."""
        if self._stream_ready:
            js, _ = self.jetstream()
            try:
                await js.stream_info(self.names.stream)
            except NotFoundError:
                self._stream_ready = False  # deleted: made again
        await self._ensure_stream(self.names)
        self.stream_seen = time.monotonic()

    def suspect_server(self) -> None:
        """Something did not answer: check the server this client is connected to, and
        move to another one when it answers nothing (a frozen node keeps its socket open:
        nats-py would notice only after its pings, minutes later)."""
        self._loop.call_soon_threadsafe(self._schedule_server_check)

    def _schedule_server_check(self) -> None:
        now = time.monotonic()
        if self._checking or now - self._checked_at < SERVER_CHECK_EVERY or self._closed:
            return
        self._checking = True
        self._checked_at = now
        self._loop.create_task(self._check_server())

    async def _check_server(self) -> None:
        """A request nobody listens to: a live server answers "no responders" at once."""
        try:
            nc = self._nc
            if nc is None or not nc.is_connected:
                return
            try:
                await nc.request(f"_HEARTQ.PING.{os.getpid()}", b"", timeout=SERVER_CHECK_TIMEOUT)
            except NoRespondersError:
                return  # it answers: the trouble is JetStream's (a leader), not the link
            except TimeoutError:  # nats-py's is one too
                current = nc.connected_url
                where = f"{current.hostname}:{current.port}" if current else "its server"
                self._disconnect_reason = (
                    f"{where} did not answer within {SERVER_CHECK_TIMEOUT:g} s: reconnecting"
                )
                await nc.force_reconnect()
            except Exception:  # noqa: BLE001 - a check, nothing more
                return
        finally:
            self._checking = False

    # -- tests and tools ---------------------------------------------------------------
    def backlog(self, queue: str) -> int:
        """Messages of `queue`'s consumer not yet acked (waiting, or delivered and in
        flight): 0 once every wake-up was dealt with."""
        js = self._js
        if js is None:
            raise ConnectionError("not connected")
        names = self.names
        info = self.call(js.consumer_info(names.stream, names.durable(queue)))
        return int(info.num_pending or 0) + int(info.num_ack_pending or 0)

    def delete_stream(self) -> None:
        """Delete this transport's stream (its consumers go with it)."""
        js = self._js
        if js is not None:
            with contextlib.suppress(NotFoundError):
                self.call(js.delete_stream(self.names.stream))


def _body(job_id: str, queue: str, recovery: str | None) -> bytes:
    """A wake-up: the job's id and queue (and why it is back, for a recovery)."""
    fields = {"job_id": job_id, "queue": queue}
    return json.dumps(fields | ({} if recovery is None else {"recovery": recovery})).encode()
