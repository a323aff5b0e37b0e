"""The NetworkPolicies of each rendering let every component reach exactly what the table below says.

A policy's intent cannot be read off its YAML at a glance: one missing ``podSelector`` beside a
``namespaceSelector`` opens a port to a whole namespace, one empty ``to`` opens every address. So the rendered
policies are evaluated, as a network plugin evaluates them, for every pair of endpoints and every port the
destination listens on: the workloads' pods (labels and container ports from their templates), and endpoints
outside the namespace (the cluster DNS and another pod of kube-system, a namespace that reads recommendations, an
ingress controller's namespace, an unrelated namespace, the Kubernetes API and an address on the internet). A
connection is allowed when the source's egress allows it (or no Egress policy selects the source) and the
destination's ingress allows it (or no Ingress policy selects it); policies of other namespaces are not modelled
(their pods may send anything). ``ipBlock`` peers match the addresses outside the cluster only (what the API
says they are for; for pod addresses the behaviour is the plugin's). The set allowed must equal ``INTENDED``:
a reach not in the table is an over-broad policy, a reach in the table not allowed a broken deployment. The
evaluator is itself tested on small cases, and planted over-broad policies are shown to be caught.
"""

from __future__ import annotations

import copy
import ipaddress
from dataclasses import dataclass, field
from typing import Any

import pytest

from tests.deploy.manifests import OVERLAYS, pod_specs, render

NAMESPACE = "satbench"


@dataclass(frozen=True)
class Endpoint:
    name: str
    namespace: str | None  # None: outside the cluster (an address)
    labels: dict[str, str] = field(default_factory=dict, hash=False, compare=False)
    namespace_labels: dict[str, str] = field(default_factory=dict, hash=False, compare=False)
    ports: frozenset[tuple[int, str, str]] = frozenset()  # (number, protocol, name)
    ip: str | None = None


def _ns(name: str, **labels: str) -> dict[str, str]:
    return {"kubernetes.io/metadata.name": name, **labels}


OUTSIDE = (
    Endpoint("kube-dns", "kube-system", {"k8s-app": "kube-dns"}, _ns("kube-system"),
             frozenset({(53, "UDP", "dns"), (53, "TCP", "dns-tcp")})),
    Endpoint("kube-system-other", "kube-system", {"k8s-app": "metrics-server"}, _ns("kube-system"),
             frozenset({(53, "UDP", ""), (443, "TCP", "https")})),
    Endpoint("reporting", "reporting", {"app": "router"},
             _ns("reporting", **{"satbench.io/reads-recommendations": "true"}), frozenset({(8080, "TCP", "http")})),
    Endpoint("ingress-controller", "ingress", {"app": "ingress"},
             _ns("ingress", **{"satbench.io/grafana-ingress": "true"}), frozenset({(443, "TCP", "https")})),
    Endpoint("elsewhere", "elsewhere", {"app.kubernetes.io/name": "vmagent"}, _ns("elsewhere"),
             frozenset({(8080, "TCP", "http"), (9101, "TCP", "exporter")})),
    Endpoint("kube-apiserver", None, ports=frozenset({(443, "TCP", ""), (6443, "TCP", "")}), ip="10.0.0.1"),
    Endpoint("internet", None, ports=frozenset({(443, "TCP", ""), (80, "TCP", "")}), ip="203.0.113.7"),
)

Reach = tuple[str, str, int, str]  # (source, destination, port, protocol)

_DNS = {(53, "UDP"), (53, "TCP")}
_BY_NAME = {"vmauth", "vmagent", "vmalert", "satbench-recommender", "satbench-loadgen", "grafana", "alertmanager"}


def _intended(overlay: str) -> set[Reach]:
    reach: set[Reach] = set()

    def allow(src: str, dst: str, *ports: int) -> None:
        reach.update((src, dst, p, "TCP") for p in ports)

    allow("satbench-loadgen", "llamacpp", 8080, 9101)
    allow("satbench-loadgen", "vmauth", 8427)
    allow("satbench-loadgen", "satbench-recommender", 9108)
    allow("vmagent", "llamacpp", 9101)
    allow("vmagent", "satbench-loadgen", 9110)
    allow("vmagent", "satbench-recommender", 9108)
    allow("vmagent", "vmauth", 8427)
    allow("vmagent", "kube-apiserver", 443, 6443)
    allow("vmagent", "internet", 443)  # the API rule's 0.0.0.0/0, until narrowed to the API's address
    allow("satbench-recommender", "vmauth", 8427)
    allow("grafana", "vmauth", 8427)
    allow("vmalert", "vmauth", 8427)
    allow("vmalert", "alertmanager", 9093)
    allow("reporting", "satbench-recommender", 9108)
    allow("ingress-controller", "grafana", 3000)
    if overlay == "overlays/cluster":
        allow("vmauth", "vminsert", 8480)
        allow("vmauth", "vmselect", 8481)
        allow("vminsert", "vmstorage", 8400)
        allow("vmselect", "vmstorage", 8401)
        by_name = _BY_NAME | {"vminsert", "vmselect"}
    else:
        allow("vmauth", "victoria-metrics", 8428)
        by_name = _BY_NAME
    reach.update((src, "kube-dns", port, proto) for src in by_name for port, proto in _DNS)
    return reach


def _matches(selector: dict[str, Any] | None, labels: dict[str, str]) -> bool:
    if selector is None:
        return True
    if any(labels.get(k) != v for k, v in (selector.get("matchLabels") or {}).items()):
        return False
    for expr in selector.get("matchExpressions") or []:
        key, op, values = expr["key"], expr["operator"], expr.get("values") or []
        ok = {"In": key in labels and labels[key] in values, "NotIn": key not in labels or labels[key] not in values,
              "Exists": key in labels, "DoesNotExist": key not in labels}[op]
        if not ok:
            return False
    return True


def _peer_matches(peer: dict[str, Any], other: Endpoint) -> bool:
    if "ipBlock" in peer:
        if other.ip is None:
            return False
        ip = ipaddress.ip_address(other.ip)
        block = peer["ipBlock"]
        return ip in ipaddress.ip_network(block["cidr"]) and not any(
            ip in ipaddress.ip_network(e) for e in block.get("except") or [])
    if other.namespace is None:
        return False
    if "namespaceSelector" in peer:
        if not _matches(peer["namespaceSelector"], other.namespace_labels):
            return False
    elif other.namespace != NAMESPACE:
        return False
    return _matches(peer.get("podSelector"), other.labels)


def _port_matches(rule_ports: list[dict[str, Any]] | None, port: tuple[int, str, str]) -> bool:
    if not rule_ports:
        return True
    number, protocol, name = port
    for p in rule_ports:
        if p.get("protocol", "TCP") != protocol:
            continue
        want = p.get("port")
        if want is None or want == number or (isinstance(want, str) and want == name):
            return True
        if isinstance(want, int) and "endPort" in p and want <= number <= p["endPort"]:
            return True
    return False


def _types(policy: dict[str, Any]) -> set[str]:
    spec = policy["spec"]
    return set(spec.get("policyTypes") or (["Ingress"] + (["Egress"] if "egress" in spec else [])))


def _side_allows(policies: list[dict[str, Any]], kind: str, subject: Endpoint, other: Endpoint,
                 port: tuple[int, str, str]) -> bool:
    """Whether ``subject``'s policies of ``kind`` (Ingress: ``other`` is the source) let the connection through."""
    if subject.namespace != NAMESPACE:
        return True
    chosen = [p for p in policies if kind in _types(p) and _matches(p["spec"]["podSelector"], subject.labels)]
    if not chosen:
        return True
    rules_key, peers_key = ("ingress", "from") if kind == "Ingress" else ("egress", "to")
    for policy in chosen:
        for rule in policy["spec"].get(rules_key) or []:
            peers = rule.get(peers_key)
            from_peer = not peers or any(_peer_matches(peer, other) for peer in peers)
            if from_peer and _port_matches(rule.get("ports"), port):
                return True
    return False


def allowed(policies: list[dict[str, Any]], endpoints: list[Endpoint]) -> set[Reach]:
    """Every (source, destination, port, protocol) the policies let through, over every destination port, where
    the source or the destination is a pod of the namespace."""
    out: set[Reach] = set()
    for src in endpoints:
        for dst in endpoints:
            if src == dst or NAMESPACE not in (src.namespace, dst.namespace):
                continue  # a pod's own loopback is not subject to policies; the others' traffic not ours
            for port in dst.ports:
                if (_side_allows(policies, "Egress", src, dst, port)
                        and _side_allows(policies, "Ingress", dst, src, port)):
                    out.add((src.name, dst.name, port[0], port[1]))
    return out


def endpoints_of(docs: list[dict[str, Any]]) -> list[Endpoint]:
    """The workloads' pods (one per workload, named by app.kubernetes.io/name) and the endpoints outside."""
    ns_labels = _ns(NAMESPACE)
    for doc in docs:
        if doc["kind"] == "Namespace":
            ns_labels |= doc["metadata"].get("labels") or {}
    pods = []
    for template in pod_specs(docs).values():
        labels = template["metadata"]["labels"]
        ports = frozenset((p["containerPort"], p.get("protocol", "TCP"), p.get("name", ""))
                          for c in template["spec"]["containers"] for p in c.get("ports") or [])
        pods.append(Endpoint(labels["app.kubernetes.io/name"], NAMESPACE, labels, ns_labels, ports))
    return [*pods, *OUTSIDE]


def _policies(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [d for d in docs if d["kind"] == "NetworkPolicy"]


def _differences(docs: list[dict[str, Any]], overlay: str) -> tuple[set[Reach], set[Reach]]:
    """(allowed but not intended, intended but not allowed)."""
    got = allowed(_policies(docs), endpoints_of(docs))
    want = _intended(overlay)
    return got - want, want - got


RENDERINGS = ["base", *(f"overlays/{o}" for o in OVERLAYS)]


@pytest.mark.parametrize("overlay", RENDERINGS)
def test_each_component_reaches_exactly_what_it_must(overlay: str) -> None:
    docs = render(overlay)
    names = {e.name for e in endpoints_of(docs)}
    assert {src for src, *_ in _intended(overlay)} | {dst for _, dst, *_ in _intended(overlay)} <= names
    extra, missing = _differences(docs, overlay)
    assert extra == set(), f"over-broad: {sorted(extra)}"
    assert missing == set(), f"blocked though needed: {sorted(missing)}"


@pytest.mark.parametrize("overlay", RENDERINGS)
def test_everything_starts_denied(overlay: str) -> None:
    (deny,) = [p for p in _policies(render(overlay)) if p["metadata"]["name"] == "default-deny"]
    assert deny["spec"] == {"podSelector": {}, "policyTypes": ["Ingress", "Egress"]}


def _with(docs: list[dict[str, Any]], name: str, edit: Any) -> list[dict[str, Any]]:
    out = copy.deepcopy(docs)
    (policy,) = [d for d in out if d["kind"] == "NetworkPolicy" and d["metadata"]["name"] == name]
    edit(policy["spec"])
    return out


def _planted_policy(spec: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
            "metadata": {"name": "planted", "namespace": NAMESPACE}, "spec": spec}


def test_planted_over_broad_policies_are_caught() -> None:
    docs = render("base")
    store = {"podSelector": {"matchLabels": {"app.kubernetes.io/name": "victoria-metrics"}}}
    planted = {
        # the store opened to every namespace: the attack of the issue, from anywhere
        "store from any namespace": [*docs, _planted_policy(
            {**store, "ingress": [{"from": [{"namespaceSelector": {}}]}]})],
        # the DNS rule without its podSelector: every pod of kube-system on 53
        "dns to all of kube-system": _with(docs, "cluster-dns", lambda s: s["egress"][0]["to"][0].pop("podSelector")),
        # a load generator let out anywhere
        "loadgen egress to all": _with(docs, "satbench-loadgen", lambda s: s["egress"].append({})),
        # the load generators' rule without its peers: llama-server and the exporter answer any source
        "llama-server rule without peers": _with(docs, "llamacpp", lambda s: s["ingress"][0].pop("from")),
        # the exporter's rule without ports: caught only where a source's own egress lets it through
        "exporter rule without ports": _with(docs, "llamacpp", lambda s: s["ingress"][1].pop("ports")),
        # the default deny gone: Grafana's egress and every unpoliced ingress open
        "no default deny": [d for d in docs if d["metadata"]["name"] != "default-deny"],
        # a namespaceSelector and a podSelector as two peers (OR) where one peer (AND) was meant
        "recommender OR instead of AND": _with(docs, "satbench-recommender", lambda s: s["ingress"][0]["from"].append(
            {"namespaceSelector": {}})),
    }
    for what, planted_docs in planted.items():
        extra, _ = _differences(planted_docs, "base")
        if what == "exporter rule without ports":  # vmagent's egress allows 9101 only: defence in depth holds
            assert extra == set(), extra
            continue
        assert extra, f"{what}: not caught"
    assert ("elsewhere", "llamacpp", 8080, "TCP") in _differences(planted["llama-server rule without peers"], "base")[0]
    store_open = _differences(planted["store from any namespace"], "base")[0]
    assert ("elsewhere", "victoria-metrics", 8428, "TCP") in store_open
    assert ("satbench-loadgen", "victoria-metrics", 8428, "TCP") not in store_open  # its own egress still holds
    assert ("satbench-loadgen", "kube-system-other", 53, "UDP") in _differences(
        planted["dns to all of kube-system"], "base")[0]


def test_a_missing_reach_is_caught() -> None:
    docs = _with(render("base"), "vmauth", lambda s: s["ingress"][0]["from"][0]["podSelector"]["matchExpressions"][0][
        "values"].remove("grafana"))
    extra, missing = _differences(docs, "base")
    assert extra == set() and missing == {("grafana", "vmauth", 8427, "TCP")}


def _pod(name: str, ns: str = NAMESPACE, **labels: str) -> Endpoint:
    return Endpoint(name, ns, {"app": name, **labels}, _ns(ns), frozenset({(80, "TCP", "http"), (53, "UDP", "dns")}))


A, B, C = _pod("a"), _pod("b", tier="db"), _pod("c", "other")
NET = Endpoint("net", None, ports=frozenset({(80, "TCP", "")}), ip="198.51.100.1")


def _to(dst: str, reaches: set[Reach]) -> set[Reach]:
    return {r for r in reaches if r[1] == dst}


def _from(src: str, reaches: set[Reach]) -> set[Reach]:
    return {r for r in reaches if r[0] == src}


EVERYTHING = allowed([], [A, B, C, NET])
CASES: list[tuple[str, dict[str, Any], set[Reach]]] = [
    ("no rules, Ingress by default: nothing in to the namespace's pods", {"podSelector": {}},
     EVERYTHING - _to("a", EVERYTHING) - _to("b", EVERYTHING)),
    ("one empty rule: everything in", {"podSelector": {"matchLabels": {"app": "b"}}, "ingress": [{}]}, EVERYTHING),
    ("a peer and a named port", {"podSelector": {"matchLabels": {"app": "b"}}, "ingress": [
        {"from": [{"podSelector": {"matchLabels": {"app": "a"}}}], "ports": [{"port": "http"}]}]},
     EVERYTHING - _to("b", EVERYTHING) | {("a", "b", 80, "TCP")}),
    ("namespace AND pod in one peer: c is in other but not app=a", {"podSelector": {"matchLabels": {"app": "b"}},
     "ingress": [{"from": [{
         "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "other"}},
         "podSelector": {"matchExpressions": [{"key": "app", "operator": "In", "values": ["a"]}]}}]}]},
     EVERYTHING - _to("b", EVERYTHING)),
    ("namespace OR pod as two peers", {"podSelector": {"matchLabels": {"app": "b"}}, "ingress": [{"from": [
        {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "other"}}},
        {"podSelector": {"matchExpressions": [{"key": "app", "operator": "In", "values": ["a"]}]}}]}]},
     EVERYTHING - {("net", "b", 80, "TCP"), ("net", "b", 53, "UDP")}),
    ("an ipBlock with its except: matches no pod, and not the excepted address",
     {"podSelector": {"matchExpressions": [{"key": "tier", "operator": "Exists"}]}, "policyTypes": ["Egress"],
      "egress": [{"to": [{"ipBlock": {"cidr": "198.51.100.0/24", "except": ["198.51.100.1/32"]}}]}]},
     EVERYTHING - _from("b", EVERYTHING)),
    ("a port range and a protocol, to anywhere", {"podSelector": {"matchExpressions": [
        {"key": "tier", "operator": "DoesNotExist"}, {"key": "app", "operator": "NotIn", "values": ["c"]}]},
        "policyTypes": ["Egress"], "egress": [{"ports": [{"protocol": "UDP", "port": 50, "endPort": 60}]}]},
     EVERYTHING - _from("a", EVERYTHING) | {("a", "b", 53, "UDP"), ("a", "c", 53, "UDP")}),
]


@pytest.mark.parametrize(("case", "spec", "expected"), CASES, ids=[c[0] for c in CASES])
def test_the_evaluator_reads_policies_as_the_api_defines_them(case: str, spec: dict[str, Any],
                                                              expected: set[Reach]) -> None:
    assert allowed([_planted_policy(spec)], [A, B, C, NET]) == expected, case
