"""The statements both dialects run, read as SQL and held to each other.

- **The SQL that runs, in review.** The hot statements (the claim in each of its forms,
  the start of buffered jobs, heartbeat and sweep, pulse, cancels, finish, release, the
  reaper's and the pruner's, the enqueue) are composed in Python from fragments; their
  rendered text, as each dialect sends it, is pinned in `sql/<dialect>/<NAME>.sql`, so
  a change to a fragment shows as the SQL it changes. `HEARTQ_SQL_WRITE=1` writes them
  anew.
- **The same parameters.** Every statement the shared store runs (`Statements` in
  `store/sql/statements.py`, whose names `mypy --strict` checks against both modules)
  takes the same named parameters in both dialects, up to how each binds a batch (one
  JSON text on SQLite, a typed array per field on PostgreSQL) and the values one dialect
  is given and does not need (`ONE_DIALECT`).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from heartq.store.postgres import queries as pg
from heartq.store.sql.statements import FairStatements, Statements
from heartq.store.sqlite import queries as sqlite
from heartq.store.sqlite.queries import fair as sqlite_fair
from tests.plans.census import WATCHED

GOLDEN = Path(__file__).parent / "sql"
DIALECTS = {"postgres": pg, "sqlite": sqlite}
FAIR = sorted(n for n in dir(FairStatements) if n.isupper())
"""SQLite's claim by fair shares (`Dialect.fair`): pinned like the hot statements."""
HOT = sorted({*WATCHED, *FAIR, "INSERT_JOBS", "INSERT_ENTERED_JOBS", "IDLE_LANES",
              "DELETE_EMPTY_LANES", "ENTER_LANES", "OPEN_LANES"})  # fmt: skip
NAMES = sorted(n for n in dir(Statements) if n.isupper())

ONE_DIALECT = {
    # PostgreSQL's keyed claims lock their keys in a statement of their own, then name
    # them to the claim; SQLite's one writer needs no lock.
    "CLAIM_KEYED": {"keys"},
    "CLAIM_RATED": {"rate_keys", "concurrency_keys"},
    # PostgreSQL probes its index of the documents' tails; SQLite reads the ids.
    "JOBS_BY_SUFFIX": {"tail"},
    # Whether the worker holds a session lock: SQLite's lock files are always held.
    "REGISTER_WORKER": {"liveness_lock"},
    # A PostgreSQL finish that commits by itself leaves jobs with dependents to a
    # transaction of their own; SQLite's finish is always in one.
    "FINISH": {"defer"},
    # PostgreSQL's sweep detaches lease rows, which keep no time of their last change;
    # SQLite's one job row keeps `updated_at`.
    "SWEEP": {"now"},
    # Whether a job with a fairness key waits: SQLite also asks for one not tagged yet
    # that is due (its claim by turns tags it); PostgreSQL's keyed jobs wait in lanes.
    "KEYED_QUEUED": {"now"},
    # SQLite reads each queue's line of turns this deep; PostgreSQL counts each lane.
    "FAIR_USAGE": {"line"},
}


def _text(statement: str | tuple[str, ...]) -> str:
    parts = statement if isinstance(statement, tuple) else (statement,)
    return ";\n".join(part.strip() for part in parts) + "\n"


@pytest.mark.parametrize("dialect", sorted(DIALECTS))
@pytest.mark.parametrize("name", HOT)
def test_the_hot_statements_read_as_pinned(name: str, dialect: str) -> None:
    statement = getattr(DIALECTS[dialect], name, None)
    if dialect == "sqlite" and name in FAIR:
        statement = getattr(sqlite_fair, name)
    golden = GOLDEN / dialect / f"{name}.sql"
    if statement is None:  # one dialect's only (the ready log's lanes, the wake-up)
        assert not golden.exists(), f"{golden} pins a statement {dialect} has not"
        return
    if os.environ.get("HEARTQ_SQL_WRITE"):
        golden.parent.mkdir(parents=True, exist_ok=True)
        golden.write_text(_text(statement))
    assert golden.exists(), f"{name} ({dialect}) has no pinned text: HEARTQ_SQL_WRITE=1"
    assert _text(statement) == golden.read_text(), (
        f"{name} ({dialect}) is not the SQL pinned in {golden}: review the change, then "
        "write it anew with HEARTQ_SQL_WRITE=1"
    )


def _parameters(statement: str | tuple[str, ...], pattern: str) -> set[str]:
    parts = statement if isinstance(statement, tuple) else (statement,)
    return set().union(*(re.findall(pattern, part) for part in parts))


def _unbatched(names: set[str]) -> set[str]:
    """PostgreSQL's batch parameters (`<batch>_<field>`, `<batch>_<field>_all`) as the
    batch's one name, as SQLite takes it."""
    batches = sorted(pg.BATCHES, key=len, reverse=True)
    return {next((b for b in batches if n.startswith(f"{b}_")), n) for n in names}


@pytest.mark.parametrize("name", NAMES)
def test_both_dialects_take_the_same_parameters(name: str) -> None:
    postgres = _unbatched(_parameters(getattr(pg, name), r"%\((\w+)\)s"))
    sqlite_ = _parameters(getattr(sqlite, name), r"(?<!:):(\w+)")
    extra = ONE_DIALECT.get(name, set())
    assert postgres - extra == sqlite_ - extra, (name, sorted(postgres ^ sqlite_))


def test_every_statement_the_shared_store_runs_is_declared() -> None:
    """`Statements` names what the shared store runs (`self.q.NAME` and `q.NAME`):
    mypy checks each use against it, and each dialect's module against it."""
    import heartq.store.sql

    shared = "".join(p.read_text() for p in Path(heartq.store.sql.__file__).parent.glob("*.py"))
    used = set(re.findall(r"\bq\.([A-Z_]+)\b", shared)) - {"NAME"}  # "q.NAME" in prose
    assert used == set(NAMES)
