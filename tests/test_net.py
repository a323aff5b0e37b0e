"""core.net.free_port: a bindable port, drawn below the kernel's ephemeral range (where outgoing connections
take their source ports), with binding port 0 as the fallback."""

from __future__ import annotations

import socket

import pytest

from satbench.core import net


def test_a_free_port_is_below_the_ephemeral_range_and_bindable() -> None:
    low = net._ephemeral_low()
    ports = {net.free_port() for _ in range(20)}
    assert all(10000 <= p < low for p in ports) and len(ports) > 1
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", ports.pop()))


def test_without_room_below_the_range_the_kernel_picks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(net, "_ephemeral_low", lambda: 10500)
    port = net.free_port()
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", port))


def test_the_ephemeral_range_is_read_or_defaults(tmp_path) -> None:
    (tmp_path / "range").write_text("40000\t60999\n")
    assert net._ephemeral_low(tmp_path / "range") == 40000
    assert net._ephemeral_low(tmp_path / "missing") == 32768
