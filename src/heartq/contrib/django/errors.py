"""Exceptions a Django task's `TaskResult.errors` names where the attempt raised none of
its own (`TaskError.exception_class_path` must import)."""

from __future__ import annotations


class AttemptCrashed(Exception):
    """The attempt never ended by itself: its worker process (or its child process) died,
    or its lease ran out while its worker was silent; another worker found it and the job
    was run again (or is dead, past its retries). The `TaskError`'s traceback is heartq's
    account of the crash (`worker process gone (liveness lock free) (detected by
    liveness_lock)`)."""
