"""What the session recorded of each lane, typed once: where the lane ran and what it was measured on.

The run manifest keeps, per lane key, how the session started and placed the lane (``RunManifest.lanes``,
written by ``satbench.session.run``: node, lane name, runtime URL, the model its requests name, the node's
labels, the fingerprint its exporter gave when the walk began or why there is none, and why a fleet node's
lane was not measured). That entry is evidence for a reader, so the manifest keeps it as open JSON; the
readers (the recommender's analysis, capability reporting) read it here, through ``ManifestLane``, instead of
each walking the dict by key (issue 30: one shape per concept, validated once at the edge).

``FingerprintModel`` is the fingerprint's shape (``core.fingerprint`` builds it, ``core.fingerprint_compare``
weighs two): the recommendations document's lanes carry it (``answer.models.LaneModel.fingerprint``)
and the validity check reads it. A ``ManifestLane`` keeps the fingerprint as it was taken (``fingerprint``,
its JSON with its keys in the order the exporter wrote them: the document carries it so, byte for byte, and
a model's dump would reorder them) and validates it on reading (``measured``).

``ConfiguredRun`` is the part of the manifest's ``config`` (the session's ``SessionConfig``, redacted) that
the analysis and the report read: the workload the load generator sent and the policy the session set (a
dict: its model, ``answer.policy.Policy``, is a part's, which the ground does not import).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from satbench.core.lanes import LOCAL_NODE, split_key
from satbench.core.manifest import RunManifest

__all__ = ["ConfiguredRun", "DigestedPart", "FingerprintModel", "HardwareFacts", "LengthFacts", "ManifestLane",
           "ModelFacts", "ModelFile", "WorkloadFacts", "manifest_lane"]


def _an_object(value: Any) -> Any:
    return value if isinstance(value, dict) else {}


class ModelFile(BaseModel):
    """One file of the fingerprint's ``model`` (``core.model_files``): its ``sha256`` where it was read."""

    model_config = ConfigDict(extra="allow", frozen=True)

    sha256: Any = None


class ModelFacts(BaseModel):
    """The fingerprint's ``model``, read: its path and its files (those that are objects)."""

    model_config = ConfigDict(extra="allow", frozen=True)

    path: Any = None
    files: list[ModelFile] = Field(default_factory=list)

    @field_validator("files", mode="before")
    @classmethod
    def _the_objects_of_a_list(cls, value: Any) -> Any:
        return [f for f in value if isinstance(f, dict)] if isinstance(value, list) else []

    @property
    def sha256s(self) -> list[str]:
        """The files' sha256s, in the fingerprint's order (the files whose sha256 was read)."""
        return [str(f.sha256) for f in self.files if f.sha256]


class HardwareFacts(BaseModel):
    """The fingerprint's ``hardware``, read (``core.fingerprint.gpu_facts``); a fact not told is None."""

    model_config = ConfigDict(extra="allow", frozen=True)

    gpu: Any = None
    gpu_count: Any = None


class LengthFacts(BaseModel):
    """A token-length distribution as the workload's values write it (the load generator's ``LengthDist``)."""

    model_config = ConfigDict(extra="allow", frozen=True)

    kind: Any = None
    value: Any = None
    low: Any = None
    high: Any = None
    median: Any = None


class WorkloadFacts(BaseModel):
    """The workload's values (the ``workload`` part's ``values``), read: its token lengths where told."""

    model_config = ConfigDict(extra="allow", frozen=True)

    prompt_tokens: LengthFacts | None = None
    output_tokens: LengthFacts | None = None

    @field_validator("prompt_tokens", "output_tokens", mode="before")
    @classmethod
    def _an_object_or_nothing(cls, value: Any) -> Any:
        return value if isinstance(value, dict) else None


class DigestedPart(BaseModel):
    """A part the analysis adds to the fingerprint (``workload``, ``policy``: ``core.fingerprint._part``)."""

    model_config = ConfigDict(extra="allow", frozen=True)

    digest: Any = None
    values: dict[str, Any] = Field(default_factory=dict)

    @field_validator("values", mode="before")
    @classmethod
    def _an_object_or_empty(cls, value: Any) -> Any:
        return _an_object(value)


class FingerprintModel(BaseModel):
    """What an answer was measured on (``core.fingerprint``): a null field is one the runtime or host cannot
    tell, and ``unknown`` says why."""

    model_config = ConfigDict(extra="allow")

    digest: str | None = Field(None, description="sha256 over runtime, model, settings and hardware")
    runtime: dict[str, Any] | None = None
    model: dict[str, Any] | None = None
    settings: dict[str, Any] | None = None
    hardware: dict[str, Any] | None = None
    unknown: dict[str, str] = Field(default_factory=dict, description="field -> why it is null")
    # added by the analysis, after what the exporter said (the order the document's JSON has them in)
    workload: dict[str, Any] | None = Field(None, description="digest and values of the workload")
    policy: dict[str, Any] | None = Field(None, description="digest and values of the policy")

    # the parts stay the JSON the exporter and the analysis wrote (a model's dump would reorder their keys, and the
    # document carries them byte for byte); a reader takes them typed here instead of walking them by key
    @property
    def model_facts(self) -> ModelFacts:
        """``model``, read (empty where none was told)."""
        return ModelFacts.model_validate(_an_object(self.model))

    @property
    def hardware_facts(self) -> HardwareFacts:
        """``hardware``, read (empty where none was told)."""
        return HardwareFacts.model_validate(_an_object(self.hardware))

    def digested(self, part: Literal["workload", "policy"]) -> DigestedPart:
        """The ``workload`` or ``policy`` part, read (empty where the analysis added none)."""
        return DigestedPart.model_validate(_an_object(self.workload if part == "workload" else self.policy))

    @property
    def workload_facts(self) -> WorkloadFacts:
        """The ``workload`` part's values, read (empty where the analysis added none)."""
        return WorkloadFacts.model_validate(self.digested("workload").values)


class ManifestLane(BaseModel):
    """One entry of the manifest's ``lanes`` (module docstring); the runtime's own evidence (kind, command,
    build, model files, ``/props``) is kept as it was written, unread here."""

    model_config = ConfigDict(extra="allow", frozen=True)

    node: str | None = None
    lane: str | None = None
    url: str | None = None
    model: str | None = None
    api_key_env: str | None = None
    node_labels: dict[str, str] = Field(default_factory=dict)
    fingerprint: dict[str, Any] | None = None
    fingerprint_reason: str | None = None
    unreachable: str | None = None

    @field_validator("fingerprint", mode="before")
    @classmethod
    def _a_fingerprint_is_an_object(cls, value: Any) -> Any:
        return value if isinstance(value, dict) else None

    @field_validator("node_labels", mode="before")
    @classmethod
    def _no_labels_is_none(cls, value: Any) -> Any:
        return value or {}

    @property
    def measured(self) -> FingerprintModel | None:
        """The fingerprint taken when the walk began, validated; None where none was taken."""
        return None if self.fingerprint is None else FingerprintModel.model_validate(self.fingerprint)

    def place(self, key: str) -> tuple[str, str]:
        """``(node, lane name)`` of lane ``key``: the entry's, else the key's (``core.lanes.split_key``)."""
        node, name = split_key(key)
        return str(self.node or node or LOCAL_NODE), str(self.lane or name)


def manifest_lane(manifest: RunManifest, key: str) -> ManifestLane:
    """The manifest's entry of lane ``key`` (an empty one where the session recorded none)."""
    return ManifestLane.model_validate(manifest.lanes.get(key) or {})


class _ConfiguredLoad(BaseModel):
    model_config = ConfigDict(extra="allow", frozen=True)

    workload: dict[str, Any] | None = None

    @field_validator("workload", mode="before")
    @classmethod
    def _an_object_or_nothing(cls, value: Any) -> Any:
        return value if isinstance(value, dict) else None


class ConfiguredRun(BaseModel):
    """The manifest's ``config`` as the analysis and the report read it (module docstring)."""

    model_config = ConfigDict(extra="allow", frozen=True)

    policy: dict[str, Any] | None = None
    loadgen: _ConfiguredLoad | None = None

    @field_validator("policy", "loadgen", mode="before")
    @classmethod
    def _an_object_or_nothing(cls, value: Any) -> Any:
        return value if isinstance(value, dict) else None

    @classmethod
    def of(cls, manifest: RunManifest) -> ConfiguredRun:
        return cls.model_validate(manifest.config or {})

    @property
    def workload(self) -> dict[str, Any]:
        """The workload the load generator was configured with (empty where the config says none)."""
        return (self.loadgen.workload if self.loadgen is not None else None) or {}
