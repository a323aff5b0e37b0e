"""CPU package energy from the Linux powercap interface (Intel RAPL; AMD's RAPL in recent kernels), a fake for tests.

The powercap framework (kernel ``Documentation/power/powercap/powercap.rst``) exposes each RAPL package as a
top-level zone ``/sys/class/powercap/intel-rapl:N`` whose ``name`` is ``package-N`` (``package-N-die-M`` on
multi-die parts), with ``energy_uj`` ("current energy counter in micro joules") and ``max_energy_range_uj``
("range of the above energy counter in micro-joules"). Why it is read the way it is:

* Package zones only. The zones under a package (``intel-rapl:0:0`` ``core``, ``intel-rapl:0:1`` ``uncore``,
  ``dram`` on servers) are parts of it (core and uncore are already inside the package figure) or outside it
  (DRAM): summing them would count twice or count something else. A top-level ``psys`` zone (the whole SoC
  platform on some client parts) is not a package either: any zone whose name does not start with
  ``package-`` is skipped. ``intel-rapl-mmio:N`` directories repeat a package through MMIO and are not read.
* The figure is the CPU package: cores plus uncore (caches, memory controller, integrated GPU where there is
  one), not DRAM, not the rest of the host (GPUs, disks, fans, power-supply losses). It is not the host's power.
* Wraps. ``energy_uj`` is cumulative and wraps to 0 after ``max_energy_range_uj`` (about 262 kJ on most parts:
  minutes at high power, e.g. about 22 minutes at 200 W). Per zone the reader keeps the last raw value and an
  offset; a raw value lower than the last one adds ``max_energy_range_uj + 1`` to the offset. One wrap per read
  interval is assumed, which scrapes every few seconds never break. ``joules_total`` is therefore monotonic,
  and it starts at 0 at the reader's first read: a restarted exporter is a counter reset to its consumers
  (which ``increase`` and ``core.energy`` undo), never a drop by a wrap's worth that would read as 262 kJ drawn.
* Permissions. Since the fix for CVE-2020-8694 (Platypus, a power side channel; Linux 5.10 and the stable
  kernels it went back to) ``energy_uj`` is readable by root only (mode 0400). A ``PermissionError`` becomes a
  :class:`CpuEnergyUnavailable` saying so, never a crash.
* Absent means unavailable, never a guess: no powercap directory, no package zone, a zone that vanished or
  could not be read or held no number all raise :class:`CpuEnergyUnavailable` with a one-line reason naming the
  path, for the whole read (a partial sum would look like a real, lower figure).

A zone that vanishes raises once and its state is forgotten, so should it come back, its counter starts over
(a counter reset to the consumer) instead of passing for a wrap. ``read()`` may be called from a thread pool
concurrently: one lock covers the whole read, files included, so raw values are compared in the order they
were read.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

__all__ = ["CpuEnergyReader", "CpuEnergyUnavailable", "CpuPackage", "FakeCpuEnergyReader", "RaplReader"]

_TOP_LEVEL_ZONE = re.compile(r"intel-rapl:\d+")
_PERMISSION_NOTE = "root only since Linux 5.10's fix for CVE-2020-8694"


class CpuEnergyUnavailable(Exception):
    """CPU package energy cannot be read now; the message is the one-line reason."""


@dataclass(frozen=True)
class CpuPackage:
    package: str  # the zone's name, e.g. "package-0"
    joules_total: float  # monotonic from 0 at the reader's first read, wraps undone


class CpuEnergyReader(Protocol):
    source: str

    def read(self) -> Sequence[CpuPackage]: ...


class FakeCpuEnergyReader:
    """Returns fixed packages, or raises ``error`` when one is given; counts reads."""

    def __init__(
        self, packages: Sequence[CpuPackage] = (), source: str = "fake", error: Exception | None = None
    ) -> None:
        self.source = source
        self.packages = tuple(packages)
        self.error = error
        self.reads = 0

    def read(self) -> Sequence[CpuPackage]:
        self.reads += 1
        if self.error is not None:
            raise self.error
        return self.packages


@dataclass
class _ZoneState:
    last_raw: int
    offset: int
    first_raw: int  # the zone's first reading: the counter starts at 0 there


def _read_text(path: Path) -> str:
    try:
        return path.read_text()
    except FileNotFoundError as exc:
        raise CpuEnergyUnavailable(f"unreadable {path}: vanished") from exc
    except PermissionError as exc:
        raise CpuEnergyUnavailable(f"permission denied reading {path} ({_PERMISSION_NOTE})") from exc
    except (OSError, UnicodeDecodeError) as exc:
        raise CpuEnergyUnavailable(f"unreadable {path}: {exc}") from exc


def _read_uj(path: Path) -> int:
    text = _read_text(path).strip()
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise CpuEnergyUnavailable(f"unreadable {path}: not a non-negative integer: {text[:40]!r}")
    return value


def _natural(name: str) -> tuple[tuple[int, int | str], ...]:
    """``package-2`` before ``package-10``."""
    return tuple((0, int(part)) if part.isdigit() else (1, part) for part in re.split(r"(\d+)", name))


class RaplReader:
    """Package zones under ``root`` (``/sys/class/powercap``); raises :class:`CpuEnergyUnavailable`."""

    source = "rapl"

    def __init__(self, root: Path = Path("/sys/class/powercap")) -> None:
        self._root = root
        self._lock = threading.Lock()
        self._state: dict[Path, _ZoneState] = {}  # per zone directory

    def _package_zones(self) -> list[tuple[str, Path]]:
        if not self._root.is_dir():
            self._state.clear()  # the whole tree is gone: whatever comes back starts over
            raise CpuEnergyUnavailable(f"no powercap directory {self._root}")
        try:
            entries = sorted(self._root.iterdir())
        except OSError as exc:
            raise CpuEnergyUnavailable(f"unreadable {self._root}: {exc}") from exc
        zones = []
        for entry in entries:
            if not _TOP_LEVEL_ZONE.fullmatch(entry.name):
                continue
            name = _read_text(entry / "name").strip()
            if name.startswith("package-"):
                zones.append((name, entry))
        if not zones:
            self._state.clear()
            raise CpuEnergyUnavailable(f"no package zone (intel-rapl:N named package-*) under {self._root}")
        return zones

    def read(self) -> tuple[CpuPackage, ...]:
        with self._lock:
            zones = self._package_zones()
            present = {path for _, path in zones}
            vanished = sorted(path for path in self._state if path not in present)
            if vanished:
                for path in vanished:
                    del self._state[path]
                raise CpuEnergyUnavailable(f"unreadable {vanished[0]}: zone vanished")
            updated: dict[Path, _ZoneState] = {}
            packages = []
            for name, path in zones:
                raw = _read_uj(path / "energy_uj")
                max_range = _read_uj(path / "max_energy_range_uj")
                if max_range == 0:
                    raise CpuEnergyUnavailable(f"unreadable {path / 'max_energy_range_uj'}: zero range")
                state = self._state.get(path)
                if state is None:
                    state = _ZoneState(last_raw=raw, offset=0, first_raw=raw)
                elif raw < state.last_raw:
                    state = _ZoneState(last_raw=raw, offset=state.offset + max_range + 1, first_raw=state.first_raw)
                else:
                    state = _ZoneState(last_raw=raw, offset=state.offset, first_raw=state.first_raw)
                updated[path] = state
                packages.append(CpuPackage(package=name, joules_total=(raw + state.offset - state.first_raw) / 1e6))
            self._state.update(updated)  # only once every zone was read: a failed read changes nothing
            return tuple(sorted(packages, key=lambda p: _natural(p.package)))
