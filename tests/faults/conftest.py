"""Shared pieces of the fault suite: one simulator per module, fault injection, short loadgen configs.

Windows are short (a couple of seconds) and every assertion is about outcomes and markings, never about
speed, so the suite stays fast on an idle machine and still passes on a loaded one.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from satbench.core.manifest import RunManifest
from satbench.core.records import RequestRecord, read_records
from satbench.loadgen.config import LoadgenConfig
from satbench.loadgen.runner import run_ladder
from testkit.sim import SimulatorProcess


@pytest.fixture(scope="module")
def sim() -> Iterator[SimulatorProcess]:
    with SimulatorProcess("dense", seed=7) as proc:
        yield proc


def set_faults(url: str, *faults: dict[str, Any]) -> dict[str, Any]:
    """Replaces the simulator's fault schedule (``start_s`` relative to now); returns ``GET /sim/faults``."""
    resp = httpx.post(f"{url}/sim/faults", json={"faults": list(faults), "append": False}, timeout=10)
    resp.raise_for_status()
    body: dict[str, Any] = resp.json()
    return body


def short_config(url: str, **extra: Any) -> LoadgenConfig:
    data: dict[str, Any] = {
        "lanes": [{"name": "dense", "url": url, "api": "llamacpp"}],
        "ladder": {"concurrency": [2]},
        "workload": {"prompt_tokens": {"value": 16}, "output_tokens": {"value": 12}},
        "warmup_s": 0.2, "min_window_s": 1.0, "max_window_s": 1.5, "min_requests": 2,
        "drain_timeout_s": 0.5, "request_timeout_s": 10.0, "max_loop_lag_s": 5.0,
        # a fault test is about the fault, not the client's accuracy: on a loaded machine (a parallel suite)
        # the client left its users idle 9.5 % of a window once, which voided the step for the wrong reason
        "max_idle_share": 0.5,
        "metrics_port": None, "progress": False,
    }
    data.update(extra)
    return LoadgenConfig.model_validate(data)


def run_short(config: LoadgenConfig, out: Path, run_id: str = "faults-run") -> tuple[RunManifest,
                                                                                   list[RequestRecord]]:
    manifest = asyncio.run(run_ladder(config, out, run_id=run_id))
    return manifest, list(read_records(out / "records.jsonl", strict=True))
