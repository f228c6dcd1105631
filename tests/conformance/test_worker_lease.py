"""The worker's lease (docs/design/leases.md, "Leases and heartbeats"): the heartbeat renews its
worker's row, whose lease covers every attempt it holds attached; a job row's
`lease_expires_at` is its attempt's floor; a detached attempt has a deadline of its own.
What the build had to settle (docs/design-notes/hot-path.md, "The worker's lease on
today's jobs table"), one test each: a claim whose answer was lost (`sweep`), attempts
the worker stops naming (`detach`, and attached again when named), attempts without a
worker row, the reaper's race with a claim (PostgreSQL), and the effective lease where
results still to come and crash contexts read it."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from heartq import lost_results
from heartq.model import ClaimedJob, Finish, JobStatus, Lease, Outcome, Renewal, RenewStatus
from heartq.store import Store
from tests.conftest import only_on
from tests.support import opened

from .support import (
    LEASE,
    SteeredMigrations,
    at,
    claim_one,
    enqueue_one,
    insert_version_1_job,
    register,
)


def _running(store: Store, t0: float, n: int, worker_id: str = "w1") -> list[ClaimedJob]:
    """`n` jobs enqueued and claimed by `worker_id` at `t0`."""
    for _ in range(n):
        enqueue_one(store, t0)
    claimed = store.claim(worker_id, ["default"], n, LEASE, now=t0)
    assert len(claimed) == n
    return sorted(claimed, key=lambda job: job.id)


def _reaped(store: Store, now: float) -> set[str]:
    return {r.job_id for r in store.reclaim_expired("lease_expired", now=now)}


def _beating_worker(store: Store, t0: float, n: int) -> list[ClaimedJob]:
    """A registered worker with a lease (one heartbeat) and `n` attempts under it."""
    register(store, "w1", t0)
    store.heartbeat("w1", [], LEASE, now=t0)
    return _running(store, t0, n)


def test_the_heartbeat_renews_every_attached_attempt_through_its_worker(
    store: Store, t0: float
) -> None:
    """A worker's heartbeat keeps its attempts leased past their floor (the claim's lease)
    while it beats; once it stops, each is reaped when the worker's lease runs out."""
    a, b = _beating_worker(store, t0, 2)
    beat = t0 + LEASE - 1
    answers = store.heartbeat("w1", [Renewal(a.lease), Renewal(b.lease)], LEASE, now=beat)
    assert answers == {a.lease: RenewStatus.RENEWED, b.lease: RenewStatus.RENEWED}
    assert _reaped(store, t0 + LEASE + 1) == set()
    assert at(store.get_job(a.id)["lease_expires_at"], beat + LEASE)
    assert _reaped(store, beat + LEASE + 1) == {a.id, b.id}


def test_a_sweep_detaches_what_the_worker_does_not_name(store: Store, t0: float) -> None:
    """Trap 1, a claim whose answer was lost: the job runs under the worker, attached, but
    the worker never heard of it. Its heartbeats alone keep it leased for ever (stuck);
    the sweep its worker sends after a claim that raised detaches it at its effective
    lease then, and the reaper takes it once that runs out, while what it names stays."""
    known, lost = _beating_worker(store, t0, 2)
    beats = [t0 + LEASE - 1, t0 + 2 * LEASE - 2]
    for beat in beats:
        store.heartbeat("w1", [Renewal(known.lease)], LEASE, now=beat)
    assert _reaped(store, beats[-1] + 1) == set()  # covered by a live worker: stuck
    swept = beats[-1] + 1
    store.heartbeat("w1", [Renewal(known.lease)], LEASE, now=swept, sweep=True)
    assert at(store.get_job(lost.id)["lease_expires_at"], beats[-1] + LEASE)  # as it was
    store.heartbeat("w1", [Renewal(known.lease)], LEASE, now=swept + LEASE - 2)
    assert _reaped(store, beats[-1] + LEASE + 1) == {lost.id}
    assert store.get_job(known.id)["status"] == JobStatus.RUNNING


def test_a_detached_attempt_runs_out_and_a_named_one_is_attached_again(
    store: Store, t0: float
) -> None:
    """Trap 2: an attempt the worker names to detach (a silent task, a lease it dropped)
    keeps the effective lease it had, written once, and is reaped when that runs out
    though its worker beats on; one it names again (its task spoke again in time) is
    attached again, and lives as long as its worker's lease."""
    silent, spoke, held = _beating_worker(store, t0, 3)
    first = t0 + LEASE - 1  # the worker's lease before it: t0 + LEASE
    store.heartbeat(
        "w1", [Renewal(held.lease)], LEASE, now=first, detach=[silent.lease, spoke.lease]
    )
    again = first + LEASE - 1
    named = [Renewal(held.lease), Renewal(spoke.lease)]
    answers = store.heartbeat("w1", named, LEASE, now=again, detach=[silent.lease])
    assert answers[spoke.lease] is RenewStatus.RENEWED
    assert at(store.get_job(silent.id)["lease_expires_at"], t0 + LEASE)  # written once
    assert _reaped(store, t0 + LEASE + 1) == {silent.id}
    store.heartbeat("w1", named, LEASE, now=again + LEASE - 1)
    assert _reaped(store, again + LEASE + 1) == set()
    assert store.get_job(spoke.id)["status"] == JobStatus.RUNNING


def test_an_attempt_without_a_worker_row_keeps_a_lease_of_its_own(store: Store, t0: float) -> None:
    """Trap 3: a worker id never registered (a store used directly) has no lease to cover
    its attempts. The claim detaches each at its floor, so it is reaped when that runs
    out, and its worker's heartbeat renews each one's own deadline."""
    renewed, left = _running(store, t0, 2, worker_id="nobody")
    beat = t0 + LEASE - 1
    answers = store.heartbeat("nobody", [Renewal(renewed.lease)], LEASE, now=beat)
    assert answers == {renewed.lease: RenewStatus.RENEWED}
    assert at(store.get_job(renewed.id)["lease_expires_at"], beat + LEASE)
    assert at(store.get_job(renewed.id)["heartbeat_at"], beat)
    assert _reaped(store, t0 + LEASE + 1) == {left.id}
    assert _reaped(store, beat + LEASE + 1) == {renewed.id}


def test_a_worker_is_not_pruned_while_an_attempt_of_it_runs(store: Store, t0: float) -> None:
    """Trap 3, a pruned row: a worker stopped past the retention whose attempt still runs
    attached keeps its row, so its lease still covers it until the reaper walks it; a
    worker with nothing running goes."""
    (job,) = _beating_worker(store, t0, 1)
    register(store, "idle", t0)
    for worker_id in ("w1", "idle"):
        store.stop_worker(worker_id, now=t0 + 1)
    store.prune(worker_retention=1.0, job_retention=1e9, now=t0 + 10)
    assert {w["id"] for w in store.list_workers(include_all=True)} == {"w1"}
    assert _reaped(store, t0 + LEASE + 1) == {job.id}


def test_a_reaped_worker_is_walked_once_and_a_heartbeat_covers_it_again(
    store: Store, t0: float
) -> None:
    """A worker past its lease is walked by the reaper, and its lease cleared once nothing
    of it runs attached: a claim of it after that is detached at its floor (nobody covers
    it), and the worker's next heartbeat sets its lease and attaches what it names."""
    (gone,) = _beating_worker(store, t0, 1)
    assert _reaped(store, t0 + LEASE + 1) == {gone.id}
    assert _worker_lease(store, "w1") is None  # walked: not again at every reap
    (late,) = _running(store, t0 + LEASE + 2, 1)
    assert _reaped(store, t0 + 2 * LEASE + 3) == {late.id}  # its floor ran out: detached
    (named,) = _running(store, t0 + 2 * LEASE + 4, 1)
    beat = t0 + 3 * LEASE + 3
    store.heartbeat("w1", [Renewal(named.lease)], LEASE, now=beat)
    assert _reaped(store, t0 + 3 * LEASE + 5) == set()
    assert _reaped(store, beat + LEASE + 1) == {named.id}


def _worker_lease(store: Store, worker_id: str) -> Any:
    """The worker's lease as its row holds it (no reader shows it)."""
    table = "heartq_workers" if "sqlite" in store.link.url else "workers"
    with store._write() as conn:  # type: ignore[attr-defined]
        sql = f"SELECT lease_expires_at AS lease FROM {table} WHERE id = '{worker_id}'"
        return conn.execute(sql).fetchone()["lease"]


def test_a_result_still_to_come_keeps_the_effective_lease(store: Store, t0: float) -> None:
    """Trap 5: a job its task completed in its own transaction, its result to come, keeps
    its attempt's effective lease (its worker's, past the floor), not the floor: the
    reaper gives the result up only once that runs out."""
    early, late = _beating_worker(store, t0, 2)
    beat = t0 + LEASE - 1
    store.heartbeat("w1", [Renewal(early.lease), Renewal(late.lease)], LEASE, now=beat)
    for job in (early, late):
        with store.completing(job.lease):
            pass
    assert at(store.get_job(early.id)["lease_expires_at"], beat + LEASE)
    store.reclaim_expired("lease_expired", now=t0 + LEASE + 1)  # past the floor only
    assert store.save_result(early.lease, "1")  # not given up
    store.reclaim_expired("lease_expired", now=beat + LEASE + 1)
    assert not store.save_result(late.lease, "2")  # given up


def test_a_result_still_to_come_lives_while_its_worker_beats(store: Store, t0: float) -> None:
    """A result still to come is covered by its worker's lease as its attempt was: the
    worker's heartbeats after the commit keep it past the lease the attempt had at the
    commit (a save held up that long, a completer waiting for a pooled connection, is no
    death), and the reaper gives it up once that lease runs out (its worker stopped
    beating: died, froze, lost the database). One committed while detached keeps its own
    deadline, which nothing renews after the commit: given up at it, though its worker
    beats on."""
    for worker_id in ("w1", "w2"):
        register(store, worker_id, t0)
        store.heartbeat(worker_id, [], LEASE, now=t0)
    kept, late, detached = _running(store, t0, 3)
    (lapsed,) = _running(store, t0, 1, worker_id="w2")
    first = t0 + LEASE - 1  # detaches `detached` at the lease it had: t0 + LEASE
    named = [Renewal(kept.lease), Renewal(late.lease)]
    store.heartbeat("w1", named, LEASE, now=first, detach=[detached.lease])
    store.heartbeat("w2", [Renewal(lapsed.lease)], LEASE, now=first)
    for job in (kept, late, detached, lapsed):
        with store.completing(job.lease):
            pass
    second = first + LEASE - 1  # w1 beats on (naming nothing: its attempts are done); w2 not
    store.heartbeat("w1", [], LEASE, now=second)
    store.reclaim_expired("lease_expired", now=t0 + LEASE + 1)
    assert not store.save_result(detached.lease, "3")  # its own deadline: given up
    store.reclaim_expired("lease_expired", now=first + LEASE + 1)  # past the commit's lease
    assert not store.save_result(lapsed.lease, "4")  # w2's lease ran out: given up
    assert store.save_result(kept.lease, "1")  # w1's beats kept it
    assert store.job_end(late.id).result_pending
    store.reclaim_expired("lease_expired", now=second + LEASE + 1)  # w1 stopped beating
    assert not store.save_result(late.lease, "2")
    lost = [store.get_job(job.id)["result_lost"] for job in (kept, late, detached, lapsed)]
    assert lost[0] is None and store.get_job(kept.id)["result"] == 1
    assert lost[1:] == [lost_results.AFTER_COMMIT] * 3


def test_a_crash_context_shows_the_effective_lease_and_the_workers_beat(
    store: Store, t0: float
) -> None:
    """Trap 5: a reaped attempt's crash context says when its lease (its worker's) ran out
    and when it was last heard of (its worker's last heartbeat while it was attached), as
    `heartq jobs show`, the dashboard and the JSON show them; a running attempt's job
    shows the same effective lease and heartbeat."""
    (job,) = _beating_worker(store, t0, 1)
    beat = t0 + 10
    store.heartbeat("w1", [Renewal(job.lease)], LEASE, now=beat)
    shown = store.get_job(job.id)
    assert at(shown["lease_expires_at"], beat + LEASE)
    assert at(shown["heartbeat_at"], beat)
    (reaped,) = store.reclaim_expired("lease_expired", now=beat + LEASE + 1)
    assert at(reaped.crash["lease_expires_at"], beat + LEASE)
    assert at(reaped.crash["job_heartbeat_at"], beat)


@only_on("postgres")
def test_a_claim_waits_for_the_reaper_that_clears_its_workers_lease(
    store: Store, t0: float
) -> None:
    """Trap 4: the reaper locks a worker's row `FOR UPDATE` before it walks its attempts and
    clears its lease; a claim of that worker reads the row `FOR KEY SHARE`, so it waits,
    then finds the lease cleared and detaches its attempt at its floor. Were it not to
    wait, it would attach its attempt to a lease the reaper is about to clear: covered by
    nobody, never reaped."""
    register(store, "w1", t0)
    store.heartbeat("w1", [], LEASE, now=t0)
    enqueue_one(store, t0)
    dialect: Any = store.dialect  # type: ignore[attr-defined]
    claimed: list[ClaimedJob] = []
    with opened(store.link.url) as other, dialect.write() as reaper:
        # the reaper's transaction, between its lock of the worker's row and its commit
        reaper.execute("SELECT id FROM workers WHERE id = 'w1' FOR UPDATE")
        reaper.execute("UPDATE workers SET lease_expires_at = NULL WHERE id = 'w1'")
        claimer = threading.Thread(target=lambda: claimed.append(claim_one(other, "w1", t0)))
        claimer.start()
        _wait_for_a_lock_wait(other, reaper.info.backend_pid)
    claimer.join(timeout=30)
    (job,) = claimed
    assert _reaped(store, t0 + LEASE + 1) == {job.id}


@only_on("postgres")
def test_a_claim_ahead_that_raised_after_the_slots_committed_asks_for_a_sweep(
    store: Store, t0: float, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Trap 1 inside one claim: on PostgreSQL the slots' statement commits alone, so a claim
    ahead that raises after it hands the slots over rather than raising (they are the
    worker's already); but that statement may have committed too, its answer lost. The
    claim says so (`unanswered`), for its worker to sweep."""
    register(store, "w1", t0)
    store.heartbeat("w1", [], LEASE, now=t0)
    for _ in range(2):
        enqueue_one(store, t0)
    leases: Any = store.leases  # type: ignore[attr-defined]
    claim_rows = leases._claim_rows

    def answer_lost(conn: Any, queues: Any, params: dict[str, Any]) -> Any:
        rows = claim_rows(conn, queues, params)
        if params["ahead"]:
            raise ConnectionError("the connection was cut before the answer came")
        return rows

    monkeypatch.setattr(leases, "_claim_rows", answer_lost)
    claim = store.claim("w1", ["default"], 1, LEASE, now=t0, ahead=1)
    assert claim.unanswered and len(claim) == 1 and not claim.ahead
    (slot,) = claim
    (lost,) = [j for j in store.list_jobs(status="running") if j["id"] != slot.id]
    store.heartbeat("w1", [Renewal(slot.lease)], LEASE, now=t0 + 1, sweep=True)
    store.heartbeat("w1", [Renewal(slot.lease)], LEASE, now=t0 + LEASE - 1)
    assert _reaped(store, t0 + LEASE + 1) == {lost["id"]}


def _wait_for_a_lock_wait(store: Store, holder: int, deadline: float = 20.0) -> None:
    """Until a session of the store's database waits for a lock `holder` (a backend's
    pid) holds: the claim, for the reaper's lock of the worker's row."""
    dialect: Any = store.dialect  # type: ignore[attr-defined]
    end = time.monotonic() + deadline
    query = (
        "SELECT count(*) AS n FROM pg_stat_activity WHERE datname = current_database()"
        " AND %(holder)s = ANY(pg_blocking_pids(pid))"
    )
    while time.monotonic() < end:
        with dialect.read() as conn:  # a transaction of its own: a fresh snapshot of it
            row = conn.execute(query, {"holder": holder}).fetchone()
        if row["n"] > 0:
            return
        time.sleep(0.01)
    raise AssertionError("the claim did not wait for the reaper's lock")


def test_leases_of_a_batch_beyond_the_named_are_untouched(store: Store, t0: float) -> None:
    """A heartbeat without `sweep` detaches nothing it does not name (a walk of the
    worker's attempts is paid once per claim that raised, not per beat)."""
    a, b = _beating_worker(store, t0, 2)
    store.heartbeat("w1", [Renewal(a.lease)], LEASE, now=t0 + 1, detach=[Lease(b.id, 999)])
    assert store.get_job(b.id)["status"] == JobStatus.RUNNING
    store.heartbeat("w1", [Renewal(a.lease)], LEASE, now=t0 + LEASE - 1)
    assert _reaped(store, t0 + LEASE + 1) == set()


def test_the_upgrade_detaches_every_running_attempt_at_its_lease(
    fresh_url: Callable[[], str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A queue of the schema before the worker's lease (v24) with two attempts running,
    each leased on its own row as that schema's heartbeat renewed it: after the migration
    (25) each keeps the lease it had, detached at it. The one a worker of this version
    names in its heartbeat is attached again and finishes; the other is reaped once its
    lease runs out, not before."""
    url = fresh_url()
    migrations = SteeredMigrations(url, monkeypatch)
    # The rows as v24's statements wrote them (today's write tables v24 has not), then
    # every migration in its order: the ones after 25 carry the detached attempts on.
    migrations.only(lambda v: v < 25)
    with opened(url) as old:
        old.link.migrate()
        t0 = old.clock()
        ids = [insert_version_1_job(old, t0) for _ in range(2)]
        _claim_as_before(old, ids, "w1", t0)
    migrations.all()
    with opened(url) as store:
        assert store.link.migrate() == migrations.newest
        register(store, "w1", t0)
        named, left = (Lease(job_id, 1, "w1") for job_id in ids)
        assert at(store.get_job(left.job_id)["lease_expires_at"], t0 + LEASE)
        assert _reaped(store, t0 + LEASE - 1) == set()
        answers = store.heartbeat("w1", [Renewal(named)], LEASE, now=t0 + LEASE - 1)
        assert answers == {named: RenewStatus.RENEWED}
        assert _reaped(store, t0 + LEASE + 1) == {left.job_id}
        done = Finish(named, Outcome.SUCCEEDED, JobStatus.SUCCEEDED, result_json="1")
        assert store.finish([done], now=t0 + LEASE + 2) == []
        assert store.get_job(named.job_id)["status"] == JobStatus.SUCCEEDED


def _claim_as_before(store: Store, ids: list[str], worker_id: str, now: float) -> None:
    """The claim of the statements before the worker's lease: on each job's own row."""
    sqlite = "sqlite" in store.link.url
    table = "heartq_jobs" if sqlite else "jobs"
    t = repr(now) if sqlite else f"to_timestamp({now!r})"
    lease = repr(now + LEASE) if sqlite else f"to_timestamp({now + LEASE!r})"
    listed = ", ".join(f"'{job_id}'" for job_id in ids)
    with store._write() as conn:  # type: ignore[attr-defined]
        conn.execute(
            f"UPDATE {table} SET status = 'running', worker_id = '{worker_id}', "
            f"execution_id = 1, attempts = 1, lease_expires_at = {lease}, "
            f"heartbeat_at = {t}, started_at = {t}, updated_at = {t} WHERE id IN ({listed})"
        )
