"""The recommender on a horizontally scaled PromQL store: a real VictoriaMetrics gives the same answer.

Why: the recommender speaks only the Prometheus HTTP API (instant and range queries), so a fleet can keep one
central store for every site's samples and point the recommender at it (docs/fleet-store.md). This proves it
against a real VictoriaMetrics single-node (Debian ``victoria-metrics``, started by ``testkit.victoria``).

The suite's shared real session (``testkit.session``: ladder 1/2, 3 s windows; ``dense`` with one slot, so it
saturates, ``moe``, and ``dense`` again on node ``gpu1``) runs with ``prometheus.remote_write`` set to a
VictoriaMetrics (``tests/conftest.py`` starts it before the session and stops it after the suite). When it has
ended, its Prometheus has stopped (and a running one would hold the storage lock), so a Prometheus is
started on a copy of the run folder's TSDB (``tests/grafana/panel_replay``), which holds what the session's
Prometheus held. Once VictoriaMetrics holds every sample that Prometheus holds (stale markers aside), the
run's manifest is analysed from PromQL alone (``analyze_run(..., run_dir=None)``) against each, and the two
documents must agree: per lane the same status, recommended and saturation concurrency, binding constraint,
and per step the same usable flag and violations; every figure equal within ``REL_TOL``/``ABS_TOL``
(VictoriaMetrics keeps about 12 significant decimal digits of a float, Prometheus the float64 itself: 1e-13
relative on the stored values, up to 1e-11 on a derived gain). Only clock stamps and the source URL differ.

They agree because the load generator publishes each step's exact client figures (``loadgen_step_figure``):
the recommender reads those, and the rest (occupancy, queue depth, memory: ``avg_over_time``,
``max_over_time``, ``count_over_time``, a subquery) means the same in MetricsQL. The histogram estimates it
falls back to without them (``increase()`` over each window) do *not* agree, by design of MetricsQL:
``test_increase_is_where_the_engines_part`` pins the two semantics on this run's own raw samples (Prometheus
extrapolates the in-window samples to the window's edges; MetricsQL takes the last sample before the window as
its base and does not extrapolate), so that the difference is explained, not just tolerated.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import math
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from satbench.answer.policy import Policy
from satbench.core import promql
from satbench.core.lanes import key_labels
from satbench.core.manifest import RunManifest, StepWindow, read_manifest
from satbench.exporter.promconfig import LOADGEN_JOB, ScrapeTarget, render_prometheus_config
from satbench.recommender.prometheus_source import HttpxPromClient, PrometheusSourceConfig, fetch_step_figures
from satbench.recommender.run_analysis import analyze_run
from testkit.prom import prometheus_binary, promtool_binary
from testkit.session import SharedSession
from testkit.victoria import MISSING_REASON, VictoriaMetricsProcess, victoria_metrics_binary
from tests.grafana.panel_replay import replay_prometheus

pytestmark = [
    pytest.mark.skipif(prometheus_binary() is None, reason="Prometheus is not installed (apt-get install prometheus)"),
    pytest.mark.skipif(victoria_metrics_binary() is None, reason=MISSING_REASON),
    pytest.mark.timeout(240),
]

REL_TOL = 1e-9
ABS_TOL = 1e-9
CLOCK_KEYS = frozenset({"generated_at", "checked_at", "age_s"})  # stamped by the analysing clock, not the data
ANSWER = ("status", "recommended_concurrency", "saturation_concurrency", "binding_constraint")
ARRIVAL_TIMEOUT_S = 30.0

Samples = dict[str, list[tuple[int, float]]]  # series (labels as sorted JSON) -> [(ms, value)], no NaN


@dataclass
class Stores:
    run_dir: Path
    manifest: RunManifest
    policy: Policy
    prom_url: str
    vm_url: str
    session_doc: dict[str, Any]
    prom_doc: dict[str, Any]
    vm_doc: dict[str, Any]
    vm_prefixed_doc: dict[str, Any]
    prom_samples: Samples
    vm_samples: Samples
    prom_fallback: list[dict[str, Any]]
    vm_fallback: list[dict[str, Any]]


def _raw(url: str, selector: str, at: float, span_s: int) -> Samples:
    """Every stored sample of ``selector`` in the ``span_s`` before ``at`` (a range-vector instant query), NaN
    left out: VictoriaMetrics returns Prometheus' stale markers as NaN samples, Prometheus never does."""
    resp = httpx.get(f"{url}/api/v1/query", params={"query": f"{selector}[{span_s}s]", "time": f"{at:.3f}"},
                     timeout=20.0)
    resp.raise_for_status()
    out: Samples = {}
    for item in resp.json()["data"]["result"]:
        points = [(round(float(t) * 1000), float(v)) for t, v in item["values"] if not math.isnan(float(v))]
        if points:
            out[json.dumps(item["metric"], sort_keys=True)] = points
    return out


def _sample_problems(prom: Samples, vm: Samples) -> list[str]:
    problems = [f"{key}: absent" for key in sorted(set(prom) - set(vm))]
    for key in sorted(set(prom) & set(vm)):
        a, b = prom[key], vm[key]
        if [t for t, _ in a] != [t for t, _ in b]:
            problems.append(f"{key}: {len(a)} samples in Prometheus, {len(b)} in VictoriaMetrics")
        elif not all(math.isclose(x, y, rel_tol=REL_TOL, abs_tol=ABS_TOL) for (_, x), (_, y) in zip(a, b, strict=True)):
            problems.append(f"{key}: values differ")
    return problems


def _fallback(url: str, manifest: RunManifest, policy: Policy) -> list[dict[str, Any]]:
    """Each window's figures from the histograms alone (``run_id=None``: no published figures read)."""
    async def run() -> list[dict[str, Any]]:
        config = PrometheusSourceConfig(confidence=policy.confidence)
        async with HttpxPromClient(url) as client:
            return [(await fetch_step_figures(client, w, config, run_id=None)).to_dict() for w in manifest.steps]
    return asyncio.run(run())


@pytest.fixture(scope="module")
def stores(shared_session: SharedSession, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stores]:
    vm, run = shared_session.store, shared_session.run
    assert vm is not None, MISSING_REASON
    run_dir = run.run_dir
    assert (run_dir / "manifest.json").exists(), f"rc {run.returncode}\n{run.stderr[-3000:]}"
    config = (run_dir / "prometheus" / "prometheus.yml").read_text()
    assert yaml.safe_load(config)["remote_write"][0]["url"] == vm.write_url
    manifest = read_manifest(run_dir / "manifest.json")
    policy = Policy.model_validate((manifest.config or {}).get("policy") or {})
    session_doc = json.loads((run_dir / "recommendations.json").read_text())
    at = time.time()
    span_s = math.ceil(at - manifest.created_at) + 30
    with replay_prometheus(run_dir, tmp_path_factory.mktemp("replay")) as prom:
        selector = '{job=~"satbench_.+"}'
        prom_samples = _raw(prom.url, selector, at, span_s)
        last: list[str] = []

        def holds(v: VictoriaMetricsProcess) -> bool:
            last[:] = _sample_problems(prom_samples, _raw(v.url, selector, at, span_s))
            return not last

        try:
            vm.wait_holds(holds, timeout_s=ARRIVAL_TIMEOUT_S, what="every sample of the session's Prometheus")
        except TimeoutError as exc:  # say what was still missing, not only that something was
            raise TimeoutError(f"{exc}\nstill: {'; '.join(last[:8])} ({len(last)} problems)") from exc
        vm_samples = _raw(vm.url, selector, at, span_s)
        prom_doc, vm_doc, vm_prefixed_doc = (analyze_run(manifest, prometheus_url=url, run_dir=None, policy=policy)
                                             for url in (prom.url, vm.url, f"{vm.url}/prometheus"))
        yield Stores(run_dir, manifest, policy, prom.url, vm.url, session_doc, prom_doc, vm_doc, vm_prefixed_doc,
                     prom_samples, vm_samples, _fallback(prom.url, manifest, policy),
                     _fallback(vm.url, manifest, policy))


def _differences(a: Any, b: Any, path: str = "") -> list[str]:
    """Where two JSON documents differ: numbers beyond the tolerance, anything else not equal."""
    if isinstance(a, dict) and isinstance(b, dict):
        return [d for key in sorted(set(a) | set(b)) if key not in CLOCK_KEYS
                for d in _differences(a.get(key), b.get(key), f"{path}.{key}")]
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return [d for i, (x, y) in enumerate(zip(a, b, strict=True)) for d in _differences(x, y, f"{path}[{i}]")]
    numbers = all(isinstance(v, int | float) and not isinstance(v, bool) for v in (a, b))
    if numbers and math.isclose(a, b, rel_tol=REL_TOL, abs_tol=ABS_TOL):
        return []
    return [] if a == b else [f"{path}: Prometheus {a!r}, VictoriaMetrics {b!r}"]


def test_the_rendered_remote_write_section_passes_promtool(tmp_path: Path) -> None:
    text = render_prometheus_config([ScrapeTarget(LOADGEN_JOB, "127.0.0.1:9110")], [],
                                    remote_write=["http://127.0.0.1:8428/api/v1/write",
                                                  "https://mimir.example:443/api/v1/push"])
    doc = yaml.safe_load(text)
    assert doc["remote_write"] == [
        {"url": "http://127.0.0.1:8428/api/v1/write", "queue_config": {"batch_send_deadline": "1s"}},
        {"url": "https://mimir.example:443/api/v1/push", "queue_config": {"batch_send_deadline": "1s"}},
    ]
    assert "remote_write" not in yaml.safe_load(render_prometheus_config([], []))
    with pytest.raises(ValueError, match="remote_write URL"):
        render_prometheus_config([], [], remote_write=["127.0.0.1:8428/api/v1/write"])
    binary = promtool_binary()
    if binary is None:
        pytest.skip("promtool is not installed (Debian: apt-get install prometheus)")
    (tmp_path / "prometheus.yml").write_text(text)
    done = subprocess.run([binary, "check", "config", "prometheus.yml"], cwd=tmp_path, capture_output=True,
                          text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stdout + done.stderr


def test_victoria_metrics_holds_every_sample_of_the_session(stores: Stores) -> None:
    assert stores.prom_samples, "the session's Prometheus stored nothing"
    assert not _sample_problems(stores.prom_samples, stores.vm_samples)
    jobs = {json.loads(key).get("job") for key in stores.vm_samples}
    assert {"satbench_exporter", "satbench_loadgen", "satbench_recommender"} <= jobs


def _broken(step: dict[str, Any]) -> list[tuple[Any, ...]]:
    """A step's violations but for their measured figure (compared within the stores' precision elsewhere)."""
    return [(v["constraint"], v["limit"], v["detail"], v.get("figure"), v.get("setting")) for v in step["violations"]]


def test_the_same_document_from_either_store(stores: Stores) -> None:
    prom, vm = stores.prom_doc, stores.vm_doc
    assert prom["source"] == {"kind": "prometheus", "url": stores.prom_url}
    assert vm["source"] == {"kind": "prometheus", "url": stores.vm_url}
    assert set(prom["lanes"]) == set(vm["lanes"]) == set(stores.manifest.lane_names())
    for key, lane in prom["lanes"].items():
        other = vm["lanes"][key]
        assert [lane[k] for k in ANSWER] == [other[k] for k in ANSWER], key
        # a violation's figure to the store's precision: VictoriaMetrics keeps ~12 significant digits (0.125446081161
        # of 0.12544608116149902), which ``_differences`` below allows; what it broke and why must be the same
        steps = [(s["concurrency"], s["usable"], _broken(s), s["valid"], s["requests"]) for s in lane["steps"]]
        assert steps == [(s["concurrency"], s["usable"], _broken(s), s["valid"], s["requests"])
                         for s in other["steps"]], key
        assert sum(s["requests"] for s in lane["steps"]) > 0, key
    differences = _differences({**prom, "source": None}, {**vm, "source": None})
    assert not differences, "\n".join(differences)
    # and the answer is the one the session itself gave (its recommender asked the live Prometheus)
    for key, lane in stores.session_doc["lanes"].items():
        again = prom["lanes"][key]  # on a mismatch, say why the re-analysis answered as it did
        assert [lane[k] for k in ANSWER] == [again[k] for k in ANSWER], (key, again["reason"], again["validity"])


def test_a_path_prefixed_query_url_works(stores: Stores) -> None:
    """The client joins its API paths below the URL's own path, as vmselect (``/select/<tenant>/prometheus``),
    Mimir (``/prometheus``) and a reverse proxy need; VictoriaMetrics single-node answers below ``/prometheus``
    too."""
    differences = _differences({**stores.vm_doc, "source": None}, {**stores.vm_prefixed_doc, "source": None})
    assert not differences, "\n".join(differences)
    assert stores.vm_prefixed_doc["source"]["url"] == f"{stores.vm_url}/prometheus"


def test_the_fallback_gauges_and_validity_agree(stores: Stores) -> None:
    """Without published figures: what the gauges give (occupancy, queue depth, memory, all ``*_over_time``)
    and each window's scrape coverage (``count_over_time``) mean the same in MetricsQL."""
    keys = ("lane", "concurrency", "valid", "reason", "occupancy_ratio", "queue_depth_avg", "memory_bytes")
    prom = [{k: f[k] for k in keys} for f in stores.prom_fallback]
    vm = [{k: f[k] for k in keys} for f in stores.vm_fallback]
    differences = _differences(prom, vm)
    assert not differences, "\n".join(differences)


def _prometheus_increase(samples: list[tuple[int, float]], t_ms: int, w_ms: int) -> float | None:
    """Prometheus 2's ``increase(x[w])`` at ``t`` (promql/functions.go ``extrapolatedRate``): the samples in
    ``[t-w, t]``, their difference extrapolated towards each edge (by the gap, if under 1.1 mean intervals,
    else half an interval; never below zero at the start)."""
    inside = [(t, v) for t, v in samples if t_ms - w_ms <= t <= t_ms]
    if len(inside) < 2:
        return None
    (t0, v0), (t1, v1) = inside[0], inside[-1]
    delta = v1 - v0 + sum(a for (_, a), (_, b) in itertools.pairwise(inside) if b < a)
    to_start, to_end, sampled = (t0 - (t_ms - w_ms)) / 1000, (t_ms - t1) / 1000, (t1 - t0) / 1000
    mean = sampled / (len(inside) - 1)
    if delta > 0 and v0 >= 0:
        to_start = min(to_start, sampled * v0 / delta)
    span = sampled + sum(gap if gap < 1.1 * mean else mean / 2 for gap in (to_start, to_end))
    return delta * span / sampled


def _metricsql_increase(samples: list[tuple[int, float]], t_ms: int, w_ms: int) -> float | None:
    """MetricsQL's ``increase(x[w])`` at ``t`` where the series has a sample before the window: the last
    sample in ``(t-w, t]`` less the last one before it, no extrapolation (None where there is no sample
    before the window: MetricsQL then guesses whether the counter started at zero)."""
    before = [v for t, v in samples if t <= t_ms - w_ms]
    inside = [v for t, v in samples if t_ms - w_ms < t <= t_ms]
    if not before or not inside:
        return None
    values = [before[-1], *inside]
    return values[-1] - values[0] + sum(a for a, b in itertools.pairwise(values) if b < a)


def _window_requests(url: str, window: StepWindow) -> float | None:
    query = promql.window_requests_by_outcome(window.lane, window.duration_s)
    resp = httpx.get(f"{url}/api/v1/query", params={"query": query, "time": f"{window.end:.3f}"}, timeout=10.0)
    resp.raise_for_status()
    ok = [float(r["value"][1]) for r in resp.json()["data"]["result"] if r["metric"].get("outcome") == "ok"]
    return ok[0] if ok else None


def test_increase_is_where_the_engines_part(stores: Stores) -> None:
    """``promql.window_requests_by_outcome`` (and every other ``increase()`` of ``core.promql``: output tokens,
    per-user tokens, histogram buckets, means) is answered by each engine by its own rule, computed here from
    the very samples both hold: Prometheus extrapolates, MetricsQL counts whole requests from the sample before
    the window. Both rules are checked on every window where both apply."""
    checked = 0
    for window in stores.manifest.steps:
        labels = key_labels(window.lane)  # a lane that names no node has no node label
        series = [points for key, points in stores.prom_samples.items()
                  if (m := json.loads(key)).get("__name__") == "loadgen_requests_total" and m.get("outcome") == "ok"
                  and m.get("lane") == labels["lane"] and m.get("node") == labels.get("node")]
        assert len(series) == 1, window
        t_ms, w_ms = round(window.end * 1000), round(window.duration_s * 1000)
        expect_prom = _prometheus_increase(series[0], t_ms, w_ms)
        expect_vm = _metricsql_increase(series[0], t_ms, w_ms)
        if expect_prom is None or expect_vm is None:
            continue
        got_prom, got_vm = _window_requests(stores.prom_url, window), _window_requests(stores.vm_url, window)
        assert got_prom is not None and math.isclose(got_prom, expect_prom, rel_tol=1e-9), (window, got_prom)
        assert got_vm is not None and math.isclose(got_vm, expect_vm, rel_tol=1e-9), (window, got_vm)
        assert got_vm == round(got_vm)  # whole requests: nothing extrapolated
        checked += 1
    assert checked >= len(stores.manifest.steps) // 2, "too few windows with samples on both sides"
