"""``/metrics`` of the recommender: the current answer as gauges, on a private registry.

A custom collector reads the store at scrape time (no timers, no global registry) and hands the document to
one pure function, ``answer_families(document)``, which ``satbench capabilities --format prometheus`` calls
too: the series a router scrapes here and the text an operator renders from a saved ``recommendations.json``
are built by the same code, so they cannot disagree.

Per lane (``lane`` is the lane's name, never its key; ``node`` where the lane names one, see below):

- ``satbench_recommended_concurrency`` and ``satbench_saturation_concurrency``: for lanes that have the
  figure (a lane without an answer has no sample: "not measured" is never "measured: 0");
- ``satbench_recommendation_status{status,binding_constraint}``: 1, an info series, for every lane of the
  document, also without an answer;
- ``satbench_verdict_ok{check}``: 1 when no measured rung was flagged for ``decode_starvation``,
  ``prefill_starvation`` or ``fairness``, 0 when one was; absent where the document does not say;
- ``satbench_recommendation_valid``: 1 when the answer was checked against the live runtime and still holds
  (``validity.state == "valid"``), 0 when it was measured on something else (``"changed"``: another build,
  model, slot count, GPU...), **absent** when nobody could tell (``"unknown"``, or a v1 document without
  ``validity``). Absent rather than NaN: NaN poisons PromQL arithmetic and compares false to everything,
  while an absent sample makes ``x * on(node, lane) satbench_recommendation_valid`` drop the lane, the
  conservative reading;
- ``satbench_recommendation_validity{state}``: the same as a one-hot state set over ``valid``, ``changed`` and
  ``unknown`` for every lane of the document, so a consumer tells "unknown" from "not in the document";
- ``satbench_recommendation_measured_timestamp_seconds``: when the answer's last window ended (its
  ``measured_at``), for lanes that were measured. How old each answer is, is ``time() - ...`` at whatever
  instant a query or an alert asks (a CronJob that keeps the fleet fresh is watched by
  ``time() - satbench_recommendation_measured_timestamp_seconds > 86400``): a timestamp, as Prometheus'
  exporter guidelines advise for "how long ago", rather than an age that would be as old as the last scrape
  and would make the families depend on the clock (``answer_families`` stays pure).

- ``satbench_max_rate_rps{status}`` and ``satbench_goodput_rps``: the rate answer (``answer.rate_analysis``)
  where the run walked open-loop rates: the highest request rate the lane serves within its objectives for
  the policy's share of requests, labelled with its status (``settled``, ``unsaturated``, ``undecided``), and
  the goodput there; absent for a lane whose run walked no rates, or none passed.
- ``satbench_trace_max_factor{status}``: the trace answer (``answer.trace_analysis``) where the lane
  replayed a recorded trace: the largest speed factor it takes within its objectives ("this node takes N x the
  recorded traffic"), labelled with its status; absent for a lane that replayed none, or where no factor passed.

- ``satbench_max_agent_sessions{status,valid}``: the agent answer (``answer.agent_analysis``) where the lane
  walked agent sessions: the most concurrent session trees it holds at its tier, labelled with its status and
  its validity stamp; absent where the lane walked none, or not one session held.

- ``satbench_answer_joules_per_token{answer,scope}``, ``satbench_answer_tokens_per_s_per_kw{answer,scope}`` and
  ``satbench_answer_cost_per_million_tokens{answer,currency}``: the energy and cost at the concurrency answer
  (``answer="concurrency"``), at the rate answer (``answer="rate"``) and at the agent answer (``answer="agents"``),
  as the document states them
  (``answer.energy``; ``scope`` ``gpu`` or ``cpu-package``); absent where the answer's rung had no energy reading
  or the policy no price.

With the status series a consumer tells the three cases of the contract apart: measured and valid
(``recommended_concurrency`` present, ``valid == 1``), measured on something else (``valid == 0``, status
``stale``), never measured (no ``recommended_concurrency`` sample; status ``insufficient_data``/``degraded``,
or no series at all).

Plus ``satbench_recommendations_stale`` (1 while the served answer is stale because the source is unreachable;
no lane, no node: it is the document's).

The node label follows the fleet contract (``core.lanes.key_labels``): a lane that names a node carries
``node="<node>"``; a lane on the session's own host (node ``local``, a bare key) carries none, exactly as the
exporter's and the load generator's series of that lane, so ``on(node, lane)`` joins across them and a session
without nodes serves the very series it served before. Prometheus stores an empty label as absent, so a query
that needs the name sees such a lane with ``node=""`` (or the scrape target's ``node`` label, when the scrape
job sets one and keeps the exposed label with ``honor_labels: true``).
"""

from __future__ import annotations

import calendar
import time
from collections.abc import Iterable, Iterator, Mapping
from typing import Any, Protocol

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import Metric
from prometheus_client.registry import Collector

from satbench.answer.checks import LANE_SUMMARIES
from satbench.answer.document import read_document
from satbench.answer.models import LaneModel, RecommendationsDocument, said
from satbench.core.lanes import LOCAL_NODE, key_labels, lane_key, split_key
from satbench.recommender.errors import NothingToServe

__all__ = [
    "VALIDITY_STATES",
    "RecommendationsCollector",
    "answer_families",
    "build_registry",
    "document_lanes",
    "exposition",
    "lane_identity",
    "validity_state",
]

VALIDITY_STATES = ("valid", "changed", "unknown")


def lane_identity(key: str, lane: LaneModel) -> tuple[str, str]:
    """``(node, lane name)`` of the document's lane ``key``: the v2 fields where the answer says them, else
    what the key says; a lane naming no node is on ``LOCAL_NODE``."""
    key_node, key_name = split_key(key)
    node = said(lane, "node") or key_node or LOCAL_NODE
    return str(node), str(said(lane, "lane") or key_name)


def validity_state(lane: LaneModel) -> str:
    """``valid``, ``changed`` or ``unknown`` (also for a lane without ``validity``)."""
    return lane.validity.state if lane.validity is not None else "unknown"


def document_lanes(document: RecommendationsDocument | None) -> list[tuple[str, LaneModel]]:
    """The document's answers as ``(key, lane)`` sorted by key; none for ``None``."""
    return sorted(document.lanes.items()) if document is not None else []


def _labels(node: str, name: str, **more: str) -> dict[str, str]:
    return {**key_labels(lane_key(None if node == LOCAL_NODE else node, name)), **more}


def _gauge(name: str, documentation: str) -> Metric:
    return Metric(name, documentation, "gauge")


def answer_families(document: RecommendationsDocument | None) -> list[Metric]:
    """The ``satbench_*`` families of a recommendations document (``None``: nothing to serve yet).

    Pure: the same document gives the same families, sample order included (lanes sorted by key)."""
    rec = _gauge("satbench_recommended_concurrency", "Largest useful concurrency per lane under the policy.")
    sat = _gauge("satbench_saturation_concurrency", "Concurrency where throughput stops paying per doubling.")
    status = _gauge("satbench_recommendation_status",
                    "1 per lane, labelled with the answer's status and binding constraint.")
    verdict = _gauge("satbench_verdict_ok",
                     "1 when no measured rung of the lane was flagged for the check, 0 when one was.")
    valid = _gauge("satbench_recommendation_valid",
                   "1 when the answer still holds for the live runtime, 0 when it was measured on something "
                   "else; absent when unknown.")
    validity = _gauge("satbench_recommendation_validity",
                      "1 for the lane's validity state (valid, changed, unknown), 0 for the others.")
    stale = _gauge("satbench_recommendations_stale",
                   "1 while the served recommendations are stale (source unreachable).")
    measured = _gauge("satbench_recommendation_measured_timestamp_seconds",
                      "When the answer's last window ended (Unix seconds): its age is time() minus this.")
    max_rate = _gauge("satbench_max_rate_rps",
                      "Highest open-loop request rate the lane serves within its objectives (requests/s).")
    goodput = _gauge("satbench_goodput_rps",
                     "Requests/s that met every objective at the lane's rate answer.")
    trace_factor = _gauge("satbench_trace_max_factor",
                          "Largest speed factor of the replayed recorded trace the lane takes within its "
                          "objectives (x the recorded traffic).")
    agents = _gauge("satbench_max_agent_sessions",
                    "Most concurrent agent session trees the lane holds at its SLO tier (p95 TTFT, p25 speed).")
    energy = _energy_families()
    for key, data in document_lanes(document):
        node, name = lane_identity(key, data)
        labels = _labels(node, name)
        _energy_samples(energy, node, name, data)
        if data.recommended_concurrency is not None:
            rec.add_sample(rec.name, labels, float(data.recommended_concurrency))
        if data.saturation_concurrency is not None:
            sat.add_sample(sat.name, labels, float(data.saturation_concurrency))
        at = _unix(data.measured_at)
        if at is not None:
            measured.add_sample(measured.name, labels, at)
        rate = data.rate
        if rate is not None and rate.max_rate_rps is not None:
            max_rate.add_sample(max_rate.name, _labels(node, name, status=rate.status), float(rate.max_rate_rps))
        if rate is not None and rate.goodput_rps is not None:
            goodput.add_sample(goodput.name, labels, float(rate.goodput_rps))
        trace = data.trace
        if trace is not None and trace.max_factor is not None:
            trace_factor.add_sample(trace_factor.name, _labels(node, name, status=trace.status),
                                    float(trace.max_factor))
        if data.agents is not None and data.agents.max_sessions is not None:
            agents.add_sample(agents.name, _labels(node, name, status=data.agents.status,
                                                   valid="true" if data.agents.validity.valid else "false"),
                              float(data.agents.max_sessions))
        status.add_sample(status.name, _labels(node, name, status=str(data.status or "unknown"),
                                               binding_constraint=str(data.binding_constraint or "")), 1.0)
        for check, ok in _verdicts(data).items():
            verdict.add_sample(verdict.name, _labels(node, name, check=check), 1.0 if ok else 0.0)
        state = validity_state(data)
        if state != "unknown":
            valid.add_sample(valid.name, labels, 1.0 if state == "valid" else 0.0)
        for one in VALIDITY_STATES:
            validity.add_sample(validity.name, _labels(node, name, state=one), 1.0 if one == state else 0.0)
    stale.add_sample(stale.name, {}, 1.0 if document is not None and document.stale else 0.0)
    return [rec, sat, status, verdict, valid, validity, measured, max_rate, goodput, trace_factor, agents, *energy,
            stale]


def _energy_families() -> tuple[Metric, Metric, Metric]:
    return (_gauge("satbench_answer_joules_per_token", "Energy per output token at the answer's rung (joules; "
                   "scope: what the energy covers)."),
            _gauge("satbench_answer_tokens_per_s_per_kw", "Output tokens/s per kilowatt drawn at the answer's rung."),
            _gauge("satbench_answer_cost_per_million_tokens", "What a million output tokens cost at the answer's "
                   "rung on a node at the policy's price."))


def _energy_samples(families: tuple[Metric, Metric, Metric], node: str, name: str, lane: LaneModel) -> None:
    """The energy families' samples of a lane's answers (each of the concurrency, rate and agent answers that has
    an energy reading)."""
    per_token, per_kw, cost = families
    answers = (("concurrency", lane.energy), ("rate", None if lane.rate is None else lane.rate.energy),
               ("agents", None if lane.agents is None else lane.agents.energy))
    for answer, e in answers:
        if e is None:
            continue
        scope = str(e.scope or "")
        if e.joules_per_token is not None:
            per_token.add_sample(per_token.name, _labels(node, name, answer=answer, scope=scope), e.joules_per_token)
        if e.tok_s_per_kw is not None:
            per_kw.add_sample(per_kw.name, _labels(node, name, answer=answer, scope=scope), e.tok_s_per_kw)
        if e.cost_per_million_tokens is not None:
            cost.add_sample(cost.name, _labels(node, name, answer=answer, currency=str(e.currency or "")),
                            e.cost_per_million_tokens)


def _unix(iso: Any) -> float | None:
    """``2026-12-01T16:13:16Z`` (``answer.document.iso_utc``) as Unix seconds; None for anything else."""
    if not isinstance(iso, str):
        return None
    try:
        return float(calendar.timegm(time.strptime(iso, "%Y-%m-%dT%H:%M:%SZ")))
    except ValueError:
        return None


def _verdicts(lane: LaneModel) -> dict[str, bool]:
    """Per check, whether every measured rung of the lane passed it (the document's lane summaries)."""
    found = {check: said(getattr(lane, group), name) for check, group, name in LANE_SUMMARIES}
    return {check: bool(ok) for check, ok in found.items() if ok is not None}


class DocumentSource(Protocol):
    """What the collector reads of the store (``recommender.store.RecommendationStore``, which renders the
    capabilities that read this module: a protocol here, not an arrow back)."""

    def model(self) -> RecommendationsDocument: ...


class RecommendationsCollector(Collector):
    """The store's current document (the stale copy while the source is unreachable) as ``answer_families``."""

    def __init__(self, store: DocumentSource) -> None:
        self._store = store

    def collect(self) -> Iterator[Metric]:
        try:
            document: RecommendationsDocument | None = self._store.model()
        except (NothingToServe, ValueError):  # nothing yet, or a document that does not validate: no answer
            document = None
        yield from answer_families(document)


class _Families(Collector):
    def __init__(self, families: Iterable[Metric]) -> None:
        self._families = list(families)

    def collect(self) -> Iterator[Metric]:
        yield from self._families


def exposition(document: RecommendationsDocument | Mapping[str, Any] | None) -> str:
    """The Prometheus text exposition of ``answer_families(document)``: byte for byte what ``/metrics`` serves
    while the store holds ``document`` (as JSON, v1 or v2, it is validated here: ``read_document``)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Families(answer_families(None if document is None else read_document(document))))
    return generate_latest(registry).decode("utf-8")


def build_registry(store: DocumentSource) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(RecommendationsCollector(store))
    return registry
