"""Test servers' ports come from outside the kernel's ephemeral range, where no outgoing connection can take one
between its choice and the server's bind (kube-controller-manager once failed with "address already in use")."""

from __future__ import annotations

import socket

from tests.support.ports import (
    NODE_PORTS,
    _bind_one,
    _read_range,
    candidate_range,
    ephemeral_range,
    free_port,
    free_ports,
)


def test_the_kernels_range_is_read_and_a_default_stands_in_for_nonsense() -> None:
    assert ephemeral_range("32768\t60999\n") == (32768, 60999)
    assert ephemeral_range("1024 65535") == (1024, 65535)
    assert ephemeral_range(None) == ephemeral_range("garbage") == (32768, 60999)


def test_ports_are_chosen_below_the_ephemeral_and_nodeport_ranges_where_there_is_room() -> None:
    assert candidate_range((32768, 60999)) == range(10000, NODE_PORTS)
    assert candidate_range((15000, 60999)) == range(10000, 15000)
    assert candidate_range((10500, 60999)) == range(61000, 65536)  # too little below: above
    assert candidate_range((1024, 65000)) is None  # nearly everything ephemeral: the kernel's choice


def test_free_ports_are_distinct_bindable_and_outside_the_ephemeral_range() -> None:
    low, high = _read_range()
    ports = free_ports(8)
    assert len(set(ports)) == 8
    candidates = candidate_range((low, high))
    for port in [*ports, free_port()]:
        if candidates is not None:
            assert not low <= port <= high and port in candidates
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind(("127.0.0.1", port))  # free: nothing of the choice is left holding it


def test_a_port_in_use_is_never_chosen() -> None:
    """Of two candidates, the one held is passed over; with only a held one, the kernel chooses."""
    held_port, other = free_ports(2)
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as held:
        held.bind(("127.0.0.1", held_port))
        held.listen()
        for candidates in (range(held_port, held_port + 1), (held_port, other)):
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
                port = _bind_one(sock, candidates)
                assert port != held_port and sock.getsockname()[1] == port
                if len(candidates) == 2:
                    assert port == other
