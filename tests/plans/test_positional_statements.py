"""heartq's PostgreSQL statements go out with `$1` placeholders converted once per text
(`store/postgres/statements.py`), never re-split at each call as psycopg does for a
statement over 4 KiB (the claim's 7.7 KB: 14 % of a worker's Python time at 500 jobs/s)."""

from __future__ import annotations

import psycopg
import psycopg._queries
import pytest
from psycopg import sql

from heartq.lifecycle.fate import succeeded
from heartq.model import NewJob
from heartq.store.postgres import PostgresStore
from heartq.store.postgres import queries as pg_q
from heartq.store.postgres.statements import NamedCursor, positional


@pytest.mark.parametrize(
    ("statement", "expected"),
    [
        ("a %(x)s b %(y)s c %(x)s", ("a $1 b $2 c $1", ("x", "y"))),
        ("format('%%I', %(s)s)", ("format('%I', $1)", ("s",))),
        ("a %s b %s", ("a $1 b $2", (0, 1))),
    ],
)
def test_placeholders_become_numbers(statement: str, expected: tuple[str, tuple[object]]) -> None:
    assert positional(statement) == expected


def test_the_claim_and_the_finish_are_never_split_by_psycopg(
    pg_store: PostgresStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert len(pg_q.CLAIM_ONE_QUEUE) > psycopg._queries.MAX_CACHED_STATEMENT_LENGTH

    def refused(*args: object) -> None:
        raise AssertionError("psycopg split a statement of heartq's")

    monkeypatch.setattr(psycopg._queries, "_query2pg_nocache", refused)
    monkeypatch.setattr(psycopg._queries, "_query2pg", refused)
    pg_store.enqueue([NewJob("t", "{}") for _ in range(3)])
    claimed = pg_store.claim("w", ["default"], 5, lease=30.0)
    assert len(claimed) == 3
    assert pg_store.finish([succeeded(job, None) for job in claimed]) == []
    with pg_store.link.pool.transaction() as conn:
        assert isinstance(conn.cursor(), NamedCursor)
        # A caller's statements with `%s` and a sequence of values work as with psycopg's.
        row = conn.execute("SELECT count(*) AS n FROM jobs WHERE status = %s", ("succeeded",))
        assert row.fetchone()["n"] == 3
        composed = sql.SQL("SELECT count(*) AS n FROM {} WHERE status = %(s)s")
        row = conn.execute(composed.format(sql.Identifier("jobs")), {"s": "succeeded"})
        assert row.fetchone()["n"] == 3


def test_a_task_gets_psycopgs_own_cursors_on_the_lent_connection(pg_store: PostgresStore) -> None:
    """Inside `ctx.transaction()` a task's code runs on heartq's connection: its
    `executemany` with `%s` placeholders works as psycopg's, its statements get
    PostgreSQL's own choices of plans (heartq's sessions force the generic ones, and turn
    JIT, sequential and bitmap scans off), and heartq's cursors and planner settings are
    back once the block ends."""
    mode = ("SELECT current_setting('plan_cache_mode') AS mode, current_setting('jit') AS jit,"
            " current_setting('enable_seqscan') AS seqscan,"
            " current_setting('enable_bitmapscan') AS bitmapscan")  # fmt: skip
    ours = {"mode": "force_generic_plan", "jit": "off", "seqscan": "off", "bitmapscan": "off"}
    with pg_store.link.pool.transaction() as conn:
        assert conn.execute(mode).fetchone() == ours
        with pg_store.dialect.task_scope(conn) as lent:
            cursor = lent.cursor()
            cursor.executemany("SELECT %s::int", [(1,), (2,)])
            assert not isinstance(cursor, NamedCursor)
            defaults = {"mode": "auto", "jit": "on", "seqscan": "on", "bitmapscan": "on"}
            assert cursor.execute(mode).fetchone() == defaults
        assert isinstance(conn.cursor(), NamedCursor)
        assert conn.execute(mode).fetchone() == ours
