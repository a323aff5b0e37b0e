"""One child of a test: start it, wait until it answers, stop it whatever happened, keep its log.

Why one: Prometheus, VictoriaMetrics, Alertmanager, the simulator and the CLI's servers are all started the
same way by tests (a binary on a free loopback port, ready when one URL answers), and each copy of that dance
had its own gaps (a log read after its folder was gone, a kill without a wait, a failed start that left the
process running). ``ChildProcess`` does it once:

- ``start()`` runs ``argv`` with stdout and stderr into one log file (``log_path``, else a temporary file) and
  stdin closed, then polls ``ready_url`` (``testkit.net.wait_http``) for ``startup_timeout_s``; a process that
  exits or does not answer in time is stopped and a ``RuntimeError`` names it, its command line and the end of
  its log;
- ``stop()`` sends SIGTERM and waits ``stop_timeout_s`` when ``graceful`` (a store that flushes on exit), else
  SIGKILL; either way it waits for the exit, so no zombie or open pipe outlives the test, and returns the end
  of the log;
- ``start()`` after ``stop()`` starts the same command again (a restart keeps the port and the folders the
  command names; a ``log_path`` keeps every start's lines); ``with ChildProcess(...) as child:`` starts and
  always stops.

A server that runs inside the test's process (the simulator's app, a simulated fleet) is the same dance on an
event loop in a daemon thread: ``LoopThread`` starts it, waits until it is ready (a URL, or the server's own
signal), runs a coroutine on its loop for the caller, and stops it within a bound.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Coroutine, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import IO, Any

from testkit.net import wait_http

__all__ = ["LOG_TAIL_CHARS", "ChildProcess", "LoopThread", "cancel_pending"]

LOG_TAIL_CHARS = 3000


class ChildProcess:
    """``with ChildProcess([binary, ...], name="prometheus", ready_url=url + "/-/ready") as child: ...``."""

    def __init__(
        self,
        argv: Sequence[str],
        *,
        name: str,
        ready_url: str | None = None,
        cwd: Path | None = None,
        env: Mapping[str, str] | None = None,
        log_path: Path | None = None,
        startup_timeout_s: float = 30.0,
        stop_timeout_s: float = 10.0,
        graceful: bool = False,
    ) -> None:
        self.argv = [str(a) for a in argv]
        self.name = name
        self.ready_url = ready_url
        self.cwd = cwd
        self.env = None if env is None else dict(env)
        self.log_path = log_path
        self.startup_timeout_s = startup_timeout_s
        self.stop_timeout_s = stop_timeout_s
        self.graceful = graceful
        self.proc: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None

    @property
    def pid(self) -> int:
        if self.proc is None:
            raise RuntimeError(f"{self.name} is not running")
        return self.proc.pid

    def start(self) -> ChildProcess:
        if self.proc is not None:
            raise RuntimeError(f"{self.name} is already running")
        if self.log_path is not None:
            self._log = self.log_path.open("a+b")
        else:
            self._log = tempfile.TemporaryFile()  # noqa: SIM115 (held until stop() closes it)
        self.proc = subprocess.Popen(self.argv, cwd=self.cwd, env=self.env, stdout=self._log,
                                     stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        if self.ready_url is not None:
            try:
                wait_http(self.ready_url, timeout_s=self.startup_timeout_s)
            except BaseException:
                exited = self.proc.poll()
                said = f"exited with status {exited}" if exited is not None else "did not become ready"
                log = self.stop()
                raise RuntimeError(f"{self.name} {said}: {' '.join(self.argv)}\n{log}") from None
        return self

    def stop(self) -> str:
        """Stops the process (if running) and returns the end of its log (a ``log_path`` stays readable)."""
        proc, self.proc = self.proc, None
        if proc is not None:
            if self.graceful:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(timeout=self.stop_timeout_s)
                except subprocess.TimeoutExpired:
                    proc.kill()
            else:
                proc.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=10)
        text = self.log()
        if self._log is not None:
            self._log.close()
            self._log = None
        return text

    def log(self) -> str:
        """The last ``LOG_TAIL_CHARS`` characters of what the process wrote (all of its starts)."""
        if self._log is not None and not self._log.closed:
            self._log.flush()
            self._log.seek(0, 2)
            size = self._log.tell()
            self._log.seek(max(0, size - 4 * LOG_TAIL_CHARS))
            data = self._log.read()
        elif self.log_path is not None and self.log_path.exists():
            data = self.log_path.read_bytes()[-4 * LOG_TAIL_CHARS:]
        else:
            return ""
        return data.decode(errors="replace")[-LOG_TAIL_CHARS:]

    def __enter__(self) -> ChildProcess:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


async def cancel_pending() -> None:
    """What ``asyncio.run`` does before it closes its loop, for a loop a test runs by hand: every other task
    still pending (a connection's handler the server left behind) cancelled and awaited, then one more turn
    for the ``connection_lost`` callbacks their transports scheduled. Otherwise the loop closes over open
    transports, and the garbage collector finds them during whichever later test it happens to run in, where
    warnings are errors (``unclosed transport``)."""
    pending = [t for t in asyncio.all_tasks() if t is not asyncio.current_task() and not t.done()]
    for task in pending:
        task.cancel()
    await asyncio.gather(*pending, return_exceptions=True)
    await asyncio.sleep(0)


class LoopThread:
    """A server coroutine on its own event loop in a daemon thread: the in-process child of a synchronous test.

    ``start(main)`` runs ``main(stop)`` (``stop``: an ``asyncio.Event`` the coroutine serves until) and returns
    once it is ready: ``ready_url`` answers, or the coroutine called ``set_ready(value)`` (then ``start``
    returns that value). An error raised before it was ready is raised in the caller's thread; a start that
    takes more than ``startup_timeout_s`` stops it and raises ``TimeoutError``. ``call(coro)`` runs a coroutine
    on the loop for the caller and waits at most ``timeout_s``. ``stop()`` sets the event and joins the thread
    for ``stop_timeout_s``; a server that does not stop by then is left to its daemon thread, never waited on
    forever.
    """

    def __init__(self, name: str, *, ready_url: str | None = None, startup_timeout_s: float = 20.0,
                 stop_timeout_s: float = 15.0) -> None:
        self.name = name
        self.ready_url = ready_url
        self.startup_timeout_s = startup_timeout_s
        self.stop_timeout_s = stop_timeout_s
        self.loop = asyncio.new_event_loop()
        self._stop: asyncio.Event | None = None
        self._ready: concurrent.futures.Future[Any] = concurrent.futures.Future()
        self._thread: threading.Thread | None = None

    def _run(self, main: Callable[[asyncio.Event], Coroutine[Any, Any, Any]]) -> None:
        asyncio.set_event_loop(self.loop)
        try:
            self._stop = asyncio.Event()
            self.loop.run_until_complete(main(self._stop))
        except BaseException as exc:
            if not self._ready.done():
                self._ready.set_exception(exc)
        finally:
            self.loop.run_until_complete(cancel_pending())
            self.loop.run_until_complete(self.loop.shutdown_asyncgens())
            self.loop.close()
            if not self._ready.done():
                self._ready.set_exception(RuntimeError(f"{self.name} stopped before it was ready"))

    def set_ready(self, value: Any = None) -> None:
        """Called by the coroutine (on the loop) once it serves; ``start`` returns ``value``."""
        if not self._ready.done():
            self._ready.set_result(value)

    def start(self, main: Callable[[asyncio.Event], Coroutine[Any, Any, Any]]) -> Any:
        self._thread = threading.Thread(target=self._run, args=(main,), name=self.name, daemon=True)
        self._thread.start()
        try:
            deadline = time.monotonic() + self.startup_timeout_s
            while self.ready_url is not None and not self._ready.done():  # until it answers or fails
                if time.monotonic() > deadline:
                    raise concurrent.futures.TimeoutError
                with contextlib.suppress(TimeoutError):
                    wait_http(self.ready_url, timeout_s=0.5)
                    self.set_ready()
            return self._ready.result(timeout=max(0.0, deadline - time.monotonic()))
        except concurrent.futures.TimeoutError:
            self.stop()
            raise TimeoutError(f"{self.name} did not start in {self.startup_timeout_s:g} s") from None
        except BaseException:
            self.stop()
            raise

    def call(self, coro: Coroutine[Any, Any, Any], timeout_s: float) -> Any:
        """Runs ``coro`` on the loop and returns its result, or raises ``TimeoutError`` after ``timeout_s``."""
        future = asyncio.run_coroutine_threadsafe(coro, self.loop)
        try:
            return future.result(timeout=timeout_s)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise TimeoutError(f"{self.name}: a call did not finish in {timeout_s:g} s") from None

    def stop(self) -> None:
        thread = self._thread
        if thread is None or not thread.is_alive():
            return
        stop = self._stop
        if stop is not None:
            with contextlib.suppress(RuntimeError):  # the loop has closed already
                self.loop.call_soon_threadsafe(stop.set)
        thread.join(timeout=self.stop_timeout_s)
