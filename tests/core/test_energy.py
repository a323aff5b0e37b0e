"""``core.energy``: a window's energy from raw samples (interpolated at its edges), per token, per kilowatt
and per price, each case worked by hand; and ``answer.energy``, what an answer states from its rung."""

from __future__ import annotations

import dataclasses

import pytest
from pydantic import ValidationError

from satbench.answer.energy import RECORDS_READ, energy_at
from satbench.answer.policy import Cost, Policy
from satbench.core.energy import (
    CPU_COUNTER,
    GPU_COUNTER,
    GPU_POWER,
    EnergyFigures,
    EnergyReadings,
    cost_per_million_tokens,
    counter_increase,
    energy_figures,
    power_integral,
    tokens_per_s_per_kw,
    window_readings,
)
from tests.recommender.figures_factory import step


def test_a_counter_is_interpolated_at_both_edges() -> None:
    samples = [(float(t), 100.0 * t) for t in range(0, 11)]  # 100 W
    assert counter_increase(samples, 2.5, 7.25) == pytest.approx(475.0)
    # extended by the nearest segment, within two intervals of an edge
    assert counter_increase(samples, -1.0, 11.5) == pytest.approx(1250.0)
    assert counter_increase(samples, -3.0, 5.0) is None  # an edge three intervals out: no figure
    assert counter_increase(samples[:1], 0.0, 0.5) is None and counter_increase(samples, 5.0, 5.0) is None


def test_a_counter_reset_is_undone() -> None:
    # 10 J a second; the device restarts between t=4 and t=5 and counts from 0 again (5 J at t=5)
    samples = [(0.0, 1000.0), (1.0, 1010.0), (2.0, 1020.0), (3.0, 1030.0), (4.0, 1040.0), (5.0, 5.0), (6.0, 15.0)]
    assert counter_increase(samples, 1.0, 6.0) == pytest.approx(30.0 + 5.0 + 10.0)


def test_power_samples_are_integrated_over_exactly_the_window() -> None:
    # each sample the mean since the one before: 100 W over (0, 1], 300 W over (1, 2], 200 W over (2, 3]
    samples = [(1.0, 100.0), (2.0, 300.0), (3.0, 200.0)]
    assert power_integral(samples, 0.5, 2.5) == pytest.approx(0.5 * 100 + 300 + 0.5 * 200)
    assert power_integral(samples, 2.5, 3.5) == pytest.approx(0.5 * 200 + 0.5 * 200)  # the last held
    assert power_integral(samples, 0.0, 9.0) is None
    # three samples missed in a row inside the window: one reading would stand for four seconds
    gappy = [(float(t), 100.0) for t in (0, 1, 2, 3, 4, 8, 9, 10, 11, 12)]
    assert power_integral(gappy, 1.0, 11.0) is None
    assert power_integral([(float(t), 100.0) for t in (0, 1, 2, 3, 4, 6, 7, 8)], 1.0, 7.0) == pytest.approx(600.0)


def test_window_readings_take_each_gpu_by_its_best_source() -> None:
    ramp = [(float(t), 50.0 * t) for t in range(11)]
    flat = [(float(t), 80.0) for t in range(11)]
    gpu = {"gpu": "0", "node": "n", "lane": "x"}
    series = [({"__name__": GPU_COUNTER, **gpu}, ramp), ({"__name__": GPU_POWER, **gpu}, flat),
              ({"__name__": GPU_POWER, "gpu": "1", "lane": "x"}, flat),
              ({"__name__": CPU_COUNTER, "package": "package-0", "lane": "x"}, ramp),
              ({"__name__": CPU_COUNTER, "package": "package-1", "lane": "x"}, ramp)]
    got = window_readings(series, 2.0, 6.0)
    assert got == EnergyReadings(gpu_joules=200.0 + 320.0, gpu_counted=1, gpu_sampled=1, cpu_joules=400.0)
    assert window_readings([], 2.0, 6.0) == EnergyReadings()
    # a GPU whose exporter came up mid-window: the lane's sum would be half the truth, so there is none
    late = [({"__name__": GPU_COUNTER, "gpu": "0", "lane": "x"}, ramp),
            ({"__name__": GPU_COUNTER, "gpu": "1", "lane": "x"}, ramp[5:])]
    assert window_readings(late, 2.0, 9.0).gpu_joules is None
    late_cpu = [({"__name__": CPU_COUNTER, "package": p, "lane": "x"}, s) for p, s in (("0", ramp), ("1", ramp[6:]))]
    assert window_readings(late_cpu, 2.0, 9.0).cpu_joules is None


def test_per_token_figures_and_their_scope() -> None:
    gpu = energy_figures(EnergyReadings(gpu_joules=600.0, gpu_counted=2, cpu_joules=90.0), 10.0, 2000.0)
    assert gpu == EnergyFigures(gpu_joules=600.0, gpu_watts=60.0, gpu_source="counter", cpu_joules=90.0,
                                cpu_watts=9.0, scope="gpu", joules_per_token=0.3, tokens_per_joule=2000 / 600)
    assert gpu.watts == 60.0
    cpu = energy_figures(EnergyReadings(cpu_joules=90.0), 10.0, 300.0)
    assert (cpu.scope, cpu.joules_per_token, cpu.watts, cpu.gpu_source) == ("cpu-package", 0.3, 9.0, None)
    assert energy_figures(EnergyReadings(gpu_joules=5.0, gpu_counted=1, gpu_sampled=1), 1.0, 0.0).gpu_source \
        == "counter+samples"
    idle = energy_figures(EnergyReadings(gpu_joules=600.0, gpu_sampled=1), 10.0, 0.0)
    assert idle.joules_per_token is None and idle.tokens_per_joule is None  # no tokens: no figure, never 0
    assert idle.gpu_watts == 60.0 and idle.gpu_source == "samples"
    assert energy_figures(EnergyReadings(gpu_joules=float("nan"), gpu_counted=1), 10.0, 1.0) == EnergyFigures()


def test_per_kilowatt_and_per_price() -> None:
    assert tokens_per_s_per_kw(1000.0, 500.0) == pytest.approx(2000.0)
    assert tokens_per_s_per_kw(1000.0, None) is None and tokens_per_s_per_kw(None, 500.0) is None
    # 3.60 an hour is 0.001 a second; at 100 tok/s a million tokens take 10,000 s
    assert cost_per_million_tokens(3.6, 100.0) == pytest.approx(10.0)
    assert cost_per_million_tokens(None, 100.0) is None and cost_per_million_tokens(3.6, 0.0) is None


def test_an_answer_states_its_rungs_energy_and_cost() -> None:
    rung = dataclasses.replace(step(4, 800.0), energy=energy_figures(
        EnergyReadings(gpu_joules=12000.0, gpu_counted=1), 30.0, 800.0 * 30.0))
    cost = Cost(price_per_hour=2.88, node_price_per_hour={"gpu-b": 7.2}, currency="EUR")
    e = energy_at(rung, cost, "local")
    assert e is not None and e.reason is None
    assert (e.scope, e.source, e.watts, e.joules_per_token) == ("gpu", "counter", 400.0, 0.5)
    assert e.tok_s_per_kw == pytest.approx(2000.0)
    assert e.cost_per_million_tokens == pytest.approx(2.88 / 3600 / 800 * 1e6) and e.currency == "EUR"
    assert energy_at(rung, cost, "gpu-b").price_per_hour == 7.2  # type: ignore[union-attr]
    bare = energy_at(step(4, 800.0), Cost(), "local")
    assert bare is not None and bare.scope is None and bare.cost_per_million_tokens is None
    assert bare.reason is not None and "no energy reading" in bare.reason
    assert energy_at(None, cost, "local") is None
    assert energy_at(step(4, 800.0), cost, "local", RECORDS_READ).reason == RECORDS_READ  # type: ignore[union-attr]


def test_prices_are_checked_and_stay_out_of_the_judgement() -> None:
    with pytest.raises(ValidationError):
        Cost(price_per_hour=-1.0)
    with pytest.raises(ValidationError):
        Cost(node_price_per_hour={"a": 0.0})
    with pytest.raises(ValidationError):
        Cost(currency="US$")
    assert Policy.model_validate({"cost": {"price_per_hour": 3.0}}).cost.price("any") == 3.0
