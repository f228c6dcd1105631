"""The signup service's API: a signup enqueues the welcome email, a worker sends it.

Run it with `uvicorn main:app` and a worker beside it with `heartq worker tasks:app`.
"""

from __future__ import annotations

from fastapi import FastAPI, status
from pydantic import BaseModel

from tasks import send_welcome_email

app = FastAPI()


class Signup(BaseModel):
    address: str


@app.post("/signups", status_code=status.HTTP_202_ACCEPTED)
async def sign_up(body: Signup) -> dict[str, str]:
    job_id = await send_welcome_email.enqueue_async(address=body.address)
    return {"email_job": job_id}
