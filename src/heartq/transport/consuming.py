"""A worker's side of the transport: its queues' consumers, its pulls, and whether NATS
delivers for them right now (`health`), watched in the background so that the fetch
loop never waits on JetStream longer than one short pull (docs/NATS.md, "Running on a
cluster").

Why in the background: on a three-node cluster whose stream leader was SIGKILLed,
JetStream needs about 5 s to elect another; each call the fetch loop made meanwhile
(re-binding its consumer after the reconnect, a fetch) blocked it up to 5 s, so it rarely
reached its database claim, and jobs waited 12-15 s. And a node frozen by SIGSTOP
answered nothing: its workers saw an empty queue (an empty `fetch`) for the whole freeze.

So the fetch loop only ever pulls (`fetch`: at most its wait + `PULL_GRACE`) and acks
(`ACK_TIMEOUT`), and asks `health` first, which reads state and never waits. What is not
right is marked, with its reason, by the pull that met it (silence, no responders, a
leadership change) or by the watch task on the transport's loop, which

- checks the stream every `WATCH_INTERVAL` unless a publish of this process was just
  acked (`stream_info`, bounded by `PROBE_TIMEOUT`): a stream electing its leader takes
  no wake-ups, so no worker may wait on it for them;
- binds every queue whose consumer is not known good (at start, after a reconnect, after
  a pull met trouble): `consumer_info`, made when missing, each bounded;
- and after any silence asks the transport to check its server (`suspect_server`), which
  moves to another node when its own answers nothing.

While `health` names a reason the worker claims from the database (`TransportFetch`);
once it names none, NATS delivers again.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Coroutine, Sequence
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from nats.aio.msg import Msg
from nats.js.api import AckPolicy, ConsumerConfig
from nats.js.errors import NotFoundError

from heartq import events
from heartq.errors import ConfigError
from heartq.transport.health import Unanswered
from heartq.transport.puller import PULL_GRACE, Puller
from heartq.transport.stream import NatsRefused, reason

if TYPE_CHECKING:
    from nats.aio.client import Client
    from nats.js import JetStreamContext

    from heartq.event_stream import EventStream
    from heartq.transport.names import NatsNames
    from heartq.transport.settings import NatsOptions

T = TypeVar("T")


class Connection(Protocol):
    """What the consumers use of their transport (`nats.NatsTransport`)."""

    options: NatsOptions
    events: EventStream
    stream_seen: float

    @property
    def loop(self) -> asyncio.AbstractEventLoop: ...
    @property
    def available(self) -> bool: ...
    @property
    def connected(self) -> bool: ...
    @property
    def names(self) -> NatsNames: ...
    def call(self, coro: Coroutine[Any, Any, T], timeout: float = ...) -> T: ...
    def client(self) -> Client: ...
    def jetstream(self) -> tuple[JetStreamContext, JetStreamContext]: ...
    async def check_stream(self) -> None: ...
    def suspect_server(self) -> None: ...


PROBE_TIMEOUT = 1.0
"""The longest one check of the stream or of a consumer waits for its answer."""
WATCH_INTERVAL = 1.0
"""How often the stream is checked while all is well (unless a publish just was acked)."""
RECOVER_INTERVAL = 0.25
"""How often what is wrong is checked again."""
ACK_TIMEOUT = 0.5
"""The longest the fetch loop waits to hand its acks over (they are not waited for)."""
SILENCES = 2
"""Pulls unanswered in a row before a consumer counts as silent (one is a slow answer)."""
PREPARE_TIMEOUT = 5.0
"""At worker start, the longest the stream and consumers get to be made and bound;
past it the worker starts on the database and the watch binds them later."""


class Consumers:
    """The consumers of one worker's queues on `transport` (module docstring)."""

    def __init__(self, transport: Connection, queues: Sequence[str], ack_wait: float) -> None:
        self.t = transport
        self.queues = list(queues)
        self.ack_wait = ack_wait
        self._pullers: dict[str, Puller] = {}
        self._lock = threading.Lock()
        self._ready: set[str] = set()
        self._trouble: dict[str, tuple[str, str]] = {}
        self._stream_trouble: tuple[str, str] | None = ("checking", "stream not checked yet")
        self._announce: set[str] = set(self.queues)
        """Queues whose binding `transport_ready` tells next (first, after a reconnect)."""
        self._config_errors: dict[str, ConfigError] = {}
        self._silences: dict[str, int] = {}
        self._watch: asyncio.Task[None] | None = None
        self._checks: asyncio.Lock | None = None
        self._nudge: asyncio.Event | None = None

    # -- the fetch loop's side (its thread) ------------------------------------------
    def start(self) -> None:
        """Start the watch (binding the consumers as soon as the server answers)."""
        self.t.call(self._start_watch(), 2.0)

    def bind_now(self) -> None:
        """Bind every queue now, if the server answers within `PREPARE_TIMEOUT`. Raises
        `ConfigError` for a consumer whose ack_wait is too short, and what kept the
        binding from happening (the watch tries again): NATS's refusal
        (`NatsRefused`), else `ConnectionError`."""
        try:
            self.t.call(self._check_all(), PREPARE_TIMEOUT)
        except TimeoutError:
            raise ConnectionError(
                f"NATS did not bind the consumers within {PREPARE_TIMEOUT:g} s"
            ) from None
        if self._config_errors:
            raise next(iter(self._config_errors.values()))
        trouble = self.health()
        if trouble is not None and trouble[0] == "refused":
            raise NatsRefused(trouble[1])
        if trouble is not None:
            raise ConnectionError(trouble[1])

    def health(self, queue: str | None = None) -> tuple[str, str] | None:
        """Why NATS does not deliver for `queue` (all of them when None) right now, as
        `(reason, detail)`; None when it does. Never waits."""
        if not self.t.available:
            return ("disconnected", "not connected to NATS")
        with self._lock:
            if self._stream_trouble is not None:
                return self._stream_trouble
            for name in [queue] if queue is not None else self.queues:
                if name not in self._ready:
                    return self._trouble.get(name, ("binding", f"consumer of {name} not bound"))
        return None

    def fetch(self, queue: str, limit: int, wait: float) -> list[Msg]:
        """Up to `limit` messages of `queue`, waiting up to `wait` for the first; raises
        `Unanswered` at once when `health` names a reason, and when the pull meets one
        (marked: the watch looks into it)."""
        trouble = self.health(queue)
        if trouble is not None:
            raise Unanswered(*trouble)
        puller = self._pullers[queue]
        try:
            got = self.t.call(puller.pull(limit, wait), wait + PULL_GRACE + 1.0)
        except Unanswered as exc:
            if exc.reason != "silent":
                self.mark(queue, exc.reason, exc.detail)
                raise
            detail = exc.detail
        except Exception as exc:  # noqa: BLE001 - the loop itself did not answer in time
            detail = str(exc) or type(exc).__name__
        else:
            self._silences[queue] = 0
            return got
        # Silence: the database claims this round. Once is a slow answer (a loaded
        # machine, requests queued on the server): the watch checks the consumer; twice
        # running, it is marked (degraded) until the watch finds it good.
        self._silences[queue] = silences = self._silences.get(queue, 0) + 1
        if silences >= SILENCES:
            self.mark(queue, "silent", detail)
            raise Unanswered("silent", detail)
        self.t.suspect_server()
        self._wake()
        raise Unanswered("slow", detail)

    def settle(self, messages: Sequence[Msg], nak: bool) -> None:
        """Ack (or nak) best effort, waiting at most `ACK_TIMEOUT`: a lost ack only
        means the message comes back, and claims nothing then."""
        if messages:
            with contextlib.suppress(Exception):
                self.t.call(_settle(messages, nak), ACK_TIMEOUT)

    def mark(self, queue: str, word: str, detail: str) -> None:
        """`queue`'s consumer met trouble: not used until the watch finds it good."""
        with self._lock:
            self._ready.discard(queue)
            self._trouble[queue] = (word, detail)
        if word == "silent":
            self.t.suspect_server()
        self._wake()

    def reconnected(self) -> None:
        """After a reconnect the server may have lost state (a restarted single node):
        every consumer and the stream are checked again before use."""
        with self._lock:
            for queue in self.queues:
                self._ready.discard(queue)
                self._trouble[queue] = ("binding", "reconnected: checking the consumers")
            self._announce.update(self.queues)
            self._stream_trouble = ("checking", "reconnected: checking the stream")
        self._wake()

    def _wake(self) -> None:
        nudge = self._nudge
        if nudge is not None:
            self.t.loop.call_soon_threadsafe(nudge.set)

    # -- the watch (the transport's loop) --------------------------------------------
    async def _start_watch(self) -> None:
        if self._watch is None:
            self._nudge = asyncio.Event()
            self._watch = asyncio.get_running_loop().create_task(self._watching())

    async def _watching(self) -> None:
        assert self._nudge is not None
        while True:
            troubled = self.health() is not None
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(
                    self._nudge.wait(), RECOVER_INTERVAL if troubled else WATCH_INTERVAL
                )
            self._nudge.clear()
            if self.t.connected:
                await self._check_all()

    async def _check_all(self) -> None:
        """The stream (unless a publish was acked within `WATCH_INTERVAL`), then every
        queue not known good; one check at a time (the watch's, and `bind_now`'s)."""
        if self._checks is None:
            self._checks = asyncio.Lock()
        async with self._checks:
            await self._check_all_now()

    async def _check_all_now(self) -> None:
        if not self.t.connected:
            return
        fresh = time.monotonic() - self.t.stream_seen < WATCH_INTERVAL
        if self._stream_trouble is not None or not fresh:
            await self._check_stream()
        if self._stream_trouble is not None:
            return
        for queue in self.queues:
            if queue not in self._ready or self._silences.get(queue, 0):
                await self._check_queue(queue)

    async def _check_stream(self) -> None:
        """Its answer, each look bounded by `PROBE_TIMEOUT` (by the quick context), a
        creation by the admin one's."""
        try:
            await self.t.check_stream()
        except Exception as exc:  # noqa: BLE001 - said through health, tried again
            self._stream_failed(exc, self.t.names.stream)
            return
        with self._lock:
            self._stream_trouble = None

    def _stream_failed(self, exc: Exception, stream: str) -> None:
        if isinstance(exc, TimeoutError):
            said = f"stream {stream} did not answer within {PROBE_TIMEOUT:g} s"
            trouble = ("stream_silent", said)
            self.t.suspect_server()
        elif isinstance(exc, NatsRefused):
            trouble = ("refused", str(exc))
        else:
            trouble = ("stream_unavailable", f"stream {stream}: {reason(exc)}")
        with self._lock:
            self._stream_trouble = trouble

    async def _check_queue(self, queue: str) -> None:
        try:
            await asyncio.wait_for(self._bind(queue), PROBE_TIMEOUT + PREPARE_TIMEOUT)
        except ConfigError as exc:
            trouble = ("refused", str(exc))
            self._config_errors[queue] = exc
        except NatsRefused as exc:
            trouble = ("refused", str(exc))
        except TimeoutError:
            trouble = ("silent", f"consumer of {queue} did not answer within {PROBE_TIMEOUT:g} s")
            self.t.suspect_server()
        except Exception as exc:  # noqa: BLE001 - said through health, tried again
            trouble = ("unavailable", f"consumer of {queue}: {reason(exc)}")
        else:
            with self._lock:
                self._ready.add(queue)
                self._trouble.pop(queue, None)
            self._config_errors.pop(queue, None)
            self._silences[queue] = 0  # the consumer answered: a silence forgiven
            return
        with self._lock:
            self._ready.discard(queue)
            self._trouble[queue] = trouble

    async def _bind(self, queue: str) -> None:
        """The queue's consumer, made when missing; one made with a shorter ack_wait
        (by this deployment's workers: the name carries its id) is refused."""
        names = self.t.names
        js, admin = self.t.jetstream()
        name = names.durable(queue)
        try:
            info = await asyncio.wait_for(js.consumer_info(names.stream, name), PROBE_TIMEOUT)
        except NotFoundError:
            refused: Exception | None = None
            try:
                await admin.add_consumer(
                    names.stream,
                    ConsumerConfig(
                        durable_name=name,
                        description=f"heartq deployment {names.deployment}, queue {queue}",
                        ack_policy=AckPolicy.EXPLICIT,
                        ack_wait=self.ack_wait,
                        filter_subject=names.subject(queue),
                    ),
                )
            except Exception as exc:  # noqa: BLE001 - or another worker made it meanwhile
                refused = exc
            try:
                info = await admin.consumer_info(names.stream, name)
            except NotFoundError:
                raise NatsRefused(
                    f"NATS refused consumer {name} on stream {names.stream}: {reason(refused)}"
                ) from None
        have = info.config.ack_wait
        if have is not None and have < self.ack_wait:
            raise ConfigError(
                f"NATS consumer {name} has ack_wait {have:g} s, shorter than the "
                f"{self.ack_wait:g} s this worker needs (lease + reclaim interval, and more): "
                "delete it or raise its ack_wait"
            )
        if queue not in self._pullers:
            puller = Puller(self.t.client(), names.stream, name)
            await puller.start()
            self._pullers[queue] = puller
        if queue in self._announce:
            self._announce.discard(queue)
            self.t.events.emit(
                events.TRANSPORT_READY,
                server=self.t.options.server,
                deployment=names.deployment,
                stream=names.stream,
                subjects=names.subjects,
                consumers=[name],
            )


async def _settle(messages: Sequence[Msg], nak: bool) -> None:
    await asyncio.gather(*(m.nak() if nak else m.ack() for m in messages))
