"""Which lanes a ``satbench run`` walks: a shard's share, the stale lanes of a served document, or both; and the
command line's one-line refusals (a shard index outside the count, a shard without a shared run id).

The served documents are written here by hand, each lane's validity the scenario's (rebuilt node: changed;
runtime down: unknown; never measured: absent), so the expected walk is read off the scenario.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest

from satbench.fleet.plan import plan_walk
from satbench.fleet.remeasure import document_url, lanes_to_remeasure, read_document
from satbench.fleet.shards import ShardSpec
from satbench.session.config import SessionConfig

ROOT = Path(__file__).resolve().parents[2]


def _fleet(nodes: int = 4, lanes: int = 2) -> SessionConfig:
    return SessionConfig.model_validate({"nodes": [
        {"name": f"n{n}", "lanes": [{"name": f"l{i}", "runtime": "external", "url": f"http://10.0.0.{n}:{8080 + i}"}
                                    for i in range(lanes)]} for n in range(nodes)]})


def _answer(state: str, reason: str = "") -> dict[str, Any]:
    """A served answer of 4 whose validity is ``state`` (a whole v2 lane: the document is validated)."""
    return {"status": "stale" if state == "changed" else "ok", "recommended_concurrency": 4,
            "saturation_concurrency": 8, "binding_constraint": "throughput_plateau",
            "throughput_at_recommended_tok_s": 100.0,
            "fairness": {"ok": True, "jain_min": 0.99},
            "starvation": {"ok": True, "decode_stall_max_ratio": 1.0, "prefill_wait_max_s": 0.0},
            "run_id": "night-0", "measured_at": "2026-12-01T00:00:00Z", "steps": [],
            "validity": {"state": state, "reason": reason or None}}


def _served(lanes: dict[str, dict[str, Any]]) -> dict[str, Any]:
    return {"schema": "satbench.recommendations/v2", "generated_at": "2026-12-01T00:00:00Z", "run_id": "night-0",
            "source": {"kind": "prometheus"}, "policy": {}, "lanes": lanes}


SERVED = _served({
    "n0/l0": _answer("valid"), "n0/l1": _answer("changed", "settings.slots 4 -> 2"),
    "n1/l0": _answer("valid"), "n1/l1": _answer("unknown", "the runtime is down"),
    "n2/l0": _answer("valid"), "n2/l1": _answer("valid"),
    "n3/l0": _answer("valid"),  # n3/l1: never measured, not in the document
})


def test_remeasure_keeps_exactly_the_stale_unknown_and_unanswered_lanes() -> None:
    keys = [lane.key for lane in _fleet().lanes]
    chosen = lanes_to_remeasure(SERVED, keys)
    assert list(chosen) == ["n0/l1", "n1/l1", "n3/l1"]
    assert chosen["n0/l1"] == "stale: settings.slots 4 -> 2"
    assert chosen["n1/l1"] == "unknown: the runtime is down"
    assert chosen["n3/l1"] == "no answer in the served document"
    # a document served stale as a whole (its store unreachable) keeps the answers still valid
    whole = {**SERVED, "stale": True, "lanes": {k: {**v, "status": "stale"} for k, v in SERVED["lanes"].items()}}
    assert list(lanes_to_remeasure(whole, keys)) == ["n0/l1", "n1/l1", "n3/l1"]


def test_the_shard_comes_first_then_the_stale_lanes_of_its_share() -> None:
    config = _fleet()
    plans = [plan_walk(config, shard=ShardSpec(i, 2), run_id="night-1", document=SERVED, remeasure_url="u")
             for i in range(2)]
    walked = [[lane.key for lane in p.config.lanes] for p in plans]
    assert sorted(walked[0] + walked[1]) == ["n0/l1", "n1/l1", "n3/l1"]
    for p in plans:
        assert p.run_id == "night-1" and p.stamp is not None and len(p.stamp.owners) == 8
        assert set(p.remeasure["lanes"]) == {lane.key for lane in p.config.lanes}  # type: ignore[index]
        assert all(lane.key in p.stamp.share() for lane in p.config.lanes)
    nothing = plan_walk(config, document=_served({k.key: _answer("valid") for k in config.lanes}))
    assert nothing.empty and nothing.remeasure == {"url": None, "lanes": {}, "kept": 8}


def test_a_shard_without_a_shared_run_id_is_refused() -> None:
    with pytest.raises(ValueError, match=r"--shard 0/2: shards must share one run id.*--run-id ID"):
        plan_walk(_fleet(), shard=ShardSpec(0, 2))


def test_the_document_is_read_from_a_recommender_or_its_url() -> None:
    assert document_url("http://rec:9108") == "http://rec:9108/recommendations"
    assert document_url("http://rec:9108/recommendations/") == "http://rec:9108/recommendations"
    seen: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(str(request.url))
        if request.url.host == "down":
            return httpx.Response(503, json={"detail": "no recommendations to serve yet"})
        return httpx.Response(200, json=SERVED)

    transport = httpx.MockTransport(handler)
    assert read_document("http://rec:9108", transport=transport)["lanes"] == SERVED["lanes"]
    assert seen == ["http://rec:9108/recommendations?schema=v2"]
    with pytest.raises(ValueError, match=r"--remeasure http://down: .* answered HTTP 503"):
        read_document("http://down", transport=transport)
    with pytest.raises(ValueError, match=r"--remeasure http://odd: http://odd/recommendations: not a "
                                         r"recommendations document: schema: Field required \(and 4 more\)"):
        read_document("http://odd", transport=httpx.MockTransport(lambda r: httpx.Response(200, json={"lanes": {}})))


@pytest.mark.parametrize(("args", "said"), [
    (["--shard", "3/3", "--run-id", "x"], "satbench run: --shard 3/3: shard index 3 is outside the count 3"),
    (["--shard", "1/3"], "satbench run: --shard 1/3: shards must share one run id"),
    (["--shard", "0/2", "--run-id", "a b"], "satbench run: --run-id 'a b'"),
])
def test_bad_fleet_flags_are_one_line_before_anything_starts(tmp_path: Path, args: list[str], said: str) -> None:
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    done = subprocess.run([sys.executable, "-m", "satbench.cli", "run", "--out", str(tmp_path / "runs"), *args],
                          cwd=ROOT, capture_output=True, text=True, timeout=60, env=env)
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().startswith(said) and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert not (tmp_path / "runs").exists()


def test_a_shard_with_no_node_says_so_and_starts_nothing(tmp_path: Path) -> None:
    config = tmp_path / "fleet.toml"
    config.write_text("\n".join(f'[[nodes]]\nname = "n{i}"\n[[nodes.lanes]]\nname = "dense"\nruntime = "external"\n'
                                f'url = "http://127.0.0.1:9/n{i}"\n' for i in range(2)))
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "JOB_COMPLETION_INDEX": "2", "SATBENCH_SHARD_COUNT": "3",
           "SATBENCH_RUN_ID": "night-7"}
    done = subprocess.run([sys.executable, "-m", "satbench.cli", "run", "--config", str(config), "--out",
                           str(tmp_path / "runs")], cwd=ROOT, capture_output=True, text=True, timeout=60, env=env)
    assert done.returncode == 0, done.stderr
    assert "shard 2/3 of run night-7: 0 of 2 nodes, 0 of 2 lanes" in done.stdout
    assert "nothing to walk (this shard has no node)" in done.stdout and not (tmp_path / "runs").exists()
