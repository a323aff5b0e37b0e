"""The Kubernetes manifests of deploy/kubernetes as the deploy tests read them: the base file by file, each
overlay as ``kubectl kustomize`` renders it, and a pod's containers with their environment resolved the way the
kubelet resolves it (Secrets from a table the test hands in, ``$(VAR)`` in arguments expanded), so a test can
start the real binaries with exactly the flags and variables a manifest gives them.
"""

from __future__ import annotations

import functools
import re
import shutil
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml

from satbench.session.config import load_session_config

__all__ = [
    "DEPLOY",
    "OVERLAYS",
    "READER_PASSWORD",
    "RENDERINGS",
    "base_documents",
    "container",
    "container_env",
    "expand",
    "fleet_config",
    "fleet_text",
    "pod_specs",
    "render",
]

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy" / "kubernetes"
OVERLAYS = sorted(p.parent.name for p in (DEPLOY / "overlays").glob("*/kustomization.yaml"))
RENDERINGS = ["base", *(f"overlays/{o}" for o in OVERLAYS)]

Doc = dict[str, Any]


def _docs(text: str) -> list[Doc]:
    return [d for d in yaml.safe_load_all(text) if d]


def base_documents() -> list[Doc]:
    files = yaml.safe_load((DEPLOY / "base" / "kustomization.yaml").read_text())["resources"]
    return [doc for name in files for doc in _docs((DEPLOY / "base" / name).read_text())]


def render(overlay: str) -> list[Doc]:
    """``kubectl kustomize deploy/kubernetes/OVERLAY`` ("base" or "overlays/NAME"), fresh objects each call
    (rendered once per test process); skips without kubectl."""
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("kubectl is not installed (its kustomize renders the overlays)")
    return _docs(_rendered(kubectl, overlay))


@functools.cache
def _rendered(kubectl: str, overlay: str) -> str:
    done = subprocess.run([kubectl, "kustomize", str(DEPLOY / overlay)], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout


def pod_specs(docs: list[Doc]) -> dict[str, Doc]:
    """``KIND/NAME`` -> the pod template (metadata and spec) of every workload."""
    out = {}
    for doc in docs:
        spec = doc.get("spec") or {}
        template = (spec.get("jobTemplate") or {}).get("spec", {}).get("template") or spec.get("template")
        if template:
            out[f"{doc['kind']}/{doc['metadata']['name']}"] = template
    return out


def container(docs: list[Doc], workload: str, name: str) -> Doc:
    """The container ``name`` of workload ``KIND/NAME``."""
    (found,) = [c for c in pod_specs(docs)[workload]["spec"]["containers"] if c["name"] == name]
    return found


def container_env(c: Doc, secrets: Mapping[str, Mapping[str, str]]) -> dict[str, str]:
    """The variables the kubelet gives container ``c``: values, and Secret keys looked up in ``secrets``
    (Secret name -> key -> value); a Secret or key missing there is an error, as a pod would not start."""
    out: dict[str, str] = {}
    for var in c.get("env") or []:
        if "value" in var:
            out[var["name"]] = expand(var["value"], out)
            continue
        ref = var["valueFrom"].get("secretKeyRef")
        if ref is None:
            continue  # fieldRef and the like: set by Kubernetes per pod
        out[var["name"]] = secrets[ref["name"]][ref["key"]]
    return out


_REF = re.compile(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)")


def expand(text: str, env: Mapping[str, str]) -> str:
    """Kubernetes' ``$(VAR)`` expansion in a command, argument or value (an unknown name stays as written)."""
    return _REF.sub(lambda m: env.get(m.group(1), m.group(0)), text)


READER_PASSWORD = "/etc/satbench-store-reader/password"  # fleet.toml's, the reader Secret as the shards mount it


def fleet_text(docs: list[Doc]) -> str:
    config_map = next(d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"] == "satbench-fleet")
    return str(config_map["data"]["fleet.toml"])


def fleet_config(docs: list[Doc], tmp_path: Path) -> Any:
    """The fleet config as a shard loads it, the reader's password file (a Secret mounted in the pod, checked by
    the credential tests below) standing in as a file here."""
    password = tmp_path / "reader-password"
    password.write_text("reader-pass\n")
    path = tmp_path / "fleet.toml"
    path.write_text(fleet_text(docs).replace(READER_PASSWORD, str(password)))
    return load_session_config(path)
