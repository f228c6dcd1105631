"""PostgreSQL's notifications: the channels of a schema, and LISTEN on the store's lasting
session.

Why apart from the dialect: sending is SQL (a `NOTIFY` in the transaction that enqueues,
ends or cancels: `PostgresDialect`), hearing is not: a LISTEN lives on a session that
stays open, shared with the liveness locks (`session.py`). Behind a transaction-mode
pooler without a direct URL there is no such session: the store's link has no listeners
(workers poll for jobs, their pulse reads cancels, `App.result` re-reads), and the
NOTIFYs enqueues send still wake whoever listens on a direct session.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from heartq.store.link import LivenessHandle
from heartq.store.postgres.session import LastingSession


@dataclass(frozen=True)
class Channels:
    """The NOTIFY channels of one schema: jobs runnable, awaited jobs ended, cancels, and
    delayed jobs enqueued (`due`: the payload says in how many seconds the soonest of
    them falls due, so idle workers wake then, not at their next poll)."""

    wake: str
    ends: str
    cancel: str
    due: str

    @classmethod
    def of(cls, schema: str) -> Channels:
        return cls(
            f"heartq_{schema}",
            f"heartq_{schema}_ended",
            f"heartq_{schema}_cancel",
            f"heartq_{schema}_due",
        )


class NotifyListeners:
    """LISTENs on the store's lasting session: what `PostgresLink.listen`, `listen_ends` and
    `listen_cancels` answer with."""

    def __init__(self, sessions: LastingSession, channels: Channels) -> None:
        self.sessions = sessions
        self.channels = channels

    def listen(
        self, on_wake: Callable[[], None], on_due: Callable[[float], None] | None = None
    ) -> LivenessHandle | None:
        """Wake the caller whenever jobs are enqueued or replayed in this schema, and tell
        `on_due` in how many seconds a delayed job enqueued falls due."""
        woken = self._listen(self.channels.wake, lambda _payload: on_wake())
        if woken is None or on_due is None:
            return woken

        def heard(payload: str | None) -> None:
            seconds = _seconds(payload)
            if seconds is not None:
                on_due(seconds)

        due = self._listen(self.channels.due, heard)
        return woken if due is None else _Handles(woken, due)

    def listen_ends(self, on_end: Callable[[str | None], None]) -> LivenessHandle | None:
        """Tell the caller which awaited jobs of this schema ended (payload: the job id)."""
        return self._listen(self.channels.ends, on_end)

    def listen_cancels(
        self, worker_id: str, on_cancel: Callable[[], None]
    ) -> LivenessHandle | None:
        """Call `on_cancel()` when a cancel is requested of a job `worker_id` runs, and when
        such a notification may have been missed (the session was re-opened)."""

        def heard(payload: str | None) -> None:
            if payload is None or payload == worker_id:
                on_cancel()

        return self._listen(self.channels.cancel, heard)

    def _listen(
        self, channel: str, on_notify: Callable[[str | None], None]
    ) -> LivenessHandle | None:
        """LISTEN on the shared session (a new one if the last closed meanwhile)."""
        while True:
            handle = self.sessions.get().listen(channel, on_notify)
            if handle is not None:
                return handle


def _seconds(payload: str | None) -> float | None:
    """A due notification's payload (seconds), or None: a session reopened (nothing
    heard), or a payload not a number (never from heartq)."""
    if payload is None:
        return None
    try:
        return float(payload)
    except ValueError:
        return None


class _Handles:
    """Several LISTENs closed together."""

    def __init__(self, *handles: LivenessHandle) -> None:
        self._handles = handles

    def close(self) -> None:
        for handle in self._handles:
            handle.close()
