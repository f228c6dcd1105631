"""Optional transports: a message broker that *delivers* wake-ups for jobs the database
already holds (docs/NATS.md). The database stays the single source of truth for who owns
a job: a message only names a job, and a worker claims it through the same fenced claim
as the polling path (`Store.claim_ids`), so a duplicate or late message runs nothing.

`transport=None` (no `--transport`, no `HEARTQ_TRANSPORT`) changes nothing anywhere.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from heartq.errors import ConfigError

if TYPE_CHECKING:
    from heartq.event_stream import EventStream
    from heartq.transport.nats import NatsTransport

ENV_TRANSPORT = "HEARTQ_TRANSPORT"


def resolve_transport(url: str | None, environ: Mapping[str, str] | None = None) -> str | None:
    """The `--transport`/`transport=` argument, else `HEARTQ_TRANSPORT`, else None; its
    options checked here (`ConfigError`), so a bad one is refused before a job is stored."""
    env = os.environ if environ is None else environ
    chosen = url or env.get(ENV_TRANSPORT) or None
    if chosen is not None and not chosen.startswith(("nats://", "tls://")):
        given = "transport" if url else ENV_TRANSPORT  # say where it came from
        raise ConfigError(f"{given} must be a nats:// URL, got {chosen!r}")
    if chosen is not None:
        # Imported here: a process (a worker, a command) whose app has no transport does
        # not pay for the options' parsing at start-up.
        from heartq.transport.settings import NatsOptions

        NatsOptions.parse(chosen)
    return chosen


def open_transport(url: str, deployment: Callable[[], str], events: EventStream) -> NatsTransport:
    """A connection to the transport at `url` (connecting in the background: an
    unreachable server never blocks the caller), for the deployment whose id
    `deployment()` reads from its database (its NATS names carry it: docs/NATS.md),
    telling its app's `events` when it comes and goes. Needs `pip install heartq[nats]`."""
    try:
        from heartq.transport.nats import NatsTransport
    except ImportError as exc:  # nats-py missing
        raise ConfigError(
            f"the nats transport needs nats-py: pip install 'heartq[nats]' ({exc})"
        ) from None
    return NatsTransport(url, deployment, events)
