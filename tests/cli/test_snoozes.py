"""`heartq jobs show` of a job that snoozed (`heartq.Snooze`): how many times, not counted
as attempts, and each `snoozed` execution with what its task said, in text and JSON."""

from __future__ import annotations

import re

from heartq.lifecycle import fate
from heartq.store import Store
from tests.cli.helpers import HeartqCli, assert_fits
from tests.conformance.support import new_job, register


def test_jobs_show_says_a_job_snoozed(heartq: HeartqCli, store: Store) -> None:
    now = store.clock()
    register(store, "w1", now)
    (job_id,) = store.enqueue([new_job("poll", max_retries=2)], now=now)
    for _ in range(2):
        store.retry_now(["default"])
        (job,) = store.claim("w1", ["default"], 1, 60.0)
        snoozed = fate.snoozed(job, 45.0, "snoozed for 45 s: the export is not ready")
        assert store.finish([snoozed]) == []

    shown = heartq.json("jobs", "show", job_id)
    assert (shown["status"], shown["attempts"], shown["snoozes"]) == ("queued", 0, 2)
    assert [e["outcome"] for e in shown["executions"]] == ["snoozed", "snoozed"]

    out = heartq("jobs", "show", job_id).ok().out
    assert_fits(out)
    assert re.search(r"attempts\s+0 of at most 3", out)
    assert re.search(r"snoozes\s+2, not counted as attempts", out)
    assert re.search(r"runs at\s+", out)
    assert len(re.findall(r"#\d\s+snoozed\s+", out)) == 2
    assert "snoozed for 45 s: the export is not ready" in out
    assert "error: snoozed" not in out  # what the task said, not an error
