"""The session config: one pydantic ``SessionConfig`` (TOML at the boundary), validated before anything runs.

A session needs more than the load generator: where each lane's runtime comes from (an embedded simulator
started here, a real ``llama-server`` started here from a model in ``model_dir``, or an external endpoint
already running), whether to start Prometheus and the recommender or use running ones, and where the run
folder goes. The load generator's own settings are embedded as loadgen's ``LoadgenConfig`` (its ``lanes``
are filled in by the session once each runtime's URL is known), so a ladder or a timing is configured once.

With no file at all the session is the README's ``make run``: two simulator lanes (``dense``, ``moe``),
ladder 1/2/4/8, a local Prometheus and recommender; timings shortened so that it finishes in about two
minutes on a small machine (``DEFAULT_LOADGEN``). The event-loop lag limit of lanes timed by the client's
reads (HTTPS) is relaxed to 50 ms there because the default session runs the runtimes, exporters and
Prometheus on the same few cores as the load generator; plain-HTTP lanes are timed by kernel receive stamps
and judged by their users' idle share instead (:mod:`loadgen.selfcheck`). ``min_requests`` is
the policy's ``min_requests_per_step`` and a fifth more (12 for the default 10; ``LOADGEN_FROM_POLICY``), so
a slow rung's window is stretched until it counts by the policy that judges it. Against real HTTPS endpoints,
set ``loadgen.max_loop_lag_s`` back to loadgen's strict default. Output lengths are drawn from 48..80 tokens
(mean 64) so that closed-loop users do not run in lockstep, which no real traffic does: with fixed lengths
every user finishes and re-enters prefill at the same instant, and the decode-stall verdict would measure
that artefact. API keys are never part of the config: a lane
names the environment variable that holds its key.

The session's ladder extends (``loadgen.ladder.extend = true``, unless set to false): past the top listed
rung it keeps doubling concurrency while the newest rung is still worth it by the recommender's own
measure, so the walk does not end below saturation (``ladder_top``). Its thresholds come from the policy
this session uses (``[policy]``, validated as ``answer.policy.Policy``): ``extend_min_gain`` from
``min_gain_per_doubling``, ``extend_ttft_p95_s`` and ``extend_itl_p95_s`` from ``slo`` (where the TTFT
deadline grows with the prompt, ``slo.ttft_per_1k_prompt_s``, the share of requests past their own deadline
instead: ``extend_ttft_late_share`` 5 %, what a p95 allows), ``extend_max_error_ratio`` from
``max_error_ratio``; a value set in ``[loadgen.ladder]`` (or with ``--set``) wins. ``ladder.max_concurrency``
(64) caps it; on the simulator profiles (4 and 8 slots) it adds a rung or two.
``loadgen.decide_gain`` (sequential measuring: a window whose gain over the rung below straddles it goes on)
is the policy's ``min_gain_per_doubling`` too, unless set, and ``loadgen.usable_ci_rel`` (a rung too unsteady to
use at ``max_window_s``, the lowest included, goes on, doubling, up to ``hold_max_window_s``, 120 s) the
policy's ``max_throughput_ci_ratio``.

Every value is bounded as the load generator's are (``core.config_files``: finite floats, lengths within
``MAX_TOKENS``, durations within ``MAX_SECONDS``), and ``satbench run`` reads the trace and dataset files the
config names once, checked whole, before anything starts: a value past its bound is one line naming the
setting (exit 2), never a failure after the runtimes and the ladder ran.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict
from pathlib import Path
from typing import Any

from pydantic import (
    Field,
    ValidationInfo,
    field_serializer,
    field_validator,
    model_validator,
)

from satbench.answer.policy import Policy, objectives_of
from satbench.core.config_files import MAX_SECONDS, MAX_TOKENS, FieldError, HttpUrl, load_toml_model, merge_tables
from satbench.core.lanes import LOCAL_NODE, Lane, duplicate_names, lane_named
from satbench.evidence import refuse_home_path
from satbench.loadgen.config import LadderConfig, LaneConfig, LoadgenConfig, ObjectivesConfig
from satbench.runtimes.registry import check_name, kind_of
from satbench.session.sections import FleetSection, NodeSection, PrometheusSection, RecommenderSection, SectionModel
from satbench.simulator.profile import ProfileError, load_profile

__all__ = [
    "DEFAULT_LOADGEN",
    "LLAMACPP_DEFAULTS",
    "FleetSection",
    "LaneRuntime",
    "NodeSection",
    "PrometheusSection",
    "RecommenderSection",
    "SessionConfig",
    "SessionConfigError",
    "load_session_config",
    "nodes_of",
]

DEFAULT_LOADGEN: dict[str, Any] = {
    "ladder": {"concurrency": [1, 2, 4, 8], "extend": True},
    "warmup_s": 2.0,
    "min_window_s": 8.0,
    "max_window_s": 12.0,
    # a rung's window ends once its throughput is known within 8 %; where the gain over the rung below
    # straddles the policy's gain, it goes on (loadgen.decide_gain): certainty where a decision needs it
    "ci_rel_bound": 0.08,
    "decide_max_window_s": 24.0,
    # a rung too thin or too unsteady to use at max_window_s (the lowest rung of a slow model: 60 ms a step and
    # 128-token answers finish a request in 7.7 s, 12 of them in about 90 s) is measured on, its window doubling,
    # up to two minutes before it is given up: only a rung that would otherwise be lost pays for it
    "hold_max_window_s": 120.0,
    # what the users sent after the window counts for nothing: a second to end cleanly, then it is cut off
    "drain_settle_s": 1.0,
    "max_loop_lag_s": 0.05,
    "workload": {"output_tokens": {"kind": "uniform", "low": 48, "high": 80}},
}


LLAMACPP_DEFAULTS = {"parallel": 4, "ctx_size": 4096, "batch": 2048, "ubatch": 512}


class SessionConfigError(ValueError):
    """The session config was refused; the message names every bad field."""


class LaneRuntime(Lane):
    """One lane and where its runtime comes from (the fields every lane has: ``core.lanes.Lane``)."""

    runtime: str = "simulator"  # a key of satbench.runtimes.registry.RUNTIMES
    profile: str = "dense"
    url: HttpUrl | None = None
    model_file: str | None = None
    # The settings that shape serving; None is the runtime's own: the simulator profile's, or for
    # llama-server LLAMACPP_DEFAULTS. The manifest records the config as given and each runtime's /props.
    parallel: int | None = Field(default=None, gt=0, le=256)
    ctx_size: int | None = Field(default=None, gt=0, le=MAX_TOKENS)
    batch: int | None = Field(default=None, gt=0, le=MAX_TOKENS)
    ubatch: int | None = Field(default=None, gt=0, le=MAX_TOKENS)
    threads: int | None = Field(default=None, gt=0, le=4096)
    server_args: list[str] = Field(default_factory=list)
    # An exporter already running for this lane (compose, or one on the node itself): the session starts
    # none and records this URL; the Prometheus the session uses must scrape it with this lane's label.
    exporter_url: HttpUrl | None = None
    # Start this lane's exporter in relay mode (satbench exporter --relay) and send the load generator through
    # the relay, for node-side latencies beside the client's (runtime_ttft_seconds...; the dashboards'
    # "node vs client" row). The relay runs beside the exporter the session starts, on this host; the manifest
    # records the runtime's url and the relay's (relay_url), the load generator's own entry the URL it used.
    relay: bool = False
    # ``node`` (core.lanes.Lane): the runtime host the lane is on, its identity in the answer (``<node>/<lane>``).
    # Lanes of a runtime this session starts (simulator or llamacpp) that name the same node are served by
    # one server in router mode (satbench.runtimes.router), one model per lane: the model id is the lane's
    # ``model``, else its name. Unset: the lane gets a server of its own, as before. An external lane that
    # names a node is only filed under it (a node of a fleet, [[nodes]]).

    @property
    def model_id(self) -> str:
        """The model a router node knows this lane by (what its requests name)."""
        return self.model or self.name

    def setting(self, name: str) -> int:
        """A serving setting for a llama-server this session starts: the lane's, else ``LLAMACPP_DEFAULTS``."""
        value = getattr(self, name)
        return LLAMACPP_DEFAULTS[name] if value is None else int(value)

    def at(self, url: str) -> LaneConfig:
        """The load generator's lane for this deployment, now that its runtime answers at ``url``."""
        fields = self.fields_of()
        if self.node is not None and self.started:  # a router routes by model: name the model
            fields["model"] = self.model_id
        return LaneConfig(**fields, url=url)

    @property
    def started(self) -> bool:
        """Whether the session starts this lane's server (``runtimes.registry``: not an external one)."""
        return kind_of(self.runtime).started

    @field_validator("runtime", mode="before")
    @classmethod
    def _known_runtime(cls, value: Any) -> str:
        return check_name(value)

    @property
    def serves(self) -> str | None:
        """What the lane's server serves, as its runtime's ``model_setting`` names it (the simulator's profile,
        llama-server's GGUF); None for an external lane."""
        setting = kind_of(self.runtime).model_setting
        return None if setting is None else str(getattr(self, setting))

    @model_validator(mode="after")
    def _check_runtime(self) -> LaneRuntime:
        if self.runtime == "simulator":
            _check_profile(self.profile)
        if not self.started and not self.url:
            raise FieldError([("url", "an external runtime needs a url (its base URL, http://host:port)")])
        if self.started and self.url:
            raise FieldError([("url", "only for runtime = 'external' (the session picks the ports of "
                               "the runtimes it starts)")])
        if self.runtime == "llamacpp" and not self.model_file:
            raise FieldError([("model_file", "a llamacpp runtime needs model_file (a GGUF in model_dir)")])
        if self.api not in kind_of(self.runtime).apis:
            raise FieldError([("api", f"runtime {self.runtime} is not loaded through {self.api!r} (it serves "
                               f"{', '.join(kind_of(self.runtime).apis)})")])
        return self

    @model_validator(mode="after")
    def _check_node(self) -> LaneRuntime:
        if self.node == LOCAL_NODE:
            raise FieldError([("node", f"{LOCAL_NODE!r} is reserved for lanes that name no node")])
        if self.node is None or not self.started:  # an external lane is only filed under its node
            return self
        if self.relay:
            raise FieldError([("relay", "not with node: the relay fronts one model's server, not a router")])
        if self.server_args:
            raise FieldError([("server_args", "not with node: a router node takes each model's settings from "
                               "parallel, ctx_size, batch, ubatch and threads (its preset)")])
        return self

    @model_validator(mode="after")
    def _check_relay(self) -> LaneRuntime:
        if self.relay and self.exporter_url:
            raise FieldError([("relay", "the session starts a relay only with an exporter it starts: with "
                               "exporter_url set, run that exporter with --relay and point url at the relay")])
        return self


def _check_profile(profile: str) -> None:
    try:
        load_profile(profile)
    except ProfileError as exc:
        raise FieldError([("profile", str(exc))]) from None


def _default_lanes() -> list[LaneRuntime]:
    return [LaneRuntime(name="dense", profile="dense"), LaneRuntime(name="moe", profile="moe")]


# Every setting of the load generator that is one of the policy's figures, and the figure: the one table, so a
# threshold the walk decides by cannot disagree with the policy that judges it (the ladder's plateau stop once
# kept its own 0.10 whatever the policy's gain). A value set in [loadgen] wins and is said in the manifest
# (``SessionConfig.policy_overrides``). tests/session/test_config_policy.py holds every gain-like setting here.
LADDER_FROM_POLICY = {
    "plateau_min_gain": lambda policy: policy.min_gain_per_doubling,
    "extend_min_gain": lambda policy: policy.min_gain_per_doubling,
    # one TTFT deadline: its p95; one that grows with the prompt: the share past each request's own (a p95: 5 %)
    "extend_ttft_p95_s": lambda policy: None if policy.slo.ttft_per_1k_prompt_s else policy.slo.ttft_p95_s,
    "extend_ttft_late_share": lambda policy: 0.05 if policy.slo.ttft_per_1k_prompt_s else None,
    "extend_itl_p95_s": lambda policy: policy.slo.itl_p95_s,
    "extend_max_error_ratio": lambda policy: policy.max_error_ratio,
}
LOADGEN_FROM_POLICY = {
    # a window ends with a fifth more requests than the policy counts a rung by (12 for its 10): one that
    # errs or ends late does not leave the rung too thin to judge
    "min_requests": lambda policy: math.ceil(1.2 * policy.min_requests_per_step),
    # measure longer where a doubling straddles the gain, and where a rung would be too unsteady to use
    "decide_gain": lambda policy: policy.min_gain_per_doubling,
    "usable_ci_rel": lambda policy: policy.max_throughput_ci_ratio,
}


def _ladder_from_policy(ladder: LadderConfig, policy: Policy) -> LadderConfig:
    """``ladder`` with each policy threshold it was not given set from ``policy``."""
    fill = {k: get(policy) for k, get in LADDER_FROM_POLICY.items() if k not in ladder.model_fields_set}
    if fill.get("extend_ttft_late_share", 0.0) is None:  # unchecked, as it was before there was one
        del fill["extend_ttft_late_share"]
    if not fill:
        return ladder
    return LadderConfig.model_validate({**ladder.model_dump(exclude_unset=True), **fill})


def policy_overrides(loadgen: LoadgenConfig, policy: Policy) -> dict[str, dict[str, Any]]:
    """The load generator's policy settings that hold another value than the policy's (set in ``[loadgen]``:
    what the policy filled is the policy's), e.g. ``{"loadgen.ladder.plateau_min_gain": {"set": 0.2,
    "policy": 0.05}}``."""
    out: dict[str, dict[str, Any]] = {}
    for prefix, table, mine in (("loadgen.ladder.", LADDER_FROM_POLICY, loadgen.ladder),
                                ("loadgen.", LOADGEN_FROM_POLICY, loadgen)):
        for key, get in table.items():
            theirs = get(policy)
            if theirs is not None and getattr(mine, key) != theirs:
                out[prefix + key] = {"set": getattr(mine, key), "policy": theirs}
    return out


class SessionConfig(SectionModel):
    lanes: list[LaneRuntime] = Field(default_factory=_default_lanes)
    # A fleet: each node's lanes join ``lanes`` with ``node`` set (``_with_nodes``); ``nodes`` keeps the labels.
    nodes: list[NodeSection] = Field(default_factory=list)
    fleet: FleetSection = Field(default_factory=FleetSection)
    # The policy is validated before loadgen, whose ladder extension takes its thresholds from it. It is
    # recorded (the manifest's config, the recommender's policy file) as given: the settings the config named.
    policy: Policy = Field(default_factory=Policy)
    loadgen: LoadgenConfig = Field(default_factory=lambda: LoadgenConfig.model_validate(DEFAULT_LOADGEN),
                                   validate_default=True)
    prometheus: PrometheusSection = Field(default_factory=PrometheusSection)
    recommender: RecommenderSection = Field(default_factory=RecommenderSection)
    model_dir: Path | None = None
    out_dir: Path = Path("runs")
    # How long each part the session starts may take to answer: a runtime (a llama-server loading its model
    # included), an exporter, the first scrapes of them all.
    start_timeout_s: float = Field(default=30.0, gt=0.0, le=MAX_SECONDS)

    @field_serializer("policy")
    def _policy_as_given(self, policy: Policy) -> dict[str, Any]:
        return self.policy_given

    @property
    def policy_given(self) -> dict[str, Any]:
        """The policy's settings the config named (``{}``: the default policy), as JSON."""
        return self.policy.model_dump(mode="json", exclude_unset=True)

    @property
    def policy_overrides(self) -> dict[str, dict[str, Any]]:
        """The load generator's settings that are the policy's figures but were set to another value (the
        manifest's ``policy_overrides``, absent where none)."""
        return policy_overrides(self.loadgen, self.policy)

    @field_validator("loadgen")
    @classmethod
    def _extend_by_policy(cls, value: LoadgenConfig, info: ValidationInfo) -> LoadgenConfig:
        policy = info.data.get("policy")
        if not isinstance(policy, Policy):  # the policy was refused, and its error says why
            return value
        ladder = _ladder_from_policy(value.ladder, policy)
        update: dict[str, Any] = {} if ladder is value.ladder else {"ladder": ladder}
        update |= {k: get(policy) for k, get in LOADGEN_FROM_POLICY.items() if k not in value.model_fields_set}
        if "objectives" not in value.model_fields_set:  # goodput by the policy's per-request objectives
            update["objectives"] = ObjectivesConfig.model_validate(asdict(objectives_of(policy)))
        if "target" not in value.arrival.model_fields_set:
            update["arrival"] = value.arrival.model_copy(update={"target": policy.attainment_target})
        return value.model_copy(update=update) if update else value

    @field_validator("model_dir")
    @classmethod
    def _refuse_home(cls, value: Path | None) -> Path | None:
        return None if value is None else refuse_home_path(value)

    @model_validator(mode="after")
    def _check(self) -> SessionConfig:
        if not self.lanes:
            raise FieldError([("lanes", "a session needs at least one lane")])
        dupes = duplicate_names(self.lanes)
        if dupes:
            raise FieldError([("lanes", f"duplicate lane names: {', '.join(dupes)} (names are unique per node)")])
        if self.loadgen.lanes:
            raise FieldError([("loadgen.lanes", "put lanes in [[lanes]] at the top level, not in [loadgen]")])
        problems = _node_problems(self.lanes)
        if problems:
            raise FieldError(problems)
        if any(lane.runtime == "llamacpp" for lane in self.lanes) and self.model_dir is None:
            raise FieldError([("model_dir", "llamacpp lanes need model_dir (the folder of their GGUF files)")])
        return self

    def lane(self, name: str) -> LaneRuntime:
        return lane_named(self.lanes, name)

    def node_labels(self, node: str) -> dict[str, str]:
        """The labels of ``node`` (``[[nodes]]`` or file_sd); none for a node the config gives none."""
        for section in self.nodes:
            if section.name == node:
                return dict(section.labels)
        return {}

    @model_validator(mode="before")
    @classmethod
    def _with_nodes(cls, data: Any) -> Any:
        """``[[nodes]]`` and ``[fleet] file_sd`` flattened into ``lanes`` (each lane naming its node)."""
        if not isinstance(data, dict) or not (data.get("nodes") or (data.get("fleet") or {}).get("file_sd")):
            return data
        nodes = [dict(n) for n in data.get("nodes") or [] if isinstance(n, dict)]
        fleet = data.get("fleet") or {}
        for path in fleet.get("file_sd") or [] if isinstance(fleet, dict) else []:
            nodes.extend(_file_sd_nodes(Path(path)))
        names = [n.get("name") for n in nodes]
        dupes = sorted({str(n) for n in names if names.count(n) > 1})
        if dupes:
            raise FieldError([("nodes", f"duplicate node names: {', '.join(dupes)} (each node once; its "
                               "lanes in its own [[nodes.lanes]])")])
        lanes = list(data.get("lanes") or [])
        for node in nodes:
            for lane in node.get("lanes") or []:
                if isinstance(lane, dict):
                    if lane.get("node", node.get("name")) != node.get("name"):
                        raise FieldError([("nodes", f"node {node.get('name')}: lane {lane.get('name')} names "
                                           f"another node ({lane.get('node')})")])
                    lanes.append({**lane, "node": node.get("name")})
        return {**data, "lanes": lanes, "nodes": nodes}


def nodes_of(lanes: list[LaneRuntime]) -> dict[str, list[LaneRuntime]]:
    """The router nodes of a session (lanes of runtimes it starts that name a node): node -> its lanes."""
    out: dict[str, list[LaneRuntime]] = {}
    for lane in lanes:
        if lane.node is not None and lane.started:
            out.setdefault(lane.node, []).append(lane)
    return out


def _node_problems(lanes: list[LaneRuntime]) -> list[tuple[str, str]]:
    problems: list[tuple[str, str]] = []
    for node, members in nodes_of(lanes).items():
        kinds = sorted({lane.runtime for lane in members})
        if len(kinds) > 1:
            problems.append(("lanes", f"node {node} mixes runtimes {', '.join(kinds)}: one router serves a node"))
        ids = [lane.model_id for lane in members]
        dupes = sorted({i for i in ids if ids.count(i) > 1})
        if dupes:
            problems.append(("lanes", f"node {node}: two lanes name model {', '.join(dupes)}; give each its own "
                             "model (the id its requests name)"))
    return problems


def _file_sd_nodes(path: Path) -> list[dict[str, Any]]:
    """The nodes of a Prometheus file_sd target file (``FleetSection``), as ``[[nodes]]`` tables."""
    try:
        text = path.read_text(encoding="utf-8")
        if path.suffix in (".yml", ".yaml"):
            try:
                import yaml
            except ImportError:
                raise FieldError([("fleet.file_sd", f"{path}: YAML needs PyYAML (pip install pyyaml); "
                                   "or write the targets as JSON")]) from None
            groups = yaml.safe_load(text)
        else:
            groups = json.loads(text)
    except (OSError, ValueError) as exc:
        raise FieldError([("fleet.file_sd", f"cannot read {path}: {exc}")]) from None
    except RecursionError:
        raise FieldError([("fleet.file_sd", f"cannot read {path}: nested too deep")]) from None
    if not isinstance(groups, list):
        raise FieldError([("fleet.file_sd", f"{path}: a file_sd file is a list of target groups")])
    nodes: dict[str, dict[str, Any]] = {}
    for i, group in enumerate(groups):
        labels = group.get("labels") if isinstance(group, dict) else None
        targets = group.get("targets") if isinstance(group, dict) else None
        if not isinstance(labels, dict) or not isinstance(targets, list) or not targets:
            raise FieldError([("fleet.file_sd", f"{path} group {i}: needs targets (a list) and labels")])
        missing = [k for k in ("node", "lane", "url") if not labels.get(k)]
        if missing:
            raise FieldError([("fleet.file_sd", f"{path} group {i}: labels need {', '.join(missing)} (the node, "
                               "the lane and the runtime's base URL)")])
        own = {k: str(v) for k, v in labels.items()
               if k not in ("node", "lane", "url", "api", "model") and not str(k).startswith("__")}
        node = nodes.setdefault(str(labels["node"]), {"name": str(labels["node"]), "labels": {}, "lanes": []})
        node["labels"].update(own)
        for j, target in enumerate(targets):
            lane = {"name": str(labels["lane"]) if len(targets) == 1 else f"{labels['lane']}{j + 1}",
                    "runtime": "external", "url": str(labels["url"]), "exporter_url": f"http://{target}"}
            lane.update({k: str(labels[k]) for k in ("api", "model") if labels.get(k)})
            node["lanes"].append(lane)
    return list(nodes.values())


def _with_default_loadgen(data: dict[str, Any]) -> dict[str, Any]:
    section = data.get("loadgen") or {}
    if not isinstance(section, dict):
        raise SessionConfigError("[loadgen] must be a table")
    return {**data, "loadgen": merge_tables(DEFAULT_LOADGEN, section)}


def load_session_config(path: Path | None, overrides: dict[str, Any] | None = None) -> SessionConfig:
    """Reads TOML (or nothing: the default session), applies dotted overrides, validates."""
    return load_toml_model(SessionConfig, path, overrides, what="session", error=SessionConfigError,
                           prepare=_with_default_loadgen)
