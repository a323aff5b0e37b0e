"""A fabricated run folder (manifest, steps, recommendations, records) shaped as DESIGN.md describes.

Every lane answers ``recommended 4, saturation 8, throughput_plateau`` unless ``answers`` overrides a lane's
answer (status, binding constraint, its steps' judgments...); ``policy`` replaces the document's policy.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from satbench.core.figures import MemoryFigures, Quantiles, StepFigures, Tail
from satbench.core.manifest import RunManifest, StepWindow
from satbench.core.records import RequestRecord, write_records

__all__ = ["LADDER", "make_run_dir"]

LADDER = (1, 2, 4, 8)
RUN_ID = "20261129T101500Z-3f2a"


def _step(lane: str, c: int, scale: float) -> StepFigures:
    tput = scale * 100 * min(c, 4) * (0.95 if c == 8 else 1.0)
    return StepFigures(
        lane=lane,
        concurrency=c,
        window_s=10.0,
        requests=10 * c,
        errors=0,
        throughput_tok_s=tput,
        input_throughput_tok_s=2 * tput,
        requests_per_s=tput / 32,
        latency_s=Quantiles(p50=0.3 * c, p95=0.35 * c, p99=0.4 * c, mean=0.31 * c),
        ttft_s=Quantiles(p50=0.02 * c, p95=0.03 * c, p99=0.035 * c, mean=0.021 * c),
        itl_s=Quantiles(p50=0.01, p95=0.012, p99=0.015, mean=0.0105),
        tpot_s=Quantiles(p50=0.0101, p95=0.0111, p99=0.0121, mean=0.0102),
        queue_s=Quantiles(p50=0.0, p95=0.01 * max(0, c - 4)),
        jain=1.0 - 0.01 * c,
        decode_stall_max_ratio=1.0 + 0.8 * c,
        pause_s=Quantiles(p50=0.01, p95=0.02, p99=0.05 * c),
        pause_requests=10 * c,
        # a fifth of the requests held 0.05 c - 0.01 s beyond a 10 ms step: c=8, 390 ms, past the 250 ms objective
        pause_excess_s=Quantiles(p50=0.001, p95=0.05 * c - 0.01, p99=0.05 * c - 0.01),
        pause_excess_tail=Tail.of([0.05 * c - 0.01] * (2 * c) + [0.001] * (8 * c)),
        decode_step_s=0.01,
        decode_step_gaps=100,
        prefill_events=5 * c,
    )


GAINS = {1: None, 2: 1.0, 4: 1.0, 8: 0.02}  # the document's gain per doubling at each rung


def _server_step(lane: str, c: int) -> dict[str, Any]:
    step = StepFigures(
        lane=lane,
        concurrency=c,
        window_s=10.0,
        requests=10 * c,
        errors=0,
        throughput_tok_s=1.0,
        requests_per_s=1.0,
        occupancy_ratio=min(1.0, c / 4),
        queue_depth_avg=max(0.0, c - 4.0),
        memory_bytes=MemoryFigures(gpu_max=None, host_rss_max=1.2e9 + c * 1e6),
    ).to_dict()
    step.pop("lane")
    step.update({"usable": True, "unusable_reason": None, "violations": [], "gain_per_doubling": GAINS[c],
                 "gain_interval": None if GAINS[c] is None else [GAINS[c] - 0.01, GAINS[c] + 0.01]})
    return step


def make_run_dir(root: Path, *, lanes: tuple[str, ...] = ("dense", "moe"), with_steps: bool = True,
                 answers: dict[str, dict[str, Any]] | None = None, policy: dict[str, Any] | None = None,
                 with_recommendations: bool = True) -> Path:
    run_dir = root / RUN_ID
    run_dir.mkdir(parents=True)
    t0 = 1_795_000_000.0
    answers_override = answers
    windows, records, steps = [], [], []
    answers: dict[str, dict[str, Any]] = {}
    for li, lane in enumerate(lanes):
        for ci, c in enumerate(LADDER):
            start = t0 + 100 * (li * len(LADDER) + ci)
            windows.append(
                StepWindow(
                    lane=lane,
                    concurrency=c,
                    start=start,
                    end=start + 10,
                    valid=c != 8 or li == 0,
                    reason=None if c != 8 or li == 0 else "too few requests",
                )
            )
            steps.append(_step(lane, c, 1.0 + li).to_dict())
            for u in range(c):
                records.append(
                    RequestRecord(
                        run_id=RUN_ID,
                        lane=lane,
                        concurrency=c,
                        user=u,
                        request_id=f"{lane}-{c}-{u}",
                        phase="window",
                        sent_at=start + 1,
                        ttft_s=0.02,
                        e2e_s=0.3,
                        queue_s=0.0,
                        itl_s=(0.01,) * 31,
                        prompt_tokens=64,
                        output_tokens=32,
                        outcome="ok",
                        status=200,
                    )
                )
        answers[lane] = {
            "status": "ok",
            "recommended_concurrency": 4,
            "saturation_concurrency": 8,
            "binding_constraint": "throughput_plateau",
            "throughput_at_recommended_tok_s": 400.0 * (1 + li),
            "fairness": {"ok": True, "jain_min": 0.92},
            "starvation": {"ok": True, "decode_stall_max_ratio": None, "prefill_wait_max_s": None},
            "run_id": RUN_ID,
            "measured_at": "2026-11-29T10:19:40Z",
            "knee": {"method": "kneedle_isotonic_log2", "concurrency": 4, "difference": 0.3},
            "notes": [f"throughput plateau after c=4: c=8 gained +{GAINS[8]:.1%} per doubling, less than "
                      "policy.min_gain_per_doubling 10%"],
            "steps": [_server_step(lane, c) for c in LADDER],
        }
        answers[lane].update((answers_override or {}).get(lane, {}))
    manifest = RunManifest(
        run_id=RUN_ID,
        created_at=t0 - 5,
        finished_at=t0 + 900,
        command=["satbench", "run"],
        config={"ladder": list(LADDER)},
        versions={"satbench": "0.1.0", "git_commit": "abc123"},
        lanes={
            lane: {"runtime": "simulator", "url": f"http://127.0.0.1:{18000 + i}",
                   "runtime_props": {"total_slots": 4}}
            for i, lane in enumerate(lanes)
        },
        hardware={
            "cpu_model": "Test CPU",
            "cpu_cores_logical": 2,
            "ram_bytes": 8 * 2**30,
            "gpu": None,
            "gpu_reason": "NVML unavailable",
        },
        network={lane: {"rtt_median_s": 0.0004} for lane in lanes},
        steps=windows,
    )
    manifest.write(run_dir / "manifest.json")
    if with_steps:
        (run_dir / "steps.json").write_text(json.dumps({"steps": steps}), encoding="utf-8")
    recs = {
        "schema": "satbench.recommendations/v1",
        "generated_at": "2026-11-29T10:20:00Z",
        "run_id": RUN_ID,
        "source": {"kind": "prometheus", "url": "http://127.0.0.1:9090"},
        "policy": {"slo": {"tbt_p99_s": 0.25}} if policy is None else policy,
        "lanes": answers,
    }
    if with_recommendations:
        (run_dir / "recommendations.json").write_text(json.dumps(recs), encoding="utf-8")
    write_records(run_dir / "records.jsonl", records)
    return run_dir
