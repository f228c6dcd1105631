"""An execution row is written once, complete, when its attempt ends (migration 0017).

The running attempt lives on its job's row (worker, execution id, start, rate key): the
claim writes no execution row, and every end (a finish, a retry, a release, a reaped
lease, a crash its worker saw) inserts the one row of the attempt, with its worker, its
start and its end. Readers see what they saw before: `get_job` shows the running
attempt open, made from the job row, then its closed row; exactly one row per attempt
either way. A database upgraded while attempts run keeps them: each ends once.

The attempt that succeeds a job without a rate key writes no row (migration 24): its
job's row records it, and the readers see it as before, once, also where an older worker
wrote its row."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from heartq.lifecycle.fate import failed, succeeded
from heartq.model import ClaimedJob, DetectedBy, Outcome
from heartq.store import Store
from tests.support import opened

from .support import LEASE, SteeredMigrations, at, claim_one, enqueue_one, insert_version_1_job


def ended_rows(store: Store, job_id: str) -> list[dict[str, Any]]:
    """The rows of the table the ends write (not the view every reader reads)."""
    sqlite = "sqlite" in store.link.url
    table = "heartq_ended_executions" if sqlite else "ended_executions"
    mark = "?" if sqlite else "%s"
    with store._write() as conn:  # type: ignore[attr-defined]
        rows = conn.execute(
            f"SELECT execution_id, worker_id, outcome FROM {table} WHERE job_id = {mark}",
            (job_id,),
        ).fetchall()
    return [dict(row) for row in rows]


def _finish(store: Store, job: ClaimedJob, t: float) -> None:
    assert store.finish([succeeded(job, "1")], now=t) == []


def _retry(store: Store, job: ClaimedJob, t: float) -> None:
    assert store.finish([failed(job, Outcome.FAILED, "boom")], now=t) == []


def _release(store: Store, job: ClaimedJob, t: float) -> None:
    assert store.release([job.lease], now=t) == []


def _reap(store: Store, job: ClaimedJob, t: float) -> None:
    assert len(store.reclaim_expired(DetectedBy.LEASE_EXPIRED, now=t + LEASE)) == 1


def _crash(store: Store, job: ClaimedJob, t: float) -> None:
    crash = {"reason": "child exited", "exit_code": -9}
    assert store.crash_attempt(job.lease, crash, DetectedBy.CHILD_EXIT, now=t) is not None


# How each end lands: its outcome, how late it is seen, whether it writes a row.
ENDS: dict[str, tuple[Callable[[Store, ClaimedJob, float], None], str, float]] = {
    "finish": (_finish, "succeeded", 0.0),
    "retry": (_retry, "failed", 0.0),
    "release": (_release, "released", 0.0),
    "reaped": (_reap, "crashed", LEASE),
    "crash": (_crash, "crashed", 0.0),
}


@pytest.mark.parametrize("end", sorted(ENDS))
def test_an_attempt_writes_its_execution_row_once_when_it_ends(
    store: Store, t0: float, end: str
) -> None:
    ending, outcome, late = ENDS[end]
    job_id = enqueue_one(store, t0, max_retries=3)
    job = claim_one(store, "w1", t0 + 1)
    assert ended_rows(store, job_id) == []  # the claim wrote none
    (running,) = store.get_job(job_id)["executions"]  # made from the job row
    assert (running["execution_id"], running["worker_id"]) == (1, "w1")
    assert at(running["started_at"], t0 + 1)
    assert (running["ended_at"], running["outcome"], running["error"]) == (None, None, None)

    ending(store, job, t0 + 2)
    row = {"execution_id": 1, "worker_id": "w1", "outcome": outcome}
    assert ended_rows(store, job_id) == ([] if end == "finish" else [row])  # on its job's row
    (ended,) = store.get_job(job_id)["executions"]
    assert (ended["execution_id"], ended["worker_id"], ended["outcome"]) == (1, "w1", outcome)
    assert at(ended["started_at"], t0 + 1) and at(ended["ended_at"], t0 + 2 + late)


def test_a_retried_job_shows_every_attempt_once(store: Store, t0: float) -> None:
    job_id = enqueue_one(store, t0, max_retries=3, retry_backoff=1, retry_backoff_max=1)
    _retry(store, claim_one(store, "w1", t0 + 1), t0 + 2)
    second = claim_one(store, "w2", t0 + 10)
    shown = store.get_job(job_id)["executions"]
    assert [(e["execution_id"], e["worker_id"], e["outcome"]) for e in shown] == [
        (1, "w1", "failed"), (2, "w2", None)
    ]  # fmt: skip
    _finish(store, second, t0 + 11)
    shown = store.get_job(job_id)["executions"]
    assert [(e["execution_id"], e["outcome"]) for e in shown] == [(1, "failed"), (2, "succeeded")]
    assert [row["execution_id"] for row in ended_rows(store, job_id)] == [1]


def test_a_success_with_a_rate_key_writes_its_row(store: Store, t0: float) -> None:
    """A rate key's window counts its starts from the execution rows and the running
    jobs, so the attempt that succeeds a rate-limited job still writes its row."""
    job_id = enqueue_one(store, t0, rate_key="api", rate_limit=5, rate_period=60)
    _finish(store, claim_one(store, "w1", t0 + 1), t0 + 2)
    row = {"execution_id": 1, "worker_id": "w1", "outcome": "succeeded"}
    assert ended_rows(store, job_id) == [row]
    assert [e["execution_id"] for e in store.get_job(job_id)["executions"]] == [1]


def test_a_success_an_older_worker_recorded_shows_once(store: Store, t0: float) -> None:
    """A job that succeeded before the upgrade, or under a worker of the version before
    (its finish writes the row), has its execution row: that row is shown, and the job's
    own record of the same attempt is not shown a second time."""
    job_id = enqueue_one(store, t0)
    _finish(store, claim_one(store, "w1", t0 + 1), t0 + 2)
    sqlite = "sqlite" in store.link.url
    table, mark = ("heartq_ended_executions", "?") if sqlite else ("ended_executions", "%s")
    started = "?" if sqlite else "to_timestamp(%s)"
    with store._write() as conn:  # type: ignore[attr-defined]
        conn.execute(
            f"INSERT INTO {table} (job_id, execution_id, worker_id, started_at, ended_at, "
            f"outcome) VALUES ({mark}, 1, 'w1', {started}, {started}, 'succeeded')",
            (job_id, t0 + 1, t0 + 2),
        )
    (shown,) = store.get_job(job_id)["executions"]
    assert (shown["execution_id"], shown["worker_id"], shown["outcome"]) == (1, "w1", "succeeded")


def test_an_upgrade_keeps_the_attempts_running_across_it(
    fresh_url: Callable[[], str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A database of schema v16 whose running attempt has its open execution row (what
    the claim wrote then): after migration 17 the attempt shows once, open, and its end
    writes its row once; the ended attempt before it is kept as it was."""
    url = fresh_url()
    with SteeredMigrations(url, monkeypatch).store_before(17) as old:
        t0 = float(int(old.clock()))
        job_id = insert_version_1_job(old, t0)
        sqlite = "sqlite" in old.link.url
        jobs, executions = (
            ("heartq_jobs", "heartq_executions") if sqlite else ("jobs", "executions")
        )
        t = (lambda s: repr(s)) if sqlite else (lambda s: f"to_timestamp({s!r})")
        with old._write() as conn:  # type: ignore[attr-defined]
            conn.execute(
                f"UPDATE {jobs} SET status = 'running', worker_id = 'w1', execution_id = 2, "
                f"attempts = 2, started_at = {t(t0 + 5)}, heartbeat_at = {t(t0 + 5)}, "
                f"lease_expires_at = {t(t0 + 5 + LEASE)} WHERE id = '{job_id}'"
            )
            conn.execute(
                f"INSERT INTO {executions} (job_id, execution_id, worker_id, started_at, "
                f"ended_at, outcome, error) VALUES ('{job_id}', 1, 'w0', {t(t0 + 1)}, "
                f"{t(t0 + 2)}, 'failed', 'boom'), ('{job_id}', 2, 'w1', {t(t0 + 5)}, NULL, "
                "NULL, NULL)"
            )
    with opened(url) as new:  # today's heartq
        assert new.link.migrate() >= 17
        shown = new.get_job(job_id)["executions"]
        assert [(e["execution_id"], e["worker_id"], e["outcome"]) for e in shown] == [
            (1, "w0", "failed"), (2, "w1", None)
        ]  # fmt: skip
        assert len(ended_rows(new, job_id)) == 1
        (reclaimed,) = new.reclaim_expired(DetectedBy.LEASE_EXPIRED, now=t0 + 6 + LEASE)
        assert (reclaimed.job_id, reclaimed.execution_id) == (job_id, 2)
        shown = new.get_job(job_id)["executions"]
        assert [(e["execution_id"], e["outcome"]) for e in shown] == [(1, "failed"), (2, "crashed")]
        assert at(shown[1]["started_at"], t0 + 5)
