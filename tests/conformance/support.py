"""Helpers shared by the conformance tests: backend-neutral, through `Store` only (but
`keyed_claim_held_open`, a PostgreSQL claimer caught between its statements)."""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import Any

import psycopg
import pytest
from psycopg.sql import SQL, Identifier

from heartq.config import DEFAULT_MAX_PAYLOAD_BYTES
from heartq.ids import new_job_id
from heartq.model import ClaimedJob, NewJob, WorkerInfo
from heartq.payload import encode_args
from heartq.store import Store, records
from heartq.store.postgres.connection import parse_url
from heartq.store.sql.keyed import claim_keyed
from tests.support import opened

LEASE = 30.0
CRASH_KEYS = frozenset({"worker_id", "last_heartbeat_at", "detected_at", "detected_by", "reason"})
JOB_FIELDS = frozenset(
    {
        "id",
        "task",
        "queue",
        "status",
        "args",
        "priority",
        "attempts",
        "max_retries",
        "run_at",
        "created_at",
        "started_at",
        "finished_at",
        "worker_id",
        "execution_id",
        "lease_expires_at",
        "heartbeat_at",
        "progress",
        "checkpoint",
        "result",
        "error",
        "dead_reason",
    }
)
EXECUTION_FIELDS = frozenset(
    {"execution_id", "worker_id", "started_at", "ended_at", "outcome", "error", "crash"}
)
WORKER_FIELDS = frozenset(
    {
        "id",
        "name",
        "hostname",
        "pid",
        "status",
        "queues",
        "concurrency",
        "started_at",
        "last_heartbeat_at",
        "running",
        "claimed_ahead",
        "abandoned",
    }
)
ISO_UTC = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|\+00:00)$")


def new_job(task: str = "task", args: dict[str, Any] | None = None, **options: Any) -> NewJob:
    """A `NewJob` whose arguments went through the public payload encoder."""
    return NewJob(
        task=task,
        args_json=encode_args(args or {}, limit=DEFAULT_MAX_PAYLOAD_BYTES),
        **options,
    )


def new_ids(count: int) -> list[str]:
    """`count` job ids for a test to plant (a caller's own `NewJob.id`, a row written as
    an older schema did, a job that was never stored): UUIDs as heartq makes them
    (`heartq.ids.new_job_id`; a store refuses or does not find any other text), made in
    sequence, so each sorts after the one before, as text and as PostgreSQL's `uuid`."""
    return [new_job_id() for _ in range(count)]


def enqueue_one(store: Store, now: float, **options: Any) -> str:
    (job_id,) = store.enqueue([new_job(**options)], now=now)
    return job_id


def claim_one(
    store: Store,
    worker_id: str,
    now: float,
    *,
    lease: float = LEASE,
    queues: tuple[str, ...] = ("default",),
) -> ClaimedJob:
    """Claim exactly one job (the test set things up so that one is runnable)."""
    claimed = store.claim(worker_id, list(queues), 1, lease, now=now)
    assert len(claimed) == 1, claimed
    return claimed[0]


@contextmanager
def keyed_claim_held_open(
    store: Store, worker_id: str, queues: list[str], now: float
) -> Iterator[list[Any]]:
    """PostgreSQL: one claimer's keyed claim (`keyed.claim_keyed`: its keys locked, a job
    with a concurrency or a rate key claimed) made in a transaction held open for the block
    and committed at its end. Its rows are what it claimed; another claim made in the block
    sees nothing of it but its keys' locks, as a racing claimer would."""
    dialect: Any = store.dialect  # type: ignore[attr-defined]
    with dialect.write() as conn:
        params = {"worker_id": worker_id, "queues": queues, "limit": 1, "lease": LEASE,
                  "now": now, "ahead": False, "claimed": 0}  # fmt: skip
        rows, _ = claim_keyed(dialect, conn, params)
        yield list(rows)


def needs_liveness_locks(store: Store) -> None:
    """Skip a test of liveness locks on a store whose workers hold none (PostgreSQL behind a
    transaction-mode pooler without a direct URL: `HEARTQ_TEST_BACKENDS=pgbouncer`); what
    such workers get instead is tested in test_lockless.py."""
    if not store.link.holds_liveness_lock:
        pytest.skip("this store's workers hold no liveness lock (test_lockless.py)")


def register(
    store: Store,
    worker_id: str,
    now: float,
    *,
    name: str | None = None,
    queues: tuple[str, ...] = ("default",),
    concurrency: int = 4,
    hostname: str = "test-host",
    pid: int = 4242,
) -> None:
    store.register_worker(
        WorkerInfo(
            id=worker_id,
            hostname=hostname,
            pid=pid,
            queues=queues,
            concurrency=concurrency,
            name=name,
        ),
        now=now,
    )


def epoch(text: str | None) -> float | None:
    """Seconds since the epoch of an ISO-8601 UTC string from the store (None stays None)."""
    if text is None:
        return None
    assert ISO_UTC.match(text), f"not an ISO-8601 UTC time: {text!r}"
    moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    assert moment.utcoffset() is not None and moment.utcoffset().total_seconds() == 0
    return moment.timestamp()


def at(text: str | None, expected: float) -> bool:
    """The ISO time `text` is `expected` (to the millisecond the JSON shape keeps)."""
    value = epoch(text)
    return value is not None and abs(value - expected) < 0.002


def worker(store: Store, worker_id: str) -> dict[str, Any]:
    found = [w for w in store.list_workers(include_all=True) if w["id"] == worker_id]
    assert len(found) == 1, found
    return found[0]


def outcomes_of(job: dict[str, Any]) -> list[str | None]:
    return [e["outcome"] for e in job["executions"]]


def known_bug(request: Any, backend: str, reasons: dict[str, str], *, when: bool = True) -> None:
    """Mark the running test xfail (strict) on the backends of `reasons` that have a
    known bug, so it fails loudly (XPASS) once the bug is fixed."""
    reason = reasons.get(backend)
    if when and reason is not None:
        import pytest

        request.applymarker(pytest.mark.xfail(strict=True, reason=reason))


def insert_version_1_job(store: Store, run_at: float, job_id: str | None = None) -> str:
    """A queued job as version 1 of the schema stores it (today's enqueue writes columns
    that later versions added), its id `job_id` or a new one; returns its id."""
    job_id = job_id or new_job_id()
    sqlite = "sqlite" in store.link.url
    table = "heartq_jobs" if sqlite else "jobs"
    t = repr(run_at) if sqlite else f"to_timestamp({run_at!r})"
    with store._write() as conn:  # type: ignore[attr-defined]
        conn.execute(
            f"INSERT INTO {table} (id, task, queue, args, status, run_at, max_retries, "
            f"retry_backoff, retry_backoff_max, created_at, updated_at) VALUES ('{job_id}', "
            f"'task', 'default', '{{}}', 'queued', {t}, 3, 5, 3600, {t}, {t})"
        )
    return job_id


class SteeredMigrations:
    """The migrations of the store at `url`, and the steering of which of them every store
    this process opens from now on runs: `only(keep)` (a database of an older schema, an
    older heartq), `all()` back to today's. The monkeypatch undoes it at the test's end."""

    def __init__(self, url: str, monkeypatch: pytest.MonkeyPatch) -> None:
        with opened(url) as store:
            self.dialect = type(store.dialect)  # type: ignore[attr-defined]
            self.every = store.dialect.migrations()
        self.url = url
        self._monkeypatch = monkeypatch

    @property
    def newest(self) -> int:
        return self.every[-1][0]

    def only(self, keep: Callable[[int], bool]) -> None:
        kept = [m for m in self.every if keep(m[0])]
        self._monkeypatch.setattr(self.dialect, "migrations", lambda _store: kept)

    def all(self) -> None:
        every = self.every
        self._monkeypatch.setattr(self.dialect, "migrations", lambda _store: every)

    @contextmanager
    def store_before(self, version: int) -> Iterator[Store]:
        """The store at `url` as the heartq before migration `version` left it (every
        migration below it run), for the block to write old rows into; closed after it,
        and from then on every store opened runs all the migrations again. Fails if there
        is no migration `version` (the test would prove nothing)."""
        assert version in {v for v, _ in self.every}, f"no migration {version:04d}"
        older = max(v for v, _ in self.every if v < version)  # a backend may skip numbers
        self.only(lambda v: v <= older)
        try:
            with opened(self.url) as old:
                assert old.link.migrate() == older
                yield old
        finally:
            self.all()


def all_jobs(store: Store) -> dict[str, dict[str, Any]]:
    """Every job with its executions, as `get_job` shows them (`records.job_dict`, but
    its policy, dependencies and holder, which take more statements), in two statements:
    the store's own `LIST_JOBS` (the job rows with their effective lease) and the
    executions view every reader reads. For a test that checks every job after every
    step (`get_job` is 4-6 round trips per job); on PostgreSQL without BEGIN and COMMIT."""
    sqlite = "sqlite" in store.link.url
    dialect = store.dialect  # type: ignore[attr-defined]
    params = {"status": None, "queue": None, "limit": 1_000_000, "ahead": None}
    executions: dict[str, list[Any]] = {}
    with dialect.read() if sqlite else dialect.pool.autocommit() as conn:
        rows = conn.execute(dialect.q.LIST_JOBS, params).fetchall()
        for e in conn.execute(
            f"SELECT * FROM {'heartq_' if sqlite else ''}executions ORDER BY job_id, execution_id"
        ).fetchall():
            executions.setdefault(e["job_id"], []).append(e)
    return {r["id"]: records.job_dict(r, executions.get(r["id"], [])) for r in rows}


@contextmanager
def reader_role(url: str) -> Iterator[tuple[psycopg.Connection[Any], str]]:
    """A login role of its own on the PostgreSQL server of `url` (a reporting role, granted
    what the test grants it) and an autocommit connection of the server's owner to grant
    with; the role dropped, with what it was granted, after the block."""
    conninfo, _schema = parse_url(url)
    role = f"heartq_reader_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(conninfo, autocommit=True) as admin:
        admin.execute(SQL("CREATE ROLE {} LOGIN").format(Identifier(role)))
        try:
            yield admin, role
        finally:
            admin.execute(SQL("DROP OWNED BY {}").format(Identifier(role)))
            admin.execute(SQL("DROP ROLE {}").format(Identifier(role)))
