"""The options of one enqueue, written once: each one's name, type, meaning, default and
check. `Task.options`, `App.enqueue`, `App.enqueue_many` and their async twins take them
as keyword arguments typed by `EnqueueOptions`; `heartq enqueue` makes its `--queue`,
`--priority`, ... from `OPTIONS`; `Options` checks a set of them once, for every way in.

Why a `TypedDict` with `Unpack` rather than the twelve keywords written out in each
signature: mypy (strict) checks each keyword's name and type exactly as before, editors
(Pylance, PyCharm) list and complete the keywords from it, and a tenth option is added
here and nowhere else.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypedDict, Unpack

from heartq import payload, rates
from heartq.errors import ConfigError
from heartq.lifecycle.retry import DEFAULT_MAX_RETRIES
from heartq.model import DependencyFailure, Pipeline
from heartq.policy import DEFAULT_PRIORITY, DEFAULT_QUEUE

UniqueKey = str | Callable[[Mapping[str, Any]], str | None] | None
"""A job's unique key: a string, a function of its arguments (`enqueue_many`), or none."""
Dependency = str | Pipeline
"""What a job may depend on: a job's id (what `enqueue` returns), or what a pipeline's
`enqueue` returns (`heartq.chain`, `heartq.group`: the job depends on its `tail`)."""


class StepOptions(TypedDict, total=False):
    """What a caller may choose for a step of a pipeline (`Signature.set`): every enqueue
    option but the unique key's (`NOT_FOR_STEPS`). An option left out (or None) is left
    to the task's policy. What each means, its default and its check: `OPTIONS`."""

    queue: str | None
    priority: int | None
    delay: float | None
    eta: datetime | None
    expires: float | datetime | None
    max_retries: int | None
    concurrency_key: str | None
    concurrency_limit: int | None
    rate_key: str | None
    rate_limit: str | None
    fair_key: str | None
    fair_weight: float | None
    meta: Mapping[str, Any] | None
    depends_on: Sequence[Dependency] | Dependency | None
    on_dependency_failure: str | None


class EnqueueOptions(StepOptions, total=False):
    """What a caller may choose for an enqueue: a step's options and a unique key's."""

    unique_key: UniqueKey
    unique: bool | None
    unique_for: float | None
    on_conflict: str | None


NOT_FOR_STEPS = ("unique_key", "unique", "unique_for", "on_conflict")
"""The options a pipeline's step does not take. A pipeline's jobs are laid out before
they are stored, each waiting for the ids of the steps before it; a step whose unique
key another job holds would be answered by that job's id and never stored, and the steps
after it would wait for a job that does not exist."""


ON_CONFLICT = ("return", "raise")
"""What an enqueue does when a job already holds its `unique_key`: answer that job's id
(`return`, the default: an enqueue that may repeat is harmless), or raise
`heartq.AlreadyEnqueued` naming it (`raise`: the caller wants to know)."""


def parse_eta(text: str) -> datetime:
    """How `heartq enqueue --eta` is read: an ISO 8601 time (Python's
    `datetime.fromisoformat`) with its UTC offset (`+01:00`, `+0100` or `Z`), to the
    minute, the second or a fraction of one (`2026-12-01T09:00:00.250+01:00`), `T` or a
    space between date and time. A time without an offset is refused: the database's
    clock is UTC, the shell's zone is a guess, and a guess off by hours is silent."""
    try:
        value = datetime.fromisoformat(text.strip())
    except ValueError:
        raise ConfigError(
            f"{text!r} is not an ISO 8601 time with its UTC offset, like "
            "2026-12-01T09:00:00+01:00 or 2026-12-01T08:00:00.5Z"
        ) from None
    if value.tzinfo is None or value.utcoffset() is None:
        raise ConfigError(
            f"{text!r} has no UTC offset: add one, like {value.isoformat()}+01:00 or "
            f"{value.isoformat()}Z"
        )
    return value


def eta_problem(value: datetime) -> str | None:
    """What makes an aware `eta` no time heartq takes, said after its name, or None: a
    time further ahead than a delay may be (`payload.duration_problem`: ten years). An
    eta is a delay given as a time, and a year-9999 one is the same mistake as a delay of
    8,000 years (which the store would otherwise cut to ten without a word)."""
    ahead = value.timestamp() - time.time()
    problem = payload.duration_problem(max(ahead, 0.0))
    if problem is None:
        return None
    return f"{problem} ahead, as a delay, got {value.isoformat()}"


@dataclass(frozen=True)
class Option:
    """One option of an enqueue: its `name` (an `EnqueueOptions` key), the `kind` of its
    value, what it means (`help`), its `minimum` (numbers), the words it takes
    (`choices`: `heartq enqueue` offers those and no other), how its default reads
    (`shown_default`; None: it has none worth saying), and its `check` of one value
    (`ConfigError` naming it)."""

    name: str
    kind: type
    help: str
    check: Callable[[Option, Any], object]
    minimum: int | None = None
    metavar: str | None = None
    shown_default: str | None = None
    choices: tuple[str, ...] | None = None

    @property
    def flag(self) -> str:
        """`heartq enqueue`'s spelling: `--max-retries`."""
        return "--" + self.name.replace("_", "-")

    @property
    def help_text(self) -> str:
        """The help line, with the default: `Higher runs first [0].`"""
        if self.shown_default is None:
            return f"{self.help}."
        return f"{self.help} [{self.shown_default}]."


def _name(option: Option, value: str | None) -> None:
    if value is not None:
        payload.check_name(option.name, value)


def _int(option: Option, value: int | None) -> None:
    if option.minimum is None:
        payload.check_int(option.name, value)
    else:
        payload.check_int(option.name, value, minimum=option.minimum)


def _seconds(option: Option, value: float | None) -> None:
    payload.check_duration(option.name, value, allow_zero=option.minimum == 0)


def _eta(option: Option, value: datetime | None) -> None:
    if value is None:
        return
    if not isinstance(value, datetime):
        raise ConfigError(f"{option.name} must be a datetime, got {value!r}")
    if value.tzinfo is None or value.utcoffset() is None:
        raise ConfigError(
            f"{option.name} must be timezone-aware (e.g. datetime.now(timezone.utc)), got "
            f"the naive {value.isoformat()}"
        )
    problem = eta_problem(value)
    if problem is not None:
        raise ConfigError(f"{option.name} {problem}")


def _expires(option: Option, value: float | datetime | None) -> None:
    """A positive number of seconds from the enqueue, or an aware time (one already past
    expires the job at once: a race with the clock is no mistake of the caller's)."""
    if value is None:
        return
    if isinstance(value, datetime):
        if value.tzinfo is None or value.utcoffset() is None:
            raise ConfigError(
                f"{option.name} must be timezone-aware (e.g. datetime.now(timezone.utc)), "
                f"got the naive {value.isoformat()}"
            )
        problem = payload.duration_problem(max(value.timestamp() - time.time(), 0.0))
        if problem is not None:
            raise ConfigError(f"{option.name} {problem} ahead, got {value.isoformat()}")
        return
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigError(
            f"{option.name} must be seconds from now or an aware datetime, got {value!r}"
        )
    payload.check_duration(option.name, value, allow_zero=False)


def _unique_key(option: Option, value: UniqueKey) -> None:
    if value is not None and not callable(value):
        payload.check_unique_key(value)


def _flag(option: Option, value: bool | None) -> None:
    if value is not None and not isinstance(value, bool):
        raise ConfigError(f"{option.name} must be True or False, got {value!r}")


def _meta(option: Option, value: Mapping[str, Any] | None) -> None:
    if value is not None:
        payload.check_meta(value)


def _depends_on(option: Option, value: Any) -> None:
    if value is not None:
        dependency_ids(value)


def _choice(option: Option, value: Any) -> None:
    """One of the option's `choices`, as written (`RAISE` is not `raise`)."""
    choices = option.choices or ()
    if value is not None and value not in choices:
        listed = ", ".join(repr(choice) for choice in choices)
        raise ConfigError(f"{option.name} must be one of {listed}, got {value!r}")


def dependency_ids(value: Sequence[Dependency] | Dependency) -> list[str]:
    """The job ids a `depends_on` names: ids as given, a pipeline's `tail`, in order, each
    once; `ConfigError` for anything else."""
    items = [value] if isinstance(value, str | Pipeline) else value
    if not isinstance(items, list | tuple):
        raise ConfigError(f"depends_on must be a list of job ids, got {value!r}")
    flat: list[Any] = []
    for item in items:
        flat.extend(item.tail if isinstance(item, Pipeline) else [item])
    return payload.check_dependencies(flat)


def _paired(option: Option, value: Any) -> None:
    """Checked with its pair (`check_together`)."""


def _key(option: Option, value: str | None) -> None:
    if value is not None:
        payload.check_key(option.name, value)


def _rate(option: Option, value: str | None) -> None:
    if value is not None:
        rates.parse_rate(value, option.name)


def _weight(option: Option, value: float | None) -> None:
    """Checked with its key, the enqueue's or its task's (`payload.check_fair`), except
    its number."""
    if value is not None:
        payload.check_fair("-", value)


OPTIONS: tuple[Option, ...] = (
    Option("queue", str, "Queue", _name, shown_default=f"the task's, else {DEFAULT_QUEUE}"),
    Option(
        "priority", int,
        "Higher runs first: the reverse of BullMQ, Oban and Celery on Redis, where lower "
        "does (negate theirs: their 1 is -1 here)", _int,
        shown_default=f"{DEFAULT_PRIORITY}",
    ),
    Option(
        "delay", float, "Seconds before the job may run", _seconds,
        minimum=0, metavar="S", shown_default="0",
    ),
    Option(
        "eta", datetime,
        "When the job may first run: ISO 8601 with its UTC offset, 2026-12-01T09:00:00+01:00 "
        "(seconds may have a fraction; Z for UTC)", _eta,
        metavar="TIME",
    ),
    Option(
        "expires", float,
        "Seconds from now (Python: or an aware datetime) by which the job must have "
        "started: a job not started by then ends cancelled without running, not late",
        _expires, metavar="S", shown_default="the task's, else none",
    ),
    Option(
        "max_retries", int,
        "Retries after the first attempt: 3 means 4 attempts in all (BullMQ's attempts and "
        "Oban's max_attempts count the first: give theirs minus one)", _int,
        minimum=0, metavar="N", shown_default=f"the task's, else {DEFAULT_MAX_RETRIES}",
    ),
    Option(
        "unique_key", str,
        "While a job with this key is queued or running, print its id and store nothing",
        _unique_key, metavar="KEY",
    ),
    Option(
        "unique", bool,
        "Key the job by its task and arguments (args:TASK:SHA-256 of their canonical JSON): "
        "while a job with the same arguments is queued or running, print its id and store "
        "nothing; --no-unique opts out of a task declared unique=True",
        _flag,
    ),
    Option(
        "unique_for", float,
        "With --unique-key or --unique: a job with the key that finished within S seconds "
        "counts too",
        _seconds, minimum=0, metavar="S",
    ),
    Option(
        "on_conflict", str,
        "With --unique-key or --unique, when a job holds the key: answer its id (return) "
        "or fail naming it (raise)", _choice, metavar="return|raise", shown_default="return",
        choices=ON_CONFLICT,
    ),
    Option(
        "concurrency_key", str,
        "With --concurrency-limit: at most that many jobs with this key run at once",
        _paired, metavar="KEY",
    ),
    Option(
        "concurrency_limit", int,
        "How many jobs with --concurrency-key may run at once, across all workers",
        _paired, minimum=1, metavar="N",
    ),
    Option(
        "rate_key", str,
        "At most the task's rate limit (or --rate-limit) of jobs with this key start per "
        "period, across all workers",
        _key, metavar="KEY",
    ),
    Option(
        "rate_limit", str,
        "With --rate-key: starts per period for its jobs, like 10/s, 100/m, 5/h or 3/10s",
        _rate, metavar="N/PERIOD",
    ),
    Option(
        "fair_key", str,
        "Its share of the queue: among runnable jobs of one priority, claims take keys "
        "in turn (jobs without a key are one share), so one key's flood does not hold "
        "the others back",
        _key, metavar="KEY",
    ),
    Option(
        "fair_weight", float,
        "With a fair key (the enqueue's or its task's): the key's share in proportion "
        "to the others' weights", _weight, metavar="W", shown_default="1",
    ),
    Option(
        "meta", dict,
        "Metadata kept with the job, a JSON object (a tenant, a request id): the task "
        "reads it as ctx.meta, hooks too; it is not passed as an argument",
        _meta, metavar="JSON",
    ),
    Option(
        "depends_on", list,
        "Job ids (comma-separated) this job waits for: it is queued once every one has "
        "succeeded", _depends_on, metavar="ID,...",
    ),
    Option(
        "on_dependency_failure", str,
        "With --depends-on: what a dependency that ends dead does to this job: block it "
        "until that dependency is replayed (`heartq dlq replay`), cancel it, or run it "
        "anyway (a cancelled dependency cancels it, unless it runs anyway)", _choice,
        metavar="block|cancel|run", shown_default="block",
        choices=tuple(failure.value for failure in DependencyFailure),
    ),
)  # fmt: skip
"""Every option, in the order signatures and `heartq enqueue --help` list them."""

NAMES = frozenset(option.name for option in OPTIONS)


def check_together(chosen: EnqueueOptions) -> None:
    """The rules between options: `eta` or `delay`, `unique_key` or `unique=True`,
    `unique_for` and `on_conflict` not with `unique=False` (and only with a key: the
    caller's, or its task's `unique=True`, which the producer knows: `needs_a_key`),
    `concurrency_key` and `concurrency_limit` together or neither,
    `rate_limit` only with a `rate_key` (a key alone takes the task's limit),
    `depends_on` without a `unique_key` (an enqueue that answers another job's id would
    leave the dependencies to a job never stored), `on_dependency_failure` only with
    dependencies."""
    if chosen.get("eta") is not None and chosen.get("delay"):
        raise ConfigError("give either delay or eta, not both")
    derived = chosen.get("unique") is True
    if derived and chosen.get("unique_key") is not None:
        raise ConfigError(
            "give unique=True (a key from the task and its arguments) or a unique_key, not both"
        )
    keyed = derived or chosen.get("unique_key") is not None
    if chosen.get("unique") is False:
        for option in ("unique_for", "on_conflict"):
            if chosen.get(option) is not None:
                raise ConfigError(f"{option} needs a key, and unique=False asks for none")
    if chosen.get("depends_on") and keyed:
        key = "unique=True" if derived else "unique_key"
        raise ConfigError(f"depends_on cannot be combined with {key}")
    payload.check_concurrency(chosen.get("concurrency_key"), chosen.get("concurrency_limit"))
    if chosen.get("rate_limit") is not None and chosen.get("rate_key") is None:
        raise ConfigError(
            "rate_limit needs a rate_key: the limit of which key? (a task's own limit is "
            "declared with @app.task(rate_limit=...))"
        )


def needs_a_key(chosen: EnqueueOptions) -> None:
    """`ConfigError` for `unique_for` or `on_conflict` chosen for jobs that get no unique
    key: neither the caller's (`unique_key`, `unique=True`) nor their task's."""
    if chosen.get("unique_for") is not None:
        raise ConfigError(
            "unique_for needs a unique_key or unique=True (here, or declared by the task): "
            "the window of which key?"
        )
    if chosen.get("on_conflict") is not None:
        raise ConfigError(
            "on_conflict needs a unique_key or unique=True (here, or declared by the task): "
            "a conflict over which key?"
        )


class Options:
    """The options of one enqueue, checked: `ConfigError` naming the first bad one.
    `chosen` keeps them as given (None or left out: the task's policy decides)."""

    __slots__ = ("chosen",)

    def __init__(self, **chosen: Unpack[EnqueueOptions]) -> None:
        if chosen:  # none chosen (`task.enqueue(...)`, the common call): nothing to check
            for option in OPTIONS:
                option.check(option, chosen.get(option.name))
            check_together(chosen)
        self.chosen: EnqueueOptions = chosen

    @classmethod
    def given(cls, where: str, chosen: Mapping[str, Any]) -> Options:
        """Options passed as keywords to `where` (`App.enqueue`): an unknown keyword is
        the `TypeError` Python raises for a function without it."""
        for name in chosen:
            if name not in NAMES:
                raise TypeError(f"{where}() got an unexpected keyword argument {name!r}")
        return cls(**chosen)

    def key_for(self, args: Mapping[str, Any]) -> str | None:
        """The unique key of a job with these arguments (None: the job has none)."""
        key = self.chosen.get("unique_key")
        if callable(key):
            found = key(args)
            return None if found is None else payload.check_unique_key(found)
        return key

    @property
    def depends_on(self) -> tuple[str, ...]:
        """The job ids this enqueue's jobs wait for (`dependency_ids`)."""
        value = self.chosen.get("depends_on")
        return () if value is None else tuple(dependency_ids(value))

    @property
    def on_dependency_failure(self) -> DependencyFailure:
        chosen = self.chosen.get("on_dependency_failure")
        return DependencyFailure(chosen) if chosen else DependencyFailure.BLOCK

    @property
    def expires_in(self) -> float | None:
        """Seconds from now by which the job must have started (`expires`), or None: an
        aware time as seconds from this process's clock (the store dates it from the
        database's, as it does a delay)."""
        expires = self.chosen.get("expires")
        if expires is None:
            return None
        if isinstance(expires, datetime):
            return expires.timestamp() - time.time()
        return float(expires)

    @property
    def run_at(self) -> float | None:
        """When the job may first run (`eta`), in seconds since the epoch."""
        eta = self.chosen.get("eta")
        return None if eta is None else eta.timestamp()
