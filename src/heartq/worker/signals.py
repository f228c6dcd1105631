"""Stop signals, heard in the handler and acted on in a thread of their own.

A Python signal handler runs in the main thread between two of its bytecodes, whatever
that thread holds at the time. The worker's main thread spends its life in
`threading.Event.wait`, which holds the event's (non-reentrant) lock for a moment on
every call; a handler that set that event, or wrote a log line while the main thread
was writing one, would wait on itself forever. It happened: a second Ctrl-C that landed
in that moment left a worker hung instead of stopping it at once.

So the handler does only what is safe there: it puts the signal on a
`queue.SimpleQueue`, whose `put` is documented as reentrant and safe in a signal
handler. The relay's thread takes it from there and calls the worker's own code,
where taking locks and logging are ordinary.
"""

from __future__ import annotations

import queue
import signal
import threading
from collections.abc import Callable, Iterable
from types import FrameType

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


class SignalRelay:
    """Hands each signal received to `on_signal(name, count)` on the relay's thread;
    `count` counts every signal relayed so far (the first stops gracefully, the next
    at once)."""

    def __init__(self, on_signal: Callable[[str, int], None]) -> None:
        self._on_signal = on_signal
        self._received: queue.SimpleQueue[int] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._relay, name="heartq-signals", daemon=True)
        self.count = 0

    def install(self, signals: Iterable[signal.Signals] = STOP_SIGNALS) -> None:
        """Start the relay and route `signals` to it (from the main thread only, as
        Python requires)."""
        self._thread.start()
        for sig in signals:
            signal.signal(sig, self._handle)

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        self._received.put(signum)  # nothing else: see the module's docstring

    def _relay(self) -> None:
        while True:
            signum = self._received.get()
            self.count += 1
            self._on_signal(signal.Signals(signum).name, self.count)
