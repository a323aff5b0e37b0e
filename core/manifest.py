"""The run manifest (``runs/<run_id>/manifest.json``): what was run, where, and the step windows.

The step windows are the contract between the load generator (which measures them) and the recommender
(which queries Prometheus over exactly those windows, or reads the records inside them). Everything else in
the manifest is evidence for a reader: command line, config, versions, runtime build, model files, hardware,
network. Unknown keys are kept, so a newer writer never loses data through an older reader.
"""

from __future__ import annotations

import json
import os
import secrets
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "MANIFEST_SCHEMA",
    "RunManifest",
    "StepWindow",
    "new_run_id",
    "read_manifest",
    "write_json_atomic",
]

MANIFEST_SCHEMA = "core.manifest/v1"


def new_run_id(now: float | None = None) -> str:
    """A sortable run id: UTC timestamp plus 4 random hex digits, e.g. ``20261129T101500Z-3f2a``."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(time.time() if now is None else now))
    return f"{stamp}-{secrets.token_hex(2)}"


@dataclass(frozen=True, slots=True)
class StepWindow:
    """The measured part of one rung (lane, concurrency): ``[start, end]`` in Unix seconds.

    ``warmup_start`` is when the rung's users started, ``drain_end`` when its last request ended. ``valid``
    is false when the step must not be used for an answer; ``reason`` then says why (client could not keep
    up, runtime down, too few requests...). ``notes`` carry non-fatal observations (errors seen, retries).
    """

    lane: str
    concurrency: int
    start: float
    end: float
    warmup_start: float | None = None
    drain_end: float | None = None
    valid: bool = True
    reason: str | None = None
    notes: tuple[str, ...] = ()

    @property
    def duration_s(self) -> float:
        return self.end - self.start

    def contains(self, t: float) -> bool:
        return self.start <= t <= self.end

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["notes"] = list(self.notes)
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> StepWindow:
        return cls(
            lane=str(data["lane"]),
            concurrency=int(data["concurrency"]),
            start=float(data["start"]),
            end=float(data["end"]),
            warmup_start=None if data.get("warmup_start") is None else float(data["warmup_start"]),
            drain_end=None if data.get("drain_end") is None else float(data["drain_end"]),
            valid=bool(data.get("valid", True)),
            reason=data.get("reason"),
            notes=tuple(data.get("notes") or ()),
        )


@dataclass(slots=True)
class RunManifest:
    """The manifest of one run. ``lanes`` maps lane name to its evidence (url, api, model, runtime build...)."""

    run_id: str
    created_at: float
    command: list[str] = field(default_factory=list)
    config: dict[str, Any] = field(default_factory=dict)
    versions: dict[str, Any] = field(default_factory=dict)
    lanes: dict[str, dict[str, Any]] = field(default_factory=dict)
    hardware: dict[str, Any] = field(default_factory=dict)
    network: dict[str, Any] = field(default_factory=dict)
    prometheus: dict[str, Any] = field(default_factory=dict)
    steps: list[StepWindow] = field(default_factory=list)
    finished_at: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def windows(self, lane: str | None = None) -> list[StepWindow]:
        return [s for s in self.steps if lane is None or s.lane == lane]

    def lane_names(self) -> list[str]:
        names = list(self.lanes)
        for step in self.steps:
            if step.lane not in names:
                names.append(step.lane)
        return names

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "schema": MANIFEST_SCHEMA,
            "run_id": self.run_id,
            "created_at": self.created_at,
            "finished_at": self.finished_at,
            "command": list(self.command),
            "config": self.config,
            "versions": self.versions,
            "lanes": self.lanes,
            "hardware": self.hardware,
            "network": self.network,
            "prometheus": self.prometheus,
            "steps": [s.to_dict() for s in self.steps],
        }
        data.update(self.extra)
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RunManifest:
        if not isinstance(data, dict) or "run_id" not in data:
            raise ValueError("manifest must be a JSON object with a run_id")
        schema = data.get("schema", MANIFEST_SCHEMA)
        if schema != MANIFEST_SCHEMA:
            raise ValueError(f"unsupported manifest schema {schema!r} (expected {MANIFEST_SCHEMA})")
        known = {"schema", "run_id", "created_at", "finished_at", "command", "config", "versions", "lanes",
                 "hardware", "network", "prometheus", "steps"}
        return cls(
            run_id=str(data["run_id"]),
            created_at=float(data.get("created_at") or 0.0),
            finished_at=None if data.get("finished_at") is None else float(data["finished_at"]),
            command=list(data.get("command") or []),
            config=dict(data.get("config") or {}),
            versions=dict(data.get("versions") or {}),
            lanes=dict(data.get("lanes") or {}),
            hardware=dict(data.get("hardware") or {}),
            network=dict(data.get("network") or {}),
            prometheus=dict(data.get("prometheus") or {}),
            steps=[StepWindow.from_dict(s) for s in data.get("steps") or []],
            extra={k: v for k, v in data.items() if k not in known},
        )

    def write(self, path: Path) -> None:
        write_json_atomic(path, self.to_dict())


def read_manifest(path: Path | str) -> RunManifest:
    with Path(path).open(encoding="utf-8") as fh:
        return RunManifest.from_dict(json.load(fh))


def write_json_atomic(path: Path, data: Any) -> None:
    """Writes JSON through a temporary file and a rename, so readers never see a half-written file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with tmp.open("w", encoding="utf-8") as fh:
        json.dump(data, fh, indent=2, sort_keys=False, default=str)
        fh.write("\n")
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
