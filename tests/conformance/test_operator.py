"""What operators and the client API see and do: shapes, cancel, the dead-letter queue,
lookups, and the schema."""

from __future__ import annotations

from typing import Any

import pytest

from heartq.errors import AmbiguousJobId, JobNotFound
from heartq.lifecycle.fate import cancelled, failed, succeeded
from heartq.model import (
    CancelResult,
    DetectedBy,
    JobStatus,
    Lease,
    Outcome,
    Progress,
    Renewal,
    RenewStatus,
)
from heartq.store import Store, open_store

from .support import (
    CRASH_KEYS,
    EXECUTION_FIELDS,
    ISO_UTC,
    JOB_FIELDS,
    LEASE,
    WORKER_FIELDS,
    at,
    claim_one,
    enqueue_one,
    new_ids,
    new_job,
    register,
)


def _job_in(store: Store, t0: float, state: str) -> str:
    """A job brought to `state` through the protocol (max_retries=0: one failure kills)."""
    job_id = enqueue_one(store, t0, max_retries=0)
    if state == "queued":
        return job_id
    job = claim_one(store, "w1", t0)
    if state == "succeeded":
        store.finish([succeeded(job, None)], now=t0)
    elif state == "dead":
        store.finish([failed(job, Outcome.FAILED, "boom")], now=t0)
    elif state == "cancelled":
        store.finish([cancelled(job)], now=t0)
    else:
        assert state == "running"
    return job_id


def _lease(job: dict[str, Any]) -> Lease:
    return Lease(job["id"], job["execution_id"])


# -- cancel -------------------------------------------------------------------------------

CANCEL_CASES = [
    # state before, answer, status after
    ("queued", CancelResult.CANCELLED, JobStatus.CANCELLED),
    ("running", CancelResult.CANCEL_REQUESTED, JobStatus.RUNNING),
    ("succeeded", CancelResult.ALREADY_FINISHED, JobStatus.SUCCEEDED),
    ("dead", CancelResult.ALREADY_FINISHED, JobStatus.DEAD),
    ("cancelled", CancelResult.ALREADY_FINISHED, JobStatus.CANCELLED),
]


@pytest.mark.parametrize(
    ("state", "answer", "status"), CANCEL_CASES, ids=[c[0] for c in CANCEL_CASES]
)
def test_cancel_job(
    store: Store, t0: float, state: str, answer: CancelResult, status: JobStatus
) -> None:
    job_id = _job_in(store, t0, state)
    before = store.get_job(job_id)
    assert store.cancel_job(job_id, now=t0 + 1, by="ops@host") is answer
    after = store.get_job(job_id)
    assert after["status"] == status
    if answer is not CancelResult.ALREADY_FINISHED:
        assert after["cancelled_by"] == "ops@host"
    if answer is CancelResult.ALREADY_FINISHED:
        assert after == before
    elif answer is CancelResult.CANCELLED:
        assert at(after["finished_at"], t0 + 1)
        assert after["executions"] == []
        assert store.claim("w2", ["default"], 10, LEASE, now=t0 + 10_000) == []
    else:  # running: its worker hears of it within about a second
        answers = store.heartbeat("w1", [Renewal(_lease(after))], LEASE, now=t0 + 2)
        assert answers == {_lease(after): RenewStatus.CANCEL_REQUESTED}
        assert store.get_job(job_id)["status"] == JobStatus.RUNNING


def test_cancel_unknown_job(store: Store, t0: float) -> None:
    with pytest.raises(JobNotFound):
        store.cancel_job(new_ids(1)[0], now=t0)  # an id as heartq makes them, never stored


def test_a_cancel_request_survives_the_death_of_the_worker(store: Store, t0: float) -> None:
    job_id = enqueue_one(store, t0, retry_backoff=0.0)
    claim_one(store, "w1", t0)
    assert store.cancel_job(job_id, now=t0 + 1) is CancelResult.CANCEL_REQUESTED
    store.reclaim_expired(DetectedBy.LEASE_EXPIRED, now=t0 + LEASE + 1)
    after = store.get_job(job_id)
    if after["status"] == JobStatus.CANCELLED:
        return
    # requeued: then the next attempt must be told at once
    job = claim_one(store, "w2", t0 + LEASE + 2)
    answers = store.heartbeat("w2", [Renewal(job.lease)], LEASE, now=t0 + LEASE + 3)
    assert answers[job.lease] is RenewStatus.CANCEL_REQUESTED


# -- the dead-letter queue ----------------------------------------------------------------


def test_replay_dead_keeps_the_history(store: Store, t0: float) -> None:
    job_id = enqueue_one(store, t0, max_retries=1, retry_backoff=0.0)
    first = claim_one(store, "w1", t0)
    store.finish([failed(first, Outcome.FAILED, "boom 1")], now=t0 + 1)
    claim_one(store, "w2", t0 + 2)
    (buried,) = store.reclaim_expired(DetectedBy.LEASE_EXPIRED, now=t0 + 2 + LEASE + 1)
    assert buried.status == JobStatus.DEAD
    dead = store.get_job(job_id)

    assert store.replay_dead([job_id], now=t0 + 100) == [job_id]

    replayed = store.get_job(job_id)
    assert replayed["status"] == JobStatus.QUEUED
    assert replayed["attempts"] == 0
    assert replayed["dead_reason"] is None
    assert replayed["finished_at"] is None
    assert replayed["args"] == dead["args"]
    assert at(replayed["run_at"], t0 + 100)
    assert replayed["executions"] == dead["executions"]  # the history stays
    again = claim_one(store, "w3", t0 + 100)
    assert (again.attempt, again.execution_id) == (1, 3)  # fencing tokens keep growing
    store.finish([succeeded(again, '"ok"')], now=t0 + 101)
    done = store.get_job(job_id)
    assert done["status"] == JobStatus.SUCCEEDED
    assert [e["outcome"] for e in done["executions"]] == ["failed", "crashed", "succeeded"]


def test_replay_only_touches_dead_jobs(store: Store, t0: float) -> None:
    dead = [_job_in(store, t0, "dead") for _ in range(3)]
    others = [_job_in(store, t0, s) for s in ("queued", "running", "succeeded", "cancelled")]
    before = {job_id: store.get_job(job_id) for job_id in others}
    assert store.replay_dead([*others, *new_ids(1)], now=t0 + 1) == []  # and one never stored
    assert {job_id: store.get_job(job_id) for job_id in others} == before
    assert store.replay_dead([dead[0]], now=t0 + 1) == [dead[0]]
    assert sorted(store.replay_dead(None, now=t0 + 2)) == sorted(dead[1:])
    assert store.replay_dead(None, now=t0 + 3) == []
    assert {store.get_job(j)["status"] for j in dead} == {JobStatus.QUEUED}


def test_dead_reason_after_replay_counts_only_the_new_attempts(store: Store, t0: float) -> None:
    job_id = enqueue_one(store, t0, max_retries=0)
    job = claim_one(store, "w1", t0)
    store.crash_attempt(job.lease, {"reason": "oom"}, DetectedBy.CHILD_EXIT, now=t0 + 1)
    assert "crashed 1 worker in 1 attempt" in store.get_job(job_id)["dead_reason"]
    store.replay_dead([job_id], now=t0 + 2)
    job = claim_one(store, "w2", t0 + 2)
    store.crash_attempt(job.lease, {"reason": "oom"}, DetectedBy.CHILD_EXIT, now=t0 + 3)
    assert "crashed 1 worker in 1 attempt" in store.get_job(job_id)["dead_reason"]


# -- retries due now (heartq.testing's drain) ---------------------------------------------


def test_retry_now_makes_waiting_retries_due_and_keeps_their_count(store: Store, t0: float) -> None:
    job_id = enqueue_one(store, t0, max_retries=2, retry_backoff=600.0)
    first = claim_one(store, "w1", t0)
    store.finish([failed(first, Outcome.FAILED, "boom")], now=t0 + 1)
    waiting = store.get_job(job_id)
    assert store.claim("w2", ["default"], 1, LEASE, now=t0 + 2) == []  # in its backoff

    assert store.retry_now(["default"], now=t0 + 2) == [job_id]

    due = store.get_job(job_id)
    assert at(due["run_at"], t0 + 2)
    changed = {key for key in due if due[key] != waiting[key]}
    assert changed <= {"run_at"}, changed  # attempts, retries, backoff, history: as they were
    again = claim_one(store, "w2", t0 + 2)
    assert (again.id, again.attempt, again.max_retries) == (job_id, 2, 2)
    assert store.retry_now(["default"], now=t0 + 3) == []


def test_retry_now_leaves_first_attempts_other_queues_and_other_states(
    store: Store, t0: float
) -> None:
    delayed = enqueue_one(store, t0, delay=600.0)  # a first attempt: not a retry
    elsewhere = enqueue_one(store, t0, queue="other", max_retries=1, retry_backoff=600.0)
    store.finish([failed(claim_one(store, "w1", t0, queues=("other",)), Outcome.FAILED, "x")],
                 now=t0)  # fmt: skip
    others = [_job_in(store, t0, s) for s in ("running", "succeeded", "dead", "cancelled")]
    before = {j: store.get_job(j) for j in [delayed, elsewhere, *others]}

    assert store.retry_now(["default"], now=t0 + 1) == []

    assert {j: store.get_job(j) for j in before} == before
    assert store.retry_now(["other"], now=t0 + 1) == [elsewhere]


def test_a_job_starts_at_a_later_attempt_judged_as_such(store: Store, t0: float) -> None:
    """`start_at_attempt` (heartq.testing.run_attempt's): the claim answers that attempt,
    a failure of it is judged as the worker judges that attempt (a retry while any is
    left, dead after the last), and the job's history counts it."""
    retried = enqueue_one(store, t0, max_retries=3, retry_backoff=600.0)
    last = enqueue_one(store, t0, queue="last", max_retries=3)
    assert store.start_at_attempt(retried, 3, now=t0) and store.start_at_attempt(last, 4, now=t0)

    job = claim_one(store, "w1", t0)
    assert (job.id, job.attempt, job.execution_id) == (retried, 3, 3)
    store.finish([failed(job, Outcome.FAILED, "boom")], now=t0 + 1)
    assert (store.get_job(retried)["status"], store.get_job(retried)["attempts"]) == ("queued", 3)
    job = claim_one(store, "w1", t0, queues=("last",))
    assert (job.id, job.attempt) == (last, 4)
    store.finish([failed(job, Outcome.FAILED, "boom")], now=t0 + 1)
    dead = store.get_job(last)
    assert (dead["status"], dead["attempts"]) == ("dead", 4)
    assert [e["execution_id"] for e in dead["executions"]] == [4]


def test_only_a_job_never_claimed_starts_at_a_later_attempt(store: Store, t0: float) -> None:
    others = [_job_in(store, t0, s) for s in ("running", "succeeded", "dead", "cancelled")]
    retry = enqueue_one(store, t0, max_retries=1, retry_backoff=600.0)
    store.finish([failed(claim_one(store, "w1", t0), Outcome.FAILED, "x")], now=t0)
    before = {j: store.get_job(j) for j in [*others, retry]}
    for job_id in [*others, retry, "0190b6a0-0000-7000-8000-000000000000"]:
        assert not store.start_at_attempt(job_id, 2, now=t0 + 1)
    assert {j: store.get_job(j) for j in before} == before


def test_has_pending_counts_waiting_retries_unless_told_not_to(store: Store, t0: float) -> None:
    job_id = enqueue_one(store, t0, max_retries=1, retry_backoff=600.0)
    enqueue_one(store, t0, queue="later", delay=600.0)  # a first attempt ahead: never pending
    assert store.has_pending(["default"], now=t0) and store.has_pending(["default"], t0, False)
    job = claim_one(store, "w1", t0)
    assert store.has_pending(["default"], now=t0, retries=False)  # running
    store.finish([failed(job, Outcome.FAILED, "boom")], now=t0 + 1)

    assert store.has_pending(["default"], now=t0 + 2)  # what a burst worker waits for
    assert not store.has_pending(["default"], now=t0 + 2, retries=False)  # what a drain leaves
    assert store.has_pending(["default"], now=t0 + 800, retries=False)  # due (600 s +/-25 %)
    assert not store.has_pending(["later"], now=t0 + 2)
    store.retry_now(["default"], now=t0 + 3)
    assert store.has_pending(["default"], now=t0 + 3, retries=False), job_id


def test_purge_dead(store: Store, t0: float) -> None:
    old = _job_in(store, t0, "dead")
    new = _job_in(store, t0 + 500, "dead")
    kept = [_job_in(store, t0, s) for s in ("queued", "running", "succeeded", "cancelled")]

    assert store.purge_dead(older_than=1000, now=t0 + 1200) == 1
    with pytest.raises(JobNotFound):
        store.get_job(old)
    assert store.get_job(new)["status"] == JobStatus.DEAD

    assert store.purge_dead(now=t0 + 1200) == 1
    with pytest.raises(JobNotFound):
        store.get_job(new)
    assert store.purge_dead(now=t0 + 1200) == 0
    assert sorted(j["id"] for j in store.list_jobs()) == sorted(kept)
    assert store.list_jobs(status="dead") == []


# -- shapes -------------------------------------------------------------------------------


def _check_times(doc: dict[str, Any], keys: list[str]) -> None:
    for key in keys:
        value = doc[key]
        assert value is None or (isinstance(value, str) and ISO_UTC.match(value)), (key, value)


def test_get_job_shape(store: Store, t0: float) -> None:
    """Every field of `heartq jobs show --json`, with ISO-8601 UTC times."""
    register(store, "w1", t0)
    job_id = enqueue_one(store, t0, task="analyze", args={"repo": "r"}, retry_backoff=0.0)
    first = claim_one(store, "w1", t0)
    store.heartbeat("w1", [Renewal(first.lease, Progress(0.5, "clone", "cloning"))], LEASE, now=t0)
    store.save_checkpoint(first.lease, '{"done": 10}', now=t0 + 1)
    store.reclaim_expired(DetectedBy.LEASE_EXPIRED, now=t0 + LEASE + 1)
    second = claim_one(store, "w1", t0 + LEASE + 2)
    store.finish([succeeded(second, '{"files": 120}')], now=t0 + LEASE + 3)

    job = store.get_job(job_id)

    assert set(job) >= JOB_FIELDS, JOB_FIELDS - set(job)
    assert "executions" in job
    _check_times(
        job,
        ["run_at", "created_at", "started_at", "finished_at", "lease_expires_at", "heartbeat_at"],
    )
    assert at(job["created_at"], t0)
    assert at(job["started_at"], t0 + LEASE + 2)
    assert at(job["finished_at"], t0 + LEASE + 3)
    assert job["status"] == "succeeded"
    assert job["args"] == {"repo": "r"}
    assert job["result"] == {"files": 120}
    assert job["checkpoint"] == {"done": 10}
    assert job["attempts"] == 2
    assert job["execution_id"] == 2
    assert job["worker_id"] == "w1"
    assert set(job["progress"]) == {"value", "stage", "message"}
    assert isinstance(job["priority"], int) and isinstance(job["max_retries"], int)

    crashed, ok = job["executions"]
    for execution in (crashed, ok):
        assert set(execution) >= EXECUTION_FIELDS
        _check_times(execution, ["started_at", "ended_at"])
    assert (crashed["execution_id"], crashed["outcome"]) == (1, "crashed")
    assert (ok["execution_id"], ok["outcome"]) == (2, "succeeded")
    assert ok["crash"] is None
    assert set(crashed["crash"]) >= CRASH_KEYS
    _check_times(crashed["crash"], ["last_heartbeat_at", "detected_at"])


def test_list_jobs(store: Store, t0: float) -> None:
    a = [enqueue_one(store, t0, queue="a") for _ in range(3)]
    b = [enqueue_one(store, t0, queue="b") for _ in range(2)]
    running = claim_one(store, "w1", t0, queues=("b",))

    everything = store.list_jobs()
    assert sorted(j["id"] for j in everything) == sorted(a + b)
    for job in everything:
        assert set(job) >= JOB_FIELDS, JOB_FIELDS - set(job)
        _check_times(job, ["run_at", "created_at", "started_at", "finished_at"])
    assert sorted(j["id"] for j in store.list_jobs(queue="a")) == sorted(a)
    assert [j["id"] for j in store.list_jobs(status="running")] == [running.id]
    assert [j["id"] for j in store.list_jobs(status="queued", queue="b")] == [
        x for x in b if x != running.id
    ]
    assert len(store.list_jobs(limit=2)) == 2
    assert store.list_jobs(status="dead") == []
    assert store.list_jobs(queue="nope") == []


def test_count_jobs(store: Store, t0: float) -> None:
    assert store.count_jobs() == []
    for _ in range(3):
        enqueue_one(store, t0, queue="a")
    enqueue_one(store, t0, queue="b")
    claim_one(store, "w1", t0, queues=("b",))
    assert sorted(store.count_jobs()) == [("a", "queued", 3), ("b", "running", 1)]


def test_list_workers(store: Store, t0: float) -> None:
    register(store, "w1", t0, name="pod-1", queues=("a", "b"), concurrency=8, pid=11)
    register(store, "w2", t0)
    register(store, "w3", t0)
    store.stop_worker("w3", now=t0 + 1)
    for _ in range(3):
        enqueue_one(store, t0, queue="a")
    store.claim("w1", ["a"], 2, LEASE, now=t0)

    active = {w["id"]: w for w in store.list_workers()}
    assert set(active) == {"w1", "w2"}
    w1 = active["w1"]
    assert set(w1) >= WORKER_FIELDS, WORKER_FIELDS - set(w1)
    assert w1["name"] == "pod-1"
    assert w1["hostname"] == "test-host"
    assert w1["pid"] == 11
    assert w1["status"] == "active"
    assert list(w1["queues"]) == ["a", "b"]
    assert w1["concurrency"] == 8
    assert w1["running"] == 2
    assert active["w2"]["running"] == 0
    assert at(w1["started_at"], t0)
    assert at(w1["last_heartbeat_at"], t0)
    everyone = {w["id"]: w for w in store.list_workers(include_all=True)}
    assert set(everyone) == {"w1", "w2", "w3"}
    assert everyone["w3"]["status"] == "stopped"


def test_register_again_reactivates(store: Store, t0: float) -> None:
    register(store, "w1", t0)
    store.stop_worker("w1", now=t0 + 1)
    register(store, "w1", t0 + 2)
    (w1,) = store.list_workers()
    assert w1["status"] == "active"
    assert at(w1["last_heartbeat_at"], t0 + 2)


def test_unknown_job(store: Store) -> None:
    (never,) = new_ids(1)  # an id as heartq makes them, of no job stored
    with pytest.raises(JobNotFound) as raised:
        store.get_job(never)
    assert isinstance(raised.value, LookupError)
    assert never in str(raised.value)


# -- shortened ids, as operators type them ------------------------------------------------


def test_a_shortened_id_is_the_start_or_the_tail_of_one_id(store: Store, t0: float) -> None:
    """Ids made together share their first characters (time first), so their tails tell
    them apart: 8 characters or more of a tail, typed in any case, with or without the
    id's dashes, name the job; so does a start long enough to be unique. A start several
    jobs share is ambiguous, and the error lists a few of them with task and status."""
    ids = store.enqueue([new_job(f"task{i}") for i in range(7)], now=t0)
    first, second = ids[0], ids[1]
    assert first[:8] == ids[-1][:8]  # made together: the first 8 characters say nothing
    bare = first.replace("-", "")
    for typed in (first[-8:], first[-8:].upper(), first[-12:], bare[-16:], f" {bare[-20:]} ",
                  "-" + first[-13:], bare, bare.upper()):  # fmt: skip
        assert store.resolve_job_id(typed) == first, typed
    others = [job_id for job_id in ids if job_id != second]
    unique = next(
        second[:n] for n in range(8, 37) if not any(o.startswith(second[:n]) for o in others)
    )
    assert store.resolve_job_id(unique) == second
    assert store.resolve_job_id(unique.replace("-", "").upper()) == second
    with pytest.raises(AmbiguousJobId) as raised:
        store.resolve_job_id(first[:8])
    error = raised.value
    assert [c.id for c in error.candidates] == ids[:5] and error.matches == ids[:5]
    assert (error.candidates[0].task, error.candidates[0].status) == ("task0", "queued")
    message = str(error)
    assert message.startswith(f"job id {first[:8]!r} is ambiguous: more than 5 jobs match")
    assert f"{first} (task0, queued)" in message and "\n" not in message
    assert isinstance(error, LookupError)


def test_a_tail_that_is_another_ids_start_is_ambiguous_not_taken_for_it(
    store: Store, t0: float
) -> None:
    """Both readings count: 8 characters that end one id and start another name two jobs,
    never silently the one whose start they are."""
    starts = "0123abcd-0000-7000-8000-00000000aaaa"
    ends = "01a20000-0000-7000-8000-00000123abcd"
    store.enqueue([new_job("starts", id=starts), new_job("ends", id=ends)], now=t0)
    store.cancel_job(ends, now=t0)
    with pytest.raises(AmbiguousJobId) as raised:
        store.resolve_job_id("0123ABCD")
    assert [(c.id, c.task, c.status) for c in raised.value.candidates] == [
        (starts, "starts", "queued"),
        (ends, "ends", "cancelled"),
    ]
    assert store.resolve_job_id("0123abcd-0") == starts
    assert store.resolve_job_id("00123abcd") == ends


@pytest.mark.parametrize("typed", ["abcdefgh\x00", "\x00" * 9, "0123abcd\x00-0000"])
def test_a_shortened_id_with_nul_is_simply_not_found(store: Store, typed: str) -> None:
    """No id holds a NUL (PostgreSQL could not even be asked about one): not found, on
    every backend alike, as an id typed into the dashboard's search box may be."""
    enqueue_one(store, store.clock())
    with pytest.raises(JobNotFound):
        store.resolve_job_id(typed)


def test_too_short_or_unknown(store: Store, t0: float) -> None:
    job_id = enqueue_one(store, t0)
    with pytest.raises(JobNotFound, match="needs at least 8 characters"):
        store.resolve_job_id(job_id[-7:])
    with pytest.raises(JobNotFound, match="needs at least 8 characters"):
        store.resolve_job_id(job_id[-9:-8] + "-" + job_id[-6:])  # dashes do not count
    with pytest.raises(JobNotFound):
        store.resolve_job_id("ffffffff")


# -- the schema ---------------------------------------------------------------------------


def test_migrate_twice_is_a_no_op(store: Store, store_url: str, t0: float) -> None:
    job_id = enqueue_one(store, t0)
    version = store.link.migrate()
    assert isinstance(version, int) and version >= 1
    assert store.link.migrate() == version
    other = open_store(store_url)
    try:
        assert other.link.migrate() == version
        assert other.get_job(job_id)["status"] == JobStatus.QUEUED
    finally:
        other.link.close()
    assert store.get_job(job_id)["status"] == JobStatus.QUEUED


def test_url_is_safe_to_print(store: Store, store_url: str) -> None:
    assert isinstance(store.link.url, str) and store.link.url
    assert isinstance(store.link.supports_notify, bool)
    assert isinstance(store.clock(), float)
