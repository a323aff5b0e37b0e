"""Run folders of a known deployment, for ``satbench compare``'s truth: the same deployment measured twice, or
made slower in a known way, written as a session would (manifest, records, recommendations document).

The lane is ``testkit.synthetic``'s slot-batched server (8 slots, FIFO admission, lognormal jitter on each
prefill and each token gap), walked over the ladder 1..16 with 20 s windows: its answer rung, c=8, holds
about 440 requests. What changes between runs is set here, so the truth is the scenario's:

- ``seed``: the run's own noise (request jitter, and the machine's speed: each run's step time is scaled by
  a lognormal of ``run_speed_sd``, the spread two measurements of one node show);
- ``prefill_scale``: every prefill takes this much longer (1.5: TTFT, and its p95 at every rung within the
  slots, 1.5 times the deployment's; the decode is unchanged);
- ``decode_scale``: every token gap this much longer (throughput, e2e and the pause excess move with it);
- ``prompt_tokens``, ``policy``: another workload (its digest differs) or another policy;
- ``build``: the runtime build in the lane's fingerprint (what the verdict heads with).

The document is built by the recommender's own offline path (``compute_step_figures``,
``document_from_figures``), the fingerprint completed with the workload and the policy as a session's is.
"""

from __future__ import annotations

import dataclasses
import json
import math
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from satbench.answer.document import read_document
from satbench.answer.policy import Policy
from satbench.compare.judge import Run, RungTails
from satbench.core.figures import TAIL_SIZE, Tail
from satbench.core.manifest import RunManifest
from satbench.core.records import RequestRecord, write_records
from satbench.core.step_figures import compute_step_figures
from satbench.recommender.run_analysis import document_from_figures
from testkit.synthetic import SyntheticLane, simulate_run

__all__ = ["LADDER", "LANE", "Simulated", "simulate", "write_run"]

LANE = "n1/dense"
LADDER = (1, 2, 4, 8, 16)


@dataclass(frozen=True, slots=True)
class Simulated:
    """One run of the deployment: what a session writes, and the compare side it makes (``run``: the
    document, and the full tails a run folder's records give)."""

    manifest: RunManifest
    records: list[RequestRecord]
    document: dict[str, Any]
    run: Run


def simulate(*, seed: int, prefill_scale: float = 1.0, decode_scale: float = 1.0, prompt_tokens: int = 64,
             policy: Policy | None = None,
             build: str = "b5000", window_s: float = 20.0, jitter: float = 0.25, run_speed_sd: float = 0.01,
             ladder: tuple[int, ...] = LADDER) -> Simulated:
    """One run of the deployment (module docstring). Each rung's figures are computed once with every value in
    its tails; the document's keep the largest ``TAIL_SIZE``, as the load generator's do."""
    policy = policy or Policy()
    speed = math.exp(random.Random(f"speed:{seed}").gauss(0.0, run_speed_sd))
    lane = SyntheticLane(LANE, slots=8, prefill_s=0.05 * prefill_scale * speed, itl_s=0.01 * decode_scale * speed,
                         output_tokens=24, prompt_tokens=prompt_tokens, jitter=jitter)
    run_id = f"20261205T000000Z-{seed:06d}"
    manifest, records = simulate_run([lane], ladder, t0=1.7e9, window_s=window_s, warmup_s=2.0, seed=seed,
                                     run_id=run_id)
    fingerprint = {"digest": f"node-{build}", "runtime": {"build": build}, "model": {"path": "model.gguf"},
                   "settings": {"slots": 8}, "hardware": {"gpu": "GPU-1"}, "unknown": {}}
    workload = {"prompt_tokens": prompt_tokens, "output_tokens": 24}
    manifest = manifest.model_copy(update={
        "config": {"loadgen": {"workload": workload}},
        "lanes": {LANE: {**manifest.lanes[LANE], "fingerprint": fingerprint}}})
    full = [compute_step_figures(records, window, tail_size=None) for window in manifest.steps]
    tails = {LANE: {f.concurrency: RungTails(f.ttft_tail, f.latency_tail, f.pause_excess_tail) for f in full}}
    kept = [dataclasses.replace(f, ttft_tail=_cut(f.ttft_tail), latency_tail=_cut(f.latency_tail),
                                pause_excess_tail=_cut(f.pause_excess_tail)) for f in full]
    document = document_from_figures(manifest, {LANE: kept}, policy=policy, source={"kind": "records"},
                                     generated_at=1.7e9)
    return Simulated(manifest, records, document, Run(read_document(document), tails))


def _cut(tail: Tail) -> Tail:
    return Tail(tail.n, tail.top[:TAIL_SIZE])


def write_run(folder: Path, run: Simulated) -> Path:
    """The run folder a session would have written (manifest, records, recommendations document)."""
    folder.mkdir(parents=True, exist_ok=True)
    run.manifest.write(folder / "manifest.json")
    write_records(folder / "records.jsonl", run.records)
    (folder / "recommendations.json").write_text(json.dumps(run.document), encoding="utf-8")
    return folder
