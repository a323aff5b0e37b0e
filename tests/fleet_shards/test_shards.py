"""The shard arithmetic: every node in exactly one shard, whole, balanced by lanes, the same in every pod.

Truth comes from the fleet as written here (how many lanes each node has, how many shards), never from
``assign_nodes`` run a second way: coverage and disjointness are set facts, balance is the bound the
longest-processing-time rule guarantees (lane counts differ by at most the largest node's), and determinism
is the same shares from the fleet listed in another order.
"""

from __future__ import annotations

import random

import pytest

from satbench.core.shards import ShardStamp, shard_key, shard_of
from satbench.fleet.shards import (
    ShardSpec,
    assign_nodes,
    fleet_digest,
    parse_shard,
    shard_from_env,
    shared_run_id,
    stamp_for,
)
from satbench.session.config import SessionConfig


def _fleet(lanes_per_node: dict[str, int]) -> SessionConfig:
    nodes = [{"name": node, "lanes": [{"name": f"l{i}", "runtime": "external", "url": f"http://{node}:{8080 + i}"}
                                      for i in range(n)]} for node, n in lanes_per_node.items()]
    return SessionConfig.model_validate({"nodes": nodes})


@pytest.mark.parametrize(("nodes", "count"), [
    ({f"n{i:02d}": 2 for i in range(10)}, 3),           # equal nodes: 4/3/3 nodes
    ({f"n{i:02d}": 2 for i in range(2)}, 3),            # more shards than nodes: one shard empty
    ({"big": 6, "a": 1, "b": 1, "c": 2, "d": 3}, 2),    # uneven nodes
    ({f"n{i:03d}": 1 + i % 4 for i in range(101)}, 7),  # a larger fleet
])
def test_every_node_lands_whole_in_exactly_one_shard_and_the_shards_balance(nodes: dict[str, int],
                                                                           count: int) -> None:
    config = _fleet(nodes)
    stamps = [stamp_for(config.lanes, ShardSpec(i, count)) for i in range(count)]
    shares = [set(s.share()) for s in stamps]
    every = {lane.key for lane in config.lanes}
    assert set().union(*shares) == every and sum(len(s) for s in shares) == len(every)  # covering, disjoint
    for node in nodes:  # a node's lanes all in one shard
        owners = {i for i, share in enumerate(shares) for key in share if key.startswith(f"{node}/")}
        assert len(owners) == 1, node
    loads = [len(s) for s in shares]
    assert max(loads) - min(loads) <= max(nodes.values()), loads
    if len(set(nodes.values())) == 1:  # equal nodes: node counts differ by at most one
        per = [len({k.split("/")[0] for k in s}) for s in shares]
        assert max(per) - min(per) <= 1, per
    assert len({s.fleet for s in stamps}) == 1 and all(s.owners == stamps[0].owners for s in stamps)


def test_the_shares_do_not_depend_on_the_order_the_fleet_is_listed() -> None:
    nodes = {f"n{i:02d}": 1 + i % 3 for i in range(20)}
    shuffled = list(nodes.items())
    random.Random(7).shuffle(shuffled)
    assert assign_nodes(nodes, 4) == assign_nodes(dict(shuffled), 4)
    a, b = _fleet(nodes), _fleet(dict(shuffled))
    assert fleet_digest(a.lanes) == fleet_digest(b.lanes)
    assert stamp_for(a.lanes, ShardSpec(1, 4)).owners == stamp_for(b.lanes, ShardSpec(1, 4)).owners


def test_another_fleet_has_another_digest() -> None:
    a = _fleet({"a": 2, "b": 2})
    moved = SessionConfig.model_validate({"nodes": [
        {"name": "a", "lanes": [{"name": "l0", "runtime": "external", "url": "http://a:9999"},
                                {"name": "l1", "runtime": "external", "url": "http://a:8081"}]},
        {"name": "b", "lanes": [{"name": f"l{i}", "runtime": "external", "url": f"http://b:{8080 + i}"}
                                for i in range(2)]}]})
    assert fleet_digest(a.lanes) != fleet_digest(moved.lanes)


@pytest.mark.parametrize(("text", "said"), [
    ("3/3", "shard index 3 is outside the count 3: indices are 0-based, 0..2"),
    ("-1/3", "give INDEX/COUNT"),
    ("1/0", "shard count 0"),
    ("one/3", "give INDEX/COUNT"),
])
def test_a_bad_shard_is_one_line_naming_it(text: str, said: str) -> None:
    with pytest.raises(ValueError) as err:
        parse_shard(text)
    assert said in str(err.value) and "\n" not in str(err.value) and str(err.value).startswith("--shard")


def test_an_indexed_job_pod_takes_its_shard_from_the_environment() -> None:
    assert shard_from_env({}) is None
    assert shard_from_env({"JOB_COMPLETION_INDEX": "2", "SATBENCH_SHARD_COUNT": "3"}) == ShardSpec(2, 3)
    with pytest.raises(ValueError, match="SATBENCH_SHARD_COUNT is not set"):
        shard_from_env({"JOB_COMPLETION_INDEX": "2"})
    with pytest.raises(ValueError, match="JOB_COMPLETION_INDEX/SATBENCH_SHARD_COUNT 3/3: shard index 3 is outside"):
        shard_from_env({"JOB_COMPLETION_INDEX": "3", "SATBENCH_SHARD_COUNT": "3"})


def test_shards_handed_one_start_time_derive_one_run_id() -> None:
    digest = fleet_digest(_fleet({"a": 1}).lanes)
    first = shared_run_id(given=None, started_at="2026-12-01T16:13:16Z", digest=digest)
    assert first == shared_run_id(given=None, started_at="1796141596", digest=digest)
    assert first == f"20261201T161316Z-{digest[7:11]}"
    assert shared_run_id(given="fleet-28374650", started_at=None, digest=digest) == "fleet-28374650"
    assert shared_run_id(given=None, started_at=None, digest=digest) is None
    with pytest.raises(ValueError, match="--run-id 'a b'"):
        shared_run_id(given="a b", started_at=None, digest=digest)
    with pytest.raises(ValueError, match="--run-started-at 'yesterday'"):
        shared_run_id(given=None, started_at="yesterday", digest=digest)


def test_the_stamp_refuses_an_index_outside_its_count_and_names_the_folder() -> None:
    with pytest.raises(ValueError, match="shard index 3 is outside the count 3"):
        ShardStamp(index=3, count=3, fleet="sha256:x", owners={"a/l0": 0})
    stamp = ShardStamp(index=1, count=3, fleet="sha256:x", owners={"a/l0": 1, "b/l0": 0})
    assert shard_key("run-1", stamp) == "run-1.shard-1-of-3" and stamp.share() == ["a/l0"]
    assert shard_of({"shard": stamp.model_dump()}) == stamp and shard_of({}) is None
