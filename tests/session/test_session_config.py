"""The session config: defaults are the README's session, bad configs are refused before anything starts."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from satbench.answer.policy import Policy
from satbench.loadgen.cli import parse_overrides as _overrides
from satbench.loadgen.config import LadderConfig, LoadgenConfig
from satbench.session.config import (
    DEFAULT_LOADGEN,
    LADDER_FROM_POLICY,
    LOADGEN_FROM_POLICY,
    SessionConfig,
    SessionConfigError,
    load_session_config,
)
from tests.loadgen.test_ladder import walk

ROOT = Path(__file__).resolve().parents[2]


def test_defaults_are_two_simulator_lanes_on_the_short_ladder() -> None:
    config = load_session_config(None)
    assert [(lane.name, lane.runtime, lane.profile) for lane in config.lanes] == [
        ("dense", "simulator", "dense"),
        ("moe", "simulator", "moe"),
    ]
    assert config.loadgen.ladder.concurrency == [1, 2, 4, 8]
    assert config.loadgen.max_window_s == DEFAULT_LOADGEN["max_window_s"]
    assert config.prometheus.url is None and config.recommender.url is None


def test_example_file_is_valid_and_matches_the_defaults() -> None:
    example = load_session_config(ROOT / "examples" / "session.toml")
    default = load_session_config(None)
    assert example.lanes == default.lanes
    assert example.loadgen.model_dump(exclude={"workload"}) == default.loadgen.model_dump(
        exclude={"workload"}
    )


def test_the_session_ladder_extends_by_the_policy_it_uses() -> None:
    policy = Policy()
    for ladder in (load_session_config(None).loadgen.ladder, SessionConfig().loadgen.ladder):
        assert ladder.extend and ladder.max_concurrency == 64 and ladder.concurrency == [1, 2, 4, 8]
        assert ladder.extend_min_gain == policy.min_gain_per_doubling
        assert ladder.extend_ttft_p95_s == policy.slo.ttft_p95_s == 2.0
        assert ladder.extend_itl_p95_s == policy.slo.itl_p95_s == 0.2
        assert ladder.extend_max_error_ratio == policy.max_error_ratio
    config = load_session_config(None, {"policy.min_gain_per_doubling": 0.25, "policy.slo.ttft_p95_s": 3.5,
                                        "policy.slo.itl_p95_s": 0.05, "policy.max_error_ratio": 0.02})
    ladder = config.loadgen.ladder
    assert (ladder.extend_min_gain, ladder.extend_ttft_p95_s, ladder.extend_itl_p95_s,
            ladder.extend_max_error_ratio) == (0.25, 3.5, 0.05, 0.02)


def test_a_ttft_deadline_that_grows_with_the_prompt_extends_by_the_share_past_it() -> None:
    ladder = load_session_config(None, {"policy.slo.ttft_per_1k_prompt_s": 1.0}).loadgen.ladder
    assert (ladder.extend_ttft_p95_s, ladder.extend_ttft_late_share) == (None, 0.05)
    assert load_session_config(None).loadgen.ladder.extend_ttft_late_share is None


def test_a_rung_too_unsteady_for_the_policy_is_held_unless_the_user_says_otherwise() -> None:
    """The session holds a rung on where the recommender would find it too unsteady to use: the policy's
    ``max_throughput_ci_ratio`` (0.25 by default; any ratio the policy takes), unless ``loadgen`` sets its own."""
    assert load_session_config(None).loadgen.usable_ci_rel == Policy().max_throughput_ci_ratio == 0.25
    assert load_session_config(None, {"policy.max_throughput_ci_ratio": 10.0}).loadgen.usable_ci_rel == 10.0
    assert load_session_config(None, {"policy.max_throughput_ci_ratio": 0.4,
                                      "loadgen.usable_ci_rel": 0.3}).loadgen.usable_ci_rel == 0.3


def test_the_ladder_extension_keeps_what_the_user_set(tmp_path: Path) -> None:
    path = tmp_path / "s.toml"
    path.write_text("[loadgen.ladder]\nextend_min_gain = 0.3\nmax_concurrency = 32\n"
                    "[policy]\nmin_gain_per_doubling = 0.2\nslo = { ttft_p95_s = 4.0 }\n")
    ladder = load_session_config(path, {"loadgen.ladder.extend_itl_p95_s": 0.5}).loadgen.ladder
    assert ladder.extend and ladder.max_concurrency == 32 and ladder.max_rung == 32
    assert (ladder.extend_min_gain, ladder.extend_ttft_p95_s, ladder.extend_itl_p95_s) == (0.3, 4.0, 0.5)
    off = load_session_config(None, {"loadgen.ladder.extend": False}).loadgen.ladder
    assert not off.extend and off.max_rung == 8


def test_a_bad_policy_is_refused_before_anything_runs() -> None:
    with pytest.raises(SessionConfigError) as info:
        load_session_config(None, {"policy.slo.ttft_p95_s": -1.0, "policy.bogus": 1})
    text = str(info.value)
    assert "policy" in text and "slo.ttft_p95_s" in text and "bogus" in text
    with pytest.raises(SessionConfigError, match=r"loadgen\.ladder\.concurrency: \[128\] above max_concurrency"):
        load_session_config(None, {"loadgen.ladder.concurrency": [1, 128]})


def test_file_sections_merge_over_the_session_defaults(tmp_path: Path) -> None:
    path = tmp_path / "s.toml"
    path.write_text("[loadgen]\nwarmup_s = 0.5\n[loadgen.ladder]\nconcurrency = [1, 3]\n")
    config = load_session_config(path, {"prometheus.url": "http://127.0.0.1:9090"})
    assert config.loadgen.warmup_s == 0.5 and config.loadgen.ladder.concurrency == [1, 3]
    assert config.loadgen.min_window_s == DEFAULT_LOADGEN["min_window_s"]
    assert config.prometheus.url == "http://127.0.0.1:9090"


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ('model_dir = "/home/someone/models"', "under /home"),
        ('[[lanes]]\nname = "x"\nruntime = "external"', "needs a url"),
        ('[[lanes]]\nname = "x"\nurl = "http://127.0.0.1:1"', "only for runtime = 'external'"),
        ('[[lanes]]\nname = "x"\nruntime = "llamacpp"', "needs model_file"),
        ('[[lanes]]\nname = "a"\n[[lanes]]\nname = "a"', "duplicate lane names: a"),
        ('[[loadgen.lanes]]\nname = "a"\nurl = "http://127.0.0.1:1"', "not in [loadgen]"),
        ("[loadgen]\nwarmup_s = -1", "loadgen.warmup_s"),
        ("bogus = 1", "bogus"),
        ("lanes = [", "not valid TOML"),
    ],
)
def test_bad_configs_are_refused_with_the_field(tmp_path: Path, text: str, needle: str) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(text + "\n")
    with pytest.raises(SessionConfigError, match=None) as info:
        load_session_config(path)
    assert needle in str(info.value)


def test_set_overrides_parse_toml_values() -> None:
    assert _overrides(["a.b=[1, 2]", "c=0.5", "d=word", "e='q'"]) == {
        "a.b": [1, 2],
        "c": 0.5,
        "d": "word",
        "e": "q",
    }
    with pytest.raises(ValueError, match="KEY=VALUE"):
        _overrides(["novalue"])


def test_router_nodes_group_lanes_and_refuse_what_a_router_cannot_serve() -> None:
    from satbench.runtimes.router import RouterModel, preset_text
    from satbench.session.config import nodes_of

    config = SessionConfig.model_validate({"lanes": [
        {"name": "dense", "profile": "dense", "node": "n0"},
        {"name": "moe", "profile": "moe", "node": "n0", "model": "big", "parallel": 2},
        {"name": "solo", "profile": "dense"},
    ]})
    assert {node: [lane.name for lane in lanes] for node, lanes in nodes_of(config.lanes).items()} == {
        "n0": ["dense", "moe"]}
    # a router routes by model: the load generator's lane names the model id (the lane's name by default)
    assert [config.lane(n).at("http://127.0.0.1:1").model for n in ("dense", "moe", "solo")] == ["dense", "big", ""]
    text = preset_text([RouterModel(name="big", profile="moe", settings={"parallel": 2, "ctx_size": None})])
    assert text.splitlines()[1:] == ["", "[big]", "sim-profile = moe", "parallel = 2"]
    bad = {
        "node n0 mixes runtimes llamacpp, simulator": [
            {"name": "a", "node": "n0"}, {"name": "b", "runtime": "llamacpp", "model_file": "m.gguf", "node": "n0"}],
        "lanes[b].node: 'local' is reserved": [{"name": "b", "node": "local"}],
        "two lanes name model x": [{"name": "a", "node": "n0", "model": "x"}, {"name": "b", "node": "n0",
                                                                             "model": "x"}],
        "lanes[a].relay: not with node": [{"name": "a", "node": "n0", "relay": True}],
        "lanes[a].server_args: not with node": [{"name": "a", "node": "n0", "server_args": ["--foo"]}],
    }
    for message, lanes in bad.items():
        with pytest.raises(SessionConfigError, match=message.replace("[", r"\[").replace("]", r"\]")):
            load_session_config(None, {"lanes": lanes, "model_dir": "/srv/models"})
    # an external lane that names a node is filed under it (a fleet node), never sent to a router
    fleet = SessionConfig.model_validate({"lanes": [{"name": "b", "runtime": "external", "url": "http://h:1",
                                                     "node": "n0"}]})
    assert fleet.lanes[0].key == "n0/b" and nodes_of(fleet.lanes) == {}
    assert fleet.lanes[0].at("http://h:1").model == ""  # it names no model unless told

def test_quick_start_names_a_router_nodes_lanes_by_model() -> None:
    import argparse

    from satbench.session.cli import configure, quick_lanes

    parser = argparse.ArgumentParser()
    configure(parser)
    url = "http://node:8080"
    args = parser.parse_args(["--url", url, "--model", "org/dense-8b", "--url", url, "--model", "moe-30b"])
    assert [(lane["name"], lane["url"], lane["model"]) for lane in quick_lanes(args) or []] == [
        ("dense-8b", url, "org/dense-8b"), ("moe-30b", url, "moe-30b")]
    one = parser.parse_args(["--url", url, "--url", "http://other:8080", "--model", "m"])
    assert [lane["name"] for lane in quick_lanes(one) or []] == ["m1", "m2"]
    with pytest.raises(ValueError, match="--model: give one for every --url or one per --url"):
        quick_lanes(parser.parse_args(["--url", url, "--model", "a", "--model", "b", "--model", "c"]))


def test_the_ladder_stops_on_a_plateau_by_the_policys_gain_and_a_setting_of_its_own_is_said() -> None:
    """The plateau stop once kept its own 10 % whatever the policy's gain: with a policy of 5 % and a lane that
    gains 7 % per doubling, the ladder stopped at c=2 where the policy it was judged by went on."""
    gains_7 = {c: 100 * 1.07 ** i for i, c in enumerate((1, 2, 4, 8, 16))}
    settings = {"policy.min_gain_per_doubling": 0.05, "loadgen.ladder.plateau_stop": True,
                "loadgen.ladder.concurrency": [1, 2, 4, 8, 16], "loadgen.ladder.extend": False}
    config = load_session_config(None, settings)
    assert config.loadgen.ladder.plateau_min_gain == 0.05 and config.policy_overrides == {}
    assert walk(config.loadgen.ladder, gains_7) == [1, 2, 4, 8, 16]
    own = load_session_config(None, {**settings, "loadgen.ladder.plateau_min_gain": 0.10})
    assert walk(own.loadgen.ladder, gains_7) == [1, 2]
    assert own.policy_overrides == {"loadgen.ladder.plateau_min_gain": {"set": 0.10, "policy": 0.05}}


def test_every_setting_of_the_load_generator_that_is_a_policy_figure_comes_from_the_policy() -> None:
    """Each gain, error-ratio, interval and latency threshold the load generator decides by is in the one
    table the session fills from the policy; a new copy under another name fails here until it is added."""
    figure_like = ("gain", "error_ratio", "ci_rel", "ttft_p95", "itl_p95", "late_share", "min_requests")
    # the window's own stopping precision: how exactly a rung is measured, not a threshold it is judged by
    measuring = {"ci_rel_bound"}
    for model, table in ((LadderConfig, LADDER_FROM_POLICY), (LoadgenConfig, LOADGEN_FROM_POLICY)):
        named = {f for f in model.model_fields if any(word in f for word in figure_like)} - measuring
        assert named == set(table), f"{model.__name__}: {sorted(named ^ set(table))}"
    policy = Policy.model_validate({"min_gain_per_doubling": 0.3, "max_error_ratio": 0.04, "min_requests_per_step": 25,
                                    "max_throughput_ci_ratio": 0.5, "slo": {"ttft_p95_s": 7.0, "itl_p95_s": 0.7}})
    config = load_session_config(None, {f"policy.{k}": v for k, v in {
        "min_gain_per_doubling": 0.3, "max_error_ratio": 0.04, "max_throughput_ci_ratio": 0.5,
        "min_requests_per_step": 25, "slo.ttft_p95_s": 7.0, "slo.itl_p95_s": 0.7}.items()})
    assert config.loadgen.min_requests == 30 and config.loadgen.ladder.plateau_min_gain == 0.3
    for mine, table in ((config.loadgen.ladder, LADDER_FROM_POLICY), (config.loadgen, LOADGEN_FROM_POLICY)):
        for key, get in table.items():
            if get(policy) is not None:  # None: the policy leaves the setting unchecked (a late share here)
                assert getattr(mine, key) == get(policy), key
    assert (config.loadgen.decide_gain, config.loadgen.usable_ci_rel, config.loadgen.ladder.extend_itl_p95_s,
            config.loadgen.ladder.extend_max_error_ratio) == (0.3, 0.5, 0.7, 0.04)
    assert config.policy_overrides == {}


def test_the_manifest_says_a_policy_figure_the_config_set_otherwise_and_nothing_where_none() -> None:
    from satbench.core.manifest import RunManifest
    from satbench.session.run import _build_manifest

    def manifest(config: SessionConfig) -> dict[str, Any]:
        built = _build_manifest("20261205T120000Z-abcd", ["satbench", "run"], config, [], {}, "", None,
                                lambda value: value)
        return RunManifest.model_validate(built.model_dump(mode="json", by_alias=True)).model_dump(mode="json")

    assert "policy_overrides" not in manifest(load_session_config(None))
    set_own = load_session_config(None, {"policy.min_gain_per_doubling": 0.05, "loadgen.decide_gain": 0.2,
                                         "loadgen.min_requests": 8})
    assert manifest(set_own)["policy_overrides"] == {
        "loadgen.decide_gain": {"set": 0.2, "policy": 0.05}, "loadgen.min_requests": {"set": 8, "policy": 12}}
