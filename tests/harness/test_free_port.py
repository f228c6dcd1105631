"""The private servers' ports (`bench.servers.free_port`) come from below the kernel's
ephemeral range, which outgoing connections draw from: a port picked there could be
taken by one before the server binds it."""

from __future__ import annotations

import socket

from bench.servers import PORTS_FROM, ephemeral_low, free_port


def test_a_free_port_is_below_the_ephemeral_range_and_free() -> None:
    low = ephemeral_low()
    for _ in range(20):
        port = free_port()
        assert PORTS_FROM <= port < low, (port, low)
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", port))  # free: a server can take it


def test_a_port_taken_is_not_picked_again_while_held() -> None:
    held = [socket.socket() for _ in range(5)]
    try:
        taken = set()
        for sock in held:
            port = free_port()
            sock.bind(("127.0.0.1", port))
            taken.add(port)
        assert all(free_port() not in taken for _ in range(50))
    finally:
        for sock in held:
            sock.close()
