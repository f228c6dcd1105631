"""`bench.table_storage` measures what a schema's tables hold as `bench.cost` and
`bench.pressure` report it: sizes from the server's own functions, `pgstattuple`'s live
and dead tuples and free space, and the growth per job between two measures.

On a real PostgreSQL, in a schema of the test's own: a table of 1,000 rows, each then
updated in an indexed column (so every row leaves a dead version and a second index
entry) while another session's snapshot keeps those versions from being pruned.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from bench import table_storage
from tests import pg_harness
from tests.conftest import only_on
from tests.support import wait_for

pytestmark = only_on("postgres")
ROWS = 1000


@pytest.fixture
def schema(pg_server_url: str, backend: str) -> Iterator[tuple[psycopg.Connection, str]]:
    with pg_harness.schema_url(pg_server_url) as url:
        base, name = url.rsplit("?schema=", 1)
        with psycopg.connect(base, autocommit=True) as conn:
            conn.execute(psycopg.sql.SQL("CREATE SCHEMA {}").format(psycopg.sql.Identifier(name)))
            yield conn, name


def test_growth_per_job_and_free_space_before_and_after_a_vacuum(
    schema: tuple[psycopg.Connection, str],
) -> None:
    conn, name = schema
    table = psycopg.sql.Identifier(name, "t")
    conn.execute(
        psycopg.sql.SQL("CREATE TABLE {} (id int PRIMARY KEY, k int, pad text)").format(table)
    )
    conn.execute(psycopg.sql.SQL("CREATE INDEX t_k ON {} (k)").format(table))
    conn.execute(psycopg.sql.SQL("CREATE VIEW {} AS SELECT 1").format(
        psycopg.sql.Identifier(name, "not_a_table")))  # fmt: skip
    assert table_storage.tables(conn, name) == ["t"]

    before = table_storage.measure(conn, name, ["t"])
    assert before["t"]["total_bytes"] == before["t"]["index_bytes"] + before["t"]["table_bytes"]
    conn.execute(
        psycopg.sql.SQL(
            "INSERT INTO {} SELECT n, n, repeat('x', 100) FROM generate_series(1, %s) n"
        ).format(table),
        (ROWS,),
    )
    with psycopg.connect(conn.info.dsn, autocommit=True) as holder:
        holder.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
        holder.execute("SELECT 1").fetchone()  # the snapshot, taken before the update
        conn.execute(psycopg.sql.SQL("UPDATE {} SET k = k + %s").format(table), (ROWS,))
        drained = table_storage.measure(conn, name, ["t"])
        table_storage.vacuum(conn, name, ["t"])  # removes nothing: the snapshot sees them
        assert table_storage.free_space(conn, name, "t")["dead_tuples"] == ROWS
        holder.execute("ROLLBACK")

    def vacuumed_clean() -> dict[str, Any] | None:
        """VACUUM again until no snapshot sees the dead versions: the run's other tests
        share this database, and one of them may hold a transaction a while."""
        table_storage.vacuum(conn, name, ["t"])
        measured = table_storage.measure(conn, name, ["t"])
        return measured if measured["t"]["dead_tuples"] == 0 else None

    vacuumed = wait_for(vacuumed_clean, 60, "VACUUM to remove the dead versions", interval=0.5)

    t = drained["t"]
    assert (t["tuples"], t["dead_tuples"]) == (ROWS, ROWS)
    assert t["dead_tuple_percent"] > 30 and t["tuple_percent"] > 30
    after = vacuumed["t"]
    assert (after["tuples"], after["dead_tuples"], after["dead_tuple_percent"]) == (ROWS, 0, 0)
    assert after["free_percent"] > t["free_percent"] + 30  # the dead versions made free

    sizes = {r[0]: r[1:] for r in conn.execute(
        "SELECT relname, pg_total_relation_size(oid), pg_relation_size(oid) FROM pg_class"
        " WHERE relnamespace = %s::regnamespace", (name,))}  # fmt: skip
    grown = table_storage.growth(before, drained, ROWS)
    assert grown["jobs"] == ROWS and list(grown["tables"]) == ["t"]
    g = grown["tables"]["t"]
    assert g["total_bytes"] == drained["t"]["total_bytes"] - before["t"]["total_bytes"] > 0
    assert grown["bytes_per_job"] == g["bytes_per_job"] == g["total_bytes"] / ROWS
    assert g["table_bytes_per_job"] == g["table_bytes"] / ROWS
    assert g["total_bytes"] == g["table_bytes"] + g["index_bytes"]
    assert set(g["indexes_per_job"]) == {"t_pkey", "t_k"}
    assert sum(g["indexes_per_job"].values()) * ROWS == g["index_bytes"]
    assert (g["dead_tuples"], g["free_percent"]) == (ROWS, t["free_percent"])
    now = table_storage.growth(before, vacuumed, ROWS)["tables"]["t"]
    assert before["t"]["total_bytes"] + now["total_bytes"] == sizes["t"][0]
    assert before["t"]["indexes"]["t_k"] + now["indexes_per_job"]["t_k"] * ROWS == sizes["t_k"][1]
    assert table_storage.growth({}, vacuumed, ROWS)["grown_bytes"] == sizes["t"][0]
