"""``satbench capabilities --format json|prometheus|litellm`` over a v2 fleet document and a v1 one.

The fleet: three nodes of two lanes each (``gpu-a`` answered and valid; ``gpu-b`` with one answer measured
on something else and one never measured; the session's own host, ``local``, with bare keys, one answer whose
validity nobody could tell and no URL in the document). The Prometheus text is parsed with
prometheus_client's own parser and compared with what the recommender's ``/metrics`` serves over real HTTP
for the same document; the LiteLLM output is loaded with PyYAML as LiteLLM loads its config.
"""

from __future__ import annotations

import argparse
import copy
import json
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from satbench.answer.document import read_document
from satbench.core.manifest import RunManifest, StepWindow
from satbench.recommender import capabilities, capabilities_cli
from satbench.recommender.app import create_app
from satbench.recommender.metrics import answer_families, exposition
from satbench.recommender.settings import RecommenderSettings
from testkit.net import free_port
from tests.recommender.server import serve

OLD_FAMILIES = ("satbench_recommended_concurrency", "satbench_saturation_concurrency",
                "satbench_recommendation_status", "satbench_verdict_ok", "satbench_recommendations_stale")


def _validity(state: str, **more: Any) -> dict[str, Any]:
    return {"state": state, "checked_at": "2026-12-01T10:00:00Z" if state != "unknown" else None,
            "changes": [], "reason": None, **more}


def answer(rec: int | None, **fields: Any) -> dict[str, Any]:
    """An answer with every field the schema requires, recommending ``rec``; ``fields`` change some."""
    return {
        "status": "ok" if rec is not None else "insufficient_data", "reason": None,
        "recommended_concurrency": rec, "saturation_concurrency": rec,
        "binding_constraint": None if rec is None else "throughput_plateau",
        "throughput_at_recommended_tok_s": None if rec is None else 100.0 * rec,
        "fairness": {"ok": True, "jain_min": None},
        "starvation": {"ok": True, "decode_stall_max_ratio": None, "prefill_wait_max_s": None},
        "run_id": "r-fleet", "measured_at": "2026-12-01T09:00:00Z", "steps": [], **fields,
    }


def _lane(node: str, name: str, rec: int | None, *, url: str | None, state: str = "valid",
          status: str = "ok", **more: Any) -> dict[str, Any]:
    return answer(
        rec, node=node, lane=name, url=url, status=status,
        starvation={"ok": rec != 4, "decode_ok": True, "prefill_ok": rec != 4, "decode_stall_max_ratio": None,
                    "prefill_wait_max_s": None},
        fingerprint=None if state == "unknown" else {"digest": f"sha256:{node}-{name}"},
        validity=_validity(state), **more,
    )


def fleet_document() -> dict[str, Any]:
    changed = _lane("gpu-b", "dense", 6, url="http://gpu-b:8080", state="changed", status="stale",
                    last_status="ok", reason="node changed: settings.slots 4 -> 2")
    changed["validity"]["changes"] = [{"field": "settings.slots", "measured": 4, "live": 2}]
    lanes = {
        "gpu-a/dense": _lane("gpu-a", "dense", 8, url="http://gpu-a:8080"),
        "gpu-a/moe": _lane("gpu-a", "moe", 4, url="http://gpu-a:8081/", model="moe-30b"),
        "gpu-b/dense": changed,
        "gpu-b/moe": _lane("gpu-b", "moe", None, url="http://gpu-b:8081", state="unknown",
                           status="insufficient_data", reason="1 usable step window"),
        "dense": _lane("local", "dense", 4, url=None, state="unknown"),
        "moe": _lane("local", "moe", 2, url="http://127.0.0.1:8081"),
    }
    nodes: dict[str, Any] = {}
    for key, lane in sorted(lanes.items()):
        nodes.setdefault(lane["node"], {"labels": {}, "lanes": []})["lanes"].append(key)
    nodes["gpu-a"]["labels"], nodes["gpu-b"]["labels"] = {"gpu": "h100"}, {"gpu": "l40s"}
    return {"schema": "satbench.recommendations/v2", "generated_at": "2026-12-01T10:00:00Z", "run_id": "r-fleet",
            "source": {"kind": "records"}, "policy": {}, "notes": [], "stale": False, "age_s": None,
            "nodes": nodes, "lanes": lanes}


def v1_document() -> dict[str, Any]:
    starvation = {"ok": True, "decode_ok": True, "decode_stall_max_ratio": None, "prefill_wait_max_s": None}
    return {"schema": "satbench.recommendations/v1", "generated_at": "2026-11-29T10:19:40Z", "run_id": "r1",
            "source": {"kind": "records"}, "policy": {}, "stale": False, "lanes": {
                "dense": answer(4, throughput_at_recommended_tok_s=812.5, run_id="r1",
                                measured_at="2026-11-29T10:19:40Z", starvation=starvation),
                "moe": answer(None, reason="1 step window(s)", run_id="r1")}}


def samples(text: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    return {(s.name, frozenset(s.labels.items())): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def at(node: str | None, lane: str, **more: str) -> frozenset[tuple[str, str]]:
    return frozenset({"lane": lane, **({} if node is None else {"node": node}), **more}.items())


def parse_args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    capabilities_cli.configure(parser)
    return parser.parse_args(argv)


# -- json -----------------------------------------------------------------------------------------------------
def test_json_is_grouped_per_node_and_keeps_the_lanes_by_key() -> None:
    fragment = capabilities.capability_fragment(fleet_document())
    assert set(fragment["lanes"]) == {"gpu-a/dense", "gpu-a/moe", "gpu-b/dense", "gpu-b/moe", "dense", "moe"}
    assert set(fragment["nodes"]) == {"gpu-a", "gpu-b", "local"}
    assert fragment["nodes"]["gpu-a"]["labels"] == {"gpu": "h100"} and fragment["nodes"]["local"]["labels"] == {}
    a = fragment["nodes"]["gpu-a"]["lanes"]["dense"]
    assert (a["max_useful_concurrency"], a["valid"], a["status"], a["throughput_tok_s"]) == (8, True, "ok", 800.0)
    assert a["fingerprint_digest"] == "sha256:gpu-a-dense" and a["run_id"] == "r-fleet" and "reason" not in a
    changed = fragment["nodes"]["gpu-b"]["lanes"]["dense"]
    assert (changed["valid"], changed["status"], changed["max_useful_concurrency"]) == (False, "stale", 6)
    assert "settings.slots" in changed["reason"]
    never = fragment["nodes"]["gpu-b"]["lanes"]["moe"]
    assert (never["max_useful_concurrency"], never["valid"], never["status"]) == (None, None, "insufficient_data")
    assert fragment["nodes"]["local"]["lanes"]["dense"]["valid"] is None
    for key, entry in fragment["lanes"].items():  # the flat view is the grouped one plus node and lane
        grouped = fragment["nodes"][entry["node"]]["lanes"][entry["lane"]]
        assert {k: v for k, v in entry.items() if k not in ("node", "lane")} == grouped, key
    assert fragment["lanes"]["dense"]["node"] == "local" and fragment["lanes"]["gpu-a/moe"]["lane"] == "moe"


def test_json_of_a_v1_document_reads_as_it_always_did() -> None:
    fragment = capabilities.capability_fragment(v1_document())
    dense, moe = fragment["lanes"]["dense"], fragment["lanes"]["moe"]
    assert (dense["max_useful_concurrency"], dense["throughput_tok_s"], dense["status"]) == (4, 812.5, "ok")
    assert (dense["run_id"], dense["measured_at"], dense["valid"]) == ("r1", "2026-11-29T10:19:40Z", None)
    assert moe["max_useful_concurrency"] is None and moe["reason"] == "1 step window(s)"
    assert fragment["nodes"] == {"local": {"labels": {}, "lanes": {
        name: {k: v for k, v in entry.items() if k not in ("node", "lane")}
        for name, entry in fragment["lanes"].items()}, "shared_hardware": True,
        "capacity_rule": capabilities.CAPACITY_RULE}}
    assert fragment["schema"] == "satbench.recommendations/v1"


def test_lanes_of_one_node_say_they_share_its_hardware_and_what_they_can_take_together() -> None:
    fragment = capabilities.capability_fragment(fleet_document())
    a = fragment["nodes"]["gpu-a"]
    assert a["shared_hardware"] is True and "measured with the others idle" in a["capacity_rule"]
    dense, moe = a["lanes"]["dense"], a["lanes"]["moe"]
    assert dense["shares_hardware_with"] == ["gpu-a/moe"] and moe["shares_hardware_with"] == ["gpu-a/dense"]
    # the node's budget, sum of in-flight / answer <= 1, split evenly between its two lanes
    assert (dense["max_useful_concurrency"], dense["max_useful_concurrency_together"]) == (8, 4)
    assert moe["max_useful_concurrency_together"] == max(1, moe["max_useful_concurrency"] // 2)
    budget = sum(e["max_useful_concurrency_together"] / e["max_useful_concurrency"] for e in (dense, moe))
    assert budget <= 1.0
    never = fragment["nodes"]["gpu-b"]["lanes"]["moe"]
    assert never["max_useful_concurrency_together"] is None and never["shares_hardware_with"] == ["gpu-b/dense"]
    alone = capabilities.capability_fragment({**fleet_document(), "nodes": {}, "lanes": {
        "solo/dense": answer(6, node="solo", lane="dense")}})
    assert alone["nodes"]["solo"]["shared_hardware"] is False and alone["nodes"]["solo"]["capacity_rule"] is None
    assert alone["lanes"]["solo/dense"]["max_useful_concurrency_together"] == 6
    config, _ = capabilities.litellm_config(fleet_document(), node_share="together")
    shared = by_id(config)["satbench:gpu-a/dense"]
    assert shared["litellm_params"]["max_parallel_requests"] == shared["litellm_params"]["weight"] == 4
    assert shared["model_info"]["satbench_shares_hardware_with"] == ["gpu-a/moe"]
    assert by_id(capabilities.litellm_config(fleet_document())[0])["satbench:gpu-a/dense"]["litellm_params"][
        "max_parallel_requests"] == 8  # alone, the default: the answer as measured


def test_a_lane_the_node_index_lists_without_an_answer_is_reported_not_dropped() -> None:
    doc = fleet_document()
    doc["nodes"]["gpu-c"] = {"labels": {"gpu": "a10"}, "lanes": ["gpu-c/dense"]}
    entry = capabilities.capability_fragment(doc)["nodes"]["gpu-c"]["lanes"]["dense"]
    assert entry["max_useful_concurrency"] is None and "no answer" in entry["reason"]
    config, notes = capabilities.litellm_config(doc)
    assert not any(d["model_info"]["id"] == "satbench:gpu-c/dense" for d in config["model_list"])
    assert any(n.startswith("lane gpu-c/dense: no answer") and "--api-base gpu-c/dense=URL" in n for n in notes)


# -- prometheus -----------------------------------------------------------------------------------------------
def test_prometheus_series_carry_node_and_lane_and_tell_the_three_cases_apart() -> None:
    got = samples(capabilities.prometheus_text(fleet_document()))
    names = {name for name, _ in got}
    assert set(OLD_FAMILIES) <= names, "every existing name is kept"
    rec = "satbench_recommended_concurrency"
    assert got[(rec, at("gpu-a", "dense"))] == 8 and got[(rec, at("gpu-b", "dense"))] == 6
    assert got[(rec, at(None, "dense"))] == 4, "a local lane carries no node label, as its exporter's series"
    assert (rec, at("gpu-b", "moe")) not in got, "never measured: no sample, never 0"
    valid = "satbench_recommendation_valid"
    assert got[(valid, at("gpu-a", "dense"))] == 1 and got[(valid, at("gpu-b", "dense"))] == 0
    assert (valid, at("gpu-b", "moe")) not in got and (valid, at(None, "dense")) not in got, "unknown: absent"
    state = "satbench_recommendation_validity"
    for node, lane, expected in (("gpu-a", "dense", "valid"), ("gpu-b", "dense", "changed"),
                                 ("gpu-b", "moe", "unknown"), (None, "dense", "unknown"), (None, "moe", "valid")):
        one_hot = {s: got[(state, at(node, lane, state=s))] for s in ("valid", "changed", "unknown")}
        assert one_hot == {s: 1.0 if s == expected else 0.0 for s in one_hot}, (node, lane)
    assert got[("satbench_recommendation_status", at("gpu-b", "moe", status="insufficient_data",
                                                     binding_constraint=""))] == 1
    assert got[("satbench_verdict_ok", at("gpu-a", "moe", check="prefill_starvation"))] == 0
    assert got[("satbench_recommendations_stale", frozenset())] == 0


def test_prometheus_of_a_v1_document_is_todays_series_plus_validity_unknown() -> None:
    got = samples(capabilities.prometheus_text(v1_document()))
    assert got[("satbench_recommended_concurrency", at(None, "dense"))] == 4
    assert got[("satbench_saturation_concurrency", at(None, "dense"))] == 4
    assert not any(dict(labels).get("node") for _, labels in got)
    assert not any(name == "satbench_recommendation_valid" for name, _ in got)
    assert got[("satbench_recommendation_validity", at(None, "moe", state="unknown"))] == 1
    assert [f.name for f in answer_families(None)] == [f.name for f in answer_families(read_document(v1_document()))]


@pytest.mark.parametrize("document", [fleet_document(), v1_document()], ids=["v2-fleet", "v1"])
def test_prometheus_text_is_what_the_recommenders_metrics_serves(document: dict[str, Any],
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    async def analyzer(manifest: RunManifest, run_dir: Path | None) -> dict[str, Any]:
        return copy.deepcopy(document)

    settings = RecommenderSettings(prometheus_url=f"http://127.0.0.1:{free_port()}", refresh_interval_s=3600,
                                   prometheus_timeout_s=1.0, write_token="formats-write-token-0")
    manifest = RunManifest(run_id="r-fleet", created_at=1.0, steps=(StepWindow("dense", 1, 10.0, 40.0),))
    with serve(create_app(settings, analyzer=analyzer, background_refresh=False)) as url:
        assert httpx.post(f"{url}/runs", json=manifest.to_dict(), timeout=30,
                          headers={"Authorization": "Bearer formats-write-token-0"}).status_code == 201
        served = httpx.get(f"{url}/recommendations", timeout=10).json()
        scraped = httpx.get(f"{url}/metrics", timeout=10).text
        assert capabilities_cli.main(parse_args("--url", url, "--format", "prometheus")) == 1  # some lane unanswered
    assert scraped == exposition(served) == exposition(document)
    assert capsys.readouterr().out == scraped
    assert samples(scraped) == samples(capabilities.prometheus_text(document))


# -- litellm --------------------------------------------------------------------------------------------------
def by_id(config: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {d["model_info"]["id"]: d for d in config["model_list"]}


def test_litellm_model_list_has_one_deployment_per_node_and_lane() -> None:
    config, notes = capabilities.litellm_config(fleet_document(), api_bases={"dense": "http://127.0.0.1:8080"})
    assert yaml.safe_load(json.dumps(config, indent=2)) == config, "the JSON output is LiteLLM-loadable YAML"
    deployments = by_id(config)
    assert sorted(deployments) == sorted(f"satbench:{k}" for k in (
        "gpu-a/dense", "gpu-a/moe", "gpu-b/dense", "gpu-b/moe", "local/dense", "local/moe"))
    for d in config["model_list"]:  # only LiteLLM's documented fields
        assert set(d) == {"model_name", "litellm_params", "model_info"}
        assert set(d["litellm_params"]) == {"model", "api_base", "api_key", "max_parallel_requests", "weight"}
        assert d["litellm_params"]["model"].startswith("openai/") and d["litellm_params"]["api_base"].endswith("/v1")
        assert d["litellm_params"]["weight"] == d["litellm_params"]["max_parallel_requests"] >= 1
        assert d["litellm_params"]["api_key"] == "none"
    a = deployments["satbench:gpu-a/dense"]
    assert a["model_name"] == "dense" and a["litellm_params"] == {
        "model": "openai/dense", "api_base": "http://gpu-a:8080/v1", "api_key": "none",
        "max_parallel_requests": 8, "weight": 8}
    assert a["model_info"]["satbench_node"] == "gpu-a" and a["model_info"]["satbench_validity"] == "valid"
    moe = deployments["satbench:gpu-a/moe"]["litellm_params"]
    assert moe["model"] == "openai/moe-30b" and moe["api_base"] == "http://gpu-a:8081/v1"
    assert deployments["satbench:local/dense"]["litellm_params"]["api_base"] == "http://127.0.0.1:8080/v1"
    # the lanes of one name on three nodes are one model group
    assert [d["model_name"] for d in config["model_list"]].count("dense") == 3
    # no usable answer: published serial, said in model_info and on a line each
    changed, never = deployments["satbench:gpu-b/dense"], deployments["satbench:gpu-b/moe"]
    assert changed["litellm_params"]["max_parallel_requests"] == never["litellm_params"]["max_parallel_requests"] == 1
    assert changed["model_info"]["satbench_validity"] == "changed"
    assert "settings.slots" in changed["model_info"]["satbench_reason"]
    assert never["model_info"]["satbench_status"] == "insufficient_data"
    assert never["model_info"]["satbench_recommended_concurrency"] is None
    assert [n.split(":")[0] for n in notes] == ["lane gpu-b/dense", "lane gpu-b/moe"]
    assert all("max_parallel_requests 1" in n for n in notes)


def test_litellm_options_rename_groups_omit_unanswered_and_name_keys() -> None:
    doc = fleet_document()
    manifest = {"lanes": {"gpu-a/dense": {"api_key_env": "GPU_A_KEY"}}}  # the run's manifest names the key
    config, notes = capabilities.litellm_config(doc, model_names={"dense": "llama-8b", "gpu-a/moe": "qwen-moe"},
                                                unanswered="omit", provider="llamafile", manifest=manifest)
    deployments = by_id(config)
    assert "satbench:gpu-b/dense" not in deployments and "satbench:gpu-b/moe" not in deployments
    assert "satbench:local/dense" not in deployments, "no URL anywhere: left out"
    assert any(n.startswith("lane dense:") and "--api-base dense=URL" in n for n in notes)
    assert sum("--unanswered omit" in n for n in notes) == 2
    assert deployments["satbench:gpu-a/dense"]["model_name"] == "llama-8b"
    assert deployments["satbench:gpu-a/moe"]["model_name"] == "qwen-moe"
    assert deployments["satbench:local/moe"]["model_name"] == "moe"
    assert deployments["satbench:gpu-a/dense"]["litellm_params"]["api_key"] == "os.environ/GPU_A_KEY"
    assert deployments["satbench:gpu-a/dense"]["litellm_params"]["model"] == "llamafile/dense"


def test_a_stale_answer_of_an_unreachable_source_keeps_its_number() -> None:
    doc = v1_document()
    doc["stale"] = True
    doc["lanes"]["dense"].update(status="stale", last_status="ok", url="http://127.0.0.1:8080")
    config, notes = capabilities.litellm_config(doc)
    assert [n.split(":")[0] for n in notes] == ["lane moe"], "only the unanswered lane is said"
    (dense,) = [d for d in config["model_list"] if d["model_info"]["satbench_lane"] == "dense"]
    assert dense["litellm_params"]["max_parallel_requests"] == 4 and dense["model_info"]["id"] == "satbench:local/dense"
    assert samples(capabilities.prometheus_text(doc))[("satbench_recommendations_stale", frozenset())] == 1


# -- the command ----------------------------------------------------------------------------------------------
def test_file_of_a_run_folder_reads_urls_from_its_manifest(tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "recommendations.json").write_text(json.dumps(fleet_document()))
    (tmp_path / "manifest.json").write_text(json.dumps({"lanes": {"dense": {"url": "http://127.0.0.1:8090"}}}))
    assert capabilities_cli.main(parse_args("--file", str(tmp_path), "--format", "litellm")) == 1
    out, err = capsys.readouterr()
    deployments = by_id(yaml.safe_load(out))
    assert deployments["satbench:local/dense"]["litellm_params"]["api_base"] == "http://127.0.0.1:8090/v1"
    assert len(deployments) == 6
    lines = err.strip().splitlines()
    assert len(lines) == 2 and all(line.startswith("satbench capabilities: lane gpu-b/") for line in lines)

    assert capabilities_cli.main(parse_args("--file", str(tmp_path / "recommendations.json"))) == 1
    out, err = capsys.readouterr()
    assert json.loads(out) == capabilities.capability_fragment(fleet_document())
    assert "lane gpu-b/dense: measured on something else" in err and "lane gpu-b/moe: no answer" in err

    assert capabilities_cli.main(parse_args("--file", str(tmp_path), "--format", "prometheus")) == 1
    assert capsys.readouterr().out == exposition(fleet_document())


def test_exit_status_zero_when_every_lane_is_answered_two_for_bad_input(tmp_path: Path,
                                                                        capsys: pytest.CaptureFixture[str]) -> None:
    doc = fleet_document()
    for key in ("gpu-b/dense", "gpu-b/moe", "dense"):
        del doc["lanes"][key]
    doc["nodes"] = {"gpu-a": doc["nodes"]["gpu-a"] | {"lanes": ["gpu-a/dense", "gpu-a/moe"]},
                    "local": {"labels": {}, "lanes": ["moe"]}}
    path = tmp_path / "answered.json"
    path.write_text(json.dumps(doc))
    for fmt in capabilities.FORMATS:
        assert capabilities_cli.main(parse_args("--file", str(path), "--format", fmt)) == 0, fmt
        assert capsys.readouterr().err == ""
    assert capabilities_cli.main(parse_args("--file", str(path), "--format", "litellm", "--unanswered", "omit")) == 0
    capsys.readouterr()
    doc["lanes"]["moe"]["url"] = None  # answered, but nowhere to send: left out, 1
    path.write_text(json.dumps(doc))
    assert capabilities_cli.main(parse_args("--file", str(path), "--format", "litellm")) == 1
    assert "lane moe: left out of model_list: no runtime URL" in capsys.readouterr().err

    assert capabilities_cli.main(parse_args("--file", str(tmp_path / "missing.json"))) == 2
    (tmp_path / "junk.json").write_text("{oops")
    assert capabilities_cli.main(parse_args("--file", str(tmp_path / "junk.json"))) == 2
    assert capabilities_cli.main(parse_args("--file", str(path), "--api-base", "moe=127.0.0.1:1")) == 2
    assert capabilities_cli.main(parse_args("--file", str(path), "--model-name", "moe")) == 2
    err = capsys.readouterr().err
    assert "--file" in err and "--api-base" in err and "--model-name" in err
    with pytest.raises(SystemExit) as raised:
        parse_args("--url", "http://127.0.0.1:9108", "--file", str(path))
    assert raised.value.code == 2


def test_prometheus_series_state_each_answers_energy_and_cost() -> None:
    """The energy at the concurrency and rate answers, as the document states them; none where it says none."""
    doc = fleet_document()
    energy = {"concurrency": 8, "scope": "gpu", "source": "counter", "simulated": False, "watts": 400.0,
              "joules_per_token": 0.5, "tokens_per_joule": 2.0, "tok_s_per_kw": 2000.0, "throughput_tok_s": 800.0,
              "price_per_hour": 2.88, "currency": "EUR", "cost_per_million_tokens": 1.0}
    doc["lanes"]["gpu-a/dense"]["energy"] = energy
    doc["lanes"]["gpu-a/moe"]["energy"] = {**energy, "concurrency": 4, "scope": None, "source": None, "watts": None,
                                           "joules_per_token": None, "tokens_per_joule": None, "tok_s_per_kw": None,
                                           "price_per_hour": None, "currency": None, "cost_per_million_tokens": None,
                                           "reason": "no energy reading"}
    got = samples(capabilities.prometheus_text(doc))
    assert got[("satbench_answer_joules_per_token", at("gpu-a", "dense", answer="concurrency", scope="gpu"))] == 0.5
    assert got[("satbench_answer_tokens_per_s_per_kw", at("gpu-a", "dense", answer="concurrency", scope="gpu"))] \
        == 2000.0
    assert got[("satbench_answer_cost_per_million_tokens", at("gpu-a", "dense", answer="concurrency",
                                                              currency="EUR"))] == 1.0
    assert not any(name.startswith("satbench_answer_") and ("lane", "moe") in labels and ("node", "gpu-a") in labels
                   for name, labels in got), "no reading: no sample, never 0"
