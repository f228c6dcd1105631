"""The dashboard and the command line show the same figures for the same job: both
read them from the operator's read model (`heartq.inspect`)."""

from __future__ import annotations

import json
import re
from typing import Any

from click.testing import CliRunner

from heartq import display
from heartq.cli.main import cli
from heartq.lifecycle.fate import succeeded
from heartq.model import DetectedBy, JobStatus, Renewal
from heartq.store import Store
from tests.conformance.support import claim_one, enqueue_one, register
from tests.dashboard.support import Dashboard, claim, page, succeeded_job

TOOK = re.compile(
    r'<tr data-execution="(\d+)"[^>]*>\s*<td class="num">\d+</td><td class="id">[^<]*</td>'
    r"\s*<td>[^<]*</td><td>[^<]*</td><td>([^<]*)</td>"
)
"""An attempt's row of a job's page: its execution id and its `Took` cell."""


def shown_json(store_url: str, job_id: str) -> dict[str, Any]:
    """`heartq jobs show ID --json`, run in this process."""
    run = CliRunner().invoke(cli, ["jobs", "show", job_id, "--url", store_url, "--json"])
    assert run.exit_code == 0, run.output
    job: dict[str, Any] = json.loads(run.output)
    return job


def test_a_crashed_attempt_lasts_as_long_on_the_dashboard_as_in_jobs_show(
    store: Store, store_url: str, dashboard: Dashboard
) -> None:
    now = store.clock()
    register(store, "w-lost", now - 100)
    job_id = enqueue_one(store, now - 100, task="resize", retry_backoff=0.0)
    first = claim(store, job_id, now - 100, "w-lost")
    store.heartbeat("w-lost", [Renewal(first.lease)], 30.0, now=now - 90)  # its last word
    (reclaimed,) = store.reap_expired(DetectedBy.LEASE_EXPIRED, now=now - 50)
    assert reclaimed.status == JobStatus.QUEUED
    register(store, "w-next", now - 40)
    second = claim_one(store, "w-next", now - 40, lease=3600.0)
    store.finish([succeeded(second, json.dumps("done"))], now=now - 30)
    done = succeeded_job(store, now, {"ok": True})

    for shown in (job_id, done):
        executions = shown_json(store_url, shown)["executions"]
        text = page(dashboard().get(f"/jobs/{shown}"))
        took = dict(TOOK.findall(text))
        assert took == {
            str(ex["execution_id"]): display.fmt_seconds(ex["duration"]) for ex in executions
        }
    crashed, ran = shown_json(store_url, job_id)["executions"]
    # to its last heartbeat, not to when the reaper found it (50 s after the start)
    assert (crashed["duration"], crashed["detection_delay"]) == (10.0, 40.0)
    assert (ran["duration"], ran["detection_delay"]) == (10.0, None)
