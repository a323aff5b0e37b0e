"""The simulator's power model (``simulator.power``): energy integrated step by step, held to sums done here
from the steps the engine planned, and ``/sim/gpu`` reporting it as NVML would (a counter, one-second means)."""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

import httpx
import pytest

from satbench.exporter.gpu import parse_sim_gpu
from satbench.simulator.engine import Engine, RequestSpec
from satbench.simulator.power import PowerMeter
from satbench.simulator.profile import PowerModel, ProfileError, load_profile, profile_from_mapping
from testkit.sim import SimulatorProcess

MODEL = PowerModel(idle_w=100.0, busy_w=400.0, max_w=600.0, token_mj=20.0)


def test_a_meter_integrates_idle_and_steps_by_hand() -> None:
    meter = PowerMeter(MODEL)
    meter.start(0.0)
    meter.begin(1.0, 1.5, 5)  # 400 W + 5 x 20 mJ / 0.5 s = 400.2 W
    meter.begin(2.0, 2.1, 3000)  # 400 W + 60 J / 0.1 s = 1000 W, capped at 600 W
    assert meter.joules(1.0) == pytest.approx(100.0)
    assert meter.joules(1.25) == pytest.approx(100.0 + 0.25 * 400.2)
    assert meter.joules(2.0) == pytest.approx(100.0 + 0.5 * 400.2 + 0.5 * 100.0)
    assert meter.joules(3.0) == pytest.approx(100.0 + 0.5 * 400.2 + 0.5 * 100.0 + 0.1 * 600.0 + 0.9 * 100.0)
    # the reading NVML gives: the mean over the last second
    assert meter.watts(2.0) == pytest.approx(0.5 * 400.2 + 0.5 * 100.0)
    assert meter.watts(3.0) == pytest.approx(0.1 * 600.0 + 0.9 * 100.0)
    assert meter.watts(0.5) == pytest.approx(100.0)  # idle before the start too
    assert PowerMeter(MODEL).joules(5.0) == 0.0 and PowerMeter(MODEL).watts(5.0) == 100.0
    # a step planned again from an earlier time replaces what was planned after it
    meter.begin(2.05, 2.2, 0)
    assert meter.joules(3.0) == pytest.approx(100.0 + 0.5 * 400.2 + 0.5 * 100.0 + 0.05 * 600.0 + 0.15 * 400.0
                                              + 0.8 * 100.0)
    meter.begin(1.8, 1.9, 0)  # from before the marks at 2.0 and 2.05: they go
    assert meter.joules(3.0) == pytest.approx(100.0 + 0.5 * 400.2 + 0.3 * 100.0 + 0.1 * 400.0 + 1.1 * 100.0)


def test_the_engine_energy_is_its_steps_summed() -> None:
    """A virtual-time run: the meter's energy equals idle power over the whole run plus, for every step the
    engine planned, its extra draw over its length, each step's draw computed here from the profile."""
    profile = dataclasses.replace(load_profile("dense"), power=MODEL)
    engine = Engine(profile)
    engine.power.start(0.0)
    plans = []
    now = 0.0
    for i in range(12):
        engine.submit(RequestSpec(f"r{i}", 300 + 50 * i, 20, ignore_eos=True), now)
    while engine.has_work():
        plan = engine.begin_step(now)
        assert plan is not None
        plans.append(plan)
        now = engine.finish_step().end + 0.003  # a gap between steps: idle
    truth = 100.0 * now
    for p in plans:
        n, dt = p.n_decode + p.n_prompt, p.end - p.start
        truth += (min(600.0, 400.0 + 0.020 * n / dt) - 100.0) * dt
    assert len(plans) > 20
    assert engine.power.joules(now) == pytest.approx(truth, rel=1e-9)


def test_the_power_section_is_checked() -> None:
    with pytest.raises(ProfileError, match=r"\[power\] need idle_w <= busy_w <= max_w"):
        profile_from_mapping({"power": {"idle_w": 500.0, "busy_w": 400.0}})
    with pytest.raises(ProfileError, match=r"\[power\]: unknown key"):
        profile_from_mapping({"power": {"tdp_w": 500.0}})
    with pytest.raises(ProfileError, match=r"\[power\] idle_w must be > 0"):
        profile_from_mapping({"power": {"idle_w": 0.0}})
    assert load_profile("moe").power.idle_w == 8 * load_profile("dense").power.idle_w


def _profile(tmp_path: Path, counter: bool) -> str:
    """A profile that draws a constant 300 W (idle and busy alike): its energy is known without its steps."""
    text = ('name = "flat"\n[memory]\ngpu_count = 2\n[power]\nidle_w = 300.0\nbusy_w = 300.0\nmax_w = 700.0\n'
            f"token_mj = 0.0\nenergy_counter = {str(counter).lower()}\n")
    path = tmp_path / f"flat-{counter}.toml"
    path.write_text(text, encoding="utf-8")
    return str(path)


@pytest.mark.parametrize("counter", [True, False])
def test_sim_gpu_reports_power_and_energy_as_nvml_does(tmp_path: Path, counter: bool) -> None:
    with SimulatorProcess(_profile(tmp_path, counter)) as sim, httpx.Client(timeout=5.0) as client:
        httpx.post(f"{sim.url}/completion", json={"prompt": "hello " * 50, "n_predict": 40, "ignore_eos": True},
                   timeout=30.0).raise_for_status()  # some steps: the draw stays 300 W
        sent1 = time.monotonic()
        first = client.get(f"{sim.url}/sim/gpu").json()
        got1 = time.monotonic()
        time.sleep(1.2)
        sent2 = time.monotonic()
        second = client.get(f"{sim.url}/sim/gpu").json()
        got2 = time.monotonic()
    a, b = parse_sim_gpu(httpx.Response(200, json=first).text), parse_sim_gpu(httpx.Response(200, json=second).text)
    assert len(b) == 2 and second["energy_counter"] is counter
    for before, after in zip(a, b, strict=True):
        assert after.power_w == pytest.approx(150.0)  # 300 W over two GPUs
        if counter:
            assert before.energy_j is not None and after.energy_j is not None
            # the server read each counter somewhere between our send and our receipt: its spacing lies
            # between the shortest and the longest spacing those brackets allow, however loaded the host
            spacing = (after.energy_j - before.energy_j) / 150.0
            assert sent2 - got1 - 1e-3 <= spacing <= got2 - sent1 + 1e-3
        else:
            assert after.energy_j is None
