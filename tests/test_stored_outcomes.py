"""`Outcome` is the one word for how an attempt ended, in the worker as in the store; the
worker's `lost` ("report nothing") is never stored. So the outcomes a store may be asked
to keep (`STORED_OUTCOMES`) are exactly those each backend's schema accepts."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from heartq.model import STORED_OUTCOMES, Outcome

MIGRATIONS = Path(__file__).resolve().parents[1] / "src" / "heartq" / "store"


def schema_outcomes(backend: str) -> set[str]:
    """The outcomes the latest `CHECK` on the executions' outcome column accepts."""
    checks = [
        match.group(1)
        for path in sorted((MIGRATIONS / backend / "migrations").glob("*.sql"))
        for match in re.finditer(r"outcome IN\s*\(([^)]*)\)", path.read_text())
    ]
    assert checks, f"no outcome CHECK in {backend}'s migrations"
    return set(re.findall(r"'(\w+)'", checks[-1]))


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_every_stored_outcome_is_one_the_schema_accepts(backend: str) -> None:
    assert {str(o) for o in STORED_OUTCOMES} == schema_outcomes(backend)


def test_lost_is_the_worker_s_word_only() -> None:
    assert Outcome.LOST not in STORED_OUTCOMES
    assert set(Outcome) - STORED_OUTCOMES == {Outcome.LOST}
