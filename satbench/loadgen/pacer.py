"""Sends released at their intended time by the kernel's timer, not the event loop's.

Why: an open-loop schedule is as precise as the wake-up that releases each send. The event loop's own timers
sleep in ``epoll_wait``, whose timeout is whole milliseconds (asyncio rounds the wait up to the next one,
libuv under uvloop keeps its timers in milliseconds), so a
``sleep`` until an intended time wakes 0.5-1 ms late on average and up to 2 ms late at p99 on a small host,
on exactly the bursty rungs where the rate answer is decided. A ``timerfd`` armed at the intended time
(``CLOCK_MONOTONIC``, the clock ``perf_counter_ns`` reads on Linux, absolute, nanosecond resolution) and
watched by the same event loop wakes ``epoll_wait`` when the kernel's high-resolution timer expires: the
wake-up is the kernel's own, with no thread and no CPU spent while waiting. ``bench/arrivals.py`` measures it
against a bare ``timerfd`` loop in the same run (the kernel's floor) and against a bare asyncio ``sleep`` loop.

The kernel's wake-up is still tens of microseconds late here (p50 60-70 us at 1,000/s beside the simulator,
p99 0.26-0.31 ms), and every send that falls due meanwhile then leaves back to back with the first: a Poisson
schedule's gaps shorter than the lateness are lost (at 1,000/s, 2.8 % of the actual gaps under 10 us where
the process has 1 %; the actual sends failed their fit, KS D 0.035 on 6,000 gaps). So the timer is armed
``spin_s`` early (``arrival.spin_s``, 0.2 ms by default) and the rest of the wait is spun on the clock: each
send due within the spin leaves at its own time, never before it (the clock is read until it has come). A
release point between two reads does the same where the next send is that near. Measured
(``bench/arrivals.py``, the same machine and run): the lag at 1,000/s p50 1-2 us and p99 0.08-0.12 ms against
0.06 and 0.26-0.31 ms without the spin, the actual gaps passing their fit (KS p 0.3). The price is CPU: up to
``spin_s`` a send less the wake-up's lateness, about 10 % of a core at 1,000/s (a 6 s walk took 0.53-0.62 s
more CPU than without the spin, two runs each), nothing while the client is
behind its schedule (its sends are due already). What the spin cannot mend is a loop busy elsewhere for longer
than it (a rung's looks, a burst of answers to read): at 200/s the p99 stays 0.7-0.9 ms with or without it.

The send itself runs inside the timer's callback (``go``), synchronously: handing it to a task would cost
one or two more turns of the loop, each behind whatever other callbacks were ready in that turn. A timing
thread that sends (the other design at hand) was tried and measured worse: it must take the GIL from the
loop's thread to send, and at 1,000 requests/s its p99 lag was 1.03 ms where this pacer's was 0.61 ms
(simulator beside it, unpinned, before the sends were prepared ahead).

Sends are prepared a few milliseconds ahead (the body, the connection, its reader: ``LaneClient.prepare``),
so the send is all that runs at its time, and several due together leave back to back before any of their
bookkeeping (a Poisson schedule's short gaps survive). A send that falls due while the loop reads a batch of
answers goes out at the next read (``poll``, a release point), not after the whole batch.

A schedule the client cannot keep (asked for more than it can send) is never run ahead of time nor in a
burst: due sends go out ``max_burst`` at a time between the reads of the answers already streaming, so the
client sends at its capacity, evenly, instead of stalling. The rung says so (``loadgen.open_step``: marked
client-bound, the rate it achieved stated).

Where there is no ``timerfd`` (another OS, a refused call) the pacer falls back to the loop's ``call_at``
and says so (``kernel_timed``).
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import os
import sys
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["SPIN_S", "Pacer", "TimerFd"]

_CLOCK_MONOTONIC = 1
_TFD_TIMER_ABSTIME = 1
SPIN_S = 0.0002  # how early the kernel timer wakes the loop, the rest spun (module docstring)


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


class _Itimerspec(ctypes.Structure):
    _fields_ = [("it_interval", _Timespec), ("it_value", _Timespec)]


def _libc() -> ctypes.CDLL | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        lib = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
        lib.timerfd_create.argtypes = [ctypes.c_int, ctypes.c_int]
        lib.timerfd_settime.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.POINTER(_Itimerspec),
                                        ctypes.c_void_p]
    except (OSError, AttributeError):
        return None
    return lib


_LIBC = _libc()
# perf_counter_ns is CLOCK_MONOTONIC on Linux: an intended time on that clock arms the timer as it is
_SAME_CLOCK = time.get_clock_info("perf_counter").implementation == "clock_gettime(CLOCK_MONOTONIC)"


class TimerFd:
    """One non-blocking ``timerfd`` on ``CLOCK_MONOTONIC``, armed at absolute ``perf_counter_ns`` times."""

    def __init__(self) -> None:
        if _LIBC is None or not _SAME_CLOCK:
            raise OSError("timerfd is not available here")
        fd = _LIBC.timerfd_create(_CLOCK_MONOTONIC, os.O_NONBLOCK | os.O_CLOEXEC)
        if fd < 0:
            raise OSError(ctypes.get_errno(), "timerfd_create failed")
        self.fd = fd
        self._spec = _Itimerspec()

    def arm(self, at_ns: int) -> None:
        """Expires once at ``at_ns`` (a time already past expires at once)."""
        value = self._spec.it_value
        value.tv_sec, value.tv_nsec = divmod(max(at_ns, 1), 1_000_000_000)
        if _LIBC.timerfd_settime(self.fd, _TFD_TIMER_ABSTIME, ctypes.byref(self._spec), None) != 0:  # type: ignore[union-attr]
            raise OSError(ctypes.get_errno(), "timerfd_settime failed")

    def clear(self) -> bool:
        """Reads the expiry count; False when the timer had not expired."""
        try:
            os.read(self.fd, 8)
        except (BlockingIOError, InterruptedError):
            return False
        return True

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


@dataclass(slots=True)
class _Send:
    at_ns: int
    go: Callable[[], None]  # hands the request to the kernel: nothing else
    after: Callable[[], None]  # the bookkeeping (the task that reads the answer, the counters)
    cancel: Callable[[], None]  # lets a prepared send go unsent


class Pacer:
    """Sends prepared ahead, each released at its intended ``perf_counter_ns`` time by the kernel's timer.

    The scheduler ``put``s each send a few milliseconds before its time (``ready`` waits for that moment and
    for room); the pacer keeps them in order, the timer armed ``spin_s`` before the first. When it expires, or
    at a release point between two reads (``poll``), every send due by the end of the spin (at most
    ``max_burst``) goes out first, each at its own time on the spun clock, and their bookkeeping after: two
    sends due together leave together, not one bookkeeping apart (a Poisson schedule's short gaps survive).
    ``close()`` cancels what was not sent."""

    def __init__(self, *, lead_s: float = 0.005, depth: int = 64, max_burst: int = 8,
                 spin_s: float = SPIN_S) -> None:
        self._loop = asyncio.get_running_loop()
        try:
            self._timer: TimerFd | None = TimerFd()
        except OSError:
            self._timer = None
        # the kernel timer wakes the loop this much early, and the last stretch is spun on the clock (module
        # docstring); none on the loop's own timers, whose lateness is milliseconds, not a spin's worth
        self.spin_ns = int(spin_s * 1e9) if self._timer is not None else 0
        self._handle: asyncio.TimerHandle | None = None
        self._soon: asyncio.Handle | None = None
        self._behind = 0  # due sends prepared since the scheduler last yielded
        self.lead_ns = int(lead_s * 1e9)
        self.depth, self.max_burst = depth, max_burst
        self._queue: deque[_Send] = deque()
        self._room: asyncio.Future[None] | None = None
        if self._timer is not None:
            self._loop.add_reader(self._timer.fd, self._expired)

    @property
    def kernel_timed(self) -> bool:
        """True when sends are released by a kernel timer (``timerfd``), not the loop's millisecond timers."""
        return self._timer is not None

    @property
    def pending(self) -> int:
        """Sends queued and not yet released."""
        return len(self._queue)

    async def ready(self, at_ns: int) -> None:
        """Returns once a send meant for ``at_ns`` should be prepared and ``put``: within ``lead_s`` of its time
        (the loop's own coarse timer is enough for that) and with fewer than ``depth`` sends waiting. Sends
        already due yield to the loop after every ``max_burst`` of them, so a client behind its schedule sends
        at its capacity, evenly, between the reads of the answers it is streaming."""
        while len(self._queue) >= self.depth:
            self._room = self._loop.create_future()
            await self._room
        wait = at_ns - self.lead_ns - time.perf_counter_ns()
        if wait > 0:
            self._behind = 0
            await asyncio.sleep(wait / 1e9)
        elif at_ns <= time.perf_counter_ns():
            self._behind += 1
            if self._behind >= self.max_burst:  # a burst of due sends prepared, then the loop's other work
                self._behind = 0
                await asyncio.sleep(0)

    async def flush(self) -> None:
        """Returns once every send put has been released (a finite schedule's end: its last sends still go)."""
        while self._queue:
            self._room = self._loop.create_future()
            await self._room

    def put(self, at_ns: int, go: Callable[[], None], after: Callable[[], None], cancel: Callable[[], None]) -> None:
        """Queues one prepared send (in time order: a schedule's own)."""
        self._queue.append(_Send(at_ns, go, after, cancel))
        if len(self._queue) == 1:
            self._arm(at_ns)

    def poll(self) -> None:
        """A release point (``LaneClient.release_points``: after each answer read): the sends due, or due within
        the spin, go out now (each at its time), not after the rest of the loop's turn."""
        queue = self._queue
        if queue and queue[0].at_ns - self.spin_ns <= time.perf_counter_ns():
            self._release()

    def _arm(self, at_ns: int) -> None:
        wake = at_ns - self.spin_ns
        if wake <= time.perf_counter_ns():  # due (a client behind) or within the spin: the next turn, no timer
            if self._soon is None:
                self._soon = self._loop.call_soon(self._release)
            return
        if self._timer is not None:
            self._timer.arm(wake)
            return
        if self._handle is not None:
            self._handle.cancel()
        self._handle = self._loop.call_at(self._loop.time() + (at_ns - time.perf_counter_ns()) / 1e9,
                                          self._release)

    def _expired(self) -> None:
        assert self._timer is not None
        if self._timer.clear():
            self._release()

    def _release(self) -> None:
        self._soon = None
        queue = self._queue
        clock = time.perf_counter_ns
        # the sends due by the end of the spin go, each at its own time: the clock spun until it (a Poisson
        # schedule's gaps of tens of microseconds survive), never before it
        horizon = clock() + self.spin_ns
        due: list[_Send] = []
        while queue and queue[0].at_ns <= horizon and len(due) < self.max_burst:
            due.append(queue.popleft())
        try:
            for i, send in enumerate(due):
                at = send.at_ns
                while clock() < at:
                    pass
                try:
                    send.go()
                except BaseException:
                    for unsent in due[i:]:  # the one that failed and those after it: let go, unsent
                        unsent.cancel()
                    del due[i:]
                    raise
            for send in due:
                send.after()
        finally:
            if queue:
                self._arm(queue[0].at_ns)
            room = self._room
            if room is not None and not room.done() and (len(queue) < self.depth or not queue):
                room.set_result(None)

    def close(self) -> None:
        for send in self._queue:
            send.cancel()
        self._queue.clear()
        for handle in (self._handle, self._soon):
            if handle is not None:
                handle.cancel()
        if self._timer is not None:
            self._loop.remove_reader(self._timer.fd)
            self._timer.close()
            self._timer = None
