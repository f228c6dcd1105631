"""SQLite's claim by fair shares reads a bounded part of its indexes: each queue's line
(`heartq_jobs_fair_claim_idx`, by tag) and its jobs without a key only `limit` entries
deep, and the untagged jobs at most `TAGGED_AT_A_CLAIM`. What it claims must be what the
rule gives over every queued job read in full by a plain query: the due untagged ones
tagged (oldest first, each key from its finish or its tier's clock, a step of one over
its weight each), the jobs without a key one share of each tier, all in the order of
priority, then tag less the tier's clock, then id (and where no job with a key waits in
the queues claimed, the jobs without one in order: priority, then age, then id, as the
claim without turns takes them). Before each claim of random mixes
of keys, weights, priorities, delayed jobs, jobs without a key, two queues and claims
of any size; by a worker of both queues (the claim chooses, then claims) and by one of
one queue (which claims its line in one statement while no job without a key is
queued there)."""

from __future__ import annotations

import random
import sqlite3
import time
from pathlib import Path

import pytest

from heartq import policy
from heartq.model import Finish, Outcome, TaskPolicy
from heartq.store.sql import inspection
from heartq.store.sql.fair import TAGGED_AT_A_CLAIM, UNKEYED
from heartq.store.sqlite import SQLiteStore
from tests.soak.chaos_fair import COUNTED, IN_LINE
from tests.statement_trace import trace
from tests.support import opened

from .support import SteeredMigrations, new_ids, new_job, register

T0 = 1_000_000.0
QUEUES = ["a", "b"]


def _expected(path: Path, limit: int, queues: list[str]) -> list[str]:
    """The ids the rule gives in `queues`, every queued job read apart."""
    with sqlite3.connect(path) as conn:
        clocks = {(q, p): c for q, p, c in conn.execute("SELECT * FROM heartq_fair_clocks")}
        finishes = {
            (q, p, k): f
            for q, p, k, f in conn.execute(
                "SELECT queue, priority, fair_key, finish FROM heartq_fair_finishes"
            )
        }
        turns = "status = 'queued' AND concurrency_key IS NULL AND rate_key IS NULL"
        untagged = conn.execute(
            f"SELECT queue, priority, fair_key, fair_weight, id FROM heartq_jobs WHERE {turns}"
            " AND fair_key IS NOT NULL AND fair_tag IS NULL AND run_at <= ?"
            " ORDER BY run_at, id LIMIT ?",
            (T0, TAGGED_AT_A_CLAIM),
        ).fetchall()
        tagged = conn.execute(
            f"SELECT queue, priority, fair_tag, id FROM heartq_jobs WHERE {turns}"
            " AND fair_key IS NOT NULL AND fair_tag IS NOT NULL"
        ).fetchall()
        plain = conn.execute(
            f"SELECT queue, priority, id, run_at FROM heartq_jobs WHERE {turns}"
            " AND fair_key IS NULL AND run_at <= ? ORDER BY run_at, id",
            (T0,),
        ).fetchall()
    if not any(q in queues for q, *_ in tagged + untagged):  # no turns to take: in order
        in_order = sorted((p for p in plain if p[0] in queues), key=lambda p: (-p[1], p[3], p[2]))
        return [job_id for _, _, job_id, _ in in_order[:limit]]
    candidates = [(q, p, tag, job_id) for q, p, tag, job_id in tagged]
    moved: dict[tuple[str, int, str], float] = {}
    for queue, priority, key, weight, job_id in untagged:
        at = (queue, priority, key)
        start = moved.get(at, max(clocks.get((queue, priority), 0.0), finishes.get(at, 0.0)))
        candidates.append((queue, priority, start, job_id))
        moved[at] = start + 1.0 / (weight or 1.0)
    shares: dict[tuple[str, int], int] = {}
    for queue, priority, job_id, _ in plain:
        n = shares[(queue, priority)] = shares.get((queue, priority), 0) + 1
        start = max(clocks.get((queue, priority), 0.0),
                    finishes.get((queue, priority, UNKEYED), 0.0))  # fmt: skip
        candidates.append((queue, priority, start + n - 1, job_id))
    candidates = [c for c in candidates if c[0] in queues]
    candidates.sort(key=lambda c: (-c[1], c[2] - clocks.get((c[0], c[1]), 0.0), c[3]))
    return [c[3] for c in candidates[:limit]]


def _counted(path: Path) -> dict[tuple[str, int, str], int]:
    """Each key's count of its jobs in line, as its row of finishes keeps it."""
    return _by_key(path, COUNTED)


def _in_line(path: Path) -> dict[tuple[str, int, str], int]:
    """Each key's jobs in line (queued and tagged), counted from the jobs."""
    return _by_key(path, IN_LINE)


def _by_key(path: Path, statement: str) -> dict[tuple[str, int, str], int]:
    with sqlite3.connect(path) as conn:
        return {(q, p, k): n for q, p, k, n in conn.execute(statement).fetchall()}


@pytest.mark.parametrize("claimed", [QUEUES, QUEUES[:1]], ids=["two-queues", "one-queue"])
def test_a_claim_takes_what_the_rule_gives_over_every_job(
    tmp_path: Path, claimed: list[str]
) -> None:
    rng = random.Random(7)
    for scenario in range(16):
        path = tmp_path / f"fair{scenario}.db"
        store = SQLiteStore(f"sqlite:///{path}")
        try:
            store.link.migrate()
            register(store, "w1", T0, queues=tuple(QUEUES))
            for n in range(rng.randint(1, 12)):
                weight = rng.choice([None, 0.5, 1.0, 2.0, 3.0])
                late = rng.random() < 0.1
                jobs = [
                    new_job(
                        fair_key=f"k{n}",
                        fair_weight=weight,
                        priority=rng.choice([0, 0, 0, 0, 5]),
                        run_at=T0 + 100 if late else rng.choice([None, T0 - rng.randint(1, 50)]),
                        queue=rng.choice(QUEUES),
                    )
                    for _ in range(rng.choice([1, 2, 5, 40]))
                ]
                store.enqueue(jobs, now=T0 - 100 + n)
            unkeyed = [new_job(queue=rng.choice(QUEUES)) for _ in range(rng.choice([0, 0, 3, 30]))]
            if unkeyed:
                store.enqueue(unkeyed, now=T0 - 100)
            for _ in range(10):
                limit = rng.choice([1, 2, 3, 7, 20])
                expected = _expected(path, limit, claimed)
                taken = store.claim("w1", claimed, limit, 30.0, now=T0)
                # the same jobs (a claim hands them over in priority order, then oldest)
                assert sorted(job.id for job in taken) == sorted(expected), (scenario, limit)
                assert _counted(path) == _in_line(path), scenario
        finally:
            store.link.close()


def test_an_upgrade_puts_the_queued_jobs_in_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Schema v43 tags the jobs that take turns already queued and due, each key's from 0
    in its order (a step of one over its weight): a flood of one key queued before the
    upgrade does not hold the others back after it. One due later is left to the claim
    that finds it due."""
    url = f"sqlite:///{tmp_path / 'old.db'}"
    now = time.time()  # the migration judges what is due by the wall clock
    rows = [(f"flood-{n:02d}", "flood", 1.0, now - 100 + n) for n in range(30)]
    rows += [(f"{k}-{n}", k, 2.0 if k == "b" else None, now - 50 + n)
             for k in ("b", "c") for n in range(3)]  # fmt: skip
    rows.append(("later", "d", None, now + 3600))
    # each name a job id, in the names' order (the claim breaks a tie by id)
    ids = dict(zip(sorted(r[0] for r in rows), new_ids(len(rows)), strict=True))
    named = {job_id: name for name, job_id in ids.items()}
    with (
        SteeredMigrations(url, monkeypatch).store_before(43) as old,
        old._write() as conn,  # type: ignore[attr-defined]
    ):
        conn.executemany(
            "INSERT INTO heartq_jobs (id, task, queue, args, status, run_at, max_retries,"
            " retry_backoff, retry_backoff_max, created_at, updated_at, fair_key,"
            " fair_weight) VALUES (?, 't', 'default', '{}', 'queued', ?, 3, 5, 3600, ?, ?,"
            " ?, ?)",
            [(ids[i], run_at, run_at, run_at, key, w) for i, key, w, run_at in rows],
        )
    with opened(url) as new:
        assert new.link.migrate() >= 43
        register(new, "w1", now)
        with sqlite3.connect(tmp_path / "old.db") as conn:
            tags = {named[i]: t for i, t in conn.execute("SELECT id, fair_tag FROM heartq_jobs")}
            finishes = {
                k: (f, n)
                for k, f, n in conn.execute(
                    "SELECT fair_key, finish, waiting FROM heartq_fair_finishes"
                )
            }
        assert [tags[f"flood-{n:02d}"] for n in (0, 1, 29)] == [0.0, 1.0, 29.0]
        assert [tags[f"b-{n}"] for n in range(3)] == [0.0, 0.5, 1.0]
        assert tags["later"] is None
        assert finishes == {"flood": (30.0, 30), "b": (1.5, 3), "c": (3.0, 3)}
        claimed = new.claim("w1", ["default"], 6, 30.0, now=now)
        # tags 0: b-0, c-0, flood-00; 0.5: b-1; 1: b-2, c-1 (then flood-01, by id)
        assert sorted(named[job.id] for job in claimed) == [
            "b-0", "b-1", "b-2", "c-0", "c-1", "flood-00"
        ]  # fmt: skip
        later = new.claim("w1", ["default"], 30, 30.0, now=now + 3601)
        assert ids["later"] in {job.id for job in later}  # tagged once due, at the clock


@pytest.mark.parametrize("end", ["released", "retried"])
def test_a_job_queued_again_takes_its_place_behind_its_keys_line(
    tmp_path: Path, end: str
) -> None:
    """An attempt's end clears its job's tag (kept while it ran): a job given back (here
    released, or failed and retried at once; a snooze and a reclaim end as a retry does)
    is tagged by the claim that finds it due, at its key's finish, behind the key's jobs
    already in line, not at its old place ahead of every key."""
    store = SQLiteStore(f"sqlite:///{tmp_path / 'again.db'}")
    try:
        register(store, "w1", T0)
        store.enqueue([new_job(fair_key="a") for _ in range(5)], now=T0 - 10)
        store.enqueue([new_job(fair_key="b") for _ in range(5)], now=T0 - 9)
        (first,) = store.claim("w1", ["default"], 1, 30.0, now=T0)
        assert store.get_job(first.id)["fair_key"] == "a"
        assert _tag(tmp_path / "again.db", first.id) == 0.0  # its place, kept while it runs
        if end == "released":
            assert store.release([first.lease], now=T0 + 1) == []
        else:
            again = Finish(first.lease, Outcome.FAILED, "queued", error="boom", retry_delay=0.0)
            assert store.finish([again], now=T0 + 1) == []
        assert _tag(tmp_path / "again.db", first.id) is None  # cleared by its end
        taken = [job.id for job in store.claim("w1", ["default"], 9, 30.0, now=T0 + 2)]
        assert first.id not in taken and len(taken) == 9  # the others' turns first
        assert [job.id for job in store.claim("w1", ["default"], 1, 30.0, now=T0 + 3)] == [first.id]
    finally:
        store.link.close()


BEGIN_COMMIT = ("BEGIN", "COMMIT")


def _named(sql: str) -> str:
    """Which statement of a claim by turns `sql` is (as traced: its values written in)."""
    text = " ".join(sql.split())
    if text.startswith("UPDATE heartq_jobs ") and "INDEXED BY heartq_jobs_fair_claim_idx" in text:
        return "line"
    if text.startswith("INSERT INTO heartq_fair_clocks"):
        return "clocks"
    if text.startswith("UPDATE heartq_fair_finishes"):
        return "left"
    if text.startswith("WITH k AS MATERIALIZED"):
        return "asked"  # KEYED_QUEUED
    return text[:40]


def test_a_queue_whose_jobs_all_take_turns_is_claimed_without_asking_first(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Once a claim of one queue found its jobs all in line (tagged, with a fairness key,
    none to tag, none without a key: `KEYED_QUEUED`'s `line`), the next claims take the
    line first (`CLAIM_TURNS_ONE_QUEUE`, then what it moved: `STORE_CLOCKS`,
    `LEFT_LINE`) without asking what waits: a statement fewer inside the write lock. A
    job without a key queued since makes the line statement take nothing; the claim then
    asks, gives that job its share, and the claims after it no longer try the line."""
    store = SQLiteStore(f"sqlite:///{tmp_path / 'line.db'}")
    sent: list[str] = []
    try:
        register(store, "w1", T0)
        store.enqueue([new_job(fair_key=f"k{n % 3}") for n in range(30)], now=T0 - 10)
        trace(store, sent.append, monkeypatch)

        def claim(limit: int) -> tuple[int, list[str]]:
            """Jobs claimed, and the statements of the claim (not BEGIN and COMMIT)."""
            sent.clear()
            taken = store.claim("w1", ["default"], limit, 30.0, now=T0)
            return len(taken), [_named(s) for s in sent if s.split()[0] not in BEGIN_COMMIT]

        assert claim(3)[0] == 3  # finds the keys waiting (KEYED_QUEUED), takes turns
        assert claim(3) == (3, ["line", "clocks", "left"])
        assert claim(3) == (3, ["line", "clocks", "left"])
        unkeyed = store.enqueue([new_job() for _ in range(5)], now=T0 - 1)
        taken, statements = claim(1)
        assert taken == 1 and statements[:2] == ["line", "asked"], statements
        taken, statements = claim(1)  # the hint off while jobs without a key wait
        assert taken == 1 and statements[0] == "asked", statements
        assert claim(30)[0] == 30 - 9 + 5 - 2  # every job left, the five without a key too
        assert not set(unkeyed) - {row["id"] for row in store.list_jobs(status="running")}
    finally:
        store.link.close()


def test_what_leaves_the_line_unclaimed_is_counted_out(tmp_path: Path) -> None:
    """Each key's count of its jobs in line (its row of `heartq_fair_finishes`) follows
    its jobs out of line without a claim too: a cancel, and a re-route to another queue
    or priority (which clears the job's tag: its new tier tags it)."""
    path = tmp_path / "out.db"
    store = SQLiteStore(f"sqlite:///{path}")
    try:
        register(store, "w1", T0)
        follows = policy.resolve(policy.defaults("crunch"), None, None, None)
        moved = store.enqueue(
            [new_job(task="crunch", fair_key="a", **follows) for _ in range(4)], now=T0 - 10
        )
        kept = store.enqueue([new_job(fair_key="a") for _ in range(3)], now=T0 - 9)
        assert _counted(path) == _in_line(path) == {("default", 0, "a"): 7}
        store.cancel_job(kept[0], now=T0 - 8)
        assert _counted(path) == _in_line(path) == {("default", 0, "a"): 6}
        cpu = TaskPolicy("crunch", "cpu", 2, 1, 0.5, 10.0)
        store.declare_tasks([cpu], "w1", now=T0 - 7)
        assert store.reroute_jobs(["crunch"], now=T0 - 7) == len(moved)
        assert _counted(path) == _in_line(path) == {("default", 0, "a"): 2}
        taken = store.claim("w1", ["cpu"], 10, 30.0, now=T0)  # tagged in its new tier
        assert sorted(job.id for job in taken) == sorted(moved)
        assert _counted(path) == _in_line(path) == {("default", 0, "a"): 2}
    finally:
        store.link.close()


def test_fair_usage_reads_each_priority_s_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`fair_usage` reads each tier's line (a queue and a priority) apart, so a long line
    at a high priority hides no key below it; a count read from a line read only in part
    says it may be short (`more`), and so does a key with only running jobs there."""
    monkeypatch.setattr(inspection, "FAIR_LINE_READ", 5)
    store = SQLiteStore(f"sqlite:///{tmp_path / 'usage.db'}")
    try:
        register(store, "w1", T0)
        store.enqueue([new_job(fair_key="r") for _ in range(5)], now=T0 - 10)
        assert len(store.claim("w1", ["default"], 1, 30.0, now=T0)) == 1  # r: one running
        store.enqueue([new_job(fair_key="h", priority=5) for _ in range(6)], now=T0 - 9)
        store.enqueue([new_job(fair_key="l") for _ in range(2)], now=T0 - 8)
        # the jobs not tagged yet (delayed) are one line a queue, whatever their priority
        for priority in (0, 5):
            store.enqueue(
                [new_job(queue="other", fair_key="x", priority=priority, run_at=T0 + 60)
                 for _ in range(3)],
                now=T0 - 7,
            )  # fmt: skip
        usage = {u["key"]: (u["queued"], u["running"], u["more"]) for u in store.fair_usage()}
        # h's line (priority 5) was cut at 5; priority 0's line (r 4, l 2) too; x's at 5
        assert usage == {
            "h": (5, 0, True), "r": (3, 1, True), "l": (2, 0, True), "x": (5, 0, True)
        }, usage  # fmt: skip
    finally:
        store.link.close()


def test_a_claim_tags_at_most_its_bound_of_jobs_come_due(tmp_path: Path) -> None:
    """Jobs that take turns and fall due together (delayed, retried) are tagged by the
    claims that find them due, oldest first, at most `TAGGED_AT_A_CLAIM` a claim: a
    flood of them is tagged over a few claims, not in one held write lock."""
    path = tmp_path / "due.db"
    store = SQLiteStore(f"sqlite:///{path}")
    try:
        register(store, "w1", T0)
        flood = TAGGED_AT_A_CLAIM + TAGGED_AT_A_CLAIM // 2
        store.enqueue([new_job(fair_key="a", run_at=T0 - 1) for _ in range(flood)], now=T0 - 100)
        assert _in_line(path) == {}  # delayed at their enqueue: not tagged
        assert len(store.claim("w1", ["default"], 1, 30.0, now=T0)) == 1
        assert _counted(path) == _in_line(path) == {("default", 0, "a"): TAGGED_AT_A_CLAIM - 1}
        assert len(store.claim("w1", ["default"], 1, 30.0, now=T0)) == 1
        assert _counted(path) == _in_line(path) == {("default", 0, "a"): flood - 2}
    finally:
        store.link.close()


def _tag(path: Path, job_id: str) -> float | None:
    with sqlite3.connect(path) as conn:
        (tag,) = conn.execute("SELECT fair_tag FROM heartq_jobs WHERE id = ?", (job_id,))
    return None if tag[0] is None else float(tag[0])
