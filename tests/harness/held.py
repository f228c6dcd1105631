"""The selection of the inner test runs that `test_cleanup.py` starts, never collected by
the suite itself (not a `test_*.py` file).

`test_holds_what_tests_make` makes what real tests make and a killed run leaves behind: a
schema on the suite's PostgreSQL, a `heartq worker` in a session of its own (as the
integration tests start them), a private PostgreSQL cluster (a daemon) with a streaming
standby of its own (`tests/pg_replication.py`: another daemon, made by `pg_basebackup`)
and a private NATS server; writes down what it made (a JSON line in the file
`HQTEST_HELD` names); and waits to be interrupted or killed, its teardown undoing all of
it as real tests' do (and, when asked, waiting in the middle for a second Ctrl-C to land
there).
`test_nothing` is a run that only starts and ends (the run after a killed one).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from heartq.store import open_store
from heartq.store.postgres.connection import parse_url
from tests import leftovers
from tests.nats_harness import PrivateNats
from tests.pg_replication import StreamingPair

HOLD_FOR = 100.0
"""Seconds the test waits to be interrupted before it gives up (a bound, not a sleep:
the outer test interrupts it as soon as the note is written)."""


@pytest.mark.parametrize("backend", ["postgres"])
def test_holds_what_tests_make(store_url: str, tmp_path: Path) -> None:
    store = open_store(store_url)
    store.link.migrate()  # the schema exists from here on
    store.link.close()
    (tmp_path / "tasks.py").write_text("import heartq\n\napp = heartq.App()\n")
    worker = subprocess.Popen(
        [sys.executable, "-m", "heartq", "worker", "tasks:app", "--url", store_url],
        cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        start_new_session=True,
    )  # fmt: skip
    pair = nats = None
    try:
        pair = StreamingPair(synchronous=False)
        cluster, standby = pair.primary, pair.standby
        assert standby is not None
        nats = PrivateNats()
        assert nats.proc is not None
        conninfo, schema = parse_url(store_url)
        _note(
            run=os.environ[leftovers.MARK],
            server=conninfo,
            schema=schema,
            pids={
                "worker": worker.pid,
                "postgres": cluster.postmaster_pid(),
                "standby": standby.postmaster_pid(),
                "nats": nats.proc.pid,
            },
            dirs=[str(cluster.root), str(standby.root), str(nats.dir)],
        )
        threading.Event().wait(HOLD_FOR)
    finally:  # a teardown written as tests write them: one step after the other
        _note(tearing_down=True)
        _wait_for_the_second_interrupt()
        _kill_group(worker)
        if nats is not None:
            nats.close()
        if pair is not None:
            pair.close()
    pytest.fail(f"not interrupted within {HOLD_FOR} s")


def test_nothing() -> None:
    """The run after a killed one: its start is what removes the killed run's leftovers."""


def _note(**what: object) -> None:
    with open(os.environ["HQTEST_HELD"], "a") as notes:
        notes.write(json.dumps(what) + "\n")


def _wait_for_the_second_interrupt() -> None:
    """With `HQTEST_HELD_SECOND`, the teardown waits until that file exists: the outer
    test creates it once it has typed a second Ctrl-C, which thus lands here."""
    second = os.environ.get("HQTEST_HELD_SECOND")
    if second:
        deadline = time.monotonic() + HOLD_FOR
        while not Path(second).exists() and time.monotonic() < deadline:
            time.sleep(0.05)


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(10)
