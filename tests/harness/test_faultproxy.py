"""The fault proxy does what the partition tests (and the chaos runner) rely on: a cut
holds every byte without closing anything and a heal delivers them in order, a delay
slows each direction by what it says, a reset is a reset and a close a close. Against a
local echo server, then against PostgreSQL through psycopg. In-process and quick."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator

import psycopg
import pytest

from heartq.store.postgres.connection import parse_url
from tests.faultproxy import FaultProxy
from tests.support import wait_for

QUIET = 0.5
"""Seconds a test listens to a cut link to say nothing came through (the cut holds bytes
for as long as it lasts: any wait shows it; this one is short and not a margin)."""


class EchoServer:
    """Echoes every byte back; counts the connections it accepted."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = int(self.sock.getsockname()[1])
        self.accepted = 0
        self.resets = 0
        self._stop = False
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while not self._stop:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.accepted += 1
            threading.Thread(target=self._echo, args=(conn,), daemon=True).start()

    def _echo(self, conn: socket.socket) -> None:
        with conn:
            while True:
                try:
                    data = conn.recv(65536)
                except ConnectionResetError:
                    self.resets += 1
                    return
                if not data:
                    return
                conn.sendall(data)

    def close(self) -> None:
        self._stop = True
        self.sock.close()


@pytest.fixture
def echo() -> Iterator[EchoServer]:
    server = EchoServer()
    yield server
    server.close()


@pytest.fixture
def proxy(echo: EchoServer) -> Iterator[FaultProxy]:
    with FaultProxy(("127.0.0.1", echo.port)) as started:
        yield started


def client(proxy: FaultProxy) -> socket.socket:
    sock = socket.create_connection(proxy.address, timeout=5)
    sock.settimeout(5)
    return sock


def round_trip(sock: socket.socket, data: bytes) -> float:
    start = time.monotonic()
    sock.sendall(data)
    got = b""
    while len(got) < len(data):
        chunk = sock.recv(65536)
        assert chunk, "the link closed"
        got += chunk
    assert got == data
    return time.monotonic() - start


def nothing_arrives(sock: socket.socket) -> bool:
    sock.settimeout(QUIET)
    try:
        sock.recv(65536)
    except TimeoutError:
        return True
    finally:
        sock.settimeout(5)
    return False


def test_bytes_flow_both_ways_and_are_counted(proxy: FaultProxy, echo: EchoServer) -> None:
    with client(proxy) as sock:
        round_trip(sock, b"hello" * 1000)
    assert echo.accepted == 1
    assert proxy.stats.accepted == 1
    assert proxy.stats.up_bytes == proxy.stats.down_bytes == 5000


def test_a_cut_holds_everything_open_and_a_heal_delivers_it_in_order(
    proxy: FaultProxy, echo: EchoServer
) -> None:
    with client(proxy) as sock:
        round_trip(sock, b"before")
        proxy.cut()
        assert proxy.is_cut and proxy.cut_at is not None
        sock.sendall(b"one,")
        sock.sendall(b"two")
        assert nothing_arrives(sock)  # no answer, and no EOF or reset either
        late = client(proxy)  # a connection opened during the cut ...
        assert nothing_arrives(late)
        assert echo.accepted == 1  # ... is not carried to the server
        proxy.heal()
        got = b""
        while got != b"one,two":
            got += sock.recv(65536)
        round_trip(late, b"late")  # carried once healed
        late.close()
    assert echo.accepted == 2


def test_a_delay_slows_each_direction(proxy: FaultProxy) -> None:
    with client(proxy) as sock:
        fast = round_trip(sock, b"x")
        proxy.delay(up_ms=200, down_ms=100)
        slow = [round_trip(sock, b"y") for _ in range(3)]
        proxy.delay(0)
        again = round_trip(sock, b"z")
    assert all(t >= 0.3 for t in slow), slow
    assert max(slow) < 0.3 + 2.0, slow  # a loaded machine adds, never removes
    assert fast < 0.3 and again < 0.3, (fast, again)


def test_a_delay_keeps_the_order_of_bytes(proxy: FaultProxy) -> None:
    with client(proxy) as sock:
        proxy.delay(up_ms=50)
        for n in range(20):
            sock.sendall(f"{n},".encode())
            if n == 10:
                proxy.delay(up_ms=0)  # later bytes may not overtake earlier ones
        want = "".join(f"{n}," for n in range(20)).encode()
        got = b""
        while len(got) < len(want):
            got += sock.recv(65536)
    assert got == want


def test_a_reset_resets_both_ends(proxy: FaultProxy, echo: EchoServer) -> None:
    with client(proxy) as sock:
        round_trip(sock, b"x")
        assert proxy.reset_connections() == 1
        with pytest.raises(ConnectionResetError):
            sock.recv(1)
    wait_for(lambda: echo.resets == 1, 5, "the server to see the reset")
    assert proxy.open_connections == 0


def test_a_close_closes_both_ends(proxy: FaultProxy) -> None:
    with client(proxy) as sock:
        round_trip(sock, b"x")
        assert proxy.close_connections() == 1
        assert sock.recv(1) == b""


def test_a_refusal_resets_every_connection_until_the_heal(
    proxy: FaultProxy, echo: EchoServer
) -> None:
    """`refuse()`: the open connection is reset, a new one is reset at once and never
    reaches the server; after `heal()` a new one is carried again."""
    with client(proxy) as sock:
        round_trip(sock, b"x")
        assert proxy.refuse() == 1
        assert proxy.is_refusing
        with pytest.raises(ConnectionResetError):
            sock.recv(1)
    # Reset at once: while connecting already, on a loaded machine, or at the first send
    # or read.
    with pytest.raises((ConnectionResetError, BrokenPipeError)), client(proxy) as late:
        late.sendall(b"y")
        assert late.recv(1) == b"", "a refused connection closed without a reset"
    assert echo.accepted == 1
    proxy.heal()
    assert not proxy.is_refusing
    with client(proxy) as sock:
        round_trip(sock, b"z")
    assert echo.accepted == 2


def test_a_cut_does_not_close_a_postgresql_session(pg_server_url: str) -> None:
    """psycopg through a cut proxy waits (no error, its session still there on the
    server); once healed, its query's answer arrives."""
    conninfo, _ = parse_url(pg_server_url)
    parts = psycopg.conninfo.conninfo_to_dict(conninfo)
    upstream = (str(parts.get("host") or "127.0.0.1"), int(parts.get("port") or 5432))
    with FaultProxy(upstream) as proxy, contextlib.ExitStack() as stack:
        conn = stack.enter_context(
            psycopg.connect(proxy.url_for(conninfo), autocommit=True, application_name="fp")
        )
        pid = conn.execute("SELECT pg_backend_pid()").fetchone()[0]  # type: ignore[index]
        direct = stack.enter_context(psycopg.connect(conninfo, autocommit=True))
        proxy.cut()
        answer: list[object] = []
        asking = threading.Thread(
            target=lambda: answer.append(conn.execute("SELECT 42").fetchone()), daemon=True
        )
        asking.start()
        asking.join(QUIET)
        assert asking.is_alive() and not answer
        row = direct.execute("SELECT state FROM pg_stat_activity WHERE pid = %s", (pid,)).fetchone()
        assert row == ("idle",), row  # the query never reached the server; the session lives
        proxy.heal()
        asking.join(10)
        assert answer == [(42,)]
