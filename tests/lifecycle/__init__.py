"""heartq.lifecycle on its own, without a database: a job's fate as docs/DESIGN.md states it."""
