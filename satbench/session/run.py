"""One benchmark session: start what the config does not point at, walk the ladder, answer, clean up.

Order of a session (``run_session``):

1. Refuse early: a Prometheus binary must exist when one is to be started (the reason names the install
   command); a Prometheus given by URL must take the session's reads (with ``[prometheus] username`` and
   ``password_file`` where it wants credentials, which every reader of it in the session then sends: the
   waits, the recommender it starts, the in-process analysis); the run folder ``<out>/<run_id>/`` is
   created (and removed again if a part cannot start: nothing was measured, and the one-line reason quotes
   the failing child's log). The run id is the one
   given (the shards of a fleet run share it) or a new one; a shard's folder is ``<run_id>.shard-I-of-N``
   (``core.shards``), and its config holds only the lanes it walks (``satbench.fleet.plan``). A run folder
   that already exists (a shard rerun with its run id after a kill) is refused in one line
   (``taken_run_folder``), not resumed: the rungs a resumed walk adds would come from runtimes started again
   (cold caches, another process), so the ladder's doublings would compare two starts; and walking over the
   folder would lose the killed attempt's evidence. Moving the folder aside reruns the shard whole, under its
   run id.
2. Start (``satbench.session.parts``), each as its own process group (``satbench.runtimes.processes``):
   one runtime per lane through its launcher (``LAUNCHERS``: the simulator, a real ``llama-server``, or an
   ``external`` lane only checked to answer ``/health``), or one router per ``node``, each a
   ``satbench.runtimes.RunningRuntime``; one exporter per server (none where the lane names a running one,
   ``exporter_url``; in relay mode where ``relay = true``; without GPU readings for an external node on
   another host), the recommender, then Prometheus with a config listing exactly those targets plus the load
   generator's /metrics port (``loadgen.metrics_port``, else one picked before it starts). Wait until
   Prometheus has scraped every target once.
3. Evidence for the manifest (``satbench.evidence``): command, redacted config, versions and git commit,
   hardware, network round trips, runtime ``/props``, model files, and each lane's fingerprint as its
   exporter tells it (``GET /fingerprint``: what the answer will be valid for). A fleet node whose runtime
   did not answer is left out of the walk; its lanes are in the manifest with the reason (``unreachable``)
   and in the answer as never measured.
4. Walk the ladder in-process (loadgen's ``run_ladder``; a node's lanes in turn, up to
   ``loadgen.parallel_nodes`` nodes at once), which writes records.jsonl, steps.json and the manifest:
   this header joined with the load generator's own part (``core.manifest.LadderPart``).
5. Wait until Prometheus has scraped every exporter and the load generator after the last window's end
   (its samples are then in; at most two scrape intervals and a second), register the manifest with the
   recommender (``POST /runs``, with the write token: the session's own recommender gets one made up for
   this session, handed to it in its environment; a configured one, ``recommender.url``, the token in
   ``SATBENCH_RECOMMENDER_WRITE_TOKEN``; one that refuses the write is still asked for the run by id, which
   it reads from its runs folder where that is this session's) and fetch its answer (``GET
   /runs/{run_id}``); if the service fails or
   answers no lane, the same analysis runs in-process (it can read this run's records) and the document
   notes it. Write recommendations.json, report.html, README.md, steps.csv and records.csv, print the
   tables per lane and the recommendations last; the exit status is 0 only when every lane has an answer.
   A Prometheus started here is given the time to scrape the recommender's answer series before it stops.
6. Always (``finally``, atexit, SIGTERM/SIGHUP handlers, Ctrl-C): stop every child process group.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import shlex
import shutil
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from satbench import evidence
from satbench.answer.document import read_document
from satbench.answer.models import RunInfo
from satbench.core.loops import fast_loop_factory
from satbench.core.manifest import RunManifest, new_run_id, read_manifest, write_json_atomic
from satbench.core.net import free_port
from satbench.core.shards import ShardStamp, shard_key
from satbench.exporter.promconfig import EXPORTER_JOB, LOADGEN_JOB, RECOMMENDER_JOB, ScrapeTarget
from satbench.loadgen.inputs import Inputs
from satbench.loadgen.runner import run_ladder
from satbench.models.tiny import describe_model_files
from satbench.recommender.errors import RecommenderError
from satbench.recommender.run_analysis import analyze_run
from satbench.recommender.settings import WRITE_TOKEN_ENV
from satbench.report.data import load_run
from satbench.report.render import console_summary, write_report
from satbench.runtimes.processes import ProcessSet, StartError, install_signal_handlers, wait_until_ready
from satbench.session.config import SessionConfig
from satbench.session.parts import (
    LaneEndpoint,
    shares_runtime,
    start_exporters,
    start_recommender,
    start_runtimes,
    target_labels,
)
from satbench.session.prometheus import (
    check_readable,
    find_prometheus,
    render_prometheus_config,
    rule_files,
    start_prometheus,
    wait_remote_written,
    wait_scraped_since,
    wait_targets_up,
)

__all__ = ["LaneEndpoint", "SessionResult", "run_folder", "run_session", "taken_run_folder"]

Say = Callable[[str], None]
# how long the session's end waits for its Prometheus to send a remote_write store (the fleet's) every sample
REMOTE_WRITE_WAIT_S = 30.0
# The session's Prometheus stops right after the answer: its last samples are the ones the dashboards draw the
# answer from, so waiting for one scrape of the recommender is worth more than two intervals on a loaded host (it
# returns at that scrape; the bound is reached only where Prometheus is that late or the recommender is gone)
ANSWER_SCRAPE_WAIT_S = 10.0


@dataclass
class SessionResult:
    run_dir: Path
    manifest: RunManifest | None
    recommendations: dict[str, Any] | None
    exit_code: int
    pids: list[int] = field(default_factory=list)


def model_files(endpoint: LaneEndpoint, config: SessionConfig) -> list[dict[str, Any]]:
    if endpoint.lane.runtime != "llamacpp" or config.model_dir is None or not endpoint.lane.model_file:
        return []
    return describe_model_files([config.model_dir / endpoint.lane.model_file])


def _redactor(config: SessionConfig, command: Sequence[str]) -> Callable[[Any], Any]:
    """``evidence.redact_secrets`` with every secret of this session known: the config's, the command's and
    the values of the lanes' ``api_key_env`` variables (whose names are secret keys too)."""
    env_names = [lane.api_key_env for lane in config.lanes if lane.api_key_env]
    secrets = evidence.secret_values([config.model_dump(mode="json"), list(command)], env_names)
    return lambda value: evidence.redact_secrets(value, secrets, env_names)


def _build_manifest(
    run_id: str,
    command: Sequence[str],
    config: SessionConfig,
    endpoints: list[LaneEndpoint],
    prometheus: dict[str, Any],
    recommender_url: str,
    gpu_reader: evidence.GpuReader | None,
    redact: Callable[[Any], Any],
    unreachable: dict[str, str] | None = None,
    fleet: dict[str, Any] | None = None,
) -> RunManifest:
    """The session's part of the manifest: how each lane's runtime was started, and the run's setting.

    Every secret is redacted (``redact``, from ``_redactor``): secret keys, secret flags' arguments and the
    values of the lanes' ``api_key_env`` variables, wherever they appear (config, command, runtime argv).
    """
    lanes: dict[str, dict[str, Any]] = {}
    network: dict[str, Any] = {}
    with httpx.Client(timeout=3.0) as client:
        for ep in endpoints:
            network[ep.lane.key] = evidence.measure_round_trip(client, ep.url)
            try:
                files = model_files(ep, config)
            except ValueError as exc:
                files = [{"error": str(exc)}]
            lanes[ep.lane.key] = redact({
                **ep.runtime.evidence(),
                "url": ep.url,
                "exporter_url": ep.exporter_url,
                "relay_url": ep.relay_url,  # set: the load generator sent through it (clients.<lane>.url)
                "exporter_started": ep.lane.exporter_url is None,
                **({"node_reason": f"GPU and process figures come from the lane's own exporter "
                                   f"{ep.lane.exporter_url}, not from this host"}
                   if ep.lane.exporter_url is not None and ep.runtime.evidence().get("node_reason") else {}),
                "node": ep.lane.node_name,
                "lane": ep.lane.name,
                "node_labels": config.node_labels(ep.lane.node_name),
                "api": ep.lane.api,
                "model": ep.lane.model,
                "runtime_props": evidence.runtime_props(
                    client, ep.url, model=ep.lane.model_id if shares_runtime(ep, endpoints) else None,
                    api_key=ep.lane.api_key()),
                "model_files": files,
                **take_fingerprint(client, ep, shares_runtime(ep, endpoints)),
            })
    for key, why in (unreachable or {}).items():  # a fleet node that did not answer: its lanes say why
        lane = config.lane(key)
        lanes[key] = redact({"node": lane.node_name, "lane": lane.name, "node_labels": config.node_labels(
            lane.node_name), "url": lane.url, "api": lane.api, "model": lane.model, "unreachable": why})
    return RunManifest(
        run_id=run_id,
        created_at=time.time(),
        command=tuple(redact(list(command))),
        config=redact(config.model_dump(mode="json")),
        versions=evidence.collect_versions(),
        lanes=lanes,
        hardware=evidence.collect_hardware(gpu_reader),
        network=network,
        prometheus=prometheus,
        recommender_url=recommender_url,
        **_said_overrides(config),
        **(fleet or {}),  # a shard's stamp (core.shards), the lanes --remeasure chose: extra manifest keys
    )


def _said_overrides(config: SessionConfig) -> dict[str, Any]:
    """The load generator's settings set to another value than the policy that judges the run: said in the
    manifest (``policy_overrides``), not hidden; nothing where none."""
    overrides = config.policy_overrides
    return {"policy_overrides": overrides} if overrides else {}


def take_fingerprint(client: httpx.Client, ep: LaneEndpoint, per_model: bool) -> dict[str, Any]:
    """The lane's fingerprint as its exporter tells it now (``GET /fingerprint``, ``core.fingerprint``), the
    one the answer is then valid for; ``fingerprint_reason`` says why there is none."""
    if not ep.exporter_url:
        return {"fingerprint": None, "fingerprint_reason": "the lane has no exporter"}
    params = {"model": ep.lane.model_id} if per_model else {}
    try:
        resp = client.get(f"{ep.exporter_url}/fingerprint", params=params)
        if resp.status_code == 200 and isinstance(body := resp.json(), dict):
            return {"fingerprint": body}
        why = f"its exporter answered /fingerprint with HTTP {resp.status_code}"
    except (httpx.HTTPError, ValueError) as exc:
        why = f"its exporter's /fingerprint did not answer ({type(exc).__name__})"
    return {"fingerprint": None, "fingerprint_reason": why}


def _answered(doc: dict[str, Any] | None) -> int:
    """How many lanes ``doc`` answers; ``ValueError`` where it is not a recommendations document."""
    return 0 if doc is None else sum(1 for lane in read_document(doc).lanes.values()
                                     if lane.recommended_concurrency is not None)


def _recommend(
    manifest: RunManifest, rec_url: str, prom_url: str, run_dir: Path, config: SessionConfig, say: Say,
    write_token: str | None = None, prom_auth: tuple[str, str] | None = None,
) -> dict[str, Any] | None:
    """The recommender service's answer for the run; the same analysis in-process (which can also read this
    run folder's records) if the service fails or answers no lane (a service elsewhere, without this run's
    folder, whose Prometheus missed the load generator), kept where it answers more lanes."""
    service: dict[str, Any] | None = None
    try:
        with httpx.Client(timeout=60.0) as client:
            auth = {"Authorization": f"Bearer {write_token}"} if write_token else {}
            resp = client.post(f"{rec_url}/runs", json=manifest.to_dict(), headers=auth)
            if resp.status_code == 401:  # a running service with another token: where it reads this run's
                # folder (its runs_dir), asking for the run by id (a read) registers it from there
                say("  recommender refused the write (its write token is not this session's: set "
                    "SATBENCH_RECOMMENDER_WRITE_TOKEN); asking it for the run by id")
            elif resp.status_code >= 400:  # the service's one line says why (a shard refused: core.shards)
                raise ValueError(f"POST /runs answered HTTP {resp.status_code}: {resp.text[:300]}")
            info = client.get(f"{rec_url}/runs/{run_dir.name}")  # a shard's own entry (core.shards.shard_key)
            info.raise_for_status()
            body = info.json()
        run = RunInfo.model_validate(body)  # the document as served is kept (written byte for byte)
        doc = body["recommendations"] if run.recommendations is not None else None
        if doc is not None and _answered(doc):
            return doc
        service = doc
        reason = "it answered no lane" if service else (run.reason or "no document")
    except (httpx.HTTPError, ValueError) as exc:
        reason = f"{type(exc).__name__}: {exc}"
    say(f"  recommender service gave no answer ({reason}); analysing in-process")
    try:
        policy = config.policy
        doc = analyze_run(manifest, prometheus_url=prom_url, run_dir=run_dir, policy=policy,
                          prometheus_auth=prom_auth)
    except (RecommenderError, ValueError) as exc:
        say(f"  no recommendations in-process either: {exc}")
        return service
    if service is not None and _answered(doc) <= _answered(service):
        return service
    doc.setdefault("notes", []).append(f"recommender service gave no answer ({reason}); analysed in-process")
    return doc


def _walk(config: SessionConfig, endpoints: list[LaneEndpoint], run_dir: Path, header: RunManifest,
          metrics_port: int, inputs: Inputs | None) -> RunManifest:
    """The ladder walk in-process; returns the session's header joined with the load generator's part."""
    loadgen = config.loadgen.model_copy(
        update={"lanes": [ep.lane.at(ep.client_url) for ep in endpoints], "metrics_port": metrics_port,
                "recommender_url": None, "metrics_linger_s": 2 * config.prometheus.scrape_interval_s + 1.0}
    )
    with asyncio.Runner(loop_factory=fast_loop_factory()) as runner:
        try:
            return runner.run(run_ladder(loadgen, run_dir, run_id=header.run_id, manifest=header, inputs=inputs))
        except asyncio.CancelledError as exc:  # the ladder cancelled from outside is an interrupted session
            raise KeyboardInterrupt from exc


def _start_monitoring(
    config: SessionConfig,
    endpoints: list[LaneEndpoint],
    run_dir: Path,
    processes: ProcessSet,
    prom_binary: str | None,
    say: Say,
    write_token: str,
    prom_auth: tuple[str, str] | None = None,
) -> tuple[str, str, dict[str, Any], int]:
    """Recommender and Prometheus (unless configured as URLs); returns their URLs, evidence, loadgen port."""
    metrics_port = config.loadgen.metrics_port or free_port()  # fixed where a running Prometheus scrapes it
    prom_port = free_port()
    prom_url = (config.prometheus.url or f"http://127.0.0.1:{prom_port}").rstrip("/")
    rec_child = None
    if config.recommender.url is None:
        rec_url, rec_child = start_recommender(config, prom_url, run_dir, processes, free_port(),
                                               write_token=write_token)
    else:
        rec_url = config.recommender.url.rstrip("/")
    targets = [
        ScrapeTarget(EXPORTER_JOB, ep.exporter_url.removeprefix("http://"), target_labels(ep),
                     params={"model": ep.lane.model_id} if shares_runtime(ep, endpoints) else {})
        for ep in endpoints
        if ep.exporter_url
    ]
    targets.append(ScrapeTarget(LOADGEN_JOB, f"127.0.0.1:{metrics_port}"))
    if rec_child is not None:
        targets.append(ScrapeTarget(RECOMMENDER_JOB, rec_url.removeprefix("http://")))
    prom_info: dict[str, Any] = {"url": prom_url, "started": prom_binary is not None}
    if prom_auth is not None:  # who the session read it as; the password stays in its file
        prom_info["username"] = prom_auth[0]
    if prom_binary is not None:
        rules = rule_files()
        text = render_prometheus_config(targets, rules, config.prometheus.scrape_interval_s,
                                        remote_write=config.prometheus.remote_write,
                                        remote_write_auth=config.prometheus.remote_write_auth())
        started = start_prometheus(
            processes,
            prom_binary,
            run_dir / "prometheus",
            text,
            port=prom_port,
            timeout_s=config.prometheus.start_timeout_s,
        )
        prom_info.update(
            config_path=str(started.config_path),
            storage_path=str(started.storage_path),
            rule_files=[str(p) for p in rules],
        )
        say(f"  prometheus: {prom_url} (config {started.config_path})")
    else:
        say(f"  prometheus: {prom_url} (not started here; it must scrape the exporters and loadgen)")
    if rec_child is not None:
        wait_until_ready(rec_child, f"{rec_url}/healthz", timeout_s=config.recommender.start_timeout_s)
    say(f"  recommender: {rec_url}")
    if prom_binary is not None:
        # the load generator's target only answers once the walk starts: wait for the others
        wait_targets_up(
            prom_url, len(targets) - 1, timeout_s=config.start_timeout_s, ignore_jobs=(LOADGEN_JOB,), auth=prom_auth
        )
    return prom_url, rec_url, prom_info, metrics_port


def run_folder(out_dir: Path, run_id: str, shard: ShardStamp | None) -> Path:
    """The run's folder: ``<out>/<run_id>``, a shard's ``<out>/<run_id>.shard-I-of-N`` (``core.shards``)."""
    return out_dir / (run_id if shard is None else shard_key(run_id, shard))


def taken_run_folder(path: Path) -> str | None:
    """The one line refusing to walk into ``path`` when it exists (module docstring), or None."""
    if not path.exists():
        return None
    try:
        manifest = read_manifest(path / "manifest.json")
        state = "its walk finished" if manifest.partial is None else f"a partial run: {manifest.partial}"
    except (OSError, ValueError, KeyError, TypeError):
        state = "no readable manifest"
    return (f"run folder {path} already exists ({state}); a run is not resumed under its id (its new rungs would "
            f"be measured on runtimes started again, and its first attempt's evidence lost): move the folder aside "
            f"to walk it again under this run id, or give another --run-id")


def run_session(
    config: SessionConfig,
    *,
    command: Sequence[str],
    out_dir: Path | None = None,
    say: Say = print,
    gpu_reader: evidence.GpuReader | None = None,
    run_id: str | None = None,
    shard: ShardStamp | None = None,
    remeasure: dict[str, Any] | None = None,
    inputs: Inputs | None = None,
) -> SessionResult:
    """Runs a whole session (see the module docstring); raises StartError with a one-line reason. ``run_id``: one
    given (shards share it), else a new one; ``shard``: this walk is that shard of a fleet run, its folder named
    ``core.shards.shard_key``; ``remeasure``: the lanes ``--remeasure`` chose, for the manifest; ``inputs``: the
    config's trace and dataset as the entry point read them (``loadgen.inputs``; else the walk reads them)."""
    prom_binary = find_prometheus(config.prometheus.binary) if config.prometheus.url is None else None
    try:
        prom_auth = config.prometheus.read_auth()
    except ValueError as exc:
        raise StartError(str(exc)) from exc
    if config.prometheus.url is not None:
        check_readable(str(config.prometheus.url).rstrip("/"), prom_auth)
    run_id = run_id or new_run_id()
    run_dir = run_folder(out_dir or config.out_dir, run_id, shard)
    fleet = {k: v for k, v in (("shard", None if shard is None else shard.model_dump()),
                               ("remeasure", remeasure)) if v is not None}
    try:
        run_dir.mkdir(parents=True, exist_ok=False)
    except FileExistsError:
        raise ValueError(taken_run_folder(run_dir) or f"run folder {run_dir} already exists") from None
    say(f"satbench run {run_id}: starting")
    redact = _redactor(config, command)
    say(f"  command: {shlex.join(redact(list(command)))}")
    processes = ProcessSet(run_dir / "logs")
    # the recommender's write token: this session's own, unless one is configured for a running recommender
    write_token = os.environ.get(WRITE_TOKEN_ENV) or secrets.token_urlsafe(32)
    restore = install_signal_handlers()
    pids: list[int] = []
    started = False
    try:
        with contextlib.ExitStack() as stack:
            unreachable: dict[str, str] = {}
            endpoints = start_runtimes(config, processes, stack, say, unreachable)
            if not endpoints:
                raise StartError("no lane's runtime answered: " + "; ".join(unreachable.values()))
            start_exporters(endpoints, processes, config.start_timeout_s, config.prometheus.scrape_interval_s)
            say("  exporters: " + ", ".join(f"{ep.lane.key} {ep.exporter_url}" for ep in endpoints))
            prom_url, rec_url, prom_info, metrics_port = _start_monitoring(
                config, endpoints, run_dir, processes, prom_binary, say, write_token, prom_auth
            )
            pids = processes.pids()
            started = True
            say(f"  evidence: {run_dir}")
            manifest = _build_manifest(run_id, command, config, endpoints, prom_info, rec_url, gpu_reader, redact,
                                       unreachable, fleet)
            manifest.write(run_dir / "manifest.json")
            ladder = config.loadgen.ladder
            extension = "" if ladder.max_rung == max(ladder.concurrency) else (
                f" (then doubling while it pays, up to {ladder.max_rung})")
            say(
                "walking the ladder "
                + "/".join(str(c) for c in ladder.concurrency)
                + extension
                + " on "
                + ", ".join(ep.lane.key for ep in endpoints)
            )
            manifest = _walk(config, endpoints, run_dir, manifest, metrics_port, inputs)  # the runner wrote it too
            walked = time.time()
            settle_s = 2 * config.prometheus.scrape_interval_s + 1.0
            # Every sample of the walk is in once each exporter and the load generator were scraped after it
            # ended: a scrape after the walk (answered, or failed on a target gone) means the one before it,
            # which the load generator lingered for with every step's published figures, is stored.
            if not wait_scraped_since(prom_url, walked, (EXPORTER_JOB, LOADGEN_JOB), timeout_s=settle_s,
                                      auth=prom_auth):
                say(f"  prometheus: not every target scraped after the walk within {settle_s:g} s")
            say("asking the recommender")
            doc = _recommend(manifest, rec_url, prom_url, run_dir, config, say, write_token, prom_auth)
            if doc is not None:
                write_json_atomic(run_dir / "recommendations.json", doc)
                answer_wait_s = max(settle_s, ANSWER_SCRAPE_WAIT_S)
                if prom_binary is not None and not wait_scraped_since(  # our Prometheus keeps the answer too
                        prom_url, time.time(), (RECOMMENDER_JOB,), timeout_s=answer_wait_s):
                    say(f"  prometheus: the recommender not scraped after its answer within {answer_wait_s:g} s")
            if prom_binary is not None and config.prometheus.remote_write and not wait_remote_written(
                    prom_url, timeout_s=REMOTE_WRITE_WAIT_S):  # the fleet store gets the session's last samples
                say(f"  prometheus: remote_write had not sent every sample within {REMOTE_WRITE_WAIT_S:g} s")
    except BaseException:
        if not started:  # nothing was measured: the reason is the error (with the child's log tail)
            processes.stop_all()
            shutil.rmtree(run_dir, ignore_errors=True)
        raise
    finally:
        processes.stop_all()
        restore()
    write_report(run_dir)
    unanswered = _unanswered(config, doc)
    _print_summary(run_dir, unanswered, say)
    return SessionResult(run_dir=run_dir, manifest=manifest, recommendations=doc,
                         exit_code=1 if unanswered else 0, pids=pids)


def _unanswered(config: SessionConfig, doc: dict[str, Any] | None) -> dict[str, str]:
    """The lanes without an answer and why: the exit status rule (0 only when every lane has one)."""
    lanes = {} if doc is None else read_document(doc).lanes
    out: dict[str, str] = {}
    for lane in config.lanes:
        answer = lanes.get(lane.key)
        if answer is None:
            out[lane.key] = "no recommendations document" if doc is None else "not in the document"
        elif answer.recommended_concurrency is None:
            out[lane.key] = str(answer.reason or f"status {answer.status}")
    return out


def _print_summary(run_dir: Path, unanswered: dict[str, str], say: Say) -> None:
    report = load_run(run_dir)
    say("\n" + console_summary(report))
    shown = {lane.lane for lane in report.lanes}
    for name, why in unanswered.items():
        if name not in shown:  # a lane of the document already says why it has no answer
            say(f"  {name}: no recommendation ({why})")
    say(f"\nevidence: {run_dir} (report.html, README.md, steps.csv, records.csv)")
    say(f"serve this answer: satbench serve {run_dir}")
