"""Jobs that wait for jobs (docs/design/pipelines.md, "Jobs that wait for jobs"): the `waiting`
state, its release when every dependency succeeded, the cancel that a failed dependency
cascades, and every place a job can end releasing its dependents in the same
transaction."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from heartq.errors import ConfigError, DependencyNotFound, LeaseLost
from heartq.lifecycle.fate import failed, succeeded
from heartq.model import CancelResult, DetectedBy, JobStatus, Outcome, Renewal, TaskPolicy
from heartq.store import Store, documents, open_store
from tests.support import wait_for

from .support import LEASE, at, claim_one, enqueue_one, new_ids, new_job, register

FAILED_AT_ONCE = {"max_retries": 0}


def status(store: Store, job_id: str) -> str:
    return str(store.get_job(job_id)["status"])


def statuses(store: Store, *job_ids: str) -> list[str]:
    return [status(store, job_id) for job_id in job_ids]


def run_to_end(store: Store, t: float, ok: bool = True, result: str = "null") -> str:
    """Claim the one runnable job and end it: succeeded, or dead (no retry left)."""
    job = claim_one(store, "w1", t)
    end = succeeded(job, result) if ok else failed(job, Outcome.FAILED, "boom", permanent=True)
    assert store.finish([end], now=t + 1) == []
    return job.id


def test_a_job_waits_until_its_dependency_succeeded(store: Store, t0: float) -> None:
    first = enqueue_one(store, t0, task="first")
    then = enqueue_one(store, t0, task="then", depends_on=(first,))
    job = store.get_job(then)
    assert job["status"] == JobStatus.WAITING and job["waiting_for"] == 1
    assert job["depends_on"] == [
        {"id": first, "task": "first", "status": "queued", "ended": None, "holds": False}
    ]
    assert store.get_job(first)["dependents"] == [
        {"id": then, "task": "then", "status": "waiting", "ended": None, "holds": False}
    ]
    claimed = store.claim("w1", ["default"], 10, LEASE, now=t0 + 1)
    assert [j.id for j in claimed] == [first]  # a waiting job is never claimed

    store.finish([succeeded(claimed[0], "1")], now=t0 + 5)
    released = store.get_job(then)
    assert released["status"] == JobStatus.QUEUED and released["waiting_for"] == 0
    assert at(released["run_at"], t0 + 5)  # due from its release, not its enqueue
    assert released["depends_on"][0]["ended"] == "succeeded"
    assert claim_one(store, "w1", t0 + 5).id == then


def test_a_later_eta_of_its_own_holds_after_the_release(store: Store, t0: float) -> None:
    first = enqueue_one(store, t0)
    then = enqueue_one(store, t0, depends_on=(first,), delay=100)
    run_to_end(store, t0 + 1)
    job = store.get_job(then)
    assert job["status"] == JobStatus.QUEUED and at(job["run_at"], t0 + 100)


def test_it_waits_for_every_dependency(store: Store, t0: float) -> None:
    a, b = enqueue_one(store, t0, task="a"), enqueue_one(store, t0, task="b")
    both = enqueue_one(store, t0, task="both", depends_on=(a, b, a))  # a twice: once
    assert store.get_job(both)["waiting_for"] == 2
    run_to_end(store, t0 + 1)
    assert store.get_job(both)["waiting_for"] == 1
    assert status(store, both) == JobStatus.WAITING
    run_to_end(store, t0 + 2)
    assert status(store, both) == JobStatus.QUEUED


def test_a_chain_is_released_one_step_at_a_time(store: Store, t0: float) -> None:
    a = enqueue_one(store, t0, task="a")
    b = enqueue_one(store, t0, task="b", depends_on=(a,))
    c = enqueue_one(store, t0, task="c", depends_on=(b,))
    assert statuses(store, a, b, c) == ["queued", "waiting", "waiting"]
    assert run_to_end(store, t0 + 1) == a
    assert statuses(store, b, c) == ["queued", "waiting"]
    assert run_to_end(store, t0 + 2) == b
    assert status(store, c) == JobStatus.QUEUED


def test_a_dead_dependency_cancels_its_dependents_down_the_line(store: Store, t0: float) -> None:
    a = enqueue_one(store, t0, task="a")
    b = enqueue_one(store, t0, task="b", depends_on=(a,), on_dependency_failure="cancel")
    c = enqueue_one(store, t0, task="c", depends_on=(b,), on_dependency_failure="cancel")
    run_to_end(store, t0 + 1, ok=False)
    for job_id in (b, c):
        job = store.get_job(job_id)
        assert job["status"] == JobStatus.CANCELLED
        assert at(job["finished_at"], t0 + 2)
    assert store.get_job(b)["error"] == f"dependency_failed: job {a} ended dead"
    assert store.get_job(c)["error"] == f"dependency_failed: job {b} ended cancelled"
    assert store.has_pending(["default"]) is False


def test_a_dependent_that_runs_anyway_is_released_by_a_failure(store: Store, t0: float) -> None:
    a = enqueue_one(store, t0, task="a")
    b = enqueue_one(store, t0, task="b", depends_on=(a,), on_dependency_failure="run")
    c = enqueue_one(store, t0, task="c", depends_on=(b,))
    run_to_end(store, t0 + 1, ok=False)
    assert statuses(store, b, c) == ["queued", "waiting"]
    assert store.get_job(b)["on_dependency_failure"] == "run"
    run_to_end(store, t0 + 2)
    assert status(store, c) == JobStatus.QUEUED


def test_dependencies_already_ended_are_counted_at_the_enqueue(store: Store, t0: float) -> None:
    done = enqueue_one(store, t0)
    run_to_end(store, t0 + 1)
    dead = enqueue_one(store, t0)
    run_to_end(store, t0 + 2, ok=False)
    assert status(store, enqueue_one(store, t0 + 3, depends_on=(done,))) == JobStatus.QUEUED
    cancelling = {"on_dependency_failure": "cancel"}
    cancelled = store.get_job(enqueue_one(store, t0 + 3, depends_on=(done, dead), **cancelling))
    assert cancelled["status"] == JobStatus.CANCELLED
    assert cancelled["error"] == f"dependency_failed: job {dead} ended dead"
    anyway = enqueue_one(store, t0 + 3, depends_on=(dead,), on_dependency_failure="run")
    assert status(store, anyway) == JobStatus.QUEUED


def test_a_missing_dependency_is_refused_and_nothing_stored(store: Store, t0: float) -> None:
    known = enqueue_one(store, t0)
    never, nor = new_ids(2)  # ids as heartq makes them, of no job stored
    with pytest.raises(DependencyNotFound) as refused:
        store.enqueue([new_job("x"), new_job("y", depends_on=(known, never, nor))], now=t0)
    assert refused.value.job_ids == [never, nor]
    assert f"no job '{never}', '{nor}'" in str(refused.value)
    assert isinstance(refused.value, ValueError)
    assert [j["id"] for j in store.list_jobs()] == [known]


def test_bad_dependency_options_are_refused(store: Store, t0: float) -> None:
    known = enqueue_one(store, t0)
    for options, says in [
        ({"depends_on": (known,), "unique_key": "k"}, "unique_key"),
        ({"depends_on": (known,), "on_dependency_failure": "ignore"}, "on_dependency_failure"),
        ({"depends_on": ("",)}, "non-empty"),
        ({"depends_on": ("a\x00b",)}, "NUL"),
        ({"depends_on": (known,), "id": known}, "itself"),
    ]:
        with pytest.raises(ConfigError, match=says):
            store.enqueue([new_job(**options)], now=t0)
    assert len(store.list_jobs()) == 1


def test_a_job_may_depend_on_jobs_of_its_batch(store: Store, t0: float) -> None:
    first_id, then_id, last_id = new_ids(3)
    first = new_job("first", id=first_id)
    then = new_job("then", id=then_id, depends_on=(first_id,))
    last = new_job("last", id=last_id, depends_on=(then_id, first_id))
    assert store.enqueue([last, then, first], now=t0) == [last_id, then_id, first_id]
    assert statuses(store, first_id, then_id, last_id) == ["queued", "waiting", "waiting"]
    assert [d["id"] for d in store.get_job(last_id)["depends_on"]] == [then_id, first_id]
    run_to_end(store, t0 + 1)
    assert statuses(store, then_id, last_id) == ["queued", "waiting"]
    run_to_end(store, t0 + 2)
    assert status(store, last_id) == JobStatus.QUEUED


def test_a_job_may_depend_on_a_job_of_the_same_transaction(
    store: Store, t0: float, connect: Any
) -> None:
    conn = connect()
    (first,) = store.enqueue([new_job("first")], connection=conn)
    (then,) = store.enqueue([new_job("then", depends_on=(first,))], connection=conn)
    conn.commit()
    assert statuses(store, first, then) == ["queued", "waiting"]
    # dated by the caller's transaction (the database's clock then), not by `t0`: a
    # loaded machine may take more than a second between the fixture and the commit
    run_to_end(store, store.clock() + 1)
    assert status(store, then) == JobStatus.QUEUED

    (gone,) = store.enqueue([new_job("gone")], connection=conn)
    (after,) = store.enqueue([new_job("after", depends_on=(gone,))], connection=conn)
    conn.rollback()
    ids = {j["id"] for j in store.list_jobs()}
    assert gone not in ids and after not in ids


def test_cancelling_a_waiting_job_cascades(store: Store, t0: float) -> None:
    a = enqueue_one(store, t0)
    b = enqueue_one(store, t0, depends_on=(a,))
    c = enqueue_one(store, t0, depends_on=(b,))
    assert store.cancel_job(b, now=t0 + 1, by="op") is CancelResult.CANCELLED
    assert statuses(store, a, b, c) == ["queued", "cancelled", "cancelled"]
    assert store.get_job(b)["cancelled_by"] == "op"
    assert store.get_job(c)["error"] == f"dependency_failed: job {b} ended cancelled"
    run_to_end(store, t0 + 2)  # the dependency's success comes too late: nothing moves
    assert statuses(store, b, c) == ["cancelled", "cancelled"]


def test_cancelling_a_queued_dependency_cancels_its_dependents(store: Store, t0: float) -> None:
    a = enqueue_one(store, t0)
    b = enqueue_one(store, t0, depends_on=(a,))
    store.cancel_job(a, now=t0 + 1)
    assert status(store, b) == JobStatus.CANCELLED


def test_a_completion_in_the_tasks_transaction_releases_in_it(store: Store, t0: float) -> None:
    a = enqueue_one(store, t0)
    b = enqueue_one(store, t0, depends_on=(a,), dependency_results=True)
    job = claim_one(store, "w1", t0 + 1)
    with pytest.raises(RuntimeError), store.completing(job.lease):
        raise RuntimeError("the task's block failed: everything rolls back")
    assert statuses(store, a, b) == ["running", "waiting"]

    with store.completing(job.lease):
        pass
    assert statuses(store, a, b) == ["succeeded", "queued"]
    (pending,) = store.dependency_results(b)
    assert pending.status is JobStatus.SUCCEEDED and pending.pending  # its result comes next
    assert store.save_result(job.lease, '{"n": 1}')
    assert store.dependency_results(b)[0].result == {"n": 1}
    assert not store.dependency_results(b)[0].pending


def test_a_completion_that_lost_its_lease_releases_nothing(store: Store, t0: float) -> None:
    a = enqueue_one(store, t0)
    b = enqueue_one(store, t0, depends_on=(a,))
    job = claim_one(store, "w1", t0 + 1, lease=5)
    store.reclaim_expired(DetectedBy.LEASE_EXPIRED, now=t0 + 10)
    with pytest.raises(LeaseLost), store.completing(job.lease):
        pass
    assert status(store, b) == JobStatus.WAITING


def test_a_release_with_a_cancel_pending_cancels_the_dependents(store: Store, t0: float) -> None:
    a = enqueue_one(store, t0)
    b = enqueue_one(store, t0, depends_on=(a,))
    job = claim_one(store, "w1", t0 + 1)
    store.cancel_job(a, now=t0 + 2)
    assert store.release([job.lease], now=t0 + 3) == []
    assert statuses(store, a, b) == ["cancelled", "cancelled"]


def test_a_shutdown_release_leaves_the_dependents_waiting(store: Store, t0: float) -> None:
    a = enqueue_one(store, t0)
    b = enqueue_one(store, t0, depends_on=(a,))
    job = claim_one(store, "w1", t0 + 1)
    store.release([job.lease], now=t0 + 2)
    assert statuses(store, a, b) == ["queued", "waiting"]


def test_a_reaper_that_buries_a_job_blocks_its_dependents(store: Store, t0: float) -> None:
    register(store, "w1", t0)
    a = enqueue_one(store, t0, **FAILED_AT_ONCE)
    b = enqueue_one(store, t0, depends_on=(a,))
    retried = enqueue_one(store, t0)  # a first crash requeues: its dependents keep waiting
    c = enqueue_one(store, t0, depends_on=(retried,))
    store.claim("w1", ["default"], 10, 5, now=t0 + 1)
    reclaimed = store.reclaim_expired(DetectedBy.LEASE_EXPIRED, now=t0 + 10)
    assert {r.job_id: r.status for r in reclaimed} == {a: "dead", retried: "queued"}
    assert statuses(store, b, c) == ["blocked", "waiting"]


def test_every_reclaimer_releases_the_dependents(store: Store, t0: float) -> None:
    register(store, "w1", t0)
    register(store, "w2", t0)
    register(store, "w3", t0, name="pod-a")
    jobs = [enqueue_one(store, t0, **FAILED_AT_ONCE) for _ in range(4)]
    dependents = [enqueue_one(store, t0, depends_on=(job,)) for job in jobs]
    one = claim_one(store, "w1", t0 + 1)
    claim_one(store, "w2", t0 + 1)
    claim_one(store, "w3", t0 + 1)
    crash = {"reason": "child died", "signal": "SIGKILL"}
    assert store.crash_attempt(one.lease, crash, DetectedBy.CHILD_EXIT, now=t0 + 2)
    store.reclaim_worker("w2", DetectedBy.LIVENESS_LOCK, "gone", now=t0 + 2)
    register(store, "w4", t0 + 3, name="pod-a")
    store.heartbeat("w4", [], LEASE, now=t0 + 500)
    store.reclaim_by_name("pod-a", "w4", DetectedBy.RECONCILIATION, now=t0 + 500, stale_after=90)
    assert statuses(store, *jobs[:3]) == ["dead"] * 3
    assert statuses(store, *dependents[:3]) == ["blocked"] * 3

    register(store, "w5", t0 + 500)
    claim_one(store, "w5", t0 + 500)
    store.heartbeat("w4", [], LEASE, now=t0 + 1000)
    store.mark_stale_workers(90, DetectedBy.STALE_WORKER, now=t0 + 1000, observer="w4")
    assert status(store, jobs[3]) == "dead" and status(store, dependents[3]) == "blocked"


def test_a_finish_batch_mixes_jobs_with_and_without_dependents(store: Store, t0: float) -> None:
    plain = [enqueue_one(store, t0) for _ in range(3)]
    linked = [enqueue_one(store, t0) for _ in range(2)]
    waiting = enqueue_one(store, t0, depends_on=tuple(linked))
    claimed = store.claim("w1", ["default"], 10, LEASE, now=t0 + 1)
    assert len(claimed) == 5
    assert store.finish([succeeded(job, "1") for job in claimed], now=t0 + 2) == []
    assert statuses(store, *plain, *linked) == ["succeeded"] * 5
    assert status(store, waiting) == JobStatus.QUEUED
    # a lost lease in the batch is still reported lost, with or without dependents
    assert store.finish([succeeded(claimed[0], "1"), succeeded(claimed[3], "1")]) == [
        claimed[0].lease,
        claimed[3].lease,
    ]


def test_a_replayed_dependency_is_not_counted_twice(store: Store, t0: float) -> None:
    a, other = enqueue_one(store, t0, task="a"), enqueue_one(store, t0, task="other", delay=50)
    anyway = enqueue_one(store, t0, depends_on=(a, other), on_dependency_failure="run")
    run_to_end(store, t0 + 1, ok=False)
    assert store.get_job(anyway)["waiting_for"] == 1
    assert store.replay_dead([a], now=t0 + 2) == [a]
    run_to_end(store, t0 + 3)  # `a` ends again: its edge was counted already
    job = store.get_job(anyway)
    assert job["status"] == JobStatus.WAITING and job["waiting_for"] == 1


def test_dependency_results_are_read_in_order(store: Store, t0: float) -> None:
    """In the order `depends_on` gave them, which here is neither the ids' order nor its
    reverse (nor the order they ended in)."""
    ids = [enqueue_one(store, t0, task=f"m{i}", args={"i": i}) for i in range(3)]
    order = (ids[1], ids[2], ids[0])
    callback = enqueue_one(store, t0, depends_on=order, dependency_results=True, task="cb")
    for i in range(3):
        job = claim_one(store, "w1", t0 + 1 + i)
        store.finish([succeeded(job, str(job.args["i"] * 10))], now=t0 + 1 + i)
    claimed = claim_one(store, "w1", t0 + 10)
    assert claimed.id == callback and claimed.dependency_results
    assert [(e.job_id, e.result) for e in store.dependency_results(callback)] == [
        (ids[1], 10),
        (ids[2], 20),
        (ids[0], 0),
    ]


def test_has_pending_counts_a_job_waiting_for_work_elsewhere(store: Store, t0: float) -> None:
    upstream = enqueue_one(store, t0, queue="other")
    enqueue_one(store, t0, depends_on=(upstream,))
    assert store.has_pending(["default"], now=t0 + 1)  # `other`'s job will release it
    job = claim_one(store, "w1", t0 + 1, queues=("other",))
    assert store.has_pending(["default"], now=t0 + 2)  # running elsewhere
    store.finish([failed(job, Outcome.FAILED, "boom", permanent=True)], now=t0 + 2)
    assert not store.has_pending(["default"], now=t0 + 3)  # cancelled: nothing left


class _BeforeStatement:
    """A connection whose first `execute` of `statement` runs `meanwhile(conn)` before
    it: what another session does between a read's start and its statement."""

    def __init__(self, conn: Any, statement: str, meanwhile: list[Callable[[Any], None]]):
        self._conn = conn
        self._statement = statement
        self._meanwhile = meanwhile

    def execute(self, sql: str, *params: Any) -> Any:
        if sql is self._statement and self._meanwhile:
            self._meanwhile.pop()(self._conn)
        return self._conn.execute(sql, *params)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._conn, name)


def test_has_pending_sees_a_dependent_released_after_its_read_began(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A dependent released by a finish that began after `has_pending`'s read had its
    time (PostgreSQL: its transaction's `now()`, fixed at a BEGIN psycopg sends as a round
    trip of its own; SQLite: a clock read before the statement) and committed before the
    read's statement is runnable in that statement's snapshot, with a `run_at` (the
    finish's own time) past the read's: it is pending all the same. A drain (or a burst
    worker) told otherwise stopped with it queued, never to run (the flake of
    test_callbacks_pass_results_on_and_take_a_step_s_result beside a CPU burner). Every
    time here is the database's (no `now=`), as a worker's are."""
    (a,) = store.enqueue([new_job(task="a")])
    (b,) = store.enqueue([new_job(task="b", depends_on=(a,))])
    (job,) = store.claim("w1", ["default"], 1, LEASE)
    dialect: Any = store.dialect  # type: ignore[attr-defined]

    def finish_a(conn: Any) -> None:
        began = dialect.now(conn, None)  # the read's time (PostgreSQL: its BEGIN, now)
        wait_for(lambda: store.clock() > began, 5.0, "the database's clock to move on")
        assert store.finish([succeeded(job, "null")]) == []  # its own transaction

    meanwhile = [finish_a]
    reads = dialect.read

    @contextlib.contextmanager
    def read() -> Iterator[Any]:
        with reads() as conn:
            yield _BeforeStatement(conn, dialect.q.HAS_PENDING, meanwhile)

    monkeypatch.setattr(dialect, "read", read)
    pending = store.has_pending(["default"], retries=False)
    monkeypatch.undo()
    assert not meanwhile, "the read made no HAS_PENDING statement"
    assert statuses(store, a, b) == ["succeeded", "queued"]
    assert pending, f"job {b}, released and due, was not pending"


def test_pruning_a_job_keeps_its_dependents_record(store: Store, t0: float) -> None:
    a = enqueue_one(store, t0)
    b = enqueue_one(store, t0, depends_on=(a,))
    run_to_end(store, t0 + 1)
    run_to_end(store, t0 + 2)
    assert store.prune(3600, 10, now=t0 + 100).jobs == 2
    ids = {j["id"] for j in store.list_jobs()}
    assert a not in ids and b not in ids
    store.enqueue([new_job(id=b)], now=t0 + 101)  # its id free again: no edge of the old one
    assert store.get_job(b)["depends_on"] == []


def test_a_waiting_job_heartbeat_renewal_is_lost(store: Store, t0: float) -> None:
    """A waiting job holds no lease: a stray write fenced on it changes nothing."""
    a = enqueue_one(store, t0)
    b = enqueue_one(store, t0, depends_on=(a,))
    job = claim_one(store, "w1", t0 + 1)
    fake = Renewal(type(job.lease)(b, 1))
    answers = store.heartbeat("w1", [Renewal(job.lease), fake], LEASE, now=t0 + 2)
    assert answers[fake.lease] == "lost" and status(store, b) == JobStatus.WAITING


def _fail_edge_updates(store: Store, backend: str) -> None:
    """Make the release of dependents fail (its update of the edges raises)."""
    with store._write() as conn:  # type: ignore[attr-defined]
        if backend == "sqlite":
            conn.execute(
                "CREATE TRIGGER fail_release BEFORE UPDATE ON heartq_job_dependencies "
                "BEGIN SELECT RAISE(ABORT, 'injected: the release failed'); END"
            )
        else:
            conn.execute(
                "CREATE FUNCTION fail_release() RETURNS trigger LANGUAGE plpgsql AS "
                "$$ BEGIN RAISE EXCEPTION 'injected: the release failed'; END $$"
            )
            conn.execute(
                "CREATE TRIGGER fail_release BEFORE UPDATE ON job_dependencies "
                "FOR EACH ROW EXECUTE FUNCTION fail_release()"
            )


def _let_edge_updates_be(store: Store) -> None:
    with store._write() as conn:  # type: ignore[attr-defined]
        on = "" if "sqlite" in store.link.url else " ON job_dependencies"
        conn.execute("DROP TRIGGER fail_release" + on)


def test_a_finish_whose_release_fails_does_not_land(store: Store, t0: float, backend: str) -> None:
    """The release commits with the end or not at all: a finish whose release fails is not
    saved (the worker saves it again), so no dependent is left waiting for a job that
    ended. A finish that committed by itself (PostgreSQL's one-statement FINISH) before
    its release would leave `then` waiting forever."""
    first = enqueue_one(store, t0)
    then = enqueue_one(store, t0, depends_on=(first,))
    job = claim_one(store, "w1", t0 + 1)
    _fail_edge_updates(store, backend)
    with pytest.raises(Exception, match="injected"):
        store.finish([succeeded(job, "1")])
    assert statuses(store, first, then) == ["running", "waiting"]
    _let_edge_updates_be(store)
    assert store.finish([succeeded(job, "1")]) == []
    assert statuses(store, first, then) == ["succeeded", "queued"]


def test_a_reclaim_whose_release_fails_does_not_land(store: Store, t0: float, backend: str) -> None:
    first = enqueue_one(store, t0, **FAILED_AT_ONCE)
    then = enqueue_one(store, t0, depends_on=(first,))
    claim_one(store, "w1", t0 + 1, lease=5)
    _fail_edge_updates(store, backend)
    with pytest.raises(Exception, match="injected"):
        store.reclaim_expired(DetectedBy.LEASE_EXPIRED, now=t0 + 10)
    assert statuses(store, first, then) == ["running", "waiting"]
    _let_edge_updates_be(store)
    assert len(store.reclaim_expired(DetectedBy.LEASE_EXPIRED, now=t0 + 10)) == 1
    assert statuses(store, first, then) == ["dead", "blocked"]


def _wait_until_blocked_by(watcher: Any, holder: Any) -> None:
    """Until some session waits for a lock `holder`'s transaction holds (30 s at most).
    The server's pid is asked in that transaction: behind a pooler the client's
    `backend_pid` is the pooler's, not the server session's."""
    row = holder.execute("SELECT pg_backend_pid() AS pid").fetchone()
    pid = row["pid"] if isinstance(row, dict) else row[0]  # a store's rows are dicts
    deadline = time.monotonic() + 30
    while True:
        query = "SELECT count(*) FROM pg_stat_activity WHERE %s = ANY(pg_blocking_pids(pid))"
        (n,) = watcher.execute(query, (pid,)).fetchone()
        watcher.rollback()
        if n:
            return
        assert time.monotonic() < deadline, "nobody ever waited for the lock"
        time.sleep(0.01)


def test_a_finish_that_waited_for_an_enqueue_releases_its_dependent(
    store: Store, t0: float, backend: str, connect: Any
) -> None:
    """PostgreSQL's race (docs/design/pipelines.md, "Jobs that wait for jobs"): a transaction that
    enqueues a dependent holds its dependency's row lock; the worker's one-statement
    finish of that dependency waits for it, and its snapshot, older than the enqueue's
    commit, cannot see the new edge. It must still release the dependent: it finds the
    row marked `has_dependents` once the lock is its own, and leaves it to a transaction
    whose release statement sees the edge."""
    if backend == "sqlite":
        pytest.skip("SQLite has one writer: an enqueue and a finish never overlap")
    first = enqueue_one(store, t0)
    job = claim_one(store, "w1", t0 + 1)
    conn = connect()
    (then,) = store.enqueue([new_job("then", depends_on=(first,))], connection=conn)
    lost: list[Any] = []
    finisher = threading.Thread(target=lambda: lost.extend(store.finish([succeeded(job, "1")])))
    finisher.start()
    _wait_until_blocked_by(connect(), conn)
    assert status(store, first) == JobStatus.RUNNING
    conn.commit()
    finisher.join(30)
    assert not finisher.is_alive() and lost == []
    assert statuses(store, first, then) == ["succeeded", "queued"]


def test_an_enqueue_that_waited_for_an_end_sees_the_job_ended(
    store: Store, t0: float, backend: str, connect: Any, store_url: str
) -> None:
    """The other order: a transaction that ends the dependency (a reclaimer's, a
    completion's) holds its row while a dependent is enqueued; the enqueue waits for the
    lock, then finds the job ended under it and queues its dependent at once."""
    if backend == "sqlite":
        pytest.skip("SQLite has one writer: an enqueue and a finish never overlap")
    first = enqueue_one(store, t0)
    job = claim_one(store, "w1", t0 + 1)
    enqueued: list[str] = []
    other = open_store(store_url)
    enqueuer = threading.Thread(
        target=lambda: enqueued.extend(other.enqueue([new_job("then", depends_on=(first,))]))
    )
    try:
        with store._write() as conn:  # type: ignore[attr-defined]
            doc = documents.attempt_finish_doc(succeeded(job, "1"))
            assert store._apply_finishes(conn, [doc], None) == {job.lease}  # type: ignore[attr-defined]
            enqueuer.start()
            _wait_until_blocked_by(connect(), conn)
        enqueuer.join(30)
        assert not enqueuer.is_alive()
    finally:
        other.link.close()
    assert statuses(store, first, enqueued[0]) == ["succeeded", "queued"]


def test_a_declaration_reroutes_waiting_jobs_too(store: Store, t0: float) -> None:
    """A job waiting for others is still in line for its task's policy: released, it
    goes where the task's workers are."""
    first = enqueue_one(store, t0)
    (waiting,) = store.enqueue([new_job("media_task", depends_on=(first,), chosen=0)], now=t0)
    store.declare_tasks([TaskPolicy("media_task", "media", 0, 3, 5.0, 3600.0)], "w1")
    assert store.reroute_jobs(["media_task"]) == 1
    job = store.get_job(waiting)
    assert (job["status"], job["queue"]) == ("waiting", "media")


def test_dependencies_ending_at_once_release_their_common_dependents_once(
    store: Store, t0: float
) -> None:
    """Two finishes racing (two threads, two connections), each the last-but-one or the
    last dependency of the same 20 jobs: every one of them is released once, none left
    waiting, none deadlocked (the releases lock the dependents in id order)."""
    for _ in range(5):
        a, b = enqueue_one(store, t0), enqueue_one(store, t0)
        common = [enqueue_one(store, t0, depends_on=(a, b) if i % 2 else (b, a)) for i in range(20)]
        claimed = store.claim("w1", ["default"], 2, LEASE)
        assert {j.id for j in claimed} == {a, b}
        lost: list[Any] = []

        def finish(job: Any, into: list[Any] = lost) -> None:
            into.extend(store.finish([succeeded(job, "1")]))

        racers = [threading.Thread(target=finish, args=(job,)) for job in claimed]
        for racer in racers:
            racer.start()
        for racer in racers:
            racer.join(30)
        assert lost == [] and not any(r.is_alive() for r in racers)
        jobs = [store.get_job(job_id) for job_id in common]
        assert {(j["status"], j["waiting_for"]) for j in jobs} == {("queued", 0)}
        for job in store.claim("w1", ["default"], 20, LEASE):  # out of the way
            store.finish([succeeded(job, "1")])


def test_a_result_given_up_by_a_reaper_is_final(store: Store) -> None:
    """A result still to come waits for its worker, however long past its lease (a
    database outage or a failover may hold the save), until a reaper gives it up: then
    "no result" is final for every reader, and a save that comes later is refused, so
    a callback never reads "no result" for a result a job then shows."""
    t = store.clock() - 100  # the attempt's 5 s lease ran out 95 s ago
    a = enqueue_one(store, t)
    b = enqueue_one(store, t, depends_on=(a,), dependency_results=True)
    job = claim_one(store, "w1", t + 1, lease=5)
    with store.completing(job.lease):  # not reaped: the completion itself still lands
        pass
    assert store.dependency_results(b)[0].pending  # still to come: nobody gave it up
    assert store.job_end(a).result_pending
    assert store.reclaim_expired(DetectedBy.LEASE_EXPIRED) == []  # no running job reclaimed
    (end,) = store.dependency_results(b)
    assert end.status is JobStatus.SUCCEEDED and not end.pending and end.result is None
    assert not store.job_end(a).result_pending
    assert not store.save_result(job.lease, '{"n": 1}')  # too late: refused
    assert store.get_job(a)["result"] is None
    assert store.dependency_results(b)[0].result is None


def test_a_result_saved_past_its_lease_before_any_reaper_lands(store: Store) -> None:
    """Until a reaper gives it up, a late save lands (the worker was only slow)."""
    t = store.clock() - 100
    a = enqueue_one(store, t)
    job = claim_one(store, "w1", t + 1, lease=5)
    with store.completing(job.lease):
        pass
    assert store.save_result(job.lease, '{"n": 1}')
    assert store.reclaim_expired(DetectedBy.LEASE_EXPIRED) == []
    assert store.get_job(a)["result"] == {"n": 1} and not store.job_end(a).result_pending
