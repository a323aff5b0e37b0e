"""Two lanes on one node: lanes naming one ``node`` are served by a single simulator in router mode holding
both models, one exporter for the node scraped once per lane with its ``model``, and each lane is answered
from its own model's figures. The node is ``gpu1`` of the suite's shared session (``testkit.session``): its
``dense`` with the profile's slots and its ``moe`` as model ``big-moe`` with 2."""

from __future__ import annotations

import json
import shutil

import pytest

from testkit.session import RELAY_LANE, ROUTER_MODEL, SECOND_NODE, SharedSession

pytestmark = [
    pytest.mark.skipif(shutil.which("prometheus") is None,
                       reason="Prometheus is not installed (apt-get install prometheus)"),
    pytest.mark.timeout(300),  # the first test to ask for the shared session waits for it
]

DENSE, MOE = f"{SECOND_NODE}/{RELAY_LANE}", f"{SECOND_NODE}/moe"


def test_one_router_serves_two_lanes(shared_session: SharedSession) -> None:
    run = shared_session.run
    assert run.returncode == 0, (run.stdout[-3000:], run.stderr[-3000:])
    assert f"node {SECOND_NODE}: simulator router at" in run.stdout
    assert f"holding {RELAY_LANE} (dense), {ROUTER_MODEL} (moe)" in run.stdout
    run_dir = run.run_dir
    manifest = json.loads((run_dir / "manifest.json").read_text())
    # lanes that name a node are keyed by it (core.lanes): gpu1/dense, gpu1/moe
    dense, moe = manifest["lanes"][DENSE], manifest["lanes"][MOE]
    assert (dense["node"], dense["lane"]) == (SECOND_NODE, RELAY_LANE)
    # one router process, one exporter, two lanes, each naming its own model
    assert dense["router"] and moe["router"] and dense["pid"] == moe["pid"] and dense["url"] == moe["url"]
    assert dense["exporter_url"] == moe["exporter_url"]
    assert (dense["model_id"], moe["model_id"]) == (RELAY_LANE, ROUTER_MODEL)
    assert f"[{ROUTER_MODEL}]" in moe["preset_text"] and "sim-profile = moe" in moe["preset_text"]
    assert "parallel = 2" in moe["preset_text"]
    # each model's own /props: the moe lane's child got its 2 slots, the dense one its profile's
    assert moe["runtime_props"]["total_slots"] == 2 and dense["runtime_props"]["total_slots"] > 2
    assert manifest["clients"][MOE]["model"] == ROUTER_MODEL  # the load generator named the model
    config = (run_dir / "prometheus" / "prometheus.yml").read_text()
    assert '"__param_model"' in config or "params:" in config
    doc = json.loads((run_dir / "recommendations.json").read_text())
    assert doc["source"]["kind"] == "prometheus"
    assert doc["nodes"][SECOND_NODE] == {"labels": {}, "lanes": [DENSE, MOE]}
    for lane in (DENSE, MOE):
        answer = doc["lanes"][lane]
        assert answer["recommended_concurrency"] is not None, answer
        # the runtime's series reached the lane: its exporter target was scraped with the lane's model
        assert all(s["occupancy_ratio"] is not None for s in answer["steps"]), answer["steps"]
    # the load generator read each model's own slots (/props?model=M&autoload=false), so prefill starvation is
    # judged on every rung past them, as on a node per model
    moe_steps = doc["lanes"][MOE]["steps"]
    assert manifest["clients"][MOE]["props"]["total_slots"] == 2
    assert {s["concurrency"]: s["checks"]["prefill_starvation"]["status"] != "not_applicable" for s in moe_steps} \
        == {s["concurrency"]: s["concurrency"] > 2 for s in moe_steps}
    # each lane's occupancy is its own model's: at c=2 the moe child (2 slots) is fuller than dense (4+)
    occ = {lane: {s["concurrency"]: s["occupancy_ratio"] for s in doc["lanes"][lane]["steps"]}
           for lane in (DENSE, MOE)}
    assert occ[MOE][2] > occ[DENSE][2], occ
