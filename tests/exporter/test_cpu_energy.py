"""CPU package energy from a fake powercap tree: package zones only, wraps undone, every failure a reason."""

from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from satbench.exporter.cpu_energy import (
    CpuEnergyReader,
    CpuEnergyUnavailable,
    CpuPackage,
    FakeCpuEnergyReader,
    RaplReader,
)

MAX_RANGE_UJ = 262143328850  # a common Intel value: 2^32 energy units of 61 µJ


def _zone(root: Path, directory: str, name: str, energy_uj: int | str, max_uj: int = MAX_RANGE_UJ) -> Path:
    zone = root / directory
    zone.mkdir(parents=True)
    (zone / "name").write_text(f"{name}\n")
    (zone / "energy_uj").write_text(f"{energy_uj}\n")
    (zone / "max_energy_range_uj").write_text(f"{max_uj}\n")
    return zone


def _set(zone: Path, energy_uj: int) -> None:
    tmp = zone / "energy_uj.tmp"
    tmp.write_text(f"{energy_uj}\n")
    os.replace(tmp, zone / "energy_uj")


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """Two packages (listed out of order), a core sub-zone and a psys zone that must not count."""
    _zone(tmp_path, "intel-rapl:1", "package-1", 2_500_000)
    _zone(tmp_path, "intel-rapl:0", "package-0", 1_000_000)
    _zone(tmp_path, "intel-rapl:0/intel-rapl:0:0", "core", 700_000)
    _zone(tmp_path, "intel-rapl:0:0", "core", 700_000)
    _zone(tmp_path, "intel-rapl:2", "psys", 9_000_000)
    _zone(tmp_path, "intel-rapl-mmio:0", "package-0", 1_000_000)
    return tmp_path


def test_reads_package_zones_only_sorted(tree: Path) -> None:
    reader = RaplReader(root=tree)
    assert reader.source == "rapl"
    assert reader.read() == (CpuPackage("package-0", 0.0), CpuPackage("package-1", 0.0))  # from 0 at the first


def test_values_advance(tree: Path) -> None:
    reader = RaplReader(root=tree)
    reader.read()
    _set(tree / "intel-rapl:0", 4_000_000)
    _set(tree / "intel-rapl:1", 2_750_000)
    assert reader.read() == (CpuPackage("package-0", 3.0), CpuPackage("package-1", 0.25))


def test_wrap_keeps_the_total_monotonic(tree: Path) -> None:
    zone = tree / "intel-rapl:0"
    _set(zone, 262_143_000_000)
    reader = RaplReader(root=tree)
    assert reader.read()[0].joules_total == 0.0
    _set(zone, 500_000)  # wrapped: 328_850 µJ to the top, + 1 to reach 0, + 500_000 after it
    assert reader.read()[0].joules_total == 828_851 / 1e6
    _set(zone, 600_000)
    assert reader.read()[0].joules_total == 928_851 / 1e6
    _set(zone, 100_000)  # a second wrap: 328_850 + 1 to the first, 262_143_328_850 + 1 more, + 100_000
    assert reader.read()[0].joules_total == (328_851 + 262_143_328_851 + 100_000) / 1e6


def test_no_powercap_directory(tmp_path: Path) -> None:
    root = tmp_path / "powercap"
    with pytest.raises(CpuEnergyUnavailable, match=f"no powercap directory {root}"):
        RaplReader(root=root).read()


def test_no_package_zone(tmp_path: Path) -> None:
    _zone(tmp_path, "intel-rapl:0", "psys", 9_000_000)
    _zone(tmp_path, "intel-rapl:0:0", "core", 700_000)
    with pytest.raises(CpuEnergyUnavailable, match="no package zone"):
        RaplReader(root=tmp_path).read()


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads a mode-000 file; see the IsADirectoryError test")
def test_permission_denied_is_a_reason(tree: Path) -> None:
    path = tree / "intel-rapl:1" / "energy_uj"
    path.chmod(0)
    try:
        with pytest.raises(CpuEnergyUnavailable) as caught:
            RaplReader(root=tree).read()
    finally:
        path.chmod(0o644)
    assert str(caught.value) == f"permission denied reading {path} (root only since Linux 5.10's fix for CVE-2020-8694)"


def test_unreadable_energy_file_names_the_path(tmp_path: Path) -> None:
    zone = tmp_path / "intel-rapl:0"
    zone.mkdir()
    (zone / "name").write_text("package-0\n")
    (zone / "energy_uj").mkdir()  # reading raises IsADirectoryError, for root too
    (zone / "max_energy_range_uj").write_text(f"{MAX_RANGE_UJ}\n")
    with pytest.raises(CpuEnergyUnavailable, match=f"^unreadable {zone / 'energy_uj'}: "):
        RaplReader(root=tmp_path).read()


def test_non_number_is_a_reason(tmp_path: Path) -> None:
    zone = _zone(tmp_path, "intel-rapl:0", "package-0", "n/a")
    with pytest.raises(CpuEnergyUnavailable, match=f"unreadable {zone / 'energy_uj'}: not a non-negative integer"):
        RaplReader(root=tmp_path).read()


def test_failed_read_changes_no_state(tree: Path) -> None:
    reader = RaplReader(root=tree)
    reader.read()
    _set(tree / "intel-rapl:0", 3_000_000)
    (tree / "intel-rapl:1" / "energy_uj").write_text("garbage\n")
    with pytest.raises(CpuEnergyUnavailable, match="intel-rapl:1"):
        reader.read()
    _set(tree / "intel-rapl:0", 2_000_000)  # not lower than the last successful read (1.0 J): no wrap
    _set(tree / "intel-rapl:1", 2_600_000)
    assert reader.read() == (CpuPackage("package-0", 1.0), CpuPackage("package-1", 0.1))


def test_vanished_zone_fails_the_read_then_is_forgotten(tree: Path) -> None:
    reader = RaplReader(root=tree)
    reader.read()
    gone = tree / "intel-rapl:1"
    for child in gone.iterdir():
        child.unlink()
    gone.rmdir()
    with pytest.raises(CpuEnergyUnavailable, match=f"unreadable {gone}: zone vanished"):
        reader.read()
    assert reader.read() == (CpuPackage("package-0", 0.0),)
    _zone(tree, "intel-rapl:1", "package-1", 100_000)  # back, counter reset: starts over, not a wrap
    assert reader.read()[1] == CpuPackage("package-1", 0.0)
    _set(tree / "intel-rapl:1", 350_000)
    assert reader.read()[1] == CpuPackage("package-1", 0.25)


def test_concurrent_reads_see_no_spurious_wrap(tree: Path) -> None:
    reader = RaplReader(root=tree)
    zone = tree / "intel-rapl:0"
    stop = threading.Event()

    def advance() -> None:
        value = 1_000_000
        while not stop.is_set():
            value += 1_000
            _set(zone, value)

    def reads() -> list[float]:
        return [reader.read()[0].joules_total for _ in range(40)]

    writer = threading.Thread(target=advance)
    writer.start()
    try:
        with ThreadPoolExecutor(4) as pool:
            totals = [t for result in pool.map(lambda _: reads(), range(4)) for t in result]
    finally:
        stop.set()
        writer.join()
    assert max(totals) < 1_000  # an out-of-order comparison would have added the 262 kJ range


def test_fake_reader_counts_reads_and_raises() -> None:
    packages = (CpuPackage("package-0", 12.5),)
    fake = FakeCpuEnergyReader(packages, source="rapl")
    as_protocol: CpuEnergyReader = fake
    assert as_protocol.read() == packages
    assert (as_protocol.source, fake.reads) == ("rapl", 1)
    failing = FakeCpuEnergyReader(error=CpuEnergyUnavailable("no powercap directory /sys/class/powercap"))
    with pytest.raises(CpuEnergyUnavailable, match="no powercap directory"):
        failing.read()
    assert failing.reads == 1
