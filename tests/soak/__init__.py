"""Chaos and soak runs: real worker processes under injected faults, invariants checked
against the database afterwards (`python -m tests.soak.chaos`, `scripts/soak`)."""
