"""A worker's `otel=True` (`heartq worker --otel`, `HEARTQ_OTEL=1`): the app traced by
`heartq.otel`, in the worker and in each process-pool child (which imports the app's
module, but not what the command line did to the app).

Kept apart from `heartq.otel` so that the worker, and a child, can say in one line that
OpenTelemetry is missing, as a `ConfigError` the command line prints, where importing
`heartq.otel` itself raises an `ImportError`."""

from __future__ import annotations

from typing import TYPE_CHECKING

from heartq.errors import ConfigError

if TYPE_CHECKING:
    from heartq.app import App

OTEL_MODULE = "heartq.otel"
"""What a process pool's forkserver preloads when tracing is on."""


def instrument(app: App) -> None:
    """`heartq.otel.instrument(app)`, or a `ConfigError` naming the extra to install."""
    try:
        from heartq import otel
    except ImportError as exc:
        missing = exc.__cause__ or exc  # what could not be imported, not our wording of it
        raise ConfigError(
            f"--otel (HEARTQ_OTEL) needs OpenTelemetry: pip install 'heartq[otel]' ({missing})"
        ) from None
    otel.instrument(app)
