"""The central recommender puts a fleet run's shards together, over real HTTP: every shard's answers under the
one run id, the shard that has not reported named with its lanes, and a shard that cannot belong refused in
one line (another fleet, another count, another run id walked at the same time).

The analyzer is a stand-in with known curves (``dense`` doubles to 4 then flattens: answer 4; ``moe`` keeps
doubling to 8: answer 8, unsaturated), so every expected answer comes from the curve, not from the service.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from pydantic import SecretStr

from satbench.answer.policy import Policy
from satbench.core.figures import StepFigures
from satbench.core.manifest import RunManifest, StepWindow
from satbench.core.shards import ShardStamp, shard_key
from satbench.recommender.app import create_app
from satbench.recommender.run_analysis import document_from_figures
from satbench.recommender.settings import RecommenderSettings
from tests.recommender.figures_factory import ladder
from tests.recommender.server import serve

TOKEN = "fleet-shards-test-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
CURVES = {"dense": {1: 100.0, 2: 200.0, 4: 400.0, 8: 410.0}, "moe": {1: 80.0, 2: 160.0, 4: 320.0, 8: 640.0}}
EXPECTED = {"dense": 4, "moe": 8}
NODES = ("a", "b", "c")
OWNERS = {f"{node}/{lane}": i for i, node in enumerate(NODES) for lane in CURVES}  # one node a shard
FLEET = "sha256:" + "f" * 64


class Analyzer:
    async def __call__(self, manifest: RunManifest, run_dir: Path | None) -> dict[str, Any]:
        figures: dict[str, list[StepFigures]] = {}
        for key in manifest.lane_names():
            figures[key] = [_relabel(s, key) for s in ladder(CURVES[key.split("/")[1]])]
        return document_from_figures(manifest, figures, policy=Policy(), generated_at=1.8e9,
                                     source={"kind": "prometheus", "url": "http://prom.test"})


def _relabel(step: StepFigures, key: str) -> StepFigures:
    data = step.to_dict()
    data["lane"] = key
    return StepFigures.from_dict(data)


async def _no_fingerprints(starts: Any) -> dict[str, Any]:
    return {key: (None, "no exporter in this test") for key in starts}


def shard_manifest(run_id: str, index: int, *, count: int = 3, fleet: str = FLEET, start: float = 1000.0,
                   owners: dict[str, int] | None = None) -> RunManifest:
    owned = owners or OWNERS
    stamp = ShardStamp(index=index, count=count, fleet=fleet, owners=owned)
    steps = [StepWindow(key, c, start + 10.0 * c, start + 10.0 * c + 5.0)
             for key in stamp.share() for c in (1, 2, 4, 8)]
    lanes = {key: {"node": key.split("/")[0], "lane": key.split("/")[1]} for key in stamp.share()}
    return RunManifest(run_id=run_id, created_at=start, steps=steps, lanes=lanes, shard=stamp.model_dump(),
                       finished_at=start + 100.0)


@pytest.fixture
def url(tmp_path: Path) -> Iterator[str]:
    settings = RecommenderSettings(prometheus_url="http://prom.test", runs_dir=tmp_path, refresh_interval_s=3600,
                                   write_token=SecretStr(TOKEN))
    app = create_app(settings, analyzer=Analyzer(), fingerprints=_no_fingerprints, background_refresh=False)
    with serve(app) as base:
        yield base


def _post(url: str, manifest: RunManifest) -> httpx.Response:
    return httpx.post(f"{url}/runs", json=manifest.to_dict(), headers=AUTH, timeout=10)


def test_three_shards_file_into_one_fleet_document(url: str, tmp_path: Path) -> None:
    for i in (2, 0, 1):  # in any order
        assert _post(url, shard_manifest("night-1", i)).status_code == 201
    doc = httpx.get(f"{url}/recommendations", timeout=10).json()
    assert {k: v["recommended_concurrency"] for k, v in doc["lanes"].items()} == {
        key: EXPECTED[key.split("/")[1]] for key in OWNERS}
    assert all(v["run_id"] == "night-1" for v in doc["lanes"].values())
    assert doc["shards"] == {"night-1": {"count": 3, "fleet": FLEET, "reported": [0, 1, 2], "missing": {},
                                         "failed": {}, "partial": {}}}
    fleet = httpx.get(f"{url}/runs/night-1", timeout=10).json()
    assert set(fleet["recommendations"]["lanes"]) == set(OWNERS) and fleet["analyzed"]
    one = httpx.get(f"{url}/runs/night-1.shard-1-of-3", timeout=10).json()
    assert set(one["recommendations"]["lanes"]) == {"b/dense", "b/moe"}
    # each shard persisted under its own folder: none overwrote another
    assert sorted(p.name for p in tmp_path.iterdir()) == [f"night-1.shard-{i}-of-3" for i in range(3)]


def test_a_shard_that_never_reported_is_named_with_its_lanes_and_the_others_served(url: str) -> None:
    for i in (0, 2):
        assert _post(url, shard_manifest("night-1", i)).status_code == 201
    doc = httpx.get(f"{url}/recommendations", timeout=10).json()
    assert doc["shards"]["night-1"]["missing"] == {"1": ["b/dense", "b/moe"]}
    for key in ("a/dense", "a/moe", "c/dense", "c/moe"):
        assert doc["lanes"][key]["recommended_concurrency"] == EXPECTED[key.split("/")[1]]
    for key in ("b/dense", "b/moe"):
        lane = doc["lanes"][key]
        assert lane["recommended_concurrency"] is None and lane["status"] == "insufficient_data"
        assert lane["reason"] == "not measured: shard 1/3 of run night-1 has not reported"
        assert lane["node"] == "b" and lane["validity"]["state"] == "unknown"
    assert any("shard 1/3 has not reported (b/dense, b/moe)" in n for n in doc["notes"])
    assert doc["nodes"]["b"]["lanes"] == ["b/dense", "b/moe"]
    # the late shard arrives: nothing is missing any more
    assert _post(url, shard_manifest("night-1", 1)).status_code == 201
    doc = httpx.get(f"{url}/recommendations", timeout=10).json()
    assert doc["shards"]["night-1"]["missing"] == {} and doc["lanes"]["b/dense"]["recommended_concurrency"] == 4


def test_only_the_newest_fleet_run_is_said_and_older_answers_stand(url: str) -> None:
    for i in range(3):
        assert _post(url, shard_manifest("night-1", i)).status_code == 201
    assert _post(url, shard_manifest("night-2", 0, start=90_000.0)).status_code == 201
    doc = httpx.get(f"{url}/recommendations", timeout=10).json()
    assert list(doc["shards"]) == ["night-2"]
    assert doc["shards"]["night-2"]["missing"] == {"1": ["b/dense", "b/moe"], "2": ["c/dense", "c/moe"]}
    # b and c keep last night's answers (the newest that measured them), a is tonight's
    assert {k: v["run_id"] for k, v in doc["lanes"].items()} == {
        "a/dense": "night-2", "a/moe": "night-2", "b/dense": "night-1", "b/moe": "night-1",
        "c/dense": "night-1", "c/moe": "night-1"}


@pytest.mark.parametrize(("second", "said"), [
    (shard_manifest("night-1", 1, fleet="sha256:" + "e" * 64),
     "shard 1/3 of run night-1 was handed another fleet (sha256:eeeeeeeeeeee) than shard 0/3 (sha256:ffffffffffff)"),
    (shard_manifest("night-1", 1, count=2, owners={k: i % 2 for k, i in OWNERS.items()}),
     "shard 1/2 of run night-1 counts 2 shards, shard 0/3 3"),
    (shard_manifest("night-x", 1, start=1001.0),
     "shard 1/3 names run night-x, but shard 0/3 of the same fleet, walking at the same time, names run night-1"),
    (RunManifest(run_id="night-1", created_at=1.0, steps=[StepWindow("z", 1, 1.0, 2.0)]),
     "run night-1 is a fleet run of shards: a run of one process cannot take its id"),
])
def test_a_shard_that_cannot_belong_is_refused_in_one_line(url: str, second: RunManifest, said: str) -> None:
    assert _post(url, shard_manifest("night-1", 0)).status_code == 201
    resp = _post(url, second)
    assert resp.status_code == 400, resp.text
    detail = resp.json()["detail"]
    assert detail.startswith(said) and "\n" not in detail, detail
    doc = httpx.get(f"{url}/recommendations", timeout=10).json()
    assert set(doc["lanes"]) == set(OWNERS) and doc["shards"]["night-1"]["reported"] == [0]


def test_shards_read_from_shared_storage_are_put_together(tmp_path: Path) -> None:
    for i in (0, 2):
        m = shard_manifest("night-1", i)
        stamp = ShardStamp.model_validate(m.model_extra["shard"])  # type: ignore[index]
        m.write(tmp_path / shard_key("night-1", stamp) / "manifest.json")
    settings = RecommenderSettings(prometheus_url="http://prom.test", runs_dir=tmp_path, refresh_interval_s=0.05,
                                   write_token=SecretStr(TOKEN))
    app = create_app(settings, analyzer=Analyzer(), fingerprints=_no_fingerprints)
    with serve(app) as base:
        fleet = httpx.get(f"{base}/runs/night-1", timeout=10).json()
        lanes = fleet["recommendations"]["lanes"]
        assert lanes["a/dense"]["recommended_concurrency"] == 4 and lanes["b/moe"]["recommended_concurrency"] is None
        assert "shard 1/3 of run night-1 has not reported" in lanes["b/moe"]["reason"]


@pytest.mark.parametrize("restart", [1, 2])
def test_a_killed_shard_stays_missing_after_any_restart_on_the_shared_folder(tmp_path: Path, restart: int) -> None:
    # the shared folder as the fleet left it: shards 0 and 2 finished, shard 1 killed mid-walk (its manifest is
    # the one of its last finished rung: finished_at null). Before, a restarted recommender counted it reported.
    for i in range(3):
        m = shard_manifest("night-1", i)
        if i == 1:
            m = m.model_copy(update={"finished_at": None})
        stamp = ShardStamp.model_validate(m.model_extra["shard"])  # type: ignore[index]
        m.write(tmp_path / shard_key("night-1", stamp) / "manifest.json")
    settings = RecommenderSettings(prometheus_url="http://prom.test", runs_dir=tmp_path, refresh_interval_s=0.05,
                                   write_token=SecretStr(TOKEN))
    for _ in range(restart):  # each start reads the folder afresh
        with serve(create_app(settings, analyzer=Analyzer(), fingerprints=_no_fingerprints),
                   ready_path="/recommendations") as base:
            doc = httpx.get(f"{base}/recommendations", timeout=10).json()
            fleet = httpx.get(f"{base}/runs/night-1", timeout=10).json()
            runs = {r["key"]: r["complete"] for r in httpx.get(f"{base}/runs", timeout=10).json()["runs"]}
        said = doc["shards"]["night-1"]
        assert said["reported"] == [0, 2] and said["missing"] == {"1": ["b/dense", "b/moe"]}
        assert "did not finish" in said["partial"]["1"]
        assert any("shard 1/3 has not reported (b/dense, b/moe): it did not finish" in n for n in doc["notes"])
        for key in ("b/dense", "b/moe"):  # what the killed shard measured stands only marked partial
            assert doc["lanes"][key]["partial"].startswith("run night-1.shard-1-of-3: it did not finish")
        for key in ("a/dense", "a/moe", "c/dense", "c/moe"):
            assert doc["lanes"][key].get("partial") is None
            assert doc["lanes"][key]["recommended_concurrency"] == EXPECTED[key.split("/")[1]]
        assert fleet["partial"].startswith("night-1.shard-1-of-3: it did not finish")
        assert runs == {"night-1.shard-0-of-3": True, "night-1.shard-1-of-3": False, "night-1.shard-2-of-3": True}
