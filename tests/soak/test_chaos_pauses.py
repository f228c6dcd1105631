"""The chaos runner's pause check (`chaos_pauses.QueuePauses.check`) on made-up runs: what
a pause governs is the claim. A job claimed before the pause whose code began late (a
process-pool child slow to start on a loaded machine; seed 72: 3.39 s into the pause)
passes; a job claimed past the margin into the pause fails, and so does one whose code
began past the margin and `START_SLACK`, whenever it was claimed."""

from __future__ import annotations

from datetime import UTC, datetime
from types import SimpleNamespace
from typing import Any

from tests.soak.chaos_config import START_SLACK
from tests.soak.chaos_pauses import MARGIN, Pause, QueuePauses

PAUSED_AT = 1_800_000_000.0
RESUMED_AT = PAUSED_AT + 30.0


def _iso(at: float) -> str:
    return datetime.fromtimestamp(at, UTC).isoformat().replace("+00:00", "Z")


def _checked(attempts: list[tuple[str, str, float, float]]) -> tuple[list[str], Any]:
    """`attempts`: (job id, queue, claimed, began), each a first execution, times after
    the pause was stored."""
    jobs: dict[str, Any] = {}
    starts: dict[tuple[str, int], dict[str, Any]] = {}
    for job_id, queue, claimed, began in attempts:
        execs = [{"execution_id": 1, "started_at": _iso(PAUSED_AT + claimed)}]
        jobs[job_id] = {"id": job_id, "queue": queue, "executions": execs}
        starts[(job_id, 1)] = {"t": PAUSED_AT + began}
    run = SimpleNamespace(side=SimpleNamespace(starts=starts))
    pauses = QueuePauses(run)  # type: ignore[arg-type]
    pauses.pauses.append(Pause("default", PAUSED_AT, RESUMED_AT))
    failed: list[str] = []
    checker = SimpleNamespace(jobs=jobs, fail=failed.append, pauses={})
    pauses.check(checker)  # type: ignore[arg-type]
    return failed, checker.pauses


def test_a_job_claimed_before_the_pause_may_begin_late() -> None:
    failed, figures = _checked([
        ("slow-child", "default", -0.6, 3.39),  # seed 72's: its child was slow to start
        ("in-margin", "default", MARGIN - 0.5, MARGIN),
        ("other-queue", "proc", 5.0, 5.2),
        ("after", "default", 31.0, 31.1),  # claimed after the resume
    ])  # fmt: skip
    assert failed == [] and figures["late_starts"] == 0


def test_a_job_claimed_past_the_margin_fails() -> None:
    failed, figures = _checked([("late", "default", MARGIN + 0.4, MARGIN + 0.5)])
    assert figures["late_starts"] == 1
    assert len(failed) == 1 and "job late execution 1 claimed 3.40 s into the pause" in failed[0]


def test_a_job_whose_code_began_far_into_the_pause_fails_whenever_claimed() -> None:
    failed, _ = _checked([("stuck", "default", -0.2, MARGIN + START_SLACK + 0.5)])
    assert len(failed) == 1 and "job stuck" in failed[0]


def test_a_pause_resumed_before_the_drain_keeps_its_time_when_its_end_comes() -> None:
    """The drain resumes every queue (`resume_all`) ahead of a pause's scheduled end; the
    scheduled resume that comes after must not move the pause's end past it: it held
    the drain's first claims of the queue to a pause no longer stored."""
    stored: list[bool] = []

    def set_queue_control(queue: str, **kwargs: Any) -> Any:
        stored.append(kwargs["paused"])
        return SimpleNamespace(changed_at=PAUSED_AT + 2.2 * len(stored))

    run = SimpleNamespace(
        store=SimpleNamespace(set_queue_control=set_queue_control),
        links=SimpleNamespace(db_lock=_NoLock()),
        say=lambda text: None,
    )
    pauses = QueuePauses(run)  # type: ignore[arg-type]
    pause = Pause("default", PAUSED_AT)
    pauses.pauses.append(pause)
    pauses.resume_all()
    assert pause.resumed_at == PAUSED_AT + 2.2
    assert pauses.resume(pause)  # its scheduled end, after the drain began
    assert pause.resumed_at == PAUSED_AT + 2.2 and stored == [False]


class _NoLock:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None
