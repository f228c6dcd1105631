"""Fixtures of the signup service's tests. `heartq_app` comes from heartq's pytest
plugin: tasks.app (named in pytest.ini), on a fresh queue for each test."""

from __future__ import annotations

from collections.abc import Iterator

import heartq
import pytest
from fastapi.testclient import TestClient

import tasks
from main import app


@pytest.fixture
def client(heartq_app: heartq.App) -> Iterator[TestClient]:
    """The API, enqueueing into this test's queue (heartq_app is set up first)."""
    with TestClient(app) as client:
        yield client


@pytest.fixture
def outbox(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str]]:
    """The messages the tasks deliver: the drain runs them in this process, so the
    monkeypatch reaches them."""
    sent: list[tuple[str, str]] = []
    monkeypatch.setattr(tasks, "deliver", lambda address, subject: sent.append((address, subject)))
    return sent
