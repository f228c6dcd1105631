"""Prometheus metrics of one worker process: `heartq worker APP --metrics-port PORT`.

Counters and histograms are driven by the structured events (`heartq.events`): the
metrics subscribe to the worker's app's event stream (`worker.events`), where every
event the worker emits (claims, outcomes, reclaims, heartbeats, lost leases) moves a
counter, so metrics and logs, subscribers of the same stream, never disagree. Gauges
are read at scrape time: the jobs by queue and state from the store (the same figures as
`heartq stats`), and this worker's heartbeat age and running jobs from the worker
itself.

Label values come from task and queue names, which users choose; each label keeps at most
`MAX_LABEL_VALUES` distinct values and reports the rest as `_other`, so a producer that
enqueues thousands of task names cannot blow up the series count.

Metrics (all prefixed `heartq_`):

- `jobs_claimed_total{task,queue}`, `jobs_succeeded_total{task,queue}`,
  `jobs_failed_total{task,queue}` (raised or timed out), `jobs_timed_out_total{task,queue}`,
  `jobs_retried_total{task,queue}` (a retry was scheduled after a failure),
  `jobs_cancelled_total{task,queue}`, `jobs_snoozed_total{task,queue}` (its task said
  it is too early, `heartq.Snooze`: not counted as an attempt; a snooze past the task's
  `max_snoozes` counts in `jobs_failed_total`), `jobs_crashed_total{task}` (a child
  process died),
  `jobs_expired_total{task,queue}` (not started by their expiry, ended cancelled
  without running: counted as cancelled too),
  `jobs_dead_total{task}` (into the dead-letter queue, by this worker or its maintenance),
  `jobs_reclaimed_total{task,detected_by}` (taken back from a crashed or expired attempt:
  queued again or dead), `worker_deactivations_total{detected_by}`, `lease_renewals_total`,
  `leases_lost_total`, `heartbeat_failures_total`, `maintenance_failures_total{service}`.
- `claims_total{queue,path}`: the path each claim took: `nats` (a transport's wake-up,
  claimed by id), `database` (a database claim), `skipped` (a wake-up whose job was
  taken elsewhere, finished, not due or keyed: nothing claimed);
  `transport_degraded_total{reason}`: episodes of NATS not delivering to this worker.
- `rate_limited_jobs{key}`: queued, due jobs of each rate key with live jobs (what its
  limit holds back once reached).
- `fair_keys_waiting{queue}`, `fair_keys_running{queue}`: how many fairness keys have
  jobs queued, and jobs running, in each queue (this worker's queues always, 0 without
  keys; `heartq.inspect.fairness`). Never a label per key: an application may have a
  key per customer; `heartq queues` and the dashboard name the busiest.
- `claim_latency_seconds{queue}`: from when a job could run to when it was claimed.
- `job_duration_seconds{task}`: how long attempts ran (succeeded, failed or snoozed).
- `jobs{queue,status}`: jobs in the store by shown state (every state of every queue
  that has jobs): `claimed` counts the jobs claimed ahead (`--prefetch`, not started),
  `running` those started (`heartq.inspect.states`).
- `store_up`: 1 when the scrape could read the store, else 0.
- `worker_heartbeat_age_seconds`: since this worker's last successful heartbeat (since
  the metrics started, before the first one).
- `queue_paused{queue}` (1 while paused), `queue_worker_limit{queue}` (a capped queue's
  jobs this worker may run at once): each of the worker's queues as it last read their
  controls (`heartq queues`), within about a second of a change.
- `worker_running_jobs` (attempts started, not yet saved), `worker_claimed_ahead_jobs`
  (held in its buffer, not started), `worker_concurrency`,
  `worker_info{worker_id,name,pool,queues}`.
"""

from __future__ import annotations

import concurrent.futures
import logging
import queue
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any, TypeVar

from prometheus_client import CollectorRegistry, Counter, Histogram, start_http_server
from prometheus_client.core import GaugeMetricFamily, InfoMetricFamily, Metric
from prometheus_client.registry import Collector

from heartq import events
from heartq.errors import ConfigError
from heartq.inspect.fairness import keys_in_use
from heartq.inspect.limits import limits_in_use
from heartq.inspect.stats import jobs_by_queue

if TYPE_CHECKING:
    from heartq.worker import Worker

T = TypeVar("T")

MAX_LABEL_VALUES = 100
"""Each label keeps at most 100 distinct values; the rest are reported as `_other`."""
OTHER = "_other"
SCRAPE_TIMEOUT = 5.0
"""A scrape waits at most 5 s for the store; past that `heartq_store_up` is 0."""
DEFAULT_HOST = "0.0.0.0"
"""Defaults to every interface, so Prometheus can scrape the worker from another host."""

LATENCY_BUCKETS = (
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
    60.0,
    300.0,
    1800.0,
)
DURATION_BUCKETS = (
    0.01,
    0.05,
    0.1,
    0.5,
    1.0,
    5.0,
    10.0,
    30.0,
    60.0,
    300.0,
    900.0,
    1800.0,
    3600.0,
    7200.0,
    21600.0,
)

logger = logging.getLogger("heartq")


class BoundedLabel:
    """Passes through the first `limit` distinct values of a label, `_other` after."""

    def __init__(self, limit: int = MAX_LABEL_VALUES) -> None:
        self._limit = limit
        self._seen: set[str] = set()
        self._lock = threading.Lock()

    def __call__(self, value: Any) -> str:
        text = "" if value is None else str(value)
        if text in self._seen:
            return text
        with self._lock:
            if len(self._seen) < self._limit:
                self._seen.add(text)
                return text
        return OTHER


class SerialReader:
    """Runs store reads on one long-lived thread. The HTTP server answers each scrape on
    a new thread, and a store keeps one connection per thread: reading from the scrape
    threads would open (and leak) a connection per scrape."""

    def __init__(self) -> None:
        self._calls: queue.SimpleQueue[tuple[Callable[[], Any], concurrent.futures.Future[Any]]] = (
            queue.SimpleQueue()
        )
        self._thread = threading.Thread(target=self._loop, name="heartq-metrics", daemon=True)
        self._thread.start()

    def call(self, fn: Callable[[], T], timeout: float = SCRAPE_TIMEOUT) -> T:
        future: concurrent.futures.Future[T] = concurrent.futures.Future()
        self._calls.put((fn, future))
        return future.result(timeout)

    def _loop(self) -> None:
        while True:
            fn, future = self._calls.get()
            if not future.set_running_or_notify_cancel():
                continue
            try:
                future.set_result(fn())
            except BaseException as exc:  # noqa: BLE001 - handed to the caller
                future.set_exception(exc)


class ScrapeCollector(Collector):
    """Gauges read at scrape time: the store's job counts and this worker's state."""

    def __init__(self, worker: Worker, reader: SerialReader) -> None:
        self._worker = worker
        self._reader = reader
        self._since = time.monotonic()
        self._rate_key = BoundedLabel()

    def describe(self) -> Iterable[Metric]:
        # Describing without collecting keeps registration from reading the store.
        return list(self._families())

    def _families(self) -> tuple[GaugeMetricFamily, ...]:
        return (
            GaugeMetricFamily("heartq_store_up", "1 when this scrape could read the store."),
            GaugeMetricFamily(
                "heartq_jobs",
                "Jobs in the store, by queue and status.",
                labels=["queue", "status"],
            ),
            GaugeMetricFamily(
                "heartq_worker_heartbeat_age_seconds",
                "Seconds since this worker's last successful heartbeat.",
            ),
            GaugeMetricFamily("heartq_worker_running_jobs", "Attempts this worker is running now."),
            GaugeMetricFamily(
                "heartq_worker_claimed_ahead_jobs",
                "Jobs this worker claimed ahead (--prefetch) and holds, not started.",
            ),
            GaugeMetricFamily("heartq_worker_concurrency", "Jobs this worker runs at once."),
        )

    def collect(self) -> Iterator[Metric]:
        up, jobs, age, running, ahead, concurrency = self._families()
        try:
            counts = self._reader.call(self._worker.store.job_counts)
            waits = self._reader.call(self._worker.store.queue_waits)
            rated = self._reader.call(lambda: limits_in_use(self._worker.store).rate)
            fair = self._reader.call(lambda: keys_in_use(self._worker.store))
        except Exception as exc:  # noqa: BLE001 - a scrape reports the store down, no more
            logger.debug("metrics: cannot read the store: %s", exc)
            up.add_metric([], 0)
        else:
            up.add_metric([], 1)
            for queue_name, statuses in sorted(jobs_by_queue(counts).items()):
                for status, count in statuses.items():
                    jobs.add_metric([queue_name, status], count)
            yield jobs
            oldest = GaugeMetricFamily(
                "heartq_oldest_queued_age_seconds",
                "How long the oldest runnable queued job of each queue has waited.",
                labels=["queue"],
            )
            for queue_name, wait in sorted(waits.items()):
                oldest.add_metric([queue_name], wait.oldest_age or 0.0)
            yield oldest
            yield self._rate_waiting(rated)
            yield from self._fair_keys(fair)
        yield up
        last = self._worker.last_renewal
        age.add_metric([], time.monotonic() - (self._since if last is None else last))
        yield age
        running.add_metric([], len(self._worker.running_jobs))
        yield running
        ahead.add_metric([], len(self._worker.ledger.ahead()))
        yield ahead
        concurrency.add_metric([], self._worker.concurrency)
        yield concurrency
        yield from self._controls()
        info = InfoMetricFamily("heartq_worker", "This worker process.")
        info.add_metric(
            [],
            {
                "worker_id": self._worker.id,
                "name": self._worker.name or "",
                "pool": self._worker.pool_name,
                "queues": ",".join(self._worker.queues),
            },
        )
        yield info

    def _controls(self) -> Iterator[GaugeMetricFamily]:
        """What this worker obeys of its queues' controls, as it last read them
        (`heartq.worker.controls`): no read of its own."""
        paused = GaugeMetricFamily(
            "heartq_queue_paused",
            "1 while an operator has paused the queue, as this worker last read it.",
            labels=["queue"],
        )
        capped = GaugeMetricFamily(
            "heartq_queue_worker_limit",
            "The jobs of the queue this worker may run at once, where an operator capped it.",
            labels=["queue"],
        )
        controls = self._worker.controls
        for queue_name in self._worker.queues if controls.known else ():
            control = controls.control(queue_name)
            paused.add_metric([queue_name], 1 if control.paused else 0)
            if control.concurrency is not None:
                capped.add_metric([queue_name], control.concurrency)
        yield paused
        yield capped

    def _fair_keys(self, fair: dict[str, tuple[int, int]]) -> Iterator[GaugeMetricFamily]:
        """Fairness keys with jobs waiting and running per queue (`keys_in_use`: a probe
        per key, no backlog counted): as many series as queues, whatever the keys."""
        waiting = GaugeMetricFamily(
            "heartq_fair_keys_waiting",
            "Fairness keys with jobs queued in the queue (claims take them in turn).",
            labels=["queue"],
        )
        running = GaugeMetricFamily(
            "heartq_fair_keys_running",
            "Fairness keys with jobs running in the queue.",
            labels=["queue"],
        )
        for queue_name in sorted({*self._worker.queues, *fair}):
            keys_waiting, keys_running = fair.get(queue_name, (0, 0))
            waiting.add_metric([queue_name], keys_waiting)
            running.add_metric([queue_name], keys_running)
        yield waiting
        yield running

    def _rate_waiting(self, rated: list[dict[str, Any]]) -> GaugeMetricFamily:
        """Due jobs waiting per rate key (`heartq.inspect.limits`, as `heartq stats` and
        the dashboard read them): what a limit holds back."""
        family = GaugeMetricFamily(
            "heartq_rate_limited_jobs",
            "Queued, due jobs of each rate key: what its rate limit holds back once reached.",
            labels=["key"],
        )
        by_key: dict[str, int] = {}
        for usage in rated:
            label = self._rate_key(usage["key"])
            by_key[label] = by_key.get(label, 0) + usage["waiting"]
        for label, waiting in sorted(by_key.items()):
            family.add_metric([label], waiting)
        return family


class WorkerMetrics:
    """The metrics of one worker, on their own registry (not the global default one)."""

    def __init__(self, worker: Worker, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        self.worker = worker
        self._task = BoundedLabel()
        self._queue = BoundedLabel()
        self._service = BoundedLabel(20)
        self._path = BoundedLabel(10)
        self._reason = BoundedLabel(20)
        self._define_job_counters(self.registry)
        self._define_worker_counters(self.registry)
        self._define_histograms(self.registry)
        self.reader = SerialReader()
        self.registry.register(ScrapeCollector(worker, self.reader))
        worker.events.subscribe(self.on_event)

    def _define_job_counters(self, r: CollectorRegistry) -> None:
        tq = ["task", "queue"]
        self.claimed = Counter("heartq_jobs_claimed", "Jobs claimed.", tq, registry=r)
        self.succeeded = Counter(
            "heartq_jobs_succeeded", "Attempts that succeeded.", tq, registry=r
        )
        self.failed = Counter(
            "heartq_jobs_failed", "Attempts that raised or timed out.", tq, registry=r
        )
        self.timed_out = Counter(
            "heartq_jobs_timed_out", "Attempts that overran their timeout.", tq, registry=r
        )
        self.retried = Counter(
            "heartq_jobs_retried", "Retries scheduled after a failure.", tq, registry=r
        )
        self.cancelled = Counter("heartq_jobs_cancelled", "Attempts cancelled.", tq, registry=r)
        self.snoozed = Counter(
            "heartq_jobs_snoozed",
            "Attempts whose task snoozed, not counted (heartq.Snooze within max_snoozes).",
            tq,
            registry=r,
        )
        self.expired = Counter(
            "heartq_jobs_expired", "Jobs not started by their expiry, not run.", tq, registry=r
        )
        self.crashed = Counter(
            "heartq_jobs_crashed", "Attempts whose child process died.", ["task"], registry=r
        )
        self.dead = Counter(
            "heartq_jobs_dead", "Jobs sent to the dead-letter queue.", ["task"], registry=r
        )
        self.reclaimed = Counter(
            "heartq_jobs_reclaimed",
            "Jobs taken back from a crashed or expired attempt (queued again or dead).",
            ["task", "detected_by"],
            registry=r,
        )

    def _define_worker_counters(self, r: CollectorRegistry) -> None:
        self.deactivations = Counter(
            "heartq_worker_deactivations",
            "Workers marked inactive (stale or gone).",
            ["detected_by"],
            registry=r,
        )
        self.renewals = Counter(
            "heartq_lease_renewals", "Leases renewed by heartbeats.", registry=r
        )
        self.lost = Counter("heartq_leases_lost", "Attempts that lost their lease.", registry=r)
        self.heartbeat_failures = Counter(
            "heartq_heartbeat_failures", "Heartbeats that could not reach the store.", registry=r
        )
        self.maintenance_failures = Counter(
            "heartq_maintenance_failures",
            "Maintenance passes that failed.",
            ["service"],
            registry=r,
        )
        self.claim_paths = Counter(
            "heartq_claims",
            "Claims by the path they took: nats (a wake-up claimed by id), database, "
            "skipped (a wake-up whose job was taken elsewhere: nothing claimed).",
            ["queue", "path"],
            registry=r,
        )
        self.degraded = Counter(
            "heartq_transport_degraded",
            "Episodes of NATS not delivering to this worker, by reason.",
            ["reason"],
            registry=r,
        )

    def _define_histograms(self, r: CollectorRegistry) -> None:
        self.claim_latency = Histogram(
            "heartq_claim_latency_seconds",
            "From when a job could run to its claim.",
            ["queue"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.duration = Histogram(
            "heartq_job_duration_seconds",
            "How long attempts ran (succeeded or failed).",
            ["task"],
            buckets=DURATION_BUCKETS,
            registry=r,
        )

    def close(self) -> None:
        self.worker.events.unsubscribe(self.on_event)

    def on_event(self, heard: events.Event) -> None:
        event, fields = heard.name, heard.fields
        task = self._task(fields.get("task"))
        queue_name = self._queue(fields.get("queue"))
        detected_by = str(fields.get("detected_by") or "")
        if event == events.JOB_CLAIMED:
            self.claimed.labels(task, queue_name).inc()
            self.claim_paths.labels(queue_name, self._path(fields.get("via"))).inc()
            latency = fields.get("latency")
            if isinstance(latency, int | float):
                self.claim_latency.labels(queue_name).observe(max(0.0, latency))
        elif event == events.JOB_SUCCEEDED:
            self.succeeded.labels(task, queue_name).inc()
            self._observe_duration(task, fields)
        elif event in (events.JOB_FAILED, events.JOB_TIMED_OUT):
            self.failed.labels(task, queue_name).inc()
            if event == events.JOB_TIMED_OUT:
                self.timed_out.labels(task, queue_name).inc()
            self._observe_duration(task, fields)
        elif event == events.JOB_CANCELLED:
            self.cancelled.labels(task, queue_name).inc()
        elif event == events.JOB_EXPIRED:  # cancelled, and why
            self.cancelled.labels(task, queue_name).inc()
            self.expired.labels(task, queue_name).inc()
        elif event == events.JOB_RETRY_SCHEDULED:
            self.retried.labels(task, queue_name).inc()
        elif event == events.JOB_SNOOZED:
            self.snoozed.labels(task, queue_name).inc()
            self._observe_duration(task, fields)
        elif event == events.JOB_CRASHED:
            if "task" in fields:  # the other form says the crash could not be recorded
                self.crashed.labels(task).inc()
        elif event == events.JOB_DEAD:
            self.dead.labels(task).inc()
            if detected_by:
                self.reclaimed.labels(task, detected_by).inc()
        elif event == events.JOB_RECLAIMED:
            self.reclaimed.labels(task, detected_by).inc()
        elif event == events.WORKER_DEACTIVATED:
            self.deactivations.labels(detected_by).inc()
        elif event == events.HEARTBEAT:
            renewed = fields.get("renewed")
            if isinstance(renewed, int) and renewed > 0:
                self.renewals.inc(renewed)
        elif event == events.LEASE_LOST:
            self.lost.inc()
        elif event == events.HEARTBEAT_FAILED:
            self.heartbeat_failures.inc()
        elif event == events.MAINTENANCE_FAILED:
            self.maintenance_failures.labels(self._service(fields.get("service"))).inc()
        elif event == events.JOB_SKIPPED_ACTIVE_ELSEWHERE:
            self.claim_paths.labels(queue_name, "skipped").inc()
        elif event == events.TRANSPORT_DEGRADED:
            self.degraded.labels(self._reason(fields.get("reason"))).inc()

    def _observe_duration(self, task: str, fields: dict[str, Any]) -> None:
        duration = fields.get("duration")
        if isinstance(duration, int | float):
            self.duration.labels(task).observe(max(0.0, duration))


def start_metrics_server(port: int, worker: Worker, host: str = DEFAULT_HOST) -> None:
    """Serve `worker`'s metrics at `http://HOST:PORT/metrics` from a daemon thread."""
    metrics = WorkerMetrics(worker)
    try:
        server, _thread = start_http_server(port, addr=host, registry=metrics.registry)
    except OSError as exc:
        metrics.close()
        raise ConfigError(f"cannot serve metrics on {host}:{port}: {exc.strerror or exc}") from None
    worker.events.emit(
        events.METRICS_SERVER_STARTED,
        worker_id=worker.id,
        host=host,
        port=server.server_port,
        path="/metrics",
    )
