"""The transport URL's settings, parsed without nats-py: a URL heartq cannot use is
refused (`ConfigError`, one line) where it is given (`App(transport=...)`, `--transport`,
`HEARTQ_TRANSPORT`), before any job is stored, not at the first publish after one was.

`nats://n1:4222[,n2:4222,...]?option=value&...` (servers: `servers.py`). Options, each
optional (docs/NATS.md, "Settings"):

- names: `stream`, `prefix` (both default to the deployment's own: `names.py`);
- delivery: `ack_wait` (seconds; default `max(60, 2 * (lease + reclaim interval))`,
  refused at worker start unless longer than lease + reclaim interval),
  `republish_after` (seconds a job may stay queued and runnable before the sweeper
  publishes it again, default 10), `sweep_interval` (default 1), `backstop` (seconds
  between database claims of a worker whose transport is up, for what no message names,
  e.g. jobs with a concurrency key; default 10), `stale_after` (seconds a job may wait
  runnable, while a worker has free slots and NATS brings it nothing, before that worker
  claims from the database: its wake-up was lost; default 2, 0: never);
- the client's connection: `connect_timeout` (1), `reconnect_wait` (0.5),
  `ping_interval` (120, nats-py's), `max_outstanding_pings` (2), `randomize` (`true`:
  servers tried in random order; `false`: in the URL's);
- the stream, applied when heartq creates it: `replicas` (1 to 5; default 1),
  `storage` (`file` or `memory`; default file), `max_age` (seconds), `max_msgs`,
  `max_bytes` (default: no limit). On a stream that exists, those given are compared
  with its own and a difference said in one line (`transport_stream_mismatch`); heartq
  changes nothing on a stream it did not make.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any
from urllib.parse import parse_qs

from heartq.errors import ConfigError
from heartq.transport.names import NatsNames, check_prefix, check_stream
from heartq.transport.servers import Server, parse_servers

DEFAULT_REPUBLISH_AFTER = 10.0
DEFAULT_SWEEP_INTERVAL = 1.0
DEFAULT_BACKSTOP = 10.0
DEFAULT_STALE_AFTER = 2.0
MIN_ACK_WAIT = 60.0
MAX_REPLICAS = 5
"""JetStream's own bound on a stream's replicas."""
STORAGE = ("file", "memory")

_SECONDS = (
    "ack_wait",
    "republish_after",
    "sweep_interval",
    "backstop",
    "stale_after",
    "connect_timeout",
    "reconnect_wait",
    "ping_interval",
    "max_age",
)
_COUNTS = ("max_outstanding_pings", "replicas", "max_msgs", "max_bytes")
_ZERO_OK = ("stale_after",)
_TRUE, _FALSE = ("true", "1", "yes", "on"), ("false", "0", "no", "off")


@dataclass(frozen=True)
class NatsOptions:
    """The transport URL's settings (module docstring)."""

    servers: tuple[Server, ...]
    stream: str | None = None
    """None: the deployment's own (`names.py`)."""
    prefix: str | None = None
    """None: the deployment's own (`names.py`)."""
    ack_wait: float | None = None
    republish_after: float = DEFAULT_REPUBLISH_AFTER
    sweep_interval: float = DEFAULT_SWEEP_INTERVAL
    backstop: float = DEFAULT_BACKSTOP
    stale_after: float = DEFAULT_STALE_AFTER
    """0: never (the backstop alone)."""
    connect_timeout: float = 1.0
    reconnect_wait: float = 0.5
    ping_interval: float = 120.0
    max_outstanding_pings: int = 2
    randomize: bool = True
    replicas: int | None = None
    """None: 1 when heartq creates the stream, anything on one that exists."""
    storage: str | None = None
    max_age: float | None = None
    max_msgs: int | None = None
    max_bytes: int | None = None

    @classmethod
    def parse(cls, url: str) -> NatsOptions:
        head, _, query_text = url.partition("?")
        servers = parse_servers(head)
        query = {k: v[-1] for k, v in parse_qs(query_text, keep_blank_values=True).items()}
        chosen: dict[str, Any] = {}
        for name in _SECONDS:
            if name in query:
                chosen[name] = _number(name, query.pop(name), float)
        for name in _COUNTS:
            if name in query:
                chosen[name] = _number(name, query.pop(name), int)
        if "randomize" in query:
            chosen["randomize"] = _flag("randomize", query.pop("randomize"))
        for name in ("stream", "prefix", "storage"):
            if name in query:
                chosen[name] = query.pop(name)
        if "stream" in chosen:
            check_stream(chosen["stream"])
        if "prefix" in chosen:
            check_prefix(chosen["prefix"])
        if chosen.get("storage", "file") not in STORAGE:
            raise ConfigError(
                f"transport storage must be file or memory, got {chosen['storage']!r}"
            )
        if not 1 <= chosen.get("replicas", 1) <= MAX_REPLICAS:
            raise ConfigError(f"transport replicas must be 1 to {MAX_REPLICAS}")
        if query:
            raise ConfigError(f"unknown transport option(s): {', '.join(sorted(query))}")
        return cls(servers, **chosen)

    @property
    def server(self) -> str:
        """The servers as heartq prints them (events, refusals): passwords hidden."""
        return ",".join(server.display for server in self.servers)

    @property
    def urls(self) -> list[str]:
        """The servers as nats-py connects to them."""
        return [server.url for server in self.servers]

    def stream_settings(self) -> dict[str, Any]:
        """The stream settings the URL gives (`replicas`, `storage`, limits): applied
        when heartq creates the stream, compared with an existing one's."""
        names = ("replicas", "storage", "max_age", "max_msgs", "max_bytes")
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name in names
                and getattr(self, f.name) is not None}  # fmt: skip

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


def _number(name: str, text: str, kind: type[float] | type[int]) -> Any:
    """A positive number of seconds (`float`) or a positive whole number (`int`); 0 too
    for `stale_after` (off)."""
    try:
        value = kind(text)
    except ValueError:
        what = "a number of seconds" if kind is float else "a whole number"
        raise ConfigError(f"transport {name} must be {what}, got {text!r}") from None
    if not (value > 0 or (value == 0 and name in _ZERO_OK)):
        raise ConfigError(f"transport {name} must be positive")
    return value


def _flag(name: str, text: str) -> bool:
    if text.lower() in _TRUE:
        return True
    if text.lower() in _FALSE:
        return False
    raise ConfigError(f"transport {name} must be true or false, got {text!r}")
