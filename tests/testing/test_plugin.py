"""The pytest plugin, as a user's suite meets it: a real `pytest` run in a subprocess on a
tiny project, the plugin loaded by the package's entry point (nothing in the project
names it). Its fixtures on SQLite and on PostgreSQL (by option and by environment), each
test on a queue of its own, the user's app put back after, the schemas dropped; one-line
errors for a bad URL or app; and nothing at all for a suite that uses none of it."""

from __future__ import annotations

import importlib.metadata
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest

from heartq.store.postgres.connection import parse_url
from tests.testing.inner import make_project, run_pytest

TESTS = """
import os
import pathlib

import heartq
import pytest
from heartq import testing

import tasks

ORIGINAL = tasks.app.url
SEEN = pathlib.Path(os.environ["SEEN_FILE"])


def remember(url):
    with SEEN.open("a") as seen:
        seen.write(url + "\\n")


def test_the_app_is_on_a_fresh_queue(heartq_app):
    assert heartq_app is tasks.app and heartq_app.url != ORIGINAL
    remember(heartq_app.url)
    assert testing.enqueued(heartq_app) == []
    tasks.greet.enqueue("ada")
    testing.assert_enqueued(tasks.greet, args={"name": "ada"})
    (ran,) = testing.drain(heartq_app)
    assert ran.result == "hello ada"


def test_each_test_has_a_queue_of_its_own(heartq_app):
    remember(heartq_app.url)
    assert testing.enqueued(heartq_app) == []
    with pytest.raises(ValueError, match="bad name"):
        testing.run(tasks.greet, "bad")


def test_the_app_is_put_back_after():
    assert tasks.app.url == ORIGINAL


def test_another_app_and_a_url(heartq_app_for, heartq_url):
    other = heartq.App()

    @other.task
    def ping() -> str:
        return "pong"

    assert heartq_app_for(other) is other
    remember(other.url)
    remember(heartq_url)
    assert testing.run(ping) == "pong"
"""


def _project(tmp_path: Path, ini: str = "heartq_app = tasks:app", tests: str = TESTS) -> Path:
    return make_project(tmp_path, tests, ini)


def test_the_entry_point_names_the_plugin() -> None:
    found = {e.name: e.value for e in importlib.metadata.entry_points(group="pytest11")}
    assert found.get("heartq") == "heartq.testing.plugin"


@pytest.mark.parametrize("where", ["sqlite", "option"])
def test_fixtures_give_each_test_a_fresh_queue(
    where: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """On SQLite, and on the server `--heartq-url` names (`$HEARTQ_TEST_URL` is the same
    setting, read where the option is not given: test_a_bad_server_stops_the_run_in_one_
    line_without_its_password shows the variable read)."""
    project = _project(tmp_path)
    seen = tmp_path / "seen.txt"
    env = {"SEEN_FILE": str(seen)}
    args = ["--basetemp", str(tmp_path / "base")]
    server = None
    if where != "sqlite":
        server = request.getfixturevalue("pg_server_url")
        args += ["--heartq-url", server]

    done = run_pytest(project, *args, env=env)

    assert done.returncode == 0, done.stdout + done.stderr
    assert "4 passed" in done.stdout
    urls = seen.read_text().split()
    assert len(urls) == len(set(urls)) == 4
    if server is None:
        assert all(u.startswith(f"sqlite:///{tmp_path / 'base'}") for u in urls), urls
        return
    schemas = [parse_url(url)[1] for url in urls]
    assert all(s.startswith("heartq_test_") for s in schemas), schemas
    with psycopg.connect(server) as conn:
        left = conn.execute(
            "SELECT schema_name FROM information_schema.schemata WHERE schema_name = ANY(%s)",
            (schemas,),
        ).fetchall()
    assert left == [], "a test schema was not dropped"


@pytest.mark.parametrize("where", ["option", "environment"])
def test_a_bad_server_stops_the_run_in_one_line_without_its_password(
    where: str, tmp_path: Path
) -> None:
    """Given as `--heartq-url` or as `$HEARTQ_TEST_URL`: the one setting, read from either."""
    bad = "mysql://app:s3cret@db/q"
    if where == "option":
        done = run_pytest(_project(tmp_path), "--heartq-url", bad)
    else:
        done = run_pytest(_project(tmp_path), env={"HEARTQ_TEST_URL": bad})
    assert done.returncode == 4, done.stdout + done.stderr  # pytest's usage error
    assert (
        "heartq: --heartq-url / $HEARTQ_TEST_URL: a test queue is made on 'sqlite' or a "
        "postgresql:// server URL, got 'mysql://app:***@db/q'"
    ) in done.stderr
    assert "s3cret" not in done.stdout + done.stderr


def test_a_database_that_does_not_exist_stops_the_run_once_in_one_line(
    tmp_path: Path, pg_server_url: str
) -> None:
    """`--heartq-url` naming a database the server does not have (or a wrong password,
    nothing listening): the first test that asks for a queue there stops the run, in one
    line, the password hidden; not every test failing with the same traceback."""
    parts = urlsplit(pg_server_url)
    user = (parts.username or "postgres") + ":s3cret"
    netloc = f"{user}@{parts.hostname}:{parts.port or 5432}"
    missing = urlunsplit(parts._replace(netloc=netloc, path="/hqt_no_such_database"))
    seen = {"SEEN_FILE": str(tmp_path / "seen.txt")}
    done = run_pytest(_project(tmp_path), "--heartq-url", missing, env=seen)
    said = done.stdout + done.stderr
    assert done.returncode == 4, said  # as a bad URL: the run cannot go on
    assert "no tests ran" in done.stdout, said
    stops = [line for line in said.splitlines() if "heartq: --heartq-url" in line]
    assert len(stops) == 1, said
    assert 'database "hqt_no_such_database" does not exist' in stops[0], said
    assert "s3cret" not in said and "Traceback" not in said and "Error" not in done.stdout


def test_a_bad_app_fails_the_tests_that_use_it_in_one_line(tmp_path: Path) -> None:
    tests = """
    def test_uses_it(heartq_app):
        pass

    def test_does_not():
        pass
    """
    project = _project(tmp_path, ini="heartq_app = nosuch:app", tests=tests)
    done = run_pytest(project, "-rA")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "1 passed, 1 error" in done.stdout
    assert (
        "heartq: ini heartq_app = 'nosuch:app': cannot import APP 'nosuch:app': module "
        "'nosuch' failed to import: ModuleNotFoundError: No module named 'nosuch'"
    ) in done.stdout
    assert "Traceback" not in done.stdout


def test_a_suite_that_uses_none_of_it_sees_nothing(tmp_path: Path) -> None:
    """Only `heartq_*` fixtures, none autouse, and no test behaves otherwise;
    `-p no:heartq` turns it off."""
    tests = """
    def test_plain(request):
        assert not [n for n in request.fixturenames if n.startswith("heartq")]
    """
    project = _project(tmp_path, ini="", tests=tests)
    plain = run_pytest(project)
    assert plain.returncode == 0 and "1 passed" in plain.stdout, plain.stdout + plain.stderr

    listed = run_pytest(project, "--fixtures", "-v").stdout
    section = listed.split("fixtures defined from heartq.testing.plugin", 1)[1].splitlines()[1:]
    ends = next(i for i, line in enumerate(section) if line.startswith("---"))
    names = sorted(line.split()[0] for line in section[:ends] if line[:1].isalpha())
    assert names == ["heartq_app", "heartq_app_for", "heartq_django_app", "heartq_url"], section

    off = run_pytest(project, "-p", "no:heartq", "--fixtures")
    assert "heartq.testing.plugin" not in off.stdout and off.returncode == 0
