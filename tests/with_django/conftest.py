"""The Django site fixture: one site per Django environment and database for a module
(tests/with_django/harness.py), shared by its tests. pytest orders a module's tests by the
site they take, so each site is set up once per test process that runs its tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.with_django import environments
from tests.with_django.harness import Site, postgres_site, sqlite_site

SITES = [
    pytest.param(("django61", "sqlite"), id="django61-sqlite"),
    pytest.param(("django61", "postgres"), id="django61-postgres"),
    pytest.param(("backport", "sqlite"), id="backport-sqlite"),
    pytest.param(("backport", "postgres"), id="backport-postgres"),
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
