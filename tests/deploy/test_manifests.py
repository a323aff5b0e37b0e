"""The Kubernetes manifests (deploy/kubernetes) validate against the API of a pinned Kubernetes, and hold the
contracts the code relies on.

Validation is ``kubernetes-validate`` (PyPI, the dev extra), which bundles the API's JSON schemas per
Kubernetes release and needs no network or cluster, in strict mode: a misspelled field is an error, not
silently dropped as the API server's default decoding would. The base is validated file by file as written;
each overlay as ``kubectl kustomize`` renders it (kustomize is built into kubectl, what an operator applies
with ``kubectl apply -k``). The same validation is shown to catch a broken manifest.

Beyond the schema: every container with requests and limits and no privilege (the restricted Pod Security Standard
the namespace enforces); the Indexed Job's pods given disjoint shards that cover every node of the fleet they are
handed (the shard arithmetic of ``satbench.fleet.shards`` run for each completion index, as each pod runs it), the
fleet config a valid session config naming the StatefulSet's pods, and the agent's scrape jobs named as satbench's,
each keeping the pods labelled for it and mapping pod labels to ``node`` and ``lane`` (Debian's promtool is built
without Kubernetes discovery, so it cannot check this config). The hardening (images, probes, bounds, deadlines,
disruption budgets, evidence, Grafana, the store's gate and credentials, signing keys) is test_hardening.py's.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from satbench.exporter.promconfig import EXPORTER_JOB, LOADGEN_JOB, RECOMMENDER_JOB
from satbench.fleet.shards import COUNT_ENV, INDEX_ENV, RUN_ID_ENV, shard_from_env, stamp_for
from tests.deploy.manifests import RENDERINGS, base_documents, fleet_config, pod_specs, render

KUBERNETES = "1.33"  # the pinned API: Indexed Jobs with backoffLimitPerIndex are GA from 1.33


def _problems(docs: list[dict[str, Any]]) -> list[str]:
    out = []
    for doc in docs:
        try:
            kubernetes_validate.validate(doc, KUBERNETES, strict=True)
        except kubernetes_validate.ValidationError as exc:
            path = ".".join(str(p) for p in exc.path)
            out.append(f"{doc['kind']}/{doc['metadata']['name']}: {path}: {exc.message}")
        except kubernetes_validate.SchemaNotFoundError as exc:
            out.append(f"{doc['kind']}/{doc['metadata']['name']}: {exc.message}")
    return out


def test_the_base_validates_file_by_file() -> None:
    docs = base_documents()
    assert len(docs) >= 20
    assert _problems(docs) == []


@pytest.mark.parametrize("overlay", RENDERINGS)
def test_each_rendering_validates(overlay: str) -> None:
    docs = render(overlay)
    assert _problems(docs) == []
    assert all(d["metadata"].get("namespace") == "satbench" for d in docs if d["kind"] != "Namespace")


def test_a_broken_manifest_is_caught() -> None:
    job = next(d for d in base_documents() if d["kind"] == "Job")
    assert _problems([job]) == []
    misspelled = copy.deepcopy(job)
    misspelled["spec"]["completionsMode"] = misspelled["spec"].pop("completionMode")
    wrong_type = copy.deepcopy(job)
    wrong_type["spec"]["completions"] = "three"
    no_image = copy.deepcopy(job)
    del no_image["spec"]["template"]["spec"]["containers"][0]["name"]
    assert _problems([misspelled]) == ["Job/satbench-fleet-walk: spec: Additional properties are not allowed "
                                       "('completionsMode' was unexpected)"]
    assert _problems([wrong_type])[0].startswith("Job/satbench-fleet-walk: spec.completions: 'three' is not")
    assert "'name' is a required property" in _problems([no_image])[0]


@pytest.mark.parametrize("overlay", RENDERINGS)
def test_every_container_is_bounded_and_unprivileged(overlay: str) -> None:
    pods = {where: template["spec"] for where, template in pod_specs(render(overlay)).items()}
    assert len(pods) >= 9
    for where, pod in pods.items():
        assert pod["securityContext"]["runAsNonRoot"] is True, where
        assert pod["securityContext"]["seccompProfile"]["type"] == "RuntimeDefault", where
        assert not any(pod.get(k) for k in ("hostNetwork", "hostPID", "hostIPC")), where
        assert not any("hostPath" in v for v in pod.get("volumes") or []), where
        for c in [*pod.get("initContainers", []), *pod["containers"]]:
            for kind in ("requests", "limits"):
                assert {"cpu", "memory"} <= set(c["resources"][kind]), (where, c["name"], kind)
            sc = c["securityContext"]
            assert sc["allowPrivilegeEscalation"] is False and sc["capabilities"]["drop"] == ["ALL"], where
            assert not sc.get("privileged") and not sc["capabilities"].get("add"), where


def _env(container: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container.get("env") or []}


def test_the_indexed_jobs_give_each_pod_a_disjoint_shard_and_together_every_node(tmp_path: Path) -> None:
    docs = base_documents()
    config = fleet_config(docs, tmp_path)
    nodes = {lane.node_name for lane in config.lanes}
    jobs = [d["spec"] if d["kind"] == "Job" else d["spec"]["jobTemplate"]["spec"]
            for d in docs if d["kind"] in ("Job", "CronJob")]
    assert len(jobs) == 2
    for job in jobs:
        assert job["completionMode"] == "Indexed" and job["completions"] == job["parallelism"]
        (container,) = job["template"]["spec"]["containers"]
        env = _env(container)
        assert int(env[COUNT_ENV]) == job["completions"]  # Kubernetes gives the index, not the count
        assert env[RUN_ID_ENV] == {"fieldRef": {"fieldPath": "metadata.labels['batch.kubernetes.io/job-name']"}}
        assert container["args"][:3] == ["run", "--config", "/etc/satbench/fleet.toml"]
        stamps = [stamp_for(config.lanes, shard_from_env({INDEX_ENV: str(i), COUNT_ENV: env[COUNT_ENV]}))
                  for i in range(job["completions"])]
        shares = [{key.split("/")[0] for key in s.share()} for s in stamps]
        assert set().union(*shares) == nodes and sum(len(s) for s in shares) == len(nodes)
        assert all(shares), shares  # every pod has nodes to walk
        ports = {p["name"]: p["containerPort"] for p in container["ports"]}
        assert ports["loadgen"] == config.loadgen.metrics_port
        assert job["template"]["metadata"]["labels"]["satbench.io/scrape"] == "loadgen"


def test_the_fleet_config_names_the_statefulsets_pods_and_their_exporters(tmp_path: Path) -> None:
    docs = base_documents()
    config = fleet_config(docs, tmp_path)
    nodes = next(d for d in docs if d["kind"] == "StatefulSet" and d["metadata"]["name"] == "llamacpp")
    pod = nodes["spec"]["template"]
    ports = {p["name"]: p["containerPort"] for c in pod["spec"]["containers"] for p in c.get("ports") or []}
    assert {lane.key for lane in config.lanes} == {
        f"llamacpp-{i}/{pod['metadata']['labels']['satbench.io/lane']}" for i in range(nodes["spec"]["replicas"])}
    for lane in config.lanes:
        host = f"http://{lane.node}.llamacpp.satbench.svc"
        assert str(lane.url).rstrip("/") == f"{host}:{ports['http']}"
        assert str(lane.exporter_url).rstrip("/") == f"{host}:{ports['exporter']}"
    assert str(config.recommender.url).startswith("http://satbench-recommender.satbench.svc:9108")


def test_the_agent_scrapes_under_satbenchs_job_names_with_node_and_lane(tmp_path: Path) -> None:
    docs = base_documents()
    scrape = next(d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"] == "vmagent-scrape")
    config = yaml.safe_load(scrape["data"]["scrape.yml"])
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    assert set(jobs) == {EXPORTER_JOB, LOADGEN_JOB, RECOMMENDER_JOB}
    targets = {r.get("target_label"): r["source_labels"] for r in jobs[EXPORTER_JOB]["relabel_configs"]}
    assert targets["node"] == ["__meta_kubernetes_pod_name"]
    assert targets["lane"] == ["__meta_kubernetes_pod_label_satbench_io_lane"]
    for job in jobs.values():  # each job keeps its own pods only, by the label satbench.io/scrape
        keep = jobs[job["job_name"]]["relabel_configs"][0]
        assert keep["source_labels"] == ["__meta_kubernetes_pod_label_satbench_io_scrape"] and keep["action"] == "keep"
        assert job["kubernetes_sd_configs"] == [{"role": "pod", "namespaces": {"names": ["satbench"]}}]
    scraped = {keep["regex"] for job in jobs.values() for keep in job["relabel_configs"][:1]}
    labelled = {d["spec"]["template"]["metadata"]["labels"].get("satbench.io/scrape") for d in docs
                if d["kind"] in ("StatefulSet", "Deployment", "Job")}
    assert scraped <= labelled
