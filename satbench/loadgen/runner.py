"""The ladder walk for the orchestrator and the CLI: every lane, one after another, rung by rung.

For each lane: open one aiohttp session, fetch ``/props`` and a loopback round trip for the manifest, then
ask ``next_step`` for rungs until it says stop. After each rung the exact figures are computed from that
rung's records (``compute_step_figures``), and ``steps.json`` and ``manifest.json`` are rewritten
atomically, so a crash keeps every finished rung. ``records.jsonl`` gets one line per request as it ends
and an fsync at each rung's end. At the end the manifest is POSTed to ``recommender_url + "/runs"`` when
configured; a failure there is a warning, not a crash.

A disk that fills mid-walk ends the walk, its folder kept and marked partial (``loadgen.full_disk``). A killed
walk leaves the manifest of its last finished rung, ``finished_at`` null: partial too. What the walk asks a
lane besides its load (``/props``, round trips, ``/tokenize``) is ``loadgen.lane_probe``.

The manifest is the header the caller passes (the session's, or one made here for the CLI) with this
runner's own part (``core.manifest.LadderPart``: windows, per-lane client evidence, /metrics URL, end
time). The runner never edits the header; ``LadderRunner.manifest`` and ``run_ladder`` return the two joined.

Metrics go to a private registry (or the one passed in); with ``metrics_port`` set (0 = any free port)
it is served on ``metrics_host`` (127.0.0.1 unless configured otherwise) and the chosen port is in
``LadderRunner.metrics_port`` and the manifest.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import errno
import json
import logging
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

import aiohttp
from prometheus_client import CollectorRegistry

from satbench.core import __version__
from satbench.core.attainment import capacity_bound
from satbench.core.drift import knee_rung
from satbench.core.figures import StepFigures, client_values
from satbench.core.manifest import LadderPart, RunManifest, StepWindow, new_run_id, write_json_atomic
from satbench.core.records import RecordsWriter
from satbench.core.statistics import preload
from satbench.core.step_figures import compute_step_figures
from satbench.loadgen.agent_walk import AgentRun, AgentWalker, agent_line
from satbench.loadgen.client import LaneClient
from satbench.loadgen.config import ConfigError, LaneConfig, LoadgenConfig
from satbench.loadgen.dataset_lengths import answer_lengths
from satbench.loadgen.full_disk import (
    SPACE_RESERVE_BYTES,
    EvidenceNotWritten,
    WalkCutShort,
    check_written,
    cut_short_cause,
    give_back_reserve,
    hold_reserve,
)
from satbench.loadgen.inputs import Inputs, load_inputs
from satbench.loadgen.ladder import extension_stop, next_step
from satbench.loadgen.lane_probe import fingerprint_batch, lane_facts, tokens_per_word
from satbench.loadgen.metrics import LoadgenMetrics, MetricsServer
from satbench.loadgen.open_step import OpenStepRun
from satbench.loadgen.prefill_walk import PrefillStepper, prefill_line
from satbench.loadgen.progress import Progress, progress_wanted, rate_line, rung_line
from satbench.loadgen.rates import RateOutcome, factor_label, judge, next_rate, search_end
from satbench.loadgen.senders import Senders, SendersUnavailable
from satbench.loadgen.step import Clock, StepRun
from satbench.loadgen.trace_step import TraceStepRun, factor_search_end, next_factor
from satbench.loadgen.traces import TracePrompts
from satbench.loadgen.workload import PromptText, max_prompt_tokens

__all__ = ["SPACE_RESERVE_BYTES", "LadderRunner", "WalkCutShort", "run_ladder"]

log = logging.getLogger("satbench.loadgen")

class LadderRunner:
    """Owns the metrics and the output files of one run; ``await run()`` walks every lane."""

    def __init__(self, config: LoadgenConfig, out_dir: Path, *, run_id: str | None = None,
                 manifest: RunManifest | None = None, progress: bool | None = None,
                 registry: CollectorRegistry | None = None, inputs: Inputs | None = None,
                 records_write: Callable[[int, memoryview], int] = os.write) -> None:
        if not config.lanes:
            raise ConfigError("invalid loadgen config: lanes: at least one lane is needed to run")
        preload()  # scipy, imported on first use, would otherwise stall the first window's users (a second here)
        self.config = config
        self.out_dir = Path(out_dir)
        self.run_id = run_id or (manifest.run_id if manifest is not None else new_run_id())
        if manifest is not None and manifest.run_id != self.run_id:
            raise ValueError(f"run id {self.run_id} differs from the manifest's {manifest.run_id}")
        self.header = manifest or RunManifest(run_id=self.run_id, created_at=time.time(), command=tuple(sys.argv),
                                              config={"loadgen": config.model_dump(mode="json")},
                                              versions={"satbench": __version__})
        self.part = LadderPart()
        self._records_write = records_write  # the records file's write syscall: a test fills the disk with it
        self._published_at = 0.0
        self._own_registry = registry is None
        self.registry = registry if registry is not None else CollectorRegistry(auto_describe=True)
        self.metrics = LoadgenMetrics(self.registry)
        wanted = progress if progress is not None else config.progress
        self.progress = Progress(progress_wanted(wanted), lines=wanted is not False)
        self.figures: list[StepFigures] = []
        self._server: MetricsServer | None = None
        inputs = inputs or load_inputs(config)  # read and checked whole before any load is sent, once
        self.trace = inputs.trace
        self.dataset = inputs.dataset
        self.agent_corpus = inputs.agents

    @property
    def metrics_port(self) -> int | None:
        return None if self._server is None else self._server.port

    def start_metrics(self) -> int | None:
        """Serves /metrics now (idempotent); returns the port, or None when ``metrics_port`` is unset."""
        if self._server is None and self.config.metrics_port is not None:
            self._server = MetricsServer(self.registry, self.config.metrics_port, self.config.metrics_host)
            self.part = self.part.model_copy(update={"loadgen_metrics_url": self._server.url})
        return self.metrics_port

    def close(self) -> None:
        """Stops /metrics; a registry passed in loses its ``loadgen_*`` collector (so runs may repeat)."""
        if self._server is not None:
            self._server.close()
            self._server = None
        if not self._own_registry:
            with contextlib.suppress(KeyError):
                self.registry.unregister(self.metrics)
            self._own_registry = True

    async def run(self) -> RunManifest:
        self.out_dir.mkdir(parents=True, exist_ok=True)
        self.start_metrics()
        clock = Clock.now()
        # the run's id makes every prompt new to a runtime that served an earlier run (loadgen.workload)
        text = PromptText(max_prompt_tokens(self.config.workload) + 8, self.config.workload.seed, nonce=self.run_id)
        hold_reserve(self.out_dir)
        writer = RecordsWriter(self.out_dir / "records.jsonl", write=self._records_write)
        try:
            with writer:
                await self._run_nodes(writer, clock, text)
            give_back_reserve(self.out_dir)
            self.part = self.part.model_copy(update={"finished_at": time.time()})
            self._write()
        except BaseException as exc:
            cause = cut_short_cause(exc)
            if cause is None:
                give_back_reserve(self.out_dir)
                raise
            raise self._cut_short(cause, writer.count) from cause
        await self._linger()
        await self._post_manifest()
        return self.manifest

    async def _run_nodes(self, writer: RecordsWriter, clock: Clock, text: PromptText) -> None:
        """Each node's lanes in turn; up to ``parallel_nodes`` nodes at once (they share no hardware)."""
        by_node: dict[str | None, list[LaneConfig]] = {}
        for lane in self.config.lanes:
            by_node.setdefault(lane.node, []).append(lane)
        if self.config.parallel_nodes == 1 or len(by_node) == 1:
            for lane in self.config.lanes:
                await self._run_lane(lane, writer, clock, text)
            return
        gate = asyncio.Semaphore(self.config.parallel_nodes)

        async def walk(lanes: list[LaneConfig]) -> None:
            async with gate:
                for lane in lanes:
                    await self._run_lane(lane, writer, clock, text)

        async with asyncio.TaskGroup() as group:
            for lanes in by_node.values():
                group.create_task(walk(lanes))

    async def _linger(self) -> None:
        """Keeps /metrics up until it is scraped once after the last step's figures were published (at most
        ``metrics_linger_s``), so Prometheus holds every step's exact figures."""
        deadline = time.monotonic() + self.config.metrics_linger_s
        while self._server is not None and time.monotonic() < deadline:
            seen = self.metrics.last_scrape
            if seen is not None and seen >= self._published_at:
                return
            await asyncio.sleep(0.05)

    async def _run_lane(self, lane: LaneConfig, writer: RecordsWriter, clock: Clock,
                        text: PromptText) -> None:
        client = LaneClient(lane, self.config)
        prefill = self.config.prefill
        # the extension may walk past the listed rungs, the prefill walk to its own top
        agents = self.config.agents
        # a tree's sub-agents stream beside it: as many requests at once as its places times a fan-out's
        await client.open(max(self.config.ladder.max_rung, prefill.max_concurrency if prefill else 0,
                              agents.max_sessions * (1 + agents.spawns) if agents else 0))
        try:
            facts = await lane_facts(lane)
            evidence = {"url": lane.url, "api": lane.api, "model": lane.model, **facts.evidence}
            self.part = self.part.with_lane(lane.key, evidence)
            if self.dataset is not None:  # the answers' lengths as this lane's tokenizer counts them
                counted = await answer_lengths(lane, self.dataset)
                self.part = self.part.with_dataset(lane.key, counted.evidence())
                text = PromptText(text.max_tokens + 8, self.config.workload.seed, counted, text.nonce)
            slots = facts.slots
            lane_figures: list[StepFigures] = []
            while (c := next_step(lane_figures, self.config)) is not None:
                below = [f for f in lane_figures if f.valid and f.concurrency < c]
                step = StepRun(config=self.config, lane=lane, concurrency=c, run_id=self.run_id,
                               client=client,
                               writer=writer, clock=clock, metrics=self.metrics, text=text,
                               progress=self.progress,
                               reference=max(below, key=lambda f: f.concurrency) if below else None)
                window = await step.run()
                check_written(writer)
                if slots is None and lane.model:  # a router loads the model on the rung's first request
                    facts = await lane_facts(lane, round_trips=0)
                    slots = facts.slots
                    if "props" in facts.evidence:
                        evidence = {**evidence, "props": facts.evidence["props"]}
                        evidence.pop("evidence_error", None)
                        self.part = self.part.with_lane(lane.key, evidence)
                window = dataclasses.replace(window, slots=slots)  # the FIFO bound needs them
                figures = self._step_done(step, window)
                lane_figures.append(figures)
                self.progress.done(rung_line(figures))
                self._write()
            await self._drift_reference(lane, lane_figures, client, writer, clock, text, slots)
            ladder = self.config.ladder
            if ladder.extend and lane_figures:
                why = extension_stop(lane_figures, ladder)
                if why is not None:
                    top = lane_figures[-1].concurrency
                    self.progress.done(f"  {lane.key}: the extended ladder stops at c={top}: {why}")
            if prefill is not None:
                await self._walk_prefill(lane, client, writer, clock, slots, facts.slot_context)
            if agents is not None:
                await self._walk_agents(lane, client, writer, clock, facts.slot_context)
            if self.config.arrival.open or self.trace is not None:
                senders = await self._senders(lane)
                try:
                    if self.config.arrival.open:
                        await self._walk_rates(lane, lane_figures, client, writer, clock, text, slots, senders)
                    if self.trace is not None:
                        await self._walk_trace(lane, lane_figures, client, writer, clock, text, slots, senders)
                finally:
                    if senders is not None:
                        await senders.close()
        finally:
            await client.close()

    async def _senders(self, lane: LaneConfig) -> Senders | None:
        """The lane's sender processes where ``arrival.workers`` asks for more than one (``loadgen.senders``);
        ``None`` (this process sends) where they cannot be started, said in the progress and the manifest."""
        n = self.config.arrival.workers
        if n <= 1:
            return None
        try:
            logs = self.out_dir / "logs"  # beside the session's own process logs
            logs.mkdir(exist_ok=True)
            senders = await Senders.start(self.config, lane, n, log_dir=logs)
        except SendersUnavailable as exc:
            self.progress.done(f"  {lane.key}: open-loop rungs sent by this process: {exc}")
            return None
        for line in senders.describe():
            self.progress.done(f"  {lane.key}: {line}")
        return senders

    async def _drift_reference(self, lane: LaneConfig, closed: list[StepFigures], client: LaneClient,
                               writer: RecordsWriter, clock: Clock, text: PromptText, slots: int | None) -> None:
        """The lane's lowest valid rung measured again after its ladder (``ladder.drift_reference``), and the rung
        its walk stopped at (``core.drift.knee_rung``, where the ladder decides gains: ``decide_gain``), each
        window marked so: the drift check's (``core.drift``), never a rung of the walk."""
        lowest = min((f.concurrency for f in closed if f.valid), default=None)
        if not self.config.ladder.drift_reference or lowest is None or len(closed) < 2:
            return
        again = [(lowest, "the drift check")]
        gain = self.config.decide_gain
        knee = None if gain is None else knee_rung(closed, gain)
        if knee is not None and knee != lowest:
            again.append((knee, "the answer's rung"))
        for c, why in again:
            step = StepRun(config=self.config, lane=lane, concurrency=c, run_id=self.run_id, client=client,
                           writer=writer, clock=clock, metrics=self.metrics, text=text, progress=self.progress)
            step.id_tag = "-again"
            window = await step.run()
            check_written(writer)
            figures = self._step_done(step, dataclasses.replace(window, slots=slots, drift_reference=True),
                                      publish=False)
            self.progress.done(rung_line(figures) + f" (re-measured: {why})")
            self._write()

    async def _walk_prefill(self, lane: LaneConfig, client: LaneClient, writer: RecordsWriter, clock: Clock,
                            slots: int | None, slot_context: int | None) -> None:
        """The lane's peak-prefill walk (``loadgen.prefill_walk``), after its ladder: each rung's window in the
        manifest's ``prefill``, never a rung of the ladder (not published, not in ``steps.json``)."""
        cfg = self.config.prefill
        assert cfg is not None
        text = PrefillStepper.text(self.config, cfg, self.run_id)
        walker = PrefillStepper(self.config, cfg, slot_context, slots, fingerprint_batch(self.header, lane.key),
                                await tokens_per_word(lane, text))
        self.part = self.part.with_prefill(lane.key, walker.walk)
        while (c := walker.next_rung()) is not None:
            step = StepRun(config=walker.config, lane=lane, concurrency=c, run_id=self.run_id, client=client,
                           writer=writer, clock=clock, metrics=self.metrics, text=text, progress=self.progress,
                           reference=walker.reference)
            step.id_tag = "-prefill"
            window = dataclasses.replace(await step.run(), slots=slots)
            check_written(writer)
            measured = walker.measured(step, window)
            self.part = self.part.with_prefill(lane.key, walker.walk)
            self.progress.done(prefill_line(lane.key, measured))
            self._write()
        if walker.ended is not None:
            self.progress.done(f"  {lane.key}: the prefill walk stops: {walker.ended}")

    async def _walk_agents(self, lane: LaneConfig, client: LaneClient, writer: RecordsWriter, clock: Clock,
                           slot_context: int | None) -> None:
        """The lane's agent walk (``loadgen.agent_walk``), after its ladder: each rung in the manifest's ``agents``,
        never a rung of the ladder."""
        cfg = self.config.agents
        assert cfg is not None
        text = PromptText(max(cfg.max_context_tokens, cfg.system_tokens) + 8, self.config.workload.seed,
                          nonce=f"{self.run_id}:agents")
        per_word = await tokens_per_word(lane, text)
        walker = AgentWalker(cfg, slot_context, per_word, self.agent_corpus)
        self.part = self.part.with_agents(lane.key, walker.walk)
        while (n := walker.next_rung()) is not None:
            rung = AgentRun(config=self.config, cfg=cfg, lane=lane, sessions=n, run_id=self.run_id, client=client,
                            writer=writer, clock=clock, text=text, stream=walker.stream, trees=walker.trees,
                            per_word=per_word)
            window = await rung.run()
            check_written(writer)
            walker.measured(window)
            self.part = self.part.with_agents(lane.key, walker.walk)
            self.progress.done(agent_line(lane.key, window))
            self._write()
        if walker.walk.ended is not None:
            self.progress.done(f"  {lane.key}: the agent walk stops: {walker.walk.ended}")
        self.progress.done(walker.answer_line(lane.key))

    def _step_done(self, step: StepRun, window: StepWindow, publish: bool = True) -> StepFigures:
        """A finished rung's exact figures, published and kept (``steps.json``, the manifest's window). A
        re-measure is not published: its series would be the rung's own (lane, run, concurrency), and a reader
        of the rung's last published value would read the re-measure's (the store's histograms measure it)."""
        objectives = None if self.config.objectives is None else self.config.objectives.objectives()
        figures = compute_step_figures(list(step.records()), window, batch_s=self.config.batch_s,
                                       objectives=objectives)
        if publish:
            self.metrics.publish_step(step.lane.key, self.run_id, window.concurrency, client_values(figures),
                                      rate=window.rate_rps)
        self._published_at = time.time()
        self.figures.append(figures)
        self.part = self.part.with_step(window)
        return figures

    async def _walk_rates(self, lane: LaneConfig, closed: list[StepFigures], client: LaneClient,
                          writer: RecordsWriter, clock: Clock, text: PromptText, slots: int | None,
                          senders: Senders | None = None) -> None:
        """The open-loop rate search of one lane (``loadgen.rates``), after its closed ladder: relative rates
        take the most requests/s a valid closed rung served as the lane's capacity."""
        arrival = self.config.arrival
        capacity = max((f.requests_per_s for f in closed if f.valid), default=None)
        if not arrival.rates and not capacity:
            self.progress.done(f"  {lane.key}: no rate search: no closed rung measured a capacity to scale")
            return
        bound = capacity_bound([(f.concurrency, f.requests_per_s) for f in closed if f.valid], slots)
        warmup = self._open_warmup(closed)
        outcomes: list[RateOutcome] = []
        while (rate := next_rate(outcomes, arrival, capacity)) is not None:
            step = OpenStepRun(rate=rate, capacity_rps=bound, warmup_s=warmup, config=self.config, lane=lane,
                               run_id=self.run_id, client=client, writer=writer, clock=clock, metrics=self.metrics,
                               text=text, progress=self.progress, senders=senders)
            window = dataclasses.replace(await step.run(), slots=slots)
            check_written(writer)
            figures = self._step_done(step, window)
            outcome = judge(figures, arrival, bound)
            outcomes.append(outcome)
            self.progress.done(rate_line(figures, outcome.passed))
            self._write()
        self.progress.done(f"  {lane.key}: rate search over: {search_end(outcomes, arrival, capacity)}")

    def _open_warmup(self, closed: list[StepFigures]) -> float:
        """An open-loop rung's warm-up (``ArrivalConfig``): as set, else the longest of the ladder's warm-up,
        twice the mean latency of the closed rung that served most and the TTFT objective."""
        warmup = self.config.arrival.warmup_s
        if warmup is not None:
            return warmup
        top = max((f for f in closed if f.valid), key=lambda f: f.requests_per_s, default=None)
        latency = top.latency_s.mean if top is not None else None
        ttft = self.config.objectives.ttft_s if self.config.objectives is not None else None
        return max(self.config.warmup_s, 2 * (latency or 0.0), ttft or 0.0)

    async def _walk_trace(self, lane: LaneConfig, closed: list[StepFigures], client: LaneClient,
                          writer: RecordsWriter, clock: Clock, text: PromptText, slots: int | None,
                          senders: Senders | None = None) -> None:
        """The speed-factor search of one lane over the configured trace (``loadgen.trace_step``), after its
        closed ladder; each rung judged as a rate rung (``loadgen.rates.judge``)."""
        trace, cfg = self.trace, self.config.trace
        assert trace is not None and cfg is not None
        # no closed-ladder bound: the closed rungs sent the configured workload's lengths, not the trace's
        bound = None
        warmup = self._open_warmup(closed)
        # new text for this run and lane; each replay of the window then draws its own (loadgen.trace_step)
        prompts = TracePrompts(cfg.seed, trace.block_tokens, nonce=f"{self.run_id}:{lane.key}")
        outcomes: list[RateOutcome] = []
        factors: list[float] = []
        while (factor := next_factor(outcomes, cfg, self.config.arrival, trace.rate_rps)) is not None:
            factors.append(factor)
            self.part = self.part.with_trace(lane.key, {**trace.evidence(), "speed_factors": factors})
            step = TraceStepRun(trace=trace, factor=factor, prompts=prompts, capacity_rps=bound, warmup_s=warmup,
                                config=self.config, lane=lane, run_id=self.run_id, client=client, writer=writer,
                                clock=clock, metrics=self.metrics, text=text, progress=self.progress,
                                senders=senders)
            window = dataclasses.replace(await step.run(), slots=slots)
            check_written(writer)
            figures = self._step_done(step, window)
            outcome = judge(figures, self.config.arrival, bound)
            outcomes.append(outcome)
            self.progress.done(f"{rate_line(figures, outcome.passed)} (trace {factor_label(factor)})")
            self._write()
        why = factor_search_end(outcomes, cfg, self.config.arrival, trace.rate_rps)
        self.progress.done(f"  {lane.key}: speed-factor search over: {why}")

    @property
    def manifest(self) -> RunManifest:
        """The header this runner was given (or made) with the walk's part so far."""
        return self.header.with_ladder(self.part)

    def _write(self) -> None:
        try:
            write_json_atomic(self.out_dir / "steps.json", [f.to_dict() for f in self.figures])
            self.manifest.write(self.out_dir / "manifest.json")
        except OSError as exc:
            raise EvidenceNotWritten(exc.errno, f"the run's manifest or steps.json: {exc.strerror or exc}") from exc

    def _cut_short(self, cause: OSError, records: int) -> WalkCutShort:
        """The manifest marked cut short (written on the reserve's room), and the one line that says so."""
        give_back_reserve(self.out_dir)
        why = str(cause) if cause.errno != errno.ENOSPC else f"the disk is full ({cause.strerror})"
        self.part = self.part.model_copy(update={"cut_short": why})
        rungs = len(self.part.steps)
        kept = (f"{self.out_dir} keeps its {records} whole records and {rungs} finished rung(s), marked partial "
                f"(manifest cut_short)")
        try:
            self._write()
        except OSError as exc:
            kept = (f"{self.out_dir} keeps its {records} whole records and {rungs} finished rung(s); its manifest "
                    f"could not be marked ({exc}), and its finished_at null marks it partial")
        return WalkCutShort(f"the walk was cut short: {why}; {kept}")

    async def _post_manifest(self) -> None:
        url = self.config.recommender_url
        if not url:
            return
        try:
            # the recommender's write token, where this process was handed one (recommender.settings names it)
            token = os.environ.get("SATBENCH_RECOMMENDER_WRITE_TOKEN")
            headers = {"Content-Type": "application/json", **({"Authorization": f"Bearer {token}"} if token else {})}
            async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10.0)) as session, \
                    session.post(url + "/runs", data=json.dumps(self.manifest.to_dict(), default=str),
                                 headers=headers) as resp:
                if resp.status >= 300:
                    log.warning("recommender refused the run manifest: HTTP %s", resp.status)
        except (TimeoutError, aiohttp.ClientError, OSError) as exc:
            log.warning("could not POST the run manifest to %s/runs: %s", url, exc)


async def run_ladder(config: LoadgenConfig, out_dir: Path, *, run_id: str | None = None,
                     manifest: RunManifest | None = None, progress: bool | None = None,
                     registry: CollectorRegistry | None = None, inputs: Inputs | None = None,
                     records_write: Callable[[int, memoryview], int] = os.write) -> RunManifest:
    """Walks every lane's ladder; writes records.jsonl, steps.json, manifest.json into ``out_dir``;
    ``WalkCutShort`` when a full disk ended it (module docstring). ``inputs``: the config's trace and dataset
    already read (``loadgen.inputs``), else read here."""
    runner = LadderRunner(config, out_dir, run_id=run_id, manifest=manifest, progress=progress,
                          registry=registry, inputs=inputs, records_write=records_write)
    try:
        return await runner.run()
    finally:
        runner.close()
