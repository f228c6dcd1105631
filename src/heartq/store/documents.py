"""The JSON documents a backend's batch statements read, built in one place.

Claim, heartbeat, finish and enqueue take their whole batch as one JSON parameter. Every
backend builds those documents here, so what is validated or cleaned on the way in
(names checked, NUL in free text escaped, numbers finite) is the same whatever the
database. A value no backend can store is refused here with `PayloadError`, before any
statement runs: Python's `json.dumps` would write NaN or Infinity, which is not JSON, and
one such value would fail the whole batch statement it travels in (a lease reclaimer's batch, a
completer's batch), not just its own row.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

from heartq.errors import ConfigError, PayloadError
from heartq.ids import is_job_id, new_job_id
from heartq.lifecycle.retry import EXPONENTIAL
from heartq.model import (
    DependencyFailure,
    Finish,
    NewJob,
    Progress,
    PulseReport,
    Renewal,
    Report,
    TaskPolicy,
    WorkerInfo,
)
from heartq.payload import (
    MAX_DURATION,
    check_concurrency,
    check_dependencies,
    check_duration,
    check_fair,
    check_name,
    check_rate,
    check_unique_key,
    clean_text,
    clip_error,
)


def _finite(name: str, value: Any) -> float:
    """`value` as a float; `PayloadError` unless it is a finite real number."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise PayloadError(f"{name} must be a number, got {value!r}")
    number = float(value)
    if not math.isfinite(number):
        raise PayloadError(f"{name} must be a finite number, got {value!r}")
    return number


def _seconds(name: str, value: Any) -> float:
    """A finite, non-negative number of seconds of at most `MAX_DURATION` (ten years:
    beyond that the time arithmetic of some backend overflows)."""
    seconds = _finite(name, value)
    if seconds < 0:
        raise PayloadError(f"{name} must not be negative, got {value!r}")
    if seconds > MAX_DURATION:
        raise PayloadError(f"{name} must be at most {MAX_DURATION:g} s (ten years), got {value!r}")
    return seconds


def _strict_json(what: str, value: Any) -> str:
    try:
        return json.dumps(value, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise PayloadError(f"{what} must be strict JSON (finite numbers): {exc}") from None


def new_job_doc(job: NewJob) -> dict[str, Any]:
    """One job to insert; raises `ConfigError` for a task or queue name no backend takes,
    `PayloadError` for a delay or backoff that is not a finite number of seconds (a
    negative delay means "now")."""
    delay = _finite("delay", job.delay)
    doc = {
        "id": new_job_id() if job.id is None else _job_id(job.id),
        "task": check_name("task", job.task),
        "queue": check_name("queue", job.queue),
        "args": job.args_json,
        "priority": job.priority,
        "delay": _seconds("delay", max(0.0, delay)),
        "max_retries": job.max_retries,
        "retry_backoff": _seconds("retry_backoff", job.retry_backoff),
        "retry_backoff_max": _seconds("retry_backoff_max", job.retry_backoff_max),
        "chosen": job.chosen,
        "run_at": None if job.run_at is None else _finite("eta", job.run_at),
        "unique_key": None if job.unique_key is None else check_unique_key(job.unique_key),
        "unique_for": None if job.unique_for is None else _seconds("unique_for", job.unique_for),
        "schedule": None if job.schedule is None else check_name("schedule", job.schedule),
        **check_concurrency(job.concurrency_key, job.concurrency_limit),
        **check_rate(job.rate_key, job.rate_limit, job.rate_period),
        **check_fair(job.fair_key, job.fair_weight),
        "meta": job.meta_json,
        "expires_in": None if job.expires_in is None else _finite("expires", job.expires_in),
    }
    if job.depends_on or job.dependency_results:
        doc.update(_dependency_fields(job, str(doc["id"])))
    return doc


def _job_id(job_id: str) -> str:
    """A caller's own id for a new job: a UUID as heartq makes them (`ids.is_job_id`),
    since PostgreSQL keeps ids as `uuid` and SQLite's must sort and look up alike."""
    if not is_job_id(job_id):
        raise PayloadError(
            f"a job's id must be a UUID in lower case with its dashes (as "
            f"heartq.ids.new_job_id makes one), got {job_id!r}"
        )
    return job_id


def runnable_unlimited(doc: Mapping[str, Any]) -> bool:
    """Whether a new job (its document) is runnable at its enqueue and has neither a
    concurrency nor a rate key (those wait for their own claims): what enters
    PostgreSQL's ready log, and, with a fairness key, what SQLite's enqueue puts in line
    (`store/sql/enqueue.py`, `store/sql/fair.py`)."""
    return doc["delay"] <= 0 and doc["concurrency_key"] is None and doc["rate_key"] is None


def _dependency_fields(job: NewJob, job_id: str) -> dict[str, Any]:
    """What a job with dependencies adds to its document (store/sql/dependencies.py): only
    such jobs carry these keys, so a plain enqueue's batch is as it was. `ConfigError` for
    a job that depends on itself, has a unique key too (an enqueue that answers another
    job's id would leave the edges to a job never stored), or names no known failure
    policy."""
    depends_on = check_dependencies(list(job.depends_on))
    if job_id in depends_on:
        raise ConfigError(f"job {job_id} cannot depend on itself")
    if job.unique_key is not None:
        raise ConfigError("depends_on cannot be combined with unique_key")
    try:
        failure = DependencyFailure(job.on_dependency_failure)
    except ValueError:
        choices = ", ".join(repr(f.value) for f in DependencyFailure)
        raise ConfigError(
            f"on_dependency_failure must be one of {choices}, got {job.on_dependency_failure!r}"
        ) from None
    return {
        "depends_on": depends_on,
        "on_dependency_failure": failure.value,
        "dependency_results": bool(job.dependency_results),
        "results_as": _results_as(job, depends_on),
    }


def _results_as(job: NewJob, depends_on: list[str]) -> list[str | None]:
    """How each dependency's result reaches the job (store/sql/dependencies.py, `result_as`
    of its edge), in `depends_on`'s order: `value` (passed as it is), `item` (an item of
    the results list), `none` (only waited for), or None for a job that takes no results.
    `ConfigError` for `results_of` naming a job it does not wait for, or `one_result`
    without exactly one result to take."""
    if not job.dependency_results:
        return [None] * len(depends_on)
    if job.results_of is None:
        return ["item"] * len(depends_on)
    taken = set(job.results_of)
    if not taken <= set(depends_on):
        raise ConfigError("results_of must name jobs of depends_on")
    if job.one_result and len(taken) != 1:
        raise ConfigError(f"one_result takes one job's result, not {len(taken)}")
    given = "value" if job.one_result else "item"
    return [given if dep in taken else "none" for dep in depends_on]


RETRY_RULES_DEFAULT = {
    "schedule": EXPONENTIAL, "jitter": True, "retry_on": None, "dont_retry_on": [],
}  # fmt: skip
"""What a task that chose no retry rule declares (stored as NULL)."""


def task_doc(policy: TaskPolicy) -> dict[str, Any]:
    """One task declaration; `ConfigError` for a name or queue no backend takes,
    `PayloadError` for a backoff or timeout that is not a finite number of seconds."""
    return {
        "name": check_name("task", policy.name),
        "queue": check_name("queue", policy.queue),
        "priority": policy.priority,
        "max_retries": policy.max_retries,
        "retry_backoff": _seconds("retry_backoff", policy.retry_backoff),
        "retry_backoff_max": _seconds("retry_backoff_max", policy.retry_backoff_max),
        "timeout": None if policy.timeout is None else _seconds("timeout", policy.timeout),
        "heartbeat_timeout": (
            None
            if policy.heartbeat_timeout is None
            else _seconds("heartbeat_timeout", policy.heartbeat_timeout)
        ),
        "parameters": (
            None
            if policy.parameters is None
            else [
                {"name": p.name, "kind": p.kind, "has_default": p.has_default}
                for p in policy.parameters
            ]
        ),
        "rate_limit": policy.rate_limit,
        "rate_key": policy.rate_key,
        "retry_rules": retry_rules_doc(policy),
        "uniqueness": {"unique_for": policy.unique_for} if policy.unique else None,
        "expires": None if policy.expires is None else _seconds("expires", policy.expires),
    }


def retry_rules_doc(policy: TaskPolicy) -> dict[str, Any] | None:
    """A declaration's `retry_rules` column: None for the defaults (so a declaration of
    an older version and one that chose nothing read alike); `intervals` only for a task
    that gave `retry_intervals` (a version before them reads the rest, and waits by the
    schedule); `delay` (true) only for a task with a `retry_delay` function, likewise."""
    doc: dict[str, Any] = {
        "schedule": policy.retry_schedule,
        "jitter": policy.retry_jitter,
        "retry_on": None if policy.retry_on is None else list(policy.retry_on),
        "dont_retry_on": list(policy.dont_retry_on),
    }
    if policy.retry_intervals is not None:  # only when given: an older reader ignores it
        doc["intervals"] = list(policy.retry_intervals)
    if policy.retry_delay:
        doc["delay"] = True
    return None if doc == RETRY_RULES_DEFAULT else doc


def renewal_doc(renewal: Renewal, detach: bool = False) -> dict[str, Any]:
    """One lease of a heartbeat: to renew (`dt` false), or to detach from its worker's
    lease (`dt`); `PayloadError` for a progress value that is not finite."""
    return {
        "id": renewal.lease.job_id,
        "eid": renewal.lease.execution_id,
        **_progress_fields(renewal.progress),
        "dt": detach,
    }


def _progress_fields(progress: Progress | None) -> dict[str, Any]:
    """`hp` (has progress), `pv`, `ps`, `pm`: a progress report as the statements read it
    (`PayloadError` for a value that is not finite)."""
    value = progress.value if progress else None
    return {
        "hp": progress is not None,
        "pv": None if value is None else _finite("progress value", value),
        "ps": clean_text(progress.stage) if progress else None,
        "pm": clean_text(progress.message) if progress else None,
    }


def report_fields(report: Report | None) -> dict[str, Any]:
    """What a task last reported, as the pulse and finish statements read it: its
    progress fields, `hc` (has checkpoint) and `cp` (the checkpoint's JSON text)."""
    report = report or Report()
    return {
        **_progress_fields(report.progress),
        "hc": report.has_checkpoint,
        "cp": report.checkpoint_json if report.has_checkpoint else None,
    }


def pulse_doc(pulse: PulseReport) -> dict[str, Any]:
    """One attempt's report in a pulse, fenced on its lease."""
    return {
        "id": pulse.lease.job_id,
        "eid": pulse.lease.execution_id,
        **report_fields(pulse.report),
    }


def finish_doc(
    job_id: str,
    execution_id: int,
    *,
    status: str,
    outcome: str,
    result: str | None = None,
    error: str | None = None,
    delay: float = 0.0,
    dead_reason: str | None = None,
    crash: Mapping[str, Any] | None = None,
    keep_place: bool = False,
    result_pending: bool = False,
) -> dict[str, Any]:
    """One finished attempt, as the fenced finish statement reads it. `keep_place`: a
    job queued again keeps its `run_at` (its place in line) instead of waiting `delay`.
    `result_pending`: a job its task's transaction completed; its result comes after.
    `PayloadError` for a retry delay that is not finite or a crash context that is not
    strict JSON. (What the task last reported goes by the pulse statement, `pulse_doc`,
    run just before the finish.)"""
    return {
        "id": job_id,
        "eid": execution_id,
        "status": status,
        "outcome": outcome,
        "result": result,
        "error": clip_error(error),
        "delay": min(MAX_DURATION, max(0.0, _finite("retry delay", delay))),
        "keep": keep_place,
        "dead_reason": clean_text(dead_reason),
        "crash": _strict_json("crash context", dict(crash)) if crash is not None else None,
        "pending": result_pending,
    }


def attempt_finish_doc(finish: Finish) -> dict[str, Any]:
    """`finish_doc` for the end of an attempt as the worker decided it. One with no
    error, dead reason, crash or retry delay (every success) is written out here, as
    `finish_doc` would make it with nothing to check or clean: a finished job's document
    is made once per job."""
    delay = finish.retry_delay
    if (
        finish.error is None
        and finish.dead_reason is None
        and finish.crash is None
        and delay.__class__ is float
        and delay == 0.0
    ):
        return {
            "id": finish.lease.job_id,
            "eid": finish.lease.execution_id,
            "status": str(finish.status),
            "outcome": str(finish.outcome),
            "result": finish.result_json,
            "error": None,
            "delay": 0.0,
            "keep": False,
            "dead_reason": None,
            "crash": None,
            "pending": False,
        }
    return _checked_finish_doc(finish)


def _checked_finish_doc(finish: Finish) -> dict[str, Any]:
    """`finish_doc` of `finish`, every field through its checks (what
    `attempt_finish_doc` writes out must equal it: tests/lifecycle/test_finish_documents.py)."""
    return finish_doc(
        finish.lease.job_id,
        finish.lease.execution_id,
        status=str(finish.status),
        outcome=str(finish.outcome),
        result=finish.result_json,
        error=finish.error,
        delay=finish.retry_delay,
        dead_reason=finish.dead_reason,
        crash=finish.crash,
    )


def worker_stale_after(info: WorkerInfo) -> float | None:
    """The staleness threshold a worker registers (None: observers use their own);
    `ConfigError` unless it is a positive, finite number of seconds."""
    check_duration("stale_after", info.stale_after)
    return None if info.stale_after is None else float(info.stale_after)
