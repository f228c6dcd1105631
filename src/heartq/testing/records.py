"""What `heartq.testing` hands back: jobs as they were enqueued (`EnqueuedJob`), and what a
drain ran (`DrainReport` of `JobRun`s, each with its `Attempt`s).

Plain frozen values, read from the queue's database after the fact (what was stored is
the truth a test checks, not what the code meant to store), each printing as one
readable line, so a failing assertion shows the jobs as a person would want to read
them: id, task and arguments, queue, status, and how each attempt ended.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, overload

from heartq.display import compact_json, last_line
from heartq.model import JobStatus, Outcome

SHOWN_VALUE = 60
"""An argument's value is clipped to 60 characters when a job is printed."""
SHOWN_JOBS = 50
"""A listing in a failure message shows at most 50 jobs, then how many more there are."""


def call_text(task: str, args: Mapping[str, Any]) -> str:
    """`task(name='value', n=2)`: a job as the call it stands for."""
    shown = ", ".join(f"{name}={_clip(repr(value))}" for name, value in args.items())
    return f"{task}({shown})"


def _clip(text: str) -> str:
    return text if len(text) <= SHOWN_VALUE else text[: SHOWN_VALUE - 3] + "..."


def listing(items: Sequence[object], marked: Iterable[object] = ()) -> str:
    """One indented line per item (`*` before the marked ones), at most `SHOWN_JOBS`."""
    chosen = {id(item) for item in marked}
    lines = [f"  {'*' if id(item) in chosen else ' '} {item}" for item in items[:SHOWN_JOBS]]
    if len(items) > SHOWN_JOBS:
        lines.append(f"    ... and {len(items) - SHOWN_JOBS} more")
    return "\n".join(lines) if lines else "    (none)"


@dataclass(frozen=True)
class EnqueuedJob:
    """A job in the queue, as `heartq.testing.enqueued` lists it: what was enqueued and
    where it stands now (`status`: a job that already ran was enqueued all the same)."""

    id: str
    task: str
    args: dict[str, Any]
    queue: str
    status: JobStatus
    meta: dict[str, Any]
    priority: int
    attempts: int
    run_at: str | None
    created_at: str | None
    unique_key: str | None

    @classmethod
    def from_doc(cls, doc: Mapping[str, Any]) -> EnqueuedJob:
        """From a job document of the store (the `get_job` shape)."""
        return cls(
            id=doc["id"],
            task=doc["task"],
            args=dict(doc["args"] or {}),
            queue=doc["queue"],
            status=JobStatus(doc["status"]),
            meta=dict(doc.get("meta") or {}),
            priority=doc["priority"],
            attempts=doc["attempts"],
            run_at=doc["run_at"],
            created_at=doc["created_at"],
            unique_key=doc.get("unique_key"),
        )

    def __str__(self) -> str:
        meta = f" meta={compact_json(self.meta, SHOWN_VALUE)}" if self.meta else ""
        return (
            f"{self.id}  {call_text(self.task, self.args)}  queue={self.queue}  "
            f"{self.status}{meta}"
        )


class EnqueuedJobs(list[EnqueuedJob]):
    """A list of jobs (`heartq.testing.enqueued`) that prints one line per job."""

    def __str__(self) -> str:
        return f"{len(self)} job(s):\n{listing(self)}"


@dataclass(frozen=True)
class Attempt:
    """One attempt a drain made: its number (1 on a job's first), its fencing token, how
    it ended as stored, the error text stored with it, and the exception object the
    task's code raised (None when it raised nothing, or nothing reached this process)."""

    number: int
    execution_id: int
    outcome: Outcome | None
    error: str | None = None
    exception: BaseException | None = dataclasses.field(default=None, compare=False)

    def __str__(self) -> str:
        ended = str(self.outcome) if self.outcome is not None else "not ended"
        why = last_line(self.error, SHOWN_VALUE * 2) if self.error else ""
        return f"attempt {self.number} {ended}" + (f" ({why})" if why else "")


@dataclass(frozen=True)
class JobRun:
    """A job a drain ran: its attempts during the drain, and where it stands after
    (`status`; `result` once succeeded, or `result_lost`, why it has none: its code
    failed after its `ctx.transaction()` committed the job; `error` and `dead_reason`
    after failures; `run_at` when its retry is due, if it waits out a backoff or a
    snooze; `snoozes`, how many times it snoozed, none counted as attempts while within
    its task's `max_snoozes`)."""

    id: str
    task: str
    args: dict[str, Any]
    queue: str
    meta: dict[str, Any]
    attempts: tuple[Attempt, ...]
    status: JobStatus
    result: Any = None
    error: str | None = None
    dead_reason: str | None = None
    run_at: str | None = None
    result_lost: str | None = None
    snoozes: int = 0

    @property
    def outcomes(self) -> list[str]:
        """How each attempt of the drain ended, in order: `["failed", "succeeded"]`."""
        return [str(a.outcome) if a.outcome is not None else "not ended" for a in self.attempts]

    @property
    def exception(self) -> BaseException | None:
        """What the code of the last attempt raised, if anything."""
        return self.attempts[-1].exception if self.attempts else None

    def __str__(self) -> str:
        head = f"{self.id}  {call_text(self.task, self.args)}  queue={self.queue}"
        ends = ", ".join(self.outcomes) or "no attempt"
        if self.status is JobStatus.SUCCEEDED and self.result_lost is not None:
            tail = f": result lost ({last_line(self.result_lost, SHOWN_VALUE * 2)})"
        elif self.status is JobStatus.SUCCEEDED:
            tail = f": result {compact_json(self.result, SHOWN_VALUE)}"
        elif self.status is JobStatus.DEAD:
            tail = f": {self.dead_reason}"
        elif self.status is JobStatus.QUEUED:
            tail = f": next attempt at {self.run_at}"
        elif self.error:
            tail = f": {last_line(self.error, SHOWN_VALUE * 2)}"
        else:
            tail = ""
        return f"{head}  [{ends}] -> {self.status}{tail}"


class DrainReport(Sequence[JobRun]):
    """What a drain ran, in the order each job's first attempt started: a sequence of
    `JobRun`. Printed, one line per job. `report.job(id)` finds one by id,
    `report.of(task)` those of a task."""

    def __init__(self, runs: Iterable[JobRun]) -> None:
        self._runs = tuple(runs)

    @overload
    def __getitem__(self, index: int) -> JobRun: ...

    @overload
    def __getitem__(self, index: slice) -> Sequence[JobRun]: ...

    def __getitem__(self, index: int | slice) -> JobRun | Sequence[JobRun]:
        return self._runs[index]

    def __len__(self) -> int:
        return len(self._runs)

    def __iter__(self) -> Iterator[JobRun]:
        return iter(self._runs)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, DrainReport):
            return self._runs == other._runs
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def job(self, job_id: str) -> JobRun:
        """The run of the job `job_id`; `KeyError` listing what ran if it did not."""
        for run in self._runs:
            if run.id == job_id:
                return run
        raise KeyError(f"job {job_id} did not run in this drain; what ran:\n{listing(self)}")

    def of(self, task: Any) -> list[JobRun]:
        """The runs of one task (a `heartq.Task` or its name)."""
        name = getattr(task, "name", task)
        return [run for run in self._runs if run.task == name]

    def __str__(self) -> str:
        if not self._runs:
            return "drain ran no job"
        return f"drain ran {len(self._runs)} job(s):\n{listing(self)}"

    __repr__ = __str__
