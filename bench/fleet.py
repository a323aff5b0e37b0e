"""Fleet-scale figures: the recommender, the exporters and Prometheus for 50 nodes x 2 lanes (by default).

Printed as one table (goal, absolute figure, floor measured in the same run, ratio to the floor, ratio to
the goal), because this machine is small and shared: a ratio to a floor taken minutes apart on the same
machine survives a move to other hardware better than the absolute figure does. Nothing is asserted.

1. **Analysis time**: ``recommender.run_analysis.analyze_run`` of a synthetic fleet run (``testkit.synthetic``,
   every lane key ``node-NNN/dense`` and ``node-NNN/moe``, lanes walking a 1/2/4/8 ladder side by side as a
   fleet's load generator does), backfilled into a real Prometheus with ``promtool``; median of ``--repeat``.
   Goal: under 10 s for the whole fleet. Floor: the bare round trips the analysis makes, i.e. as many trivial
   instant queries (``vector(1)``) as it sends (counted by wrapping its PromQL client), through the same
   client, with the same number in flight (``PrometheusSourceConfig.max_in_flight``); that floor has its own
   floor in turn, the same count of round trips on one raw socket (no HTTP library), which shows what the
   client library costs. The table also splits the analysis into its fetch (every step's PromQL) and its
   document (pure Python), gives one lane analysed alone, and the CPU that this process and Prometheus spent
   per analysis (on a 2-core machine their sum bounds the wall time from below).
2. **GET /recommendations p99** with ``--pollers`` persistent HTTP/1.1 clients (raw asyncio streams, each
   polling at ``--rate`` req/s with a random phase) against ``satbench recommender`` as its own process,
   serving that run from ``--runs-dir`` (analysed from the same Prometheus, validity checked every scrape
   interval, as deployed). Goal: p99 under 20 ms. Floor: the same pollers against a bare asyncio protocol
   server (its own process, uvloop as uvicorn uses it) that answers every request with the same bytes. The
   server's and the pollers' CPU during each poll are printed beside them (the pollers share this process).
   Twice: plain, and with ``Accept-Encoding: gzip`` (what an HTTP library sends by default; the service then
   sends its cached gzipped bytes, and the floor serves the same gzipped bytes).
3. **The document's size**, raw and gzipped, and what serialising it costs (the service re-serialises it only
   when some answer's validity changes); then **GET /capabilities** (each lane's capability only, what a
   router needs) under the same pollers, its p99 and size, against the bare server answering its bytes.
4. **Exporter, Prometheus and simulator CPU**: ``satbench sim-fleet`` serving every lane, one exporter per lane
   (``bench/_fleet_exporters.py``: all in one process here; a real fleet runs one exporter per node, on its
   own host), and a real Prometheus scraping every exporter each ``--scrape-interval`` with the repo's rules
   (``prometheus/rules/``, whose groups evaluate every 1 s whatever the scrape interval), over ``--seconds``;
   CPU from ``psutil`` ``cpu_times`` deltas, as % of one core, and per scrape of one target (scrapes counted
   by Prometheus' own ``prometheus_target_interval_length_seconds_count``), projected to a 1 s scrape.
   Floors, each its own phase with one thing changed: the exporter process serving fixed bytes
   (``--static``: what its collector answered once, gzipped once; the same WSGI server, no collection), and
   Prometheus scraping the same live exporters without the rules.

   The scrape interval is 5 s by default, not 1 s: an exporter scrape costs some 10 ms of CPU here, so 100
   targets a second need more than one core of exporter CPU, which one process (one GIL) cannot give and
   this 2-core machine cannot spare; at 1 s every scrape then times out, threads pile up and the figures
   are of an overload, not of the exporter (``--scrape-interval 1`` shows it; the output warns when fewer
   than 99 % of the scrapes succeed). The CPU per scrape is what carries to a fleet, where each node runs
   its own exporter for its own lanes.

    .venv/bin/python bench/fleet.py [--nodes 50] [--seconds 20] [--pollers 100] [--rate 5] [--quick]

``--quick``: 5 nodes, 5 s phases, 1 s scrapes, one analysis (a smoke run). ``--parts analysis,service,cpu``
picks the figures. ``--profile``: cProfile's top 10 of one analysis (also printed whenever the analysis
misses its goal). Every child process is stopped on exit. Exits 0 unless a part failed (goals are printed,
not asserted).
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from _fleet_analysis import GOAL_ANALYSIS_S, AnalysisFigures, fleet_lanes, measure_analysis  # noqa: E402
from _fleet_cpu import Phase, measure_cpu  # noqa: E402
from _fleet_service import GOAL_P99_S, ServiceFigures, measure_service, serve_static  # noqa: E402

from satbench.recommender.prometheus_source import PrometheusSourceConfig  # noqa: E402
from testkit.backfill import BackfilledPrometheus  # noqa: E402
from testkit.openmetrics import openmetrics_text  # noqa: E402
from testkit.synthetic import simulate_run  # noqa: E402

LADDER = (1, 2, 4, 8)


# -- the table ----------------------------------------------------------------------------------------------


@dataclass
class Row:
    figure: str
    absolute: float
    unit: str
    floor: float | None = None
    goal: float | None = None
    note: str = ""


def fmt(value: float | None, unit: str) -> str:
    if value is None:
        return "-"
    if unit == "s":
        return f"{value:.2f} s" if value >= 1 else f"{value * 1e3:.0f} ms"
    if unit == "ms":
        return f"{value * 1e3:.2f} ms"
    if unit == "B":
        return f"{value / 1024:.0f} KiB" if value >= 10240 else f"{value:.0f} B"
    if unit == "%":
        return f"{value:.1f} %"
    if unit == "cpu-ms":
        return f"{value * 1e3:.2f} ms"
    return f"{value:g}{unit}"


def ratio(a: float | None, b: float | None) -> str:
    if a is None or b is None or b <= 0:
        return "-"
    return f"{a / b:.2f}x"


def print_table(rows: Sequence[Row]) -> None:
    head = ("figure", "goal", "absolute", "floor", "x floor", "x goal")
    cells = [(r.figure, fmt(r.goal, r.unit), fmt(r.absolute, r.unit), fmt(r.floor, r.unit),
              ratio(r.absolute, r.floor), ratio(r.absolute, r.goal)) for r in rows]
    widths = [max(len(head[i]), *(len(c[i]) for c in cells)) for i in range(len(head))]
    line = "  ".join(h.ljust(w) if i == 0 else h.rjust(w) for i, (h, w) in enumerate(zip(head, widths, strict=True)))
    print(line)
    print("-" * len(line))
    for cell, row in zip(cells, rows, strict=True):
        text = "  ".join(c.ljust(w) if i == 0 else c.rjust(w)
                         for i, (c, w) in enumerate(zip(cell, widths, strict=True)))
        print(text + (f"   {row.note}" if row.note else ""))


def machine() -> str:
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    return f"{os.cpu_count()} CPUs, load average {load}"

# -- main ---------------------------------------------------------------------------------------------------


def timed(what: str, fn: Callable[[], Any]) -> Any:
    t = time.perf_counter()
    out = fn()
    print(f"  {what}: {time.perf_counter() - t:.1f} s", flush=True)
    return out


def analysis_rows(an: AnalysisFigures, n: int, repeat: int) -> list[Row]:
    return [
        Row(f"analysis, {n} lanes (median of {repeat})", an.median_s, "s", an.floor_s, GOAL_ANALYSIS_S,
            f"floor: {an.instant + an.ranged} bare vector(1) round trips"),
        Row(f"  fetch: every window's PromQL (median of {repeat})", an.fetch_s, "s", an.floor_s,
            note=f"{an.instant} instant + {an.ranged} range queries, {PrometheusSourceConfig().max_in_flight} "
                 "in flight"),
        Row("  its floor: the bare round trips, analysis' client", an.floor_s, "s", an.raw_s,
            note=f"httpx, {PrometheusSourceConfig().max_in_flight} in flight; floor: the same count on one raw "
                 "socket, one at a time"),
        Row("  document: analysis in Python", an.document_s, "s"),
        Row("  one lane alone", an.one_lane_s, "s", note=f"x {n} lanes = {an.one_lane_s * n:.1f} s if serial"),
        Row("  CPU of this process per analysis", an.bench_cpu_s, "s",
            note=f"Prometheus: {an.prom_cpu_s:.2f} s CPU per analysis"),
    ]


def service_rows(svc: ServiceFigures, pollers: int) -> list[Row]:
    nan = float("nan")
    return [
        Row(f"GET /recommendations p99, {pollers} pollers", svc.service.pct(0.99) or nan, "ms",
            svc.floor.pct(0.99), GOAL_P99_S,
            note=f"{len(svc.service.latencies)} ok, {sum(svc.service.errors.values())} errors "
                 f"({len(svc.service.latencies) / svc.service.seconds:.0f} req/s); floor: bare asyncio server, "
                 "same bytes"),
        Row("  p50", svc.service.pct(0.5) or nan, "ms", svc.floor.pct(0.5),
            note=f"service {svc.service.cpu_note()}; floor {svc.floor.cpu_note()}"),
        Row("  max", max(svc.service.latencies, default=nan), "ms", max(svc.floor.latencies, default=None)),
        Row("  p99, pollers accepting gzip", svc.zipped.pct(0.99) or nan, "ms", svc.zipped_floor.pct(0.99),
            GOAL_P99_S, note=f"p50 {fmt(svc.zipped.pct(0.5), 'ms')}; {svc.zipped.cpu_note()}; floor: the bare "
                             "server, the same gzipped bytes"),
        Row(f"document size ({svc.schema}, {svc.lanes} lanes)", svc.doc_bytes, "B",
            note=f"{svc.doc_bytes / max(svc.lanes, 1) / 1024:.1f} KiB per lane"),
        Row("  gzipped (level 1, as served)", svc.doc_gzip, "B"),
        Row("  json.dumps of it (when an answer's validity changes)", svc.serialise_s, "ms"),
        Row(f"GET /capabilities p99, {pollers} pollers", svc.capabilities.pct(0.99) or nan, "ms",
            svc.capabilities_floor.pct(0.99), GOAL_P99_S,
            note=f"p50 {fmt(svc.capabilities.pct(0.5), 'ms')}; {svc.capabilities.cpu_note()}; "
                 f"{len(svc.capabilities.latencies)} ok, {sum(svc.capabilities.errors.values())} errors; floor: "
                 "the bare server, the same bytes"),
        Row("  its size (each lane's capability only)", svc.capabilities_bytes, "B",
            note=f"{svc.capabilities_bytes / max(svc.lanes, 1):.0f} B per lane"),
    ]


def cpu_rows(fleet: Phase, no_rules: Phase, floor: Phase, targets: int, interval_s: float) -> list[Row]:
    nan = float("nan")
    per = fleet.per_scrape("exporters")
    every = f"every {interval_s:g} s"
    rules_pct = fleet.pct("prometheus") - no_rules.pct("prometheus")  # the rules run every 1 s at any interval
    rows = [
        Row(f"exporter process CPU, {targets} targets {every}", fleet.pct("exporters"), "%",
            floor.pct("exporters"), note="% of one core; floor: the same process serving fixed bytes"),
        Row("  exporter CPU per scrape of one target", per or nan, "cpu-ms", floor.per_scrape("exporters")),
        Row(f"  -> {targets} targets every 1 s (projected)", (per or nan) * targets * 100, "%",
            (floor.per_scrape("exporters") or nan) * targets * 100, note="% of one core, all exporters together"),
        Row("  -> one node's exporter, 2 lanes every 1 s", (per or nan) * 2 * 100, "%",
            (floor.per_scrape("exporters") or nan) * 2 * 100, note="% of one core on the node"),
        Row("  scrape duration, mean", fleet.scrape_mean_s or nan, "ms", floor.scrape_mean_s,
            note=f"max {fmt(fleet.scrape_max_s, 'ms')} (floor {fmt(floor.scrape_max_s, 'ms')})"),
        Row(f"Prometheus CPU, with the rules, {every}", fleet.pct("prometheus"), "%", no_rules.pct("prometheus"),
            note="% of one core; floor: the same targets without the rules (they run every 1 s)"),
        Row("  Prometheus CPU per scrape of one target", fleet.per_scrape("prometheus") or nan, "cpu-ms",
            no_rules.per_scrape("prometheus"), note="rules included"),
        Row(f"  -> {targets} targets every 1 s (projected)", rules_pct + (no_rules.per_scrape("prometheus") or nan)
            * targets * 100, "%", (no_rules.per_scrape("prometheus") or nan) * targets * 100,
            note="% of one core: scraping x the rate, plus the rules as measured"),
        Row("sim-fleet CPU (the runtimes)", fleet.pct("sim-fleet"), "%", floor.pct("sim-fleet"),
            note="% of one core; floor: nobody fetching"),
    ]
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--nodes", type=int, default=50)
    parser.add_argument("--seconds", type=float, default=20.0, help="length of each measured phase")
    parser.add_argument("--pollers", type=int, default=100)
    parser.add_argument("--rate", type=float, default=5.0, help="requests/s per poller (0: closed loop)")
    parser.add_argument("--window", type=float, default=10.0, help="step window of the synthetic run, s")
    parser.add_argument("--repeat", type=int, default=3, help="timed analyses (the median is shown)")
    parser.add_argument("--scrape-interval", type=float, default=None,
                        help="exporter scrape interval of the CPU phases (default 5 s, --quick 1 s; see the "
                             "docstring)")
    parser.add_argument("--parts", default="analysis,service,cpu", help="which figures (comma-separated)")
    parser.add_argument("--quick", action="store_true", help="smoke run: 5 nodes, 5 s phases, one analysis")
    parser.add_argument("--profile", action="store_true", help="cProfile's top 10 of one analysis")
    parser.add_argument("--serve-static", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_static is not None:
        return serve_static(args.serve_static, args.port)
    if args.quick:
        args.nodes, args.seconds, args.repeat = 5, 5.0, 1
    if args.scrape_interval is None:
        args.scrape_interval = 1.0 if args.quick else 5.0
    parts = {p.strip() for p in args.parts.split(",") if p.strip()}
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < 4 * args.pollers + 256:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 4 * args.pollers + 1024), hard))

    lanes = fleet_lanes(args.nodes)
    n = len(lanes)
    print(f"fleet: {args.nodes} nodes x 2 lanes = {n} lanes x {len(LADDER)} rungs "
          f"({'/'.join(map(str, LADDER))}), {args.window:g} s windows; {machine()}", flush=True)
    t0 = float((int(time.time()) // 3600 - 3) * 3600)
    rows: list[Row] = []
    failures: list[str] = []
    svc: ServiceFigures | None = None
    phases: tuple[Phase, Phase, Phase, int] | None = None
    with tempfile.TemporaryDirectory(prefix="satbench-fleet-") as tmp_name:
        tmp = Path(tmp_name)
        if parts & {"analysis", "service"}:
            manifest, records = timed("synthetic run", lambda: simulate_run(
                lanes, LADDER, t0=t0, window_s=args.window, parallel=True))
            text = timed("OpenMetrics text", lambda: openmetrics_text(manifest, records))
            print(f"  {len(records)} requests, {len(manifest.steps)} step windows, {len(text) / 1e6:.0f} MB of "
                  f"OpenMetrics ({text.count(chr(10))} lines)", flush=True)
            records.clear()
            (tmp / "backfill").mkdir()
            backfilled = timed("promtool backfill + Prometheus start",
                               lambda: BackfilledPrometheus(text, tmp / "backfill"))
            text = ""
            with backfilled as prom:
                if "analysis" in parts:
                    print("analysis ...", flush=True)
                    try:
                        an = measure_analysis(manifest, prom, args.repeat, args.profile)
                        print(f"  statuses {dict(an.statuses)}; answers {dict(an.answers)}", flush=True)
                        rows += analysis_rows(an, n, args.repeat)
                    except Exception as exc:  # the other figures still come
                        failures.append(f"analysis: {exc!r}")
                if "service" in parts:
                    print(f"GET /recommendations, {args.pollers} pollers ...", flush=True)
                    try:
                        svc = measure_service(manifest, prom.url, tmp, args.pollers, args.rate, args.seconds)
                        rows += service_rows(svc, args.pollers)
                    except Exception as exc:
                        failures.append(f"service: {exc!r}")
        if "cpu" in parts:
            print(f"exporters and Prometheus, 3 phases of {args.seconds:g} s, scrapes every "
                  f"{args.scrape_interval:g} s ...", flush=True)
            try:
                phases = measure_cpu(args.nodes, args.seconds, args.scrape_interval, tmp)
                rows += cpu_rows(*phases, args.scrape_interval)
            except Exception as exc:
                failures.append(f"cpu: {exc!r}")

    print()
    print_table(rows)
    print()
    if phases is not None:
        for ph in phases[:3]:
            print(f"phase {ph.name!r}: {ph.wall_s:.1f} s, {ph.scrapes:.0f} scrapes "
                  f"({100 * (ph.up if ph.up is not None else float('nan')):.1f} % up), "
                  f"{ph.samples_per_scrape or 0:.0f} samples per scrape, {ph.appended / ph.wall_s:.0f} samples/s "
                  f"appended, {ph.head_series or 0:.0f} head series, rule groups last took "
                  f"{fmt(ph.rule_eval_s, 'ms')} in all ({ph.rule_failures or 0:.0f} evaluation failures); CPU "
                  + ", ".join(f"{who} {ph.pct(who):.1f} %" for who in ph.cpu))
            if ph.up is not None and ph.up < 0.99:
                print(f"  WARNING: only {100 * ph.up:.1f} % of the scrapes succeeded: the exporters are "
                      "saturated and the CPU per scrape above is not a steady-state figure")
        print(f"a real fleet runs one exporter per node, on its own host; here all {phases[3]} share one process "
              "(one GIL), so the CPU per scrape is the figure to carry, not the scrape duration")
    if svc is not None:
        polled = (svc.service, svc.zipped, svc.floor, svc.zipped_floor, svc.capabilities, svc.capabilities_floor)
        if any(p.errors for p in polled):
            print(f"poll errors: service {dict(svc.service.errors)}, accepting gzip {dict(svc.zipped.errors)}, "
                  f"floors {dict(svc.floor.errors)} {dict(svc.zipped_floor.errors)}, capabilities "
                  f"{dict(svc.capabilities.errors)} (floor {dict(svc.capabilities_floor.errors)})")
        print(f"recommender served its first document {svc.ready_s:.1f} s after start (its own analysis "
              "included)")
    for failure in failures:
        print(f"FAILED {failure}")
    print(f"done; {machine()}")
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
