"""Running `heartq` as a user types it, and checking its output.

A command runs in the test's process (`run_in_process`: `heartq.cli.main.main` with the
argv typed, through click's `CliRunner.isolation`), unless it is one only a process
shows (`needs_a_process`): then `python -m heartq ...` in a subprocess, as before. In
the test's process a command costs what it does, not a Python start and heartq's
import (0.2-0.3 s of a core each, most of a read command's cost); it still runs the
real entry point with the real argv, and reads what a process would: its own stdout,
stderr and stdin, the environment the test gives (no `HEARTQ_*` of the test's own),
its working directory, 80 columns. What it could leave behind is put back after it:
the working directory, `sys.path`, the environment, every logger's handlers and level,
the warning filters. tests/cli/test_invocation.py runs commands both ways and compares.
"""

from __future__ import annotations

import dataclasses
import fcntl
import json
import logging
import os
import pty
import re
import select
import struct
import subprocess
import sys
import termios
import textwrap
import time
import traceback
import warnings
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import click
from click import formatting
from click.testing import CliRunner

import heartq
from heartq.cli.main import main
from tests import support

T = TypeVar("T")

SAME = "<the test's queue>"

COMMAND_TIMEOUT = 30.0
WIDTH = 80
"""Human output is checked at 80 columns (COLUMNS=80; rich's width when not a TTY)."""

FAST_WORKER = support.worker_argv(support.fast(lease=10.0))
"""`tests.support.FAST` (heartbeats: cancels, progress at a fast pace), but a 10 s lease:
these tests count claims and executions, and with FAST's 0.6 s lease a renewal half a
second late on a loaded machine gives an attempt back and runs it again. A killed worker is
still found at once, through its liveness lock."""

TASKS_SOURCE = textwrap.dedent(
    '''
    """The app the command-line tests' workers run."""

    import os
    import signal
    import time

    import heartq

    app = heartq.App()


    @app.task
    def ok(ctx, n=0):
        ctx.heartbeat(progress=0.5, stage="half", message="halfway")
        return {"n": n}


    @app.task
    def boom(n=0):
        raise ValueError(f"boom {n}")


    @app.task
    def die(n=0):
        os.kill(os.getpid(), signal.SIGKILL)


    @app.task
    def loses_its_result(ctx):
        with ctx.transaction():
            pass
        raise ValueError("after the commit")


    @app.task(queue="cpu", max_retries=1, retry_backoff=0.1)
    def cpu_sum(numbers=()):
        return sum(numbers)


    @app.task
    def snoozes_once(ctx):
        if ctx.snoozes == 0:
            raise heartq.Snooze(0.2, "not yet")
        return "awake"


    @app.task
    def slow(ctx, seconds=30.0):
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline and not ctx.cancelled:
            time.sleep(0.02)
            ctx.heartbeat()
        return "slept"
    '''
)


@dataclass
class Run:
    args: list[str]
    code: int
    out: str
    err: str

    def json(self) -> Any:
        assert self.code == 0, self.explain()
        return json.loads(self.out)

    def explain(self) -> str:
        return (
            f"heartq {' '.join(self.args)} -> {self.code}\nstdout:\n{self.out}\nstderr:\n{self.err}"
        )

    def ok(self) -> Run:
        assert self.code == 0, self.explain()
        return self

    def fails(self, code: int = 1, *, one_line: bool = True) -> Run:
        """Asserts the exit code and, for an operational error, clear `heartq: error:`
        lines on stderr (one unless told) and no traceback."""
        assert self.code == code, self.explain()
        assert "Traceback" not in self.err, self.explain()
        if code == 1:
            lines = self.err.strip().splitlines()
            assert lines and (len(lines) == 1 or not one_line), self.explain()
            assert all(line.startswith("heartq: error: ") for line in lines), self.explain()
        return self


def leaf_commands(
    group: click.Group, prefix: str = "", *, hidden: bool = True
) -> dict[str, click.Command]:
    """Every command of `group` that is not a group, by its full name (`jobs list`),
    its subgroups' too, as click finds them (`heartq`'s are loaded when asked for);
    without the hidden ones (old names kept for a version) unless `hidden`."""
    found: dict[str, click.Command] = {}
    ctx = click.Context(group)
    for name in group.list_commands(ctx):
        command = group.get_command(ctx, name)
        if command is None or (command.hidden and not hidden):
            continue
        if isinstance(command, click.Group):
            found.update(leaf_commands(command, f"{prefix}{name} ", hidden=hidden))
        else:
            found[f"{prefix}{name}"] = command
    return found


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HEARTQ_")}
    env.update(COLUMNS=str(WIDTH), PYTHONUNBUFFERED="1", **extra)
    env.pop("LINES", None)
    return env


PROCESS_COMMANDS = frozenset({"worker", "demo", "dashboard"})
"""Commands that always run as `python -m heartq`: they run tasks (threads, child
processes, signal handlers, logging set up for the process), serve, or start processes of
their own; in the test's process they would leave all of that behind."""


def needs_a_process(args: Sequence[str]) -> bool:
    """Whether `heartq ARGS` must run as a process: a command of `PROCESS_COMMANDS`, or
    one that imports the user's code (`--app`: a module imported stays in `sys.modules`,
    and the next test's module of the same name would not be imported again)."""
    rest = list(args)
    while rest and rest[0].startswith("-"):  # the group's options: --url URL, --debug
        if rest.pop(0) == "--url" and rest:
            rest.pop(0)
    return "--app" in args or (bool(rest) and rest[0] in PROCESS_COMMANDS)


PYTHON_WARNING_FILTERS = [
    ("default", DeprecationWarning, "__main__"),
    ("ignore", DeprecationWarning, ""),
    ("ignore", PendingDeprecationWarning, ""),
    ("ignore", ImportWarning, ""),
    ("ignore", ResourceWarning, ""),
]
"""Python's own warning filters (no `-W`), first match first: a command in the test's
process shows the warnings a process would, on its stderr, not pytest's."""


@contextmanager
def _put_back() -> Iterator[None]:
    """Undo what a command may change in the process: the working directory, `sys.path`,
    and every logger's handlers, level and flags (`heartq reclaim` quiets heartq's events
    with a handler of its own)."""
    cwd, path = os.getcwd(), list(sys.path)
    loggers = [logging.getLogger(), *logging.Logger.manager.loggerDict.values()]
    saved = [
        (lg, list(lg.handlers), lg.level, lg.propagate, lg.disabled)
        for lg in loggers
        if isinstance(lg, logging.Logger)
    ]
    try:
        yield
    finally:
        os.chdir(cwd)
        sys.path[:] = path
        known = set()
        for lg, handlers, level, propagate, disabled in saved:
            lg.handlers[:] = handlers
            lg.setLevel(level)
            lg.propagate, lg.disabled = propagate, disabled
            known.add(id(lg))
        for lg in logging.Logger.manager.loggerDict.values():
            if isinstance(lg, logging.Logger) and id(lg) not in known:
                lg.handlers.clear()


def run_in_process(args: Sequence[str], cwd: Path, env: dict[str, str]) -> Run:
    """`heartq ARGS` in this process, as `python -m heartq ARGS` runs it in `cwd` with
    `clean_env(**env)`: `heartq.cli.main.main(ARGS)`, its exit status from `SystemExit`,
    an exception it lets out (`--debug`) printed with its traceback, exit status 1, as
    Python prints it."""
    environment: dict[str, str | None] = {k: None for k in os.environ if k.startswith("HEARTQ_")}
    environment.update({"COLUMNS": str(WIDTH), "LINES": None, **env})  # env may widen it
    with _put_back(), CliRunner().isolation(env=environment) as (out, err, _):
        os.chdir(cwd)
        formatting.FORCED_WIDTH = None  # the isolation's 80, not $COLUMNS - 2 as in a process
        with warnings.catch_warnings(record=True) as heard:
            warnings.resetwarnings()
            for action, category, module in reversed(PYTHON_WARNING_FILTERS):
                warnings.filterwarnings(action, category=category, module=module)
            try:
                main(list(args))
                code = 0
            except SystemExit as exit_:
                code = exit_.code if isinstance(exit_.code, int) else int(exit_.code is not None)
                if isinstance(exit_.code, str):
                    print(exit_.code, file=sys.stderr)
            except Exception:  # noqa: BLE001 - what Python prints, and its exit status
                traceback.print_exc(file=sys.stderr)
                code = 1
        for w in heard:
            sys.stderr.write(warnings.formatwarning(w.message, w.category, w.filename, w.lineno))
        sys.stdout.flush()
        sys.stderr.flush()
        return Run(list(args), code, _text(out.getvalue()), _text(err.getvalue()))


def _text(data: bytes) -> str:
    """Bytes written as a process's piped output reads in text mode (universal newlines)."""
    return data.decode(errors="replace").replace("\r\n", "\n").replace("\r", "\n")


class HeartqCli:
    """`heartq(...)` runs one command in `cwd` with `--url` (unless `url=None`): in this
    process unless it `needs_a_process`; `process(...)` and `in_process(...)` choose."""

    def __init__(self, url: str, cwd: Path) -> None:
        self.url = url
        self.cwd = cwd
        self._app: heartq.App | None = None

    @staticmethod
    def typed(args: Sequence[str], url: str | None) -> list[str]:
        """What a user types after `heartq`: ARGS, then `--url URL` unless `url` is None."""
        return [*args, *(["--url", url] if url else [])]

    def argv(self, args: Sequence[str], url: str | None) -> list[str]:
        return [sys.executable, "-m", "heartq", *self.typed(args, url)]

    def __call__(self, *args: str, url: str | None = SAME, **env: str) -> Run:
        """Run `heartq ARGS --url URL` (the test's queue unless `url` is given; `None`
        leaves `--url` out), with `env` added to a clean environment."""
        return self.many([list(args)], url=url, **env)[0]

    def many(
        self, commands: Sequence[Sequence[str]], url: str | None = SAME, **env: str
    ) -> list[Run]:
        """Run several commands and wait for all: those that need a process at once, each
        its own, while the others run here one after the other."""
        started = {
            i: self._start(args, url, env) for i, args in enumerate(commands)
            if needs_a_process(args)
        }  # fmt: skip
        here = {
            i: self.in_process(*args, url=url, **env) for i, args in enumerate(commands)
            if i not in started
        }  # fmt: skip
        return [here[i] if i in here else self._wait(args, started[i])
                for i, args in enumerate(commands)]  # fmt: skip

    def process(self, *args: str, url: str | None = SAME, **env: str) -> Run:
        """`heartq(...)` as `python -m heartq ...` in a process of its own, whatever the
        command."""
        return self._wait(list(args), self._start(args, url, env))

    def in_process(self, *args: str, url: str | None = SAME, **env: str) -> Run:
        """`heartq(...)` in this process (`run_in_process`), whatever the command."""
        use = self.url if url is SAME else url
        run = run_in_process(self.typed(args, use), self.cwd, env)
        return dataclasses.replace(run, args=list(args))  # as a process's Run names it

    def _start(
        self, args: Sequence[str], url: str | None, env: dict[str, str]
    ) -> subprocess.Popen[str]:
        use = self.url if url is SAME else url
        return subprocess.Popen(
            self.argv(args, use),
            cwd=self.cwd,
            env=clean_env(**env),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    @staticmethod
    def _wait(args: Sequence[str], proc: subprocess.Popen[str]) -> Run:
        out, err = proc.communicate(timeout=COMMAND_TIMEOUT)
        return Run(list(args), proc.returncode, out, err)

    def in_terminal(
        self, args: Sequence[str], answer: str = "", columns: int = WIDTH, url: str | None = SAME
    ) -> Run:
        """Run one command on a real pseudo-terminal of `columns` columns (stdin, stdout
        and stderr), typing `answer`; `out` holds everything the terminal showed."""
        use = self.url if url is SAME else url
        master, slave = pty.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, columns, 0, 0))
        env = clean_env(TERM="xterm")
        env.pop("COLUMNS")
        proc = subprocess.Popen(
            self.argv(args, use), cwd=self.cwd, env=env, stdin=slave, stdout=slave,
            stderr=slave, start_new_session=True,
        )  # fmt: skip
        os.close(slave)
        if answer:
            os.write(master, answer.encode())
        chunks: list[bytes] = []
        deadline = time.monotonic() + COMMAND_TIMEOUT
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 0.1)
            if ready:
                try:
                    chunk = os.read(master, 65536)
                except OSError:  # EIO: the terminal's last writer is gone
                    break
                if not chunk:
                    break
                chunks.append(chunk)
            elif proc.poll() is not None and not select.select([master], [], [], 0)[0]:
                break
        os.close(master)
        code = proc.wait(timeout=COMMAND_TIMEOUT)
        text = b"".join(chunks).decode(errors="replace").replace("\r\n", "\n")
        return Run(list(args), code, text, "")

    def json(self, *args: str) -> Any:
        return self(*args, "--json").json()

    def enqueue(self, task: str, *options: str) -> str:
        """`heartq enqueue TASK OPTIONS...` (tests of the command itself use this)."""
        run = self("enqueue", task, *options).ok()
        return run.out.strip()

    def add(self, task: str, args: dict[str, Any] | None = None, **options: Any) -> str:
        """Enqueue in this process, through the same `App.enqueue` the command uses:
        arranging a test costs no process start."""
        if self._app is None:
            self._app = heartq.App(self.url)
        return self._app.enqueue(task, args or {}, **options)

    def job(self, job_id: str) -> dict[str, Any]:
        """The job read in this process (cheap enough to poll)."""
        if self._app is None:
            self._app = heartq.App(self.url)
        return self._app.get_job(job_id)

    def close(self) -> None:
        if self._app is not None:
            self._app.close()

    def burst(self, *options: str) -> Run:
        """A worker that runs until the queue is empty, then exits."""
        return self("worker", "tasks:app", "--burst", *FAST_WORKER, *options).ok()

    def start_worker(self, *options: str, log: str = "worker.log") -> subprocess.Popen[bytes]:
        """A long-running worker in its own session (the test stops or kills it)."""
        with open(self.cwd / log, "wb") as out:
            return subprocess.Popen(
                self.argv(("worker", "tasks:app", *FAST_WORKER, *options), self.url),
                cwd=self.cwd,
                env=clean_env(),
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )


PATIENCE = 15.0
"""Seconds a command-line test waits for a condition unless it says otherwise: a look
often runs `heartq` in a process of its own, slow to start on a loaded machine."""


def wait_for(predicate: Callable[[], T | None], timeout: float = PATIENCE, what: str = "it") -> T:
    """`tests.support.wait_for`, looking every 50 ms (a look may start a process)."""
    return support.wait_for(predicate, timeout, what, interval=0.05)


def assert_fits(text: str, width: int | None = None) -> None:
    """Plain output, as piped: no trailing spaces, no escapes; no line wider than `width`
    when given (piped output is not cut to a width: tables take their natural width)."""
    assert "\x1b" not in text
    for line in text.splitlines():
        assert width is None or len(line) <= width, f"line wider than {width}: {line!r}"
        assert line == line.rstrip(), f"trailing spaces: {line!r}"


ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07")


def on_screen(text: str) -> list[str]:
    """What a terminal showed, line by line, without its escape sequences."""
    return [ANSI.sub("", line).rstrip() for line in text.splitlines()]
