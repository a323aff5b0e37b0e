"""The store refuses forged writes and deletes, with the real binaries started as the manifests start them.

Anyone who could reach the metrics store decided validity: one forged import turned a stale answer ``valid``, one
``delete_series`` turned every answer ``unknown``. The base (deploy/kubernetes) now puts vmauth in front of
VictoriaMetrics with a writer and a reader, and VictoriaMetrics itself refuses anything without the gate's
credentials and keeps its admin APIs behind a key nobody else holds. This test starts the real
``victoria-metrics``, ``vmauth``, ``vmagent`` and ``vmalert`` (Debian packages) on loopback with the arguments,
environment and config files of the rendered base (Secrets from a table here, ``$(VAR)`` expanded as the kubelet
does), so a misspelt flag, an environment name VictoriaMetrics does not read, or a route that lets a reader
import fails here. What differs from a cluster is said where it is done: listen addresses, data folders and the
backends' URLs become loopback ones, vmagent scrapes nothing (its Kubernetes discovery needs a cluster; it takes
one pushed sample instead and remote-writes it as the writer, through the gate), and vmalert evaluates one
recording rule of this test's instead of satbench's (read as the reader, written back as the writer).
"""

from __future__ import annotations

import base64
import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from testkit.net import free_port
from testkit.process import ChildProcess
from tests.deploy.manifests import base_documents, container, container_env, expand, pod_specs

pytestmark = pytest.mark.slow

BINARIES = ("victoria-metrics", "vmauth", "vmagent", "vmalert")
GATE_URL = "http://vmauth.satbench.svc:8427"
SECRETS = {
    "satbench-store-backend": {"username": "store", "password": "backend-pass", "admin-key": "admin-key-1",
                               "authorization": "Basic " + base64.b64encode(b"store:backend-pass").decode()},
    "satbench-store-writer": {"username": "writer", "password": "writer-pass"},
    "satbench-store-reader": {"username": "reader", "password": "reader-pass"},
}
READER = ("reader", "reader-pass")
WRITER = ("writer", "writer-pass")
BACKEND = ("store", "backend-pass")


def _flag(args: list[str], name: str, value: str) -> list[str]:
    """``args`` with flag ``-name``'s value replaced (it must be there once)."""
    hits = [i for i, a in enumerate(args) if a.split("=", 1)[0] == f"-{name}"]
    assert len(hits) == 1, (name, args)
    return [f"-{name}={value}" if i == hits[0] else a for i, a in enumerate(args)]


def _secret_file(pod: dict[str, Any], c: dict[str, Any], path: str, into: Path) -> str:
    """Writes the Secret key mounted at ``path`` in container ``c`` to a file under ``into``; returns it."""
    (mount,) = [m for m in c["volumeMounts"] if path.startswith(m["mountPath"] + "/")]
    (volume,) = [v for v in pod["spec"]["volumes"] if v["name"] == mount["name"]]
    (item,) = [i for i in volume["secret"]["items"] if i["path"] == path.removeprefix(mount["mountPath"] + "/")]
    out = into / volume["secret"]["secretName"] / item["path"]
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(SECRETS[volume["secret"]["secretName"]][item["key"]])
    return str(out)


def _env(values: dict[str, str]) -> dict[str, str]:
    return {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), **values}


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    missing = [b for b in BINARIES if shutil.which(b) is None]
    if missing:
        pytest.skip(f"{', '.join(missing)} not installed (Debian: victoria-metrics)")
    tmp = tmp_path_factory.mktemp("gate")
    docs = base_documents()
    pods = pod_specs(docs)

    vm = container(docs, "StatefulSet/victoria-metrics", "victoria-metrics")
    vm_port = free_port()
    vm_args = _flag(_flag(vm["args"], "httpListenAddr", f"127.0.0.1:{vm_port}"), "storageDataPath", str(tmp / "vm"))
    vm_url = f"http://127.0.0.1:{vm_port}"

    gate = container(docs, "Deployment/vmauth", "vmauth")
    (config,) = [d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"] == "vmauth"]
    (tmp / "auth.yml").write_text(config["data"]["auth.yml"])
    gate_port = free_port()
    gate_args = _flag(_flag(gate["args"], "httpListenAddr", f"127.0.0.1:{gate_port}"), "auth.config",
                      str(tmp / "auth.yml"))
    gate_env = container_env(gate, SECRETS)
    assert {gate_env["SATBENCH_STORE_WRITE_URL"], gate_env["SATBENCH_STORE_READ_URL"]} == {
        "http://victoria-metrics.satbench.svc:8428"}
    gate_env |= {"SATBENCH_STORE_WRITE_URL": vm_url, "SATBENCH_STORE_READ_URL": vm_url}  # the store, on loopback
    gate_url = f"http://127.0.0.1:{gate_port}"

    agent = container(docs, "Deployment/vmagent", "vmagent")
    agent_env = container_env(agent, SECRETS)
    agent_port = free_port()
    agent_args = [expand(a, agent_env) for a in agent["args"] if not a.startswith("-promscrape.config=")]
    agent_args = _flag(agent_args, "httpListenAddr", f"127.0.0.1:{agent_port}")
    agent_args = _flag(agent_args, "remoteWrite.tmpDataPath", str(tmp / "buffer"))
    (write_url,) = [a.split("=", 1)[1] for a in agent_args if a.startswith("-remoteWrite.url=")]
    assert write_url.startswith(GATE_URL)
    agent_args = _flag(agent_args, "remoteWrite.url", write_url.replace(GATE_URL, gate_url))
    (password_file,) = [a.split("=", 1)[1] for a in agent_args if a.startswith("-remoteWrite.basicAuth.passwordFile=")]
    agent_args = _flag(agent_args, "remoteWrite.basicAuth.passwordFile",
                       _secret_file(pods["Deployment/vmagent"], agent, password_file, tmp / "secrets"))

    yield from _started(tmp, vm_args, vm_url, container_env(vm, SECRETS), gate_args, gate_url, gate_env,
                        agent_args, agent_port)


def _started(tmp: Path, vm_args: list[str], vm_url: str, vm_env: dict[str, str], gate_args: list[str],
             gate_url: str, gate_env: dict[str, str], agent_args: list[str], agent_port: int,
             ) -> Iterator[dict[str, str]]:
    with (ChildProcess([shutil.which("victoria-metrics") or "", *vm_args], name="victoria-metrics",
                       ready_url=f"{vm_url}/health", env=_env(vm_env), graceful=True),
          ChildProcess([shutil.which("vmauth") or "", *gate_args], name="vmauth", ready_url=f"{gate_url}/health",
                       env=_env(gate_env)),
          ChildProcess([shutil.which("vmagent") or "", *agent_args], name="vmagent",
                       ready_url=f"http://127.0.0.1:{agent_port}/health", env=_env({}))):
        yield {"vm": vm_url, "gate": gate_url, "agent": f"http://127.0.0.1:{agent_port}", "tmp": str(tmp)}


def _series(client: httpx.Client, gate: str, name: str) -> list[dict[str, Any]]:
    answer = client.get(f"{gate}/api/v1/query", params={"query": name}, auth=READER)
    assert answer.status_code == 200, answer.text
    result: list[dict[str, Any]] = answer.json()["data"]["result"]
    return result


def test_the_store_answers_only_its_gate_and_keeps_admin_apis_behind_the_key(stack: dict[str, str]) -> None:
    vm = stack["vm"]
    with httpx.Client(timeout=10) as client:
        assert client.get(f"{vm}/health").status_code == 200  # the probes need no credentials
        for method, path in (("POST", "/api/v1/import/prometheus"), ("POST", "/api/v1/write"),
                             ("GET", "/api/v1/query?query=up"), ("GET", "/api/v1/admin/tsdb/delete_series?match[]=up")):
            for auth in (None, READER, WRITER):
                answer = client.request(method, f"{vm}{path}", content=b"forged 1\n", auth=auth)
                assert answer.status_code == 401, (method, path, auth, answer.status_code)
        assert client.post(f"{vm}/api/v1/import/prometheus", content=b"gate_probe_direct 1\n",
                           auth=BACKEND).status_code == 204
        # each admin API: refused with the store's credentials alone, served with the admin key
        for path in ("/api/v1/admin/tsdb/delete_series?match[]=nothing_here", "/snapshot/create",
                     "/internal/force_merge", "/internal/force_flush", "/internal/resetRollupResultCache"):
            refused = client.get(f"{vm}{path}", auth=BACKEND)
            assert refused.status_code >= 400, (path, refused.status_code, refused.text)
            sep = "&" if "?" in path else "?"
            assert client.get(f"{vm}{path}{sep}authKey=admin-key-1", auth=BACKEND).status_code < 300, path


def test_through_the_gate_a_reader_only_reads_and_a_writer_only_writes(stack: dict[str, str]) -> None:
    gate = stack["gate"]
    with httpx.Client(timeout=10) as client:
        # unknown credentials: 401 without any, 400 for a user vmauth does not know (1.79; later releases 401)
        for auth in (None, ("reader", "wrong"), BACKEND):
            answer = client.get(f"{gate}/api/v1/query", params={"query": "1"}, auth=auth)
            assert answer.status_code in (400, 401) and "success" not in answer.text, (auth, answer.text)
        assert client.post(f"{gate}/api/v1/write", content=b"x", auth=("writer", "wrong")).status_code in (400, 401)
        assert client.get(f"{gate}/api/v1/query", params={"query": "1"}, auth=READER).status_code == 200
        for auth in (READER, WRITER):
            for path in ("/api/v1/import/prometheus", "/api/v1/import", "/api/v1/admin/tsdb/delete_series",
                         "/snapshot/create", "/internal/force_merge", "/prometheus/api/v1/import/prometheus"):
                answer = client.post(f"{gate}{path}", params={"match[]": '{__name__=~".+"}', "authKey": "guess"},
                                     content=b"forged_series 1\n", auth=auth)
                assert answer.status_code >= 400 and "missing route" in answer.text, (path, auth, answer.text)
        assert client.get(f"{gate}/api/v1/query", params={"query": "1"}, auth=WRITER).status_code >= 400
        assert client.post(f"{gate}/api/v1/write", content=b"x", auth=READER).status_code >= 400
        client.get(f"{stack['vm']}/internal/force_flush", params={"authKey": "admin-key-1"}, auth=BACKEND)
        assert _series(client, gate, "forged_series") == []


def test_vmagent_writes_through_the_gate_with_the_manifests_credentials(stack: dict[str, str]) -> None:
    with httpx.Client(timeout=10) as client:
        pushed = client.post(f"{stack['agent']}/api/v1/import/prometheus",
                             content=b'satbench_gate_probe{via="vmagent"} 42\n')
        assert pushed.status_code == 204, pushed.text
        found = _wait_for(client, stack, "satbench_gate_probe")  # remote write each second, searchable ~2 s later
        assert [s["value"][1] for s in found] == ["42"]


def _wait_for(client: httpx.Client, stack: dict[str, str], name: str) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    deadline = time.monotonic() + 30
    while not found and time.monotonic() < deadline:
        client.get(f"{stack['vm']}/internal/force_flush", params={"authKey": "admin-key-1"}, auth=BACKEND)
        found = _series(client, stack["gate"], name)
        if not found:
            time.sleep(0.5)
    return found


def test_vmalert_reads_as_the_reader_and_writes_its_rules_as_the_writer(stack: dict[str, str]) -> None:
    docs = base_documents()
    alert = container(docs, "Deployment/vmalert", "vmalert")
    env = container_env(alert, SECRETS)
    tmp = Path(stack["tmp"])
    rules = tmp / "rules.yml"
    rules.write_text("groups:\n  - name: gate\n    interval: 1s\n    rules:\n"
                     "      - record: satbench_gate_recorded\n        expr: vector(7)\n")
    port = free_port()
    args = [expand(a, env) for a in alert["args"]]
    args = _flag(_flag(args, "rule", str(rules)), "httpListenAddr", f"127.0.0.1:{port}")
    args = _flag(args, "notifier.url", f"http://127.0.0.1:{free_port()}")  # no alert here; nothing listens
    for prefix in ("datasource", "remoteRead", "remoteWrite"):
        (url,) = [a.split("=", 1)[1] for a in args if a.startswith(f"-{prefix}.url=")]
        assert url == GATE_URL, (prefix, url)
        args = _flag(args, f"{prefix}.url", stack["gate"])
        (path,) = [a.split("=", 1)[1] for a in args if a.startswith(f"-{prefix}.basicAuth.passwordFile=")]
        args = _flag(args, f"{prefix}.basicAuth.passwordFile",
                     _secret_file(pod_specs(docs)["Deployment/vmalert"], alert, path, tmp / f"vmalert-{prefix}"))
    with ChildProcess([shutil.which("vmalert") or "", *args], name="vmalert",
                      ready_url=f"http://127.0.0.1:{port}/health", env=_env({})), httpx.Client(timeout=10) as client:
        found = _wait_for(client, stack, "satbench_gate_recorded")
    assert [s["value"][1] for s in found] == ["7"]
