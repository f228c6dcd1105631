"""The private servers' ports (`bench.servers.free_port`) come from below the kernel's
ephemeral range, which outgoing connections draw from: a port picked there could be
taken by one before the server binds it."""

from __future__ import annotations

import socket

import pytest

from bench.servers import PORTS_FROM, ephemeral_low, free_port


def test_a_free_port_is_below_the_ephemeral_range_free_and_new() -> None:
    low = ephemeral_low()
    if low - PORTS_FROM < 1000:
        pytest.skip(f"the ephemeral range starts at {low}: free_port takes the kernel's pick")
    ports = [free_port() for _ in range(20)]
    assert len(set(ports)) == len(ports), ports  # none handed out twice
    for port in ports:
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
