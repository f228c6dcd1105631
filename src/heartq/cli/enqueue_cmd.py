"""`heartq enqueue TASK`: queue one job from the command line, its arguments given as
JSON (typed, from a file or from stdin)."""

from __future__ import annotations

import json
import sys
import warnings
from datetime import datetime
from typing import Any

import click

from heartq import payload
from heartq.app import App
from heartq.cli.common import Count, F, Seconds, comma_separated, print_json, url_option
from heartq.config import resolve_url
from heartq.errors import AlreadyEnqueued, ConfigError, JobNotFound, TaskNotDeclaredWarning
from heartq.options import OPTIONS, Option, eta_problem, parse_eta


def read_args_text(value: str | None) -> str | None:
    """`--args` as typed: JSON itself, `@PATH` (a file's content) or `-` (stdin). A file
    or stdin carries what a command line cannot (a 2 MB value is over the kernel's
    limit for one argument: "Argument list too long")."""
    if value is None or (value != "-" and not value.startswith("@")):
        return value
    if value == "-":
        return sys.stdin.read()
    path = value[1:]
    if not path:
        raise ConfigError("--args @PATH needs a file name after the @, e.g. --args @args.json")
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except OSError as exc:
        raise ConfigError(f"--args {value}: cannot read {path}: {exc.strerror}") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"--args {value}: {path} is not UTF-8 text ({exc.reason})") from None


def parse_args_json(text: str | None) -> dict[str, Any]:
    """`--args` as a JSON object; one clear line saying what is wrong and where."""
    if text is None:
        return {}
    try:
        value = json.loads(text, parse_constant=_refuse_constant)
    except RecursionError:  # what `payload.encode` would refuse anyway, said the same way
        raise payload.too_deep("--args") from None
    except json.JSONDecodeError as exc:
        raise ConfigError(
            f"--args is not valid JSON: {exc.msg} at line {exc.lineno}, column {exc.colno} "
            f"(character {exc.pos}) of {_shorten(text)!r}"
        ) from None
    if not isinstance(value, dict):
        raise ConfigError(
            f"--args must be a JSON object of keyword arguments, like '{{\"x\": 1}}', "
            f"got a JSON {_json_kind(value)}"
        )
    return value


def _refuse_constant(name: str) -> Any:
    raise ConfigError(f"--args is not valid JSON: {name} is not a JSON number")


def _shorten(text: str, limit: int = 60) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _json_kind(value: Any) -> str:
    if isinstance(value, list):
        return "array"
    if isinstance(value, str):
        return "string"
    if isinstance(value, bool):
        return "boolean"
    if value is None:
        return "null"
    return "number"


class EtaType(click.ParamType[datetime]):
    """`--eta TIME`, read by `heartq.options.parse_eta`, no further ahead than a delay may
    be (`eta_problem`); a bad one is a usage error."""

    name = "time"

    def convert(
        self, value: Any, param: click.Parameter | None, ctx: click.Context | None
    ) -> datetime:
        if isinstance(value, datetime):
            return value
        try:
            eta = parse_eta(str(value))
        except ConfigError as exc:
            self.fail(str(exc), param, ctx)
        problem = eta_problem(eta)  # as --delay's bound is checked: a usage error
        if problem is not None:
            self.fail(f"{problem}.", param, ctx)
        return eta


def click_type(option: Option) -> click.ParamType[Any] | None:
    """How the command line reads an option's value: its kind, bounded below by its
    minimum (a bad value is a usage error, exit 2); None: text."""
    if option.kind is int:
        return Count() if option.minimum is None else Count(option.minimum)
    if option.kind is float:
        return Seconds(min=option.minimum)
    if option.kind is datetime:
        return EtaType()
    if option.kind is dict:
        return JSON_OBJECT
    if option.kind is list:
        return JOB_IDS
    if option.choices is not None:  # as written: `RAISE` is not `raise`, nor `''` anything
        return click.Choice(option.choices)
    return None


class JobIds(click.ParamType[list[str]]):
    """`--depends-on ID,ID`: job ids, comma-separated (`comma_separated`: an empty one
    is a usage error, as in `--queues`), each full or shortened as `heartq jobs show`
    takes them (resolved against the queue before the enqueue; a succeeded job since
    pruned by its whole id)."""

    name = "ids"

    def convert(
        self, value: Any, param: click.Parameter | None, ctx: click.Context | None
    ) -> list[str]:
        if isinstance(value, list):
            return value
        try:
            return comma_separated(str(value), "job id", "04206418,7c2a91e0")
        except ValueError as exc:
            self.fail(str(exc), param, ctx)


JOB_IDS = JobIds()


def _dependency(app: App, ref: str) -> str:
    """A `--depends-on` id as the queue knows it (a shortened one resolved); one it does
    not find is given as typed: the enqueue counts a succeeded job since pruned, and
    refuses anything else (`DependencyNotFound`)."""
    try:
        return app.store.resolve_job_id(ref)
    except JobNotFound:
        return ref


class JsonObject(click.ParamType[dict[str, Any]]):
    """An option whose value is a JSON object (`--meta '{"tenant": "a"}'`)."""

    name = "json"

    def convert(
        self, value: Any, param: click.Parameter | None, ctx: click.Context | None
    ) -> dict[str, Any]:
        if isinstance(value, dict):
            return value
        try:
            found = json.loads(value)
        except json.JSONDecodeError as exc:
            self.fail(f"not valid JSON: {exc.msg} at character {exc.pos}", param, ctx)
        if not isinstance(found, dict):
            self.fail(f"must be a JSON object, got a JSON {_json_kind(found)}", param, ctx)
        return found


JSON_OBJECT = JsonObject()


def enqueue_options(fn: F) -> F:
    """`--queue`, `--priority`, ...: an option for each of `heartq.options.OPTIONS`, with
    its help and default as written there."""
    for option in reversed(OPTIONS):
        if option.kind is bool:  # `--unique/--no-unique`: neither given is None
            flags = f"{option.flag}/--no-{option.flag[2:]}"
            fn = click.option(flags, default=None, help=option.help_text)(fn)
            continue
        fn = click.option(
            option.flag,
            type=click_type(option),
            default=None,
            metavar=option.metavar,
            help=option.help_text,
        )(fn)
    return fn


@click.command("enqueue")
@click.argument("task")
@url_option
@click.option(
    "--args",
    "args_text",
    metavar="JSON|@FILE|-",
    default=None,
    help='Keyword arguments as a JSON object, e.g. \'{"repo_url": "..."}\'; '
    "@FILE reads it from a file, - from stdin.",
)
@enqueue_options
@click.option(
    "--strict",
    is_flag=True,
    help="Refuse a task no worker has declared yet, instead of queueing it with the defaults.",
)
@click.option("--json", "as_json", is_flag=True, help='Print {"id": ...} as JSON.')
def enqueue_command(
    task: str,
    url: str | None,
    args_text: str | None,
    strict: bool,
    as_json: bool,
    **options: Any,
) -> None:
    """Queue one job of TASK; prints the new job's id.

    The job takes the options its task's workers declared (queue, priority, retries,
    backoff) unless given here. A task no worker has declared yet is queued with the
    defaults, with a warning; its job moves to the task's queue and policy as soon as a
    worker declares it (--strict refuses it instead). With --unique-key (or --unique: a
    key from the task and the arguments), a job with that key still queued or running
    (or finished within --unique-for) is answered instead, and a line on stderr says so
    (--on-conflict raise: an error, exit status 1). A task declared unique=True keys its
    jobs by their arguments without --unique (its holder's id answered quietly);
    --no-unique stores one anyway."""
    args = parse_args_json(read_args_text(args_text))
    app = App(resolve_url(url), strict_tasks=strict)
    try:
        if options.get("depends_on"):
            options["depends_on"] = [_dependency(app, ref) for ref in options["depends_on"]]
        keyed = options.get("unique_key") is not None or options.get("unique") is True
        quiet = keyed and options.get("on_conflict") != "raise"
        held: AlreadyEnqueued | None = None
        with warnings.catch_warnings(record=True) as heard:
            warnings.simplefilter("always", TaskNotDeclaredWarning)
            try:  # asked to raise, so the command can say which job answered
                chosen = {**options, "on_conflict": "raise"} if keyed else options
                job_id = app.enqueue(task, args, **chosen)
            except AlreadyEnqueued as conflict:
                if not quiet:
                    raise
                job_id, held = conflict.job_id, conflict
    finally:
        app.close()
    if held is not None:  # answered, as asked, and said: stdout gets the id either way
        click.echo(f"heartq: {held}", err=True)
    for warning in heard:  # ours as one line; any other as Python shows it
        if issubclass(warning.category, TaskNotDeclaredWarning):
            click.echo(f"heartq: warning: {warning.message} (--strict refuses instead)", err=True)
        else:
            warnings.showwarning(
                warning.message, warning.category, warning.filename, warning.lineno
            )
    if as_json:
        print_json({"id": job_id, "existing": held is not None})
    else:
        click.echo(job_id)
