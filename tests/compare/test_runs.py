"""``satbench compare`` on run folders of a known deployment (``testkit.compare_runs``): the truth is the
scenario's (the same deployment measured again; every prefill 1.5x longer under another build; another
workload), never compare's own reading. A small seeded subset of ``bench/compare_accuracy.py``, whose rates
over many seeds are the acceptance figures; here each seed must come out as its scenario says.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from satbench.compare.judge import compare_runs
from satbench.compare.runs import load_run
from testkit.compare_runs import LANE, Simulated, simulate, write_run

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def runs() -> dict[str, list[Simulated]]:
    return {"same": [simulate(seed=s) for s in (11, 12, 13, 14)],
            "slower": [simulate(seed=s, prefill_scale=1.5, build="b5100") for s in (21, 22)],
            "workload": [simulate(seed=31, prompt_tokens=256)]}


def test_the_same_deployment_passes_and_a_slower_prefill_fails_naming_ttft(runs: dict[str, list[Simulated]]) -> None:
    same = runs["same"]
    for a, b in ((same[0], same[1]), (same[2], same[3])):
        result = compare_runs([a.run], [b.run])
        assert result.verdict != "FAIL", result.regressions()
    for a, b in zip(same, runs["slower"], strict=False):
        result = compare_runs([a.run], [b.run])
        ttft = next(c for c in result.lanes[0].changes if c.figure == "TTFT p95")
        assert ttft.relative is not None and 1.3 < 1 + ttft.relative < 1.7  # the scenario's x1.5, measured
        assert result.verdict == "FAIL" and any(": TTFT p95 at c=8 " in line for line in result.regressions())
        assert result.headline().startswith("FAIL runtime.build b5000 -> b5100: n1/dense c=8 TTFT p95 +")


def test_a_run_folder_gives_every_requests_tail(runs: dict[str, list[Simulated]], tmp_path: Path) -> None:
    sim = runs["same"][0]
    loaded = load_run(str(write_run(tmp_path / "a", sim)))
    assert loaded.note is None
    kept = loaded.run.tails[LANE][8]
    assert kept.ttft_tail == sim.run.tails[LANE][8].ttft_tail
    assert kept.ttft_tail.n == len(kept.ttft_tail.top) > 400  # every request of the busy rung, not 16
    document_only = load_run(str(write_run(tmp_path / "b", sim) / "recommendations.json"))
    assert document_only.run.tails == {}
    (tmp_path / "b" / "records.jsonl").unlink()
    assert "no records.jsonl" in str(load_run(str(tmp_path / "b")).note)


def test_the_command_line_gates_pools_and_refuses(runs: dict[str, list[Simulated]], tmp_path: Path) -> None:
    folders = {name: [write_run(tmp_path / f"{name}-{i}", sim) for i, sim in enumerate(sims)]
               for name, sims in runs.items()}

    def cli(*args: Path | str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "satbench.cli", "compare", *map(str, args)], cwd=ROOT,
                              capture_output=True, text=True, timeout=120)

    same = folders["same"]
    passed = cli(same[0], same[1], "--a", same[2], "--b", same[3])
    assert passed.returncode == 0 and passed.stdout.startswith("PASS no deployment field differs"), passed.stdout
    assert "(2 runs of A pooled, 2 of B)" in passed.stdout
    failed = cli(same[0], folders["slower"][0])
    assert failed.returncode == 1, failed.stdout
    assert failed.stdout.startswith("FAIL runtime.build b5000 -> b5100: n1/dense c=8 TTFT p95 +"), failed.stdout
    refused = cli(same[0], folders["workload"][0])
    assert refused.returncode == 2 and refused.stdout == "", refused.stdout
    assert refused.stderr.startswith("satbench compare: A and B differ in workload") and \
        len(refused.stderr.splitlines()) == 1, refused.stderr
    allowed = cli(same[0], folders["workload"][0], "--allow", "workload")
    assert allowed.returncode in (0, 1, 3) and "allowed: workload differs" in allowed.stdout, allowed.stdout
