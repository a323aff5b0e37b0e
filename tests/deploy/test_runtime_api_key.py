"""llama-server in the manifests wants an API key, and every reader of it holds the key.

Before, the nodes ran llama-server without ``--api-key``: any pod the NetworkPolicies let through could
generate, read ``/slots`` (every slot's prompt state) and ``/props``, and the exporter could not have sent a
key anyway. Now the node (llama-server in the base, ``satbench sim`` in the sim overlay) reads its key from
the Secret ``satbench-runtime-api-key`` (``--api-key-file``, a file: no key in a command line), the exporter
sidecar reads the same file (``--runtime-api-key-file``) and the shards' load generators get it in their
environment as the variable each lane of fleet.toml names (``api_key_env``). The real-binary test starts the
sim overlay's node and exporter with exactly their rendered arguments (addresses and mounted paths moved onto
this host) and shows the node refusing a keyless reader while the exporter reads every source.
"""

from __future__ import annotations

import re
import sys
import tomllib
from pathlib import Path
from typing import Any

import httpx
import pytest

from satbench.core.net import free_port
from testkit.exposition import samples
from testkit.process import ChildProcess
from tests.deploy.manifests import ROOT, pod_specs, render
from tests.deploy.test_manifests import RENDERINGS

SECRET = "satbench-runtime-api-key"


def _nodes(docs: list[dict[str, Any]]) -> dict[str, Any]:
    (nodes,) = [d for d in docs if d["kind"] == "StatefulSet" and d["metadata"]["name"] == "llamacpp"]
    return dict(nodes["spec"]["template"]["spec"])


def _flag(args: list[str], flag: str) -> str:
    assert args.count(flag) == 1, (flag, args)
    return args[args.index(flag) + 1]


def _secret_file(pod: dict[str, Any], c: dict[str, Any], path: str) -> tuple[str, str]:
    """(Secret name, key) of the file ``path`` that container ``c`` reads from a mounted Secret volume."""
    volumes = {v["name"]: v for v in pod["volumes"]}
    (mount,) = [m for m in c["volumeMounts"] if path.startswith(m["mountPath"] + "/")]
    secret = volumes[mount["name"]]["secret"]
    assert mount.get("readOnly") is True, c["name"]
    name = path.removeprefix(mount["mountPath"] + "/")
    items = {i["path"]: i["key"] for i in secret.get("items") or []}
    return secret["secretName"], items.get(name, name)


@pytest.mark.parametrize("overlay", RENDERINGS)
def test_the_node_wants_its_key_and_each_reader_of_it_holds_it(overlay: str) -> None:
    docs = render(overlay)
    pod = _nodes(docs)
    node, exporter = pod["containers"]
    assert node["name"] == "llama-server" and exporter["name"] == "exporter"
    node_key = _flag(node["args"], "--api-key-file")
    assert _secret_file(pod, node, node_key) == (SECRET, "key"), overlay
    assert _secret_file(pod, exporter, _flag(exporter["args"], "--runtime-api-key-file")) == (SECRET, "key")
    for c in pod["containers"]:
        assert "--api-key" not in c["args"], c["name"]  # a key in argv: readable by every process of the node
    (config_map,) = [d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"] == "satbench-fleet"]
    fleet = tomllib.loads(config_map["data"]["fleet.toml"])
    key_envs = {lane["api_key_env"] for node_ in fleet["nodes"] for lane in node_["lanes"]}
    assert len(key_envs) == 1, key_envs  # every lane of the fleet sends the nodes' key
    holders = set()
    for where, template in pod_specs(docs).items():
        for c in template["spec"]["containers"]:
            refs = {e["name"]: e["valueFrom"]["secretKeyRef"] for e in c.get("env") or []
                    if "secretKeyRef" in (e.get("valueFrom") or {})}
            if any(ref["name"] == SECRET for ref in refs.values()):
                holders.add(where)
            if where.startswith(("Job/", "CronJob/")):  # the shards: the variable the lanes name, from the Secret
                (env,) = key_envs
                assert refs[env] == {"name": SECRET, "key": "key"}, where
    assert holders == {"Job/satbench-fleet-walk", "CronJob/satbench-remeasure"}, overlay


def _on_this_host(args: list[str], moves: dict[str, str]) -> list[str]:
    """The rendered arguments with the pod's addresses and mounted paths moved onto this host."""
    out = []
    for arg in args:
        for old, new in moves.items():
            arg = arg.replace(old, new)
        out.append(arg)
    return out


@pytest.mark.slow
def test_the_sim_overlays_node_and_exporter_run_with_their_rendered_arguments(tmp_path: Path) -> None:
    pod = _nodes(render("overlays/sim"))
    node, exporter = pod["containers"]
    key = "sk-node-" + "n" * 24
    (tmp_path / "runtime-key").write_text(key + "\n")
    (tmp_path / "fingerprint-key").write_text("f" * 32 + "\n")
    node_port, exporter_port = free_port(), free_port()
    moves = {"0.0.0.0": "127.0.0.1", "127.0.0.1:8080": f"127.0.0.1:{node_port}",
             _flag(node["args"], "--api-key-file"): str(tmp_path / "runtime-key"),
             _flag(exporter["args"], "--fingerprint-key-file"): str(tmp_path / "fingerprint-key")}
    node_args = _on_this_host(node["args"], moves)
    node_args[node_args.index("--port") + 1] = str(node_port)
    exporter_args = _on_this_host(exporter["args"], moves)
    exporter_args[exporter_args.index("--port") + 1] = str(exporter_port)
    assert exporter_args[exporter_args.index("--runtime-url") + 1] == f"http://127.0.0.1:{node_port}"
    runtime = f"http://127.0.0.1:{node_port}"
    cli = [sys.executable, "-m", "satbench.cli"]
    with ChildProcess([*cli, *node_args], name="sim-node", ready_url=f"{runtime}/health", cwd=ROOT):
        assert httpx.get(f"{runtime}/health", timeout=5).status_code == 200  # the probes' path stays public
        for path in ("/metrics", "/slots", "/props"):
            assert httpx.get(runtime + path, timeout=5).status_code == 401, path
        with ChildProcess([*cli, *exporter_args], name="sim-exporter", cwd=ROOT,
                          ready_url=f"http://127.0.0.1:{exporter_port}/metrics"):
            got = samples(httpx.get(f"http://127.0.0.1:{exporter_port}/metrics", timeout=10).text)
    for source in ("metrics", "slots", "props"):
        assert got[f"runtime_{source}_up", ()] == 1, source
    assert key not in " ".join(node_args + exporter_args)


def test_the_exporters_parser_takes_the_key_file_of_each_rendering() -> None:
    import argparse

    from satbench.exporter.cli import configure

    parser = argparse.ArgumentParser(prog="satbench exporter", exit_on_error=False)
    configure(parser)
    for overlay in RENDERINGS:
        (_, exporter) = _nodes(render(overlay))["containers"]
        args = parser.parse_args(exporter["args"][1:])
        assert str(args.runtime_api_key_file) == "/run/satbench-runtime-api-key/key", overlay


def _secret_names(node: Any) -> set[str]:
    """Every Secret a manifest object names (volumes' secretName, env's secretKeyRef name)."""
    if isinstance(node, dict):
        found = {node["secretName"]} if isinstance(node.get("secretName"), str) else set()
        ref = node.get("secretKeyRef")
        if isinstance(ref, dict):
            found.add(ref["name"])
        return found.union(*(_secret_names(v) for v in node.values()))
    if isinstance(node, list):
        return set().union(*(_secret_names(v) for v in node))
    return set()


def test_the_first_hour_creates_every_secret_the_manifests_name() -> None:
    """docs/kubernetes.md's steps create each Secret a pod of any rendering needs (a pod whose Secret is missing
    does not start), the store's roles among them with the user names fleet.toml reads as."""
    text = (ROOT / "docs" / "kubernetes.md").read_text()
    created = set(re.findall(r"create secret generic (satbench-[a-z0-9-]+)", text))
    loop = re.search(r"for role in ([a-z ]+); do kubectl -n satbench create secret generic satbench-store-\$role", text)
    assert loop is not None and "--from-literal=username=$role" in text
    created |= {f"satbench-store-{role}" for role in loop[1].split()}
    for overlay in RENDERINGS:
        named = _secret_names(render(overlay))
        assert named - created == set(), overlay
    assert SECRET in created
