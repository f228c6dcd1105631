"""The app the failover runner's workers run (`tests.soak.failover_tasks:app`).

One task, `failover_job`: it works for `seconds` (stopping early if told), then writes
its effect, one row (job id, execution id, worker id, a random id of this run of the
code) in the ledger table named in full by `HEARTQ_FAILOVER_LEDGER`, through
`ctx.transaction()`, so the row and the job's completion commit together or not at all.
Once that commit has returned (the completion is acknowledged), it appends the same
identity to the side file named by `HEARTQ_FAILOVER_SIDE` (one `write` of an `O_APPEND`
file: lines of many processes never interleave), and returns it. The runner checks both
against the promoted standby: every acknowledged completion is there (synchronous
replication), and a succeeded job's result and its one ledger row come from the
execution the database says succeeded, whatever the failover did.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from typing import Any

import heartq

LEDGER_ENV = "HEARTQ_FAILOVER_LEDGER"
SIDE_ENV = "HEARTQ_FAILOVER_SIDE"
TASK = "failover_job"
SCHEMA = "heartq_failover"
LEDGER = f"{SCHEMA}.failover_ledger"
"""The names the runner (tests/soak/failover.py), its checks (failover_checks.py) and
this app share: the task, the runner's schema, and the ledger table in it that the
runner creates and names to the workers in `LEDGER_ENV`."""

app = heartq.App()


@app.task
def failover_job(ctx: heartq.JobContext, seconds: float = 0.3) -> dict[str, Any]:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and not ctx.cancelled:
        time.sleep(0.02)
    ran = {"job": ctx.job_id, "eid": ctx.execution_id, "wid": ctx.worker_id,
           "run": uuid.uuid4().hex}  # fmt: skip
    table = os.environ.get(LEDGER_ENV)
    if table:
        with ctx.transaction() as conn:
            conn.execute(
                f"INSERT INTO {table} VALUES (%s, %s, %s, %s)",
                (ctx.job_id, ctx.execution_id, ctx.worker_id, ran["run"]),
            )
        side = os.environ.get(SIDE_ENV)
        if side:
            line = (json.dumps({**ran, "at": time.time()}) + "\n").encode()
            fd = os.open(side, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                os.write(fd, line)
            finally:
                os.close(fd)
    return ran
