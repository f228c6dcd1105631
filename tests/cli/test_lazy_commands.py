"""`heartq`'s commands are imported when the command line names them
(`heartq.cli.main.COMMANDS`): a worker's process imports its own command, not the
others' modules nor rich, which the read commands draw with."""

from __future__ import annotations

import subprocess
import sys

import click

from heartq.cli.main import COMMANDS, cli

OTHERS = sorted({path.split(":")[0] for name, path in COMMANDS.items() if name != "worker"})


def test_each_command_is_found_under_its_own_name() -> None:
    ctx = click.Context(cli)
    for name in COMMANDS:
        command = cli.get_command(ctx, name)
        assert command is not None and command.name == name, (name, command)


def test_a_worker_s_process_imports_no_other_command_nor_rich() -> None:
    probe = (
        "import sys, click\n"
        "from heartq.cli.main import cli\n"
        "cli.get_command(click.Context(cli), 'worker')\n"
        f"loaded = [m for m in sys.modules if m.split('.')[0] == 'rich' or m in {OTHERS!r}]\n"
        "print(loaded)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True
    )
    assert done.stdout.strip() == "[]", done.stdout + done.stderr
