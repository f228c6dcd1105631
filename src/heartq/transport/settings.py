"""The transport URL's settings, parsed without nats-py: a URL heartq cannot use is
refused (`ConfigError`, one line) where it is given (`App(transport=...)`, `--transport`,
`HEARTQ_TRANSPORT`), before any job is stored, not at the first publish after one was.

URL options (`nats://host:4222?stream=S&prefix=p.q&ack_wait=300`):
`stream`, `prefix` (subjects; both default to the deployment's own: `names.py`),
`ack_wait` (seconds; default `max(60, 2 * (lease + reclaim interval))`, refused at worker
start unless longer than lease + reclaim interval), `republish_after` (seconds a job may
stay queued and runnable before the sweeper publishes it again, default 10),
`sweep_interval` (default 1), `backstop` (seconds between database claims of a worker
whose transport is up, for what no message names, e.g. jobs with a concurrency key;
default 10).
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import parse_qs, urlsplit, urlunsplit

from heartq.errors import ConfigError
from heartq.transport.names import NatsNames, check_prefix, check_stream

DEFAULT_REPUBLISH_AFTER = 10.0
DEFAULT_SWEEP_INTERVAL = 1.0
DEFAULT_BACKSTOP = 10.0
MIN_ACK_WAIT = 60.0


@dataclass(frozen=True)
class NatsOptions:
    """The transport URL's settings (module docstring)."""

    server: str
    stream: str | None = None
    """None: the deployment's own (`names.py`)."""
    prefix: str | None = None
    """None: the deployment's own (`names.py`)."""
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
        if "stream" in text:
            check_stream(text["stream"])
        if "prefix" in text:
            check_prefix(text["prefix"])
        if query:
            raise ConfigError(f"unknown transport option(s): {', '.join(sorted(query))}")
        server = urlunsplit((parts.scheme, parts.netloc, "", "", ""))
        return cls(server, **text, **numbers)  # type: ignore[arg-type]

    def names(self, deployment: str) -> NatsNames:
        """This URL's names for the deployment `deployment` (`stream=`/`prefix=` win)."""
        return NatsNames.derive(deployment, self.stream, self.prefix)

    def ack_wait_for(self, lease: float, reclaim_interval: float) -> float:
        """The consumer's ack_wait: a message unacked that long is delivered again, so it
        must outlast the longest a claimed job can be silent before the database takes it
        back (lease + reclaim interval); anything shorter is refused."""
        floor = lease + reclaim_interval
        chosen = self.ack_wait if self.ack_wait is not None else max(MIN_ACK_WAIT, 2 * floor)
        if chosen <= floor:
            raise ConfigError(
                f"transport ack_wait ({chosen:g} s) must be longer than lease + reclaim interval "
                f"({lease:g} + {reclaim_interval:g} s)"
            )
        return chosen
