"""Every public name renamed so that each thing has one word (docs/design/words-and-map.md, "Words")
still works under its old name for one version, and says it is deprecated: the command
`heartq reap` and the option `heartq worker --reap-interval` (real processes: a line on
stderr), the variable `HEARTQ_REAP_INTERVAL` and the settings `reap_interval`,
`reap_batch` (a `DeprecationWarning`, shown by the commands), the events
`job_reenqueued`, `stale_jobs_detected` and `orphaned_jobs_detected` (a listener that
subscribes by the old name hears a real worker's reclaims under it, warned once, when it
subscribes), and the old constants and methods that named them."""

from __future__ import annotations

import json
import threading
import warnings
from collections.abc import Iterator
from typing import Any

import pytest

import heartq
from heartq import events
from heartq.config import Settings
from heartq.errors import ConfigError, RenamedWarning
from heartq.event_stream import EventStream
from heartq.model import DetectedBy, NewJob, WorkerInfo
from heartq.store import Store
from heartq.worker import Worker
from tests.cli.helpers import HeartqCli
from tests.runtime.conftest import IN_PROCESS, WorkerThread
from tests.support import wait_for

DEPRECATED = "heartq: warning: {old} is deprecated, use {new}"


def _worker_started(err: str) -> dict[str, Any]:
    """The `worker_started` event a `--log-format json` worker wrote to stderr."""
    for line in err.splitlines():
        if line.startswith("{") and '"worker_started"' in line:
            found: dict[str, Any] = json.loads(line)
            return found
    raise AssertionError(f"no worker_started in:\n{err}")


def _claimed_by_a_gone_worker(store: Store, lease: float = 60.0) -> str:
    """A job claimed by a worker that holds no liveness lock and will never beat again."""
    job_id = _enqueue(store)
    store.register_worker(WorkerInfo("gone-one", "test-host", 1, ("default",), 1))
    (held,) = store.claim("gone-one", ["default"], 1, lease)
    assert held.id == job_id
    return job_id


def _enqueue(store: Store) -> str:
    (job_id,) = store.enqueue([NewJob("ok", "{}")])
    return job_id


# -- the command line: real processes ---------------------------------------------------
def test_heartq_reap_still_reclaims_and_says_it_is_deprecated(
    heartq: HeartqCli, store: Store
) -> None:
    job_id = _claimed_by_a_gone_worker(store, lease=0.2)
    past = store.clock() + 0.3
    wait_for(lambda: store.clock() > past, 5, what="the lease to run out")
    run = heartq.process("reap", "--stale-after", "600", "--json").ok()
    assert DEPRECATED.format(old="'heartq reap'", new="'heartq reclaim'") in run.err
    report = json.loads(run.out)
    assert [job["job_id"] for job in report["reclaimed"]] == [job_id]
    assert report["queued"] == report["requeued"] == 1  # `requeued`: the old key
    assert store.get_job(job_id)["status"] == "queued"
    # the new name says nothing of the kind, and help lists only it
    assert "deprecated" not in heartq.process("reclaim", "--json").ok().err
    listed = heartq("--help", url=None).ok().out
    assert "reclaim" in listed and "reap" not in listed


def test_worker_reap_interval_still_sets_the_reclaim_interval(heartq: HeartqCli) -> None:
    run = heartq(
        "worker", "tasks:app", "--burst", "--log-format", "json", "--reap-interval", "0.7"
    ).ok()
    assert DEPRECATED.format(old="--reap-interval", new="--reclaim-interval") in run.err
    assert _worker_started(run.err)["reclaim_interval"] == 0.7
    new = heartq("worker", "tasks:app", "--burst", "--log-format", "json",
                 "--reclaim-interval", "0.6").ok()  # fmt: skip
    assert _worker_started(new.err)["reclaim_interval"] == 0.6
    assert "deprecated" not in new.err
    shown = heartq("worker", "--help", url=None).ok().out
    assert "--reclaim-interval" in shown and "--reap-interval" not in shown
    both = heartq("worker", "tasks:app", "--burst", "--reap-interval", "0.7",
                  "--reclaim-interval", "0.6").fails(2)  # fmt: skip
    assert "--reap-interval and --reclaim-interval both given" in both.err


def test_the_old_variable_still_sets_the_reclaim_interval(heartq: HeartqCli) -> None:
    run = heartq(
        "worker", "tasks:app", "--burst", "--log-format", "json", HEARTQ_REAP_INTERVAL="0.8"
    ).ok()
    assert "HEARTQ_REAP_INTERVAL is deprecated: set HEARTQ_RECLAIM_INTERVAL" in run.err
    assert _worker_started(run.err)["reclaim_interval"] == 0.8
    both = heartq("worker", "tasks:app", "--burst", "--log-format", "json",
                  HEARTQ_REAP_INTERVAL="0.8", HEARTQ_RECLAIM_INTERVAL="0.9").ok()  # fmt: skip
    assert _worker_started(both.err)["reclaim_interval"] == 0.9  # the new one wins
    assert "HEARTQ_RECLAIM_INTERVAL is set too and wins" in both.err


# -- settings ----------------------------------------------------------------------------
def test_the_old_settings_still_set_the_new_ones_and_warn(cli_url: str) -> None:
    with pytest.warns(RenamedWarning, match="'reap_interval' is deprecated"):
        settings = Settings(reap_interval=5.0)
    assert settings.reclaim_interval == 5.0 and settings.reclaim_interval_seconds == 5.0
    with pytest.warns(DeprecationWarning, match="'reap_batch' is deprecated"):
        assert Settings().with_overrides(reap_batch=7).reclaim_batch == 7
    with pytest.warns(DeprecationWarning, match="'reap_interval' is deprecated"):
        assert settings.reap_interval == 5.0
    with pytest.warns(DeprecationWarning, match="'reap_batch' is deprecated"):
        assert settings.reap_batch == settings.reclaim_batch
    with pytest.warns(DeprecationWarning, match="'reap_interval_seconds' is deprecated"):
        assert settings.reap_interval_seconds == 5.0
    with pytest.warns(DeprecationWarning, match="HEARTQ_REAP_INTERVAL is deprecated"):
        assert Settings.from_env({"HEARTQ_REAP_INTERVAL": "4"}).reclaim_interval == 4.0
    with pytest.raises(ConfigError, match="the same setting"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RenamedWarning)
        Settings(reap_interval=5.0, reclaim_interval=6.0)
    app = heartq.App(cli_url, reclaim_interval=9.0)
    try:
        with pytest.warns(DeprecationWarning, match="'reap_interval' is deprecated"):
            worker = Worker(app, reap_interval=3.0)
        assert worker.settings.reclaim_interval_seconds == 3.0
        with pytest.warns(DeprecationWarning, match="'reap_interval' is deprecated"):
            old_app = heartq.App(cli_url, reap_interval=2.0)
        assert old_app.settings.reclaim_interval_seconds == 2.0
        old_app.close()
    finally:
        app.close()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        Settings(reclaim_interval=5.0, reclaim_batch=3)  # the new names: no warning


# -- events: a real worker's reclaims, heard under the old names -------------------------
@pytest.fixture
def app(cli_url: str) -> Iterator[heartq.App]:
    application = heartq.App(cli_url, **IN_PROCESS)
    yield application
    application.close()


def test_a_listener_by_an_old_event_name_hears_the_event_under_it(app: heartq.App) -> None:
    """Two jobs taken back by a real worker: one from a worker gone silent (found by its
    monitor or its probe, with the worker: `orphaned_jobs_detected`), one whose lease
    ran out under a worker
    still alive, holding its lock (the lease reclaimer: `stale_jobs_detected`); each
    queued again (`job_reenqueued`), then run."""
    ran: list[str] = []
    lock = threading.Lock()

    @app.task(max_retries=3, retry_backoff=0)
    def ok() -> None:
        with lock:
            ran.append("ok")

    old_names = ["job_reenqueued", "stale_jobs_detected", "orphaned_jobs_detected"]
    heard_old: list[events.Event] = []
    with pytest.warns(DeprecationWarning) as warned:
        app.events.subscribe(heard_old.append, names=old_names)
    assert sorted(str(w.message).split("'")[1] for w in warned) == sorted(old_names)
    heard_new: list[events.Event] = []
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        app.events.subscribe(
            heard_new.append, names=[events.JOB_RECLAIMED, events.RECLAIM_DETECTED]
        )

    store = app.store
    orphaned = _claimed_by_a_gone_worker(store)
    # alive (its lock held here), silent for a while yet (its own 600 s threshold), its
    # lease 0.3 s: only the lease reclaimer takes its job
    handle = store.link.liveness_hold("slow-one")
    try:
        store.register_worker(
            WorkerInfo("slow-one", "test-host", 1, ("default",), 1, stale_after=600)
        )
        expired = _enqueue(store)
        (held,) = store.claim("slow-one", ["default"], 1, 0.3)
        assert held.id == expired
        with WorkerThread(Worker(app, **IN_PROCESS)):
            wait_for(
                lambda: {app.get_job(j)["status"] for j in (orphaned, expired)} == {"succeeded"},
                15,
                what="both jobs taken back and run",
            )
    finally:
        handle.close()

    by_name: dict[str, list[dict[str, Any]]] = {}
    for event in heard_old:
        by_name.setdefault(event.name, []).append(event.fields)
    assert sorted(f["job_id"] for f in by_name["job_reenqueued"]) == sorted([orphaned, expired])
    (stale,) = by_name["stale_jobs_detected"]
    assert stale["job_ids"] == [expired] and stale["detected_by"] == DetectedBy.LEASE_EXPIRED
    (found,) = by_name["orphaned_jobs_detected"]
    assert found["job_ids"] == [orphaned] and found["worker_id"] == "gone-one"
    assert set(by_name) == set(old_names)
    # the same events, under their names, to a listener of the new ones
    assert [e.name for e in heard_new].count(events.JOB_RECLAIMED) == 2
    detected = [e.fields for e in heard_new if e.name == events.RECLAIM_DETECTED]
    (by_lease,) = [f for f in detected if "worker_id" not in f]
    (with_worker,) = [f for f in detected if "worker_id" in f]
    assert by_lease["detected_by"] == DetectedBy.LEASE_EXPIRED == stale["detected_by"]
    assert with_worker["detected_by"] in (DetectedBy.STALE_WORKER, DetectedBy.LIVENESS_LOCK)


def test_the_old_constants_and_method_still_work_and_warn() -> None:
    for old, value, new in (
        ("JOB_REENQUEUED", "job_reenqueued", events.JOB_RECLAIMED),
        ("STALE_JOBS_DETECTED", "stale_jobs_detected", events.RECLAIM_DETECTED),
        ("ORPHANED_JOBS_DETECTED", "orphaned_jobs_detected", events.RECLAIM_DETECTED),
    ):
        warned = f"heartq.events.{old} is deprecated: use .*{new}"
        with pytest.warns(DeprecationWarning, match=warned):
            assert getattr(events, old) == new  # an `event.name ==` comparison still matches
        assert events.RENAMED_EVENTS[value].new == new
    stream = EventStream()
    heard: list[events.Event] = []
    stream.subscribe(heard.append, names=[events.WORKER_DEACTIVATED])
    with pytest.warns(DeprecationWarning, match="EventStream.stale_workers is deprecated"):
        stream.stale_workers([], DetectedBy.STALE_WORKER)
    assert heard == []
