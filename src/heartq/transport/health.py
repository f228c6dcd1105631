"""What a worker is told when NATS does not deliver (`Unanswered`), without nats-py: the
worker's fetch loop catches it (`heartq.worker.transport_fetch`), and a worker without a
transport never imports nats-py."""

from __future__ import annotations


class Unanswered(Exception):
    """JetStream did not answer as a working stream and consumer do: the worker claims
    from the database instead (`heartq.transport.consuming`, `puller.py`)."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        """A short word: `silent`, `no_responders`, `leadership_change`, `refused`,
        `binding`, `stream_silent`, `stream_unavailable`, `unavailable`, `checking`,
        `disconnected`."""
        self.detail = detail
