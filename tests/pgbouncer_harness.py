"""PgBouncer for the tests: `bench/servers/pgbouncer.py`'s (Debian's `pgbouncer` on a free
port in front of a PostgreSQL server; see there), its directory under the run's scratch
directory (`tests/leftovers.py`). `pgbouncer(server_url, **options)`: one for the block.

`scripts/test` installs the package (apt) when it is missing. Tests that need it fail
with the reason when it is not there, never skip.
"""

from __future__ import annotations

from pathlib import Path

from bench.servers import pgbouncer as bouncers
from tests import leftovers


class PgBouncer(bouncers.PgBouncer):
    def scratch(self) -> Path:
        return leftovers.scratch_dir()


pgbouncer = PgBouncer.running
"""A `PgBouncer` in front of `server_url` for the block (options: `PgBouncer`'s)."""
