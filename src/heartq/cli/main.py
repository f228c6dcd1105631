"""The `heartq` command: a click group, and `main()` which turns errors into exit codes."""

from __future__ import annotations

import sys
import warnings
from collections.abc import Sequence
from typing import NoReturn

import click

from heartq.cli.common import (
    EXIT_OPERATIONAL,
    GROUP_URL,
    json_option,
    print_json,
    scrub,
    store_for,
    url_option,
)
from heartq.cli.dashboard_cmd import dashboard_command
from heartq.cli.demo import demo_command
from heartq.cli.deprecated import RENAMED_COMMANDS, command_alias
from heartq.cli.dlq_cmd import dlq_group
from heartq.cli.enqueue_cmd import enqueue_command
from heartq.cli.jobs_cmd import jobs_group
from heartq.cli.ops_cmd import reclaim_command, stats_command
from heartq.cli.periodic_cmd import periodic_group
from heartq.cli.queues_cmd import queues_group
from heartq.cli.tasks_cmd import tasks_command
from heartq.cli.watch_cmd import watch_command
from heartq.cli.worker_cmd import worker_command
from heartq.cli.workers_cmd import workers_command
from heartq.errors import HeartqError, RenamedWarning
from heartq.store import redact
from heartq.version import __version__


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="heartq")
@click.option(
    "--debug", is_flag=True, help="Show tracebacks on errors (before or after the command)."
)
@click.option(
    "--url",
    default=None,
    metavar="URL",
    help="Queue URL for the command (also accepted after it). Env: HEARTQ_URL.",
)
@click.pass_context
def cli(ctx: click.Context, debug: bool, url: str | None) -> None:
    """heartq: a job queue that loses no job and leaves none stuck."""
    if url is not None:  # even empty: the command's `--url` says it is (`check_url`)
        ctx.meta[GROUP_URL] = url


def hoist_debug(args: list[str]) -> tuple[list[str], bool]:
    """`--debug` anywhere before a `--` is taken as the group's flag, so
    `heartq jobs list --debug` works like `heartq --debug jobs list`."""
    end = args.index("--") if "--" in args else len(args)
    debug = "--debug" in args[:end]
    if not debug:
        return args, False
    rest = [a for a in args[:end] if a != "--debug"] + args[end:]
    return ["--debug", *rest], True


@cli.command()
@url_option
@json_option
def migrate(url: str | None, as_json: bool) -> None:
    """Create or upgrade the schema (also done on first use)."""
    store = store_for(url)
    version = store.link.migrate()
    if as_json:
        print_json({"url": redact(store.link.url), "version": version})
    else:
        click.echo(f"schema at version {version} ({redact(store.link.url)})")


cli.add_command(worker_command)
cli.add_command(dashboard_command)
cli.add_command(enqueue_command)
jobs_group.add_command(watch_command)
cli.add_command(jobs_group)
cli.add_command(workers_command)
cli.add_command(tasks_command)
cli.add_command(dlq_group)
cli.add_command(reclaim_command)
cli.add_command(stats_command)
cli.add_command(queues_group)
cli.add_command(periodic_group)
cli.add_command(demo_command)
for old_name, new_name in RENAMED_COMMANDS.items():
    cli.add_command(command_alias(cli.commands[new_name], old_name))


def main(argv: Sequence[str] | None = None) -> None:
    args, debug = hoist_debug(list(sys.argv[1:] if argv is None else argv))
    run(cli, args, prog_name="heartq", debug=debug)


def run(command: click.Command, args: list[str], *, prog_name: str, debug: bool) -> NoReturn:
    """Run a command and exit, its errors turned into exit codes and one line (a
    traceback with `debug`): `heartq`, and the commands made of its own elsewhere
    (`manage.py heartq_worker`, heartq.contrib.django)."""
    if not sys.warnoptions:  # an old name says so, on stderr, unless -W said otherwise
        warnings.simplefilter("default", RenamedWarning)
    try:
        code = command.main(args=args, prog_name=prog_name, standalone_mode=False)
    except click.exceptions.Abort:
        click.echo("heartq: aborted", err=True)
        sys.exit(130)
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except (HeartqError, OSError) as exc:
        if debug:
            raise
        click.echo(f"heartq: error: {scrub(str(exc))}", err=True)
        sys.exit(EXIT_OPERATIONAL)
    except Exception as exc:
        if debug:
            raise
        click.echo(
            f"heartq: unexpected error: {type(exc).__name__}: {scrub(str(exc))} "
            "(rerun with --debug)",
            err=True,
        )
        sys.exit(EXIT_OPERATIONAL)
    sys.exit(code if isinstance(code, int) else 0)


if __name__ == "__main__":
    main()
