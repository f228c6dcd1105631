"""The `heartq` command: a click group, and `main()` which turns errors into exit codes."""

from __future__ import annotations

import importlib
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
from heartq.cli.deprecated import RENAMED_COMMANDS, command_alias
from heartq.errors import HeartqError, RenamedWarning
from heartq.store import redact
from heartq.version import __version__

COMMANDS = {
    "worker": "heartq.cli.worker_cmd:worker_command",
    "dashboard": "heartq.cli.dashboard_cmd:dashboard_command",
    "enqueue": "heartq.cli.enqueue_cmd:enqueue_command",
    "jobs": "heartq.cli.jobs_cmd:jobs_group",
    "workers": "heartq.cli.workers_cmd:workers_command",
    "tasks": "heartq.cli.tasks_cmd:tasks_command",
    "dlq": "heartq.cli.dlq_cmd:dlq_group",
    "reclaim": "heartq.cli.ops_cmd:reclaim_command",
    "stats": "heartq.cli.ops_cmd:stats_command",
    "queues": "heartq.cli.queues_cmd:queues_group",
    "periodic": "heartq.cli.periodic_cmd:periodic_group",
    "demo": "heartq.cli.demo:demo_command",
}
"""Each command of `heartq` but `migrate`, as `module:attribute`: imported when the command
line names it (or asks for the list), so `heartq worker` does not import the other
commands' modules and rich (a worker started about 0.1 s sooner, each process of a
pool's fleet)."""


class Commands(click.Group):
    """`heartq`'s group: the commands of `COMMANDS` loaded when asked for (click's lazy
    subcommands), and each old name of `RENAMED_COMMANDS` as its command under that name,
    hidden, with a warning."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *COMMANDS, *RENAMED_COMMANDS})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in RENAMED_COMMANDS:
            command = self.get_command(ctx, RENAMED_COMMANDS[cmd_name])
            return None if command is None else command_alias(command, cmd_name)
        if cmd_name in COMMANDS:
            module, attribute = COMMANDS[cmd_name].split(":")
            command = getattr(importlib.import_module(module), attribute)
            assert isinstance(command, click.Command)
            return command
        return super().get_command(ctx, cmd_name)


@click.group(cls=Commands, context_settings={"help_option_names": ["-h", "--help"]})
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
