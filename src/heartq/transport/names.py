"""The NATS names of one deployment: its stream, its subjects and its consumers
(docs/NATS.md, "Names").

Why names are derived from the database rather than fixed: a NATS server outlives and is
shared by deployments. With fixed names (`HEARTQ`, `HEARTQ_<queue>`, heartq before schema
v9) two queues on one server shared a consumer: each worker acked the other's wake-ups
(claiming nothing), and a worker needing a longer ack_wait than the consumer another
deployment made refused to start. Each database now holds a deployment id (made once by
migration 0009), and every default name carries it:

- stream `HEARTQ_<id>`, subjects `heartq.<id>.<queue>`, consumers `HEARTQ_<id>_<queue>`.

`stream=` and `prefix=` in the transport URL replace the stream's name and the subjects'
prefix; the consumers keep the id whatever the URL says, so deployments that share a
stream on purpose (each with its own subjects) never share a consumer.

No nats-py here: names are plain strings, checked and derived without a server.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from heartq.errors import ConfigError

STREAM_ROOT = "HEARTQ"
"""The default stream is `HEARTQ_<deployment id>`; consumers are `HEARTQ_<id>_<queue>`."""
SUBJECT_ROOT = "heartq"
"""The default subject prefix is `heartq.<deployment id>` (not under `heartq.jobs`, the
prefix of versions before schema v9, whose stream would otherwise overlap a new one)."""

_TOKEN = re.compile(r"[A-Za-z0-9_-]")
_NAME = re.compile(r"[A-Za-z0-9_-]+")
_PREFIX = re.compile(r"[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*")


def token(queue: str) -> str:
    """A queue name as one subject token and consumer-name part: NATS gives `.`, `*`, `>`
    and spaces meanings, so anything but letters, digits, `_` and `-` is escaped."""
    return "".join(c if _TOKEN.fullmatch(c) else f"~{ord(c):x}~" for c in queue) or "~"


def check_stream(name: str) -> str:
    """A `stream=` from the URL, refused (one line) unless NATS can take it as a name."""
    if not _NAME.fullmatch(name):
        raise ConfigError(f"transport stream {name!r} must be letters, digits, '_' and '-' only")
    return name


def check_prefix(prefix: str) -> str:
    """A `prefix=` from the URL, refused (one line) unless it is subject tokens without
    wildcards (each queue's subject is `<prefix>.<queue>`)."""
    if not _PREFIX.fullmatch(prefix):
        raise ConfigError(
            f"transport prefix {prefix!r} must be dot-separated tokens of letters, digits, "
            "'_' and '-' (no wildcards, no spaces)"
        )
    return prefix


@dataclass(frozen=True)
class NatsNames:
    """Where one deployment's wake-ups go on a NATS server."""

    deployment: str
    stream: str
    prefix: str

    @classmethod
    def derive(cls, deployment: str, stream: str | None, prefix: str | None) -> NatsNames:
        """The URL's `stream`/`prefix` when given, else the deployment's own."""
        return cls(
            deployment=deployment,
            stream=stream if stream is not None else f"{STREAM_ROOT}_{token(deployment)}",
            prefix=prefix if prefix is not None else f"{SUBJECT_ROOT}.{token(deployment)}",
        )

    @property
    def subjects(self) -> str:
        """The stream's subjects for this deployment: every queue's."""
        return f"{self.prefix}.>"

    def subject(self, queue: str) -> str:
        return f"{self.prefix}.{token(queue)}"

    def durable(self, queue: str) -> str:
        """The queue's consumer, shared by every worker of this deployment and queue, and
        by no other deployment's (the id is in it even on a stream named in the URL)."""
        return f"{STREAM_ROOT}_{token(self.deployment)}_{token(queue)}"
