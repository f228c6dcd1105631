"""One queue's pull requests, made by hand so that silence can be told from an empty
queue.

nats-py's `fetch` answers an empty list (or a timeout) both when the consumer said
"nothing for you" and when nobody answered at all: a frozen node, a consumer without a
leader. To the worker those are opposites (wait on NATS, or claim from the database at
once), and before they looked alike: a worker on a SIGSTOPped node saw an empty queue
for the whole freeze and claimed from the database only at its 10 s backstop. So each
pull is a request to the consumer's `$JS.API.CONSUMER.MSG.NEXT` subject, with `expires`,
on an inbox of this queue's own, and JetStream's answer is read as it is:

- messages: delivered, handed over with those that came with the first (not waiting
  for the batch to fill: the request may deliver more later, which the next pull finds
  in hand; so may one that gave up);
- status 404 (no messages) or 408 (the request expired): answered, nothing waiting;
- status 409 (leadership change, consumer deleted) or 503 (no responders: the consumer
  has no leader, or is gone): `Unanswered`, with NATS's words;
- nothing within `expires` + `PULL_GRACE`: `Unanswered` ("silent").

Runs on the transport's event loop; one pull at a time per queue (the fetch loop's).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time

from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription

from heartq.transport.health import Unanswered

PULL_GRACE = 0.3
"""How long past its `expires` a pull waits for JetStream's answer before it counts as
silence: the server answers an expired request at once (408), so a slow machine's
scheduling is all this covers."""
API_PREFIX = "$JS.API"


class Puller:
    """The pull requests of one queue's consumer (`stream`, `durable`) on `nc`."""

    def __init__(self, nc: Client, stream: str, durable: str) -> None:
        self._nc = nc
        self.subject = f"{API_PREFIX}.CONSUMER.MSG.NEXT.{stream}.{durable}"
        self.durable = durable
        self._inbox = nc.new_inbox()
        self._sub: Subscription | None = None
        self._seq = 0

    async def start(self) -> None:
        """Subscribe to this queue's inbox (nats-py subscribes again after a reconnect)."""
        if self._sub is None:
            self._sub = await self._nc.subscribe(f"{self._inbox}.*")

    async def stop(self) -> None:
        if self._sub is not None:
            sub, self._sub = self._sub, None
            with contextlib.suppress(Exception):  # the connection is going anyway
                await sub.unsubscribe()

    async def pull(self, batch: int, wait: float) -> list[Msg]:
        """Up to `batch` messages, waiting up to `wait` for the first; raises
        `Unanswered` (module docstring). Messages already in hand (delivered after an
        earlier pull gave up) come first, and with some in hand nothing lingers."""
        sub = self._sub
        assert sub is not None
        got: list[Msg] = []
        while len(got) < batch and sub.pending_msgs > 0:
            msg = await sub.next_msg(timeout=1.0)
            if not (msg.headers and msg.headers.get("Status")):
                got.append(msg)  # statuses in hand end earlier requests: dropped
        if len(got) == batch:
            return got
        self._seq += 1
        reply = f"{self._inbox}.{self._seq}"
        request: dict[str, object] = {"batch": batch - len(got)}
        if got:
            request["no_wait"] = True  # some in hand: take what waits, do not linger
            wait = 0.0
        else:
            request["expires"] = int(wait * 1e9)
        await self._nc.publish(self.subject, json.dumps(request).encode(), reply=reply)
        deadline = time.monotonic() + wait + PULL_GRACE
        while len(got) < batch:
            left = deadline - time.monotonic()
            if left <= 0:
                if got:
                    return got
                raise Unanswered("silent", f"no answer to a pull within {wait + PULL_GRACE:g} s")
            try:
                msg = await sub.next_msg(timeout=left)
            except TimeoutError:  # nats-py's is one too
                continue
            status = msg.headers.get("Status") if msg.headers else None
            if not status:
                # The first delivery: take those sent with it and go, not waiting for
                # the batch to fill (what the request delivers later, the next pull finds).
                got.append(msg)
                await asyncio.sleep(0)
                while len(got) < batch and sub.pending_msgs > 0:
                    more = await sub.next_msg(timeout=1.0)
                    if not (more.headers and more.headers.get("Status")):
                        got.append(more)
                return got
            if msg.subject != reply or status == "100":
                continue  # the end of an earlier request, or a heartbeat
            if status in ("404", "408") or got:
                return got
            description = (msg.headers or {}).get("Description", "") or ""
            word = "no_responders" if status == "503" else "refused"
            if "leadership" in description.lower():
                word = "leadership_change"
            raise Unanswered(word, f"JetStream answered {status} {description}".strip())
        return got
