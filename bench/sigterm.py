"""Long runs (`bench.pressure`, the chaos and failover runners) stopped from outside
unwind as Ctrl-C does."""

from __future__ import annotations

import signal
from types import FrameType


def unwind_on_sigterm() -> None:
    """From now on SIGTERM (as `timeout` or a CI job sends) raises `SystemExit` in the
    main thread, so the run's `finally` blocks stop its worker processes and private
    servers: by default the process died at once and left them running without a
    parent (a failover run's workers kept retrying a server that was gone)."""
    signal.signal(signal.SIGTERM, _exit)


def _exit(signum: int, frame: FrameType | None) -> None:
    raise SystemExit(128 + signum)
