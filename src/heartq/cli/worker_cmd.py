"""`heartq worker APP`: run a worker until SIGTERM/SIGINT."""

from __future__ import annotations

import contextlib
import gc
import logging
import os
import sys
import threading
import time
from collections.abc import Iterator

import click
from click.core import ParameterSource

from heartq.cli.common import (
    EXIT_OPERATIONAL,
    Count,
    EnvOption,
    F,
    Seconds,
    comma_separated,
    load_app,
    url_option,
    url_typed,
)
from heartq.cli.deprecated import RENAMED_OPTIONS, option_alias, renamed_values
from heartq.config import DEFAULT_CONCURRENCY, ENV_OTEL, resolve_url, worker_options
from heartq.events import LOG_LEVELS, configure_logging
from heartq.worker import Worker
from heartq.worker.pools import POOL_NAMES


def setting_options(fn: F) -> F:
    """`--heartbeat-interval`, `--lease`, ...: an option for each setting `Settings`
    offers to `heartq worker` (`heartq.config.worker_options`), with its help, its
    default as help shows it, and its environment variable, all written there.

    The variable is named in the help but not read here: the app reads it
    (`Settings.from_env`, under its own arguments), and says which variable a bad value
    came from. Read by click too, `HEARTQ_LEASE=-3` would be refused as an option nobody
    typed (`Invalid value for '--lease'`), even for an app whose own `lease=` wins."""
    for name, described in reversed(worker_options()):
        env = f"; env {described.env}" if described.env else ""
        kind: click.IntRange | Seconds = (
            Count(0 if described.zero_ok else 1)
            if described.whole
            else Seconds(min=0, min_open=not described.zero_ok)
        )
        fn = click.option(
            "--" + name.replace("_", "-"),
            type=kind,
            default=None,
            help=f"{described.help} [{described.shown_default}{env}].",
        )(fn)
        for old, new in RENAMED_OPTIONS.items():
            if new == "--" + name.replace("_", "-"):
                fn = option_alias(old, new, kind)(fn)
    return fn


def queue_names(ctx: click.Context, param: click.Parameter, value: str | None) -> list[str] | None:
    """`--queues a,b` as names (`comma_separated`); None when not given (the app's
    queues). An empty name (`--queues ''`, `a,,b`, a trailing comma) is a usage error,
    not the app's queues instead: a worker of other queues would run jobs nobody asked
    it to."""
    if value is None:
        return None
    try:
        return comma_separated(value, "queue name", "default,emails")
    except ValueError as exc:
        raise click.BadParameter(str(exc), ctx, param) from None


@click.command("worker")
@click.argument("app_ref", metavar="APP")
@url_option
@click.option(
    "--queues",
    default=None,
    callback=queue_names,
    help="Comma-separated queues (default: the app's).",
)
@click.option(
    "--concurrency",
    type=Count(1),
    default=DEFAULT_CONCURRENCY,
    show_default=True,
    help="Jobs run at once.",
)
@click.option(
    "--pool",
    type=click.Choice(POOL_NAMES),
    default="thread",
    show_default=True,
    help="Where tasks run. A timed-out or cancelled task: process kills its child, async "
    "cancels it at its next await, thread cannot stop it (it keeps its slot until it "
    "returns).",
)
@click.option(
    "--max-jobs-per-child",
    type=Count(0),
    default=None,
    help="With --pool process: reuse each child for up to N attempts, then replace it "
    "(0: no limit) [1, a child per attempt; no limit with --max-memory-per-child].",
)
@click.option(
    "--max-memory-per-child",
    type=click.FloatRange(min=0, min_open=True),
    metavar="MIB",
    default=None,
    help="With --pool process: replace a child once its resident memory after an attempt "
    "passes this many MiB (its attempt is reported first) [no ceiling].",
)
@click.option("--name", default=None, help="Stable name (pod or host name) for reconciliation.")
@setting_options
@click.option(
    "--startup-timeout",
    cls=EnvOption,
    type=Seconds(min=0),
    default=None,
    envvar="HEARTQ_STARTUP_TIMEOUT",
    help="Give up (exit 1) if the database is not usable within this many seconds "
    "of startup [wait until stopped; env HEARTQ_STARTUP_TIMEOUT].",
)
@click.option(
    "--transport",
    default=None,
    help="nats://HOST:PORT: pull job wake-ups from NATS JetStream (docs/NATS.md) "
    "[none: poll the database; env HEARTQ_TRANSPORT, read by the app].",
)
@click.option(
    "--otel",
    is_flag=True,
    envvar=ENV_OTEL,
    help="Trace every enqueue and attempt with OpenTelemetry (docs/OPERATIONS.md#tracing; "
    "needs pip install 'heartq[otel]'; the exporter is configured as OpenTelemetry's "
    "own, e.g. opentelemetry-instrument and OTEL_* variables).",
)
@click.option(
    "--metrics-port",
    type=click.IntRange(min=0, max=65535),
    default=None,
    help="Serve Prometheus metrics on this port.",
)
@click.option(
    "--metrics-host",
    default="0.0.0.0",
    show_default=True,
    help="Address the metrics endpoint listens on.",
)
@click.option(
    "--log-format", type=click.Choice(["text", "json"]), default="text", show_default=True
)
@click.option(
    "--log-level",
    type=click.Choice(list(LOG_LEVELS)),
    default="info",
    show_default=True,
    help="debug adds every claimed and succeeded job, and every heartbeat.",
)
@click.option(
    "--burst",
    is_flag=True,
    help="Exit once nothing of its queues is running, runnable or waiting for a retry.",
)
def worker_command(
    app_ref: str,
    url: str | None,
    queues: list[str] | None,
    concurrency: int,
    pool: str,
    max_jobs_per_child: int | None,
    max_memory_per_child: float | None,
    name: str | None,
    startup_timeout: float | None,
    transport: str | None,
    otel: bool,
    metrics_port: int | None,
    metrics_host: str,
    log_format: str,
    log_level: str,
    burst: bool,
    **settings: float | None,
) -> None:
    """Run a worker for APP (module:attribute, or module whose `app` is used).

    A worker killed outright (SIGKILL, OOM) has its jobs run again by the others within
    about 1 s on SQLite and 4 s on PostgreSQL (its liveness lock). Behind a pooler in
    transaction mode (?pooler=transaction) it holds no lock: its jobs wait for its stale
    threshold plus a reclaim interval: 90-120 s at the defaults, 4 heartbeat intervals at
    most (a shorter --heartbeat-interval shortens it), unless a direct URL
    (?direct_url=, HEARTQ_DIRECT_URL) gives it its lock back. worker_started logs the
    bound (recovery_within, seconds).
    """
    configure_logging(log_format, LOG_LEVELS[log_level])
    app = load_app(app_ref)
    # Precedence (docs/INTERFACE.md): an option typed on the command line beats the app's own
    # `url=`/settings, which beat the environment. The app has already read `HEARTQ_*`
    # under its explicit arguments, so only what was typed here is applied on top.
    context = click.get_current_context()

    def typed(name: str) -> bool:
        return context.get_parameter_source(name) is ParameterSource.COMMANDLINE

    if url is not None and url_typed(context):
        app.use_url(resolve_url(url))
    if transport and typed("transport"):
        app.use_transport(transport)
    # A setting not typed is the app's (which read its variable, if it has one) or None.
    typed_settings = renamed_values({n: v for n, v in settings.items() if typed(n)})
    worker = Worker(
        app,
        queues=queues,
        concurrency=concurrency,
        pool=pool,
        max_jobs_per_child=max_jobs_per_child,
        max_memory_per_child=max_memory_per_child,
        name=name,
        app_ref=app_ref if ":" in app_ref else f"{app_ref}:app",
        startup_timeout=startup_timeout,
        otel=otel,
        **typed_settings,
    )
    if metrics_port is not None:
        from heartq.metrics import start_metrics_server

        start_metrics_server(metrics_port, worker, host=metrics_host)
    worker.install_signal_handlers()
    settle_heap()
    with exit_bound():
        worker.run(burst=burst)


GC_YOUNG_THRESHOLD = 10_000
"""The collector's first threshold in a worker's process (Python's default: 700)."""


def settle_heap() -> None:
    """Collect what loading the app and the worker left as garbage, then keep every object
    alive now (modules, classes, functions: the app's and the drivers') out of the
    collector's later passes (`gc.freeze`), and let its youngest generation grow to
    `GC_YOUNG_THRESHOLD` objects before a pass. A no-op job's objects are freed by their
    reference counts, but the ones the running attempts and a batch of outcomes hold at
    any moment crossed 700 a few times a hundred jobs: each pass promoted them, and the
    full passes this led to walked the whole heap again (the full passes cost a 40,000-job
    PostgreSQL run 0.34 s, the young ones 0.2 s; after this, 0.08 s and none:
    BENCHMARKS.md). Cyclic garbage (a task's own) is still collected, after at most that
    many new objects. Only here, in the process the command owns: a program that embeds a
    `Worker` keeps its collector as it likes."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(GC_YOUNG_THRESHOLD)


EXIT_GRACE = 5.0
"""Seconds the worker's process may take to exit once the worker stopped. Defaults to 5.

Python's exit waits for every non-daemon thread: a task that started one and left it
running (or a sync task of the async pool stuck in `asyncio.to_thread`, whose executor is
joined at exit) would hold a stopped worker's process for good. Everything heartq keeps is
saved by then (or the worker is left `active` for the next probe), so past the grace the
process ends itself, with the exit status it was going to have."""


@contextlib.contextmanager
def exit_bound() -> Iterator[None]:
    """Once the body ends, the process has `EXIT_GRACE` seconds to exit by itself (its
    `atexit` hooks, a tracer's flush, run meanwhile as usual)."""
    code = EXIT_OPERATIONAL
    try:
        yield
        code = 0
    finally:
        threading.Thread(
            target=_exit_after, args=(EXIT_GRACE, code), name="heartq-exit-bound", daemon=True
        ).start()


def _exit_after(seconds: float, code: int) -> None:
    time.sleep(seconds)  # the grace itself: nothing to wait for but the clock
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    logging.shutdown()
    os._exit(code)
