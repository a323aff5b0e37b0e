"""End to end: ``satbench run`` with real subprocesses and a real Prometheus leaves complete evidence,
answers per lane, and leaves no child behind, also on Ctrl-C and on failure.

The finished run is the suite's shared session (``testkit.session.SHARED_LANES``: a one-slot relay lane with a
planted key, ``moe`` as its profile is, and router node ``gpu1`` serving ``dense`` again and ``moe``); Ctrl-C
and the failed starts run sessions of their own."""

from __future__ import annotations

import html
import json
import shutil
import signal
import time
from pathlib import Path

import pytest

from satbench.core.figures import StepFigures, client_values, disagreements
from satbench.core.records import read_records
from satbench.report.data import load_run
from satbench.report.render import format_recommendation, lane_table
from testkit.session import (
    PLANTED_KEY_ENV,
    PLANTED_SECRET,
    RELAY_LANE,
    SECOND_NODE,
    SharedSession,
    start_session,
    survivors,
)

pytestmark = [
    pytest.mark.skipif(shutil.which("prometheus") is None,
                       reason="Prometheus is not installed (apt-get install prometheus)"),
    pytest.mark.slow,
    pytest.mark.timeout(300),  # the first test to ask for the shared session waits for it
]
KEYS = (RELAY_LANE, "moe", f"{SECOND_NODE}/{RELAY_LANE}", f"{SECOND_NODE}/moe")  # the shared session's lanes

EVIDENCE = (
    "manifest.json",
    "records.jsonl",
    "steps.json",
    "recommendations.json",
    "report.html",
    "README.md",
)


def test_session_succeeds_and_prints_an_answer_per_lane(shared_session: SharedSession) -> None:
    run = shared_session.run
    assert run.returncode == 0, run.stderr[-2000:]
    out = run.stdout
    assert f"walking the ladder 1/2 on {', '.join(KEYS)}" in out
    for lane in KEYS:
        assert f"\nlane {lane}\n" in out
        assert any(
            line.strip().startswith(f"{lane}:") for line in out.split("recommendations:")[-1].splitlines()
        )
    assert "verdicts" in out and "pause p99" in out and "Jain" in out


def test_evidence_folder_is_complete(shared_session: SharedSession) -> None:
    run = shared_session.run
    run_dir = run.run_dir
    for name in EVIDENCE:
        assert (run_dir / name).stat().st_size > 0, name
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["run_id"] == run_dir.name
    assert "loadgen.max_loop_lag_s=0.5" in manifest["command"] and "run" in manifest["command"]
    assert manifest["versions"]["satbench"] and "git_commit" in manifest["versions"]
    hw = manifest["hardware"]
    assert hw["cpu_cores_logical"] >= 1 and hw["ram_bytes"] > 0 and hw["cpu_model"]
    assert hw["gpu"] is not None or hw["gpu_reason"]
    for lane in KEYS:
        info = manifest["lanes"][lane]
        assert info["runtime"] == "simulator" and info["runtime_props"]["build_info"]
    # the settings that ran: the relay lane asked for 1 slot and got it; moe and gpu1's dense kept their
    # profiles' (config: null); gpu1's moe asked its router for 2 (tests/session/test_router_node.py)
    settings = {(lane.get("node"), lane["name"]): lane["parallel"] for lane in manifest["config"]["lanes"]}
    assert settings == {(None, RELAY_LANE): 1, (None, "moe"): None, (SECOND_NODE, RELAY_LANE): None,
                        (SECOND_NODE, "moe"): 2}
    relay, moe = manifest["lanes"][RELAY_LANE], manifest["lanes"]["moe"]
    assert relay["runtime_props"]["total_slots"] == 1 and moe["runtime_props"]["total_slots"] > 2
    assert "--slots" in relay["command"] and "--slots" not in moe["command"]
    assert all(manifest["network"][lane]["rtt_median_s"] > 0 for lane in KEYS)
    assert manifest["prometheus"]["started"] and Path(manifest["prometheus"]["config_path"]).exists()
    windows = [(s["lane"], s["concurrency"]) for s in manifest["steps"] if not s["drift_reference"]]
    assert windows == [(lane, c) for lane in KEYS for c in (1, 2)]
    again = [(s["lane"], s["concurrency"]) for s in manifest["steps"] if s["drift_reference"]]
    # each lane's lowest rung re-measured after its ladder, then the rung its walk stopped at where that is c=2
    # (core.drift.knee_rung): a lane's re-measures follow its ladder, the lowest first
    assert [a for a in again if a[1] == 1] == [(lane, 1) for lane in KEYS]
    assert all(a[1] in (1, 2) for a in again) and [lane for lane, _ in again] == sorted(
        (lane for lane, _ in again), key=KEYS.index)
    records = list(read_records(run_dir / "records.jsonl"))
    assert {r.lane for r in records} == set(KEYS) and all(r.run_id == run_dir.name for r in records)
    recs = json.loads((run_dir / "recommendations.json").read_text())
    assert recs["schema"] == "satbench.recommendations/v2" and set(recs["lanes"]) == set(KEYS)
    assert recs["source"]["kind"] == "prometheus"
    assert "prometheus: not every target" not in run.stdout  # the readiness checks did not time out
    assert "not scraped after its answer" not in run.stdout
    steps = [s for lane in recs["lanes"].values() for s in lane["steps"]]
    assert steps and all(s["tpot_s"]["p50"] is not None for s in steps)  # TPOT on the Prometheus path too
    # the records' throughput interval runs with these windows (3 s) wherever a step counted its requests
    exact = json.loads((run_dir / "steps.json").read_text())
    assert exact and all(s["throughput_ci_tok_s"] is not None for s in exact if s["requests"] >= 2)
    assert "## Recommendations" in (run_dir / "README.md").read_text()


def test_the_workload_is_stated_and_no_planted_secret_is_written(shared_session: SharedSession) -> None:
    run = shared_session.run
    run_dir = run.run_dir
    manifest = json.loads((run_dir / "manifest.json").read_text())
    work = manifest["config"]["loadgen"]["workload"]
    assert work["prompt_tokens"]["kind"] and work["output_tokens"]["kind"] == "uniform"
    assert isinstance(work["prefill_probe_tokens"], int) and isinstance(work["seed"], int)
    keyed = next(lane for lane in manifest["config"]["lanes"] if lane.get("api_key_env"))
    assert keyed["api_key_env"] == PLANTED_KEY_ENV and keyed["server_args"] == ["--api-key", "***"]
    for name in ("README.md", "report.html"):
        text = (run_dir / name).read_text()
        assert "prompt tokens: " in text and "output tokens: 48..80 (uniform)" in text, name
    planted = PLANTED_SECRET.encode()
    files = [p for p in run_dir.rglob("*") if p.is_file()]
    assert len(files) > 10  # logs, Prometheus storage, records, manifest, report...
    holding = [str(p.relative_to(run_dir)) for p in files if planted in p.read_bytes()]
    assert holding == [], f"the planted secret is written in {holding}"
    assert PLANTED_SECRET not in run.stdout + run.stderr
    # the key reached the runtime through the relay: its requests were served, not refused. The session drains
    # for 1 s, so a request still streaming then is cancelled by design (on a loaded host, two at c=2): that is
    # the drain's cut, not a refusal, and is not counted against the key
    records = [r for r in read_records(run_dir / "records.jsonl") if r.lane == RELAY_LANE]
    failed = [(r.concurrency, r.phase, r.outcome, r.error) for r in records
              if not r.ok and not (r.phase == "drain" and r.error == "cancelled at drain")]
    assert records and len(failed) <= 1 and sum(r.ok for r in records) >= len(records) / 2, failed


def test_every_client_figure_of_the_prometheus_path_agrees_with_the_records(shared_session: SharedSession) -> None:
    run_dir = shared_session.run.run_dir
    recs = json.loads((run_dir / "recommendations.json").read_text())
    assert recs["source"]["kind"] == "prometheus"
    records = {(s["lane"], s["concurrency"]): StepFigures.from_dict(s)  # a rung's re-measure (core.drift) aside
               for s in json.loads((run_dir / "steps.json").read_text()) if not s.get("drift_reference")}
    compared = 0
    for lane, answer in recs["lanes"].items():
        for raw in answer["steps"]:
            prom = StepFigures.from_dict({"lane": lane, **raw})
            exact = records[(lane, raw["concurrency"])]
            assert disagreements(prom, exact) == {}, (lane, raw["concurrency"])
            compared += len(client_values(exact))
    assert compared >= 2 * len(KEYS) * 20  # every step, every quantile, count, rate and maximum


def test_report_readme_and_document_show_the_same_numbers(shared_session: SharedSession) -> None:
    run_dir = shared_session.run.run_dir
    recs = json.loads((run_dir / "recommendations.json").read_text())
    report = load_run(run_dir)
    readme, page = (run_dir / "README.md").read_text(), (run_dir / "report.html").read_text()
    assert report.lanes
    for lane in report.lanes:
        doc = {s["concurrency"]: StepFigures.from_dict({"lane": lane.lane, **s})
               for s in recs["lanes"][lane.lane]["steps"]}
        assert [s.concurrency for s in lane.steps] == sorted(doc)
        for step in lane.steps:
            assert client_values(step) == client_values(doc[step.concurrency])  # the document's own numbers
        _, rows = lane_table(lane)
        for row in rows:
            assert "| " + " | ".join(row) + " |" in readme
            assert all(html.escape(cell) in page for cell in row)
        line = format_recommendation(lane)
        assert line in readme and html.escape(line) in page


def test_every_answer_states_its_energy(shared_session: SharedSession) -> None:
    """The simulated GPUs' draw (``simulator.power``) reaches the answers through the exporter and Prometheus:
    every rung of a lane with a modelled GPU draws between its profile's idle and limit, what the answer states is
    its rung's, and doubling the users of the eight-slot MoE lane costs fewer joules per token (its draw grows
    less than its throughput: the weights stream once per step whatever the batch). The router node has no
    modelled GPU: its answers say there was no reading, and give no figure."""
    from satbench.simulator.profile import load_profile

    recs = json.loads((shared_session.run.run_dir / "recommendations.json").read_text())
    for key, profile in ((RELAY_LANE, "dense"), ("moe", "moe")):
        power, lane = load_profile(profile).power, recs["lanes"][key]
        steps = {s["concurrency"]: s for s in lane["steps"] if s.get("rate_rps") is None}
        for c, s in steps.items():
            e = s["energy"]
            assert (e["scope"], e["gpu_source"]) == ("gpu", "counter"), (key, c, e)
            assert power.idle_w <= e["gpu_watts"] <= power.max_w, (key, c, e)
            assert e["joules_per_token"] == pytest.approx(e["gpu_watts"] / s["throughput_tok_s"], rel=1e-9)
        at = lane["energy"]
        rung = steps[lane["recommended_concurrency"]]
        assert (at["scope"], at["source"], at["simulated"]) == ("gpu", "counter", True)
        assert at["joules_per_token"] == rung["energy"]["joules_per_token"] and at["reason"] is None
        assert at["tok_s_per_kw"] == pytest.approx(rung["throughput_tok_s"] / (rung["energy"]["gpu_watts"] / 1000))
    moe = {s["concurrency"]: s["energy"]["joules_per_token"] for s in recs["lanes"]["moe"]["steps"]}
    assert moe[2] < moe[1]
    for key in (f"{SECOND_NODE}/{RELAY_LANE}", f"{SECOND_NODE}/moe"):
        said = recs["lanes"][key].get("energy")
        assert said is None or (said["joules_per_token"] is None and "no energy reading" in said["reason"]), said


def _shape_differences(sample: object, real: object, path: str = "") -> list[str]:
    """Where the sample's keys differ from the real document's (a value null on one side is not compared)."""
    if isinstance(sample, dict) and isinstance(real, dict):
        if sample and real and all(str(k).isdigit() for k in (*sample, *real)):  # a map by rung: rungs vary
            return _shape_differences(next(iter(sample.values())), next(iter(real.values())), f"{path}.<c>")
        out = [f"{path}.{k}: only in the sample" for k in sorted(set(sample) - set(real))]
        out += [f"{path}.{k}: missing from the sample" for k in sorted(set(real) - set(sample))]
        for key in sorted(set(sample) & set(real)):
            out += _shape_differences(sample[key], real[key], f"{path}.{key}")
        return out
    if isinstance(sample, list) and isinstance(real, list) and sample and real:
        return _shape_differences(sample[0], real[0], f"{path}[0]")
    return []


def test_design_md_sample_is_a_real_document(shared_session: SharedSession) -> None:
    """The sample document DESIGN.md points to (docs/recommendations-sample.json) validates against the committed
    schema and has the keys of this session's real document; SATBENCH_WRITE_DESIGN_SAMPLE=1 rewrites it from
    this run."""
    import os

    import jsonschema

    from satbench.recommender.schema import (
        SCHEMA_PATH,
        design_sample,
        key_shape,
        read_design_sample,
        write_design_sample,
    )

    run_dir = shared_session.run.run_dir
    real = json.loads((run_dir / "recommendations.json").read_text())
    if os.environ.get("SATBENCH_WRITE_DESIGN_SAMPLE"):
        write_design_sample(real)
    sample = read_design_sample()
    jsonschema.validate(sample, json.loads(SCHEMA_PATH.read_text()))
    assert _shape_differences(key_shape(sample), key_shape(design_sample(real))) == [], (
        "the sample document is behind the real one: python -m satbench.recommender.schema --design-sample RUN_DIR")


def test_no_child_survives_the_session(shared_session: SharedSession) -> None:
    run = shared_session.run
    assert len(run.descendants) >= 8  # 3 simulators (one a router), 3 exporters (one relaying), recommender,
    # Prometheus
    assert survivors(run.descendants) == []


def test_ctrl_c_stops_every_child(tmp_path: Path) -> None:
    proc, watcher = start_session(tmp_path)
    assert proc.stdout is not None
    deadline = time.monotonic() + 60
    for line in proc.stdout:
        if "walking the ladder" in line or time.monotonic() > deadline:
            break
    time.sleep(1.0)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=30)
    pids = watcher.stop()
    assert proc.returncode == 130, err[-3000:]
    assert len(pids) >= 6
    assert survivors(pids) == []


def test_missing_prometheus_is_a_one_line_reason(tmp_path: Path) -> None:
    proc, watcher = start_session(tmp_path, "--set", "prometheus.binary='no-such-prometheus'")
    _, err = proc.communicate(timeout=60)
    watcher.stop()
    assert proc.returncode == 1
    assert "apt-get install prometheus" in err and len(err.strip().splitlines()) == 1


def test_runtime_not_answering_stops_what_was_started(tmp_path: Path) -> None:
    from testkit.net import free_port

    config = tmp_path / "session.toml"
    config.write_text(
        '[[lanes]]\nname = "dense"\nruntime = "simulator"\nprofile = "dense"\n\n'
        f'[[lanes]]\nname = "gone"\nruntime = "external"\nurl = "http://127.0.0.1:{free_port()}"\n'
    )
    proc, watcher = start_session(tmp_path, "--config", str(config))
    _, err = proc.communicate(timeout=60)
    pids = watcher.stop()
    assert proc.returncode == 1
    assert "lane gone" in err and "not answering" in err and len(err.strip().splitlines()) == 1
    assert pids and survivors(pids) == []
    assert [p.name for p in tmp_path.iterdir() if p.is_dir()] == [], "a failed start leaves no run folder"
