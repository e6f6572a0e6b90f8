"""free_port: a port for a server started later, below the kernel's ephemeral
range (so that no client's source port takes it first) and never handed out
twice by one process."""

from __future__ import annotations

import socket

from dpukit import procs


def test_free_ports_are_below_the_ephemeral_range_distinct_and_free():
    low = procs._ephemeral_low()
    ports = [procs.free_port() for _ in range(200)]
    assert len(set(ports)) == len(ports)
    if low - 1 - procs.LOWEST_PORT >= 1000:
        assert all(procs.LOWEST_PORT <= p < low for p in ports), (low, min(ports), max(ports))
    for p in ports[:20]:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("127.0.0.1", p))


def test_a_port_in_use_is_not_handed_out(monkeypatch):
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as held:
        held.bind(("127.0.0.1", 0))
        taken = held.getsockname()[1]
        held.listen()
        picks = iter([taken, taken, procs.LOWEST_PORT + 7])
        monkeypatch.setattr(procs.random, "randint", lambda a, b: next(picks))
        monkeypatch.setattr(procs, "_ephemeral_low", lambda: taken + 1 if taken > procs.LOWEST_PORT + 1000 else 60000)
        procs._handed_ports.discard(procs.LOWEST_PORT + 7)
        assert procs.free_port() == procs.LOWEST_PORT + 7
