"""Is an answer still about what the node runs? Its fingerprint against the live one, on every tick.

An answer holds the fingerprint of what it was measured on (``core.fingerprint``: runtime build, model
files, the settings that set capacity, hardware; the session took it from the lane's exporter when the walk
began, and the service takes a posted run's from Prometheus, never from the body). Each lane's exporter
publishes the live one as ``runtime_fingerprint_info`` (one series per lane, its labels the fields; ``lane``
and ``node`` come from the scrape target). ``check_answers`` reads them all in one instant query and weighs
each answer's (``core.fingerprint_compare.assess``), so a node rebuilt, its model swapped or its
``--parallel`` changed turns exactly its answers ``stale``, with a reason naming what changed, within a
scrape interval and a tick.

Three outcomes per answer (``validity.state``): ``valid`` (nothing differs, and everything that decides
capacity was compared: the build, the model, the slots, the context and KV layout, the batch sizes),
``changed`` (a field differs: the store serves the answer ``stale``, ``last_status`` kept), ``unknown`` (no
fingerprint in the answer, no live series for the lane, no Prometheus, the runtime down or loading, or what
decides capacity not all compared: the answer keeps its status and the reason says which).
``validity.compared`` says how much was (``{"fields": n, "of": m, "not_compared": [...]}``). While a runtime
restarts its exporter may briefly publish two label sets; the answer takes the best state any of them
gives (valid, then changed, then unknown).

Matching: a lane key ``node/lane`` takes the series with those ``node`` and ``lane`` labels; a bare key
(a lane that names no node) the series with its ``lane`` and no ``node`` label (or ``node="local"``), else,
where its exporter target carries a ``node`` label anyway, that one node's.

Signed series (``fingerprint_key`` set; ``core.fingerprint_signature`` says why a signature and how): anyone
who can write to the store could otherwise decide validity (one forged import turned a correctly stale answer
``valid``). With the fleet key, a series counts only where its ``fingerprint_mac`` verifies under its node's
key, and of a lane's verified series only those with the newest ``fingerprint_since`` (a replayed old one is
outranked by the exporter's current one). A lane whose series all fail is ``unknown`` with the reason
``unverified``: never ``valid``, so ``--remeasure`` measures it again. Without the key every series counts, as
before (a store whose writers are all trusted).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar

from pydantic import BaseModel

from satbench.answer.document import iso_utc, unchecked
from satbench.answer.models import LaneModel, ValidityModel, said
from satbench.core.fingerprint_compare import assess
from satbench.core.fingerprint_labels import from_info_labels
from satbench.core.fingerprint_signature import MAC_LABEL, node_key, signed_since, verify
from satbench.core.lane_evidence import FingerprintModel
from satbench.core.lanes import LOCAL_NODE
from satbench.recommender.errors import PrometheusQueryError, SourceUnavailable
from satbench.recommender.prometheus_source import PromQLClient, VectorSample

__all__ = ["FINGERPRINT_SERIES", "check_answers", "fingerprints_when_measured", "live_by_key", "measured_fingerprints",
           "validity_of"]

FINGERPRINT_SERIES = "runtime_fingerprint_info"
_COMPARED = ("runtime", "model", "settings", "hardware", "unknown")
_RANK = {"valid": 0, "changed": 1, "unknown": 2}
_T = TypeVar("_T")


def _lane_key(sample: VectorSample) -> tuple[str, str] | None:
    """``(key, node)`` of a series by its ``lane`` and ``node`` target labels; None without a lane."""
    lane = sample.labels.get("lane")
    if not lane:
        return None
    node = sample.labels.get("node") or LOCAL_NODE
    return (lane if node == LOCAL_NODE else f"{node}/{lane}"), node


def live_by_key(samples: list[VectorSample]) -> dict[str, list[dict[str, Any]]]:
    """The live fingerprints of an instant query of ``runtime_fingerprint_info``, by lane key."""
    return _read_live(samples, None)[0]


def _read_live(samples: list[VectorSample], fleet_key: bytes | None
               ) -> tuple[dict[str, list[dict[str, Any]]], dict[str, int]]:
    """The fingerprints by lane key, and (with ``fleet_key``) how many series of each key failed to verify.
    With the key, a key keeps only its verified series with the newest ``fingerprint_since``."""
    kept: dict[str, list[tuple[float, dict[str, Any]]]] = {}
    unverified: dict[str, int] = {}
    keys: dict[str, bytes] = {}
    for sample in samples:
        found = _lane_key(sample)
        if found is None:
            continue
        key, node = found
        since = 0.0
        if fleet_key is not None:
            if node not in keys:
                keys[node] = node_key(fleet_key, node)
            if not verify(sample.labels, keys[node]):
                unverified[key] = unverified.get(key, 0) + 1
                continue
            since = signed_since(sample.labels)
        kept.setdefault(key, []).append((since, from_info_labels(sample.labels)))
    out = {}
    for key, entries in kept.items():
        newest = max(since for since, _ in entries)
        out[key] = [fp for since, fp in entries if since == newest]
    return out, unverified


def _unverified(count: int) -> str:
    return (f"unverified: {count} {FINGERPRINT_SERIES} series of this lane carry no valid signature "
            f"({MAC_LABEL} under its node's key), so none decides: written by something other than its exporter")


def validity_of(measured: FingerprintModel | None, live: list[dict[str, Any]] | None, *, now: float,
                unverified: int = 0) -> ValidityModel:
    """The validity of an answer measured on ``measured`` (None: no fingerprint was taken) against its lane's
    live fingerprints (None: the lane has none; ``unverified``: how many series of the lane failed to verify)."""
    if measured is None:
        return ValidityModel.model_validate(
            unchecked("no fingerprint was taken when this lane was measured, so nothing to compare"))
    if not live and unverified:
        return ValidityModel.model_validate(unchecked(_unverified(unverified))).model_copy(
            update={"checked_at": iso_utc(now)})
    if not live:
        return ValidityModel.model_validate(unchecked(
            f"no live fingerprint: Prometheus has no {FINGERPRINT_SERIES} series for this lane (its exporter is "
            "down, not scraped, or older than the fingerprint)"))
    part = {k: said(measured, k) for k in _COMPARED}  # a part it did not say is unknown, not its default
    attempts = [ValidityModel.model_validate(assess(part, {k: fp.get(k) for k in _COMPARED})) for fp in live]
    best = min(attempts, key=lambda a: (_RANK[a.state], len(a.changes)))
    return best.model_copy(update={"checked_at": iso_utc(now)})


class _Measured(BaseModel):
    """What the tick reads of an answer (a lane of the document, ``LaneModel``): only its fingerprint, so a
    tick over a hundred answers validates a hundred fingerprints, not their steps."""

    fingerprint: FingerprintModel | None = None


def measured_fingerprints(answers: Mapping[str, LaneModel | Mapping[str, Any]]
                          ) -> dict[str, FingerprintModel | None]:
    """The fingerprint each answer (a lane of the document, by key; as JSON, validated) was measured on."""
    return {key: answer.fingerprint if isinstance(answer, LaneModel) else _Measured.model_validate(answer).fingerprint
            for key, answer in answers.items()}


async def check_answers(client: PromQLClient, fingerprints: Mapping[str, FingerprintModel | None], *,
                        now: float, fleet_key: bytes | None = None) -> dict[str, ValidityModel]:
    """The validity of every answer (by key, the fingerprint it was measured on), from one instant query at
    ``now``; with ``fleet_key`` only signed series count."""
    live, unverified = _read_live(await client.query(FINGERPRINT_SERIES, now), fleet_key)
    lanes = set(fingerprints)
    return {key: validity_of(measured, _live_of(key, live, lanes), now=now,
                             unverified=_live_of(key, unverified, lanes) or 0)
            for key, measured in fingerprints.items()}


async def fingerprints_when_measured(client: PromQLClient, starts: Mapping[str, float], *,
                                     fleet_key: bytes | None = None
                                     ) -> dict[str, tuple[dict[str, Any] | None, str | None]]:
    """For each lane key, the live fingerprint its exporter published when the lane's first window began
    (``starts``: key -> Unix seconds), and why there is none: what a posted run's answers are taken to be
    measured on, instead of a fingerprint the body says. One instant query per distinct start time; a source
    failure is the reason of every lane it leaves without one. With ``fleet_key`` only signed series count."""
    out: dict[str, tuple[dict[str, Any] | None, str | None]] = {}
    by_time: dict[float, list[str]] = {}
    for key, at in starts.items():
        by_time.setdefault(at, []).append(key)
    asked = set(starts)
    for at, keys in sorted(by_time.items()):
        try:
            live, unverified = _read_live(await client.query(FINGERPRINT_SERIES, at), fleet_key)
        except (SourceUnavailable, PrometheusQueryError) as exc:
            for key in keys:
                out[key] = (None, f"Prometheus could not be asked for the lane's {FINGERPRINT_SERIES}: {exc}")
            continue
        for key in keys:
            found = _live_of(key, live, asked)
            if not found and (count := _live_of(key, unverified, asked)):
                out[key] = (None, f"{_unverified(count)} (when its first window began, {iso_utc(at)})")
            elif not found:
                out[key] = (None, f"Prometheus holds no {FINGERPRINT_SERIES} of this lane when its first window "
                                  f"began ({iso_utc(at)}): its exporter was not scraped then")
            elif len(found) > 1:
                out[key] = (None, f"its exporter published {len(found)} fingerprints when its first window began "
                                  "(a restart): which one it was measured on cannot be told")
            else:
                out[key] = (found[0], None)
    return out


def _live_of(key: str, live: dict[str, _T], lanes: set[str]) -> _T | None:
    """The live fingerprints of lane ``key``; a bare key whose series carry a ``node`` target label anyway
    (a lane that names no node, on a node the scrape config names) takes that node's, when only one has it and
    it is not itself one of ``lanes`` (the keys being asked): a run with lane ``moe`` on its own host and
    ``node-b/moe`` read ``node-b``'s fingerprint as its local lane's once the local one's series had gone
    stale, and called the local answer measured on something else."""
    if key in live or "/" in key:
        return live.get(key)
    nodes = [k for k in live if k.rpartition("/")[2] == key and k not in lanes]
    return live[nodes[0]] if len(nodes) == 1 else None
