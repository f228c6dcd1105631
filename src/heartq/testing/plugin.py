"""heartq's pytest plugin: fixtures for a fresh queue per test (docs/TESTING.md).

Registered by the package's `pytest11` entry point, so installing heartq makes it
available to every pytest run; it does nothing until a test asks for one of its
fixtures (all named `heartq_*`, none autouse), and adds only the `--heartq-url` option
and the `heartq_app` ini key. `-p no:heartq` turns it off.

- `heartq_app_for(app)`: `app` (yours) on a fresh queue for this test, put back after.
- `heartq_app`: the app named by the ini key `heartq_app = "module:attribute"`, on a
  fresh queue; without the key, a new `heartq.App()` with no tasks (register them in the
  test). Override it in a conftest.py to hand out your app another way.
- `heartq_url`: the URL of another fresh queue (a queue of its own, not the app's).
- `heartq_django_app`: a Django project's heartq task backend `default` on a fresh queue,
  its app (`heartq.contrib.django.testing.fresh_queue`; pytest-django sets Django up).

Where the queues are: a SQLite file in the test's `tmp_path` (kept after a failure, as
pytest keeps `tmp_path`), or, when `--heartq-url` (else the `HEARTQ_TEST_URL`
environment variable) names a PostgreSQL server, a new schema there, dropped after.
"""

from __future__ import annotations

import contextlib
import itertools
import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from heartq.app import App
from heartq.testing.queues import ENV_TEST_URL, fresh_queue_url, server_kind, use_fresh_queue

INI_APP = "heartq_app"


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("heartq", "heartq test queues (heartq.testing)")
    group.addoption(
        "--heartq-url",
        dest="heartq_url",
        default=None,
        metavar="URL",
        help="where the heartq_* fixtures make each test's queue: 'sqlite' (a file in "
        "tmp_path, the default) or a postgresql:// server URL (a new schema per test, "
        f"dropped after). Default: ${ENV_TEST_URL}, else sqlite.",
    )
    parser.addini(
        INI_APP,
        "module:attribute of the heartq.App that the heartq_app fixture points at a "
        "fresh queue for each test",
        default="",
    )


def pytest_configure(config: pytest.Config) -> None:
    """A server given that test queues cannot be made on stops the run at once, in one
    line (the password hidden); nothing is checked when none is given."""
    try:
        server_kind(_server(config))
    except ValueError as exc:  # ConfigError
        raise pytest.UsageError(f"heartq: --heartq-url / ${ENV_TEST_URL}: {exc}") from None


def _server(config: pytest.Config) -> str | None:
    """The server test queues are made on (None: SQLite files)."""
    return config.getoption("heartq_url", None) or os.environ.get(ENV_TEST_URL) or None


@pytest.fixture(scope="session")
def _heartq_server(request: pytest.FixtureRequest) -> str | None:
    """The server test queues are made on (None: SQLite files), once it answered: the
    first test that asks for a queue there connects once, and a server that does not
    answer (a database that does not exist, a wrong password, nothing listening) stops
    the run there in one line, the password hidden, rather than failing every test with
    the same traceback. Checked at the first use, not at startup: a run that uses none of
    the fixtures connects to nothing. (A session fixture: set up before any test's own,
    so the run stops before a test has begun.)"""
    server = _server(request.config)
    if server is None:
        return None
    from heartq.errors import StoreUnavailable
    from heartq.store import open_store

    store = open_store(server)
    try:
        store.link.reach()
    except StoreUnavailable as exc:
        pytest.exit(f"heartq: --heartq-url / ${ENV_TEST_URL}: {exc}", returncode=4)
    finally:
        store.link.close()
    return server


@pytest.fixture
def heartq_app_for(
    _heartq_server: str | None, tmp_path: Path
) -> Iterator[Callable[[App], App]]:
    """`heartq_app_for(app)` points `app` at a fresh queue for this test and returns it;
    after the test, its URL and transport are put back and the queue removed."""
    server = _heartq_server
    counter = itertools.count()
    with contextlib.ExitStack() as stack:

        def point(app: App) -> App:
            if not isinstance(app, App):
                raise TypeError(f"heartq_app_for takes a heartq.App, got {app!r}")
            directory = tmp_path / f"heartq-{next(counter)}"
            return stack.enter_context(use_fresh_queue(app, server, directory))

        yield point


@pytest.fixture
def heartq_app(
    request: pytest.FixtureRequest, heartq_app_for: Callable[[App], App]
) -> Iterator[App]:
    """The app under test on a fresh queue: the one the `heartq_app` ini key names
    (`module:attribute`), else a new `heartq.App()` without tasks, closed after."""
    ref = str(request.config.getini(INI_APP) or "").strip()
    if ref:
        yield heartq_app_for(_load(ref))
        return
    app = App()
    try:
        yield heartq_app_for(app)
    finally:
        app.close()


@pytest.fixture
def heartq_url(_heartq_server: str | None, tmp_path: Path) -> Iterator[str]:
    """The URL of a fresh queue of its own for this test, removed after."""
    with fresh_queue_url(_heartq_server, tmp_path / "heartq-url") as url:
        yield url


def _load(ref: str) -> App:
    """The app `ref` names, as `heartq worker` loads one; a bad reference fails the
    tests that use it, in one line."""
    from heartq.cli.common import load_app

    try:
        return load_app(ref)
    except ValueError as exc:  # ConfigError
        pytest.fail(f"heartq: ini {INI_APP} = {ref!r}: {exc}", pytrace=False)




@pytest.fixture
def heartq_django_app(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[App]:
    """The Django task backend `default` (heartq's) on a fresh queue for this test: its
    app, for `heartq.testing`'s functions (`heartq.contrib.django.testing`)."""
    from heartq.contrib.django.testing import fresh_queue

    with fresh_queue("default", _server(request.config), tmp_path / "heartq-django") as app:
        yield app
