"""A fleet beyond one machine, end to end: three shard processes, one VictoriaMetrics, the central recommender.

The test stands up what a Kubernetes deployment of satbench stands up (docs/kubernetes.md), on loopback: a
simulated fleet (nodes a, b, c, one ``dense`` lane each, with 1, 2 and 1 slots: answers 1, 2 and 1 on the
ladder 1/2), one exporter per lane (the sidecars), one agent that scrapes the exporters and the load
generators with ``node`` and ``lane`` labels and remote-writes to VictoriaMetrics (vmagent's part, played by
a Prometheus), and the central recommender reading VictoriaMetrics. Then, in order:

1. three ``satbench run --shard I/3`` processes with one run id: the fleet document the central recommender
   serves for the run equals, lane by lane and figure by figure (1e-9), the analysis of the three manifests
   as one (what one process walking the fleet over the same windows is answered);
2. one process walking the same fleet answers every lane as the shards did (or ``undecided`` one doubling
   above, where the store's samples could not decide the doubling), and ``satbench compare`` of the two finds
   no regression (PASS, or INCONCLUSIVE where a loaded machine moved a tail of a few requests);
3. node b restarted with another slot count: exactly its answer turns stale, and ``--remeasure`` walks it
   alone;
4. node a slowed (the simulator's time scale doubled) and the shards walked again, shard 1 killed mid-run:
   its lane is named missing while the others are served, and ``satbench compare`` of the first fleet run
   with shard 0's names the regression of node a with its figure and exits 1.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from satbench.answer.policy import Policy
from satbench.core import promql
from satbench.core.manifest import RunManifest, read_manifest
from satbench.core.net import free_port
from satbench.exporter.promconfig import EXPORTER_JOB, LOADGEN_JOB, ScrapeTarget, render_prometheus_config
from satbench.recommender.run_analysis import analyze_run
from satbench.runtimes.processes import ProcessSet, wait_until_ready
from satbench.simulator.fleet import FleetSpec
from testkit.fleet import FleetThread
from testkit.prom import PrometheusProcess
from testkit.victoria import MISSING_REASON, VictoriaMetricsProcess, victoria_metrics_binary

pytestmark = [
    pytest.mark.slow,
    pytest.mark.timeout(420),
    pytest.mark.skipif(shutil.which("prometheus") is None, reason="Prometheus is not installed"),
    pytest.mark.skipif(victoria_metrics_binary() is None, reason=MISSING_REASON),
]

ROOT = Path(__file__).resolve().parents[2]
SLOTS = {"a": 1, "b": 2, "c": 1}
ANSWERS = {"a/dense": 1, "b/dense": 2, "c/dense": 1}
# A doubling must gain 40 %: b's second slot gains about 90 % from c=1 to 2, a's and c's one slot nothing but the
# client's turnaround between a request's end and the next one's start, which c=2 hides. Short requests on a
# loaded machine made that turnaround +10-15 % of a rung (a/dense answered 2 at six test workers), on the
# default 10 % threshold; and a 3 s window of 11 requests, read from the store's samples, states a gain of +7 %
# as [-10 %, +27 %], which straddled a 25 % threshold (c/dense undecided, so 2, on a loaded machine). 40 % lies
# midway between 1x and 1.9x on a log scale, so the truth (the slots) is far from it either way, and the windows
# are 5 s (below).
POLICY = {"min_requests_per_step": 2, "max_throughput_ci_ratio": 1.0, "min_gain_per_doubling": 0.4}
TOKEN = "fleet-acceptance-write-token"
SCRAPE_S = 1.0


@dataclass
class Stack:
    sims: FleetThread
    tmp: Path
    config: Path
    vm: VictoriaMetricsProcess
    rec_url: str
    loadgen_ports: list[int]


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "satbench.cli", *args]


def _config(urls: dict[str, dict[str, str]], exporters: dict[str, str], agent_url: str, rec_url: str) -> str:
    out = [f'prometheus = {{ url = "{agent_url}", scrape_interval_s = {SCRAPE_S} }}',
           f'recommender = {{ url = "{rec_url}" }}', "",
           # 5 s windows: the answers are judged from the store's samples, one a second, and a 3 s window's three
           # gave c=1 a throughput interval of +-33 %, so a one-slot lane's flat doubling straddled the gain
           "[loadgen]", "parallel_nodes = 3", "warmup_s = 0.5", "min_window_s = 5", "max_window_s = 5",
           "drain_timeout_s = 1", "min_requests = 2", "max_loop_lag_s = 0.5",
           # one process walking three nodes on a loaded machine (CI) left its users idle 5.3 % of a c=2 rung
           # (dispatch p99 102 ms), past the default 5 %, and the step was voided: the shards are the point here,
           # not the client's pace, as in the suite's shared session
           "max_idle_share = 0.5",
           "[loadgen.ladder]", "concurrency = [1, 2]", "extend = false",
           "drift_reference = false",  # the walk is the point: no re-measures (they would double it)
           "[policy]", *(f"{k} = {v}" for k, v in POLICY.items()), ""]
    for node in urls:
        out += ["[[nodes]]", f'name = "{node}"', "[[nodes.lanes]]", 'name = "dense"', 'runtime = "external"',
                f'url = "{urls[node]["dense"]}"', f'exporter_url = "{exporters[f"{node}/dense"]}"', ""]
    return "\n".join(out)


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    tmp = tmp_path_factory.mktemp("fleet-shards")
    processes = ProcessSet(tmp / "logs")
    spec = FleetSpec.model_validate({"nodes": [
        {"name": node, "lanes": [{"name": "dense", "profile": "dense", "slots": slots}]}
        for node, slots in SLOTS.items()]})
    with FleetThread(spec) as sims, VictoriaMetricsProcess() as vm:
        try:
            urls = sims.urls()
            exporters = {f"{node}/dense": f"http://127.0.0.1:{free_port()}" for node in urls}
            children = [processes.start(f"exporter-{key.replace('/', '-')}", _cli(
                "exporter", "--runtime-url", urls[key.split("/")[0]]["dense"], "--port", url.rsplit(":", 1)[1],
                "--gpu", "none")) for key, url in exporters.items()]
            for child, url in zip(children, exporters.values(), strict=True):
                wait_until_ready(child, f"{url}/metrics", timeout_s=30)
            ports = [free_port() for _ in range(4)]  # the three shards' load generators, and one more
            targets = [ScrapeTarget(EXPORTER_JOB, url.removeprefix("http://"),
                                    {"node": key.split("/")[0], "lane": "dense"}) for key, url in exporters.items()]
            targets += [ScrapeTarget(LOADGEN_JOB, f"127.0.0.1:{port}") for port in ports]
            agent_config = render_prometheus_config(targets, [], SCRAPE_S, remote_write=[vm.write_url])
            with PrometheusProcess(agent_config) as agent:
                rec_port = free_port()
                (tmp / "policy.json").write_text(json.dumps(POLICY))
                rec = processes.start("recommender", _cli(
                    "recommender", "--prometheus-url", vm.url, "--port", str(rec_port), "--runs-dir",
                    str(tmp / "central"), "--validity-interval", "0.5", "--scrape-interval", str(SCRAPE_S),
                    "--refresh-interval", "2", "--policy", str(tmp / "policy.json")),
                    env={**os.environ, "SATBENCH_RECOMMENDER_WRITE_TOKEN": TOKEN})
                rec_url = f"http://127.0.0.1:{rec_port}"
                wait_until_ready(rec, f"{rec_url}/healthz", timeout_s=30)
                config = tmp / "fleet.toml"
                config.write_text(_config(urls, exporters, agent.url, rec_url))
                yield Stack(sims, tmp, config, vm, rec_url, ports)
        finally:
            processes.stop_all()


def _start(stack: Stack, port: int, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(_cli("run", "--config", str(stack.config), "--out", str(stack.tmp / "runs"),
                                 "--set", f"loadgen.metrics_port={port}", *args),
                            cwd=ROOT, env={**os.environ, "SATBENCH_RECOMMENDER_WRITE_TOKEN": TOKEN},
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _finish(proc: subprocess.Popen[str], timeout_s: float = 150) -> tuple[int, str]:
    out, _ = proc.communicate(timeout=timeout_s)
    return proc.returncode, out


def _get(url: str) -> dict[str, Any]:
    resp = httpx.get(url, timeout=30)
    resp.raise_for_status()
    return dict(resp.json())


def _shards(stack: Stack, run_id: str) -> list[tuple[int, str]]:
    procs = [_start(stack, stack.loadgen_ports[i], "--shard", f"{i}/3", "--run-id", run_id) for i in range(3)]
    return [_finish(p) for p in procs]


def _published(stack: Stack, run_id: str) -> Callable[[VictoriaMetricsProcess], bool]:
    """Whether the store holds the load generators' published figures of every step window the run's folders
    list (a shard's own folder, ``RUN.shard-I-of-N``, or the run's), all of them: a remote write may carry one
    scrape's samples in several requests, so a step with some of its figures in the store is not yet whole (a
    served step lacked a dozen figures a later analysis read, on a loaded machine); the count of each step's
    series is taken as whole once two looks in a row find it unchanged."""
    folders = [p for p in (stack.tmp / "runs").iterdir()
               if (p.name == run_id or p.name.startswith(f"{run_id}.shard-")) and (p / "manifest.json").exists()]
    want = {(w.lane, w.concurrency) for f in folders for w in read_manifest(f / "manifest.json").steps}
    query = (f"count by (node, lane, concurrency) "
             f"(last_over_time({promql.selector('loadgen_step_figure', run_id=run_id)}[15m]))")

    last: dict[tuple[str, int], float] = {}

    def check(vm: VictoriaMetricsProcess) -> bool:
        have = {("/".join(filter(None, (r["metric"].get("node"), r["metric"]["lane"]))),
                 int(r["metric"]["concurrency"])): float(r["value"][1]) for r in vm.query(query)}
        whole = want <= have.keys() and have == last
        last.clear()
        last.update(have)
        return whole
    return check


def _settled(stack: Stack, run_id: str) -> dict[str, Any]:
    """The fleet run as the central recommender answers it once every sample is in VictoriaMetrics and its
    refresh tick (2 s) has analysed the shards again, twice. Every sample: the figures each shard published
    as its steps ended reach the store by the agent's scrape and remote write, seconds later on a loaded
    machine; a document analysed before they arrived took a step's figures from the histograms (one run: the
    served b/dense c=2 lacked the published figures a later analysis of the same store read). A shard killed
    before its last step was scraped never publishes it: after 30 s the answer is taken as it stands."""
    with contextlib.suppress(TimeoutError):
        stack.vm.wait_holds(_published(stack, run_id), timeout_s=30, what=f"the published figures of {run_id}")
    stack.vm.flush()
    seen: list[str] = []
    deadline = time.monotonic() + 30
    while len(seen) < 3 and time.monotonic() < deadline:  # the answer of now, and two refreshes after it
        doc = dict(_get(f"{stack.rec_url}/runs/{run_id}")["recommendations"])
        if doc["generated_at"] not in seen:
            seen.append(doc["generated_at"])
        time.sleep(0.2)
    return doc


def _figures(value: Any, path: str = "") -> dict[str, float]:
    if isinstance(value, dict):
        return {k: v for key, item in value.items() for k, v in _figures(item, f"{path}.{key}").items()}
    if isinstance(value, list):
        return {k: v for i, item in enumerate(value) for k, v in _figures(item, f"{path}[{i}]").items()}
    if isinstance(value, int | float) and not isinstance(value, bool):
        return {path: float(value)}
    return {}


def _union(manifests: list[RunManifest]) -> RunManifest:
    first = manifests[0]
    return first.model_copy(update={"steps": tuple(w for m in manifests for w in m.steps),
                                    "lanes": {k: v for m in manifests for k, v in m.lanes.items()}})


def test_fleet_shards_remeasure_and_compare(stack: Stack) -> None:
    # 1. three shards, one run id: one fleet document, equal to one analysis of the same windows
    results = _shards(stack, "fleet-r1")
    for rc, out in results:
        assert rc == 0, out[-3000:]
    assert any("shard 0/3 of run fleet-r1: 1 of 3 nodes, 1 of 3 lanes (a)" in out for _, out in results)
    fleet = _settled(stack, "fleet-r1")
    assert {k: v["recommended_concurrency"] for k, v in fleet["lanes"].items()} == ANSWERS, {
        k: (v["recommended_concurrency"], v["status"], v["reason"]) for k, v in fleet["lanes"].items()}
    assert fleet["lanes"]["a/dense"]["run_id"] == "fleet-r1"
    folders = sorted(p.name for p in (stack.tmp / "runs").iterdir())
    assert folders == [f"fleet-r1.shard-{i}-of-3" for i in range(3)]
    manifests = [read_manifest(stack.tmp / "runs" / name / "manifest.json") for name in folders]
    one = analyze_run(_union(manifests), prometheus_url=stack.vm.url, run_dir=None,
                      policy=Policy.model_validate(POLICY))
    for key, lane in one["lanes"].items():
        served = fleet["lanes"][key]
        for field in ("recommended_concurrency", "saturation_concurrency", "status", "binding_constraint"):
            assert served[field] == lane[field], (key, field)
        ours, theirs = _figures(lane["steps"]), _figures(served["steps"])
        assert ours.keys() == theirs.keys(), key
        for name, value in ours.items():
            assert theirs[name] == pytest.approx(value, rel=1e-9, abs=1e-12), (key, name)
    (stack.tmp / "fleet-r1.json").write_text(json.dumps(fleet))

    # 2. one process walking the same fleet: the same answers, and no significant change. It walks the nodes one
    # after another (parallel_nodes 1), each with the client to itself as each shard had: walking the three at
    # once, its own first reads lagged under the suite's load (b/dense c=2 TTFT p95 49 -> 230 ms, throughput -18 %)
    rc, out = _finish(_start(stack, stack.loadgen_ports[3], "--set", "loadgen.parallel_nodes=1"))
    assert rc == 0, out[-3000:]
    (single,) = [p for p in (stack.tmp / "runs").iterdir() if ".shard-" not in p.name]
    doc = _settled(stack, single.name)
    # Each answer is the shards', or, where the store's samples could not decide the doubling above it,
    # "undecided" on exactly that doubling (the answer says it may be one doubling lower). Judged from samples a
    # second apart on a loaded machine, a clean-clone run read a/dense's one-slot c=1 rung as 190 tok/s in
    # [73, 307] over 5 s (c=2: [220, 228]), a gain of +18 % in [-36 %, +119 %] against the 40 % a doubling must
    # buy, where the records, exact, had ended the rung as decided
    for key, want in ANSWERS.items():
        lane = doc["lanes"][key]
        got = (lane["recommended_concurrency"], lane["status"])
        doubling = lane["undecided"] or {}
        assert got[0] == want or (got == (2 * want, "undecided") and (doubling.get("smaller"), doubling.get(
            "larger")) == (want, 2 * want)), (key, got, lane["reason"])
    (stack.tmp / "single.json").write_text(json.dumps(doc))
    # the two walks ran at different moments of a shared machine, where the simulator's ~12 ms TTFT tails move
    # by tens of percent with the load (one run: +45 % on an unchanged node): a lane measured wrongly by one
    # way of walking would be off by its whole figure, so the regression threshold here is 75 %; and TTFT by
    # 150 ms as well: the one process walking three lanes on a loaded two-core machine delayed its own first
    # reads, 38.8 -> 125 ms at b/dense c=2 (11 of 28 past the shards' p95), with every answer the same
    same = subprocess.run(_cli("compare", str(stack.tmp / "fleet-r1.json"), str(stack.tmp / "single.json"),
                               "--threshold", "75%", "--floor", "ttft=75%,150ms"),
                          cwd=ROOT, capture_output=True, text=True, timeout=60)
    print(same.stdout)
    # the truth is "unchanged": never FAIL. A ~12 ms tail of 11 requests moved +97 % on a loaded machine cannot be
    # shown either way, which is INCONCLUSIVE (exit 3), not a regression
    assert same.returncode in (0, 3) and same.stdout.strip().endswith("no regression beyond its floor"), same.stdout

    # 3. node b runs other slots: exactly its answer is stale, and --remeasure walks it alone
    def states() -> dict[str, str]:
        return {k: v["validity"]["state"] for k, v in _get(f"{stack.rec_url}/recommendations")["lanes"].items()}

    deadline = time.monotonic() + 15
    while set(states().values()) != {"valid"} and time.monotonic() < deadline:
        time.sleep(0.2)
    assert states() == dict.fromkeys(ANSWERS, "valid")
    stack.sims.restart("b", "dense", slots=1)
    deadline = time.monotonic() + 15
    while states()["b/dense"] != "changed" and time.monotonic() < deadline:
        time.sleep(0.2)
    assert states() == {"a/dense": "valid", "b/dense": "changed", "c/dense": "valid"}
    rc, out = _finish(_start(stack, stack.loadgen_ports[3], "--remeasure", stack.rec_url))
    assert rc == 0, out[-3000:]
    assert "re-measuring 1 of 3 lanes" in out and "b/dense: stale: settings.slots 2 -> 1" in out, out[:2000]
    remeasured = [p for p in (stack.tmp / "runs").iterdir() if ".shard-" not in p.name and p != single]
    (folder,) = remeasured
    assert {w.lane for w in read_manifest(folder / "manifest.json").steps} == {"b/dense"}
    served = _get(f"{stack.rec_url}/recommendations")["lanes"]
    assert served["b/dense"]["run_id"] == folder.name and served["b/dense"]["recommended_concurrency"] == 1

    # 4. node a slowed, the shards again, shard 1 killed mid-run
    stack.sims.restart("a", "dense", time_scale=2.0)
    procs = [_start(stack, stack.loadgen_ports[i], "--shard", f"{i}/3", "--run-id", "fleet-r3") for i in range(3)]
    killed = stack.tmp / "runs" / "fleet-r3.shard-1-of-3" / "manifest.json"
    deadline = time.monotonic() + 60
    while not killed.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    time.sleep(1.0)
    procs[1].send_signal(signal.SIGTERM)
    for i, proc in enumerate(procs):
        rc, out = _finish(proc)
        assert (rc != 0) if i == 1 else (rc == 0), (i, out[-3000:])
    doc = _get(f"{stack.rec_url}/recommendations")
    assert doc["shards"]["fleet-r3"]["missing"] == {"1": ["b/dense"]}
    assert any("fleet run fleet-r3: shard 1/3 has not reported (b/dense)" in n for n in doc["notes"])
    assert doc["lanes"]["a/dense"]["run_id"] == "fleet-r3" and doc["lanes"]["c/dense"]["run_id"] == "fleet-r3"
    assert doc["lanes"]["b/dense"]["run_id"] == folder.name  # the last answer that measured it stands
    (stack.tmp / "fleet-r3.json").write_text(json.dumps(_settled(stack, "fleet-r3")))
    slower = subprocess.run(_cli("compare", str(stack.tmp / "fleet-r1.json"), str(stack.tmp / "fleet-r3.json"),
                                 "--lane", "a/dense", "--lane", "c/dense"),
                            cwd=ROOT, capture_output=True, text=True, timeout=60)
    print(slower.stdout)
    assert slower.returncode == 1, slower.stdout
    regressions = [line.strip() for line in slower.stdout.split("regression (", 1)[1].splitlines()[1:]]
    # node c is unchanged: none of its throughput or end-to-end figures regress. (Its TTFT tail, ~12 ms on the
    # simulator, may: on a loaded machine it once read 11.7 -> 16.9 ms, a real and significant change of the
    # machine, not a confusion of the lanes)
    assert regressions and not any(line.startswith(("c/dense: output tok/s", "c/dense: e2e"))
                                   for line in regressions), slower.stdout
    assert any(line.strip().startswith("a/dense: output tok/s at c=1 ") for line in regressions), slower.stdout
