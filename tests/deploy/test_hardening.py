"""The Kubernetes manifests hold the hardening the store and the fleet rely on (tests/deploy/test_manifests.py
holds the schema and the fleet's contracts): every image pinned by digest (``name:tag@sha256:...``) or named in a
kustomization's ``images:`` as awaiting its digest with the tag its manifest names, so a bare tag of anything else
fails; every long-running container with liveness and readiness probes; every emptyDir and vmagent's disk buffer
bounded (the buffer inside its volume); the Job and the CronJob bounded in time, the CronJob's runs over before
the next is due; disruption budgets on the store, its gate and the recommender; each shard's evidence on a
ReadWriteMany claim in a folder of its own pod; Grafana behind a login with its admin password from a Secret; the
store named by nothing but its gate, and every client of the gate carrying the Secret of its role (writer or
reader; the real binaries' side of this is tests/deploy/test_store_gate.py); each node signing with its own key.
"""

from __future__ import annotations

import copy
import re
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.deploy.manifests import (
    DEPLOY,
    OVERLAYS,
    RENDERINGS,
    base_documents,
    fleet_config,
    fleet_text,
    pod_specs,
    render,
)

# --- images: by digest where a digest was read, else listed as awaiting one -------------------------------------

DIGEST = re.compile(r"^(?P<name>[^@\s]+):(?P<tag>[^@:/\s]+)@sha256:[0-9a-f]{64}$")
TAGGED = re.compile(r"^(?P<name>[^@\s]+):(?P<tag>[^@:/\s]+)$")


def _awaiting(overlay: str) -> dict[str, str]:
    """Image name -> tag, for the kustomization ``images:`` entries (base's, and the overlay's) with no digest."""
    out = {}
    for where in {"base", overlay}:
        for entry in yaml.safe_load((DEPLOY / where / "kustomization.yaml").read_text()).get("images") or []:
            if not entry.get("digest"):
                out[entry["name"]] = entry["newTag"]
    return out


def _image_problems(docs: list[dict[str, Any]], awaiting: dict[str, str]) -> list[str]:
    out = []
    for where, template in pod_specs(docs).items():
        for c in template["spec"]["containers"]:
            image = c["image"]
            pinned, tagged = DIGEST.match(image), TAGGED.match(image)
            if pinned:
                continue
            if tagged and awaiting.get(tagged["name"]) == tagged["tag"]:
                continue
            out.append(f"{where} {c['name']}: {image} is neither name:tag@sha256:DIGEST nor awaiting its digest")
    return out


@pytest.mark.parametrize("overlay", RENDERINGS)
def test_every_image_is_pinned_by_digest_or_named_as_awaiting_one(overlay: str) -> None:
    docs = render(overlay)
    assert _image_problems(docs, _awaiting(overlay)) == []
    images = {c["image"] for t in pod_specs(docs).values() for c in t["spec"]["containers"]}
    pinned = {m["name"] for m in map(DIGEST.match, images) if m}
    assert {"grafana/grafana", "prom/alertmanager"} <= pinned  # the digests confirmed (base/kustomization.yaml)
    assert not {m["name"] for m in map(TAGGED.match, images) if m} & pinned  # never both ways


def test_an_image_by_a_bare_tag_is_caught() -> None:
    docs = render("base")
    moved = copy.deepcopy(docs)
    (grafana,) = [d for d in moved if d["kind"] == "Deployment" and d["metadata"]["name"] == "grafana"]
    grafana["spec"]["template"]["spec"]["containers"][0]["image"] = "grafana/grafana:11.2.0"
    stale = copy.deepcopy(docs)
    (agent,) = [d for d in stale if d["kind"] == "Deployment" and d["metadata"]["name"] == "vmagent"]
    agent["spec"]["template"]["spec"]["containers"][0]["image"] = "victoriametrics/vmagent:v1.107.0"
    latest = copy.deepcopy(docs)
    (vmauth,) = [d for d in latest if d["kind"] == "Deployment" and d["metadata"]["name"] == "vmauth"]
    vmauth["spec"]["template"]["spec"]["containers"][0]["image"] = "victoriametrics/vmauth"
    assert [len(_image_problems(d, _awaiting("base"))) for d in (moved, stale, latest)] == [1, 1, 1]


def test_each_awaiting_tag_is_the_tag_its_manifests_name() -> None:
    named: dict[str, set[str]] = {}
    for where in ("base", *(f"overlays/{o}" for o in OVERLAYS)):
        for path in (DEPLOY / where).glob("*.yaml"):
            for image in re.findall(r"image: (\S+)", path.read_text()):
                if m := TAGGED.match(image):
                    named.setdefault(m["name"], set()).add(m["tag"])
    awaiting = {name: tag for o in RENDERINGS for name, tag in _awaiting(o).items()}
    assert set(awaiting) == set(named)
    for name, tag in awaiting.items():
        assert named[name] == {tag}, (name, named[name], tag)


# --- every long-running container watched, every volume and buffer bounded -------------------------------------

LONG_RUNNING = ("Deployment", "StatefulSet")


@pytest.mark.parametrize("overlay", RENDERINGS)
def test_every_long_running_container_has_liveness_and_readiness_probes(overlay: str) -> None:
    docs = render(overlay)
    watched = 0
    for doc in docs:
        if doc["kind"] in LONG_RUNNING:
            for c in doc["spec"]["template"]["spec"]["containers"]:
                assert "livenessProbe" in c and "readinessProbe" in c, (doc["metadata"]["name"], c["name"])
                watched += 1
    assert watched >= 9


_UNITS = {"": 1, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30,
          "k": 10**3, "M": 10**6, "G": 10**9, "KB": 10**3, "MB": 10**6, "GB": 10**9}


def _bytes(quantity: str) -> int:
    m = re.fullmatch(r"(\d+)([A-Za-z]*)", quantity)
    assert m and m[2] in _UNITS, quantity
    return int(m[1]) * _UNITS[m[2]]


@pytest.mark.parametrize("overlay", RENDERINGS)
def test_every_scratch_volume_is_bounded(overlay: str) -> None:
    for where, template in pod_specs(render(overlay)).items():
        for volume in template["spec"].get("volumes") or []:
            if "emptyDir" in volume:
                assert _bytes(volume["emptyDir"].get("sizeLimit", "0")) > 0, (where, volume["name"])


def _flags(args: list[str]) -> dict[str, str]:
    return dict(a.removeprefix("-").split("=", 1) for a in args if a.startswith("-") and "=" in a)


def test_the_agents_buffer_is_bounded_inside_its_volume() -> None:
    (agent,) = [d for d in base_documents() if d["kind"] == "Deployment" and d["metadata"]["name"] == "vmagent"]
    pod = agent["spec"]["template"]["spec"]
    (c,) = pod["containers"]
    flags = _flags(c["args"])
    buffer = _bytes(flags["remoteWrite.maxDiskUsagePerURL"])
    assert buffer >= 500 * 2**20  # vmagent writes ~500 MB chunks: a smaller bound does not hold
    (mount,) = [m for m in c["volumeMounts"] if flags["remoteWrite.tmpDataPath"].startswith(m["mountPath"])]
    (volume,) = [v for v in pod["volumes"] if v["name"] == mount["name"]]
    assert buffer < _bytes(volume["emptyDir"]["sizeLimit"])  # evicted at the limit, so the flag must bind first
    assert flags["remoteWrite.url"].count(",") == 0  # one URL: the bound is per URL


# --- bounded in time, kept through disruptions, evidence outliving its pod -------------------------------------


def test_the_walks_are_bounded_in_time_and_a_hung_one_cannot_block_the_next() -> None:
    docs = base_documents()
    (job,) = [d["spec"] for d in docs if d["kind"] == "Job"]
    (cron,) = [d["spec"] for d in docs if d["kind"] == "CronJob"]
    assert 0 < job["activeDeadlineSeconds"] <= 24 * 3600
    minute = re.fullmatch(r"(\d+) \* \* \* \*", cron["schedule"])
    assert minute, "an hourly schedule (the period below assumes it)"
    period = 3600
    assert cron["concurrencyPolicy"] == "Forbid"
    # started at most startingDeadlineSeconds late and ended by its deadline: over before the next is due
    assert cron["startingDeadlineSeconds"] + cron["jobTemplate"]["spec"]["activeDeadlineSeconds"] < period


def _selects(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    return all(labels.get(k) == v for k, v in selector["matchLabels"].items())


@pytest.mark.parametrize("overlay", RENDERINGS)
def test_the_store_the_gate_and_the_recommender_have_disruption_budgets(overlay: str) -> None:
    docs = render(overlay)
    workloads = {d["metadata"]["name"]: d for d in docs if d["kind"] in LONG_RUNNING}
    budgets = [d["spec"] for d in docs if d["kind"] == "PodDisruptionBudget"]
    covered = {}
    for budget in budgets:
        (name,) = [n for n, w in workloads.items()
                   if _selects(budget["selector"], w["spec"]["template"]["metadata"]["labels"])]
        covered[name] = budget
    store = {"vmstorage", "vminsert", "vmselect"} if overlay == "overlays/cluster" else {"victoria-metrics"}
    assert set(covered) == store | {"vmauth", "satbench-recommender"}
    for name, budget in covered.items():
        replicas = workloads[name]["spec"]["replicas"]
        if replicas == 1:  # a drain waits for the operator; a pod that is not running never holds it
            assert budget.get("maxUnavailable") == 0 and budget["unhealthyPodEvictionPolicy"] == "AlwaysAllow", name
        else:
            assert budget.get("minAvailable", 1) >= 1 and budget.get("maxUnavailable", 1) < replicas, name


def test_each_shard_writes_its_evidence_onto_a_shared_claim_in_a_folder_of_its_own() -> None:
    docs = base_documents()
    claims = {d["metadata"]["name"]: d["spec"] for d in docs if d["kind"] == "PersistentVolumeClaim"}
    for where, template in pod_specs(docs).items():
        if not where.startswith(("Job/", "CronJob/")):
            continue
        pod = template["spec"]
        (c,) = pod["containers"]
        out = c["args"][c["args"].index("--out") + 1]
        (mount,) = [m for m in c["volumeMounts"] if out.startswith(m["mountPath"] + "/")]
        (volume,) = [v for v in pod["volumes"] if v["name"] == mount["name"]]
        claim = claims[volume["persistentVolumeClaim"]["claimName"]]
        assert claim["accessModes"] == ["ReadWriteMany"], where  # the shards run at once, on any node
        assert out == f"{mount['mountPath']}/$(POD_NAME)", where  # a retried shard never meets its killed folder
        (pod_name,) = [e for e in c["env"] if e["name"] == "POD_NAME"]
        assert pod_name["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.name"}}
        assert pod["securityContext"]["fsGroup"] == pod["securityContext"]["runAsGroup"]


# --- Grafana: a login, and no password anybody knows ------------------------------------------------------------


def test_grafana_wants_a_login_and_its_admin_password_is_a_secret() -> None:
    docs = base_documents()
    (grafana,) = [d for d in docs if d["kind"] == "Deployment" and d["metadata"]["name"] == "grafana"]
    pod = grafana["spec"]["template"]["spec"]
    (c,) = pod["containers"]
    env = {e["name"]: e for e in c["env"]}
    assert env["GF_AUTH_ANONYMOUS_ENABLED"]["value"] == "false"
    assert "GF_SECURITY_ADMIN_PASSWORD" not in env and "GF_AUTH_ANONYMOUS_ORG_ROLE" not in env
    path = env["GF_SECURITY_ADMIN_PASSWORD__FILE"]["value"]
    (mount,) = [m for m in c["volumeMounts"] if path.startswith(m["mountPath"] + "/")]
    (volume,) = [v for v in pod["volumes"] if v["name"] == mount["name"]]
    assert volume["secret"]["secretName"] == "satbench-grafana-admin"
    assert [i["path"] for i in volume["secret"]["items"]] == [path.removeprefix(mount["mountPath"] + "/")]


# --- the store: reached only through its gate, with credentials -------------------------------------------------

STORE_HOSTS = re.compile(r"(victoria-metrics|vminsert|vmselect|vmstorage)(-\d)?\.[a-z0-9.-]*svc")


@pytest.mark.parametrize("overlay", RENDERINGS)
def test_nothing_but_the_gate_and_the_stores_parts_names_the_store(overlay: str) -> None:
    docs = render(overlay)
    store_parts = {"victoria-metrics", "vminsert", "vmselect", "vmstorage"}
    for doc in docs:
        if doc["kind"] == "Service" or doc["metadata"]["name"] in store_parts | {"vmauth"}:
            continue
        assert not STORE_HOSTS.search(yaml.safe_dump(doc)), f"{doc['kind']}/{doc['metadata']['name']}"
    (gate,) = [d for d in docs if d["kind"] == "Deployment" and d["metadata"]["name"] == "vmauth"]
    backends = {e["name"]: e["value"] for e in gate["spec"]["template"]["spec"]["containers"][0]["env"]
                if e["name"].endswith("_URL")}
    assert all(STORE_HOSTS.search(url) for url in backends.values()), backends


def _mounted_secrets(pod: dict[str, Any], c: dict[str, Any]) -> dict[str, str]:
    """mount path -> Secret name, for the container's Secret volumes."""
    secrets = {v["name"]: v["secret"]["secretName"] for v in pod.get("volumes") or [] if "secret" in v}
    return {m["mountPath"]: secrets[m["name"]] for m in c.get("volumeMounts") or [] if m["name"] in secrets}


@pytest.mark.parametrize("overlay", RENDERINGS)
def test_every_client_of_the_gate_carries_the_credentials_of_its_role(overlay: str) -> None:
    gate = "vmauth.satbench.svc:8427"
    writer, reader = "satbench-store-writer", "satbench-store-reader"
    docs = render(overlay)
    pods = pod_specs(docs)
    roles: dict[str, set[str]] = {}
    for where, template in pods.items():
        for c in template["spec"]["containers"]:
            text = " ".join(c.get("args") or [])
            if gate not in text and not (where.startswith(("Job/", "CronJob/")) or "recommender" in where):
                continue
            flags = _flags(c.get("args") or [])
            files = {path: name for path, name in _mounted_secrets(template["spec"], c).items()}
            env = {e["name"]: e for e in c.get("env") or []}
            got = set()
            for prefix in ("remoteWrite", "datasource", "remoteRead"):
                if gate in flags.get(f"{prefix}.url", ""):
                    password = flags[f"{prefix}.basicAuth.passwordFile"]
                    (secret,) = [n for p, n in files.items() if password.startswith(p + "/")]
                    user = re.fullmatch(r"\$\((\w+)\)", flags[f"{prefix}.basicAuth.username"])
                    assert user, (where, prefix)
                    assert env[user[1]]["valueFrom"]["secretKeyRef"]["name"] == secret, (where, prefix)
                    assert secret == (writer if prefix == "remoteWrite" else reader), (where, prefix)
                    got.add(secret)
            if "SATBENCH_RECOMMENDER_PROMETHEUS_USERNAME" in env:  # the recommender's settings (pydantic)
                user, password = (env[f"SATBENCH_RECOMMENDER_PROMETHEUS_{k}"]["valueFrom"]["secretKeyRef"]
                                  for k in ("USERNAME", "PASSWORD"))
                assert (user["key"], password["key"]) == ("username", "password"), where
                assert user["name"] == password["name"] == reader, where
                got.add(reader)
            if where.startswith(("Job/", "CronJob/")):  # a session: fleet.toml's [prometheus] credentials
                prom = tomllib.loads(fleet_text(docs))["prometheus"]
                if gate in prom["url"]:
                    (secret,) = [n for p, n in files.items() if prom["password_file"].startswith(p + "/")]
                    assert prom["username"] == "reader", where  # the reader Secret's username (docs/kubernetes.md)
                    got.add(secret)
            roles[f"{where} {c['name']}"] = got
    assert roles == {
        "Deployment/vmagent vmagent": {writer},
        "Deployment/vmalert vmalert": {writer, reader},
        "Deployment/satbench-recommender recommender": {reader},
        # the shards' own reads (the scrape wait, the in-process fallback) as the reader
        "Job/satbench-fleet-walk loadgen": {reader},
        "CronJob/satbench-remeasure loadgen": {reader},
    }
    (grafana,) = [d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"] == "grafana-provisioning"]
    (source,) = yaml.safe_load(grafana["data"]["datasource.yml"])["datasources"]
    assert gate in source["url"] and source["basicAuth"] is True
    (g,) = pods["Deployment/grafana"]["spec"]["containers"]
    genv = {e["name"]: e["valueFrom"]["secretKeyRef"] for e in g["env"] if "valueFrom" in e}
    for ref in (source["basicAuthUser"], source["secureJsonData"]["basicAuthPassword"]):
        assert genv[ref.removeprefix("$")]["name"] == reader, ref


def test_the_recommenders_settings_take_the_readers_credentials_from_its_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The recommender's own settings class, built from the manifest's environment (Secrets resolved), sends
    the reader's credentials: where the settings know no store credentials, nothing here can be checked."""
    from satbench.recommender.settings import RecommenderSettings
    from tests.deploy.manifests import container, container_env

    if "prometheus_username" not in RecommenderSettings.model_fields:
        pytest.skip("this recommender sends no credentials to the store (store authentication not merged)")
    c = container(base_documents(), "Deployment/satbench-recommender", "recommender")
    fleet_key = "fleet-key-of-thirty-two-characters"
    env = container_env(c, {"satbench-store-reader": {"username": "reader", "password": "reader-pass"},
                            "satbench-fingerprint-fleet-key": {"key": fleet_key}})
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    settings = RecommenderSettings()
    assert settings.prometheus_auth() == ("reader", "reader-pass")
    assert settings.fingerprint_key_bytes() == fleet_key.encode()


# --- signed fingerprints: each node holds its own key, the recommender the fleet key ----------------------------


def test_each_node_signs_with_its_own_key_and_only_the_recommender_holds_the_fleet_key(tmp_path: Path) -> None:
    for overlay in RENDERINGS:
        docs = render(overlay)
        (nodes,) = [d for d in docs if d["kind"] == "StatefulSet" and d["metadata"]["name"] == "llamacpp"]
        pod = nodes["spec"]["template"]["spec"]
        volumes = {v["name"]: v for v in pod["volumes"]}
        (init,) = pod["initContainers"]
        assert init["command"] == ["cp", "/node-keys/$(POD_NAME)", "/fingerprint/key"]
        assert [e["valueFrom"] for e in init["env"] if e["name"] == "POD_NAME"] == [
            {"fieldRef": {"fieldPath": "metadata.name"}}]
        mounts = {m["mountPath"]: m["name"] for m in init["volumeMounts"]}
        assert volumes[mounts["/node-keys"]]["secret"]["secretName"] == "satbench-fingerprint-node-keys"
        assert volumes[mounts["/fingerprint"]]["emptyDir"]["medium"] == "Memory"
        (exporter,) = [c for c in pod["containers"] if c["name"] == "exporter"]
        key_file = exporter["args"][exporter["args"].index("--fingerprint-key-file") + 1]
        assert key_file == "/fingerprint/key", overlay
        for c in pod["containers"]:  # the node keys are the init container's alone
            assert all((volumes[m["name"]].get("secret") or {}).get("secretName") != "satbench-fingerprint-node-keys"
                       for m in c.get("volumeMounts") or []), c["name"]
        fleet_key_holders = {where for where, template in pod_specs(docs).items()
                             for c in template["spec"]["containers"] for e in c.get("env") or []
                             if e.get("valueFrom", {}).get("secretKeyRef", {}).get("name")
                             == "satbench-fingerprint-fleet-key"}
        assert fleet_key_holders == {"Deployment/satbench-recommender"}, overlay
    # the node keys are derived for the node names the store's series carry: the pods' names, the fleet's nodes
    config = fleet_config(base_documents(), tmp_path)
    replicas = next(d for d in base_documents() if d["kind"] == "StatefulSet")["spec"]["replicas"]
    assert {lane.node_name for lane in config.lanes} == {f"llamacpp-{i}" for i in range(replicas)}


def test_the_exporter_takes_the_manifests_arguments() -> None:
    """The exporter's own parser reads the sidecar's arguments (where it knows the key flag: branch i39-store)."""
    import argparse

    from satbench.exporter.cli import configure

    parser = argparse.ArgumentParser(prog="satbench exporter", exit_on_error=False)
    configure(parser)
    if "--fingerprint-key-file" not in parser.format_help():
        pytest.skip("this exporter signs nothing (signed fingerprints not merged)")
    for overlay in RENDERINGS:
        (nodes,) = [d for d in render(overlay) if d["kind"] == "StatefulSet" and d["metadata"]["name"] == "llamacpp"]
        (exporter,) = [c for c in nodes["spec"]["template"]["spec"]["containers"] if c["name"] == "exporter"]
        assert exporter["args"][0] == "exporter"
        args = parser.parse_args(exporter["args"][1:])
        assert str(args.fingerprint_key_file) == "/fingerprint/key", overlay
