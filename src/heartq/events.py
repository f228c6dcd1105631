"""Structured log events with stable names, so operators can grep and alert on them.

Every event is logged on the `heartq` logger with the event name as the message and its
fields in `record.heartq_fields`. `configure_logging("json")` prints one JSON object per
line (`{"ts", "level", "event", ...fields}`); `"text"` prints `event key=value ...`.

Names are part of the public interface: add new ones, never rename.

Levels: what operators alert on (crashes, lost leases, dead jobs, stale workers, errors)
is logged at WARNING or ERROR; the lifecycle of workers at INFO; the events of every job
that simply ran (`job_claimed`, `job_succeeded`) and every heartbeat at DEBUG, since
formatting and writing them was a third of a busy worker's CPU (py-spy, no-op jobs).
`heartq worker --log-level debug` shows them; listeners (metrics) hear every event
whatever the level.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from collections.abc import Callable
from typing import Any, Final

logger = logging.getLogger("heartq")

WORKER_STARTED: Final = "worker_started"
WORKER_STOPPED: Final = "worker_stopped"
WORKER_DEACTIVATED: Final = "worker_deactivated"
JOB_CLAIMED: Final = "job_claimed"
JOB_SUCCEEDED: Final = "job_succeeded"
JOB_FAILED: Final = "job_failed"
JOB_RETRY_SCHEDULED: Final = "job_retry_scheduled"
JOB_DEAD: Final = "job_dead"
JOB_CANCELLED: Final = "job_cancelled"
JOB_TIMED_OUT: Final = "job_timed_out"
JOB_CRASHED: Final = "job_crashed"
JOB_RELEASED: Final = "job_released"
JOB_REENQUEUED: Final = "job_reenqueued"
LEASE_LOST: Final = "lease_lost"
LEASES_UNTRUSTED: Final = "leases_untrusted"
STALE_JOBS_DETECTED: Final = "stale_jobs_detected"
ORPHANED_JOBS_DETECTED: Final = "orphaned_jobs_detected"
RECONCILIATION_COMPLETE: Final = "reconciliation_complete"
HEARTBEAT_FAILED: Final = "heartbeat_failed"
COMPLETION_RETRY: Final = "completion_retry"
MAINTENANCE_FAILED: Final = "maintenance_failed"
PRUNED: Final = "pruned"
SHUTDOWN_REQUESTED: Final = "shutdown_requested"
JOB_CANCEL_REQUESTED: Final = "job_cancel_requested"
CLAIM_FAILED: Final = "claim_failed"
HEARTBEAT: Final = "heartbeat"
METRICS_SERVER_STARTED: Final = "metrics_server_started"
NAMESAKE_ALIVE: Final = "namesake_alive"
LIVENESS_LOCK_LOST: Final = "liveness_lock_lost"
LIVENESS_LOCK_RESTORED: Final = "liveness_lock_restored"


Listener = Callable[[str, dict[str, Any]], None]
_listeners: list[Listener] = []


def add_listener(listener: Listener) -> None:
    """Call `listener(event, fields)` for every event (metrics hook in here)."""
    _listeners.append(listener)


def remove_listener(listener: Listener) -> None:
    if listener in _listeners:
        _listeners.remove(listener)


def emit(event: str, level: int = logging.INFO, **fields: Any) -> None:
    """Log `event` with `fields` and tell the listeners; cheap when nobody listens."""
    for listener in _listeners:
        try:
            listener(event, fields)
        except Exception:
            logger.debug("event listener failed", exc_info=True)
    if logger.isEnabledFor(level):
        logger.log(level, event, extra={"heartq_fields": fields})


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        doc: dict[str, Any] = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "event": record.getMessage(),
        }
        doc.update(getattr(record, "heartq_fields", {}))
        if record.exc_info:
            doc["exc"] = self.formatException(record.exc_info)
        return json.dumps(doc, default=str)


class TextFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        ts = time.strftime("%H:%M:%S", time.localtime(record.created))
        parts = [f"{ts}.{int(record.msecs):03d}", record.levelname.lower(), record.getMessage()]
        for key, value in getattr(record, "heartq_fields", {}).items():
            text = value if isinstance(value, str) else json.dumps(value, default=str)
            if isinstance(value, str) and (" " in value or not value):
                text = json.dumps(value)
            parts.append(f"{key}={text}")
        line = " ".join(parts)
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return line


LOG_LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING}
"""The levels `heartq worker --log-level` takes."""


def configure_logging(fmt: str = "text", level: int = logging.INFO) -> None:
    """Send heartq's events to stderr as text or JSON lines."""
    if fmt not in ("text", "json"):
        raise ValueError(f"log format must be 'text' or 'json', got {fmt!r}")
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    logger.handlers[:] = [handler]
    logger.setLevel(level)
    logger.propagate = False
