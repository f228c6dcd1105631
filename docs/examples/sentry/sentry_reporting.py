"""Failed attempts reported to Sentry, through heartq's attempt hooks.

One call where the app is made (`report_to_sentry(app)`, beside `sentry_sdk.init(...)`),
and each failed attempt of its jobs is one Sentry event: the exception with its stack, the
job's id, task, queue and attempt as tags and context, and the traceback text heartq keeps
as the attempt's error. The hook runs where the code ran (a thread, an asyncio task, a
process pool's child), so Sentry's scope is the one the task's own breadcrumbs went to.

An attempt whose worker or child process died (SIGKILL, the OOM killer) runs no attempt
hook after; its crash is reported by the crash hook instead, in the worker that found it:
one event of level `error` with the crash context (how it was found, the signal...).

Any other tracker is the same few lines: the hook's `attempt` says everything (see
docs/INTERFACE.md, "Hooks").
"""

import contextlib
import multiprocessing
from collections.abc import Iterator
from typing import Any

import heartq
import sentry_sdk

FAILURES = (heartq.Outcome.FAILED, heartq.Outcome.TIMED_OUT)


def report_to_sentry(app: heartq.App, *, report_retries: bool = True) -> None:
    """Report each failed attempt of `app`'s jobs to Sentry once. `report_retries=False`:
    only the failures after which the job does not run again (it is dead), not the ones
    a retry may still make good."""

    @app.hooks.attempt
    def report_failure(attempt: heartq.AttemptInfo) -> Iterator[None]:
        yield  # the task's code runs here; what follows sees how it ended
        if attempt.outcome not in FAILURES or (attempt.will_retry and not report_retries):
            return
        context = {"max_retries": attempt.max_retries, "error": attempt.error}
        with _job_scope(attempt, context):
            if attempt.exception is not None:
                sentry_sdk.capture_exception(attempt.exception)
            else:  # e.g. a result that could not be stored: heartq's error text only
                last_line = (attempt.error or str(attempt.outcome)).splitlines()[-1]
                sentry_sdk.capture_message(f"{attempt.task}: {last_line}", level="error")
        if multiprocessing.parent_process() is not None:
            # A process pool's child exits right after its attempt without running exit
            # handlers, Sentry's own flush among them: send the event now.
            sentry_sdk.flush(timeout=5)

    @app.hooks.crash
    def report_crash(crash: heartq.CrashInfo) -> None:
        # runs in the worker that found the crash, not where the code ran
        if crash.will_retry and not report_retries:
            return
        context = {"dead_reason": crash.dead_reason, "crash": dict(crash.crash)}
        with _job_scope(crash, context) as scope:
            scope.set_tag("heartq.detected_by", crash.detected_by)
            sentry_sdk.capture_message(f"{crash.task} crashed: {crash.reason}", level="error")


@contextlib.contextmanager
def _job_scope(
    info: heartq.AttemptInfo | heartq.CrashInfo, context: dict[str, Any]
) -> Iterator[sentry_sdk.Scope]:
    """A Sentry scope for one attempt's event: the job's task, queue and will-retry as
    tags, and in the `heartq` context its ids with what the caller adds."""
    with sentry_sdk.new_scope() as scope:
        scope.set_tag("heartq.task", info.task)
        scope.set_tag("heartq.queue", info.queue)
        scope.set_tag("heartq.will_retry", info.will_retry)
        scope.set_context(
            "heartq",
            {
                "job_id": info.job_id,
                "task": info.task,
                "queue": info.queue,
                "attempt": info.attempt,
                "will_retry": info.will_retry,
                "execution_id": info.execution_id,
                "worker_id": info.worker_id,
                **context,
            },
        )
        yield scope
