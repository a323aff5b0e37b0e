"""The fleet spec: what ``satbench sim-fleet`` (``simulator.fleet``) serves, validated before any port opens.

``FleetSpec`` is a pydantic model read from TOML (``[[nodes]]`` with ``name``, ``labels``, and
``[[nodes.lanes]]`` with ``name``, ``profile`` and the overrides); names follow ``core.lanes`` (node
``local`` is reserved). A bad spec is refused in one line naming the setting (``FleetError``:
``invalid fleet config: nodes[node-001].lanes: duplicate lane name(s) dense``).

A lane (``LaneSpec``) is configured exactly as ``satbench sim`` would be (``simulator.cli.prepare``): its
profile (a built-in name or a TOML path) and overrides (``OVERRIDES``) are turned into that command line
(``--slots``, ``--batch``, ``--ubatch``, ``--seed``, ``--admission``, ``--time-scale``; ``ctx_size`` is
llama-server's ``-c``, split over the slots as llama-server does, and with it ``--metrics`` so the lane
keeps ``/metrics``) and parsed by ``satbench sim``'s own parser, so an override means here what it means
there.

This module is pure configuration: no sockets, no event loop, no aiohttp. It lives apart from the running
fleet (``simulator.fleet``, which imports it) so that whoever only builds or checks a spec need not load
the server side, and it must never import ``simulator.fleet`` (no cycle).
"""

from __future__ import annotations

import argparse
import functools
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError, field_validator, model_validator

from satbench.core.config_files import FieldError, format_validation_error, load_toml_model
from satbench.core.lanes import LOCAL_NODE, NAME_PATTERN, duplicate_names
from satbench.simulator.dropin import ServerOptions
from satbench.simulator.profile import Profile, ProfileError, bundled_profiles

__all__ = ["OVERRIDES", "FleetError", "FleetSpec", "LaneSpec", "NodeSpec", "parse_lanes"]

# lane override -> satbench sim's flag (simulator.cli.configure); ctx_size is llama-server's -c
OVERRIDES: dict[str, str] = {
    "slots": "--slots",
    "batch": "--batch",
    "ubatch": "--ubatch",
    "seed": "--seed",
    "admission": "--admission",
    "time_scale": "--time-scale",
    "ctx_size": "--ctx-size",
}


class FleetError(ValueError):
    """A fleet spec or restart that cannot be used; the message is one line naming the setting."""


@functools.cache
def _sim_parser() -> argparse.ArgumentParser:
    from satbench.simulator.cli import configure as configure_sim

    parser = argparse.ArgumentParser(prog="satbench sim", add_help=False)
    configure_sim(parser)
    return parser


class LaneSpec(BaseModel):
    """One simulated deployment on a node: a profile and ``satbench sim``'s overrides (None: the profile's)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(pattern=NAME_PATTERN, min_length=1, max_length=64)
    profile: str = Field(default="dense", min_length=1)
    slots: int | None = Field(default=None, gt=0)
    batch: int | None = Field(default=None, gt=0)
    ubatch: int | None = Field(default=None, gt=0)
    seed: int | None = None
    admission: Literal["fifo", "unfair"] | None = None
    time_scale: float | None = Field(default=None, gt=0)
    ctx_size: int | None = Field(default=None, gt=0)

    # (argv, profile, options): resolved once, at validation; a model_copy with other fields resolves again
    _resolved: tuple[list[str], Profile, ServerOptions] | None = PrivateAttr(default=None)

    @model_validator(mode="after")
    def _resolves(self) -> LaneSpec:
        try:
            self.resolved()
        except ProfileError as exc:
            raise FieldError([("profile", str(exc))]) from None
        return self

    def argv(self) -> list[str]:
        """``satbench sim``'s command line for this lane (without host and port)."""
        out = [f"--profile={self.profile}"]  # flag=value: a value that starts with "-" stays a value
        for key, flag in OVERRIDES.items():
            value = getattr(self, key)
            if value is not None:
                out.append(f"{flag}={value}")
        if self.ctx_size is not None:
            out.append("--metrics")  # -c makes the command line llama-server's, whose /metrics is off
        return out

    def resolved(self) -> tuple[Profile, ServerOptions]:
        """The validated profile (overrides applied) and server options, as ``satbench sim`` would serve them
        (``simulator.cli.prepare`` on ``argv()``); ``ProfileError`` when the profile cannot be used."""
        from satbench.simulator.cli import prepare

        argv = self.argv()
        if self._resolved is not None and self._resolved[0] == argv:
            return self._resolved[1], self._resolved[2]
        try:
            args = _sim_parser().parse_args(argv)
        except SystemExit:  # argparse has printed why; the fields are typed, so this is not expected
            raise ProfileError(f"cannot parse {' '.join(argv)}") from None
        profile, options = prepare(args)
        if not isinstance(profile, Profile) or not isinstance(options, ServerOptions):
            raise ProfileError("simulator.cli.prepare returned something else than a profile and options")
        self._resolved = (argv, profile, options)
        return profile, options

    def overrides(self) -> dict[str, Any]:
        """The overrides this lane sets (profile included), for ``Fleet.restart``'s merge."""
        return {k: v for k, v in self.model_dump(exclude={"name"}).items() if v is not None}


class NodeSpec(BaseModel):
    """One simulated runtime host: its name, labels (for whoever builds a session from the spec) and lanes."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(pattern=NAME_PATTERN, min_length=1, max_length=64)
    labels: dict[str, str] = Field(default_factory=dict)
    lanes: tuple[LaneSpec, ...]

    @field_validator("name")
    @classmethod
    def _not_local(cls, value: str) -> str:
        if value == LOCAL_NODE:
            raise ValueError(f"{LOCAL_NODE!r} is reserved (the session's own host)")
        return value

    @field_validator("lanes")
    @classmethod
    def _some_lanes(cls, value: tuple[LaneSpec, ...]) -> tuple[LaneSpec, ...]:
        if not value:  # checked after the items (a min_length would also fail when an item does)
            raise ValueError("a node needs at least one lane ([[nodes.lanes]])")
        return value

    @model_validator(mode="after")
    def _unique_lanes(self) -> NodeSpec:
        dup = duplicate_names(self.lanes)
        if dup:
            raise FieldError([("lanes", f"duplicate lane name(s) {', '.join(dup)}")])
        return self

    def lane(self, name: str) -> LaneSpec:
        for lane in self.lanes:
            if lane.name == name:
                return lane
        raise KeyError(f"node {self.name} has no lane {name!r} (lanes: {', '.join(ln.name for ln in self.lanes)})")


class FleetSpec(BaseModel):
    """The nodes of a simulated fleet (see the module docstring); build it with ``load``/``from_mapping``/
    ``uniform`` for one-line errors."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    nodes: tuple[NodeSpec, ...]

    @field_validator("nodes")
    @classmethod
    def _some_nodes(cls, value: tuple[NodeSpec, ...]) -> tuple[NodeSpec, ...]:
        if not value:
            raise ValueError("a fleet needs at least one node ([[nodes]])")
        return value

    @model_validator(mode="after")
    def _unique_nodes(self) -> FleetSpec:
        dup = duplicate_names(self.nodes)
        if dup:
            raise FieldError([("nodes", f"duplicate node name(s) {', '.join(dup)}")])
        return self

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any]) -> FleetSpec:
        """Validates parsed TOML/JSON; ``FleetError`` (one line) on any refusal."""
        try:
            return cls.model_validate(dict(data))
        except ValidationError as exc:
            raise FleetError(format_validation_error(exc, "fleet", dict(data), cls)) from None

    @classmethod
    def load(cls, path: str | Path) -> FleetSpec:
        """Reads a fleet TOML file (``[[nodes]]``, ``[[nodes.lanes]]``); a lane's relative profile path is
        read from the file's folder (a built-in name stays a name)."""
        folder = Path(path).parent
        return load_toml_model(cls, Path(path), None, what="fleet", error=FleetError,
                               prepare=functools.partial(_profiles_from, folder))

    @classmethod
    def uniform(cls, nodes: int, lanes: Mapping[str, str], **overrides: Any) -> FleetSpec:
        """``nodes`` nodes ``node-001``... each with the lanes ``{lane: profile}``, all with ``overrides``."""
        if nodes < 1:
            raise FleetError(f"nodes: must be >= 1, got {nodes}")
        if not lanes:
            raise FleetError("lanes: at least one lane=profile is needed")
        width = max(3, len(str(nodes)))
        node_list = [
            {"name": f"node-{i:0{width}d}",
             "lanes": [{"name": name, "profile": profile, **overrides} for name, profile in lanes.items()]}
            for i in range(1, nodes + 1)
        ]  # fmt: skip
        cls.from_mapping({"nodes": node_list[:1]})  # a bad lane is named once, not once per node
        return cls.from_mapping({"nodes": node_list})

    def node(self, name: str) -> NodeSpec:
        for node in self.nodes:
            if node.name == name:
                return node
        raise KeyError(f"no node {name!r} in the fleet")

    def lane_count(self) -> int:
        return sum(len(node.lanes) for node in self.nodes)


def _profiles_from(folder: Path, data: dict[str, Any]) -> dict[str, Any]:
    """``data`` with each lane's relative profile path made relative to ``folder`` (the spec file's)."""
    bundled = set(bundled_profiles())
    for node in data.get("nodes", []) if isinstance(data.get("nodes"), list) else []:
        for lane in node.get("lanes", []) if isinstance(node, dict) and isinstance(node.get("lanes"), list) else []:
            profile = lane.get("profile") if isinstance(lane, dict) else None
            is_path = isinstance(profile, str) and ("/" in profile or bool(Path(profile).suffix))
            if isinstance(profile, str) and is_path and profile not in bundled and not Path(profile).is_absolute():
                lane["profile"] = str(folder / profile)
    return data


def parse_lanes(text: str) -> dict[str, str]:
    """``"dense=dense,moe=path/moe.toml"`` as ``{lane: profile}`` (a bare ``dense`` is ``dense=dense``)."""
    out: dict[str, str] = {}
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        name, sep, profile = item.partition("=")
        name, profile = name.strip(), (profile.strip() if sep else name.strip())
        if not name or not profile:
            raise FleetError(f"--lanes: expected lane=profile, got {item!r}")
        if name in out:
            raise FleetError(f"--lanes: duplicate lane name {name}")
        out[name] = profile
    if not out:
        raise FleetError("--lanes: at least one lane=profile is needed")
    return out
