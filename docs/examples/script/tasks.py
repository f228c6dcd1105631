"""The tasks of the plain-script example. A worker runs them: `heartq worker tasks:app`."""

from __future__ import annotations

import heartq

# HEARTQ_URL if set, else the SQLite file heartq.db in the working directory. The store
# opens on first use, so defining the app at import time costs nothing.
app = heartq.App()


@app.task
def add(a: int, b: int) -> int:
    """The smallest task there is: its return value becomes the job's result."""
    return a + b


@app.task(max_retries=2, timeout=60)
def count_words(ctx: heartq.JobContext, text: str) -> dict[str, int]:
    """A task that reports progress: `heartq jobs show ID` prints the last report."""
    words = text.split()
    ctx.heartbeat(progress=1.0, stage="counted", message=f"{len(words)} words")
    return {"words": len(words), "distinct": len({w.lower() for w in words})}
