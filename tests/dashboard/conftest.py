"""The dashboard's server-side tests: `create_app` on a fresh queue of each backend (the
`store_url` and `store` fixtures of tests/conftest.py: a real SQLite file, a real
PostgreSQL schema), driven by Starlette's TestClient.

`dashboard(**options)` makes a client of a dashboard over the test's queue (options go to
`create_app`: `allow_actions`, `token`, `url` for another URL of the same queue); tests
arrange jobs through `store`, the same queue opened in the test, with the store
operations workers and operators use (tests/conformance/support.py).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from starlette.testclient import TestClient

from heartq.dashboard import create_app
from heartq.store import Store


@pytest.fixture
def dashboard(store_url: str, store: Store) -> Iterator[Callable[..., TestClient]]:
    """`dashboard(**options)`: a TestClient of `create_app(store_url, **options)`; every
    client and the store its dashboard opened are closed after the test."""
    made: list[TestClient] = []

    def make(url: str | None = None, **options: Any) -> TestClient:
        client = TestClient(create_app(url or store_url, **options), follow_redirects=False)
        made.append(client)
        return client

    yield make
    for client in made:
        client.close()
        client.app.state.store.link.close()  # type: ignore[attr-defined]
