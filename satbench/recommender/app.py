"""The recommender service: ``create_app(settings)`` builds the FastAPI app around a ``RecommendationStore``.

Routes are thin: each reads the store through a dependency and returns. The store's errors become HTTP
answers only here, in the exception handlers (unknown run or lane: 404; nothing computed yet: 503 with the
reason; bad input: 400; validation: FastAPI's 422). A background task refreshes the analysis on the
configured interval.

``GET /recommendations`` serves schema v2 (``?schema=v1``: the v1 view, 409 where two nodes serve one lane
name; ``default_schema`` v1 serves that view without the parameter). A second background task checks every
answer against its lane's live fingerprint each ``validity_interval_s`` (``recommender.validity``).

Writes are guarded (``recommender.write_guard``): ``POST /runs`` needs the service's write token (settings
``write_token``, else one made up at start, ``app.state.write_token``) and a body of at most
``max_body_bytes``; reads stay open. A posted run is taken at its word only for its step windows, within
bounds (``max_steps``, ``max_lanes``, ``max_window_s``, ``max_span_s``: 413 past them), never for when it
was made (it ranks by the service's clock: ``recommender.store``) nor for what it was measured on: each
lane's fingerprint is what its exporter published to Prometheus when its first window began
(``recommender.validity.fingerprints_when_measured``), whatever the body says.

``GET /recommendations`` is what every node polls, so it has a fast path (gzipped for a poller that accepts
it): ``CachedDocumentASGI`` answers it with the store's rendered bytes (``recommender.rendition``: every form
built once per change, a stale document's age filled in at most once a second) before FastAPI routes anything
(about a tenth of the per-request CPU), fresh or stale, v1 or v2; only the 503 before any document, and
every other route, go through FastAPI. The FastAPI route stays, declares the response model for OpenAPI, and
serves the same bytes. ``GET /capabilities`` (each lane's capability only:
``recommender.capabilities.capability_fragment`` of the v2 document, whatever ``default_schema`` is) takes the
same fast path.

Requests whose ``Host`` is not one the service answers to are refused (421) before anything else
(``HostCheckASGI``): a web page on a name the attacker controls, rebound to this address, would otherwise
read every route, ``/runs/{id}`` with its manifest included. A posted run that the runs folder cannot take is
refused with the store unchanged: 507 when the folder is full, 503 when it is read-only or refused.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import json
import logging
import multiprocessing
import os
import secrets
import signal
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from concurrent.futures import Executor, ProcessPoolExecutor
from pathlib import Path
from typing import Any, Literal

from fastapi import Depends, FastAPI, HTTPException, Request, Response
from fastapi.responses import JSONResponse
from fastapi.security import HTTPBearer
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from starlette.types import ASGIApp, Receive, Scope, Send

from satbench.answer.document import AmbiguousForV1, as_v2, iso_utc, read_document
from satbench.answer.models import (
    CapabilitiesModel,
    HealthModel,
    LaneModel,
    RecommendationsDocument,
    RunInfo,
    RunList,
    RunRegistered,
)
from satbench.core.manifest import RunManifest
from satbench.core.statistics import preload
from satbench.recommender.capabilities import litellm_config, prometheus_text
from satbench.recommender.deps import SettingsDep, StoreDep
from satbench.recommender.errors import (
    BadInput,
    NothingToServe,
    PrometheusQueryError,
    RecommenderError,
    RunsFolderFull,
    RunsFolderUnwritable,
    SourceUnavailable,
    TooLarge,
    UnknownLane,
    UnknownRun,
)
from satbench.recommender.host_check import HostCheckASGI
from satbench.recommender.metrics import build_registry
from satbench.recommender.prometheus_source import HttpxPromClient, public_url
from satbench.recommender.record_formats import RECORD_FORMATS, render_record, unknown_format
from satbench.recommender.run_analysis import analyze_run_async
from satbench.recommender.run_entry import Analyzer, ManifestWriter, entry_key
from satbench.recommender.settings import RecommenderSettings
from satbench.recommender.store import RecommendationStore
from satbench.recommender.validity import check_answers, fingerprints_when_measured, measured_fingerprints
from satbench.recommender.write_guard import WriteGuardASGI

__all__ = ["CachedDocumentASGI", "FingerprintSource", "SettingsAnalyzer", "analysis_workers", "check_bounds",
           "create_app", "prometheus_fingerprints", "with_measured_fingerprints"]

log = logging.getLogger("satbench.recommender")

_STATUS: dict[type[RecommenderError], int] = {
    UnknownRun: 404,
    UnknownLane: 404,
    NothingToServe: 503,
    SourceUnavailable: 503,
    TooLarge: 413,
    BadInput: 400,
    PrometheusQueryError: 502,
    RunsFolderFull: 507,
    RunsFolderUnwritable: 503,
}


class SettingsAnalyzer:
    """The real analyzer: ``analyze_run_async`` with the settings' Prometheus, policy and source config.

    With ``recorded_answers`` a finished run folder's ``recommendations.json`` is its answer as the session
    wrote it (``satbench serve``): the Prometheus it was computed from may be gone, and a re-analysis from the
    records alone would lack the exporter's figures, so it would not be the same answer. One that is not a
    recommendations document (it does not validate: ``answer.document.read_document``) is analysed again
    from the records, as a folder without one is.
    """

    def __init__(self, settings: RecommenderSettings) -> None:
        self._settings = settings
        self._policy = settings.policy

    async def __call__(self, manifest: RunManifest, run_dir: Path | None) -> dict[str, Any]:
        s = self._settings
        if s.recorded_answers and run_dir is not None and (run_dir / "recommendations.json").is_file():
            try:
                doc = json.loads((run_dir / "recommendations.json").read_text(encoding="utf-8"))
            except (OSError, ValueError) as exc:
                raise BadInput(f"{run_dir}/recommendations.json cannot be read: {exc}") from exc
            try:  # validated where it is read, so the store holds only documents its readers can read
                read_document(doc)
            except ValueError:
                pass  # not one: analysed again from the run's records, as a folder without one is
            else:
                return as_v2(doc)  # a run folder from before fleets is served in today's schema
        return await analyze_run_async(manifest, prometheus_url=s.prometheus_url, run_dir=run_dir,
                                       policy=self._policy, source_config=s.source_config(),
                                       prometheus_timeout_s=s.prometheus_timeout_s,
                                       prometheus_headers=s.prometheus_headers, prometheus_auth=s.prometheus_auth(),
                                       fingerprint_key=s.fingerprint_key_bytes())


def _background(parent: int) -> None:
    """The analysis worker's start: niced (it yields the CPU to the serving loop where both want it), and on
    Linux ended with its parent, however the parent ends (a SIGKILL runs no shutdown). A parent that ended
    while the worker was still starting (a service stopped at once) sends no signal: the worker sees it is
    not its parent's any more and leaves."""
    os.nice(10)
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    if os.getppid() != parent:
        os._exit(0)


def analysis_workers() -> ProcessPoolExecutor:
    """The service's analyses' own process (``create_app(analysis_executor=)``; the entry points give it, and
    the service shuts it down when it stops): spawned, never a fork of the threaded server; one, as analyses
    run one batch at a time; niced, so a fleet's analysis, seconds of CPU at each refresh, never takes a core
    from the polls."""
    return ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn"),
                               initializer=_background, initargs=(os.getpid(),))


def check_bounds(manifest: RunManifest, settings: RecommenderSettings) -> None:
    """``TooLarge`` (413) when a posted run asks the service to read or analyse more than it will."""
    steps = manifest.steps
    if len(steps) > settings.max_steps:
        raise TooLarge(f"{len(steps)} step windows: a run may list at most {settings.max_steps} (max_steps)")
    lanes = manifest.lane_names()
    if len(lanes) > settings.max_lanes:
        raise TooLarge(f"{len(lanes)} lanes: a run may name at most {settings.max_lanes} (max_lanes)")
    longest = max((w.end - w.start for w in steps), default=0.0)
    if longest > settings.max_window_s:
        raise TooLarge(f"a step window of {longest:.0f} s: at most {settings.max_window_s:g} s (max_window_s)")
    span = max(w.end for w in steps) - min(w.start for w in steps) if steps else 0.0
    if span > settings.max_span_s:
        raise TooLarge(f"windows spanning {span:.0f} s: at most {settings.max_span_s:g} s (max_span_s)")


Taken = dict[str, tuple[dict[str, Any] | None, str | None]]
FingerprintSource = Callable[[Mapping[str, float]], Awaitable[Taken]]


def prometheus_fingerprints(settings: RecommenderSettings) -> FingerprintSource:
    """The fingerprints lanes were measured on, from the settings' Prometheus (none without one)."""

    async def source(starts: Mapping[str, float]) -> Taken:
        if settings.prometheus_url is None:
            return {key: (None, "the service reads no Prometheus, so the lane's live fingerprint cannot be taken")
                    for key in starts}
        async with HttpxPromClient(settings.prometheus_url, timeout_s=settings.prometheus_timeout_s,
                                   headers=settings.prometheus_headers, auth=settings.prometheus_auth()) as client:
            return await fingerprints_when_measured(client, starts, fleet_key=settings.fingerprint_key_bytes())

    return source


async def with_measured_fingerprints(manifest: RunManifest, source: FingerprintSource, now: float) -> RunManifest:
    """``manifest`` as the service takes it: ``created_at`` no later than ``now`` (the service's clock), and
    each lane's fingerprint the one its exporter published when the lane's first window began (``source``:
    Prometheus; ``fingerprint_reason`` says why there is none), whatever the body said."""
    lanes = {key: {k: v for k, v in dict(entry).items() if k not in ("fingerprint", "fingerprint_reason")}
             for key, entry in manifest.lanes.items()}
    starts = {key: min(w.start for w in manifest.windows(key)) for key in manifest.lane_names()
              if manifest.windows(key)}
    taken = await source(starts)
    for key, (fp, why) in taken.items():
        entry = lanes.setdefault(key, {})
        entry["fingerprint"] = fp
        if fp is None:
            entry["fingerprint_reason"] = why
    return manifest.model_copy(update={"lanes": lanes, "created_at": min(manifest.created_at, now)})


def _status_of(exc: RecommenderError) -> int:
    for kind, code in _STATUS.items():
        if isinstance(exc, kind):
            return code
    return 500


async def _check_validity_forever(store: RecommendationStore, settings: RecommenderSettings, url: str,
                                  clock: Callable[[], float]) -> None:
    """Every ``interval_s``: each answer against its lane's live fingerprint (``recommender.validity``); an
    unreachable Prometheus leaves the last verdicts standing (the refresh tick marks the document stale)."""
    interval_s = settings.validity_interval_s or settings.scrape_interval_s
    async with HttpxPromClient(url, timeout_s=settings.prometheus_timeout_s,
                               headers=settings.prometheus_headers, auth=settings.prometheus_auth()) as client:
        while True:
            answers = store.answers_to_check()
            if answers:
                try:
                    now = clock()
                    await store.set_validity(await check_answers(client, measured_fingerprints(answers), now=now,
                                                                 fleet_key=settings.fingerprint_key_bytes()),
                                             checked_at=now)
                except (SourceUnavailable, PrometheusQueryError) as exc:
                    log.info("validity check skipped: %s", exc)
                except Exception:  # the loop must outlive any one failure
                    log.exception("validity check failed")
            await asyncio.sleep(interval_s)


async def _refresh_forever(store: RecommendationStore, interval_s: float) -> None:
    while True:
        try:
            await store.refresh()
        except Exception:  # the loop must outlive any one failure; the store keeps its last answer
            log.exception("recommendations refresh failed")
        await asyncio.sleep(interval_s)


def _accepts_gzip(scope: Scope) -> bool:
    for name, value in scope.get("headers") or ():
        if name == b"accept-encoding":
            return b"gzip" in value
    return False


_SCHEMA_QUERIES = {b"": None, b"schema=v1": "v1", b"schema=v2": "v2"}


class CachedDocumentASGI:
    """ASGI middleware: ``GET /recommendations`` and ``GET /capabilities`` straight from the store's rendered
    bytes (FastAPI's routing would cost more than the answer), fresh or stale; before any document, and for
    any other query, FastAPI answers."""

    def __init__(self, app: ASGIApp, store: RecommendationStore, schema: str = "v2") -> None:
        self.app = app
        self.store = store
        self.schema = schema

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (scope["type"] != "http" or scope["method"] != "GET" or self.store.state == "none"
                or scope.get("query_string", b"") not in _SCHEMA_QUERIES):
            await self.app(scope, receive, send)
            return
        served = self.store.served()
        path = scope["path"]
        schema = _SCHEMA_QUERIES[scope.get("query_string", b"")] or self.schema
        if path == "/recommendations" and (schema == "v2" or served.v1_ready()):
            headers = [(b"content-type", b"application/json"), (b"vary", b"accept-encoding")]
            if schema == "v2" and _accepts_gzip(scope):
                body = await served.gzip_async()
                headers.append((b"content-encoding", b"gzip"))
            else:
                body = served.v2() if schema == "v2" else served.v1()
        elif path == "/capabilities" and not scope.get("query_string"):
            headers, body = [(b"content-type", b"application/json")], served.capabilities()
        else:
            await self.app(scope, receive, send)
            return
        checked = self.store.validity_checked_at
        if checked is not None:
            headers.append((b"x-satbench-validity-checked-at", iso_utc(checked).encode()))
        headers.append((b"content-length", str(len(body)).encode()))
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": body})


def _capability_format(document: RecommendationsDocument, fmt: str, headers: dict[str, str]) -> Response:
    """``GET /capabilities?format=``: the document in a consumer's form (400 naming an unknown format)."""
    if fmt == "prometheus":
        return Response(content=prometheus_text(document), media_type=CONTENT_TYPE_LATEST, headers=headers)
    if fmt == "litellm":
        body: dict[str, Any] = litellm_config(document)[0]
    elif fmt in RECORD_FORMATS:
        body = render_record(document, fmt)
    else:
        return JSONResponse({"detail": unknown_format(fmt)}, status_code=400)
    return JSONResponse(body, headers=headers)


def _lifespan(store: RecommendationStore, settings: RecommenderSettings, clock: Callable[[], float],
              background_refresh: bool, analysis_executor: Executor | None
              ) -> Callable[[FastAPI], contextlib.AbstractAsyncContextManager[None]]:
    """The service's life: before serving, scipy imported and the runs folder and the configured runs read;
    while serving, the refresh, the ages and the validity check in the background (where asked); at the end,
    those tasks cancelled and the analysis workers stopped."""

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        preload()  # before serving: the first analysis would otherwise hold every poller for scipy's import
        store.load_runs_dir()
        for run_dir in settings.run_dirs:
            store.add_run_dir(run_dir)
        tasks = []
        if background_refresh:
            tasks.append(asyncio.create_task(_refresh_forever(store, settings.refresh_interval_s)))
            tasks.append(asyncio.create_task(store.prepare_ages()))
            if settings.prometheus_url is not None:
                tasks.append(asyncio.create_task(_check_validity_forever(
                    store, settings, settings.prometheus_url, clock)))
        try:
            yield
        finally:
            for task in tasks:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
            if analysis_executor is not None:  # here, not after the server: uvicorn re-raises SIGTERM once stopped
                await asyncio.to_thread(analysis_executor.shutdown, wait=True, cancel_futures=True)

    return lifespan


_ERROR_DOC: dict[int | str, dict[str, Any]] = {503: {"description": "nothing computed yet (reason given)"}}


def _add_document_routes(app: FastAPI, settings: RecommenderSettings) -> None:
    """What pollers read: the document, one lane's answer, the capabilities (the FastAPI side of the fast
    path: the 503 before any document, the v1 view's 409 and the other formats)."""

    @app.get("/recommendations", response_model=RecommendationsDocument,
             responses={**_ERROR_DOC, 409: {"description": "schema=v1 asked, and several nodes serve one lane "
                                                           "name, which v1 cannot say (read v2)"}})
    async def recommendations(store: StoreDep, schema: Literal["v1", "v2"] | None = None) -> Response:
        try:
            body = store.document_bytes(schema or settings.default_schema)
        except AmbiguousForV1 as exc:
            return JSONResponse({"detail": str(exc)}, status_code=409)
        return Response(content=body, media_type="application/json")

    @app.get("/recommendations/{lane:path}", response_model=LaneModel,
             responses={**_ERROR_DOC, 404: {"description": "no such lane"}})
    async def recommendation_of_lane(lane: str, store: StoreDep) -> LaneModel:
        """One answer by lane key: its name, or ``<node>/<lane>``."""
        return store.lane(lane)

    @app.get("/capabilities", response_model=CapabilitiesModel,
             responses={**_ERROR_DOC, 400: {"description": "a format that is not one of them (named)"}})
    async def capabilities(store: StoreDep, format: str | None = None) -> Response:
        """Each lane's capability only (``satbench capabilities``' fragment): what a router polling a fleet
        reads, under a kilobyte per lane where the document holds every step's evidence. (Served by
        ``CachedDocumentASGI`` once there is a document; this route serves the 503 before, and the other
        formats.) ``format`` picks another consumer's form, as ``satbench capabilities --format``
        (``recommender.record_formats``)."""
        headers = {}
        if store.validity_checked_at is not None:
            headers["X-Satbench-Validity-Checked-At"] = iso_utc(store.validity_checked_at)
        if format not in (None, "json"):
            return _capability_format(store.model(), format, headers)
        return Response(content=store.capabilities_bytes(), media_type="application/json", headers=headers)


def _add_run_routes(app: FastAPI, settings: RecommenderSettings, fingerprint_source: FingerprintSource,
                    clock: Callable[[], float], bearer: HTTPBearer) -> None:
    """Runs: registered by a guarded ``POST /runs`` (bounded, fingerprinted from Prometheus, ranked by the
    service's clock), read back one by one or listed."""

    @app.post("/runs", response_model=RunRegistered, status_code=201, dependencies=[Depends(bearer)],
              responses={202: {"model": RunRegistered, "description": "registered; analysis pending"},
                         401: {"description": "no write token, or another one"},
                         413: {"description": "a body, or a run, larger than the service reads"},
                         503: {"description": "the runs folder is read-only or refused the run: nothing "
                                              "registered"},
                         507: {"description": "the runs folder is full: nothing registered"}})
    async def register_run(body: RunManifest, store: StoreDep, response: Response) -> RunRegistered:
        """Registers a run by its step windows and analyses it; its fingerprints are taken from Prometheus
        and it ranks as the newest run (module docstring)."""
        if not body.steps:
            raise HTTPException(status_code=422, detail="the manifest lists no step windows")
        check_bounds(body, settings)
        entry = await store.register(await with_measured_fingerprints(body, fingerprint_source, clock()))
        if entry.document is None:
            response.status_code = 202
            return RunRegistered(run_id=entry.manifest.run_id, analyzed=False, reason=entry.reason, lanes={})
        lanes = {k: v.recommended_concurrency for k, v in read_document(entry.document).lanes.items()}
        return RunRegistered(run_id=entry.manifest.run_id, analyzed=True, lanes=lanes)

    @app.get("/runs/{run_id}", response_model=RunInfo, responses={404: {"description": "unknown run"}})
    async def run_info(run_id: str, store: StoreDep) -> RunInfo:
        """A run by its id; a fleet run of shards (``core.shards``) by its id is its shards' answers together, and
        each shard by its own key (``<run_id>.shard-I-of-N``)."""
        try:
            entry = await store.ensure_analyzed(run_id)
        except UnknownRun:
            shards, fleet = await store.fleet_run(run_id)
            return RunInfo(run_id=run_id, registered_at=min(e.registered_at for e in shards),
                           analyzed=fleet is not None, reason="; ".join(e.reason for e in shards if e.reason) or None,
                           partial="; ".join(f"{entry_key(e.manifest)}: {e.partial}" for e in shards if e.partial)
                           or None, manifest=shards[0].manifest.to_dict(), recommendations=fleet)
        doc = None if entry.document is None else RecommendationsDocument.model_validate(entry.document)
        return RunInfo(run_id=run_id, registered_at=entry.registered_at, analyzed=entry.document is not None,
                       reason=entry.reason, partial=entry.partial, manifest=entry.manifest.to_dict(),
                       recommendations=doc)

    @app.get("/runs", response_model=RunList)
    async def runs_listed(store: StoreDep) -> RunList:
        """Every registered run, oldest measured first, each said complete or partial (and why), with the lanes
        of the served document it answers (``recommender.store``)."""
        return RunList.model_validate({"runs": store.runs()})


def _add_service_routes(app: FastAPI, registry: CollectorRegistry) -> None:
    """The service's own health and its ``/metrics`` (the recommended figures, on its private registry)."""

    @app.get("/healthz", response_model=HealthModel)
    async def healthz(store: StoreDep, settings: SettingsDep) -> HealthModel:
        return HealthModel(status="ok", runs=store.run_count, document=store.state,  # type: ignore[arg-type]
                           prometheus_url=None if settings.prometheus_url is None
                           else public_url(settings.prometheus_url))

    @app.get("/metrics", response_class=Response)
    async def metrics() -> Response:
        return Response(content=generate_latest(registry), media_type=CONTENT_TYPE_LATEST)


def create_app(settings: RecommenderSettings, *, analyzer: Analyzer | None = None,
               clock: Callable[[], float] = time.time, background_refresh: bool = True,
               fingerprints: FingerprintSource | None = None, write_manifest: ManifestWriter | None = None,
               analysis_executor: Executor | None = None) -> FastAPI:
    """The service. ``analyzer``, ``clock``, ``fingerprints`` (where a posted run's fingerprints come from) and
    ``write_manifest`` (how a posted run is saved in the runs folder) are injected; their defaults read the
    settings' Prometheus and write the folder. ``analysis_executor``: where analyses run (``analysis_workers``;
    default a worker thread), its analyzer then picklable."""
    fingerprint_source = fingerprints or prometheus_fingerprints(settings)
    store = RecommendationStore(analyzer or SettingsAnalyzer(settings), runs_dir=settings.runs_dir,
                                clock=clock, retry_after_s=settings.refresh_interval_s, executor=analysis_executor,
                                **({} if write_manifest is None else {"write_manifest": write_manifest}))
    write_token = settings.write_token.get_secret_value() if settings.write_token else secrets.token_urlsafe(32)
    registry = build_registry(store)
    app = FastAPI(title="satbench recommender", version="1",
                  description="How much concurrency each lane can use, measured per step window.",
                  lifespan=_lifespan(store, settings, clock, background_refresh, analysis_executor))
    app.state.store = store
    app.state.settings = settings
    app.state.write_token = write_token
    app.add_middleware(CachedDocumentASGI, store=store, schema=settings.default_schema)
    app.add_middleware(WriteGuardASGI, token=write_token, max_body_bytes=settings.max_body_bytes)
    app.add_middleware(HostCheckASGI, allowed=settings.host_names())  # outermost: before anything is read
    bearer = HTTPBearer(auto_error=False, description="the service's write token (SATBENCH_RECOMMENDER_WRITE_TOKEN); "
                                                      "checked before the body is read")

    @app.exception_handler(RecommenderError)
    async def recommender_error(request: Request, exc: RecommenderError) -> JSONResponse:
        return JSONResponse({"detail": str(exc)}, status_code=_status_of(exc))

    _add_document_routes(app, settings)
    _add_run_routes(app, settings, fingerprint_source, clock, bearer)
    _add_service_routes(app, registry)
    return app
