"""A fleet end to end: three simulated nodes (one sized differently) with two lanes each, and a fourth that
does not answer, measured by one ``satbench run`` over real HTTP into a real Prometheus and a recommender
service that outlives the session, as a fleet's do.

The test owns what a fleet owns (the nodes, one exporter per lane, Prometheus scraping them with ``node`` and
``lane`` target labels, the recommender); the session is handed them by URL (``[[nodes]]`` with external
lanes, ``prometheus.url``, ``recommender.url``). Then one lane's runtime is restarted with another slot
count: exactly that answer must turn ``stale`` within two scrape intervals (and the validity tick), with a
reason naming the slot count, while the five others stay valid.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from satbench.core.net import free_port
from satbench.exporter.promconfig import EXPORTER_JOB, LOADGEN_JOB, ScrapeTarget, render_prometheus_config
from satbench.recommender.capabilities import capability_fragment
from satbench.runtimes.processes import ProcessSet, wait_until_ready
from satbench.simulator.fleet import FleetSpec
from testkit.exposition import samples
from testkit.fleet import FleetThread
from testkit.prom import PrometheusProcess

pytestmark = [
    pytest.mark.skipif(shutil.which("prometheus") is None,
                       reason="Prometheus is not installed (apt-get install prometheus)"),
    pytest.mark.slow,
]

ROOT = Path(__file__).resolve().parents[2]
SCRAPE_S = 1.0
NODES = {"a": 4, "b": 4, "c": 8}  # node -> dense slots: c is the larger node
LANES = {"dense": "dense", "moe": "moe"}
POLICY = {"min_requests_per_step": 2, "max_throughput_ci_ratio": 1.0}  # the session's and the service's


@dataclass
class Fleet:
    sims: FleetThread
    urls: dict[str, dict[str, str]]
    exporters: dict[str, str]  # key -> exporter URL
    prom: PrometheusProcess
    rec_url: str
    run_dir: Path
    returncode: int
    stdout: str
    stderr: str


def _spec() -> FleetSpec:
    return FleetSpec.model_validate({"nodes": [
        {"name": node, "lanes": [{"name": lane, "profile": profile, **({"slots": slots} if lane == "dense" else {})}
                                 for lane, profile in LANES.items()]}
        for node, slots in NODES.items()]})


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "satbench.cli", *args]


def _toml_config(urls: dict[str, dict[str, str]], exporters: dict[str, str], prom_url: str, rec_url: str,
                 metrics_port: int, dead_url: str) -> str:
    out = [f'prometheus = {{ url = "{prom_url}", scrape_interval_s = {SCRAPE_S} }}',
           f'recommender = {{ url = "{rec_url}" }}', ""]
    out += ["[loadgen]", f"metrics_port = {metrics_port}", "parallel_nodes = 4", "warmup_s = 0.5",
            "min_window_s = 3", "max_window_s = 3", "drain_timeout_s = 1", "min_requests = 2",
            "max_loop_lag_s = 0.5", "max_idle_share = 0.5",  # plumbing: a loaded machine voids no step
            "[loadgen.ladder]", "concurrency = [1, 2]", "extend = false",
            "drift_reference = false",  # the fleet is the point: no re-measures (they would double the walk)
            "[policy]", *(f"{k} = {v}" for k, v in POLICY.items()), ""]
    for node in [*urls, "d"]:
        out += ["[[nodes]]", f'name = "{node}"', f'labels = {{ gpu = "{"sim-large" if node == "c" else "sim"}" }}']
        for lane in LANES:
            url = dead_url if node == "d" else urls[node][lane]
            out += ["[[nodes.lanes]]", f'name = "{lane}"', 'runtime = "external"', f'url = "{url}"']
            if node != "d":
                out.append(f'exporter_url = "{exporters[f"{node}/{lane}"]}"')
        out.append("")
    return "\n".join(out)


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    tmp = tmp_path_factory.mktemp("fleet")
    processes = ProcessSet(tmp / "logs")
    with FleetThread(_spec()) as sims:
        urls = sims.urls()
        exporters: dict[str, str] = {}
        children = []
        for node, lanes in urls.items():
            for lane, url in lanes.items():
                port = free_port()
                children.append(processes.start(f"exporter-{node}-{lane}", _cli(
                    "exporter", "--runtime-url", url, "--port", str(port), "--gpu", "none")))
                exporters[f"{node}/{lane}"] = f"http://127.0.0.1:{port}"
        for child, url in zip(children, exporters.values(), strict=True):
            wait_until_ready(child, f"{url}/metrics", timeout_s=30)
        metrics_port = free_port()
        targets = [ScrapeTarget(EXPORTER_JOB, url.removeprefix("http://"), {"node": key.split("/")[0],
                                                                          "lane": key.split("/")[1]})
                   for key, url in exporters.items()]
        targets.append(ScrapeTarget(LOADGEN_JOB, f"127.0.0.1:{metrics_port}"))
        rules = sorted((ROOT / "prometheus" / "rules").glob("*.yml"))
        with PrometheusProcess(render_prometheus_config(targets, rules, SCRAPE_S)) as prom:
            rec_port = free_port()
            policy = tmp / "policy.json"
            policy.write_text(json.dumps(POLICY))
            rec = processes.start("recommender", _cli(
                "recommender", "--prometheus-url", prom.url, "--port", str(rec_port), "--runs-dir",
                str(tmp / "runs"), "--validity-interval", "0.5", "--scrape-interval", str(SCRAPE_S),
                "--policy", str(policy)))
            rec_url = f"http://127.0.0.1:{rec_port}"
            wait_until_ready(rec, f"{rec_url}/healthz", timeout_s=30)
            config = tmp / "fleet.toml"
            config.write_text(_toml_config(urls, exporters, prom.url, rec_url, metrics_port,
                                           f"http://127.0.0.1:{free_port()}"))
            try:
                done = subprocess.run(_cli("run", "--config", str(config), "--out", str(tmp / "runs")), cwd=ROOT,
                                      capture_output=True, text=True, timeout=150)
                (run_dir,) = [p for p in (tmp / "runs").iterdir() if p.is_dir()]
                yield Fleet(sims, urls, exporters, prom, rec_url, run_dir, done.returncode, done.stdout,
                            done.stderr)
            finally:
                processes.stop_all()


def _document(url: str) -> dict[str, Any]:
    resp = httpx.get(f"{url}/recommendations", timeout=10)
    resp.raise_for_status()
    return dict(resp.json())


def _wait(url: str, until: Any, timeout_s: float) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    doc = _document(url)
    while not until(doc) and time.monotonic() < deadline:
        time.sleep(0.1)
        doc = _document(url)
    return doc


def test_one_session_measures_every_lane_of_every_node_and_marks_the_dead_one(fleet: Fleet) -> None:
    # the dead node has no answer, so the session says so (exit 1) after measuring the other six lanes
    assert fleet.returncode == 1, fleet.stderr[-2000:]
    doc = json.loads((fleet.run_dir / "recommendations.json").read_text())
    assert doc["schema"] == "satbench.recommendations/v2"
    keys = {f"{node}/{lane}" for node in [*NODES, "d"] for lane in LANES}
    assert set(doc["lanes"]) == keys
    assert set(doc["nodes"]) == {*NODES, "d"} and doc["nodes"]["c"]["labels"] == {"gpu": "sim-large"}
    for key in keys:
        lane = doc["lanes"][key]
        assert (lane["node"], lane["lane"]) == tuple(key.split("/"))
        if key.startswith("d/"):
            assert lane["recommended_concurrency"] is None and lane["fingerprint"] is None
            assert lane["reason"].startswith("not measured:") and "not answering" in lane["reason"]
            continue
        assert lane["recommended_concurrency"] is not None, (key, lane["reason"])
        fp = lane["fingerprint"]
        assert fp["digest"].startswith("sha256:") and fp["runtime"]["build"]
        assert fp["workload"]["digest"] and fp["policy"]["values"]["min_requests_per_step"] == 2
        slots = NODES[lane["node"]] if lane["lane"] == "dense" else fp["settings"]["slots"]
        assert fp["settings"]["slots"] == slots
        # what the runtime cannot tell is null with the reason (an external runtime's command line)
        assert fp["settings"]["flash_attn"] is None and fp["unknown"]["settings.flash_attn"]
    manifest = json.loads((fleet.run_dir / "manifest.json").read_text())
    assert {w["lane"] for w in manifest["steps"]} == keys - {"d/dense", "d/moe"}


def test_restarting_one_lane_with_other_slots_turns_exactly_that_answer_stale(fleet: Fleet) -> None:
    def all_checked(doc: dict[str, Any]) -> bool:
        return all(lane["validity"]["state"] == "valid" for key, lane in doc["lanes"].items()
                   if not key.startswith("d/"))

    doc = _wait(fleet.rec_url, all_checked, timeout_s=10)
    assert all_checked(doc), {k: v["validity"] for k, v in doc["lanes"].items()}
    before = {k: v["status"] for k, v in doc["lanes"].items()}
    fleet.sims.restart("b", "dense", slots=2)
    restarted = time.monotonic()
    doc = _wait(fleet.rec_url, lambda d: d["lanes"]["b/dense"]["status"] == "stale", timeout_s=2 * SCRAPE_S + 3)
    took = time.monotonic() - restarted
    print(f"b/dense stale {took:.2f} s after its restart with 2 slots (scrape interval {SCRAPE_S:g} s)")
    lane = doc["lanes"]["b/dense"]
    assert lane["status"] == "stale", lane["validity"]
    # two scrapes (the exporter's next one sees the new slots), the validity tick (0.5 s), a poll, and 1 s for a
    # loaded machine's scheduling
    assert took <= 2 * SCRAPE_S + 0.5 + 1.0, took
    assert lane["last_status"] == before["b/dense"] and "settings.slots 4 -> 2" in lane["reason"]
    assert lane["validity"]["state"] == "changed"
    assert {"field": "settings.slots", "measured": 4, "live": 2} in lane["validity"]["changes"]
    for key, other in doc["lanes"].items():
        if key != "b/dense" and not key.startswith("d/"):
            assert other["status"] == before[key] and other["validity"]["state"] == "valid", key
    # the served series say the same (satbench_recommendation_valid)
    text = httpx.get(f"{fleet.rec_url}/metrics", timeout=10).text
    got = samples(text)
    assert got[("satbench_recommendation_valid", (("lane", "dense"), ("node", "b")))] == 0
    assert got[("satbench_recommendation_valid", (("lane", "dense"), ("node", "a")))] == 1
    # the v1 view refuses: three nodes serve "dense"
    resp = httpx.get(f"{fleet.rec_url}/recommendations", params={"schema": "v1"}, timeout=10)
    assert resp.status_code == 409 and "dense on a/dense, b/dense" in resp.json()["detail"]
    # capability formats render the served document; GET /capabilities serves that fragment, cut from the
    # document as served now (the validity tick may have run since the poll above: states only)
    fragment = capability_fragment(doc)
    assert fragment["nodes"]["b"]["lanes"]["dense"]["status"] == "stale"
    served = httpx.get(f"{fleet.rec_url}/capabilities", timeout=10)
    assert served.status_code == 200 and served.headers["x-satbench-validity-checked-at"].endswith("Z")
    cut = served.json()
    assert {k: (e["status"], e["valid"], e["max_useful_concurrency"]) for k, e in cut["lanes"].items()} == {
        k: (e["status"], e["valid"], e["max_useful_concurrency"]) for k, e in fragment["lanes"].items()}
    assert cut["lanes"]["b/dense"]["valid"] is False and cut["lanes"]["a/dense"]["valid"] is True
    print(f"GET /capabilities {len(served.content)} bytes for {len(cut['lanes'])} lanes, "
          f"GET /recommendations {len(json.dumps(doc))}")
    for fmt in ("litellm", "prometheus", "json"):
        done = subprocess.run(_cli("capabilities", "--url", fleet.rec_url, "--format", fmt), cwd=ROOT,
                              capture_output=True, text=True, timeout=30)
        assert done.stdout.strip(), (fmt, done.stderr)
        if fmt == "litellm":
            assert "max_parallel_requests" in done.stdout and "b/dense" not in done.stdout.split("model_list")[0]
        if fmt == "prometheus":
            assert 'satbench_recommended_concurrency{lane="dense",node="c"}' in done.stdout
