"""Prometheus answers for one step window -> ``StepFigures`` (pure: no I/O, no clock).

The I/O side (``prometheus_source``) issues the queries of ``core.promql`` at the window's end and hands
the raw numbers over in a ``PromStepResults``. Here they become figures:

* requests and errors: ``increase`` of ``loadgen_requests_total`` by outcome, rounded to whole requests
  (``increase`` extrapolates to the window edges, so it is fractional);
* throughput: output-token increase over the window length; the interval from its batches' rates by the
  records' rule (``core.statistics.batch_mean_estimate``: autocorrelation counted, standard error and degrees
  of freedom kept so the policy's confidence applies);
* quantiles: ``histogram_quantile`` over bucket increases, so they carry the bucket resolution;
* maxima (longest decode stall, longest wait for a first token): ``histogram_quantile(1, ...)``, the upper
  bound of the highest non-empty bucket, an over-estimate by at most one bucket width;
* fairness: Jain's index and max/min share over per-user output-token increases of users ``0..c-1``;
* occupancy, queue depth: window means of the exporter's gauges; memory: window maxima, of the fullest GPU
  and of the lane's GPUs summed, with their count and names (``gpu_info``) and whether they are modelled;
* energy: the GPUs' counters' increase (power samples where a GPU has no counter) and the CPU packages', per
  output token of the step's throughput, whichever source gave it (``core.energy``).

Where the load generator published the step's exact figures (``loadgen_step_figure``: the records' own
numbers, from ``core.step_figures``), every client figure is taken from them instead (``published``), so
the Prometheus path and the records path give one number; the coverage check then does not apply (no
``increase`` is used for them). The histogram estimates above are the fallback for a load generator that
did not publish (an older one, or a scrape that never came).

A NaN (no observations in the window) becomes ``None``, never a number. A window the load generator was
scraped too rarely in (fewer than ``min_scrape_coverage`` of the expected samples of
``loadgen_requests_total``) is marked invalid with the reason: ``increase`` over a gap extrapolates from
whatever samples remain and can be off by half.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from satbench.core.energy import EnergyReadings, energy_figures
from satbench.core.figures import MemoryFigures, Quantiles, StepFigures, client_figures
from satbench.core.manifest import StepWindow
from satbench.core.statistics import MeanEstimate, batch_mean_estimate, jain_index, max_min_share
from satbench.core.step_figures import window_validity

__all__ = ["PromStepResults", "figures_from_prometheus", "finite", "memory_figures"]


def finite(value: float | None) -> float | None:
    return None if value is None or not math.isfinite(value) else float(value)


@dataclass(frozen=True, slots=True)
class PromStepResults:
    output_tokens: float | None = None
    user_tokens: Mapping[str, float] = field(default_factory=dict)
    outcomes: Mapping[str, float] = field(default_factory=dict)
    ttft: Quantiles = field(default_factory=Quantiles)
    itl: Quantiles = field(default_factory=Quantiles)
    e2e: Quantiles = field(default_factory=Quantiles)
    tpot: Quantiles = field(default_factory=Quantiles)
    queue: Quantiles = field(default_factory=Quantiles)
    decode_stall_max_s: float | None = None
    ttft_max_s: float | None = None
    occupancy_ratio: float | None = None
    queue_depth_avg: float | None = None
    memory: MemoryFigures = field(default_factory=MemoryFigures)  # NaN-free (``memory_figures``)
    energy: EnergyReadings = field(default_factory=EnergyReadings)
    batch_tokens: tuple[float, ...] = ()
    batch_s: float | None = None
    samples: float | None = None


def memory_figures(*, gpu_max: float | None, gpu_total: float | None, host_rss_max: float | None,
                   gpu_sum_max: float | None, gpu_sum_total: float | None, gpu_count: float | None,
                   gpu_names: Sequence[str], gpu_simulated: bool | None, gpu_headroom_min: float | None = None,
                   gpu_other_max: float | None = None, kv_usage_max: float | None = None) -> MemoryFigures:
    """The window's memory figures from the raw answers: NaN is unknown, the GPU count a whole number and the
    names one sorted, comma-separated string; memory held by other processes only where it is some."""
    count = finite(gpu_count)
    other = finite(gpu_other_max)
    return MemoryFigures(gpu_max=finite(gpu_max), gpu_total=finite(gpu_total), host_rss_max=finite(host_rss_max),
                         gpu_sum_max=finite(gpu_sum_max), gpu_sum_total=finite(gpu_sum_total),
                         gpu_count=None if count is None else round(count),
                         gpu_names=", ".join(sorted(set(gpu_names) - {""})) or None, gpu_simulated=gpu_simulated,
                         gpu_headroom_min_ratio=finite(gpu_headroom_min),
                         gpu_other_max=None if other is None or other <= 0 else other,
                         kv_usage_max_ratio=finite(kv_usage_max))


def _clean(q: Quantiles) -> Quantiles:
    return Quantiles(p50=finite(q.p50), p95=finite(q.p95), p99=finite(q.p99))


def _estimate(batch_tokens: Sequence[float], batch_s: float | None) -> MeanEstimate | None:
    """The batches' mean rate and its autocorrelation-aware standard error: the records' rule
    (``core.statistics.batch_mean_estimate``) over the batches Prometheus can give."""
    if batch_s is None or batch_s <= 0:
        return None
    return batch_mean_estimate([t / batch_s for t in batch_tokens])


def _user_shares(user_tokens: Mapping[str, float], concurrency: int) -> list[float]:
    """Tokens of users ``0..c-1`` (as the records source counts them): a user without a series got 0."""
    shares = [0.0] * concurrency
    for user, tokens in user_tokens.items():
        try:
            index = int(user)
        except ValueError:
            continue
        if 0 <= index < concurrency and math.isfinite(tokens):
            shares[index] += max(0.0, tokens)
    return shares


def _coverage_problem(window: StepWindow, samples: float | None, scrape_interval_s: float,
                      min_coverage: float) -> str | None:
    if scrape_interval_s <= 0 or min_coverage <= 0:
        return None
    if samples is None:
        samples = 0.0
    expected = window.duration_s / scrape_interval_s
    if samples >= min_coverage * expected:
        return None
    return (f"Prometheus holds {samples:.0f} load-generator samples in this {window.duration_s:.1f} s "
            f"window, about {expected:.0f} expected at a {scrape_interval_s:g} s scrape: missed scrapes make "
            f"increase() unreliable")


def _with_published(step: StepFigures, published: Mapping[str, float], window: StepWindow) -> StepFigures:
    """``step`` with every client figure the published one (absent there: unknown, as in the records), and
    the records' validity rule."""
    data = {**step.to_dict(), **client_figures(published)}
    data["valid"], data["reason"] = window_validity(window, data["requests"])
    return StepFigures.from_dict(data)


def figures_from_prometheus(window: StepWindow, r: PromStepResults, *, confidence: float,
                            scrape_interval_s: float = 1.0, min_scrape_coverage: float = 0.0,
                            published: Mapping[str, float] | None = None) -> StepFigures:
    step = _from_histograms(window, r, confidence=confidence, scrape_interval_s=scrape_interval_s,
                            min_scrape_coverage=min_scrape_coverage)
    step = _with_published(step, published, window) if published else step
    energy = energy_figures(r.energy, step.window_s, step.throughput_tok_s * step.window_s)
    # the manifest says which window re-measures a rung (core.drift), whatever the store still holds
    return dataclasses.replace(step, energy=energy, drift_reference=1 if window.drift_reference else None)


def _from_histograms(window: StepWindow, r: PromStepResults, *, confidence: float, scrape_interval_s: float,
                     min_scrape_coverage: float) -> StepFigures:
    w = window.duration_s
    coverage = _coverage_problem(window, finite(r.samples), scrape_interval_s, min_scrape_coverage)
    valid, reason = window.valid, window.reason
    if valid and coverage is not None:
        valid, reason = False, coverage
    ok = round(r.outcomes.get("ok", 0.0))
    by_outcome = {k: round(v) for k, v in sorted(r.outcomes.items()) if k != "ok" and round(v) > 0}
    tokens = finite(r.output_tokens) or 0.0
    itl = _clean(r.itl)
    stall = finite(r.decode_stall_max_s)
    ratio = None if stall is None or not itl.p50 else stall / itl.p50
    users = _user_shares(r.user_tokens, window.concurrency)
    estimate = _estimate(r.batch_tokens, r.batch_s)
    return StepFigures(
        lane=window.lane,
        concurrency=window.concurrency,
        window_s=w,
        requests=ok,
        errors=sum(by_outcome.values()),
        throughput_tok_s=tokens / w if w > 0 else 0.0,
        requests_per_s=ok / w if w > 0 else 0.0,
        latency_s=_clean(r.e2e),
        tpot_s=_clean(r.tpot),
        ttft_s=_clean(r.ttft),
        itl_s=itl,
        queue_s=_clean(r.queue),
        occupancy_ratio=finite(r.occupancy_ratio),
        queue_depth_avg=finite(r.queue_depth_avg),
        memory_bytes=r.memory,
        jain=jain_index(users),
        max_min_share=max_min_share(users),
        decode_stall_max_ratio=ratio,
        decode_stall_max_s=stall,
        prefill_wait_max_s=finite(r.ttft_max_s),
        errors_by_outcome=by_outcome,
        throughput_ci_tok_s=None if estimate is None else estimate.interval(confidence),
        throughput_se_tok_s=None if estimate is None else estimate.se,
        throughput_dof=None if estimate is None else estimate.dof,
        valid=valid,
        reason=reason,
    )
