"""Two lanes on one node: ``satbench run`` with a dense and a MoE lane naming one ``node`` starts a single
simulator in router mode holding both models, one exporter for the node scraped once per lane with its
``model``, and answers each lane from its own model's figures."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from testkit.session import run_session, survivors

pytestmark = [
    pytest.mark.skipif(shutil.which("prometheus") is None,
                       reason="Prometheus is not installed (apt-get install prometheus)"),
    pytest.mark.slow,
]

LANES = ('lanes=[{name = "dense", profile = "dense", node = "gpu0"}, '
         '{name = "moe", profile = "moe", node = "gpu0", model = "big-moe", parallel = 2}]')


def test_one_router_serves_two_lanes(tmp_path: Path) -> None:
    run = run_session(tmp_path, "--set", LANES)
    assert run.returncode == 0, (run.stdout[-3000:], run.stderr[-3000:])
    assert not survivors(run.descendants)
    assert "node gpu0: simulator router at" in run.stdout and "holding dense (dense), big-moe (moe)" in run.stdout
    run_dir = run.run_dir
    manifest = json.loads((run_dir / "manifest.json").read_text())
    # lanes that name a node are keyed by it (core.lanes): gpu0/dense, gpu0/moe
    dense, moe = manifest["lanes"]["gpu0/dense"], manifest["lanes"]["gpu0/moe"]
    assert (dense["node"], dense["lane"]) == ("gpu0", "dense")
    # one router process, one exporter, two lanes, each naming its own model
    assert dense["router"] and moe["router"] and dense["pid"] == moe["pid"] and dense["url"] == moe["url"]
    assert dense["exporter_url"] == moe["exporter_url"]
    assert (dense["model_id"], moe["model_id"]) == ("dense", "big-moe")
    assert "[big-moe]" in moe["preset_text"] and "sim-profile = moe" in moe["preset_text"]
    assert "parallel = 2" in moe["preset_text"]
    # each model's own /props: the moe lane's child got its 2 slots, the dense one its profile's
    assert moe["runtime_props"]["total_slots"] == 2 and dense["runtime_props"]["total_slots"] > 2
    assert manifest["clients"]["gpu0/moe"]["model"] == "big-moe"  # the load generator named the model
    config = (run_dir / "prometheus" / "prometheus.yml").read_text()
    assert '"__param_model"' in config or "params:" in config
    doc = json.loads((run_dir / "recommendations.json").read_text())
    assert doc["source"]["kind"] == "prometheus"
    assert doc["nodes"] == {"gpu0": {"labels": {}, "lanes": ["gpu0/dense", "gpu0/moe"]}}
    for lane in ("gpu0/dense", "gpu0/moe"):
        answer = doc["lanes"][lane]
        assert answer["recommended_concurrency"] is not None, answer
        # the runtime's series reached the lane: its exporter target was scraped with the lane's model
        assert all(s["occupancy_ratio"] is not None for s in answer["steps"]), answer["steps"]
    # the load generator read each model's own slots (/props?model=M&autoload=false), so prefill starvation is
    # judged on every rung past them, as on a node per model
    moe_steps = doc["lanes"]["gpu0/moe"]["steps"]
    assert manifest["clients"]["gpu0/moe"]["props"]["total_slots"] == 2
    assert {s["concurrency"]: s["checks"]["prefill_starvation"]["status"] != "not_applicable" for s in moe_steps} \
        == {s["concurrency"]: s["concurrency"] > 2 for s in moe_steps}
    # each lane's occupancy is its own model's: at c=2 the moe child (2 slots) is fuller than dense (4+)
    occ = {lane: {s["concurrency"]: s["occupancy_ratio"] for s in doc["lanes"][f"gpu0/{lane}"]["steps"]}
           for lane in ("dense", "moe")}
    assert occ["moe"][2] > occ["dense"][2], occ
