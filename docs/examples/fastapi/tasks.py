"""The tasks of the FastAPI example. Workers run them: `heartq worker tasks:app`."""

from __future__ import annotations

import asyncio

import heartq

# HEARTQ_URL if set, else the SQLite file heartq.db in the working directory. The store
# opens on first use: the web process opens it in its lifespan (main.py).
app = heartq.App()


@app.task(max_retries=3, timeout=120)
def make_thumbnail(ctx: heartq.JobContext, image_url: str, size: int = 128) -> dict[str, object]:
    """CPU-ish work that must not run in the request: the API only enqueues it."""
    ctx.heartbeat(progress=0.5, stage="resize")
    return {"image_url": image_url, "size": size, "thumbnail": f"{image_url}?w={size}"}


@app.task(queue="emails", max_retries=5)
async def send_welcome_email(address: str) -> str:
    """Its own queue, so a slow mail server never holds up thumbnails."""
    await asyncio.sleep(0)  # an SMTP or HTTP call would go here
    return f"welcome email sent to {address}"
