"""Settings of the protocol, their defaults, and where they come from.

Every duration is in seconds (a float, so tests and demos can run the whole protocol in
fractions of a second). Resolution order for each setting: the explicit argument, then the
environment (`HEARTQ_URL`, and each setting's `Setting.env`: `HEARTQ_HEARTBEAT_INTERVAL`,
`HEARTQ_LEASE`, `HEARTQ_RECLAIM_INTERVAL`), then the default below.

Each field of `Settings` is declared once, with its default, its help, its variable and
whether `heartq worker` offers it as an option (`setting`): the command's options are
made from these declarations, so a default is never typed twice.

Derived defaults keep the ratios of docs/design/protocol.md ("Defaults and why") when only the
heartbeat is set: the lease is 3 heartbeats, the reclaim interval one heartbeat, a worker is stale
after 3 missed heartbeats.

A setting whose name changed (one word for each thing: docs/design/words-and-map.md,
"Words") keeps its old name, and its old variable, for one version (`RENAMED_SETTINGS`,
`RENAMED_ENV`): given either, it still sets the new one, with a `DeprecationWarning`.

Two ways take a job from a silent worker: its lease expires, or its registry row goes
stale and the monitor reclaims everything it holds. A worker must stop trusting its
leases before the *earlier* of the two, so the trust window is
`min(lease, stale_after) - safety_margin`. And since a user who sets a long lease means
to tolerate long pauses, `stale_after` defaults to `max(3 heartbeats, lease)`: equal to
the design's 3 heartbeats at the default ratio, never shorter than the lease.
"""

from __future__ import annotations

import inspect
import math
import os
import warnings
from collections.abc import Mapping
from dataclasses import Field, dataclass, field, fields, replace
from typing import Any, Final

from heartq import payload
from heartq.errors import ConfigError, RenamedWarning

DEFAULT_URL = "sqlite:///heartq.db"
"""Defaults to a SQLite file `heartq.db` in the working directory."""
DEFAULT_HEARTBEAT_INTERVAL = 30.0
"""Defaults to 30 s between two heartbeats of a worker."""
LEASE_HEARTBEATS = 3.0
"""The lease defaults to 3 heartbeat intervals (90 s): two missed heartbeats are tolerated."""
STALE_HEARTBEATS = 3.0
"""A worker is stale, and marked inactive, after 3 missed heartbeat intervals."""
DEFAULT_PULSE_INTERVAL = 1.0
"""Defaults to 1 s between two pulses of a worker (at most its heartbeat interval): what its
tasks report is written, and cancels are looked for, about once a second."""
DEFAULT_LIVENESS_INTERVAL = 1.0
"""Defaults to 1 s between two probes of the workers' liveness locks."""
DEFAULT_RECLAIM_BATCH = 100
"""Defaults to reclaiming at most 100 expired leases per statement."""
DEFAULT_WORKER_RETENTION = 7 * 86400.0
"""Defaults to keeping inactive and stopped worker rows for 7 days."""
DEFAULT_JOB_RETENTION = 7 * 86400.0
"""Defaults to keeping succeeded and cancelled jobs for 7 days (dead jobs stay until purged)."""
DEFAULT_SUCCESS_TRACE_RETENTION = 30 * 86400.0
"""Defaults to remembering, for 30 days from its creation, the id of a succeeded job once
pruned: a job enqueued then may still depend on it (docs/design/pipelines.md, "Jobs that wait for
jobs"). Three weeks past the default job retention, at about 130 bytes a job on
PostgreSQL (40 on SQLite)."""
DEFAULT_PRUNE_INTERVAL = 600.0
DEFAULT_VACUUM_INTERVAL = 5.0
"""Defaults to pruning old rows every 10 minutes."""
DEFAULT_POLL_INTERVAL = 1.0
"""Defaults to 1 s: how long an idle worker waits for work when no wake-up comes."""
DEFAULT_SHUTDOWN_TIMEOUT = 30.0
"""Defaults to 30 s for running jobs to finish on SIGTERM before they are released."""
DEFAULT_MAX_PAYLOAD_BYTES = 1024 * 1024
"""Defaults to 1 MiB: the largest JSON encoding of a job's arguments, result or checkpoint."""
DEFAULT_PREFETCH = 0
"""Jobs a worker claims ahead of its free slots (docs/design/claim.md, "Claim ahead"): none."""
DEFAULT_CONCURRENCY = 10
"""Defaults to 10 jobs at once per worker."""
SAFETY_MARGIN_FRACTION = 1.0 / 6.0
"""A worker stops trusting its leases at `lease * (1 - 1/6)` after its last renewal."""

ENV_URL = "HEARTQ_URL"
ENV_OTEL = "HEARTQ_OTEL"
"""`heartq worker --otel`: `1` (or `true`, `yes`, `on`) traces the worker's jobs with
OpenTelemetry (`heartq.otel`; `Worker(otel=True)`); `0`, `false`, `no`, `off` or empty:
not. A flag rather than a number, so it is not a field of `Settings`."""


@dataclass(frozen=True)
class Setting:
    """What one setting of `Settings` means, written once beside its default: `heartq
    worker`'s options are made from it (`heartq.cli.worker_cmd`), and `Settings.from_env`
    reads its environment variable."""

    help: str
    """What it is, as `heartq worker --help` says it."""
    shown_default: str
    """Its default as an operator reads it (`30`, `3 heartbeats`), made from the
    constants above, never typed twice."""
    env: str | None = None
    """The `HEARTQ_*` variable that sets it, if any."""
    zero_ok: bool = False
    """0 is a meaning of its own (every other duration must be positive)."""
    worker_option: bool = False
    """`heartq worker` offers it as `--NAME` (dashes for underscores)."""
    whole: bool = False
    """A count, not seconds: a whole number."""


SETTING = "heartq.setting"
"""The key of a field's `Setting` in its dataclass metadata."""


def setting(default: Any, help: str, shown_default: str, **more: Any) -> Any:
    """A `Settings` field with its default and its `Setting`."""
    return field(default=default, metadata={SETTING: Setting(help, shown_default, **more)})


def setting_of(f: Field[Any]) -> Setting | None:
    """The `Setting` of a `Settings` field (None for a field declared without one)."""
    found = f.metadata.get(SETTING)
    return found if isinstance(found, Setting) else None


def _g(seconds: float) -> str:
    return f"{seconds:g}"


def check_url(url: str | None, given_as: str = "url") -> str | None:
    """`url` as given, None for "not given"; an empty one is a `ConfigError`: whoever
    typed `--url ''` (a variable that expanded to nothing) meant some queue, and falling
    back to `HEARTQ_URL` or the default would act on another one without a word. An
    empty `HEARTQ_URL` counts as unset, as shells and click treat empty variables. A URL
    that is not text (`App(123)`, bytes) is a `ConfigError` too, naming only its type:
    bytes may hold a password."""
    if url is not None and not isinstance(url, str):
        raise ConfigError(
            f"{given_as} must be a queue URL as text (sqlite:///heartq.db, "
            f"postgresql://...), got {type(url).__name__}"
        )
    if url is not None and not url.strip():
        raise ConfigError(
            f"{given_as} is empty: give a queue URL (sqlite:///heartq.db, "
            f"postgresql://...), or leave it out to use {ENV_URL}"
        )
    return url


def resolve_url(url: str | None, environ: Mapping[str, str] | None = None) -> str:
    """The `--url`/`url=` argument, else `HEARTQ_URL`, else the SQLite default."""
    env = os.environ if environ is None else environ
    return check_url(url) or env.get(ENV_URL) or DEFAULT_URL


@dataclass(frozen=True)
class Settings:
    """The protocol's timings. `None` means derived from `heartbeat_interval`."""

    heartbeat_interval: float = setting(
        DEFAULT_HEARTBEAT_INTERVAL,
        "Seconds between heartbeats",
        _g(DEFAULT_HEARTBEAT_INTERVAL),
        env="HEARTQ_HEARTBEAT_INTERVAL",
        worker_option=True,
    )
    lease: float | None = setting(
        None,
        "Lease length in seconds",
        f"{LEASE_HEARTBEATS:g} heartbeats",
        env="HEARTQ_LEASE",
        worker_option=True,
    )
    reclaim_interval: float | None = setting(
        None,
        "Seconds between passes of the lease reclaimer and the worker monitor",
        "1 heartbeat",
        env="HEARTQ_RECLAIM_INTERVAL",
        worker_option=True,
    )
    pulse_interval: float | None = setting(
        None,
        "Seconds between pulses: task progress and checkpoints written, cancels looked for",
        f"{DEFAULT_PULSE_INTERVAL:g}, at most the heartbeat interval",
        env="HEARTQ_PULSE_INTERVAL",
        worker_option=True,
    )
    liveness_interval: float = setting(
        DEFAULT_LIVENESS_INTERVAL,
        "Seconds between liveness-lock probes",
        _g(DEFAULT_LIVENESS_INTERVAL),
        worker_option=True,
    )
    stale_after: float | None = setting(
        None,
        "Seconds of silence after which a worker is stale",
        f"{STALE_HEARTBEATS:g} heartbeats, at least the lease",
    )
    reclaim_batch: int = setting(
        DEFAULT_RECLAIM_BATCH,
        "Expired leases reclaimed per statement",
        str(DEFAULT_RECLAIM_BATCH),
        whole=True,
    )
    worker_retention: float = setting(
        DEFAULT_WORKER_RETENTION,
        "Seconds inactive and stopped worker rows are kept",
        _g(DEFAULT_WORKER_RETENTION),
    )
    job_retention: float = setting(
        DEFAULT_JOB_RETENTION,
        "Seconds succeeded and cancelled jobs are kept",
        _g(DEFAULT_JOB_RETENTION),
    )
    success_trace_retention: float = setting(
        DEFAULT_SUCCESS_TRACE_RETENTION,
        "Seconds from its creation a pruned succeeded job's id is remembered, for depends_on",
        _g(DEFAULT_SUCCESS_TRACE_RETENTION),
        zero_ok=True,  # 0: no trace kept
    )
    blocked_retention: float | None = setting(
        None,
        "Seconds a dead job may hold the jobs it blocked (its dependents) before they are "
        "cancelled",
        "none: they wait as long as it is in the dead-letter queue",
        env="HEARTQ_BLOCKED_RETENTION",
    )
    prune_interval: float = setting(
        DEFAULT_PRUNE_INTERVAL, "Seconds between two prunes", _g(DEFAULT_PRUNE_INTERVAL)
    )
    vacuum_interval: float = setting(
        DEFAULT_VACUUM_INTERVAL,
        "Seconds between two light vacuums of the jobs table by a worker (PostgreSQL)",
        _g(DEFAULT_VACUUM_INTERVAL),
        zero_ok=True,  # 0: none, autovacuum alone
    )
    poll_interval: float = setting(
        DEFAULT_POLL_INTERVAL,
        "Seconds an idle worker waits before looking again",
        _g(DEFAULT_POLL_INTERVAL),
        worker_option=True,
    )
    shutdown_timeout: float = setting(
        DEFAULT_SHUTDOWN_TIMEOUT,
        "Seconds running jobs get to finish on SIGTERM",
        _g(DEFAULT_SHUTDOWN_TIMEOUT),
        zero_ok=True,  # 0: release running jobs at once
        worker_option=True,
    )
    max_payload_bytes: int = setting(
        DEFAULT_MAX_PAYLOAD_BYTES,
        "The largest JSON encoding of a job's arguments, result or checkpoint, in bytes",
        str(DEFAULT_MAX_PAYLOAD_BYTES),
    )
    safety_margin: float | None = setting(
        None,
        "Seconds before the reclaim horizon a worker stops trusting its leases",
        "1/6 of the reclaim horizon",
    )
    prefetch: int = setting(
        DEFAULT_PREFETCH,
        "Jobs a worker claims ahead of its free slots and holds, not started, under its "
        "lease (0: none); a higher-priority job enqueued meanwhile waits behind them",
        str(DEFAULT_PREFETCH),
        env="HEARTQ_PREFETCH",
        zero_ok=True,
        worker_option=True,
        whole=True,
    )
    pool_size: int | None = setting(
        None,
        "PostgreSQL: at most this many pooled connections per process",
        "the URL's ?pool_size=, else HEARTQ_POOL_SIZE, else 2",
    )
    """None: the URL's `?pool_size=`, else `HEARTQ_POOL_SIZE`, else 2
    (`store/postgres/connection.py`, which reads the variable)."""

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            meant = setting_of(f)
            if value is None or (meant is not None and meant.whole):
                continue  # a count is checked below
            if not isinstance(value, int | float) or isinstance(value, bool):
                raise ConfigError(f"{f.name} must be a number of seconds, got {value!r}")
            if not _in_range(value, setting_of(f)):
                raise ConfigError(f"{f.name} must be a positive number, got {value!r}")
        count = self.prefetch
        if not isinstance(count, int) or isinstance(count, bool) or count < 0:
            raise ConfigError(f"prefetch must be a whole number, 0 or more, got {self.prefetch!r}")
        payload.check_int("prefetch", count, minimum=0)  # claimed ahead: a database integer
        payload.check_int("reclaim_batch", self.reclaim_batch, minimum=1)
        if self.pool_size is not None and (
            not isinstance(self.pool_size, int) or self.pool_size < 1
        ):
            raise ConfigError(f"pool_size must be a positive whole number, got {self.pool_size!r}")
        if self.lease_seconds <= self.heartbeat_interval:
            raise ConfigError(
                f"lease ({self.lease_seconds:g} s) must be longer than heartbeat_interval "
                f"({self.heartbeat_interval:g} s), or a single late heartbeat loses every job"
            )
        if self.safety_margin_seconds >= self.reclaim_horizon:
            raise ConfigError("safety_margin must be shorter than the lease and stale_after")
        if self.stale_after is not None and self.stale_after <= self.heartbeat_interval:
            raise ConfigError(
                f"stale_after ({self.stale_after:g} s) must be longer than heartbeat_interval "
                f"({self.heartbeat_interval:g} s)"
            )

    @property
    def lease_seconds(self) -> float:
        return self.lease if self.lease is not None else LEASE_HEARTBEATS * self.heartbeat_interval

    @property
    def pulse_seconds(self) -> float:
        """Between two pulses: what the tasks reported is written, cancels are looked for."""
        chosen = DEFAULT_PULSE_INTERVAL if self.pulse_interval is None else self.pulse_interval
        return min(chosen, self.heartbeat_interval)

    @property
    def reclaim_interval_seconds(self) -> float:
        if self.reclaim_interval is not None:
            return self.reclaim_interval
        return self.heartbeat_interval

    # -- deprecated names (`RENAMED_SETTINGS`) ------------------------------------------
    @property
    def reap_interval(self) -> float | None:
        _warn_renamed("reap_interval", stacklevel=3)
        return self.reclaim_interval

    @property
    def reap_batch(self) -> int:
        _warn_renamed("reap_batch", stacklevel=3)
        return self.reclaim_batch

    @property
    def reap_interval_seconds(self) -> float:
        _warn_renamed("reap_interval_seconds", stacklevel=3)
        return self.reclaim_interval_seconds

    @property
    def stale_after_seconds(self) -> float:
        if self.stale_after is not None:
            return self.stale_after
        return max(STALE_HEARTBEATS * self.heartbeat_interval, self.lease_seconds)

    @property
    def reclaim_horizon(self) -> float:
        """The earliest a silent worker's jobs can be taken: lease expiry or staleness."""
        return min(self.lease_seconds, self.stale_after_seconds)

    def recovery_within(self, holds_lock: bool, grace: float) -> float:
        """At most how long after a worker's process dies its jobs are taken back (at the
        defaults: 1 s on SQLite, 4 s on PostgreSQL, 120 s behind a transaction-mode pooler
        without a direct URL): its lock, once free for the store's `grace`, at the next
        probe; without a lock, its silence past its stale threshold, at a peer's next
        monitor pass (every reclaim interval). Told in `worker_started`, so an operator sees
        what a pooled worker's missing lock costs before a crash shows it."""
        if holds_lock:
            return grace + self.liveness_interval
        return self.stale_after_seconds + self.reclaim_interval_seconds

    @property
    def safety_margin_seconds(self) -> float:
        if self.safety_margin is not None:
            return self.safety_margin
        return self.reclaim_horizon * SAFETY_MARGIN_FRACTION

    @property
    def trust_window(self) -> float:
        """How long after a renewal was *sent* a worker may still trust its leases."""
        return self.reclaim_horizon - self.safety_margin_seconds

    def with_overrides(self, **overrides: Any) -> Settings:
        """A copy with the given (non-None) settings replaced."""
        clean = {k: v for k, v in renamed_settings(overrides, 4).items() if v is not None}
        unknown = set(clean) - {f.name for f in fields(self)}
        if unknown:
            raise ConfigError(f"unknown setting(s): {', '.join(sorted(unknown))}")
        return replace(self, **clean)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **overrides: Any) -> Settings:
        """Settings from `HEARTQ_*` variables, with explicit overrides taking precedence."""
        env = renamed_env(os.environ if environ is None else environ)
        overrides = renamed_settings(overrides, 3)
        values: dict[str, Any] = {}
        env_settings = env_variables()
        described = {f.name: setting_of(f) for f in fields(cls)}
        for name, var in env_settings.items():
            raw = env.get(var)
            if raw is None or raw == "":
                continue
            meant = described[name]
            if meant is not None and meant.whole:  # a count: a whole number, 0 or more
                if not raw.strip().isdigit():
                    raise ConfigError(f"{var} must be a whole number, 0 or more, got {raw!r}")
                values[name] = int(raw)
                continue
            try:
                values[name] = float(raw)
            except ValueError:
                raise ConfigError(f"{var} must be a number of seconds, got {raw!r}") from None
            if not _in_range(values[name], meant):
                raise ConfigError(f"{var} must be a positive number of seconds, got {raw!r}")
        from_env = {var: env[var] for name, var in env_settings.items() if name in values}
        values.update({k: v for k, v in overrides.items() if v is not None})
        try:
            return cls().with_overrides(**values)
        except ConfigError as exc:
            if not from_env:
                raise
            # Name the variables: the operator who set them is rarely the one who reads this.
            given = ", ".join(f"{var}={raw}" for var, raw in from_env.items())
            raise ConfigError(f"{exc} (from the environment: {given})") from None


def _in_range(value: float, described: Setting | None) -> bool:
    """A setting's number is finite and positive (0 too where it has a meaning)."""
    zero_ok = described is not None and described.zero_ok
    return math.isfinite(value) and value >= 0 and (value > 0 or zero_ok)


def env_variables() -> dict[str, str]:
    """Setting name -> the `HEARTQ_*` variable that sets it, for the settings that have
    one."""
    out = {}
    for f in fields(Settings):
        described = setting_of(f)
        if described is not None and described.env is not None:
            out[f.name] = described.env
    return out


def worker_options() -> list[tuple[str, Setting]]:
    """The settings `heartq worker` offers as options, in the order of `Settings`."""
    out = []
    for f in fields(Settings):
        described = setting_of(f)
        if described is not None and described.worker_option:
            out.append((f.name, described))
    return out


# -- deprecated names ---------------------------------------------------------------------
RENAMED_SETTINGS: Final = {
    "reap_interval": "reclaim_interval",
    "reap_batch": "reclaim_batch",
    "reap_interval_seconds": "reclaim_interval_seconds",
}
"""Old setting name -> its name (kept for one version, then removed)."""
RENAMED_ENV: Final = {"HEARTQ_REAP_INTERVAL": "HEARTQ_RECLAIM_INTERVAL"}
"""Old environment variable -> its name (kept for one version, then removed)."""


def _warn_renamed(old: str, stacklevel: int) -> None:
    warnings.warn(
        f"the setting {old!r} is deprecated: use {RENAMED_SETTINGS[old]!r}",
        RenamedWarning,
        stacklevel=stacklevel,
    )


def renamed_settings(given: Mapping[str, Any], stacklevel: int = 3) -> dict[str, Any]:
    """`given` with each old setting name (`RENAMED_SETTINGS`) under its new one, with a
    `DeprecationWarning`; both given (and set) is a `ConfigError`."""
    out = dict(given)
    for old, new in RENAMED_SETTINGS.items():
        if old not in out:
            continue
        value = out.pop(old)
        if value is None:
            continue
        _warn_renamed(old, stacklevel + 1)
        if out.get(new) is not None:
            raise ConfigError(f"{old} and {new} are the same setting: give {new} alone")
        out[new] = value
    return out


def renamed_env(environ: Mapping[str, str]) -> Mapping[str, str]:
    """`environ` with each old variable (`RENAMED_ENV`) that is set read as its new one,
    unless that one is set too, with a `DeprecationWarning`."""
    old_set = [old for old in RENAMED_ENV if environ.get(old)]
    if not old_set:
        return environ
    out = dict(environ)
    for old in old_set:
        new = RENAMED_ENV[old]
        warnings.warn(
            f"the variable {old} is deprecated: set {new}"
            + (f" ({new} is set too and wins)" if environ.get(new) else ""),
            RenamedWarning,
            stacklevel=4,
        )
        if not environ.get(new):
            out[new] = environ[old]
    return out


def _settings_init_taking_old_names() -> None:
    """`Settings(reap_interval=...)` still works (a `DeprecationWarning`): the generated
    `__init__`, behind one that renames the old keywords."""
    init = Settings.__init__

    def __init__(self: Settings, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **renamed_settings(kwargs, 3))

    __init__.__doc__ = init.__doc__
    __init__.__signature__ = inspect.signature(init)  # type: ignore[attr-defined]
    setattr(Settings, "__init__", __init__)  # noqa: B010 - a method mypy won't let be assigned


_settings_init_taking_old_names()
