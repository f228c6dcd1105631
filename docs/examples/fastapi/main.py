"""A FastAPI service that enqueues heartq jobs and reports on them.

Run the API with `uvicorn main:app` and a worker beside it with `heartq worker tasks:app`
(both in this directory, on the same HEARTQ_URL).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Annotated, Any

import heartq
from fastapi import FastAPI, HTTPException, Query, Response, status
from pydantic import BaseModel

from tasks import app as queue
from tasks import make_thumbnail


@asynccontextmanager
async def lifespan(_: FastAPI) -> AsyncIterator[None]:
    """Open the queue at start-up, so a wrong HEARTQ_URL fails the deploy rather than
    the first request, and close it at shutdown (its connections and, on PostgreSQL,
    the connection that listens for job ends)."""
    await asyncio.to_thread(queue.migrate)
    try:
        yield
    finally:
        queue.close()


app = FastAPI(lifespan=lifespan)


class ThumbnailRequest(BaseModel):
    image_url: str
    size: int = 128


class EmailRequest(BaseModel):
    address: str


@app.post("/thumbnails", status_code=status.HTTP_202_ACCEPTED)
async def request_thumbnail(body: ThumbnailRequest) -> dict[str, str]:
    """Enqueue through the task object: arguments checked and typed from the function;
    the database round trip runs off the event loop."""
    job_id = await make_thumbnail.enqueue_async(image_url=body.image_url, size=body.size)
    return {"job_id": job_id}


@app.post("/welcome-emails", status_code=status.HTTP_202_ACCEPTED)
async def request_welcome_email(body: EmailRequest) -> dict[str, str]:
    """Enqueue by name: the way a service that does not ship tasks.py enqueues. The
    task's queue and retry policy come from what the workers declared."""
    job_id = await queue.enqueue_async("send_welcome_email", {"address": body.address})
    return {"job_id": job_id}


@app.get("/jobs/{job_id}")
async def job_status(
    job_id: str, response: Response, wait: Annotated[float, Query(ge=0, le=30)] = 0.0
) -> dict[str, Any]:
    """200 with the result once the job has ended, 202 with its progress while it has
    not. `?wait=S` long-polls up to S seconds for the end, holding no thread."""
    try:
        result = await queue.result_async(job_id, timeout=wait)
    except heartq.JobNotFound:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no job {job_id}") from None
    except heartq.ResultTimeout:
        job = await asyncio.to_thread(queue.get_job, job_id)
        response.status_code = status.HTTP_202_ACCEPTED
        return {"id": job_id, "status": job["status"], "progress": job["progress"]}
    except heartq.JobDead as dead:
        return {"id": job_id, "status": "dead", "error": str(dead)}
    except heartq.JobCancelled:
        return {"id": job_id, "status": "cancelled"}
    return {"id": job_id, "status": "succeeded", "result": result}
