"""Whether two runs can be compared, and what changed between the deployments they measured.

A comparison is meant to say what one change did (a new build, another model file, other server settings,
other hardware). A run that sent 4x longer prompts, or whose answer was judged under another policy, or that
walked other rungs, differs by more than the deployment: its "regression" is the workload's or the policy's.
So the sides are checked first, lane by lane where both answer:

- ``workload``: the lanes' fingerprints' ``workload.digest`` (the load generator's workload settings);
- ``policy``: the documents' policies (but their node prices, ``policy.cost``, which judge nothing), and the
  fingerprints' ``policy.digest`` (where the digests differ, the values read as one policy with today's
  defaults are not a difference: a setting added since one run);
- ``ladder``: the closed-loop rungs each side walked, where neither is a prefix of the other (a walk that
  stopped earlier at saturation is the same ladder).

Any of them differing refuses the comparison (``NotComparable``, one line naming what differs), unless the
user says that difference is the point (``allow``). The deployment's own fields (``runtime``, ``model``,
``settings``, ``hardware``: ``core.fingerprint_compare.compare``) are what a comparison is for: they head
the verdict ("runtime.build b5000 -> b5100").
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Literal

from pydantic import ValidationError

from satbench.answer.models import ChangeModel, LaneModel, RecommendationsDocument
from satbench.answer.policy import Policy
from satbench.core.fingerprint_compare import compare as compare_fingerprints
from satbench.core.fingerprint_compare import describe_changes
from satbench.core.lane_evidence import DigestedPart

__all__ = ["DIFFERENCES", "NotComparable", "deployment_changes", "differences", "refuse"]

DIFFERENCES = ("workload", "policy", "ladder")
_DIGESTED_PARTS: tuple[Literal["workload", "policy"], ...] = ("workload", "policy")


class NotComparable(ValueError):
    """The sides differ by more than the deployment (module docstring); the message names what, in one line."""


def _fingerprint(lane: LaneModel) -> dict[str, Any]:
    return lane.fingerprint.model_dump(mode="json") if lane.fingerprint is not None else {}


def _part(lane: LaneModel, part: Literal["workload", "policy"]) -> DigestedPart:
    return lane.fingerprint.digested(part) if lane.fingerprint is not None else DigestedPart()


def _digest(part: DigestedPart) -> str | None:
    return str(part.digest) if part.digest else None


def _values_differ(a: DigestedPart, b: DigestedPart) -> str:
    va, vb = a.values, b.values
    keys = [k for k in sorted(set(va) | set(vb)) if va.get(k) != vb.get(k)]
    return "; ".join(f"{k} {va.get(k)} -> {vb.get(k)}" for k in keys[:3])


def _one_policy(a: DigestedPart, b: DigestedPart) -> bool:
    """Do two fingerprints' policy values say one policy, each read with today's defaults? A setting added to
    the policy since one side was written is absent from its values and at its default (unset) in the other's:
    that changes the digest, not the judgement (a run from before ``slo.tpot_p95_s`` against one after it).
    Values that are no policy today (a setting since removed) are taken at their digest."""
    try:
        return Policy.model_validate(a.values) == Policy.model_validate(b.values)
    except ValidationError:
        return False


def _rungs(lane: LaneModel) -> list[int]:
    return [s.concurrency for s in lane.steps if s.rate_rps is None and s.concurrency]


def _judging(policy: Policy) -> dict[str, Any]:
    """What of ``policy`` judges an answer: all of it but the node prices (``cost``), which price it only."""
    return policy.model_dump(mode="json", exclude={"cost"})


def _policy_fields(a: RecommendationsDocument, b: RecommendationsDocument) -> str:
    da, db = _judging(a.policy), _judging(b.policy)
    keys = [k for k in sorted(set(da) | set(db)) if da.get(k) != db.get(k)]
    return "; ".join(f"{k} {da.get(k)} -> {db.get(k)}" for k in keys[:3])


def differences(pairs: Iterable[tuple[str, LaneModel, LaneModel]], docs_a: Sequence[RecommendationsDocument],
                docs_b: Sequence[RecommendationsDocument]) -> dict[str, str]:
    """``{difference: what differs}`` over :data:`DIFFERENCES` for the lanes both sides answer (``pairs``: key,
    A's lane, B's lane) and the documents' policies; empty where the runs are comparable."""
    found: dict[str, str] = {}
    if any(_judging(x.policy) != _judging(y.policy) for x in docs_a for y in docs_b):
        a = next(x for x in docs_a for y in docs_b if _judging(x.policy) != _judging(y.policy))
        b = next(y for y in docs_b if _judging(y.policy) != _judging(a.policy))
        found["policy"] = f"the documents' policies ({_policy_fields(a, b)})"
    for key, lane_a, lane_b in pairs:
        for part in _DIGESTED_PARTS:
            pa, pb = _part(lane_a, part), _part(lane_b, part)
            da, db = _digest(pa), _digest(pb)
            if part not in found and da and db and da != db and not (part == "policy" and _one_policy(pa, pb)):
                values = _values_differ(pa, pb)
                found[part] = f"lane {key}: {part} digest {da[:12]} -> {db[:12]}" + (f" ({values})" if values else "")
        ra, rb = _rungs(lane_a), _rungs(lane_b)
        common = min(len(ra), len(rb))
        if "ladder" not in found and ra[:common] != rb[:common]:
            found["ladder"] = f"lane {key}: rungs {ra} -> {rb}"
    return found


def refuse(found: Mapping[str, str], allow: Iterable[str]) -> None:
    """Raise ``NotComparable`` naming every difference not allowed (module docstring)."""
    allowed = set(allow)
    left = {k: v for k, v in found.items() if k not in allowed}
    if left:
        names = ",".join(left)
        raise NotComparable(f"A and B differ in {' and '.join(left)}, not only in the deployment: "
                            + "; ".join(f"{k}: {v}" for k, v in left.items())
                            + f" (--allow {names} if that difference is the point)")


def deployment_changes(lane_a: LaneModel, lane_b: LaneModel) -> str:
    """The deployment's fields that differ between the two lanes' fingerprints, in words ("" for none)."""
    changes = [ChangeModel.model_validate(c) for c in compare_fingerprints(_fingerprint(lane_a), _fingerprint(lane_b))]
    return describe_changes([c.model_dump() for c in changes if not c.field.startswith(("workload.", "policy."))])
