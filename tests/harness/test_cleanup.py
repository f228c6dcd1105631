"""The test command stops on the first Ctrl-C, leaving nothing behind; a killed run's
leftovers are removed by the next run.

Each test starts the command `scripts/test` ends with (pytest, two xdist workers) on a
selection of `held.py`, on a pseudo-terminal of its own (its controlling terminal, so
that a Ctrl-C typed there reaches the controller and its workers as it would from a
person's), waits until the held test has made a schema, a worker in a session of its own,
a private PostgreSQL cluster with its streaming standby and a private NATS server, and
then interrupts or kills it.
"Nothing left" is checked on what the held test wrote down (pids, the schema, the
directories) and on the run's mark (`tests/leftovers.py`): no process carries it.
In the heavy tier (each an inner run of the whole command), outside the default suite:
`scripts/test --heavy`.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import psycopg
import pytest

from tests import leftovers
from tests.support import free_port, pytest_env, suite_command, wait_for

pytestmark = pytest.mark.heavy  # inner runs of the whole command: `scripts/test --heavy`

ROOT = Path(__file__).resolve().parents[2]
HELD = "tests/harness/held.py"
READY_TIMEOUT = 120.0
"""Until the held test has made everything (two interpreters importing, a PostgreSQL
cluster's initdb: seconds alone, more on a busy 2-core machine)."""
END_TIMEOUT = 60.0
"""Until the interrupted run has ended and cleaned up (about ten seconds alone)."""


class InnerRun:
    """The test command on `selection`, on a pseudo-terminal it controls."""

    def __init__(self, tmp_path: Path, selection: str, **env: str) -> None:
        self.notes = tmp_path / f"held-{time.monotonic_ns()}.jsonl"
        master, slave = os.openpty()
        argv = [*suite_command(), "-p", "no:cacheprovider", "--basetemp", str(self.notes) + ".tmp"]
        self.proc = subprocess.Popen(
            ["setsid", "--ctty", *argv, selection],  # its own session, the pty its terminal
            cwd=ROOT, env=pytest_env(dict(os.environ, HQTEST_HELD=str(self.notes), **env)),
            stdin=slave, stdout=slave, stderr=slave,
        )  # fmt: skip
        os.close(slave)
        self.run = leftovers.RunId.of(self.proc.pid)  # setsid execs: the controller's pid
        self.master = master
        self.chunks: list[bytes] = []
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        with contextlib.suppress(OSError):  # EIO: the terminal's last writer is gone
            while chunk := os.read(self.master, 65536):
                self.chunks.append(chunk)

    @property
    def output(self) -> str:
        return b"".join(self.chunks).decode(errors="replace")

    def held(self) -> dict[str, Any]:
        """What the held test made, once it has made it all."""

        def noted() -> dict[str, Any] | None:
            if self.proc.poll() is not None:
                raise AssertionError(f"the run ended before holding anything:\n{self.output}")
            lines = self.notes.read_text().splitlines() if self.notes.exists() else []
            return json.loads(lines[0]) if lines else None

        what: dict[str, Any] = wait_for(noted, READY_TIMEOUT, "the held test's note")
        assert what["run"] == str(self.run), (what, self.run)
        return what

    def ctrl_c(self) -> None:
        """^C typed on its terminal: SIGINT to its foreground process group."""
        os.write(self.master, b"\x03")

    def kill(self) -> None:
        """SIGKILL to the controller and its workers at once: no teardown runs."""
        os.killpg(self.proc.pid, signal.SIGKILL)

    def wait(self, timeout: float = END_TIMEOUT) -> int:
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            late = f"the run did not end within {timeout} s:\n{self.output}"
            raise AssertionError(late) from None

    def close(self) -> None:
        """Whatever the test's outcome, nothing of the inner run stays."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(10)
        leftovers.finish_run(self.run)
        self.reader.join(5)
        os.close(self.master)


@pytest.fixture
def inner_runs(tmp_path: Path) -> Iterator[list[InnerRun]]:
    started: list[InnerRun] = []
    yield started
    for run in started:
        run.close()


def running(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def schema_exists(what: dict[str, Any]) -> bool:
    """Whether the held test's schema is still there (its run's database gone: no)."""
    try:
        with psycopg.connect(what["server"], connect_timeout=5) as conn:
            found = conn.execute(
                "SELECT 1 FROM pg_namespace WHERE nspname = %s", (what["schema"],)
            ).fetchone()
    except psycopg.OperationalError:
        return False  # the run's database, or a private cluster of the run's, gone with it
    return found is not None


def assert_nothing_left(run: leftovers.RunId, what: dict[str, Any]) -> None:
    marked = leftovers.marked_processes().get(run, [])
    assert not marked, [(p.pid, p.name()) for p in marked]
    alive = {name: pid for name, pid in what["pids"].items() if running(pid)}
    assert not alive, alive
    assert not schema_exists(what), what["schema"]
    assert not [d for d in what["dirs"] if Path(d).exists()], what["dirs"]
    assert not Path(what["dirs"][0]).parent.exists()  # the run's scratch directory


def assert_all_held(what: dict[str, Any]) -> None:
    """What a killed run leaves is really there (else the next run proves nothing)."""
    alive = {name: pid for name, pid in what["pids"].items() if running(pid)}
    assert alive.keys() >= {"worker", "postgres", "standby"}, alive  # NATS: in the killed group
    assert schema_exists(what), what["schema"]
    assert all(Path(d).exists() for d in what["dirs"]), what["dirs"]


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.one_at_a_time("inner-runs")  # one inner run at a time: 2 cores
@pytest.mark.parametrize("how", ["ctrl-c", "ctrl-c twice", "kill -INT"])
def test_the_first_interrupt_stops_the_run_and_leaves_nothing(
    how: str, tmp_path: Path, inner_runs: list[InnerRun]
) -> None:
    """`ctrl-c`: ^C typed once on the terminal (SIGINT to the controller and its workers).
    `ctrl-c twice`: a second ^C lands in the middle of the held test's teardown, which
    must still run to its end. `kill -INT`: SIGINT to the controller alone (a supervisor,
    `timeout -s INT`): the workers must stop too."""
    second = tmp_path / "second-ctrl-c-typed"
    inner = InnerRun(tmp_path, f"{HELD}::test_holds_what_tests_make",
                     HQTEST_HELD_SECOND=str(second) if how == "ctrl-c twice" else "")  # fmt: skip
    inner_runs.append(inner)
    what = inner.held()
    if how == "kill -INT":
        os.kill(inner.proc.pid, signal.SIGINT)
    else:
        inner.ctrl_c()
    if how == "ctrl-c twice":
        wait_for(lambda: len(inner.notes.read_text().splitlines()) > 1, 30, "its teardown")
        inner.ctrl_c()
        second.touch()
    assert inner.wait() == pytest.ExitCode.INTERRUPTED, inner.output
    assert "KeyboardInterrupt" in inner.output, inner.output
    assert_nothing_left(inner.run, what)


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.one_at_a_time("inner-runs")
def test_the_run_after_a_killed_one_removes_what_it_left(
    tmp_path: Path, inner_runs: list[InnerRun]
) -> None:
    killed = InnerRun(tmp_path, f"{HELD}::test_holds_what_tests_make")
    inner_runs.append(killed)
    what = killed.held()
    killed.kill()
    killed.wait()
    assert_all_held(what)
    after = InnerRun(tmp_path, f"{HELD}::test_nothing")
    inner_runs.append(after)
    assert after.wait() == pytest.ExitCode.OK, after.output
    assert_nothing_left(killed.run, what)  # its start removed them (or a concurrent run's)


@pytest.mark.one_at_a_time("inner-runs")
def test_a_run_with_no_postgresql_to_sweep_still_runs(
    tmp_path: Path, inner_runs: list[InnerRun]
) -> None:
    """The sweep at a run's start finds no server where tests were told to look: the
    tests that need one say so; the run itself goes on."""
    dead = f"postgresql://postgres@127.0.0.1:{free_port()}/test"
    run = InnerRun(tmp_path, f"{HELD}::test_nothing", HEARTQ_TEST_PG_URL=dead)
    inner_runs.append(run)
    assert run.wait() == pytest.ExitCode.OK, run.output
