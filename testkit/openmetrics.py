"""Records -> the ``loadgen_*`` (and a few ``runtime_*``) series a 1 s scrape would have stored, as
OpenMetrics text with timestamps, for ``promtool tsdb create-blocks-from openmetrics``.

Counters and histograms follow the load generator's convention: a request is counted, its tokens credited
to its user and its latencies observed when it *ends*. Histogram buckets are the load generator's
(``core.histograms.LATENCY_BUCKETS_S``), trimmed to one empty bucket each side of what was observed, which
leaves every ``histogram_quantile`` unchanged. ``extra_gauges`` adds arbitrary gauge samples (the escaping
probe); ``missed_scrapes`` lists time ranges with no samples at all (a scrape target that did not answer);
``loadgen_step_figure`` (each step's exact figures, from its drain on) is written for ``publish_lanes``.

A record's ``lane`` is a lane key (``core.lanes``): a bare name gives series labelled ``lane`` alone, a
node-qualified key ``node-001/dense`` gives ``node="node-001",lane="dense"``, as the load generator labels
them (``core.lanes.key_labels``).
"""

from __future__ import annotations

import bisect
import math
from collections import defaultdict
from collections.abc import Collection, Iterable, Sequence

from satbench.core.figures import client_values
from satbench.core.histograms import LATENCY_BUCKETS_S
from satbench.core.lanes import key_labels
from satbench.core.manifest import RunManifest
from satbench.core.records import RequestRecord
from satbench.core.step_figures import compute_step_figures

__all__ = ["openmetrics_text"]


def _esc(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _labels(pairs: Iterable[tuple[str, str]]) -> str:
    return "{" + ",".join(f'{k}="{_esc(v)}"' for k, v in pairs) + "}"


def _lane_pairs(key: str) -> list[tuple[str, str]]:
    """The ``node`` (where the key names one) and ``lane`` labels of lane ``key``."""
    return list(key_labels(key).items())


def _observations(rec: RequestRecord) -> dict[str, list[float]]:
    return {
        "ttft": [rec.ttft_s or 0.0],
        "e2e": [rec.e2e_s or 0.0],
        "tpot": [rec.tpot_s] if rec.ok and rec.tpot_s is not None else [],
        "queue": [rec.queue_s or 0.0],
        "itl": list(rec.itl_s),
        "decode_stall": [max(rec.itl_s)] if rec.itl_s else [],
    }


def openmetrics_text(manifest: RunManifest, records: Sequence[RequestRecord], *, scrape_s: float = 1.0,
                     extra_gauges: Sequence[tuple[str, dict[str, str], float]] = (),
                     missed_scrapes: Sequence[tuple[float, float]] = (),
                     publish_lanes: Collection[str] | None = None) -> str:
    ended = sorted((r for r in records if r.ended_at is not None), key=lambda r: r.ended_at or 0.0)
    first = min(w.warmup_start or w.start for w in manifest.steps) - 5 * scrape_s
    last = max(w.drain_end or w.end for w in manifest.steps) + 5 * scrape_s
    times = [first + k * scrape_s for k in range(int((last - first) / scrape_s) + 1)]
    times = [t for t in times if not any(a <= t <= b for a, b in missed_scrapes)]
    lanes = sorted({r.lane for r in records})
    bounds = LATENCY_BUCKETS_S
    kinds = ("ttft", "e2e", "tpot", "queue", "itl", "decode_stall")

    obs_index: dict[tuple[str, str], list[int]] = defaultdict(list)
    for rec in ended:
        for kind, values in _observations(rec).items():
            obs_index[(rec.lane, kind)].extend(bisect.bisect_left(bounds, v) for v in values)
    spans = {key: (max(0, min(v) - 1), min(len(bounds) - 1, max(v) + 1)) for key, v in obs_index.items() if v}

    requests: dict[str, list[int]] = defaultdict(list)
    tokens: dict[tuple[str, int], list[int]] = defaultdict(list)
    hist: dict[tuple[str, str], list[tuple[list[int], int, float]]] = defaultdict(list)
    req_n: dict[str, int] = defaultdict(int)
    tok_n: dict[tuple[str, int], int] = defaultdict(int)
    counts: dict[tuple[str, str], list[int]] = {k: [0] * (len(bounds) + 1) for k in obs_index}
    sums: dict[tuple[str, str], float] = defaultdict(float)
    users = {(r.lane, r.user) for r in records}
    i = 0
    for t in times:
        while i < len(ended) and (ended[i].ended_at or 0.0) <= t:
            rec = ended[i]
            req_n[rec.lane] += 1
            tok_n[(rec.lane, rec.user)] += rec.output_tokens
            for kind, values in _observations(rec).items():
                for v in values:
                    counts[(rec.lane, kind)][bisect.bisect_left(bounds, v)] += 1
                    sums[(rec.lane, kind)] += v
            i += 1
        for lane in lanes:
            requests[lane].append(req_n[lane])
            for kind in kinds:
                key = (lane, kind)
                if key in counts:
                    hist[key].append((list(counts[key]), sum(counts[key]), sums[key]))
        for user_key in users:
            tokens[user_key].append(tok_n[user_key])

    out: list[str] = []
    out.append("# TYPE loadgen_requests counter")
    for lane in lanes:
        lab = _labels([*_lane_pairs(lane), ("outcome", "ok")])
        out.extend(f"loadgen_requests_total{lab} {v} {t:.3f}"
                   for t, v in zip(times, requests[lane], strict=True))
    out.append("# TYPE loadgen_output_tokens counter")
    for (lane, user) in sorted(users):
        lab = _labels([*_lane_pairs(lane), ("user", str(user))])
        out.extend(f"loadgen_output_tokens_total{lab} {v} {t:.3f}"
                   for t, v in zip(times, tokens[(lane, user)], strict=True))
    for kind in kinds:
        name = f"loadgen_{kind}_seconds"
        out.append(f"# TYPE {name} histogram")
        for lane in lanes:
            key = (lane, kind)
            if key not in spans:
                continue
            lo, hi = spans[key]
            pairs = _lane_pairs(lane)
            for t, (bucket_counts, total, total_sum) in zip(times, hist[key], strict=True):
                acc = sum(bucket_counts[:lo])
                for b in range(lo, hi + 1):
                    acc += bucket_counts[b]
                    lab = _labels([*pairs, ("le", repr(bounds[b]))])
                    out.append(f"{name}_bucket{lab} {acc} {t:.3f}")
                out.append(f"{name}_bucket{_labels([*pairs, ('le', '+Inf')])} {total} {t:.3f}")
                out.append(f"{name}_count{_labels(pairs)} {total} {t:.3f}")
                out.append(f"{name}_sum{_labels(pairs)} {total_sum!r} {t:.3f}")
    gauges: dict[str, list[tuple[dict[str, str], float]]] = defaultdict(list)
    for name, labels, value in extra_gauges:
        gauges[name].append((labels, value))
    for name, series in gauges.items():
        out.append(f"# TYPE {name} gauge")
        for labels, value in series:
            lab = _labels(sorted(labels.items()))
            out.extend(f"{name}{lab} {value!r} {t:.3f}" for t in times if math.isfinite(value))
    out.extend(_published(manifest, records, times, publish_lanes))
    out.append("# EOF")
    return "\n".join(out) + "\n"


def _published(manifest: RunManifest, records: Sequence[RequestRecord], times: Sequence[float],
               lanes: Collection[str] | None) -> list[str]:
    """``loadgen_step_figure`` as the load generator publishes it: each step's exact figures from its drain
    on (``lanes``: only those lanes' steps; None: every lane)."""
    out = ["# TYPE loadgen_step_figure gauge"]
    by_step: dict[tuple[str, int], list[RequestRecord]] = defaultdict(list)
    for rec in records:  # a step's figures read only its lane's and concurrency's records: fleets stay linear
        by_step[(rec.lane, rec.concurrency)].append(rec)
    for window in manifest.steps:
        if lanes is not None and window.lane not in lanes:
            continue
        values = client_values(compute_step_figures(by_step.get((window.lane, window.concurrency), []), window))
        since = window.drain_end if window.drain_end is not None else window.end
        for name, value in values.items():
            lab = _labels(sorted([("concurrency", str(window.concurrency)), ("figure", name),
                                  *_lane_pairs(window.lane), ("run_id", manifest.run_id)]))
            out.extend(f"loadgen_step_figure{lab} {value!r} {t:.3f}" for t in times if t > since)
    return out
