"""JetStream as a delivery channel for job ids (docs/NATS.md).

One stream (default `HEARTQ`) with a subject per queue (`<prefix>.<queue>`), work-queue
retention (a message is gone once acked), and one durable pull consumer per queue shared
by every worker of that queue, explicit ack. A message is `{"job_id", "queue"}`: a wake-up,
never a right to run.

nats-py is asyncio; heartq's worker and `App.enqueue` are threads. So a transport owns an
event loop on a daemon thread and every call is a bounded wait on it: an unreachable or
slow server costs a caller at most its timeout, and when not connected, nothing (publish
answers False at once; the database is the outbox, the sweeper publishes later).

URL options (`nats://host:4222?stream=HEARTQ&prefix=heartq.jobs&ack_wait=300`):
`stream`, `prefix` (subjects), `ack_wait` (seconds; default `max(60, 2 * (lease +
reap interval))`, refused at worker start unless longer than lease + reap interval),
`republish_after` (seconds a job may stay queued and runnable before the sweeper
publishes it again, default 10), `sweep_interval` (default 1), `backstop` (seconds
between database claims of a worker whose transport is up, for what no message names,
e.g. jobs with a concurrency key; default 10).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import re
import threading
from collections.abc import Coroutine, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar
from urllib.parse import parse_qs, urlsplit, urlunsplit

import nats
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js.api import AckPolicy, ConsumerConfig, RetentionPolicy, StreamConfig
from nats.js.errors import NotFoundError

from heartq import events
from heartq.errors import ConfigError

T = TypeVar("T")

CALL_TIMEOUT = 5.0
"""The longest a caller waits for one round of calls to the server (publish acks, admin)."""
FIRST_CONNECT_WAIT = 2.0
"""A new transport's first publish waits up to 2 s for the first connection attempt (an
app's first enqueue comes right after it opened the transport); later ones never wait."""
RECONNECT_WAIT = 0.5
"""Seconds between two attempts to reach the server, first connection included."""
DEFAULT_REPUBLISH_AFTER = 10.0
DEFAULT_SWEEP_INTERVAL = 1.0
DEFAULT_BACKSTOP = 10.0
MIN_ACK_WAIT = 60.0
_TOKEN = re.compile(r"[A-Za-z0-9_-]")


def token(queue: str) -> str:
    """A queue name as one subject token and consumer-name part: NATS gives `.`, `*`, `>`
    and spaces meanings, so anything but letters, digits, `_` and `-` is escaped."""
    return "".join(c if _TOKEN.fullmatch(c) else f"~{ord(c):x}~" for c in queue) or "~"


@dataclass(frozen=True)
class NatsOptions:
    """The transport URL's settings (module docstring)."""

    server: str
    stream: str = "HEARTQ"
    prefix: str = "heartq.jobs"
    ack_wait: float | None = None
    republish_after: float = DEFAULT_REPUBLISH_AFTER
    sweep_interval: float = DEFAULT_SWEEP_INTERVAL
    backstop: float = DEFAULT_BACKSTOP

    @classmethod
    def parse(cls, url: str) -> NatsOptions:
        parts = urlsplit(url)
        query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
        numbers: dict[str, float] = {}
        for name in ("ack_wait", "republish_after", "sweep_interval", "backstop"):
            if name in query:
                try:
                    numbers[name] = float(query.pop(name))
                except ValueError:
                    raise ConfigError(f"transport {name} must be a number of seconds") from None
                if not numbers[name] > 0:
                    raise ConfigError(f"transport {name} must be positive")
        text = {k: query.pop(k) for k in ("stream", "prefix") if k in query}
        if query:
            raise ConfigError(f"unknown transport option(s): {', '.join(sorted(query))}")
        server = urlunsplit((parts.scheme, parts.netloc, "", "", ""))
        return cls(server, **text, **numbers)  # type: ignore[arg-type]

    def subject(self, queue: str) -> str:
        return f"{self.prefix}.{token(queue)}"

    def durable(self, queue: str) -> str:
        return f"{self.stream}_{token(queue)}"

    def ack_wait_for(self, lease: float, reap_interval: float) -> float:
        """The consumer's ack_wait: a message unacked that long is delivered again, so it
        must outlast the longest a claimed job can be silent before the database takes it
        back (lease + reap interval); anything shorter is refused."""
        floor = lease + reap_interval
        chosen = self.ack_wait if self.ack_wait is not None else max(MIN_ACK_WAIT, 2 * floor)
        if chosen <= floor:
            raise ConfigError(
                f"transport ack_wait ({chosen:g} s) must be longer than lease + reap interval "
                f"({lease:g} + {reap_interval:g} s)"
            )
        return chosen


class NatsTransport:
    """A JetStream connection on its own event loop thread (module docstring)."""

    def __init__(self, url: str) -> None:
        self.options = NatsOptions.parse(url)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="heartq-transport", daemon=True
        )
        self._thread.start()
        self._nc: Client | None = None
        self._js: JetStreamContext | None = None
        self._subs: dict[str, JetStreamContext.PullSubscription] = {}
        self._ensured: set[str] = set()
        self._stream_ready = False
        self._ack_wait: float | None = None
        self._closed = False
        self._was_up: bool | None = None
        self._first_attempt = threading.Event()
        self._connecting = asyncio.run_coroutine_threadsafe(self._connect(), self._loop)

    # -- connection --------------------------------------------------------------------
    async def _connect(self) -> None:
        """Try until connected (or closed); nats-py then reconnects by itself."""
        while not self._closed:
            try:
                self._nc = await nats.connect(
                    servers=[self.options.server],
                    allow_reconnect=True,
                    max_reconnect_attempts=-1,
                    reconnect_time_wait=RECONNECT_WAIT,
                    connect_timeout=1,
                    error_cb=self._on_error,
                    disconnected_cb=self._on_disconnected,
                    reconnected_cb=self._on_reconnected,
                )
                self._js = self._nc.jetstream(timeout=CALL_TIMEOUT)
                self._report(True)
                self._first_attempt.set()
                return
            except Exception as exc:  # noqa: BLE001 - unreachable: tell once, try again
                self._report(False, str(exc) or type(exc).__name__)
                self._first_attempt.set()
                await asyncio.sleep(RECONNECT_WAIT)

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
            self._report(False, "disconnected")

    async def _on_reconnected(self) -> None:
        self._subs.clear()  # rebound on next use: the server may have lost its state
        self._ensured.clear()
        self._stream_ready = False
        self._report(True)

    def _report(self, up: bool, error: str = "") -> None:
        """`transport_available` / `transport_unavailable` once per change of state."""
        if self._was_up is up:
            return
        self._was_up = up
        if up:
            events.emit(events.TRANSPORT_AVAILABLE, server=self.options.server)
        else:
            events.emit(
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

    def _call(self, coro: Coroutine[Any, Any, T], timeout: float = CALL_TIMEOUT) -> T:
        future = asyncio.run_coroutine_threadsafe(coro, self._loop)
        try:
            return future.result(timeout)
        except BaseException:
            future.cancel()
            raise

    def close(self) -> None:
        """Drain nothing (messages not acked are delivered again: harmless) and stop."""
        if self._closed:
            return
        self._closed = True
        self._was_up = False
        nc = self._nc
        if nc is not None:
            with contextlib.suppress(Exception):
                self._call(nc.close(), 2.0)
        with contextlib.suppress(Exception):
            self._call(self._end_tasks(), 2.0)
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

    # -- publishing --------------------------------------------------------------------
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
            self._call(self._publish(jobs, recovery))
            return True
        except Exception:  # noqa: BLE001 - the database is the outbox
            return False

    async def _publish(self, jobs: Sequence[tuple[str, str]], recovery: str | None) -> None:
        js = self._js
        assert js is not None
        await self._ensure_stream(js)
        sends = [
            js.publish(
                self.options.subject(queue),
                json.dumps(
                    {"job_id": job_id, "queue": queue}
                    | ({} if recovery is None else {"recovery": recovery})
                ).encode(),
                stream=self.options.stream,
            )
            for job_id, queue in jobs
        ]
        await asyncio.gather(*sends)

    async def _ensure_stream(self, js: JetStreamContext) -> None:
        """Create the stream when missing (its settings are then the operator's)."""
        if self._stream_ready:
            return
        try:
            await js.stream_info(self.options.stream)
        except NotFoundError:
            with contextlib.suppress(Exception):  # created by another process meanwhile
                await js.add_stream(
                    StreamConfig(
                        name=self.options.stream,
                        subjects=[f"{self.options.prefix}.>"],
                        retention=RetentionPolicy.WORK_QUEUE,
                    )
                )
            await js.stream_info(self.options.stream)
        self._stream_ready = True

    # -- consuming ---------------------------------------------------------------------
    def prepare(self, queues: Sequence[str], ack_wait: float) -> None:
        """Create the stream and each queue's durable consumer when missing, refusing a
        consumer whose ack_wait is not `ack_wait` or longer (ConfigError). Raises when
        the server cannot be reached."""
        self._ack_wait = ack_wait
        self._call(self._prepare(list(queues), ack_wait))

    async def _prepare(self, queues: list[str], ack_wait: float) -> None:
        js = self._js
        if js is None or not self.available:
            raise ConnectionError("not connected")
        await self._ensure_stream(js)
        for queue in queues:
            if queue in self._ensured:
                continue
            name = self.options.durable(queue)
            try:
                info = await js.consumer_info(self.options.stream, name)
            except NotFoundError:
                with contextlib.suppress(Exception):  # another worker made it meanwhile
                    await js.add_consumer(
                        self.options.stream,
                        ConsumerConfig(
                            durable_name=name,
                            ack_policy=AckPolicy.EXPLICIT,
                            ack_wait=ack_wait,
                            filter_subject=self.options.subject(queue),
                        ),
                    )
                info = await js.consumer_info(self.options.stream, name)
            have = info.config.ack_wait
            if have is not None and have < ack_wait:
                raise ConfigError(
                    f"NATS consumer {name} has ack_wait {have:g} s, shorter than the "
                    f"{ack_wait:g} s this worker needs (lease + reap interval, and more): "
                    "delete it or raise its ack_wait"
                )
            self._subs[queue] = await js.pull_subscribe_bind(
                durable=name, stream=self.options.stream
            )
            self._ensured.add(queue)

    def fetch(self, queue: str, limit: int, timeout: float) -> list[Msg]:
        """Up to `limit` messages of `queue`, waiting up to `timeout` for the first.
        Raises when the server cannot be reached (the caller falls back to polling)."""
        return self._call(self._fetch(queue, limit, timeout), timeout + CALL_TIMEOUT)

    async def _fetch(self, queue: str, limit: int, timeout: float) -> list[Msg]:
        if queue not in self._subs:
            await self._prepare([queue], self._ack_wait or MIN_ACK_WAIT)
        try:
            return await self._subs[queue].fetch(limit, timeout=timeout)
        except TimeoutError:  # nats.errors.TimeoutError is one too
            return []

    def ack(self, messages: Sequence[Msg]) -> None:
        """Ack, best effort: a lost ack only means the message comes back (harmless)."""
        if messages:
            with contextlib.suppress(Exception):
                self._call(self._settle(messages, nak=False))

    def nak(self, messages: Sequence[Msg]) -> None:
        """Ask for redelivery now (the claim failed: the database was unreachable)."""
        if messages:
            with contextlib.suppress(Exception):
                self._call(self._settle(messages, nak=True))

    @staticmethod
    async def _settle(messages: Sequence[Msg], nak: bool) -> None:
        await asyncio.gather(*(m.nak() if nak else m.ack() for m in messages))

    # -- tests and tools ---------------------------------------------------------------
    def backlog(self, queue: str) -> int:
        """Messages of `queue`'s consumer not yet acked (waiting, or delivered and in
        flight): 0 once every wake-up was dealt with."""
        js = self._js
        if js is None:
            raise ConnectionError("not connected")
        info = self._call(js.consumer_info(self.options.stream, self.options.durable(queue)))
        return int(info.num_pending or 0) + int(info.num_ack_pending or 0)

    def delete_stream(self) -> None:
        """Delete this transport's stream (its consumers go with it)."""
        js = self._js
        if js is not None:
            with contextlib.suppress(NotFoundError):
                self._call(js.delete_stream(self.options.stream))
