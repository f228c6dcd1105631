"""`heartq dashboard`: serve the web dashboard (heartq/dashboard) with uvicorn."""

from __future__ import annotations

import contextlib
import socket

import click

from heartq import events
from heartq.cli.common import Seconds, store_for, url_option
from heartq.errors import ConfigError
from heartq.event_stream import EventStream
from heartq.store import redact

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8181
LOCAL_HOSTS = ("127.0.0.1", "localhost", "::1")


@click.command("dashboard")
@url_option
@click.option("--host", default=DEFAULT_HOST, show_default=True, help="Address to listen on.")
@click.option("--port", type=click.IntRange(0, 65535), default=DEFAULT_PORT, show_default=True)
@click.option(
    "--allow-actions",
    is_flag=True,
    help="Let anyone who reaches the page cancel, replay and purge (read-only without).",
)
@click.option(
    "--token",
    envvar="HEARTQ_DASHBOARD_TOKEN",
    default=None,
    help="Actions need this token (typed on the page, or sent as a bearer token). "
    "Env: HEARTQ_DASHBOARD_TOKEN.",
)
@click.option(
    "--refresh",
    type=Seconds(min=0.2),
    default=2.0,
    show_default=True,
    help="Seconds between two live updates of a page.",
)
def dashboard_command(
    url: str | None, host: str, port: int, allow_actions: bool, token: str | None, refresh: float
) -> None:
    """Serve the web dashboard: jobs, workers, the dead-letter queue, live.

    Binds to 127.0.0.1 and is read-only unless told otherwise.
    """
    try:
        import uvicorn

        from heartq.dashboard import create_app
        from heartq.dashboard.security import Guard
    except ImportError as exc:
        raise ConfigError(
            f"the dashboard needs its extra ({exc.name} is missing): "
            "pip install 'heartq[dashboard]'"
        ) from None
    store = store_for(url, existing=True)
    stream = EventStream()  # no app here: its own, which logs
    app = create_app(
        store, allow_actions=allow_actions, token=token, refresh=refresh, events=stream
    )
    mode = Guard(allow_actions=allow_actions, token=token or None).mode.value
    if host not in LOCAL_HOSTS and allow_actions and not token:
        click.echo(
            f"heartq: warning: --allow-actions on {host} without --token: anyone who reaches "
            "this port can cancel, replay and purge jobs",
            err=True,
        )
    listening = listen(host, port)
    port = listening.getsockname()[1]  # --port 0: the one the system chose
    shown = f"[{host}]" if ":" in host else host
    click.echo(f"heartq dashboard on http://{shown}:{port}/ ({mode}; {redact(store.link.url)})")
    stream.emit(events.DASHBOARD_STARTED, address=f"{shown}:{port}", url=redact(store.link.url),
                actions=mode)  # fmt: skip
    config = uvicorn.Config(app, host=host, port=port, log_level="warning", access_log=False)
    # Ctrl-C is the way to stop it: exit 0, as uvicorn.run has it.
    with listening, contextlib.suppress(KeyboardInterrupt):
        uvicorn.Server(config).run(sockets=[listening])


def listen(host: str, port: int) -> socket.socket:
    """A socket bound to `host:port`, before anything is printed: the banner then names
    the port really bound (`--port 0` lets the system choose one), and a port already
    taken is one `heartq: error:` line and exit 1, not a success banner followed by
    uvicorn's own error. Bound as uvicorn binds (IPv6 for an address with a colon,
    `SO_REUSEADDR`), then handed to it."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise ConfigError(
            f"the dashboard cannot listen on {host}:{port}: {exc.strerror or exc}"
        ) from None
    return sock
