"""Fixtures of the conformance suite (the `store` fixtures live in tests/conftest.py)."""

from __future__ import annotations

import math

import pytest

from heartq.store import Store


@pytest.fixture
def t0(store: Store) -> float:
    """A base time from the database's clock, in whole seconds so that times compare
    exactly in ISO-8601 (millisecond) form. Tests add to it and pass it as `now=`."""
    return float(math.floor(store.clock()))
