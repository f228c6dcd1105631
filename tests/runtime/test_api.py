"""The client API: validation at the door, names users rely on, settings."""

from __future__ import annotations

import time
import uuid

import pytest

import heartq
from heartq.config import Settings
from heartq.model import AttemptRef
from heartq.worker import Worker


def _nested(levels: int) -> list[object]:
    """`levels` arrays, each holding the next: [[[...]]]."""
    value: list[object] = []
    for _ in range(levels - 1):
        value = [value]
    return value


def test_public_names_are_exactly_the_documented_ones() -> None:
    documented = {
        "App", "JobContext", "LeaseLost", "Cancelled", "Permanent", "Task", "Worker",
        "Settings", "HeartqError", "ConfigError", "PayloadError", "UnknownTask", "JobNotFound",
        "StoreUnavailable", "StoreBusy", "StoreRefused", "DuplicateJob", "CancelResult",
        "JobStatus", "Outcome", "Hooks", "EnqueueInfo", "AttemptInfo", "CrashInfo", "AttemptRef",
        "WorkerHookInfo", "TaskNotDeclared", "TaskDecorator", "JobDead", "JobCancelled",
        "ResultTimeout", "BadArguments", "TaskNotDeclaredWarning", "Signature", "Chain",
        "Group", "chain", "group", "Pipeline", "DependencyFailure", "DependencyNotFound",
        "AlreadyEnqueued", "ResultLost", "LostResult", "is_lost_result", "Event", "EventStream",
        "QueueControl",
        "Snooze",
        "__version__",
    }  # fmt: skip
    assert set(heartq.__all__) == documented
    for name in heartq.__all__:
        assert hasattr(heartq, name)


def test_task_registration_and_enqueue_defaults(app: heartq.App) -> None:
    @app.task(queue="media", max_retries=7, priority=3)
    def resize(ctx: heartq.JobContext, path: str) -> None: ...

    assert resize.wants_ctx and not resize.is_async
    job = app.get_job(resize.enqueue(path="a.png"))
    assert (job["queue"], job["max_retries"], job["priority"], job["args"]) == (
        "media", 7, 3, {"path": "a.png"},
    )  # fmt: skip
    job = app.get_job(app.enqueue("resize", {"path": "b"}, queue="q2", priority=-1, max_retries=0))
    assert (job["queue"], job["priority"], job["max_retries"]) == ("q2", -1, 0)
    with pytest.raises(heartq.ConfigError, match="already registered"):
        app.task(name="resize")(lambda: None)


def test_enqueue_many_is_one_transaction(app: heartq.App) -> None:
    ids = app.enqueue_many("t", [{"i": 1}, {"i": 2}, {"i": 3}])
    assert [app.get_job(i)["args"]["i"] for i in ids] == [1, 2, 3]
    before = len(app.store.list_jobs(limit=1000))
    with pytest.raises(heartq.PayloadError):
        app.enqueue_many("t", [{"i": 4}, {"bad": object()}])
    assert len(app.store.list_jobs(limit=1000)) == before  # nothing of the batch landed


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ({"x": object()}, "must be JSON-serializable"),
        ({"x": float("nan")}, "must be JSON-serializable"),
        ([1, 2], "must be a JSON object"),
        ({1: "a"}, "names must be strings"),
        ({"s": "\ud800"}, "not valid Unicode"),
        ({"blob": "x" * (1024 * 1024 + 1)}, "over the limit of 1048576 bytes"),
        ({"s": "a\x00b"}, r"NUL character \(\\x00\) in the value at \['s'\]"),
        ({"a\x00": 1}, "NUL character .* in the key"),
        ({"d": _nested(101)}, "nested too deeply: more than 100 levels"),
        ({"d": _nested(100_000)}, "nested too deeply: more than 100 levels"),
    ],
    ids=["object", "nan", "list", "int-key", "surrogate", "too-large", "nul", "nul-key",
         "deep", "very-deep"],
)  # fmt: skip
def test_bad_arguments_are_refused_and_nothing_is_stored(app: heartq.App, args, message) -> None:
    with pytest.raises(heartq.PayloadError, match=message):
        app.enqueue("t", args)

    @app.task
    def typed(**kwargs: object) -> None: ...

    if isinstance(args, dict) and all(isinstance(k, str) for k in args):  # keywords
        with pytest.raises(heartq.PayloadError, match=message):
            typed.enqueue(**args)
    with pytest.raises(heartq.PayloadError, match=message):
        app.enqueue_many("t", [{}, args])
    assert app.store.list_jobs() == []


def test_nul_is_refused_in_every_text_heartq_stores(app: heartq.App) -> None:
    """Names, keys, who cancelled, a worker's name and queues: refused before anything is
    written, on every backend alike (PostgreSQL's text type cannot hold NUL at all)."""
    job_id = app.enqueue("t", {})
    with pytest.raises(heartq.ConfigError, match="by must not contain NUL"):
        app.cancel(job_id, by="me\x00")
    assert app.get_job(job_id)["status"] == "queued"
    with pytest.raises(heartq.ConfigError, match="worker name must not contain NUL"):
        Worker(app, name="w\x00")
    with pytest.raises(heartq.ConfigError, match="queue name must not contain NUL"):
        Worker(app, queues=["default", "q\x00"])
    for options in ({"queue": "q\x00"}, {"unique_key": "k\x00"},
                    {"concurrency_key": "k\x00", "concurrency_limit": 1}):  # fmt: skip
        with pytest.raises(heartq.ConfigError, match="must not contain NUL"):
            app.enqueue("t", {}, **options)
    with pytest.raises(heartq.ConfigError, match="task name must not contain NUL"):
        app.enqueue("t\x00", {})
    assert [job["id"] for job in app.store.list_jobs()] == [job_id]


def test_payload_limit_is_settable(tmp_path) -> None:
    small = heartq.App(f"sqlite:///{tmp_path / 'q.db'}", max_payload_bytes=100)
    small.enqueue("t", {"x": "a" * 50})
    with pytest.raises(heartq.PayloadError, match="over the limit of 100 bytes"):
        small.enqueue("t", {"x": "a" * 100})


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"queue": ""}, "queue name must be a non-empty string"),
        ({"delay": -1}, "delay must be a positive number"),
        ({"max_retries": -1}, "max_retries must be between 0 and"),
        ({"priority": "high"}, "priority must be an integer"),
    ],
)
def test_bad_options_are_refused(app: heartq.App, options, message) -> None:
    with pytest.raises(heartq.ConfigError, match=message):
        app.enqueue("t", {}, **options)


def test_unknown_job_id_is_a_clear_not_found(app: heartq.App) -> None:
    with pytest.raises(heartq.JobNotFound, match="no job with id 'nope'"):
        app.get_job("nope")
    with pytest.raises(heartq.JobNotFound):
        app.cancel("nope")


def test_settings_derive_from_the_heartbeat_and_validate() -> None:
    s = Settings(heartbeat_interval=2)
    assert (s.lease_seconds, s.reclaim_interval_seconds, s.stale_after_seconds) == (6, 2, 6)
    assert s.trust_window == pytest.approx(5.0)
    defaults = Settings()
    assert (defaults.heartbeat_interval, defaults.lease_seconds) == (30, 90)
    assert (defaults.reclaim_interval_seconds, defaults.liveness_interval) == (30, 1)
    with pytest.raises(heartq.ConfigError, match="must be longer than heartbeat_interval"):
        Settings(heartbeat_interval=1, lease=1)
    with pytest.raises(heartq.ConfigError, match="must be a positive number"):
        Settings(heartbeat_interval=0)
    with pytest.raises(heartq.ConfigError, match="unknown setting"):
        Settings().with_overrides(heartbeat=1)


def test_trust_window_ends_before_any_reclaim_path_can_fire() -> None:
    long_lease = Settings(heartbeat_interval=1, lease=60)
    assert long_lease.stale_after_seconds == 60  # a long lease is not undercut by staleness
    assert long_lease.trust_window == pytest.approx(50)
    early_stale = Settings(heartbeat_interval=1, lease=60, stale_after=6)
    assert early_stale.trust_window == pytest.approx(5)  # bounded by the earlier path
    for s in (Settings(), long_lease, early_stale, Settings(heartbeat_interval=0.1, lease=0.6)):
        assert s.trust_window < min(s.lease_seconds, s.stale_after_seconds)


def test_settings_and_url_come_from_the_environment(monkeypatch, tmp_path) -> None:
    monkeypatch.setenv("HEARTQ_HEARTBEAT_INTERVAL", "0.5")
    monkeypatch.setenv("HEARTQ_LEASE", "2")
    monkeypatch.setenv("HEARTQ_URL", f"sqlite:///{tmp_path / 'env.db'}")
    app = heartq.App(reclaim_interval=0.25)
    assert app.settings.heartbeat_interval == 0.5 and app.settings.lease_seconds == 2
    assert app.settings.reclaim_interval_seconds == 0.25
    assert app.url.endswith("env.db")
    monkeypatch.setenv("HEARTQ_LEASE", "soon")
    with pytest.raises(heartq.ConfigError, match="HEARTQ_LEASE must be a number"):
        heartq.App()
    for value in ("-3", "0", "inf"):
        monkeypatch.setenv("HEARTQ_LEASE", value)
        with pytest.raises(heartq.ConfigError) as raised:
            heartq.App()
        assert str(raised.value) == (
            f"HEARTQ_LEASE must be a positive number of seconds, got {value!r}"
        )


def test_prefetch_is_a_whole_number_from_the_argument_or_the_environment(monkeypatch) -> None:
    assert Settings().prefetch == 0  # claim ahead is off unless asked
    monkeypatch.setenv("HEARTQ_PREFETCH", "8")
    assert heartq.App().settings.prefetch == 8
    assert heartq.App(prefetch=2).settings.prefetch == 2  # the argument wins
    for value in ("-1", "2.5", "many"):
        monkeypatch.setenv("HEARTQ_PREFETCH", value)
        with pytest.raises(heartq.ConfigError) as raised:
            heartq.App()
        message = f"HEARTQ_PREFETCH must be a whole number, 0 or more, got {value!r}"
        assert str(raised.value) == message
    monkeypatch.delenv("HEARTQ_PREFETCH")
    for bad in (-1, 2.5, True):
        with pytest.raises(heartq.ConfigError, match="prefetch must be a whole number"):
            Settings(prefetch=bad)


def test_bad_urls_are_clear(tmp_path) -> None:
    with pytest.raises(heartq.ConfigError, match="unsupported queue URL"):
        heartq.App("mysql://localhost/db").enqueue("t")
    with pytest.raises(heartq.StoreUnavailable, match="does not exist"):
        heartq.App(f"sqlite:///{tmp_path / 'missing' / 'q.db'}").enqueue("t")
    with pytest.raises(heartq.ConfigError, match="unknown SQLite URL option"):
        heartq.App(f"sqlite:///{tmp_path / 'q.db'}?nope=1").enqueue("t")


def test_an_empty_url_is_refused_not_taken_for_the_environment_s(monkeypatch, tmp_path) -> None:
    monkeypatch.setenv("HEARTQ_URL", f"sqlite:///{tmp_path / 'env.db'}")
    for empty in ("", "  "):
        with pytest.raises(heartq.ConfigError, match="url is empty: give a queue URL"):
            heartq.App(empty)
    assert heartq.App(None).url.endswith("env.db")


@pytest.mark.parametrize("url", [123, b"postgresql://u:secret@h/db", ["sqlite:///q.db"]])
def test_a_url_that_is_not_text_is_one_config_error(url: object) -> None:
    """`App(123)` says what it wants, not `AttributeError: 'int' object has no attribute
    'strip'`; bytes are named by their type only (they may hold a password)."""
    with pytest.raises(heartq.ConfigError) as raised:
        heartq.App(url)  # type: ignore[arg-type]
    assert str(raised.value) == (
        "url must be a queue URL as text (sqlite:///heartq.db, postgresql://...), got "
        f"{type(url).__name__}"
    )


def test_job_ids_strictly_increase_within_a_process() -> None:
    from heartq.ids import new_job_id

    ids = [new_job_id() for _ in range(20_000)]  # many per millisecond
    assert ids == sorted(ids) and len(set(ids)) == len(ids)
    for job_id in ids[:: 1_000]:  # written by hand, read back as a canonical UUIDv7
        parsed = uuid.UUID(job_id)
        assert (str(parsed), parsed.version, parsed.variant) == (job_id, 7, uuid.RFC_4122)
        assert abs((parsed.int >> 80) - time.time() * 1000) < 60_000  # its millisecond, now


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"retry_backoff": float("inf")}, "retry_backoff must be a finite number"),
        ({"retry_backoff_max": 1e300}, "at most"),
        ({"timeout": float("nan")}, "timeout must be a finite number"),
        ({"priority": 2**40}, "priority must be between"),
        ({"max_retries": True}, "max_retries must be an integer"),
    ],
)
def test_task_options_that_would_poison_time_arithmetic_are_refused(
    app: heartq.App, options, message
) -> None:
    with pytest.raises(heartq.ConfigError, match=message):
        app.task(name="poison", **options)(lambda: None)


@pytest.mark.parametrize("delay", [float("inf"), 1e300, float("nan")])
def test_enqueue_refuses_delays_no_backend_can_store(app: heartq.App, delay) -> None:
    with pytest.raises(heartq.ConfigError, match="delay"):
        app.enqueue("t", {}, delay=delay)
    assert app.store.list_jobs() == []


@pytest.mark.parametrize("value", [float("nan"), float("inf"), True, "half"])
def test_progress_must_be_a_finite_number(value) -> None:
    from heartq.context import JobContext

    class Control:
        lost = cancel_requested = False
        touched: list[object] = []

        def touch(self, progress: object) -> None:
            self.touched.append(progress)

        def save_checkpoint(self, checkpoint: object) -> None: ...

    ctx = JobContext(
        AttemptRef("j", "t", "q", attempt=1, execution_id=1, worker_id="w"),
        checkpoint=None, control=Control(),
    )  # fmt: skip
    with pytest.raises(TypeError, match="progress must be a finite number"):
        ctx.heartbeat(progress=value)
    assert Control.touched == []  # nothing reached the heartbeat: one task cannot poison it


def test_a_zero_shutdown_timeout_is_allowed() -> None:
    assert Settings(shutdown_timeout=0).shutdown_timeout == 0
