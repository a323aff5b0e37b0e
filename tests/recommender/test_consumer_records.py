"""``satbench capabilities --format keda|kserve|llm-d|epp|wva`` and ``GET /capabilities?format=``.

Each generated object is validated offline against its consumer's published schema, committed under
``crds/``: the KEDA ScaledObject CRD (v2.20.2), the KServe LLMInferenceService CRD's ``spec.scaling``
(master after kserve #5839, the first with ``keda.triggers``), llm-d's calibration record (PR #2938's Go
struct) and the endpoint picker's utilization-detector parameters. The CRDs are checked strictly: a property a
schema does not declare is refused where the API server would prune it (``strict``). The thresholds' expected
values are the scenario's (the fleet of ``test_capabilities_formats``: gpu-a/dense 8 valid, gpu-b/dense 6
measured on something else, local dense 4 unchecked), and a stale record comes from the validity check itself
(``recommender.validity.validity_of`` on a live fingerprint whose slots differ), not from the code under test.
"""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

import httpx
import jsonschema
import pytest
import yaml
from pydantic import SecretStr

from satbench.answer.document import read_document
from satbench.core.lane_evidence import FingerprintModel
from satbench.core.manifest import RunManifest, StepWindow
from satbench.recommender import capabilities, capabilities_cli
from satbench.recommender.app import create_app
from satbench.recommender.keda import AutoscalerOptions, keda_scaled_objects, kserve_scaling
from satbench.recommender.record_formats import ALL_FORMATS, RECORD_FORMATS, render_record
from satbench.recommender.settings import RecommenderSettings
from satbench.recommender.validity import validity_of
from testkit.net import free_port
from tests.recommender.server import serve
from tests.recommender.test_capabilities_formats import fleet_document, parse_args, samples

CRDS = Path(__file__).with_name("crds")
SAMPLE = Path(__file__).parents[2] / "docs" / "recommendations-sample.json"
DNS_1123 = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


def strict(schema: Any) -> Any:
    """``schema`` with ``additionalProperties: false`` wherever it lists properties and says nothing of others
    (a structural CRD schema prunes what it does not declare; here that is an error)."""
    if isinstance(schema, dict):
        out = {k: strict(v) for k, v in schema.items()}
        if "properties" in out and "additionalProperties" not in out \
                and not out.get("x-kubernetes-preserve-unknown-fields"):
            out["additionalProperties"] = False
        return out
    if isinstance(schema, list):
        return [strict(v) for v in schema]
    return schema


def validator(name: str, *, crd: bool = True) -> jsonschema.Draft7Validator:
    schema = json.loads((CRDS / name).read_text())
    return jsonschema.Draft7Validator(strict(schema) if crd else schema)


KEDA = validator("keda_scaledobject.schema.json")
KSERVE_SCALING = validator("kserve_llminferenceservice_scaling.schema.json")
LLMD = validator("llmd_prefill_calibration.schema.json", crd=False)
EPP = validator("epp_utilization_detector.schema.json", crd=False)
AIBRIX = validator("aibrix_gpu_profile.schema.json", crd=False)


def errors(v: jsonschema.Draft7Validator, instance: Any) -> list[str]:
    return [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in v.iter_errors(instance)]


def check_metadata(meta: dict[str, Any]) -> None:
    """What the API server asks of any object's metadata: a DNS-1123 name, string annotations and labels."""
    assert DNS_1123.match(meta["name"]) and len(meta["name"]) <= 253, meta["name"]
    assert all(isinstance(v, str) for v in meta["annotations"].values())
    assert all(isinstance(v, str) for v in meta["labels"].values())


def llmd_applies(record: dict[str, Any], want: str) -> str | None:
    """llm-d's consumer rules (PR #2938's usable() and matchesFingerprint()): None where it would apply the
    record, else why not."""
    if record["schema_version"] != 1:
        return "schema_version"
    if record["status"] != "OK":
        return f"status {record['status']}"
    value, median = record["peak_prefill_tokens_per_second"], record["median_ttft_seconds"]
    if value is None or not value > 0 or record["chunk_tokens"] in (None, 0) or record["valid_samples"] < 10 \
            or median is None or not median > 0:
        return "incomplete"
    return None if record["fingerprint"] and record["fingerprint"] == want else "fingerprint"


def sample() -> dict[str, Any]:
    return json.loads(SAMPLE.read_text())


def with_rate(doc: dict[str, Any], key: str, rps: float, status: str = "settled") -> dict[str, Any]:
    doc["lanes"][key]["rate"] = {
        "status": status, "reason": None, "max_rate_rps": rps, "max_rate_rpm": int(rps * 60),
        "interval": [rps, rps * 1.25], "goodput_rps": rps, "goodput_tok_s": None, "attainment": 0.95,
        "attainment_target": 0.9, "binding_objective": "ttft", "curve": [], "littles_law": None}
    return doc


def documents() -> list[dict[str, Any]]:
    return [fleet_document(), sample(), with_rate(fleet_document(), "gpu-a/dense", 2.5)]


# -- the published schemas ------------------------------------------------------------------------------------
@pytest.mark.parametrize("document", documents(), ids=["fleet", "sample", "fleet-rate"])
def test_keda_scaled_objects_validate_against_the_crd(document: dict[str, Any]) -> None:
    options = AutoscalerOptions(namespace="satbench", auth_ref="satbench-store-reader",
                                scale_targets={"dense": "StatefulSet/llamacpp"})
    for doc_options in (None, options):
        listed = keda_scaled_objects(read_document(document), doc_options)
        assert listed["kind"] == "List" and listed["items"]
        for item in listed["items"]:
            assert errors(KEDA, item) == []
            check_metadata(item["metadata"])


@pytest.mark.parametrize("document", documents(), ids=["fleet", "sample", "fleet-rate"])
def test_kserve_scaling_validates_against_the_crd_and_its_rules(document: dict[str, Any]) -> None:
    for item in kserve_scaling(read_document(document))["items"]:
        assert (item["apiVersion"], item["kind"]) == ("serving.kserve.io/v1alpha2", "LLMInferenceService")
        scaling = item["spec"]["scaling"]
        assert errors(KSERVE_SCALING, scaling) == []
        check_metadata(item["metadata"])
        # the CRD's x-kubernetes-validations (CEL) on spec.scaling, which jsonschema does not read
        assert ("keda" in scaling) != ("wva" in scaling)
        assert len(scaling["keda"]["triggers"]) > 0
        assert scaling["minReplicas"] <= scaling["maxReplicas"]


def test_the_schemas_refuse_what_the_api_server_would() -> None:
    """The checks can fail: a misspelt field, a number where a string goes, no triggers."""
    item = keda_scaled_objects(read_document(fleet_document()))["items"][0]
    bad = copy.deepcopy(item)
    bad["spec"]["trigers"] = bad["spec"].pop("triggers")
    assert errors(KEDA, bad)
    bad = copy.deepcopy(item)
    bad["spec"]["triggers"][0]["metadata"]["threshold"] = 4
    assert errors(KEDA, bad)
    scaling = kserve_scaling(read_document(fleet_document()))["items"][0]["spec"]["scaling"]
    assert errors(KSERVE_SCALING, {**scaling, "keda": {"triggers": []}})
    assert errors(KSERVE_SCALING, {**scaling, "keda": {"triggerz": scaling["keda"]["triggers"]}})
    record = render_record(read_document(sample()), "llm-d")["records"]["dense"]
    assert errors(LLMD, {**record, "chunk_tokens": "2048"})
    assert errors(EPP, {"queueDepthThreshold": 0}) and errors(EPP, {"queueDepth": 2})


@pytest.mark.parametrize("document", documents(), ids=["fleet", "sample", "fleet-rate"])
def test_router_records_validate_against_their_consumers_fields(document: dict[str, Any]) -> None:
    doc = read_document(document)
    keys = set(doc.lanes) | {k for n in doc.nodes.values() for k in n.lanes}
    llmd = render_record(doc, "llm-d")["records"]
    epp = render_record(doc, "epp")["endpoints"]
    wva = render_record(doc, "wva")["variants"]
    assert set(llmd) == set(epp) == set(wva) == keys  # every lane, answered or not
    for key in keys:
        assert errors(LLMD, llmd[key]) == []
        assert errors(EPP, epp[key]["parameters"]) == []
        assert wva[key]["saturation"]["queueLengthThreshold"] == epp[key]["parameters"]["queueDepthThreshold"]
        # none of these documents walked peak prefill: llm-d's consumer must refuse the record and keep its own
        assert llmd_applies(llmd[key], str(llmd[key]["fingerprint"])) is not None


# -- the thresholds come from the answers ---------------------------------------------------------------------
def test_keda_thresholds_are_the_groups_smallest_usable_answer_and_its_rate() -> None:
    items = {i["metadata"]["name"]: i for i in keda_scaled_objects(read_document(fleet_document()))["items"]}
    dense, moe = items["satbench-dense"], items["satbench-moe"]
    # dense: gpu-a 8 (valid), gpu-b 6 (measured on something else: not used), local 4 (unchecked: used)
    assert [t["metadata"]["threshold"] for t in dense["spec"]["triggers"]] == ["4"]
    assert dense["metadata"]["annotations"]["satbench.io/threshold-from"] == "dense"
    assert dense["metadata"]["annotations"]["satbench.io/stale"] == "true"
    assert "gpu-b/dense: measured on something else" in dense["metadata"]["annotations"]["satbench.io/reason"]
    # moe: gpu-a 4, gpu-b never measured, local 2
    assert [t["metadata"]["threshold"] for t in moe["spec"]["triggers"]] == ["2"]
    query = dense["spec"]["triggers"][0]["metadata"]["query"]
    assert query == 'sum(runtime_requests_processing{lane="dense"}) + sum(runtime_queue_depth{lane="dense"})'

    rated = with_rate(with_rate(fleet_document(), "gpu-a/dense", 2.5), "dense", 1.75)
    triggers = {t["name"]: t["metadata"] for t in
                keda_scaled_objects(read_document(rated))["items"][0]["spec"]["triggers"]}
    assert triggers["requests-per-second-per-replica"]["threshold"] == "1.75"
    assert 'runtime_relay_requests_total{route!="other",lane="dense"}[60000ms]' in \
        triggers["requests-per-second-per-replica"]["query"]
    only_one = with_rate(fleet_document(), "gpu-a/dense", 2.5)  # local dense has none: no rate trigger
    assert len(keda_scaled_objects(read_document(only_one))["items"][0]["spec"]["triggers"]) == 1


def test_a_lane_name_cannot_leave_its_label_value() -> None:
    doc = fleet_document()
    lane = doc["lanes"].pop("gpu-a/dense")
    lane["lane"] = 'de"n}se\\'
    doc["lanes"]['gpu-a/de"n}se\\'] = lane
    doc["nodes"]["gpu-a"]["lanes"] = ['gpu-a/de"n}se\\', "gpu-a/moe"]
    names = [i["metadata"]["name"] for i in keda_scaled_objects(read_document(doc))["items"]]
    assert len(set(names)) == len(names) == 3
    item = next(i for i in keda_scaled_objects(read_document(doc))["items"]
                if i["metadata"]["name"].startswith("satbench-de-n-se-"))
    assert 'lane="de\\"n}se\\\\"' in item["spec"]["triggers"][0]["metadata"]["query"]
    assert errors(KEDA, item) == []
    check_metadata(item["metadata"])


def test_a_group_with_no_usable_answer_keeps_its_object_at_one_request_per_replica() -> None:
    doc = fleet_document()
    doc["lanes"] = {k: v for k, v in doc["lanes"].items() if k.startswith("gpu-b/")}
    doc["nodes"] = {"gpu-b": doc["nodes"]["gpu-b"]}
    for fmt in ("keda", "kserve"):
        items = render_record(read_document(doc), fmt)["items"]
        assert len(items) == 2  # dense (stale) and moe (never measured), neither dropped
        triggers = items[0]["spec"]["triggers"] if fmt == "keda" else items[0]["spec"]["scaling"]["keda"]["triggers"]
        assert [t["metadata"]["threshold"] for t in triggers] == ["1"]
        assert {i["metadata"]["annotations"]["satbench.io/usable"] for i in items} == {"false"}


@pytest.mark.parametrize(("answer", "slots", "expected"), [(6, 4, 2), (4, 4, 1), (3, 4, 1), (12, 4, 8), (6, None, 1)])
def test_the_pickers_queue_threshold_is_the_answer_beyond_the_slots(answer: int, slots: int | None,
                                                                    expected: int) -> None:
    doc = sample()
    lane = doc["lanes"]["dense"]
    lane["recommended_concurrency"] = answer
    lane["fingerprint"]["settings"]["slots"] = slots
    epp = render_record(read_document(doc), "epp")["endpoints"]["dense"]
    assert epp["parameters"] == {"queueDepthThreshold": expected}
    assert render_record(read_document(doc), "wva")["variants"]["dense"]["max_concurrency"] == answer


@pytest.mark.parametrize(("unified", "per_slot", "slots", "expected"),
                         [(True, 32768, 4, 32768), (False, 4096, 4, 16384), (False, 4096, None, None),
                          (None, 4096, 2, 8192)])
def test_the_kv_capacity_is_the_cache_the_runtime_holds(unified: bool | None, per_slot: int, slots: int | None,
                                                        expected: int | None) -> None:
    doc = sample()
    settings = doc["lanes"]["dense"]["fingerprint"]["settings"]
    settings.update(kv_unified=unified, ctx_per_slot=per_slot, slots=slots)
    assert render_record(read_document(doc), "wva")["variants"]["dense"]["kv_capacity_tokens"] == expected


def test_the_llmd_record_names_what_the_answer_was_measured_on() -> None:
    fingerprint = sample()["lanes"]["dense"]["fingerprint"]
    record = render_record(read_document(sample()), "llm-d")["records"]["dense"]
    assert record["fingerprint"] == fingerprint["digest"]
    assert record["engine_image_digest"] == "sha256:" + fingerprint["runtime"]["binary_sha256"]
    assert record["model_revision"] == fingerprint["model"]["path"]  # no file hashes in the sample
    assert (record["chunk_tokens"], record["satbench"]["ubatch_tokens"]) == (2048, 512)
    assert record["status"] == "NOT_RUN" and record["peak_prefill_tokens_per_second"] is None
    assert record["satbench"]["measured_at"] == sample()["lanes"]["dense"]["measured_at"]


def with_prefill(doc: dict[str, Any], key: str, peak: float, requests: int = 40,
                 status: str = "settled") -> dict[str, Any]:
    """``doc`` with a peak-prefill answer on lane ``key``, as ``answer.prefill_analysis`` lays it out."""
    rung = {"concurrency": 4, "prompt_tok_s": peak, "interval": [peak * 0.98, peak * 1.02], "requests": requests,
            "median_ttft_s": 0.42, "valid": True, "reason": None}
    doc["lanes"][key]["prefill"] = {
        "status": status, "reason": "prompt tokens/s stopped gaining", "peak_prompt_tok_s": peak,
        "interval": rung["interval"], "concurrency": 4, "requests": requests, "median_ttft_s": 0.42,
        "prompt_tokens": [2048, 2048], "prompt_tokens_asked": 2048, "batch_tokens": 2048, "ubatch_tokens": 512,
        "rungs": [rung]}
    return doc


def test_a_measured_peak_prefill_is_a_record_llmd_applies() -> None:
    doc = with_prefill(sample(), "dense", 9394.5)
    record = render_record(read_document(doc), "llm-d")["records"]["dense"]
    assert errors(LLMD, record) == []
    assert record["status"] == "OK" and llmd_applies(record, doc["lanes"]["dense"]["fingerprint"]["digest"]) is None
    assert (record["peak_prefill_tokens_per_second"], record["median_ttft_seconds"], record["valid_samples"]) \
        == (9394.5, 0.42, 40)
    assert record["satbench"]["prefill_interval"] == [9394.5 * 0.98, 9394.5 * 1.02]
    assert llmd_applies(record, "sha256:another-node") == "fingerprint"  # applied only where it was measured
    # a lower bound is served, saying so; a peak of fewer than the consumer's 10 samples is not
    lower = render_record(read_document(with_prefill(sample(), "dense", 5000.0, status="unsaturated")), "llm-d")
    assert lower["records"]["dense"]["status"] == "OK"
    assert "lower bound" in lower["records"]["dense"]["satbench"]["status_reason"]
    thin = render_record(read_document(with_prefill(sample(), "dense", 9394.5, requests=9)), "llm-d")
    assert thin["records"]["dense"]["status"] == "NOT_RUN"
    assert thin["records"]["dense"]["peak_prefill_tokens_per_second"] is None


def test_a_measured_peak_prefill_on_a_changed_node_is_stale() -> None:
    doc = with_prefill(_checked(4), "dense", 9394.5)
    record = render_record(read_document(doc), "llm-d")["records"]["dense"]
    assert record["status"] == "STALE" and record["peak_prefill_tokens_per_second"] is None
    assert llmd_applies(record, doc["lanes"]["dense"]["fingerprint"]["digest"]) == "status STALE"


def aibrix_shape_errors(profile: dict[str, Any]) -> list[str]:
    """What AIBrix's optimizer would refuse beyond the schema: matrices of the indexes' shape, indexes ascending."""
    outputs, inputs = profile["indexes"]
    shape = (len(outputs), len(inputs))
    problems = [f"{name} is not {shape}" for name in ("tputs", "e2e")
                if (len(profile[name]), *{len(row) for row in profile[name]}) != shape]
    return problems + [f"indexes {axis} not ascending" for axis in (outputs, inputs) if axis != sorted(set(axis))]


def _kind(lane: dict[str, Any], slots: int, prompt: int) -> dict[str, Any]:
    lane = copy.deepcopy(lane)
    lane["fingerprint"]["settings"]["slots"] = slots
    lane["fingerprint"]["workload"]["values"]["prompt_tokens"] = {"kind": "fixed", "value": prompt}
    return lane


def test_aibrix_profiles_are_the_answers_by_length_one_grid_per_model() -> None:
    doc = sample()
    base = doc["lanes"]["dense"]
    # two nodes of one kind at 64-token prompts (the lesser answer holds for both), one of another kind at 512
    doc["lanes"] = {"a/dense": base, "b/dense": copy.deepcopy(base), "c/dense": _kind(base, 8, 512)}
    for key, node in (("a/dense", "a"), ("b/dense", "b"), ("c/dense", "c")):
        doc["lanes"][key]["node"] = node
    doc["nodes"] = {n: {"labels": {}, "lanes": [f"{n}/dense"]} for n in "abc"}
    with_rate(doc, "b/dense", 2.5)
    with_rate(doc, "a/dense", 3.0)
    record = render_record(read_document(doc), "aibrix")
    profiles = record["profiles"]
    assert len(profiles) == 2 and record["unplaced"] == {}
    for profile in profiles.values():
        assert errors(AIBRIX, profile) == [] and aibrix_shape_errors(profile) == []
        assert profile["indexes"] == [[64], [64, 512]]  # one grid for the model's kinds: AIBrix refuses two
    by_slots = {p["satbench"]["cells"][0]["lane_key"]: p for p in profiles.values()}
    assert by_slots["b/dense"]["tputs"] == [[2.5, 0.0]]  # the rate answer, the lesser of a's and b's
    assert by_slots["b/dense"]["satbench"]["cells"][0]["source"] == "rate answer (settled)"
    steps = {s["concurrency"]: s for s in base["steps"]}
    closed = steps[base["recommended_concurrency"]]
    assert by_slots["c/dense"]["tputs"] == [[0.0, closed["requests_per_s"]]]  # no rate walked: the closed loop
    assert by_slots["c/dense"]["e2e"] == [[0.0, closed["latency_s"]["mean"]]]
    named = render_record(read_document(sample()), "aibrix", AutoscalerOptions(scale_targets={"dense": "llama-8b"}))
    assert list(named["profiles"]) == ["llama-8b"]  # the Deployment AIBrix matches the profile to
    assert errors(AIBRIX, {**profiles[next(iter(profiles))], "slos": {"percentile": 95}})


# -- a changed fingerprint is stale in every format -----------------------------------------------------------
def _checked(slots_live: int) -> dict[str, Any]:
    """The sample's answer checked against a live fingerprint whose slots are ``slots_live`` (measured: 1)."""
    doc = sample()
    lane = doc["lanes"]["dense"]
    live = copy.deepcopy(lane["fingerprint"])
    live["settings"]["slots"] = slots_live
    validity = validity_of(FingerprintModel.model_validate(lane["fingerprint"]), [live], now=1.8e9)
    lane["validity"] = validity.model_dump(mode="json")
    if validity.state == "changed":
        lane["status"], lane["last_status"] = "stale", "ok"
    return doc


def stale_in(fmt: str, document: dict[str, Any]) -> bool:
    """Whether ``fmt``'s rendering of ``document`` says its one lane is stale, each in its consumer's terms."""
    doc = read_document(document)
    if fmt == "json":
        return capabilities.capability_fragment(doc)["lanes"]["dense"]["valid"] is False
    if fmt == "prometheus":
        return samples(capabilities.prometheus_text(doc))[
            ("satbench_recommendation_valid", frozenset({("lane", "dense")}))] == 0
    if fmt == "litellm":
        return capabilities.litellm_config(doc)[0]["model_list"][0]["model_info"]["satbench_validity"] == "changed"
    record = render_record(doc, fmt)
    if fmt in ("keda", "kserve"):
        return record["items"][0]["metadata"]["annotations"]["satbench.io/stale"] == "true"
    if fmt == "aibrix":
        (profile,) = record["profiles"].values()
        (cell,) = profile["satbench"]["cells"]
        assert (profile["tputs"][0][0] == 0.0) == cell["stale"]  # AIBrix's "no qualifying rate"
        return bool(cell["stale"])
    body = next(iter(next(iter(record.values())).values()))
    if fmt == "llm-d":
        assert (body["status"] == "STALE") == body["satbench"]["stale"]
    return bool(body["satbench"]["stale"])


@pytest.mark.parametrize("fmt", ALL_FORMATS)
def test_a_changed_fingerprint_marks_the_record_stale_in_every_format(fmt: str) -> None:
    assert _checked(1)["lanes"]["dense"]["validity"]["state"] == "valid"
    assert _checked(4)["lanes"]["dense"]["validity"]["state"] == "changed"
    assert not stale_in(fmt, _checked(1))
    assert stale_in(fmt, _checked(4))


# -- the command line and the service -------------------------------------------------------------------------
def test_the_command_prints_each_record_and_refuses_bad_input_in_one_line(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "recommendations.json"
    path.write_text(json.dumps(fleet_document()))
    for fmt in RECORD_FORMATS:
        assert capabilities_cli.main(parse_args("--file", str(path), "--format", fmt)) == 1  # gpu-b unanswered
        out, err = capsys.readouterr()
        assert yaml.safe_load(out) == render_record(read_document(fleet_document()), fmt)
        assert "lane gpu-b/moe: no answer" in err and "its record says so" in err
    assert capabilities_cli.main(parse_args("--file", str(path), "--format", "keda", "--namespace", "ml",
                                            "--scale-target", "dense=StatefulSet/llamacpp", "--max-replicas",
                                            "3")) == 1
    dense = json.loads(capsys.readouterr().out)["items"][0]
    assert dense["spec"]["scaleTargetRef"] == {"name": "llamacpp", "kind": "StatefulSet", "apiVersion": "apps/v1"}
    assert (dense["metadata"]["namespace"], dense["spec"]["maxReplicaCount"]) == ("ml", 3)
    for argv, flag in ((("--max-replicas", "0"), "--max-replicas"), (("--min-replicas", "0"), "--min-replicas"),
                       (("--server-address", "vmauth:8427"), "--server-address"),
                       (("--scale-target", "dense"), "--scale-target")):
        assert capabilities_cli.main(parse_args("--file", str(path), "--format", "keda", *argv)) == 2
        err = capsys.readouterr().err
        assert len(err.strip().splitlines()) == 1 and flag in err, err
    with pytest.raises(SystemExit) as raised:
        parse_args("--format", "hpa")
    assert raised.value.code == 2
    assert "invalid choice: 'hpa'" in capsys.readouterr().err


@pytest.mark.slow
def test_the_service_serves_each_format_and_names_an_unknown_one() -> None:
    document = fleet_document()

    async def analyzer(manifest: RunManifest, run_dir: Path | None) -> dict[str, Any]:
        return copy.deepcopy(document)

    settings = RecommenderSettings(prometheus_url=f"http://127.0.0.1:{free_port()}", refresh_interval_s=3600,
                                   prometheus_timeout_s=1.0, write_token=SecretStr("records-write-token-0"))
    manifest = RunManifest(run_id="r-fleet", created_at=1.0, steps=(StepWindow("dense", 1, 10.0, 40.0),))
    with serve(create_app(settings, analyzer=analyzer, background_refresh=False)) as url:
        assert httpx.post(f"{url}/runs", json=manifest.to_dict(), timeout=30,
                          headers={"Authorization": "Bearer records-write-token-0"}).status_code == 201
        served = read_document(httpx.get(f"{url}/recommendations", timeout=10).json())
        for fmt in RECORD_FORMATS:
            resp = httpx.get(f"{url}/capabilities", params={"format": fmt}, timeout=10)
            assert resp.status_code == 200, resp.text
            assert resp.json() == render_record(served, fmt)
        litellm = httpx.get(f"{url}/capabilities", params={"format": "litellm"}, timeout=10).json()
        assert litellm == capabilities.litellm_config(served)[0]
        text = httpx.get(f"{url}/capabilities", params={"format": "prometheus"}, timeout=10).text
        assert samples(text) == samples(capabilities.prometheus_text(served))
        assert httpx.get(f"{url}/capabilities", params={"format": "json"}, timeout=10).json() == \
            httpx.get(f"{url}/capabilities", timeout=10).json()
        bad = httpx.get(f"{url}/capabilities", params={"format": "hpa"}, timeout=10)
        assert bad.status_code == 400
        detail = bad.json()["detail"]
        assert "'hpa'" in detail and "keda" in detail and "\n" not in detail


def test_one_lanes_record_alone_and_a_lane_that_is_not_there(tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "recommendations.json"
    path.write_text(json.dumps(fleet_document()))
    whole = render_record(read_document(fleet_document()), "llm-d")["records"]
    assert capabilities_cli.main(parse_args("--file", str(path), "--format", "llm-d", "--lane", "gpu-a/dense")) == 0
    out, err = capsys.readouterr()
    assert json.loads(out) == whole["gpu-a/dense"] and err == ""  # the file llm-d's prefillCalibrationFile names
    assert capabilities_cli.main(parse_args("--file", str(path), "--format", "wva", "--lane", "gpu-b/moe")) == 1
    out, err = capsys.readouterr()
    assert json.loads(out)["satbench"]["usable"] is False  # listed without an answer: its record says so
    assert err.strip().splitlines() == ["satbench capabilities: lane gpu-b/moe: no answer (1 usable step window); "
                                        "its record says so"]
    for fmt, lane, named in (("epp", "gpu-c/dense", "'gpu-c/dense'"), ("keda", "dense", "'keda'")):
        assert capabilities_cli.main(parse_args("--file", str(path), "--format", fmt, "--lane", lane)) == 2
        out, err = capsys.readouterr()
        assert out == "" and len(err.strip().splitlines()) == 1 and named in err and "--lane" in err, err


def test_an_answer_served_while_the_source_is_unreachable_keeps_its_number_and_says_so() -> None:
    doc = sample()
    doc["stale"], doc["age_s"] = True, 900.0
    lane = doc["lanes"]["dense"]
    lane["status"], lane["last_status"], lane["recommended_concurrency"] = "stale", "ok", 3
    served = read_document(doc)
    (item,) = keda_scaled_objects(served)["items"]
    annotations = item["metadata"]["annotations"]
    assert (annotations["satbench.io/source-stale"], annotations["satbench.io/stale"]) == ("true", "false")
    assert item["spec"]["triggers"][0]["metadata"]["threshold"] == "3"
    stamp = render_record(served, "wva")["variants"]["dense"]["satbench"]
    assert (stamp["source_stale"], stamp["stale"], stamp["usable"], stamp["age_s"]) == (True, False, True, 900.0)
    assert render_record(read_document(sample()), "wva")["variants"]["dense"]["satbench"]["source_stale"] is False
