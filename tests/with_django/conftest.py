"""The Django site fixture: one site per Django environment and database for a module
(tests/with_django/harness.py), shared by its tests. pytest orders a module's tests by the
site they take, so each site is set up once per test process that runs its tests; under
xdist's work stealing a site's tests lead a process's share as one block (`long(SECONDS,
together=SITE)`, tests/long_first.py), so that one process runs them all."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.with_django import environments
from tests.with_django.harness import Site, postgres_site, sqlite_site


def _site(flavor: str, database: str, seconds: float) -> Any:
    """A site's parameter, its tests marked to run as one block of about `seconds` (its
    set-up and its tests, skips included: 6-19 s measured, tests/with_django alone at -n 2;
    only the tests' order is read from it)."""
    name = f"{flavor}-{database}"
    return pytest.param((flavor, database), id=name,
                        marks=pytest.mark.long(seconds, together=name))  # fmt: skip


SITES = [
    _site("django61", "sqlite", 15),
    _site("django61", "postgres", 20),
    _site("backport", "sqlite", 6),
    _site("backport", "postgres", 18),
]


def flavor_of(name: str) -> environments.Flavor:
    """The named Django environment (made if needed), or the test is skipped saying why
    it cannot be (no Python 3.12 or later on the machine)."""
    if name == "backport":
        return environments.backport()
    made = environments.django61()
    if isinstance(made, str):
        pytest.skip(made)
    return made


@pytest.fixture(scope="module", params=SITES)
def site(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Site]:
    flavor_name, database = request.param
    flavor = flavor_of(flavor_name)
    workdir = tmp_path_factory.mktemp(f"site-{flavor_name}-{database}")
    if database == "sqlite":
        made = sqlite_site(flavor, workdir)
        try:
            made.start()
            yield made
        finally:
            made.stop()
        return
    server = request.getfixturevalue("pg_server_url")
    with postgres_site(flavor, workdir, server) as made:
        try:
            made.start()
            yield made
        finally:
            made.stop()
