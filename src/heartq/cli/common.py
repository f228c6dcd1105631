"""What every command shares: `--url`, `--json`, loading `APP`, and error reporting.

Exit status (docs/INTERFACE.md): 0 done, 1 an operational error (one clear line on stderr, no
traceback unless `--debug`), 2 a usage error (click's own).
"""

from __future__ import annotations

import importlib
import json
import os
import sys
import traceback
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import click
from click.core import ParameterSource

from heartq import payload
from heartq.config import check_url, resolve_url
from heartq.errors import ConfigError
from heartq.store import Store, open_store, redact_text

if TYPE_CHECKING:
    from heartq.app import App

EXIT_OPERATIONAL = 1
"""The exit status of a command that failed for a reason outside its input (the
database, a file, a worker that could not run)."""

F = TypeVar("F", bound=Callable[..., Any])

GROUP_URL = "heartq.url"
"""Where `heartq --url URL COMMAND` leaves the URL typed before the command (`ctx.meta`,
shared by every context of one invocation), for the command's own `--url` to pick up."""


def url_from_anywhere(ctx: click.Context, param: click.Parameter, value: str | None) -> Any:
    """`--url` typed after the command wins; then `--url` typed before it; then
    `HEARTQ_URL` (click's envvar); so the option works on either side of the command.
    A typed `--url ''` is an error (`check_url`), never the variable's queue instead."""
    if param.name and ctx.get_parameter_source(param.name) is ParameterSource.COMMANDLINE:
        return check_url(value, "--url")
    if GROUP_URL in ctx.meta:
        return check_url(ctx.meta[GROUP_URL], "--url")
    return value


def url_typed(ctx: click.Context) -> bool:
    """True when `--url` was typed on the command line, before or after the command
    (for `heartq worker`, where a typed URL beats the app's own)."""
    return ctx.get_parameter_source("url") is ParameterSource.COMMANDLINE or GROUP_URL in ctx.meta


def url_option(fn: F) -> F:
    return click.option(
        "--url",
        envvar="HEARTQ_URL",
        default=None,
        callback=url_from_anywhere,
        help="Queue URL (sqlite:///heartq.db, postgresql://...). Env: HEARTQ_URL. "
        "Also accepted before the command.",
    )(fn)


class EnvOption(click.Option):
    """An option whose value may come from a `HEARTQ_*` variable (`envvar=`): a bad value
    from there is an error naming the variable (one line, exit 1), as
    `Settings.from_env` says it for the settings, not click's `Invalid value for
    '--startup-timeout'` about an option nobody typed."""

    def process_value(self, ctx: click.Context, value: Any) -> Any:
        try:
            return super().process_value(ctx, value)
        except click.BadParameter as exc:
            if not self.name or ctx.get_parameter_source(self.name) is not (
                ParameterSource.ENVIRONMENT
            ):
                raise
            raise ConfigError(f"{self.envvar}={value!r} is not valid: {exc.message}") from None


class Seconds(click.FloatRange):
    """A duration typed on the command line (`--older-than`, `--interval`, `--lease`,
    `--delay` ...): a number of seconds within its range, as `click.FloatRange` reads it,
    and a duration heartq takes (`payload.duration_problem`: finite, at most ten years).
    A range alone lets `nan` through (it compares with nothing), and `inf` or `1e400`
    (which Python reads as infinity) would be an unexpected error or an age of "365000
    days"; each is a usage error instead (exit 2), in one line naming the option."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        seconds = super().convert(value, param, ctx)
        problem = payload.duration_problem(seconds)
        if problem is not None:
            self.fail(f"{problem}, got {str(value)!r}.", param, ctx)
        return seconds


def comma_separated(value: str, what: str, example: str) -> list[str]:
    """A list typed as one option, separated by commas (`--queues a,b`, `--depends-on
    ID,ID`), spaces around each item dropped. An empty item (`''`, `a,,b`, a trailing
    comma) is refused (`ValueError`, its message for a usage error), never skipped:
    whoever typed it meant something there, maybe a variable that expanded to nothing."""
    items = [item.strip() for item in value.split(",")]
    if not all(items):
        raise ValueError(
            f"{value!r} holds an empty {what}: give {what}s separated by commas, like {example}"
        )
    return items


class Count(click.IntRange):
    """An integer option (`--limit`, `--concurrency`, `--prefetch`, `--priority`, ...):
    from `minimum` to the 32-bit maximum, as every integer heartq hands the database
    (`payload.check_int`). Anything past it is a usage error (exit 2) in one line,
    `Invalid value for '--limit': 99999999999999999999 is not in the range
    1<=x<=2147483647.`, not an overflow of SQLite's or PostgreSQL's own."""

    def __init__(self, minimum: int = payload.INT32[0]) -> None:
        super().__init__(min=minimum, max=payload.INT32[1])


DEFAULT_LIST_LIMIT = 100
"""Defaults to listing the 100 newest jobs."""


def limit_option(fn: F) -> F:
    return click.option(
        "--limit",
        type=Count(1),
        default=DEFAULT_LIST_LIMIT,
        show_default=True,
        help="At most this many jobs, newest first.",
    )(fn)


def json_option(fn: F) -> F:
    return click.option("--json", "as_json", is_flag=True, help="Print JSON.")(fn)


def store_for(url: str | None, *, existing: bool = False, reading: bool = False) -> Store:
    """The queue at `url` (else `HEARTQ_URL`, else `sqlite:///heartq.db`), migrated.

    `existing=True` for the commands that only look at or act on what is there (lists,
    `jobs show`, `stats`, `dlq purge`, ...): a SQLite file that does not exist is then an
    error naming its absolute path, instead of a new empty queue created wherever the
    command happened to run (and a misleading "no jobs"). `reading=True` for those that
    only look (`jobs list|show|watch`, `workers`, `tasks`, `stats`, `periodic`, `dlq
    list`): a SQLite file they may read but not write is read (an up-to-date schema
    needs no write), not refused.

    Closed when the command ends (its click context closes, on an error too): its
    sessions end cleanly, and a command run inside a longer-lived process (a test's,
    through `click.testing.CliRunner`) leaves no connection or pool thread behind."""
    resolved = resolve_url(url)
    if existing:
        require_existing_sqlite(resolved)
    store = open_store(resolved, reading=reading)
    ctx = click.get_current_context(silent=True)
    if ctx is not None:
        ctx.call_on_close(store.link.close)
    store.link.migrate()
    return store


def require_existing_sqlite(url: str) -> None:
    """Raise a one-line `ConfigError` when `url` names a SQLite file that does not exist
    in a directory that does (a missing directory is reported by the store itself)."""
    if not url.lower().startswith("sqlite:"):
        return
    from heartq.store.sqlite.store import path_from_url

    path = path_from_url(url).absolute()
    if path.exists() or not path.parent.is_dir():
        return
    raise ConfigError(
        f"no queue at {path} (the file does not exist): run `heartq migrate` to create "
        "one there, or point at yours with --url or HEARTQ_URL"
    )


def scrub(text: str) -> str:
    """`text` with the secrets of any URL in it replaced by `***` (error messages may
    quote a URL, e.g. a driver's; a password is never printed). The rules live in one
    place, `heartq.store.redact`: `user:password@`, `password=` and `sslpassword=`."""
    return redact_text(text)


def print_json(value: Any) -> None:
    click.echo(json.dumps(value, indent=2, ensure_ascii=False, default=str))


def _raised_at(exc: BaseException, ref: str) -> str:
    """Where in the app's code a heartq refusal came from while APP was imported (`raised
    by tasks.py, line 3, while importing APP 'tasks:app'`): the module imported fine up to
    that line, which is heartq's call (`heartq.App()` reading `HEARTQ_LEASE=-3`), so the
    error is said as it is, not blamed on the import."""
    package = os.path.dirname(os.path.abspath(__file__)).rsplit(os.sep, 1)[0] + os.sep
    caller = None
    for frame, line in traceback.walk_tb(exc.__traceback__):
        name = frame.f_code.co_filename
        if not name.startswith("<") and not os.path.abspath(name).startswith(package):
            caller = (name, line)
    if caller is None:
        return f"while importing APP {ref!r}"
    return f"raised by {os.path.basename(caller[0])}, line {caller[1]}, while importing APP {ref!r}"


def load_app(ref: str) -> App:
    """`module:attribute` or `module` (then its attribute `app`), imported with the working
    directory on the import path. Errors name the module and say why."""
    # Imported here, as each command's own module is (`heartq.cli.main.COMMANDS`): the
    # commands that load no app do not pay for it at start-up.
    from heartq.app import App

    module_name, _, attr = ref.partition(":")
    attr = attr or "app"
    if not module_name:
        raise ConfigError(f"bad APP {ref!r}: expected module:attribute, e.g. tasks:app")
    cwd = os.getcwd()
    if cwd not in sys.path:
        sys.path.insert(0, cwd)
    try:
        module = importlib.import_module(module_name)
    except ConfigError as exc:  # heartq's own refusal (a HEARTQ_* variable, a setting)
        raise ConfigError(f"{exc} ({_raised_at(exc, ref)})") from exc
    except Exception as exc:
        raise ConfigError(
            f"cannot import APP {ref!r}: module {module_name!r} failed to import: "
            f"{type(exc).__name__}: {exc}"
        ) from exc
    try:
        app = getattr(module, attr)
    except AttributeError:
        raise ConfigError(
            f"cannot load APP {ref!r}: module {module_name!r} has no attribute {attr!r}"
        ) from None
    if not isinstance(app, App):
        raise ConfigError(
            f"cannot load APP {ref!r}: {module_name}.{attr} is a {type(app).__name__}, "
            "not a heartq.App"
        )
    return app
