"""Ctrl-C stops a test run on the first press, and its teardowns run to their end.

By default pytest-xdist does not stop at once: its controller, told to stop, asks each
worker to exit at its next chance (a worker blocked in a wait never has one), and kills
the ones still there ten seconds later, with no teardown: their workers, servers and
schemas stay. A terminal sends SIGINT to the controller and the workers together, but
`kill -INT` of the controller alone, or a second Ctrl-C landing in a teardown, is just as
common. So:

- the controller, on its first SIGINT, hands one to each xdist worker (whether or not the
  terminal already did) and stops;
- every pytest process (controller or worker) acts on its first SIGINT only, as a
  KeyboardInterrupt where the test stands; later ones are ignored, so that the
  teardowns it starts (killing the test's processes, dropping its schema) finish;
- whatever is left after that is the controller's to remove (`tests/leftovers.py`).
"""

from __future__ import annotations

import contextlib
import signal
import sys
import threading
from types import FrameType

import psutil
import pytest


class FirstInterrupt:
    """The SIGINT handler of a pytest process: the first SIGINT raises KeyboardInterrupt
    (after handing one to each xdist worker, in the controller); later ones are ignored."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.heard = False

    @property
    def controller_of_workers(self) -> bool:
        """Whether this process drives xdist workers (its DSession is on)."""
        return self.config.pluginmanager.has_plugin("dsession")

    def install(self) -> None:
        """Route SIGINT here (Python lets only the main thread do so)."""
        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGINT, self.handle)

    def handle(self, signum: int, frame: FrameType | None) -> None:
        if self.heard:
            return
        self.heard = True
        if self.controller_of_workers:
            sys.stderr.write("\ninterrupted: stopping the test workers and cleaning up\n")
            self.interrupt_workers()
        raise KeyboardInterrupt

    @staticmethod
    def interrupt_workers() -> None:
        """SIGINT to each xdist worker: the controller's only children."""
        for child in psutil.Process().children():
            with contextlib.suppress(psutil.Error):
                child.send_signal(signal.SIGINT)

    def ignore_from_now(self) -> None:
        """Ignore SIGINT while the run's own cleanup goes on (it is short and bounded)."""
        self.heard = True

