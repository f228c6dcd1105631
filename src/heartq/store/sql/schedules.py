"""Periodic schedules an operator adds, changes, pauses and removes while workers run
(`heartq.runtime_schedules`).

Why apart from `enqueue.py`, which ticks the schedules: these are an operator's writes of
a schedule's definition; the ticks stay where they were, and read the definitions from
the same rows (`list_schedules`), so a runtime schedule ticks exactly as a code one.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from heartq.errors import ConfigError
from heartq.store.sql.base import Dialect


class ScheduleOps:
    """The runtime schedules' operations of `SqlStore` (`ScheduleEditor` in
    `store/interface.py`)."""

    def __init__(self, dialect: Dialect) -> None:
        self.d = dialect
        self.q = dialect.q

    def save_schedule(
        self,
        name: str,
        task: str,
        spec: str,
        definition: Mapping[str, Any],
        *,
        paused: bool,
        replace: bool,
        by: str,
        now: float | None = None,
    ) -> bool:
        self.d.ensure_schema()
        params = {
            "name": name,
            "task": task,
            "spec": spec,
            "definition": json.dumps(dict(definition)),
            "paused": paused,
            "by": by,
        }
        with self.d.write() as conn:
            params["now"] = self.d.clock(conn, now)
            row = conn.execute(self.q.SCHEDULE_FOR_CHANGE, params).fetchone()
            if row is not None and not row["runtime"]:
                raise ConfigError(
                    f"schedule {name!r} is declared in code (@app.periodic): a runtime "
                    "schedule cannot take its name"
                )
            if row is not None and not replace:
                raise ConfigError(
                    f"a runtime schedule named {name!r} exists: replace it (replace=True, "
                    "--replace) or remove it first"
                )
            statement = self.q.UPDATE_RUNTIME_SCHEDULE if row else self.q.INSERT_RUNTIME_SCHEDULE
            if conn.execute(statement, params).fetchone() is None:  # an add of one name won
                raise ConfigError(f"schedule {name!r} was added meanwhile: try again")
        return row is None

    def remove_schedule(self, name: str, now: float | None = None) -> bool:
        self.d.ensure_schema()
        with self.d.write() as conn:
            params = {"name": name, "now": self.d.clock(conn, now)}
            if conn.execute(self.q.DELETE_RUNTIME_SCHEDULE, params).fetchone() is not None:
                return True
            if conn.execute(self.q.SCHEDULE_FOR_CHANGE, params).fetchone() is not None:
                raise ConfigError(
                    f"schedule {name!r} is declared in code (@app.periodic): remove it there "
                    "(or pause it)"
                )
        return False

    def pause_schedule(self, name: str, paused: bool, by: str, now: float | None = None) -> bool:
        self.d.ensure_schema()
        with self.d.write() as conn:
            params = {"name": name, "paused": paused, "by": by, "now": self.d.clock(conn, now)}
            return conn.execute(self.q.PAUSE_SCHEDULE, params).fetchone() is not None
