"""Only SQLite: the active workers of this host, whose liveness lock files a probe
tries (`liveness.py`)."""

from __future__ import annotations

ACTIVE_WORKERS_ON_HOST = """
SELECT id FROM heartq_workers WHERE status = 'active' AND hostname = :hostname
"""
