"""``--remeasure URL`` reads the served document within bounds: a body over ``--remeasure-max-bytes`` or one
that does not arrive whole within ``--remeasure-timeout-s`` is refused in one line naming the flag, before
anything starts, whatever the server at URL does. Real servers on loopback: raw sockets, so a test can send a
body without end, trickle it, or trickle the answer's head.
"""

from __future__ import annotations

import contextlib
import socket
import subprocess
import sys
import threading
import time
import tracemalloc
from collections.abc import Iterator
from pathlib import Path

import pytest

from satbench.fleet.remeasure import MAX_DOCUMENT_BYTES, READ_TIMEOUT_S, read_document

_CHUNK = b"[" * (64 << 10)
_CLAIMED = 300 * 10**6  # the 300 MB body of the issue


class _Server:
    """One mode of answering ``GET /recommendations`` (see ``_answer``); ``sent`` counts the body bytes
    that left."""

    def __init__(self, mode: str) -> None:
        self.mode = mode
        self.sent = 0
        self._stop = threading.Event()
        self._sock = socket.create_server(("127.0.0.1", 0))
        self._sock.settimeout(0.05)
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self.url = f"http://127.0.0.1:{self._sock.getsockname()[1]}"

    def __enter__(self) -> _Server:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)
        self._sock.close()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._sock.accept()
            except TimeoutError:
                continue
            with conn:
                conn.settimeout(0.05)
                with contextlib.suppress(OSError):
                    self._answer(conn)

    def _send(self, conn: socket.socket, data: bytes) -> bool:
        """Sends ``data`` unless the client went away or the test ended; False then."""
        view = memoryview(data)
        while view and not self._stop.is_set():
            try:
                n = conn.send(view)
            except TimeoutError:
                continue
            except OSError:
                return False
            view = view[n:]
            self.sent += n
        return not view

    def _answer(self, conn: socket.socket) -> None:
        head = b""
        while b"\r\n\r\n" not in head and not self._stop.is_set():
            with contextlib.suppress(TimeoutError):
                head += conn.recv(4096)
        if self.mode == "slow_head":  # the status line, then a header byte every 50 ms
            conn.sendall(b"HTTP/1.1 200 OK\r\n")
            while not self._stop.is_set() and self._send(conn, b"X"):
                time.sleep(0.05)
            return
        length = {"huge_length": b"Content-Length: %d\r\n" % _CLAIMED, "trickle": b"Content-Length: 4096\r\n",
                  "nested": b"Content-Length: %d\r\n" % 200_000}.get(self.mode, b"")
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n" + length
                     + b"\r\n")
        self.sent = 0
        if self.mode == "nested":
            self._send(conn, b"[" * 100_000 + b"]" * 100_000)
        elif self.mode == "trickle":  # a byte every 50 ms: each read comes well within any per-read timeout
            while not self._stop.is_set() and self._send(conn, b" "):
                time.sleep(0.05)
        else:  # "huge", "huge_length": a body without end, as fast as the client reads it
            while not self._stop.is_set() and self._send(conn, _CHUNK):
                pass


@contextlib.contextmanager
def _serving(mode: str) -> Iterator[_Server]:
    with _Server(mode) as server:
        yield server


def test_the_defaults_are_the_stated_ones() -> None:
    assert (MAX_DOCUMENT_BYTES, READ_TIMEOUT_S) == (16 * 2**20, 30.0)


@pytest.mark.parametrize("mode", ["huge", "huge_length"])
def test_a_body_over_the_cap_is_refused_without_being_read(mode: str) -> None:
    cap = 1 << 20
    tracemalloc.start()
    try:
        with _serving(mode) as server, pytest.raises(ValueError) as err:
            read_document(server.url, max_bytes=cap, timeout_s=20.0)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    said = str(err.value)
    assert said.startswith(f"--remeasure {server.url}: ") and "--remeasure-max-bytes 1048576" in said
    assert "\n" not in said
    assert peak < 4 * cap, f"peak traced memory {peak / 2**20:.1f} MiB for a 1 MiB cap"
    if mode == "huge_length":
        assert f"a {_CLAIMED}-byte body" in said and server.sent < 16 << 20  # refused by its Content-Length
    else:
        assert "over 1048576 bytes" in said


@pytest.mark.parametrize("mode", ["trickle", "slow_head"])
def test_a_trickled_answer_is_refused_at_the_deadline(mode: str) -> None:
    with _serving(mode) as server:
        t0 = time.monotonic()
        with pytest.raises(ValueError, match=r"^--remeasure http://127\.0\.0\.1:\d+: .* did not send the whole "
                                             r"document within 1 s \(--remeasure-timeout-s\)$"):
            read_document(server.url, max_bytes=1 << 20, timeout_s=1.0)
        took = time.monotonic() - t0
        assert server.sent > 5, "the server was still sending when the read gave up"
    assert 0.9 <= took < 2.5, took


def test_nested_json_is_one_line() -> None:
    with _serving("nested") as server, pytest.raises(ValueError, match=r"is not JSON \(RecursionError"):
        read_document(server.url, timeout_s=10.0)


@pytest.mark.parametrize(("flags", "said"), [
    (["--remeasure-max-bytes", "10"], "--remeasure-max-bytes must be within 1024..1073741824, got 10"),
    (["--remeasure-timeout-s", "inf"], "--remeasure-timeout-s must be within 0..3600 s, got inf"),
    (["--remeasure-timeout-s", "0"], "--remeasure-timeout-s must be within 0..3600 s, got 0.0"),
])
def test_bad_bounds_are_refused(flags: list[str], said: str) -> None:
    with pytest.raises(ValueError, match=f"^{said}$"):
        read_document("http://127.0.0.1:9", max_bytes=int(flags[1]) if "bytes" in flags[0] else MAX_DOCUMENT_BYTES,
                      timeout_s=float(flags[1]) if "timeout" in flags[0] else READ_TIMEOUT_S)


@pytest.mark.slow
def test_satbench_run_refuses_a_trickled_document_in_one_line(tmp_path: Path) -> None:
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    with _serving("trickle") as server:
        t0 = time.monotonic()
        done = subprocess.run([sys.executable, "-m", "satbench.cli", "run", "--out", str(tmp_path / "runs"),
                               "--run-id", "r1", "--remeasure", server.url, "--remeasure-timeout-s", "1"],
                              env=env, capture_output=True, text=True, timeout=60)
        took = time.monotonic() - t0
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1, done.stderr
    assert lines[0].startswith(f"satbench run: --remeasure {server.url}: ") and "--remeasure-timeout-s" in lines[0]
    assert took < 30, took
    assert not (tmp_path / "runs").exists()


@pytest.mark.slow
def test_a_bound_without_remeasure_is_refused(tmp_path: Path) -> None:
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    done = subprocess.run([sys.executable, "-m", "satbench.cli", "run", "--out", str(tmp_path / "runs"),
                           "--remeasure-max-bytes", "4096"], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert done.stderr.strip() == "satbench run: --remeasure-max-bytes applies to --remeasure URL, and none was given"
