"""How a fairness key's queued count reads on every screen (`heartq.inspect.fairness`):
with a `+` exactly when the store says the key may hold more than it counted (PostgreSQL:
its lanes' count reached the bound; SQLite: its queue's line was read only in part,
whatever the key's own count)."""

from __future__ import annotations

from heartq.inspect.fairness import queued_text


def test_a_count_that_may_be_short_says_so() -> None:
    assert queued_text({"queued": 10_000, "more": True}) == "10000+"
    assert queued_text({"queued": 37, "more": True}) == "37+"  # a line read in part
    assert queued_text({"queued": 37, "more": False}) == "37"
