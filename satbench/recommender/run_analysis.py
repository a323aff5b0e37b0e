"""One finished run -> its recommendations document, without the HTTP service.

``analyze_run`` is what the session orchestrator calls at the end of a run, and what the service calls
when a run is registered. It prefers Prometheus (the live stack, the same numbers Grafana shows) and falls
back to the run folder's records when Prometheus is unreachable or holds no load-generator samples for the
run's windows; the document's ``source`` and ``notes`` then say so. When Prometheus answers but some
windows are unusable there (missed scrapes) while the manifest holds them valid, those steps alone are
taken from the records, and a note names each one. With neither source usable it raises
``SourceUnavailable``; with neither source given, ``BadInput``.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from satbench.answer.agent_analysis import agents_model, answer_rung
from satbench.answer.analysis import analyze_lane
from satbench.answer.document import build_document, lane_fragment, mark_changed, unchecked
from satbench.answer.energy import NONE_READ, RECORDS_READ, energy_at
from satbench.answer.models import LaneModel, TraceEvidenceModel, ValidityModel
from satbench.answer.policy import Policy, objectives_of
from satbench.answer.prefill_analysis import prefill_answer
from satbench.answer.rate_analysis import RateAnswer, rate_answer
from satbench.answer.trace_analysis import TraceAnswer, trace_answer
from satbench.core.attainment import capacity_bound
from satbench.core.energy import EnergyFigures, energy_figures
from satbench.core.figures import StepFigures
from satbench.core.fingerprint import policy_part, workload_part
from satbench.core.lane_evidence import ConfiguredRun, ManifestLane, manifest_lane
from satbench.core.manifest import RunManifest
from satbench.core.objectives import Objectives
from satbench.recommender.errors import BadInput, PrometheusQueryError, SourceUnavailable
from satbench.recommender.prometheus_source import (
    HttpxPromClient,
    PrometheusSourceConfig,
    PromQLClient,
    fetch_run_figures,
    public_url,
    window_energy,
)
from satbench.recommender.records_source import figures_from_records, load_records, unusable_window_figures
from satbench.recommender.validity import check_answers

__all__ = ["analyze_run", "analyze_run_async", "document_from_figures", "lane_place", "lane_trace_answer"]


def document_from_figures(manifest: RunManifest, figures: dict[str, list[StepFigures]], *, policy: Policy,
                          source: dict[str, Any], generated_at: float, notes: list[str] | None = None,
                          live: Mapping[str, ValidityModel] | None = None,
                          agent_energy: Mapping[str, EnergyFigures] | None = None) -> dict[str, Any]:
    """The document of ``manifest``'s lanes from their step figures; ``live`` is each answer's validity
    against its live fingerprint where it was checked (``recommender.validity``), by lane key; ``agent_energy``
    the energy over each agent answer's rung window (Prometheus only)."""
    lanes: dict[str, LaneModel] = {}
    labels: dict[str, dict[str, str]] = {}
    unread = NONE_READ if source.get("kind") == "prometheus" else RECORDS_READ
    for lane in manifest.lane_names():
        ends = [w.end for w in manifest.windows(lane)]
        steps = figures.get(lane, [])
        closed = [s for s in steps if s.rate_rps is None]
        analysis = analyze_lane(lane, closed, policy)
        slots = max((w.slots for w in manifest.windows(lane) if w.slots), default=None)
        capacity = capacity_bound([(s.concurrency, s.requests_per_s) for s in closed if s.valid], slots)
        at_answer = next((s for s in closed if s.concurrency == analysis.recommended_concurrency), None)
        # a trace rung (its window has a speed_factor) is the trace answer's (answer.trace_analysis), not a rate
        traced = {(w.concurrency, w.rate_rps) for w in manifest.windows(lane) if w.speed_factor is not None}
        rate = rate_answer([s for s in steps if s.rate_rps is not None and (s.concurrency, s.rate_rps) not in traced],
                           policy, at_answer, capacity)
        entry = manifest_lane(manifest, lane)
        where = lane_place(manifest, lane, policy)
        labels.setdefault(entry.place(lane)[0], dict(entry.node_labels))
        walk = manifest.prefill.get(lane)
        prefill = None if walk is None else prefill_answer(walk, policy, _settings(entry))
        node = entry.place(lane)[0]
        agents = manifest.agents.get(lane)
        lanes[lane] = lane_fragment(analysis, run_id=manifest.run_id, measured_at=max(ends) if ends else None,
                                    where=where, rate=rate, trace=lane_trace_answer(manifest, lane, steps, policy),
                                    prefill=prefill, energy=energy_at(at_answer, policy.cost, node, unread),
                                    rate_energy=energy_at(_rate_rung(steps, rate, traced), policy.cost, node,
                                                          unread),
                                    agents=None if agents is None else agents_model(
                                        agents, (agent_energy or {}).get(lane), policy.cost, node, unread))
        if entry.unreachable and not ends:  # a fleet node that did not answer: never measured, and the answer says why
            lanes[lane] = lanes[lane].model_copy(update={"status": "insufficient_data",
                                                         "reason": f"not measured: {entry.unreachable}"})
        if live is not None and lane in live:
            lanes[lane] = mark_changed(lanes[lane], live[lane])
    return build_document(run_id=manifest.run_id, generated_at=generated_at, source=source, policy=policy,
                          lanes=lanes, notes=notes, node_labels=labels)


def _rate_rung(steps: list[StepFigures], rate: RateAnswer | None,
               traced: set[tuple[int, float | None]]) -> StepFigures | None:
    """The rung the rate answer was read at: the highest rate rung at or below it that passed (None: no answer)."""
    if rate is None or rate.max_rate_rps is None:
        return None
    passed = {p.rate_rps for p in rate.points if p.passed}
    rungs = [s for s in steps if s.rate_rps is not None and (s.concurrency, s.rate_rps) not in traced
             and s.rate_rps in passed and s.rate_rps <= rate.max_rate_rps + 1e-9 and s.drift_reference is None]
    return max(rungs, key=lambda s: s.rate_rps or 0.0, default=None)


def _settings(entry: ManifestLane) -> Mapping[str, Any]:
    """The server settings of the lane's fingerprint (batch, ubatch, ...), empty where none was taken (or the
    document carries none: ``lane_place``)."""
    measured = entry.measured
    return (measured.settings or {}) if entry.fingerprint is not None and measured is not None \
        and measured.runtime is not None else {}


def lane_trace_answer(manifest: RunManifest, lane: str, steps: list[StepFigures], policy: Policy
                      ) -> TraceAnswer | None:
    """The trace answer of lane ``lane`` (``answer.trace_analysis``): its trace rungs (the steps whose
    window carries a ``speed_factor``) with their factors, judged against the recorded rate of the manifest's
    ``traces`` entry, which goes with the answer as its evidence; ``None`` where the lane replayed no trace.
    No closed-ladder bound, as the load generator's factor search has none: the closed rungs sent the
    configured workload's lengths, not the trace's. A manifest without the entry (cut short) still has each
    rung's rate over its factor."""
    factors = {(w.concurrency, w.rate_rps): w.speed_factor for w in manifest.windows(lane)
               if w.speed_factor is not None}
    rungs = [(factors[(s.concurrency, s.rate_rps)], s) for s in steps if (s.concurrency, s.rate_rps) in factors]
    if not rungs:
        return None
    evidence = manifest.traces.get(lane) or {}
    try:
        recorded = TraceEvidenceModel.model_validate(evidence).recorded_rate_rps
    except ValidationError:  # evidence a reader cannot use: the rungs' own rates say the recorded one
        recorded = None
    if recorded is None or not recorded > 0:
        factor, step = rungs[0]
        recorded = (step.rate_rps or 0.0) / factor
    return trace_answer(rungs, policy, float(recorded), trace=evidence)


def lane_place(manifest: RunManifest, key: str, policy: Policy) -> dict[str, Any]:
    """Where lane ``key`` was measured, from the manifest: node, name, runtime URL and the fingerprint the
    session took from the lane's exporter when the walk began, completed with the workload and the policy
    this answer was judged by (``core.fingerprint``). A lane without one says why its fingerprint is null."""
    entry = manifest_lane(manifest, key)
    measured = entry.measured
    if entry.fingerprint is not None and measured is not None and measured.runtime is not None:
        # the fingerprint as taken (its keys in the exporter's order, byte for byte), then what judged the answer
        fingerprint: dict[str, Any] | None = {
            **entry.fingerprint, "workload": workload_part(ConfiguredRun.of(manifest).workload),
            # prices turn the measurements into no answer, only into a cost: not part of what judged it
            "policy": policy_part(policy.model_dump(mode="json", exclude={"cost"}))}
        validity = unchecked("not yet compared with the live fingerprint (the exporter's runtime_fingerprint_info)")
    else:
        fingerprint = None
        why = entry.fingerprint_reason or "the session took no fingerprint of this lane"
        validity = unchecked(f"no fingerprint: {why}")
    node, name = entry.place(key)
    return {"node": node, "lane": name, "url": entry.url, "model": entry.model or None, "fingerprint": fingerprint,
            "validity": validity}


def _has_samples(figures: dict[str, list[StepFigures]]) -> bool:
    return any(f.requests or f.errors for figs in figures.values() for f in figs)


async def _agent_energy(manifest: RunManifest, client: PromQLClient,
                        config: PrometheusSourceConfig) -> dict[str, EnergyFigures]:
    """Per lane that walked agent sessions, the energy over its answer's rung window (``answer.agent_analysis``)."""
    out: dict[str, EnergyFigures] = {}
    for lane, walk in manifest.agents.items():
        at = answer_rung(walk)
        if at is None or at.end <= at.start:
            continue
        readings = await window_energy(client, lane, at.start, at.end, config.scrape_interval_s)
        out[lane] = energy_figures(readings, at.end - at.start, at.output_tok_s * (at.end - at.start))
    return out


async def _from_prometheus(manifest: RunManifest, client: PromQLClient,
                           config: PrometheusSourceConfig) -> dict[str, list[StepFigures]]:
    usable = manifest.model_copy(update={"steps": tuple(w for w in manifest.steps if w.end > w.start)})
    figures = await fetch_run_figures(client, usable, config)
    for window in manifest.steps:
        if window.end <= window.start:
            figures.setdefault(window.lane, []).append(
                unusable_window_figures(window, "empty step window (end <= start)"))
    return figures


async def _patch_from_records(manifest: RunManifest, figures: dict[str, list[StepFigures]], run_dir: Path,
                              notes: list[str], objectives: Objectives) -> dict[str, list[StepFigures]]:
    """Steps Prometheus could not support, replaced by the records' exact figures where those are valid."""
    valid_windows = {(w.lane, w.concurrency, w.rate_rps) for w in manifest.steps if w.valid and w.end > w.start}
    bad = {(f.lane, f.concurrency, f.rate_rps): f for figs in figures.values() for f in figs
           if not f.valid and (f.lane, f.concurrency, f.rate_rps) in valid_windows}
    if not bad:
        return figures
    try:
        records = await asyncio.to_thread(load_records, run_dir, notes)
    except SourceUnavailable:
        return figures
    from_records = figures_from_records(manifest, records, objectives)
    exact = {(f.lane, f.concurrency, f.rate_rps): f for figs in from_records.values() for f in figs}
    patched: dict[str, list[StepFigures]] = {}
    for lane, figs in figures.items():
        patched[lane] = []
        for fig in figs:
            key = (fig.lane, fig.concurrency, fig.rate_rps)
            replacement = exact.get(key)
            if key in bad and replacement is not None and replacement.valid:
                notes.append(f"{fig.lane} c={fig.concurrency}: figures from the run's records ({fig.reason})")
                fig = replacement
            patched[lane].append(fig)
    return patched


async def _validity_now(manifest: RunManifest, client: PromQLClient, clock: Callable[[], float],
                        fleet_key: bytes | None = None) -> dict[str, ValidityModel]:
    """Each answer's validity against the live fingerprints now (``recommender.validity``), so an answer is
    checked the moment it is made; an unreadable fingerprint series leaves the answers unchecked."""
    taken = {key: measured for key in manifest.lanes
             if (measured := manifest_lane(manifest, key).measured) is not None}  # one without keeps its reason
    try:
        return await check_answers(client, taken, now=clock(), fleet_key=fleet_key)
    except (SourceUnavailable, PrometheusQueryError):
        return {}


async def analyze_run_async(
    manifest: RunManifest,
    *,
    prometheus_url: str | None,
    run_dir: Path | None,
    policy: Policy,
    source_config: PrometheusSourceConfig | None = None,
    prom_client: PromQLClient | None = None,
    prometheus_timeout_s: float = 10.0,
    clock: Callable[[], float] = time.time,
    prometheus_headers: dict[str, str] | None = None,
    prometheus_auth: tuple[str, str] | None = None,
    fingerprint_key: bytes | None = None,
) -> dict[str, Any]:
    """The recommendations document of ``manifest`` (see the module docstring for the source order);
    ``prometheus_auth``: the store's basic-auth credentials, ``fingerprint_key``: the fleet key signed
    fingerprint series are verified with (``recommender.validity``)."""
    config = source_config or PrometheusSourceConfig(confidence=policy.confidence)
    notes: list[str] = []
    if prometheus_url is None and prom_client is None and run_dir is None:
        raise BadInput("no source: give a Prometheus URL or a run folder with records.jsonl")
    if prometheus_url is not None or prom_client is not None:
        url = public_url(prometheus_url) if prometheus_url is not None else "(injected client)"
        try:
            live: dict[str, ValidityModel] = {}
            if prom_client is not None:
                figures = await _from_prometheus(manifest, prom_client, config)
                live = await _validity_now(manifest, prom_client, clock, fingerprint_key)
                agent_energy = await _agent_energy(manifest, prom_client, config)
            else:
                assert prometheus_url is not None
                async with HttpxPromClient(prometheus_url, timeout_s=prometheus_timeout_s,
                                           headers=prometheus_headers, auth=prometheus_auth) as client:
                    figures = await _from_prometheus(manifest, client, config)
                    live = await _validity_now(manifest, client, clock, fingerprint_key)
                    agent_energy = await _agent_energy(manifest, client, config)
            if _has_samples(figures) or run_dir is None:
                if run_dir is not None:
                    figures = await _patch_from_records(manifest, figures, run_dir, notes, objectives_of(policy))
                return document_from_figures(manifest, figures, policy=policy, generated_at=clock(),
                                             source={"kind": "prometheus", "url": url}, notes=notes, live=live,
                                             agent_energy=agent_energy)
            notes.append(f"Prometheus at {url} holds no load-generator samples for this run's windows")
        except (SourceUnavailable, PrometheusQueryError) as exc:
            if run_dir is None:
                raise
            notes.append(f"Prometheus unusable ({exc})")
    assert run_dir is not None
    fell_back = len(notes) - 1  # the note saying why Prometheus was not used, if one does
    records = await asyncio.to_thread(load_records, run_dir, notes)
    figures = figures_from_records(manifest, records, objectives_of(policy))
    if fell_back >= 0:
        notes[fell_back] += "; figures computed from the run's records instead"
    return document_from_figures(manifest, figures, policy=policy, generated_at=clock(),
                                 source={"kind": "records", "run_dir": run_dir.name}, notes=notes)


def analyze_run(manifest: RunManifest, *, prometheus_url: str | None, run_dir: Path | None,
                policy: Policy, prometheus_auth: tuple[str, str] | None = None) -> dict[str, Any]:
    """Blocking form of ``analyze_run_async``; safe to call from inside a running event loop too."""

    def run() -> dict[str, Any]:
        return asyncio.run(analyze_run_async(manifest, prometheus_url=prometheus_url, run_dir=run_dir,
                                             policy=policy, prometheus_auth=prometheus_auth))

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return run()
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(run).result()
