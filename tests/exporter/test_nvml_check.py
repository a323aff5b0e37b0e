"""``python -m satbench.exporter.nvml_check``: NVML against ``nvidia-smi``, written into the run folder. Here the
NVML side is the fake binding (a steady 300 W card) and ``nvidia-smi`` a stand-in script printing what the real
one prints for such a card, or a card that draws something else."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest

from satbench.exporter.nvml_check import check
from testkit.fake_nvml import FakeNvml, PowerCurve

CARD = PowerCurve(300.0, 0.0, 10.0, used_bytes=20_000_000_000, total_bytes=85_520_809_984)


def _smi(tmp_path: Path, watts: float) -> str:
    script = tmp_path / "nvidia-smi"
    used, total = round(CARD.used_bytes / 2**20), round(CARD.total_bytes / 2**20)
    script.write_text(f"#!{sys.executable}\nprint('0, NVIDIA H100 80GB HBM3, {used}, {total}, {watts:.2f}')\n",
                      encoding="utf-8")
    script.chmod(0o755)
    return str(script)


@pytest.mark.parametrize(("watts", "status"), [(300.0, 0), (250.0, 1)])
def test_the_readings_agree_or_the_difference_is_said(tmp_path: Path, watts: float, status: int) -> None:
    nvml = FakeNvml([CARD], time.monotonic)
    got = check(tmp_path, seconds=1.0, every_s=0.1, module=nvml, binary=_smi(tmp_path, watts))
    said = json.loads((tmp_path / "nvml_check.json").read_text())
    assert got == status and said["ok"] is (status == 0) and said["driver"] == "550.54.15"
    by_figure = {c["figure"]: c for c in said["comparisons"]}
    assert set(by_figure) == {"memory_used_bytes", "memory_total_bytes", "power_watts", "energy_joules"}
    assert by_figure["memory_used_bytes"]["ok"] and by_figure["memory_total_bytes"]["ok"]
    assert by_figure["power_watts"]["ok"] is (status == 0) and by_figure["energy_joules"]["ok"] is (status == 0)
    assert by_figure["power_watts"]["nvml"] == pytest.approx(300.0, abs=0.01)


def test_no_nvidia_smi_is_not_a_pass(tmp_path: Path) -> None:
    got = check(tmp_path, seconds=1.0, module=FakeNvml([CARD], time.monotonic), binary=str(tmp_path / "absent"))
    said = json.loads((tmp_path / "nvml_check.json").read_text())
    assert got == 2 and said["ok"] is None and said["reason"].startswith("not checked:")
