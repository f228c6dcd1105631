"""The web dashboard: see and steer the queue in a browser (`heartq dashboard`).

`create_app(url)` is an ASGI app (Starlette): serve it with `heartq dashboard`, or mount
it in an application's own server. Pages read the store through the same operations as
the command line, and update themselves every couple of seconds (htmx); actions are off
unless allowed, and guarded by a token and CSRF checks (`security.py`). Needs the
`dashboard` extra: `pip install 'heartq[dashboard]'`.
"""

from __future__ import annotations

from heartq.dashboard.app import create_app

__all__ = ["create_app"]
