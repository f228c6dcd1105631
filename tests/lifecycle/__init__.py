"""heartq.lifecycle on its own, without a database: a job's fate as docs/design/job-states.md
states it."""
