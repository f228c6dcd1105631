"""Shared fixtures: a `Store` on a fresh database, once per backend.

Storage tests take `store` (opened through `heartq.store.open_store(url)` and migrated),
`store_url` when they open stores themselves (other processes, migrate races),
`store_factory` when they need several fresh, migrated stores in one test,
`empty_stores` for an empty queue again and again (hypothesis: one per example),
`migrated_url(s)` for the URLs of such, or `fresh_url` for more fresh,
not yet migrated databases.

Backends: each name in `BACKENDS` is a pytest param of `backend`, and every test using
these fixtures runs once per backend, unchanged. Both by default; `HEARTQ_TEST_BACKENDS=sqlite`
narrows it (PostgreSQL: a fresh schema per database in the run's own database, from
`tests/pg_harness.py`; migrated ones made ahead by `pg_schemas`). A new backend adds its
name here and a branch in `fresh_url` and `migrated_urls`.

Each guarantee is tested once, at the level where it lives: every store operation on every
backend in tests/conformance; the layers above the store (`LAYERS`: the command line, the
worker in-process, `heartq.testing`, the dashboard, real worker processes, the examples),
whose fixtures take `backend` too, on the run's first backend only (`LAYER_BACKENDS`),
unless a test is marked `on_every_backend`: what that layer does differently by backend
(NOTIFY wake-ups and listened cancels, liveness locks and the reclaim of a killed or
frozen worker, a caller's own connection, an outage as each database shows it,
PostgreSQL's pool).
`HEARTQ_TEST_LAYER_BACKENDS=sqlite,postgres` runs every layer test on both, unchanged.
`only_on(...)` keeps a test to some backends (tests/integration/test_postgres.py,
test_pooler.py: what only PostgreSQL has). One more, not in the default run:
`pgbouncer`, PostgreSQL reached through a PgBouncer in transaction mode
(`tests/pgbouncer_harness.py`, one per test process) with `?pooler=transaction`
(`HEARTQ_TEST_BACKENDS=pgbouncer pytest tests/conformance`: every store operation
through the pooler; tests/integration/test_pooler.py covers it in the default run).

Logic that needs no database (the worker's ledger, claimer and completer) is tested
without one as well, in tests/unit, over a fake of the store interface and with every
database connection refused: beside the tests above, never instead of them.

Tests marked `long(SECONDS)` start first under xdist (`tests/long_first.py`).

The run itself: the first Ctrl-C stops it, teardowns included (`tests/interrupt.py`);
at its start it removes what killed runs left, at its end what it left itself
(`tests/leftovers.py`).
"""

from __future__ import annotations

import contextlib
import fcntl
import itertools
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from heartq.store import Store, open_store
from tests import leftovers, long_first, support
from tests.interrupt import FirstInterrupt

if TYPE_CHECKING:
    from tests.pg_harness import SchemaStock
    from tests.sqlite_template import Template as SqliteTemplate

BACKENDS = [
    name.strip()
    for name in os.environ.get("HEARTQ_TEST_BACKENDS", "sqlite,postgres").split(",")
    if name.strip()
]
"""The storage backends every conformance test runs against."""

LAYER_BACKENDS = [
    name.strip()
    for name in os.environ.get("HEARTQ_TEST_LAYER_BACKENDS", BACKENDS[0]).split(",")
    if name.strip()
]
"""The backends a test of a layer above the store runs on: the run's first by default."""

LAYERS = frozenset({"cli", "dashboard", "examples", "integration", "runtime", "testing"})
"""The directories of tests/ whose tests run on `LAYER_BACKENDS` (unless marked
`on_every_backend`): presentation and orchestration over the store, in-process or as real
worker processes (tests/testing: `heartq.testing`'s drain, run and assertions, over the
worker in-process and the store's reads; tests/examples: docs/examples run as their users
run them, none of whose code depends on the backend), whose every store operation runs on
every backend in tests/conformance."""

on_every_backend = pytest.mark.on_every_backend
"""For a test of a layer (`LAYERS`) whose behaviour differs by backend: it runs on every
backend of the run (`BACKENDS`, and any more `HEARTQ_TEST_LAYER_BACKENDS` names)."""


def only_on(*backends: str) -> pytest.MarkDecorator:
    """Run a test on these backends only (of those `HEARTQ_TEST_BACKENDS` selects)."""
    return pytest.mark.parametrize("backend", [b for b in BACKENDS if b in backends])


_RUN = pytest.StashKey[leftovers.RunId]()
_INTERRUPT = pytest.StashKey[FirstInterrupt]()


@pytest.hookimpl(trylast=True)  # after the terminal's, before xdist starts its workers
def pytest_configure(config: pytest.Config) -> None:
    """Every pytest process acts on its first Ctrl-C only; the controller (not an xdist
    worker) names the run and removes what killed runs left, before any test starts."""
    handler = FirstInterrupt(config)
    handler.install()
    config.stash[_INTERRUPT] = handler
    if hasattr(config, "workerinput"):
        return
    config.stash[_RUN] = leftovers.start_run()
    _cache_bytecode()
    _tell(config, "removed what killed test runs left", leftovers.sweep_dead_runs())


def _cache_bytecode() -> None:
    """Every process the run starts from now on (xdist's workers, and every `python -m
    heartq` command, worker and dashboard the tests start) reads heartq's bytecode from
    the run's cache, compiled once (`tests.support.pytest_env`: `scripts/test`'s
    `.venv/pycache`, else the run's own). Under `PYTHONDONTWRITEBYTECODE` (set on some
    machines) each compiled heartq from source: 0.3-0.4 s of a core per process on this
    project's 2-core VM."""
    cached = support.pytest_env(os.environ)
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    os.environ.update(cached)


@pytest.hookimpl(optionalhook=True)  # xdist's: each worker process's input, from the controller
def pytest_configure_node(node: Any) -> None:
    """Tell the worker processes whether the run steals work (`--dist worksteal`): they run
    with `dist` set to "no" themselves."""
    node.workerinput["steals_work"] = node.config.getvalue("dist") == "worksteal"


@pytest.hookimpl(trylast=True)  # after the deselections (-m, -k) and fixtures' own order
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under xdist's work stealing, each process orders the collection so that the tests
    marked `long(SECONDS)` start first, at the fronts of the processes' shares
    (`tests/long_first.py`): none starts late and ends the run alone."""
    workerinput = getattr(config, "workerinput", {})
    if workerinput.get("steals_work"):
        items[:] = long_first.ordered(items, int(workerinput["workercount"]))


@pytest.hookimpl(hookwrapper=True, tryfirst=True)  # around pytest-timeout's clock
def pytest_runtest_protocol(item: pytest.Item) -> Iterator[None]:
    """Tests marked `one_at_a_time(NAME)` (one browser, one inner run of the test command,
    one set of same-named PostgreSQL key locks) run one at a time among the run's
    processes: each holds NAME's lock (`one_at_a_time`) from its setup to its teardown.
    Taken outside pytest-timeout's protocol-wide clock, so the wait for another process's
    test of the same name does not count against a test's own timeout."""
    names = sorted({str(name) for mark in item.iter_markers("one_at_a_time") for name in mark.args})
    with contextlib.ExitStack() as held:
        for name in names:  # in one order everywhere: no two tests wait for each other
            held.enter_context(one_at_a_time(name))
        yield


@contextlib.contextmanager
def one_at_a_time(name: str) -> Iterator[None]:
    """Hold the run's lock called `name` (a file in its scratch directory, shared by its
    xdist workers; an exclusive `flock`, which the kernel lets go if the holder dies)."""
    path = leftovers.scratch_dir() / f"one-at-a-time-{name}.lock"
    with open(path, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def pytest_unconfigure(config: pytest.Config) -> None:
    """The controller, last: what the run's teardowns left (after a Ctrl-C) goes."""
    run = config.stash.get(_RUN, None)
    if run is None:
        return
    config.stash[_INTERRUPT].ignore_from_now()
    _tell(config, "removed what this run left", leftovers.finish_run(run))


def _tell(config: pytest.Config, what: str, removed: leftovers.Removed) -> None:
    terminal = config.pluginmanager.get_plugin("terminalreporter")
    if removed and terminal is not None:
        terminal.write_line(f"heartq tests: {what}: {removed.summary()}")


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """A test that takes `backend` (itself or through a fixture) runs once per backend of
    `backends_of` it; one that parametrizes `backend` itself (`only_on`) keeps its own."""
    if "backend" in metafunc.fixturenames and not _parametrizes(metafunc.definition, "backend"):
        metafunc.parametrize("backend", backends_of(metafunc.definition))


def backends_of(test: pytest.Item) -> list[str]:
    """`BACKENDS`, except for a test of a layer (`LAYERS`): `LAYER_BACKENDS`, or both
    lists if it is marked `on_every_backend`."""
    here = Path(__file__).parent
    if not test.path.is_relative_to(here) or test.path.relative_to(here).parts[0] not in LAYERS:
        return BACKENDS
    if test.get_closest_marker("on_every_backend") is None:
        return LAYER_BACKENDS
    return list(dict.fromkeys([*BACKENDS, *LAYER_BACKENDS]))


def _parametrizes(test: pytest.Item, name: str) -> bool:
    """Whether one of `test`'s own `parametrize` marks names `name`."""
    for mark in test.iter_markers("parametrize"):
        names = mark.args[0] if mark.args else mark.kwargs["argnames"]
        if isinstance(names, str):
            names = [each.strip() for each in names.split(",")]
        if name in names:
            return True
    return False


@pytest.fixture
def backend(request: pytest.FixtureRequest) -> str:
    """The current backend's name (parametrized by `pytest_generate_tests`)."""
    return str(request.param)


@pytest.fixture(scope="session")
def pg_server() -> Iterator[str]:
    """A PostgreSQL server for the whole session (only started when a test needs it): the
    URL of the database tests are given (`tests/pg_harness.py`)."""
    from tests import pg_harness

    with pg_harness.server_url() as url:
        yield url


@pytest.fixture(scope="session")
def pg_server_url(pg_server: str) -> str:
    """The URL of this run's database on the session's PostgreSQL server, where tests make
    their schemas (dropped with the run's end)."""
    from tests import pg_harness

    return pg_harness.run_database_url(pg_server)


@pytest.fixture(scope="session")
def pgbouncer_server(pg_server_url: str) -> Iterator[Any]:
    """A PgBouncer in transaction mode in front of the session's PostgreSQL server, for
    the whole session (only started when a test needs it): a `PgBouncer`."""
    from tests import pgbouncer_harness

    with pgbouncer_harness.pgbouncer(pg_server_url, pool_size=4) as bouncer:
        yield bouncer


@pytest.fixture
def fresh_url(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> Iterator[Callable[[], str]]:
    """`fresh_url()`: the URL of a new, empty database of the current backend. What it
    made is dropped after the test (SQLite files go with `tmp_path`)."""
    counter = itertools.count()
    with contextlib.ExitStack() as cleanup:

        def make() -> str:
            if backend == "sqlite":
                folder = tmp_path / f"db{next(counter)}"
                folder.mkdir()
                return f"sqlite:///{folder / 'heartq.db'}"  # tmp_path is absolute
            if backend == "postgres":
                from tests import pg_harness

                server = request.getfixturevalue("pg_server_url")
                return cleanup.enter_context(pg_harness.schema_url(server))
            if backend == "pgbouncer":
                from tests import pg_harness

                server = request.getfixturevalue("pg_server_url")
                direct = cleanup.enter_context(pg_harness.schema_url(server))
                bouncer = request.getfixturevalue("pgbouncer_server")
                return str(bouncer.url(of=direct, pooler="transaction"))
            raise AssertionError(f"no test database recipe for backend {backend!r}")

        yield make


@pytest.fixture(scope="session")
def pg_schemas(pg_server_url: str) -> Iterator[SchemaStock]:
    """This process's migrated schemas made ahead and dropped behind (one per test)."""
    from tests import pg_harness

    stock = pg_harness.SchemaStock(pg_server_url)
    yield stock
    stock.close()


@pytest.fixture(scope="session")
def sqlite_template(tmp_path_factory: pytest.TempPathFactory) -> SqliteTemplate:
    """This process's migrated SQLite file, copied for each test's migrated database."""
    from tests.sqlite_template import Template

    return Template(tmp_path_factory.mktemp("sqlite-template"))


@pytest.fixture
def migrated_urls(
    backend: str, fresh_url: Callable[[], str], request: pytest.FixtureRequest
) -> Iterator[Callable[[], str]]:
    """`migrated_urls()`: the URL of another fresh database of the current backend,
    migrated (on PostgreSQL ahead of the test, by `pg_schemas`, and dropped behind it;
    on SQLite a copy of `sqlite_template`'s file)."""
    with contextlib.ExitStack() as behind:

        def make() -> str:
            if backend == "postgres":
                stock = request.getfixturevalue("pg_schemas")
                url = str(stock.take())
                behind.callback(stock.drop_behind, url)
                return url
            url = fresh_url()
            if backend == "sqlite":
                template = request.getfixturevalue("sqlite_template")
                template.copy_to(Path(url.removeprefix("sqlite:///")))
                return url
            made = open_store(url)
            made.link.migrate()
            made.link.close()
            return url

        yield make


@pytest.fixture
def migrated_url(migrated_urls: Callable[[], str]) -> str:
    """The URL of a fresh database of the current backend, migrated."""
    return migrated_urls()


@pytest.fixture
def store_url(fresh_url: Callable[[], str], request: pytest.FixtureRequest) -> str:
    """The URL of a fresh, not yet migrated database of the current backend; with
    `store`, the URL of the store's database (migrated)."""
    if "store" in request.fixturenames:
        return str(request.getfixturevalue("migrated_url"))
    return fresh_url()


@pytest.fixture
def store(migrated_url: str) -> Iterator[Store]:
    """A migrated `Store` on a fresh database, closed after the test."""
    opened = open_store(migrated_url)
    opened.link.migrate()  # up to date already: read, not written
    yield opened
    opened.link.close()


@pytest.fixture
def store_factory(migrated_urls: Callable[[], str]) -> Iterator[Callable[[], Store]]:
    """`store_factory()`: a migrated store on another fresh database of the current
    backend; all are closed after the test."""
    made: list[Store] = []

    def make() -> Store:
        opened = open_store(migrated_urls())
        opened.link.migrate()  # up to date already: read, not written
        made.append(opened)
        return opened

    yield make
    for opened in made:
        opened.link.close()


@pytest.fixture
def empty_stores(
    backend: str, store_factory: Callable[[], Store], request: pytest.FixtureRequest
) -> Iterator[Callable[[], Store]]:
    """`empty_stores()`: a migrated store on an empty queue, one at a time: each call
    first closes the store the call before handed out. For a test that wants an empty
    queue many times over (hypothesis: one per example). On PostgreSQL, the same schema
    each time, put back as its migration left it (`pg_harness.EmptiedSchema`: a schema
    per example costs a migration, 0.1-0.3 s of DDL, and a drop); on SQLite a new file
    each time (`store_factory`: a migration there costs a few milliseconds)."""
    handed: list[Store] = []
    emptied = None
    if backend == "postgres":
        from tests import pg_harness

        emptied = pg_harness.EmptiedSchema(str(request.getfixturevalue("migrated_url")))

    def make() -> Store:
        while handed:
            handed.pop().link.close()  # its sessions, and their locks and LISTENs, end here
        if emptied is None:
            handed.append(store_factory())
        else:
            opened = open_store(emptied.empty())
            opened.link.migrate()  # up to date already: read, not written
            handed.append(opened)
        return handed[-1]

    yield make
    while handed:
        handed.pop().link.close()
    if emptied is not None:
        emptied.close()
