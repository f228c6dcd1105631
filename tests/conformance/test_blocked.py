"""Jobs blocked by a dead dependency (docs/design/pipelines.md, "Jobs that wait for jobs"): a dead
dependency blocks what waits for it, naming itself, and what waits for a blocked job in
turn; a replay from the dead-letter queue puts them back to waiting and its success runs
them; a cancel, a purge of the dead job or the blocked retention end them. Every test
also holds the counts to the edges: `waiting_for` is the edges not counted yet,
`holders` the edges that hold the job."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import psycopg
import pytest

from heartq.lifecycle.fate import failed
from heartq.model import CancelResult, JobStatus, Outcome
from heartq.store import Store, documents
from heartq.store.postgres.connection import parse_url
from tests.support import opened

from .support import (
    LEASE,
    SteeredMigrations,
    claim_one,
    enqueue_one,
    insert_version_1_job,
    new_ids,
    new_job,
)
from .test_dependencies import _wait_until_blocked_by, run_to_end

CANCELS = {"on_dependency_failure": "cancel"}
RUNS = {"on_dependency_failure": "run"}


def consistent(store: Store, *job_ids: str) -> list[str]:
    """The jobs' statuses, each job's counts checked against its edges first."""
    shown = []
    for job_id in job_ids:
        job = store.get_job(job_id)
        if job["status"] in (JobStatus.WAITING, JobStatus.BLOCKED):
            edges = job["depends_on"]
            assert job["waiting_for"] == sum(1 for e in edges if e["ended"] is None), job
            assert job["holders"] == sum(1 for e in edges if e["holds"]), job
            assert (job["status"] == JobStatus.BLOCKED) == (job["holders"] > 0), job
        shown.append(str(job["status"]))
    return shown


def die(store: Store, t: float) -> str:
    """Claim the one runnable job and end it dead (no retry)."""
    return run_to_end(store, t, ok=False)


def holder(store: Store, job_id: str) -> str | None:
    blocked_by = store.get_job(job_id)["blocked_by"]
    return None if blocked_by is None else str(blocked_by["id"])


def chain(store: Store, t0: float, n: int, **options: Any) -> list[str]:
    ids = [enqueue_one(store, t0, task="step0")]
    for i in range(1, n):
        ids.append(enqueue_one(store, t0, task=f"step{i}", depends_on=(ids[-1],), **options))
    return ids


def test_a_dead_dependency_blocks_its_dependents_naming_it(store: Store, t0: float) -> None:
    a, b, c = chain(store, t0, 3)
    assert die(store, t0 + 1) == a
    assert consistent(store, a, b, c) == ["dead", "blocked", "blocked"]
    job = store.get_job(b)
    assert job["finished_at"] is None and job["error"] is None
    assert job["depends_on"] == [
        {"id": a, "task": "step0", "status": "dead", "ended": "dead", "holds": True}
    ]
    assert job["blocked_by"] == {
        "id": a, "task": "step0", "error": "boom", "dead_reason": store.get_job(a)["dead_reason"]
    }  # fmt: skip
    assert store.get_job(c)["depends_on"][0]["ended"] is None  # b has not ended
    assert holder(store, c) == a  # the root, however far up
    assert store.get_job(a)["dependents"][0]["holds"] is True
    assert store.claim("w1", ["default"], 10, LEASE, now=t0 + 2) == []
    assert store.has_pending(["default"]) is False  # nothing will move without an operator
    for job_id in (b, c):
        end = store.job_end(job_id)
        assert end.status is JobStatus.BLOCKED and end.ended
        assert end.held_by is not None and end.held_by.job_id == a
        assert end.held_by.error == "boom"
    assert store.job_end(a).held_by is None


def test_a_replay_puts_them_back_to_waiting_and_its_success_runs_them(
    store: Store, t0: float
) -> None:
    a, b, c = chain(store, t0, 3)
    die(store, t0 + 1)
    assert store.replay_dead([a], now=t0 + 2) == [a]
    assert consistent(store, a, b, c) == ["queued", "waiting", "waiting"]
    assert holder(store, b) is None and store.job_end(c).held_by is None
    assert store.has_pending(["default"]) is True
    assert run_to_end(store, t0 + 3) == a
    assert consistent(store, b, c) == ["queued", "waiting"]
    assert run_to_end(store, t0 + 4) == b
    assert run_to_end(store, t0 + 5) == c
    assert store.get_job(b)["depends_on"][0]["ended"] == "succeeded"


def test_a_replayed_dependency_that_dies_again_blocks_again(store: Store, t0: float) -> None:
    a, b, c = chain(store, t0, 3)
    die(store, t0 + 1)
    store.replay_dead([a], now=t0 + 2)
    die(store, t0 + 3)  # counted once more, not twice
    assert consistent(store, a, b, c) == ["dead", "blocked", "blocked"]
    assert store.get_job(b)["holders"] == 1
    store.replay_dead([a], now=t0 + 4)
    run_to_end(store, t0 + 5)
    assert consistent(store, b, c) == ["queued", "waiting"]


def test_a_job_held_by_two_dead_dependencies_waits_for_both_replays(
    store: Store, t0: float
) -> None:
    a1 = enqueue_one(store, t0, task="a1")
    a2 = enqueue_one(store, t0, task="a2", delay=10)
    ok = enqueue_one(store, t0, task="ok", delay=20)
    d = enqueue_one(store, t0, task="d", depends_on=(a1, a2, ok))
    die(store, t0 + 1)
    die(store, t0 + 11)
    assert consistent(store, d) == ["blocked"] and store.get_job(d)["holders"] == 2
    assert holder(store, d) == min(a1, a2)
    run_to_end(store, t0 + 21)  # another dependency succeeds: counted, still blocked
    assert consistent(store, d) == ["blocked"] and store.get_job(d)["waiting_for"] == 0
    store.replay_dead([a1], now=t0 + 22)
    assert consistent(store, d) == ["blocked"] and holder(store, d) == a2
    store.replay_dead([a2], now=t0 + 23)
    assert consistent(store, d) == ["waiting"]
    run_to_end(store, t0 + 24)
    assert consistent(store, d) == ["waiting"]
    run_to_end(store, t0 + 25)
    assert consistent(store, d) == ["queued"]


def test_cancelling_a_blocked_job_ends_it_and_releases_what_waits_for_it(
    store: Store, t0: float
) -> None:
    a, b, c = chain(store, t0, 3)
    anyway = enqueue_one(store, t0, task="anyway", depends_on=(b,), **RUNS)
    die(store, t0 + 1)
    assert consistent(store, b, c, anyway) == ["blocked", "blocked", "blocked"]
    assert store.cancel_job(b, now=t0 + 2, by="op") is CancelResult.CANCELLED
    assert consistent(store, b, c, anyway) == ["cancelled", "cancelled", "queued"]
    assert store.get_job(c)["error"] == f"dependency_failed: job {b} ended cancelled"
    assert store.get_job(anyway)["holders"] == 0
    store.replay_dead([a], now=t0 + 3)  # too late for them: nothing moves
    run_to_end(store, t0 + 4)
    assert consistent(store, b, c) == ["cancelled", "cancelled"]
    assert store.cancel_job(c, now=t0 + 5) is CancelResult.ALREADY_FINISHED


def test_a_cancelled_dependency_still_cancels(store: Store, t0: float) -> None:
    """A cancel is final (nothing replays it): what blocks on failure is cancelled."""
    a, b, c = chain(store, t0, 3)
    store.cancel_job(a, now=t0 + 1)
    assert consistent(store, b, c) == ["cancelled", "cancelled"]
    assert store.get_job(b)["error"] == f"dependency_failed: job {a} ended cancelled"


def test_the_other_policies_are_kept(store: Store, t0: float) -> None:
    a = enqueue_one(store, t0, task="a")
    cancels = enqueue_one(store, t0, depends_on=(a,), **CANCELS)
    runs = enqueue_one(store, t0, depends_on=(a,), **RUNS)
    blocks = enqueue_one(store, t0, depends_on=(a,))
    assert store.get_job(blocks)["on_dependency_failure"] == "block"
    die(store, t0 + 1)
    assert consistent(store, cancels, runs, blocks) == ["cancelled", "queued", "blocked"]
    assert store.get_job(cancels)["error"] == f"dependency_failed: job {a} ended dead"
    store.replay_dead([a], now=t0 + 2)  # only the blocked one waits again
    assert consistent(store, cancels, runs, blocks) == ["cancelled", "queued", "waiting"]


def test_a_job_enqueued_after_its_dependency_died_is_blocked(store: Store, t0: float) -> None:
    a, b = chain(store, t0, 2)
    die(store, t0 + 1)
    late = enqueue_one(store, t0 + 2, task="late", depends_on=(a,))
    on_blocked = enqueue_one(store, t0 + 2, task="on_blocked", depends_on=(b,))
    first_id, then_id = new_ids(2)
    first = new_job("first", id=first_id, depends_on=(a,))
    then = new_job("then", id=then_id, depends_on=(first_id,))
    store.enqueue([first, then], now=t0 + 2)  # a pipeline after it: blocked all along
    ids = (late, on_blocked, first_id, then_id)
    assert consistent(store, *ids) == ["blocked"] * 4
    assert {holder(store, job_id) for job_id in ids} == {a}
    assert store.get_job(b)["holders"] == 1  # the earlier dependent is not counted again
    store.replay_dead([a], now=t0 + 3)
    assert consistent(store, b, *ids) == ["waiting"] * 5
    run_to_end(store, t0 + 4)
    assert consistent(store, b, late, first_id) == ["queued"] * 3


def test_a_long_chain_blocks_and_unblocks_down_every_level(store: Store, t0: float) -> None:
    ids = chain(store, t0, 6)
    other = enqueue_one(store, t0, task="other", delay=50)
    joined = enqueue_one(store, t0, task="joined", depends_on=(ids[-1], other))
    die(store, t0 + 1)
    assert consistent(store, *ids[1:], joined) == ["blocked"] * 6
    run_to_end(store, t0 + 51)  # its other dependency: counted, still blocked
    assert consistent(store, joined) == ["blocked"]
    store.replay_dead([ids[0]], now=t0 + 52)
    assert consistent(store, *ids[1:], joined) == ["waiting"] * 6
    for i, step in enumerate(ids):
        assert run_to_end(store, t0 + 53 + 2 * i) == step
    assert consistent(store, joined) == ["queued"]


def test_a_group_callback_is_blocked_by_any_member(store: Store, t0: float) -> None:
    members = [enqueue_one(store, t0, task=f"m{i}", delay=i) for i in range(4)]
    callback = enqueue_one(store, t0, task="cb", depends_on=tuple(members), dependency_results=True)
    run_to_end(store, t0 + 1)
    die(store, t0 + 2)
    run_to_end(store, t0 + 3)
    die(store, t0 + 4)
    assert consistent(store, callback) == ["blocked"]
    assert store.get_job(callback)["holders"] == 2
    store.replay_dead(now=t0 + 5)  # every dead job at once
    assert consistent(store, callback) == ["waiting"]
    run_to_end(store, t0 + 6)
    run_to_end(store, t0 + 7)
    assert consistent(store, callback) == ["queued"]


def test_purging_a_dead_job_cancels_what_it_blocked(store: Store, t0: float) -> None:
    a, b, c = chain(store, t0, 3)
    kept = enqueue_one(store, t0, task="kept", delay=5)
    dead_too = enqueue_one(store, t0, task="dead_too", depends_on=(kept,))
    die(store, t0 + 1)
    die(store, t0 + 6)
    assert set(store.purge_dead_ids(now=t0 + 7, dry_run=True)) == {a, kept}
    assert consistent(store, b, c, dead_too) == ["blocked"] * 3  # a dry run changes nothing
    assert store.purge_dead(older_than=3, now=t0 + 7) == 1  # only a died long enough ago
    assert consistent(store, b, c, dead_too) == ["cancelled", "cancelled", "blocked"]
    assert store.get_job(b)["error"] == f"dependency_failed: job {a} ended dead and was purged"
    assert store.get_job(c)["error"] == f"dependency_failed: job {b} ended cancelled"


def test_the_blocked_retention_cancels_what_a_dead_job_held_too_long(
    store: Store, t0: float
) -> None:
    a, b, c = chain(store, t0, 3)
    die(store, t0 + 1)
    assert store.prune(1e6, 1e6, now=t0 + 50, blocked_retention=100).blocked == 0
    assert store.prune(1e6, 1e6, now=t0 + 200).blocked == 0  # no retention: kept
    assert consistent(store, b, c) == ["blocked", "blocked"]
    counts = store.prune(1e6, 1e6, now=t0 + 200, blocked_retention=100)
    assert counts.blocked == 1  # b; c was cancelled down from it
    assert consistent(store, a, b, c) == ["dead", "cancelled", "cancelled"]
    assert store.get_job(b)["error"] == (
        f"dependency_failed: job {a} ended dead and was not replayed within 100 s"
    )
    assert store.replay_dead([a], now=t0 + 201) == [a]  # the dead job itself stays
    assert consistent(store, b, c) == ["cancelled", "cancelled"]


def test_a_waiter_is_told_when_the_job_it_awaits_is_blocked(store: Store, t0: float) -> None:
    """A job blocked two levels down from the death is announced to its waiter (where
    the database can notify), who then reads the dead job that holds it."""
    heard: list[str] = []
    announced = threading.Event()

    def on_end(job_id: str | None) -> None:
        if job_id is not None:
            heard.append(job_id)
            announced.set()

    a, _, c = chain(store, t0, 3)
    assert not store.await_end(c).ended
    handle = store.link.listen_ends(on_end)
    try:
        die(store, t0 + 1)
        if handle is not None:
            assert announced.wait(10), "no notification within 10 s"
            assert heard == [c]  # b is blocked too, but nobody awaits it
    finally:
        if handle is not None:
            handle.close()
    end = store.job_end(c)
    assert end.ended and end.held_by is not None and end.held_by.job_id == a


def test_a_replay_that_waits_for_another_death_keeps_the_job_blocked(
    store: Store, t0: float, backend: str, store_url: str
) -> None:
    """PostgreSQL's race: a replay of one dead dependency waits for the lock of their
    common dependent, held by the transaction that ends another dependency dead; its
    statement's snapshot is older than that end. The dependent must stay blocked by the
    one still dead: its holders move by differences on the row as it stands once
    locked, never from another job's status read in that older snapshot."""
    if backend == "sqlite":
        pytest.skip("SQLite has one writer: a replay and an end never overlap")
    a1 = enqueue_one(store, t0, task="a1")
    a2 = enqueue_one(store, t0, task="a2", delay=10)
    d = enqueue_one(store, t0, task="d", depends_on=(a1, a2))
    die(store, t0 + 1)
    job = claim_one(store, "w1", t0 + 11)
    replayed: list[str] = []
    replayer = threading.Thread(target=lambda: replayed.extend(store.replay_dead([a1])))
    with store._write() as conn:  # type: ignore[attr-defined]
        doc = documents.attempt_finish_doc(failed(job, Outcome.FAILED, "boom", permanent=True))
        assert store._apply_finishes(conn, [doc], None) == {job.lease}  # type: ignore[attr-defined]
        replayer.start()
        with psycopg.connect(parse_url(store_url)[0]) as watcher:
            _wait_until_blocked_by(watcher, conn)
    replayer.join(30)
    assert not replayer.is_alive() and replayed == [a1]
    assert consistent(store, a1, a2, d) == ["queued", "dead", "blocked"]
    assert holder(store, d) == a2
    run_to_end(store, t0 + 12)
    store.replay_dead([a2], now=t0 + 13)
    run_to_end(store, t0 + 14)
    assert consistent(store, d) == ["queued"]


DEPENDENT_FATE = {
    # (how the dependency ended, the dependent's on_dependency_failure): (its status, and
    # after the dependency, if dead, is replayed)
    ("succeeded", "block"): ("queued", "queued"),
    ("succeeded", "cancel"): ("queued", "queued"),
    ("succeeded", "run"): ("queued", "queued"),
    ("dead", "block"): ("blocked", "waiting"),
    ("dead", "cancel"): ("cancelled", "cancelled"),
    ("dead", "run"): ("queued", "queued"),
    ("cancelled", "block"): ("cancelled", "cancelled"),
    ("cancelled", "cancel"): ("cancelled", "cancelled"),
    ("cancelled", "run"): ("queued", "queued"),
    ("blocked", "block"): ("blocked", "waiting"),
    ("blocked", "cancel"): ("blocked", "waiting"),
    ("blocked", "run"): ("blocked", "waiting"),
}
"""docs/design/pipelines.md's table of what a dependency's end does to a job that waits for it."""


@pytest.mark.parametrize(("ended", "policy"), sorted(DEPENDENT_FATE))
def test_the_dependents_fate_table(store: Store, t0: float, ended: str, policy: str) -> None:
    root = enqueue_one(store, t0, task="root")
    dependency = root
    if ended == "blocked":  # a dependency that waits for a dead job itself
        dependency = enqueue_one(store, t0, task="dependency", depends_on=(root,))
    job = enqueue_one(store, t0, task="job", depends_on=(dependency,), on_dependency_failure=policy)
    if ended == "cancelled":
        store.cancel_job(root, now=t0 + 1)
    else:
        run_to_end(store, t0 + 1, ok=ended == "succeeded")
    now, replayed = DEPENDENT_FATE[ended, policy]
    assert consistent(store, job) == [now]
    if store.get_job(root)["status"] == "dead":
        store.replay_dead([root], now=t0 + 2)
    assert consistent(store, job) == [replayed]


def _indexes(store: Store) -> set[str]:
    """The names of the jobs table's indexes, on SQLite (whose migration rebuilds it)."""
    with store._write() as conn:  # type: ignore[attr-defined]
        rows = conn.execute(
            "SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'heartq_jobs'"
        ).fetchall()
    return {row[0] for row in rows}


def test_an_upgrade_keeps_waiting_jobs_with_their_policy(
    fresh_url: Callable[[], str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A database of schema v21 with a job waiting under the policy then the default
    (`cancel`): after migration 22 it keeps it, while a job enqueued since blocks; on
    SQLite, whose jobs table is rebuilt for its CHECK, every index and the executions
    view are as they were, and claims, finishes and reads work."""
    url = fresh_url()
    sqlite = url.startswith("sqlite")
    with SteeredMigrations(url, monkeypatch).store_before(22) as old:
        t0 = float(int(old.clock()))
        dependency = insert_version_1_job(old, t0)
        (waiting,) = new_ids(1)
        jobs, edges = (
            ("heartq_jobs", "heartq_job_dependencies") if sqlite else ("jobs", "job_dependencies")
        )
        t = repr(t0) if sqlite else f"to_timestamp({t0!r})"
        with old._write() as conn:  # type: ignore[attr-defined]
            conn.execute(
                f"INSERT INTO {jobs} (id, task, queue, args, status, run_at, max_retries, "
                "retry_backoff, retry_backoff_max, created_at, updated_at, waiting_for, "
                f"on_dependency_failure) VALUES ('{waiting}', 'task', 'default', '{{}}', "
                f"'waiting', {t}, 3, 5, 3600, {t}, {t}, 1, 'cancel')"
            )
            conn.execute(
                f"INSERT INTO {edges} (job_id, depends_on, position) "
                f"VALUES ('{waiting}', '{dependency}', 0)"
            )
            conn.execute(f"UPDATE {jobs} SET has_dependents = true WHERE id = '{dependency}'")
        before = _indexes(old) if sqlite else set()
    with opened(url) as new:
        assert new.link.migrate() >= 22
        if sqlite:  # as they were, but for those later migrations changed (0025, 0035, 0043)
            assert _indexes(new) == before - {"heartq_jobs_lease_idx"} | {
                "heartq_jobs_detached_idx",
                "heartq_jobs_fair_claim_idx",
                "heartq_jobs_fair_due_idx",
            }
        assert consistent(new, waiting) == ["waiting"]
        since = enqueue_one(new, t0, depends_on=(dependency,))
        assert die(new, t0 + 1) == dependency
        assert new.get_job(dependency)["executions"][0]["outcome"] == "failed"
        assert consistent(new, waiting, since) == ["cancelled", "blocked"]
        new.replay_dead([dependency], now=t0 + 2)
        run_to_end(new, t0 + 3)
        assert consistent(new, since) == ["queued"]
