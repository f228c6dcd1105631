"""One line of schema numbers (docs/UPGRADING.md, "One line of schema numbers"): a number
names the same change on both backends, and a SQLite queue migrated under SQLite's old
numbering is renumbered once, by the upgrade, and carries on.

The old queues are SQL dumps made by the old heartq itself (`old_sqlite/`, `make.py`
says how; `OLD_QUEUES` names the commit of each), so what the test upgrades is what
that code wrote, not what today's files say it wrote."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from contextlib import closing
from importlib import resources
from pathlib import Path
from typing import Any

import pytest

from heartq.errors import ConfigError
from heartq.model import Finish, JobStatus, Lease, NewJob, Outcome
from heartq.store.sql.base import migration_scripts
from heartq.store.sqlite import schema as sqlite_schema
from heartq.store.sqlite.dialect import SQLiteDialect
from tests.conformance import procs
from tests.conftest import only_on
from tests.support import opened

from .old_sqlite.make import IDS
from .support import SteeredMigrations, claim_one, insert_version_1_job, register

OLD_SQLITE_NAMES = {
    1: "initial",
    2: "worker_stale_after",
    3: "hot_path_indexes",
    4: "task_declarations",
    5: "outages",
    6: "unique_and_periodic",
    7: "concurrency_limits",
    8: "worker_abandoned",
    9: "deployment",
    10: "task_parameters",
    11: "job_meta",
    13: "dependencies",
    14: "rate_limits",
    16: "pending_results",
    17: "executions_written_once",
    18: "claimed_ahead",
    20: "retry_rules",
    21: "results_and_pruned_successes",
    22: "blocked",
    23: "succeeded_attempt_on_its_job",
    24: "worker_lease",
    29: "lost_results",
}
"""SQLite's migrations under the old numbering, as main had them (`git log --
src/heartq/store/sqlite/migrations`): each one's new number is that of the file of its
name today."""

OLD_QUEUES = {16: "d4ba52e", 23: "db41a4b", 24: "82dc953", 29: "45376e9"}
"""The old queues kept (`old_sqlite/vN.sql`) and the commit of main whose heartq made each:
the last at that version."""

JOBS = {IDS[what]: what for what in ("succeeded", "dead", "running", "waiting", "later", "queued")}
"""The old queues' jobs (their ids, make.py's `IDS`), each by what it is."""
KEPT_COLUMNS = "id, task, queue, args, priority, status, run_at, attempts, result, error"
HERE = Path(__file__).parent


def _files(backend: str) -> dict[int, str]:
    """Each migration's number and name (`NNNN_name.sql`) of a backend."""
    folder = resources.files(f"heartq.store.{backend}") / "migrations"
    found = {}
    for entry in folder.iterdir():
        number, _, rest = entry.name.partition("_")
        if entry.name.endswith(".sql"):
            found[int(number)] = rest.removesuffix(".sql")
    return found


NEWEST = max(_files("sqlite"))
HELD: frozenset[int] = frozenset()
"""Numbers held for a change on its way from another branch, whose later neighbour came
first: the line has a gap there until it lands (a database that took the later one
still runs it then: `missing_migrations`). None now."""
NUMBERS = sorted(_files("sqlite"))
"""Every number of the line, oldest first."""


def _script(backend: str, number: int) -> str:
    folder = resources.files(f"heartq.store.{backend}") / "migrations"
    return (folder / f"{number:04d}_{_files(backend)[number]}.sql").read_text("utf-8")


def _statements(script: str) -> list[str]:
    """What a script holds besides its comments."""
    lines = [line for line in script.splitlines() if not line.lstrip().startswith("--")]
    return [line for line in lines if line.strip()]


def test_each_number_names_one_change_on_both_backends() -> None:
    """The same numbers and names in both folders, each header naming its own number; a
    SQLite file without a statement says why nothing is needed, and its PostgreSQL twin
    has statements (a change nobody needs is not a migration)."""
    postgres, sqlite = _files("postgres"), _files("sqlite")
    assert sqlite == postgres
    assert sorted(postgres) == sorted(set(range(1, max(postgres) + 1)) - HELD)
    for number in postgres:
        for backend, label in (("postgres", "PostgreSQL"), ("sqlite", "SQLite")):
            header = _script(backend, number).splitlines()[0]
            assert header.startswith(f"-- heartq schema v{number} ({label})"), (backend, header)
        if not _statements(_script("sqlite", number)):
            assert "nothing to do" in _script("sqlite", number), number
            assert _statements(_script("postgres", number)), number
    empty = {number for number in sqlite if not _statements(_script("sqlite", number))}
    assert empty == {12, 15, 19, 23, 26, 27, 28, 39, 40, 41, 42}


def test_the_old_numbers_are_translated_only_for_a_file_of_the_old_numbering() -> None:
    """What a file recorded, read as the one line: the old 23 and 24 move up one, a file
    of the one line (it has 12) or below 12 is read as it is, and records of neither
    numbering are refused in one line."""
    old_24 = {*range(1, 12), 13, 14, 16, 17, 18, 20, 21, 22, 23, 24}
    assert sqlite_schema.one_line(old_24) == old_24 - {23} | {25}
    assert sqlite_schema.one_line(old_24 | {29}) == old_24 - {23} | {25, 29}
    assert sqlite_schema.one_line(set(NUMBERS)) == set(NUMBERS)
    assert sqlite_schema.one_line(set(range(1, 12))) == set(range(1, 12))
    assert sqlite_schema.one_line(set()) == set()
    with pytest.raises(ConfigError) as refused:
        sqlite_schema.one_line(old_24 | {26})
    assert "\n" not in str(refused.value) and "migration 26 but not 12" in str(refused.value)


def _load(dump: str, path: Path) -> None:
    with closing(sqlite3.connect(path)) as conn:
        conn.executescript(dump)


def _query(path: Path, sql: str) -> list[tuple[Any, ...]]:
    with closing(sqlite3.connect(path)) as conn:
        return conn.execute(sql).fetchall()


def _recorded(path: Path) -> dict[int, float]:
    return dict(_query(path, "SELECT version, applied_at FROM heartq_schema_migrations"))


def _schema(path: Path) -> list[tuple[Any, ...]]:
    """Every table, index and view of the file, as SQLite stores their statements."""
    return _query(
        path,
        "SELECT type, name, tbl_name, sql FROM sqlite_master "
        "WHERE name NOT LIKE 'sqlite_%' ORDER BY type, name",
    )


def _old_queue(version: int, folder: Path) -> Path:
    path = folder / "heartq.db"
    _load((HERE / "old_sqlite" / f"v{version}.sql").read_text("utf-8"), path)
    return path


@only_on("sqlite")
@pytest.mark.parametrize("version", sorted(OLD_QUEUES))
def test_an_old_sqlite_queue_is_renumbered_once_and_carries_on(
    version: int, fresh_url: Callable[[], str], tmp_path: Path
) -> None:
    """A queue the old heartq left at `version` of the old numbering, upgraded: each
    recorded version takes the number of its change (keeping the time it was applied),
    every other runs once, the schema is a fresh queue's, the jobs are as they were, and
    the running attempt of the old worker finishes, releasing the job that waits for it.
    A second migrate changes nothing."""
    path = _old_queue(version, tmp_path)
    before = _recorded(path)
    assert max(before) == version and 12 not in before
    jobs_before = _query(path, f"SELECT {KEPT_COLUMNS} FROM heartq_jobs ORDER BY id")
    (deployment,) = _query(path, "SELECT id FROM heartq_deployment")
    new_numbers = {name: number for number, name in _files("sqlite").items()}
    carried = {new_numbers[OLD_SQLITE_NAMES[old]]: at for old, at in before.items()}

    url = f"sqlite:///{path}"
    with opened(url) as store:
        assert store.link.migrate() == NEWEST
    after = _recorded(path)
    assert set(after) == set(NUMBERS)
    assert {number: after[number] for number in carried} == carried
    ran = {number for number, at in after.items() if at > max(before.values())}
    assert ran == set(after) - set(carried)
    fresh = Path(fresh_url().removeprefix("sqlite:///"))
    with opened(f"sqlite:///{fresh}") as made:
        made.link.migrate()
    assert _schema(path) == _schema(fresh)
    assert _query(path, f"SELECT {KEPT_COLUMNS} FROM heartq_jobs ORDER BY id") == jobs_before
    assert _query(path, "SELECT id FROM heartq_deployment") == [deployment]

    with opened(url) as store:
        assert store.link.migrate() == NEWEST
        assert _recorded(path) == after  # once: nothing renumbered or run again
        assert {JOBS[job]: store.get_job(job)["status"] for job in JOBS} == {
            "succeeded": "succeeded",
            "dead": "dead",
            "running": "running",
            "waiting": "waiting",
            "later": "queued",
            "queued": "queued",
        }
        assert store.get_job(IDS["succeeded"])["result"] == "forty-two"
        t = store.clock()
        done = Finish(Lease(IDS["running"], 1, "w1"), Outcome.SUCCEEDED, JobStatus.SUCCEEDED)
        assert store.finish([done], now=t) == []
        assert store.get_job(IDS["waiting"])["status"] == JobStatus.QUEUED
        register(store, "w2", t)
        (queued,) = store.enqueue([NewJob("new", "{}")], now=t)
        claimed = {claim_one(store, "w2", t + 1).id for _ in range(3)}
        assert claimed == {IDS["queued"], IDS["waiting"], queued}


@only_on("sqlite")
def test_an_upgrade_that_fails_keeps_the_old_numbers_until_it_succeeds(
    backend: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The renumbering commits with the migrations it lets run, or not at all: an upgrade
    stopped by a failing migration leaves the file as the old heartq left it, and the
    next one renumbers it."""
    path = _old_queue(24, tmp_path)
    before = _recorded(path)
    every = migration_scripts("heartq.store.sqlite")
    later = NEWEST + 1
    failing = [*every, (later, f"-- heartq schema v{later}: fails\nSELECT * FROM nowhere;")]
    monkeypatch.setattr(SQLiteDialect, "migrations", lambda _store: failing)
    with opened(f"sqlite:///{path}") as store, pytest.raises(Exception) as failed:
        store.link.migrate()
    assert "nowhere" in str(failed.value)
    assert _recorded(path) == before
    monkeypatch.setattr(SQLiteDialect, "migrations", lambda _store: every)
    with opened(f"sqlite:///{path}") as store:
        assert store.link.migrate() == NEWEST
    assert _recorded(path)[25] == before[24] and _recorded(path)[24] == before[23]


@pytest.mark.slow
@only_on("sqlite")
def test_processes_that_upgrade_an_old_queue_at_once_renumber_it_once(
    backend: str, tmp_path: Path
) -> None:
    """Four processes upgrade the same queue of the old v24 at once, on 5 copies in a row:
    one renumbers it and applies what it lacked, the others find it done under the write
    lock (each reads the records again there); each ends at the newest version."""
    paths = []
    for copy in range(5):
        (tmp_path / str(copy)).mkdir()
        paths.append(_old_queue(24, tmp_path / str(copy)))
    before = _recorded(paths[0])
    urls = [f"sqlite:///{path}" for path in paths]

    per_process = procs.run_processes(procs.migrator, [(urls,)] * procs.PROCESSES)

    for versions in per_process:
        assert versions == [NEWEST] * len(urls)
    for path in paths:
        after = _recorded(path)
        assert set(after) == set(NUMBERS)
        assert (after[24], after[25]) == (before[23], before[24])


@only_on("sqlite")
def test_a_heartq_of_the_old_numbering_is_refused_by_a_renumbered_queue(
    backend: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A heartq of the old numbering (its migrations numbered as main had them) meeting a
    renumbered file is refused at its first call, in one line naming the numbers it does
    not know, and the file is left as it is: the old heartq's own check (the same
    `refuse_unknown_versions` since schema v17; that code itself says
    `the queue's schema has migration 12, 15, 19, 25, 26, 27, 28, which this heartq
    (schema 29) does not know`). A file of the old numbering that recorded a version
    neither numbering has is refused in one line too, not migrated."""
    path = _old_queue(29, tmp_path)
    url = f"sqlite:///{path}"
    with opened(url) as store:
        assert store.link.migrate() == NEWEST
    renumbered = _recorded(path)
    old_line = [(number, "SELECT 1;") for number in OLD_SQLITE_NAMES]
    monkeypatch.setattr(SQLiteDialect, "migrations", lambda _store: old_line)
    with opened(url) as old, pytest.raises(ConfigError) as refused:
        old.link.migrate()
    message = str(refused.value)
    assert "\n" not in message
    unknown = ", ".join(map(str, [12, 15, 19, 25, 26, 27, 28, *(n for n in NUMBERS if n >= 30)]))
    assert f"has migration {unknown}, which this heartq (schema 29)" in message
    assert _recorded(path) == renumbered
    monkeypatch.undo()

    (tmp_path / "strange").mkdir()
    strange = _old_queue(24, tmp_path / "strange")
    with closing(sqlite3.connect(strange)) as conn, conn:
        conn.execute("INSERT INTO heartq_schema_migrations VALUES (?, 0)", (NEWEST + 1,))
    left = _recorded(strange)
    with opened(f"sqlite:///{strange}") as store, pytest.raises(ConfigError) as odd:
        store.link.migrate()
    assert "\n" not in str(odd.value) and f"migration {NEWEST + 1} but not 12" in str(odd.value)
    assert _recorded(strange) == left


@only_on("postgres")
@pytest.mark.parametrize("version", [27, 28])
def test_a_postgresql_schema_keeps_its_numbers_and_carries_on(
    version: int, fresh_url: Callable[[], str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """PostgreSQL's numbers are the line's: a schema left at v27 or v28 by the heartq of
    that version runs the migrations above it, once, keeping every recorded version and
    the time it was applied, and its jobs."""
    url = fresh_url()
    migrations = SteeredMigrations(url, monkeypatch)
    migrations.only(lambda number: number <= version)
    with opened(url) as old:
        assert old.link.migrate() == version
        t0 = old.clock()  # the jobs as that heartq wrote them: today's write newer tables
        ids = [insert_version_1_job(old, t0) for _ in range(3)]
        running = _claim_as_of_old(old, "w1", t0 + 1)
        before = _pg_rows(old, "SELECT version, applied_at FROM schema_migrations")
        jobs = _pg_rows(old, f"SELECT {KEPT_COLUMNS} FROM jobs ORDER BY id")
    migrations.all()
    with opened(url) as store:
        assert store.link.migrate() == NEWEST
        after = _pg_rows(store, "SELECT version, applied_at FROM schema_migrations")
        assert dict(after) == dict(before) | {
            number: dict(after)[number] for number in NUMBERS if number > version
        }
        assert sorted(dict(after)) == NUMBERS
        assert all(at > max(dict(before).values()) for number, at in after if number > version)
        assert _pg_rows(store, f"SELECT {KEPT_COLUMNS} FROM jobs ORDER BY id") == jobs
        done = Finish(running, Outcome.SUCCEEDED, JobStatus.SUCCEEDED, result_json="1")
        assert store.finish([done], now=t0 + 2) == []
        assert {store.get_job(job_id)["status"] for job_id in ids} == {"succeeded", "queued"}
        assert store.link.migrate() == NEWEST
        assert _pg_rows(store, "SELECT version, applied_at FROM schema_migrations") == after


def _claim_as_of_old(store: Any, worker_id: str, now: float) -> Lease:
    """One job put under `worker_id`'s lease on a schema of an older version, as its
    claim did: on the job's own row."""
    with store.link.pool.transaction() as conn:
        row = conn.execute(
            """UPDATE jobs SET status = 'running', worker_id = %(w)s,
                   execution_id = execution_id + 1, attempts = attempts + 1,
                   lease_expires_at = to_timestamp(%(now)s) + interval '600 seconds',
                   started_at = to_timestamp(%(now)s), heartbeat_at = to_timestamp(%(now)s),
                   updated_at = to_timestamp(%(now)s)
               WHERE id = (SELECT id FROM jobs WHERE status = 'queued' ORDER BY id LIMIT 1)
               RETURNING id, execution_id""",
            {"w": worker_id, "now": now},
        ).fetchone()
    return Lease(row["id"], row["execution_id"], worker_id)


def _pg_rows(store: Any, sql: str) -> list[tuple[Any, ...]]:
    with store.link.pool.transaction() as conn:
        return [tuple(row.values()) for row in conn.execute(sql).fetchall()]
