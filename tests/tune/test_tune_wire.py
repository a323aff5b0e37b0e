"""Acceptance over real HTTP on the simulator: a tune picks the settings the engine's analytic truth picks.

Windows are short (a 2-4 s window, a 0.2 s warm-up) so that each test ends in well under a minute; the grids
are small and fixed. The workloads are chosen far from any decision boundary: the starving lane's whole-prompt
batch pauses decodes for about 0.6 s against the 250 ms objective while its 256-token chunk pauses them for
about 80 ms; the knee lane's ITL objective (144 ms) lies between its 4-slot step (104 ms) and its 8-slot one
(184 ms), and 4 slots gain 23 % over 2. The test profiles keep a small truth log (``truth_history``), so the
simulator's garbage collections stay short: on a loaded machine a long one is a pause every user sees.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema

from recommender.policy import Policy
from recommender.schema import SCHEMA_PATH
from satbench.tune.config import load_tune_config
from satbench.tune.grid import grid
from satbench.tune.run import run_tune
from simulator.profile import load_profile
from simulator.tuning import TuneWorkload
from tests.tune.truth import truth_choice

HERE = Path(__file__).parent
TIMING = """
[loadgen]
warmup_s = 0.2
min_window_s = 2.0
max_window_s = 4.0
min_requests = 10
drain_timeout_s = 1.0
"""


def write_config(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "tune.toml"
    path.write_text(body, encoding="utf-8")
    return path


def tune(tmp_path: Path, body: str) -> tuple[Any, dict[str, Any]]:
    setup = load_tune_config(write_config(tmp_path, body))
    result = run_tune(setup, command=["satbench", "tune"], out_dir=tmp_path / "runs", say=lambda _: None)
    return setup, result


def test_a_lane_that_starves_decodes_with_whole_prompt_prefill_is_tuned_to_the_chunked_batch(tmp_path: Path) -> None:
    body = f"""
[[lanes]]
name = "chunk"
profile = "{HERE / 'slow_prefill.toml'}"
{TIMING}
[loadgen.workload]
prompt_tokens = {{kind = "fixed", value = 16}}
output_tokens = {{kind = "uniform", low = 24, high = 40}}
prefill_probe_share = 0.2
prefill_probe_tokens = 2000

[policy]
# a 2000-token probe in a 2-4 s window moves the throughput by tens of percent: the pauses decide here, so
# the stability bound is off (the winner is the only candidate without starvation, whatever its interval)
max_throughput_ci_ratio = 10.0

[tune]
parallel = [4]
ubatch = [2048, 256]
ladder = [2]
"""
    setup, result = tune(tmp_path, body)
    lane = result.document["lanes"]["chunk"]
    assert result.exit_code == 0, lane
    assert (lane["winner"]["batch"], lane["winner"]["ubatch"]) == (256, 256), lane["candidates"]
    whole = next(c for c in lane["candidates"] if c["batch"] == 2048)
    assert whole["state"] == "measured" and 2 in whole["starved_at"], whole
    assert lane["flags"] == "satbench sim --slots 4 --batch 256 --ubatch 256 -c 8192"

    policy = Policy.model_validate(setup.session.policy)
    workload = TuneWorkload(prompt_tokens=16, output_tokens=32, output_spread=8, probe_tokens=2000, probe_every=5)
    candidates = grid(setup.tune.parallel, setup.tune.pairs(), setup.ctx_per_slot)
    truth = truth_choice(load_profile(str(HERE / "slow_prefill.toml")), workload, candidates, setup.tune.ladder,
                         policy)
    assert truth.winner is not None and truth.winner.candidate.id == lane["winner"]["id"]
    folder = Path(lane["winner"]["folder"])
    for name in ("command.txt", "manifest.json", "records.jsonl", "steps.json", "recommendations.json"):
        assert (folder / name).is_file(), name
    assert "--batch 256" in (folder / "command.txt").read_text()
    tune_dir = result.tune_dir
    assert (tune_dir / "tune.json").is_file() and (tune_dir / "pareto-chunk.svg").read_text().startswith("<svg")
    assert "np4-b256-ub256-c8192" in (tune_dir / "README.md").read_text()
    # the recommendations document carries the tuned configuration under the lane, as the schema says
    doc = json.loads((tune_dir / "recommendations.json").read_text())
    jsonschema.validate(doc, json.loads(SCHEMA_PATH.read_text(encoding="utf-8")))
    tuned = doc["lanes"]["chunk"]["tuned"]
    assert tuned["flags"] == lane["flags"] and tuned["fingerprint"] == lane["fingerprint"]
    assert tuned["tune_id"] == tune_dir.name and len(tuned["candidates"]) == 2
    assert doc["lanes"]["chunk"]["recommended_concurrency"] == lane["recommended_concurrency"]
    served = json.loads((folder / "recommendations.json").read_text())  # satbench serve <winner folder>
    assert served["lanes"]["chunk"]["tuned"] == tuned
    report = (tune_dir / "report.html").read_text()
    assert "<svg" in report and 'class="winner"' in report and lane["flags"] in report


def test_a_lane_whose_step_cost_grows_with_the_batch_gets_the_slot_count_at_its_knee(tmp_path: Path) -> None:
    body = f"""
[[lanes]]
name = "knee"
profile = "{HERE / 'knee.toml'}"
{TIMING}
[loadgen.workload]
prompt_tokens = {{kind = "fixed", value = 32}}
output_tokens = {{kind = "uniform", low = 8, high = 12}}

[policy]
slo = {{itl_p95_s = 0.144}}

[tune]
parallel = [2, 4, 8, 16]
ubatch = [512]
ladder = [2]
"""
    setup, result = tune(tmp_path, body)
    lane = result.document["lanes"]["knee"]
    assert result.exit_code == 0, lane
    assert (lane["winner"]["parallel"], lane["recommended_concurrency"]) == (4, 4), lane["candidates"]

    policy = Policy.model_validate(setup.session.policy)
    candidates = grid(setup.tune.parallel, setup.tune.pairs(), setup.ctx_per_slot)
    workload = TuneWorkload(prompt_tokens=32, output_tokens=10, output_spread=2)
    truth = truth_choice(load_profile(str(HERE / "knee.toml")), workload, candidates, setup.tune.ladder, policy)
    assert truth.winner is not None
    assert (truth.winner.candidate.id, truth.winner.recommended) == (lane["winner"]["id"], 4)

    # pruning: more slots past the knee are not walked, and the answer is the full grid's (the truth's)
    assert lane["walked"] < lane["grid"]["size"]
    pruned = {c["id"]: c for c in lane["candidates"] if c["state"] == "pruned"}
    assert set(pruned) == {"np16-b512-ub512-c4096"}
    assert pruned["np16-b512-ub512-c4096"]["dominated_by"] == "np8-b512-ub512-c2048"
