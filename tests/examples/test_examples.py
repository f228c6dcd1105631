"""The integration examples in docs/examples, run as a user would run them, on the run's
first backend (a layer over the store, `tests/conftest.py`'s `LAYERS`: a real SQLite file
by default), each with a real worker beside it:

- script: `heartq worker tasks:app` and `python enqueue_and_wait.py` in subprocesses;
- fastapi: the app in this process through `TestClient` (lifespan included), a
  `heartq worker tasks:app` subprocess;
- django: `manage.py`-style subprocesses (Django's settings are process-global), on a
  SQLite file, heartq's `manage.py heartq_worker --burst` as the worker.

Every example is copied to tmp_path first, so a run leaves nothing in docs/.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType, TracebackType
from typing import IO, Any

import pytest
from fastapi.testclient import TestClient

import heartq
from tests.support import fast, wait_for, worker_argv

EXAMPLES = Path(__file__).resolve().parents[2] / "docs" / "examples"
DRIVER = Path(__file__).resolve().with_name("django_client.py")
FAST_WORKER = worker_argv(fast(shutdown_timeout=5.0))
"""`tests.support.FAST` (a job is claimed within 50 ms on SQLite), and a 5 s shutdown
timeout (heartq's default is 30) that bounds the SIGTERM each test ends its worker with."""
STARTUP = 30.0
"""Seconds a worker subprocess may take to start (imports, migration)."""


@pytest.fixture
def queue_url(fresh_url: Callable[[], str]) -> str:
    """A fresh queue of the test's backend (SQLite file in tmp_path, PostgreSQL schema)."""
    return fresh_url()


def copy_example(name: str, tmp_path: Path) -> Path:
    """A copy of docs/examples/NAME to run in (databases and caches land there)."""
    workdir = tmp_path / name
    shutil.copytree(EXAMPLES / name, workdir, ignore=shutil.ignore_patterns("__pycache__"))
    return workdir


def example_env(queue_url: str, **extra: str) -> dict[str, str]:
    """This environment with the queue's URL and none of the caller's heartq settings."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("HEARTQ_")}
    return {**env, "HEARTQ_URL": queue_url, "PYTHONDONTWRITEBYTECODE": "1", **extra}


class WorkerProcess:
    """`heartq worker tasks:app` in a subprocess in `workdir`: entered once it has
    started (its tasks are declared), stopped by SIGTERM on exit, which must be clean."""

    def __init__(self, workdir: Path, env: dict[str, str], log_path: Path) -> None:
        self.workdir = workdir
        self.env = env
        self.log_path = log_path
        self.proc: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def __enter__(self) -> WorkerProcess:
        self._log = self.log_path.open("wb")
        self.proc = proc = subprocess.Popen(
            [sys.executable, "-m", "heartq", "worker", "tasks:app", *FAST_WORKER],
            cwd=self.workdir,
            env=self.env,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            wait_for(
                lambda: "worker_started" in self.log() or proc.poll() is not None,
                STARTUP,
                "the worker to start",
            )
            assert proc.poll() is None, f"the worker exited:\n{self.log()}"
        except BaseException:
            self._kill()
            raise
        return self

    def _kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)
        if self._log is not None:
            self._log.close()

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        try:
            code = self.proc.wait(15)
        except subprocess.TimeoutExpired:
            code = None
        self._kill()
        if kind is None:
            assert code == 0, f"the worker did not stop cleanly ({code}):\n{self.log()}"


def test_script_enqueues_waits_and_prints(queue_url: str, tmp_path: Path) -> None:
    workdir = copy_example("script", tmp_path)
    env = example_env(queue_url)
    with WorkerProcess(workdir, env, tmp_path / "worker.log") as worker:
        done = subprocess.run(
            [sys.executable, "enqueue_and_wait.py"],
            cwd=workdir,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert done.returncode == 0, done.stderr + worker.log()
    assert done.stdout.splitlines() == [
        "add(2, 3) = 5",
        "count_words = {'words': 8, 'distinct': 6}",
    ]


@pytest.fixture
def fastapi_example(
    queue_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[ModuleType]:
    """docs/examples/fastapi/main.py imported here, on the test's queue. Its modules'
    plain names (`main`, `tasks`) are dropped afterwards so nothing else sees them."""
    workdir = copy_example("fastapi", tmp_path)
    for name in [k for k in os.environ if k.startswith("HEARTQ_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("HEARTQ_URL", queue_url)
    monkeypatch.syspath_prepend(str(workdir))
    names = ("main", "tasks")
    saved = {name: sys.modules.pop(name) for name in names if name in sys.modules}
    try:
        yield importlib.import_module("main")
    finally:
        for name in names:
            sys.modules.pop(name, None)
        sys.modules.update(saved)


def test_fastapi_enqueues_and_reports_status(
    fastapi_example: ModuleType, queue_url: str, tmp_path: Path
) -> None:
    queue: heartq.App = fastapi_example.queue
    with TestClient(fastapi_example.app) as client:
        made = client.post("/thumbnails", json={"image_url": "https://example.org/a.png"})
        assert made.status_code == 202, made.text
        thumb_id = made.json()["job_id"]
        waiting = client.get(f"/jobs/{thumb_id}")  # no worker yet
        assert (waiting.status_code, waiting.json()["status"]) == (202, "queued")
        assert client.get(f"/jobs/{uuid.uuid4()}").status_code == 404

        with WorkerProcess(tmp_path / "fastapi", example_env(queue_url), tmp_path / "w.log"):
            # By name, as a service without tasks.py: the task's own queue is taken.
            sent = client.post("/welcome-emails", json={"address": "ada@example.org"})
            assert sent.status_code == 202, sent.text
            email_id = sent.json()["job_id"]

            def ended(job_id: str) -> dict[str, Any] | None:
                answer = client.get(f"/jobs/{job_id}", params={"wait": 2})
                return answer.json() if answer.status_code == 200 else None

            thumb = wait_for(lambda: ended(thumb_id), 30, "the thumbnail job to end")
            email = wait_for(lambda: ended(email_id), 30, "the email job to end")
    assert thumb == {
        "id": thumb_id,
        "status": "succeeded",
        "result": {
            "image_url": "https://example.org/a.png",
            "size": 128,
            "thumbnail": "https://example.org/a.png?w=128",
        },
    }
    assert email["result"] == "welcome email sent to ada@example.org"
    assert queue._store is None, "the lifespan did not close the queue"
    checker = heartq.App(queue_url)
    try:
        assert checker.get_job(email_id)["queue"] == "emails"
    finally:
        checker.close()


def run_django(
    workdir: Path, env: dict[str, str], *args: str, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    """`python ARGS...` in the Django example's copy; it must succeed."""
    done = subprocess.run(
        [sys.executable, *args],
        cwd=workdir,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert done.returncode == 0, f"{args}: {done.returncode}\n{done.stdout}\n{done.stderr}"
    return done


@pytest.mark.long(10)
def test_django_view_enqueues_in_its_transaction_and_the_worker_command_runs(
    tmp_path: Path,
) -> None:
    """The example's queue is in Django's own database (a SQLite file): the view's task
    is written in its transaction (a rolled-back report leaves no job), and `manage.py
    heartq_worker --burst` runs it. heartq.contrib.django itself is tested on both
    databases, and Django 6.1, in tests/with_django."""
    workdir = copy_example("django", tmp_path)
    database = tmp_path / "django.sqlite3"
    env = {
        **{k: v for k, v in example_env("").items() if k != "HEARTQ_URL"},
        "DJANGO_DB_PATH": str(database),
    }
    created = json.loads(run_django(workdir, env, str(DRIVER), "create").stdout)
    assert created["status"] == 202 and created["body"]["id"] == 1, created
    task_id = created["body"]["task"]

    checker = heartq.App(f"sqlite:///{database}")
    try:
        jobs = checker.store.list_jobs()
        # One job: the rolled-back report's went with its transaction.
        assert [(j["id"], j["task"], j["args"], j["status"]) for j in jobs] == [
            (task_id, "reports.tasks.count_words", {"report_id": 1}, "queued")
        ]
        worker = run_django(workdir, env, "manage.py", "heartq_worker", "--burst", *FAST_WORKER)
        assert "worker_started" in worker.stderr
        assert checker.result(task_id, timeout=0) == 4
    finally:
        checker.close()

    shown = json.loads(run_django(workdir, env, str(DRIVER), "show", "1").stdout)
    assert shown["body"] == {
        "id": 1, "title": "t", "words": 4, "task": {"status": "SUCCESSFUL", "attempts": 1}
    }  # fmt: skip
    missing = json.loads(run_django(workdir, env, str(DRIVER), "show", "2").stdout)
    assert missing["status"] == 404


SNIPPET = re.compile(r"```python\n# (docs/examples/\S+)\n(.*?)```", re.DOTALL)


def test_integrations_doc_quotes_the_examples_as_they_are() -> None:
    """docs/INTEGRATIONS.md copies code from the examples (a block whose first line
    names the file): each copy must still be found, verbatim, in its file."""
    root = EXAMPLES.parents[1]
    quoted = SNIPPET.findall((root / "docs" / "INTEGRATIONS.md").read_text())
    assert len(quoted) >= 8
    for path, code in quoted:
        assert code in (root / path).read_text(), f"docs/INTEGRATIONS.md quotes {path} wrongly"
