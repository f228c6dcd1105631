"""What every statement module shares: the time (`NOW`; the others are given it as
`:now`)."""

from __future__ import annotations

NOW = "SELECT (julianday('now') - 2440587.5) * 86400.0"
