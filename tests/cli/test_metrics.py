"""`heartq worker APP --metrics-port PORT`: Prometheus metrics scraped while it works."""

from __future__ import annotations

import signal
import socket
import subprocess
import urllib.request

from prometheus_client.parser import text_string_to_metric_families

from tests.cli.helpers import HeartqCli, wait_for
from tests.support import free_port

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def scrape(port: int) -> Samples | None:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as answer:
            text = answer.read().decode()
    except OSError:
        return None  # not listening yet
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def value(samples: Samples, name: str, **labels: str) -> float | None:
    return samples.get((name, frozenset(labels.items())))


def test_worker_metrics_move_while_it_works(
    heartq: HeartqCli, workers: list[subprocess.Popen[bytes]]
) -> None:
    for n in range(5):
        heartq.add("ok", {"n": n})
    for n in range(3):  # one starts, two wait a minute for their key's next start
        heartq.add("ok", {"n": 10 + n}, rate_key="api", rate_limit="1/m")
    boom = heartq.add("boom", max_retries=0)
    heartq.add("ok", {"n": 20}, depends_on=[boom])  # blocked once boom is dead
    slow = heartq.add("slow", {"seconds": 1.0})
    heartq.add("snoozes_once")
    for key in ("acct:1", "acct:2", "acct:2"):  # in a queue no worker serves
        heartq.add("ok", {"n": 30}, queue="elsewhere", fair_key=key)
    port = free_port()
    worker = heartq.start_worker("--metrics-port", str(port))
    workers.append(worker)

    def settled() -> Samples | None:
        samples = scrape(port)
        if samples is None:
            return None
        done = value(samples, "heartq_jobs_succeeded_total", task="ok", queue="default") == 6
        woke = value(samples, "heartq_jobs_succeeded_total", task="snoozes_once", queue="default")
        done = done and woke == 1
        renewed = (value(samples, "heartq_lease_renewals_total") or 0) > 0
        return samples if done and renewed else None

    samples = wait_for(settled, timeout=20, what="the counters to move")
    tq = {"queue": "default"}
    assert value(samples, "heartq_jobs_claimed_total", task="ok", **tq) == 6
    assert value(samples, "heartq_jobs_claimed_total", task="slow", **tq) == 1
    assert value(samples, "heartq_jobs_failed_total", task="boom", **tq) == 1
    assert value(samples, "heartq_jobs_snoozed_total", task="snoozes_once", **tq) == 1
    assert value(samples, "heartq_jobs_failed_total", task="snoozes_once", **tq) is None
    assert value(samples, "heartq_jobs_dead_total", task="boom") == 1
    assert value(samples, "heartq_claim_latency_seconds_count", **tq) == 10
    assert value(samples, "heartq_claims_total", path="database", **tq) == 10  # no transport
    assert value(samples, "heartq_job_duration_seconds_count", task="ok") == 6
    assert value(samples, "heartq_jobs", queue="default", status="succeeded") == 7
    assert value(samples, "heartq_rate_limited_jobs", key="api") == 2
    assert value(samples, "heartq_jobs", queue="default", status="dead") == 1
    assert value(samples, "heartq_jobs", queue="default", status="blocked") == 1
    assert value(samples, "heartq_jobs", queue="default", status="cancelled") == 0
    assert value(samples, "heartq_store_up") == 1
    # fairness keys counted per queue, never a series per key; the worker's queue's 0
    assert value(samples, "heartq_fair_keys_waiting", queue="default") == 0
    assert value(samples, "heartq_fair_keys_running", queue="default") == 0
    assert value(samples, "heartq_fair_keys_waiting", queue="elsewhere") == 2
    assert value(samples, "heartq_fair_keys_running", queue="elsewhere") == 0
    assert not [name for name, labels in samples if name.startswith("heartq_fair") and
                any(k == "key" for k, _ in labels)]  # fmt: skip
    assert value(samples, "heartq_worker_concurrency") == 10
    age = value(samples, "heartq_worker_heartbeat_age_seconds")
    assert age is not None and 0 <= age < 5
    running = value(samples, "heartq_worker_running_jobs")
    assert running is not None and running <= 1

    worker.send_signal(signal.SIGTERM)
    assert worker.wait(timeout=20) == 0
    assert heartq.job(slow)["status"] == "succeeded"  # let finish on a graceful stop
    log = (heartq.cwd / "worker.log").read_text()
    assert "metrics_server_started" in log and f"port={port}" in log


def test_metrics_port_in_use_is_one_clear_error(heartq: HeartqCli) -> None:
    with socket.socket() as taken:
        taken.bind(("0.0.0.0", 0))
        taken.listen()
        port = taken.getsockname()[1]
        run = heartq("worker", "tasks:app", "--burst", "--metrics-port", str(port))
    run.fails(1)
    assert f"cannot serve metrics on 0.0.0.0:{port}" in run.err


def test_a_paused_and_scaled_queue_shows_in_its_workers_metrics(
    heartq: HeartqCli, workers: list[subprocess.Popen[bytes]]
) -> None:
    port = free_port()
    workers.append(heartq.start_worker("--metrics-port", str(port)))

    def read() -> Samples | None:
        samples = scrape(port)
        found = samples and value(samples, "heartq_queue_paused", queue="default") is not None
        return samples if found else None

    samples = wait_for(read, timeout=20, what="the worker's first read of its controls")
    assert value(samples, "heartq_queue_paused", queue="default") == 0
    assert value(samples, "heartq_queue_worker_limit", queue="default") is None
    heartq("queues", "pause", "default").ok()
    heartq("queues", "scale", "default", "--concurrency", "3").ok()

    def obeyed() -> Samples | None:
        samples = scrape(port)
        if samples and value(samples, "heartq_queue_worker_limit", queue="default") == 3:
            return samples
        return None

    samples = wait_for(obeyed, timeout=20, what="the worker to read the controls")
    assert value(samples, "heartq_queue_paused", queue="default") == 1
