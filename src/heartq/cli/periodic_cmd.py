"""`heartq periodic`: the periodic schedules the fleet runs, with their last and next
tick (read from the database: what workers have enqueued, whatever this program imports);
`heartq periodic add|remove|pause|resume NAME` changes the runtime ones
(`heartq.runtime_schedules`), which every worker with `periodic` on obeys within about a
second, without a restart."""

from __future__ import annotations

import json

import click
from rich.text import Text

from heartq import display, ids, runtime_schedules
from heartq.cli import render
from heartq.cli.common import json_option, print_json, store_for, url_option
from heartq.errors import ConfigError
from heartq.runtime_schedules import schedule_dict


@click.group("periodic", invoke_without_command=True)
@url_option
@json_option
@click.pass_context
def periodic_group(ctx: click.Context, url: str | None, as_json: bool) -> None:
    """Periodic schedules with their last and next run, and the last tick's job.

    \b
    heartq periodic                              every schedule, code and runtime
    heartq periodic add NAME TASK --every 30     a runtime schedule (or --cron EXPR)
    heartq periodic remove NAME
    heartq periodic pause NAME                   its ticks pass without a job
    heartq periodic resume NAME
    """
    if ctx.invoked_subcommand is None:
        _show(url, as_json)


def _show(url: str | None, as_json: bool) -> None:
    store = store_for(url, existing=True, reading=True)
    schedules = [schedule_dict(row) for row in store.list_schedules()]
    if as_json:
        print_json(schedules)
        return
    console = render.make_console()
    if not schedules:
        console.print(
            "no periodic schedule yet: a worker whose app has @app.periodic tasks records "
            "each schedule when it first looks at it; heartq periodic add makes one"
        )
        return
    now = store.clock()
    t = render.table("SCHEDULE", "TASK", "SPEC", "FROM", "LAST RUN", "NEXT RUN", "LAST JOB")
    for s in schedules:
        job = "-"
        if s["last_job_id"]:
            job = f"{s['last_job_id'][-8:]} {s['last_job_status'] or 'pruned'}"
        next_run = "-" if s["next_run"] is None else display.fmt_ago(s["next_run"], now)
        t.add_row(
            Text(s["name"]),
            Text(s["task"]),
            Text(s["spec"]),
            Text(s["origin"]),
            display.fmt_ago(s["last_run"], now) if s["last_run"] else "never",
            Text("paused", style="bold yellow") if s["paused"] else next_run,
            job,
        )
    render.fit(t, console.width, shrink=("SCHEDULE", "TASK", "SPEC"), wrap=())
    console.print(t)


@periodic_group.command("add")
@click.argument("name")
@click.argument("task")
@click.option("--every", type=float, metavar="SECONDS", help="Tick every SECONDS (at least 1).")
@click.option("--cron", metavar="EXPR", help="Tick on a cron expression, e.g. '*/5 * * * *'.")
@click.option("--args", "args_json", metavar="JSON", help="The jobs' arguments, a JSON object.")
@click.option("--tz", default="UTC", show_default=True, help="The cron's time zone (IANA).")
@click.option(
    "--catch-up",
    type=click.Choice(["latest", "all", "none"]),
    default="latest",
    show_default=True,
    help="What runs for ticks missed while no worker ran.",
)
@click.option("--queue", metavar="QUEUE", help="The jobs' queue (default: the task's).")
@click.option("--paused", is_flag=True, help="Store it paused (heartq periodic resume).")
@click.option("--replace", is_flag=True, help="Change the runtime schedule of that name.")
@url_option
@json_option
def add_command(
    name: str,
    task: str,
    every: float | None,
    cron: str | None,
    args_json: str | None,
    tz: str,
    catch_up: str,
    queue: str | None,
    paused: bool,
    replace: bool,
    url: str | None,
    as_json: bool,
) -> None:
    """Run TASK on a schedule stored in the database: every worker with periodic on runs
    it within about a second, each tick one job across the fleet. A name declared in code
    (@app.periodic) is refused: code wins. TASK need not be known yet: its jobs wait for
    a worker that has it."""
    try:
        args = json.loads(args_json) if args_json is not None else None
    except ValueError as exc:
        raise click.BadParameter(f"not JSON: {exc}", param_hint="'--args'") from None
    schedule = runtime_schedules.build(  # bad input: ConfigError, one line, exit 1
        name, task, cron=cron, every=every, args=args, tz=tz, catch_up=catch_up, queue=queue
    )
    store = store_for(url)
    by = ids.requester("heartq periodic add")
    added = runtime_schedules.add(store, schedule, paused=paused, replace=replace, by=by)
    declared = task in store.task_policies([task])
    if as_json:
        print_json({"name": name, "added": added, "task_declared": declared})
        return
    click.echo(
        f"schedule {name}: {'added' if added else 'replaced'}, {schedule.spec}"
        f"{' (paused)' if paused else ''}; workers run it within about a second"
    )
    if not declared:
        click.echo(
            f"note: no worker has declared task {task!r} yet: its jobs wait for one that has it"
        )


def _done(name: str, done: bool, said: str, as_json: bool) -> None:
    if as_json:
        print_json({"name": name, said: done})
    elif done:
        click.echo(f"schedule {name}: {said}; workers obey within about a second")
    else:
        raise ConfigError(f"no schedule named {name!r}")


@periodic_group.command("remove")
@click.argument("name")
@url_option
@json_option
def remove_command(name: str, url: str | None, as_json: bool) -> None:
    """Remove the runtime schedule NAME: no tick after the workers' next pass. A schedule
    declared in code is refused (remove it from the code, or pause it)."""
    removed = store_for(url).remove_schedule(name)  # a code schedule: ConfigError
    _done(name, removed, "removed", as_json)


@periodic_group.command("pause")
@click.argument("name")
@url_option
@json_option
def pause_command(name: str, url: str | None, as_json: bool) -> None:
    """Pause NAME (runtime or code): its ticks pass without a job until resumed."""
    paused = store_for(url).pause_schedule(name, True, ids.requester("heartq periodic pause"))
    _done(name, paused, "paused", as_json)


@periodic_group.command("resume")
@click.argument("name")
@url_option
@json_option
def resume_command(name: str, url: str | None, as_json: bool) -> None:
    """Resume NAME from its next tick (the paused ones are not caught up)."""
    resumed = store_for(url).pause_schedule(name, False, ids.requester("heartq periodic resume"))
    _done(name, resumed, "resumed", as_json)

