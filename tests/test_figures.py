"""The client figures' flat form (``loadgen_step_figure``) and the agreement bound, from ``core.figures``."""

from __future__ import annotations

import dataclasses

import pytest

from satbench.core.figures import Quantiles, StepFigures, client_figures, client_values, disagreements

STEP = StepFigures(lane="a", concurrency=4, window_s=8.0, requests=20, errors=1, throughput_tok_s=300.0,
                   requests_per_s=2.5, ttft_s=Quantiles(0.100, 0.200, 0.250), itl_s=Quantiles(0.010, 0.015),
                   jain=0.98, max_min_share=1.2, decode_stall_max_s=0.09, errors_by_outcome={"http": 1},
                   occupancy_ratio=0.9, throughput_ci_tok_s=(290.0, 310.0))


def test_client_values_round_trip_and_leave_server_figures_out() -> None:
    values = client_values(STEP)
    assert values["ttft_s.p95"] == 0.2 and values["errors_by_outcome.http"] == 1.0 and "itl_s.p99" not in values
    assert not any(k.startswith(("occupancy", "queue_depth", "memory", "valid")) for k in values)
    assert (values["throughput_ci_tok_s.lo"], values["throughput_ci_tok_s.hi"]) == (290.0, 310.0)
    back = StepFigures.from_dict({**STEP.to_dict(), **client_figures(values)})
    assert back == STEP and isinstance(client_figures(values)["requests"], int)
    half = {k: v for k, v in values.items() if k != "throughput_ci_tok_s.hi"}
    assert client_figures(half)["throughput_ci_tok_s"] is None  # half an interval is none


@pytest.mark.parametrize(
    ("change", "differs"),
    [
        ({}, set()),
        ({"throughput_tok_s": 314.0}, set()),  # 4.7 %: inside 5 %
        ({"throughput_tok_s": 316.0}, {"throughput_tok_s"}),
        ({"itl_s": Quantiles(0.0109, 0.015)}, set()),  # sub-20 ms: 0.9 ms apart is inside 1 ms
        ({"itl_s": Quantiles(0.0111, 0.015)}, {"itl_s.p50"}),
        ({"jain": None}, {"jain"}),  # known on one side only
        ({"occupancy_ratio": 0.1}, set()),  # not a client figure
    ],
)
def test_disagreements_use_the_design_bound(change: dict[str, object], differs: set[str]) -> None:
    other = dataclasses.replace(STEP, **change)  # type: ignore[arg-type]
    assert set(disagreements(other, STEP)) == differs


def test_cache_and_draft_figures_read_back_from_the_published_metric_equal_the_records() -> None:
    """The Prometheus path takes these figures from ``loadgen_step_figure``: publish a step's exact figures as
    the load generator does, scrape the exposition text, hand the samples to the Prometheus path's builder."""
    from prometheus_client import CollectorRegistry, generate_latest
    from prometheus_client.parser import text_string_to_metric_families

    from satbench.core.manifest import StepWindow
    from satbench.core.records import RequestRecord
    from satbench.core.step_figures import compute_step_figures
    from satbench.loadgen.metrics import LoadgenMetrics
    from satbench.recommender.prometheus_figures import PromStepResults, figures_from_prometheus

    window = StepWindow(lane="a", concurrency=2, start=100.0, end=110.0)
    records = [RequestRecord(run_id="r", lane="a", concurrency=2, user=i % 2, request_id=str(i), phase="window",
                             sent_at=100.5 + i, ttft_s=0.1, e2e_s=0.5, queue_s=0.0, itl_s=(0.4,),
                             prompt_tokens=300 + i, output_tokens=2, outcome="ok", cached_prompt_tokens=257 * (i > 0),
                             draft_tokens=7, draft_accepted_tokens=5 + i % 2) for i in range(6)]
    exact = compute_step_figures(records, window)
    assert exact.cache_hit_share == pytest.approx(5 * 257 / sum(300 + i for i in range(6)))
    assert exact.spec_acceptance_rate == pytest.approx(33 / 42)
    registry = CollectorRegistry()
    metrics = LoadgenMetrics(registry)
    metrics.publish_step("a", "r", 2, client_values(exact))
    for record in records:
        metrics.runtime_counts("a", record)
    text = generate_latest(registry).decode()
    published = {s.labels["figure"]: s.value for family in text_string_to_metric_families(text)
                 for s in family.samples if s.name == "loadgen_step_figure"}
    assert {"cache_hit_share", "cache_reported_prompt_tokens", "spec_acceptance_rate", "draft_tokens"} <= set(published)
    prom = figures_from_prometheus(window, PromStepResults(), confidence=0.95, published=published)
    for name in ("cache_hit_share", "cached_prompt_tokens", "cache_reported_prompt_tokens", "spec_acceptance_rate",
                 "draft_tokens", "draft_accepted_tokens"):
        assert getattr(prom, name) == getattr(exact, name), name
    assert disagreements(prom, exact) == {}
    counter = registry.get_sample_value
    assert counter("loadgen_cached_prompt_tokens_total", {"lane": "a"}) == exact.cached_prompt_tokens
    assert counter("loadgen_prompt_tokens_total", {"lane": "a"}) == exact.cache_reported_prompt_tokens
    assert counter("loadgen_draft_accepted_tokens_total", {"lane": "a"}) == exact.draft_accepted_tokens
