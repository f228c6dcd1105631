"""`heartq jobs show`'s retry backoff says what the worker will do: the task's explicit
`retry_intervals` (the one for the attempt that would fail next), its `retry_delay`
function when it has one (it decides first; its answer is not known before), the
schedule's wait otherwise, and that no retry is left once none is."""

from __future__ import annotations

import re

from heartq.definition import TaskDefinition
from heartq.lifecycle import fate
from heartq.model import Outcome
from heartq.store import Store
from tests.cli.helpers import HeartqCli
from tests.conformance.support import new_job, register


def sync() -> None:
    """A task's function: only its definition's policy is declared here."""


def test_jobs_show_says_the_wait_the_worker_will_take(heartq: HeartqCli, store: Store) -> None:
    now = store.clock()
    register(store, "w1", now)
    listed = TaskDefinition(sync, name="sync", max_retries=3, retry_intervals=[1, 10, 60])
    judged = TaskDefinition(
        sync, name="fetch", max_retries=2, retry_intervals=[30], retry_delay=lambda n, exc: 7.0
    )
    store.declare_tasks([listed.policy, judged.policy], "w1", now)
    listed_id, judged_id, plain_id, spent_id = store.enqueue(
        [new_job("sync", max_retries=3), new_job("fetch", max_retries=2),
         new_job("plain", max_retries=3), new_job("sync", max_retries=0)],
        now=now,
    )  # fmt: skip  (jobs made by hand: each option counts as the caller's)

    def backoff(job_id: str) -> str:
        out = heartq("jobs", "show", job_id).ok().out
        found = re.search(r"retry backoff\s+(.*?)\s+\((task|default[^)]*|chosen at enqueue)\)", out)
        assert found, out
        return f"{found[1]} [{found[2]}]"

    explicit = "retry_intervals 1.0s, 10.0s, 1m00s, the last repeated"
    assert backoff(listed_id) == f"1.0s if attempt 1 fails ({explicit}) [task]"
    assert backoff(judged_id) == (
        "by the task's retry_delay function if attempt 1 fails; when it answers None, "
        "30.0s (retry_intervals 30.0s, each time) [task]"
    )
    assert backoff(plain_id) == (
        "5.0s, doubling up to 1h00m: about 5.0s if attempt 1 fails [chosen at enqueue]"
    )
    assert backoff(spent_id) == f"{explicit}; none after attempt 1: no retry left [task]"

    claimed = store.claim("w1", ["default"], 4, 60.0)
    (running,) = [job for job in claimed if job.id == listed_id]
    assert backoff(listed_id) == f"1.0s if attempt 1 fails ({explicit}) [task]"  # running
    failed = fate.failed(running, Outcome.FAILED, "OSError: not mounted", delay=1.0)
    assert store.finish([failed]) == []
    assert backoff(listed_id) == f"10.0s if attempt 2 fails ({explicit}) [task]"

    shown = heartq.json("jobs", "show", judged_id)["policy"]
    assert shown["retry_intervals"] == {"value": [30.0], "from": "task"}
    assert shown["retry_delay"] == {"value": True, "from": "task"}
    assert heartq.json("jobs", "show", plain_id)["policy"]["retry_delay"]["value"] is False
    declared = {task["name"]: task for task in heartq.json("tasks")}
    assert (declared["fetch"]["retry_delay"], declared["sync"]["retry_delay"]) == (True, False)
    table = heartq("tasks").ok().out
    assert re.search(r"fetch\s+default\s+0\s+2\s+retry_delay, else 30\.0s\s", table), table
