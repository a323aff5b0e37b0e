"""deploy/kubernetes/examples/keda: the generated ScaledObjects are what ``satbench capabilities --format keda``
prints for the sample document (no drift), every object validates (KEDA's CRDs, committed under
tests/recommender/crds; the NetworkPolicy against the pinned Kubernetes API), and what they name exists in the
base: the workload scaled, the store gate's pods and port, the reader Secret. The example stays out of the
base, so the network-policy tables of test_network_policies hold as they are."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from satbench.recommender import capabilities_cli
from tests.deploy.manifests import DEPLOY, base_documents
from tests.recommender.test_consumer_records import KEDA, errors, parse_args, validator

EXAMPLE = DEPLOY / "examples" / "keda"
SAMPLE = Path(__file__).parents[2] / "docs" / "recommendations-sample.json"
COMMAND = ("--file", str(SAMPLE), "--format", "keda", "--namespace", "satbench", "--scale-target",
           "dense=StatefulSet/llamacpp", "--auth-ref", "satbench-store-reader")
TRIGGER_AUTH = validator("keda_triggerauthentication.schema.json")


def example(name: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all((EXAMPLE / name).read_text()) if d]


def base(kind: str, name: str) -> dict[str, Any]:
    return next(d for d in base_documents() if d["kind"] == kind and d["metadata"]["name"] == name)


def test_the_scaled_objects_are_what_the_command_prints(capsys: pytest.CaptureFixture[str]) -> None:
    assert capabilities_cli.main(parse_args(*COMMAND)) == 0
    assert example("scaledobjects.yaml") == [json.loads(capsys.readouterr().out)]
    listed = yaml.safe_load((EXAMPLE / "kustomization.yaml").read_text())["resources"]
    assert sorted(listed) == sorted(p.name for p in EXAMPLE.glob("*.yaml") if p.name != "kustomization.yaml")


def test_every_object_validates_and_names_what_the_base_has() -> None:
    (objects,) = example("scaledobjects.yaml")
    statefulset = base("StatefulSet", "llamacpp")
    for item in objects["items"]:
        assert errors(KEDA, item) == []
        assert item["spec"]["scaleTargetRef"] == {"name": "llamacpp", "kind": "StatefulSet", "apiVersion": "apps/v1"}
        assert statefulset["apiVersion"] == "apps/v1"
        for trigger in item["spec"]["triggers"]:
            assert trigger["authenticationRef"] == {"name": "satbench-store-reader"}
            assert trigger["metadata"]["serverAddress"] == "http://vmauth.satbench.svc:8427"
    (auth,) = example("trigger-authentication.yaml")
    assert errors(TRIGGER_AUTH, auth) == []
    assert auth["metadata"]["name"] == "satbench-store-reader"
    reader = {(r["parameter"], r["name"], r["key"]) for r in auth["spec"]["secretTargetRef"]}
    assert reader == {("username", "satbench-store-reader", "username"),
                      ("password", "satbench-store-reader", "password")}
    assert '"satbench-store-reader"' in json.dumps(base_documents())  # the Secret the base's readers hold

    (policy,) = example("network-policy.yaml")
    kubernetes_validate.validate({**policy, "metadata": {**policy["metadata"], "namespace": "satbench"}}, "1.33",
                                 strict=True)
    gate = base("Deployment", "vmauth")
    labels = gate["spec"]["template"]["metadata"]["labels"]
    assert policy["spec"]["podSelector"]["matchLabels"].items() <= labels.items()
    ports = {p["containerPort"] for c in gate["spec"]["template"]["spec"]["containers"] for p in c.get("ports", [])}
    assert {p["port"] for p in policy["spec"]["ingress"][0]["ports"]} <= ports


def test_the_example_is_not_part_of_the_base() -> None:
    resources = yaml.safe_load((DEPLOY / "base" / "kustomization.yaml").read_text())["resources"]
    assert not any("examples" in r or "keda" in r for r in resources)
    assert not any(d["kind"] in ("ScaledObject", "TriggerAuthentication") for d in base_documents())
