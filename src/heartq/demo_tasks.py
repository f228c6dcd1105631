"""The task module of `heartq demo`: `heartq worker heartq.demo_tasks:app`.

One task, `demo_report`, that pretends to build a report in four stages for a few seconds,
reporting its progress with `ctx.heartbeat(progress=..., stage=..., message=...)` about
every 0.2 s and saving a checkpoint at the end of each stage, so that an attempt which
takes over from a crashed one resumes at the stage where the crash left it.

The demo's jobs live on their own queue (`heartq-demo`) so that `heartq demo --url ...`
pointed at a real database never hands them to, or takes them from, other workers.
"""

from __future__ import annotations

import time
from typing import Any

import heartq

DEMO_QUEUE = "heartq-demo"
"""The queue of the demo's jobs."""
DEMO_TASK = "demo_report"
"""The name of the demo's task."""
STAGES = ("fetch", "crunch", "render", "upload")
"""The stages of one demo job, an equal share of its duration each."""
TICK = 0.2
"""Seconds between two progress reports of a demo job."""

app = heartq.App()


@app.task(
    name=DEMO_TASK,
    queue=DEMO_QUEUE,
    max_retries=3,
    retry_backoff=0.2,
    retry_backoff_max=1.0,
    heartbeat_timeout=3.0,
)
def demo_report(ctx: heartq.JobContext, report: int, seconds: float) -> dict[str, Any]:
    """Work for `seconds` in four stages; resume after the last completed stage."""
    checkpoint = ctx.checkpoint if isinstance(ctx.checkpoint, dict) else {}
    first_stage = int(checkpoint.get("stages_done", 0))
    per_stage = max(seconds, TICK) / len(STAGES)
    for index in range(first_stage, len(STAGES)):
        stage = STAGES[index]
        started = time.monotonic()
        while True:
            elapsed = time.monotonic() - started
            fraction = min(1.0, elapsed / per_stage)
            ctx.heartbeat(
                progress=round((index + fraction) / len(STAGES), 3),
                stage=stage,
                message=f"report {report}: {stage} {int(fraction * 100)}%",
            )
            if fraction >= 1.0:
                break
            time.sleep(min(TICK, per_stage - elapsed))
        ctx.heartbeat(checkpoint={"stages_done": index + 1})
    return {
        "report": report,
        "attempt": ctx.attempt,
        "resumed_at_stage": STAGES[first_stage] if 0 < first_stage < len(STAGES) else None,
        "worker_id": ctx.worker_id,
    }
