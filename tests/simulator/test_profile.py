"""Profiles: bundled ones load and differ as the ladder needs; bad files fail with the key named."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from satbench.simulator.faults import FaultSchedule, faults_from_json
from satbench.simulator.profile import FaultSpec, ProfileError, load_profile, profile_from_mapping


def test_bundled_profiles_load_and_differ() -> None:
    dense, moe, starving = load_profile("dense"), load_profile("moe"), load_profile("starving")
    assert dense.server.slots != moe.server.slots
    assert dense.cost != moe.cost and moe.is_moe and not dense.is_moe
    assert starving.server.admission == "unfair" and dense.server.admission == "fifo"
    assert dense.sources and moe.sources


def test_a_profile_file_by_path(tmp_path: Path) -> None:
    path = tmp_path / "mine.toml"
    path.write_text('[server]\nslots = 3\nadmission = "unfair"\n[[faults]]\nkind = "stall"\ndelay_s = 2\n')
    p = load_profile(str(path))
    assert p.name == "mine" and p.server.slots == 3
    assert p.faults == (FaultSpec(kind="stall", delay_s=2.0),)


@pytest.mark.parametrize(
    ("raw", "needle"),
    [
        ({"server": {"slot": 4}}, "slot"),
        ({"server": {"slots": 0}}, "slots"),
        ({"server": {"slots": "4"}}, "slots"),
        ({"server": {"admission": "random"}}, "admission"),
        ({"cost": {"experts": 8}}, "experts_per_token"),
        ({"cost": {"weights_ms": -1.0}}, "weights_ms"),
        ({"generation": {"eos_tokens": [9, 3]}}, "eos_tokens"),
        ({"faults": [{"kind": "meteor"}]}, "kind"),
        ({"faults": [{"kind": "http_5xx", "status": 404}]}, "5xx"),
        ({"colour": "blue"}, "colour"),
    ],
)
def test_bad_profiles_name_the_key(raw: dict[str, object], needle: str) -> None:
    with pytest.raises(ProfileError, match=needle):
        profile_from_mapping(raw)


def test_missing_or_broken_files_are_profile_errors(tmp_path: Path) -> None:
    with pytest.raises(ProfileError):
        load_profile(str(tmp_path / "absent.toml"))
    broken = tmp_path / "broken.toml"
    broken.write_text("[server\n")
    with pytest.raises(ProfileError, match="invalid TOML"):
        load_profile(str(broken))


def test_overrides_replace_server_keys_only_when_given() -> None:
    base = load_profile("dense")
    assert base.with_overrides(slots=None) is base
    changed = base.with_overrides(slots=8, admission="unfair", time_scale=2.0)
    assert (changed.server.slots, changed.server.admission, changed.server.time_scale) == (8, "unfair", 2.0)
    with pytest.raises(ProfileError):
        base.with_overrides(batch=0)


def test_fault_schedule_windows_and_rates() -> None:
    sched = FaultSchedule([FaultSpec("http_5xx", start_s=10.0, duration_s=5.0)], seed=1)
    assert sched.hit("http_5xx", 9.9) is None
    assert sched.hit("http_5xx", 12.0) is not None
    assert sched.hit("http_5xx", 15.0) is None
    assert sched.active("stall", 12.0) is None
    half = FaultSchedule([FaultSpec("drop_stream", rate=0.5)], seed=1)
    hits = sum(half.hit("drop_stream", 1.0) is not None for _ in range(1000))
    assert 400 < hits < 600
    body = {"faults": [{"kind": "stall", "start_s": 2, "duration_s": None}]}
    faults, append = faults_from_json(body, 100.0)
    assert not append and faults[0].start_s == 102.0 and math.isinf(faults[0].duration_s)
    sched.set(faults, append=True)
    assert [f["kind"] for f in sched.to_json()] == ["http_5xx", "stall"]
    assert sched.to_json()[1]["duration_s"] is None
    with pytest.raises(ValueError):
        faults_from_json({"nope": 1}, 0.0)
