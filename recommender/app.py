"""The recommender service: ``create_app(settings)`` builds the FastAPI app around a ``RecommendationStore``.

Routes are thin: each reads the store through a dependency and returns. The store's errors become HTTP
answers only here, in the exception handlers (unknown run or lane: 404; nothing computed yet: 503 with the
reason; bad input: 400; validation: FastAPI's 422). A background task refreshes the analysis on the
configured interval.

``GET /recommendations`` is what every node polls, so it has a fast path: ``CachedDocumentASGI`` answers it
with the store's pre-serialised bytes before FastAPI routes anything (about a tenth of the per-request
CPU); it steps aside whenever the document is not fresh, so stale documents, 503s and every other route go
through FastAPI. The FastAPI route stays, declares the response model for OpenAPI, and serves the same bytes.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

from fastapi import FastAPI, HTTPException, Request, Response
from fastapi.responses import JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.types import ASGIApp, Receive, Scope, Send

from core.manifest import RunManifest
from recommender.deps import SettingsDep, StoreDep
from recommender.errors import (
    BadInput,
    NothingToServe,
    PrometheusQueryError,
    RecommenderError,
    SourceUnavailable,
    UnknownLane,
    UnknownRun,
)
from recommender.metrics import build_registry
from recommender.models import (
    HealthModel,
    LaneModel,
    RecommendationsDocument,
    RunInfo,
    RunRegistered,
)
from recommender.run_analysis import analyze_run_async
from recommender.settings import RecommenderSettings
from recommender.store import Analyzer, RecommendationStore

__all__ = ["CachedDocumentASGI", "SettingsAnalyzer", "create_app"]

log = logging.getLogger("satbench.recommender")

_STATUS: dict[type[RecommenderError], int] = {
    UnknownRun: 404,
    UnknownLane: 404,
    NothingToServe: 503,
    SourceUnavailable: 503,
    BadInput: 400,
    PrometheusQueryError: 502,
}


class SettingsAnalyzer:
    """The real analyzer: ``analyze_run_async`` with the settings' Prometheus, policy and source config.

    With ``recorded_answers`` a finished run folder's ``recommendations.json`` is its answer as the session
    wrote it (``satbench serve``): the Prometheus it was computed from may be gone, and a re-analysis from the
    records alone would lack the exporter's figures, so it would not be the same answer.
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
            if isinstance(doc, dict) and isinstance(doc.get("lanes"), dict):
                return doc
        return await analyze_run_async(manifest, prometheus_url=s.prometheus_url, run_dir=run_dir,
                                       policy=self._policy, source_config=s.source_config(),
                                       prometheus_timeout_s=s.prometheus_timeout_s)


def _status_of(exc: RecommenderError) -> int:
    for kind, code in _STATUS.items():
        if isinstance(exc, kind):
            return code
    return 500


async def _refresh_forever(store: RecommendationStore, interval_s: float) -> None:
    while True:
        try:
            await store.refresh()
        except Exception:  # the loop must outlive any one failure; the store keeps its last answer
            log.exception("recommendations refresh failed")
        await asyncio.sleep(interval_s)


class CachedDocumentASGI:
    """ASGI middleware: ``GET /recommendations`` straight from the store's cached bytes when fresh."""

    def __init__(self, app: ASGIApp, store: RecommendationStore) -> None:
        self.app = app
        self.store = store

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (scope["type"] == "http" and scope["method"] == "GET" and scope["path"] == "/recommendations"
                and self.store.state == "fresh"):
            body = self.store.document_bytes()
            await send({"type": "http.response.start", "status": 200, "headers": [
                (b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
            await send({"type": "http.response.body", "body": body})
            return
        await self.app(scope, receive, send)


def create_app(settings: RecommenderSettings, *, analyzer: Analyzer | None = None,
               clock: Callable[[], float] = time.time, background_refresh: bool = True) -> FastAPI:
    store = RecommendationStore(analyzer or SettingsAnalyzer(settings), runs_dir=settings.runs_dir,
                                clock=clock)
    registry = build_registry(store)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        store.load_runs_dir()
        for run_dir in settings.run_dirs:
            store.add_run_dir(run_dir)
        task = None
        if background_refresh:
            task = asyncio.create_task(_refresh_forever(store, settings.refresh_interval_s))
        try:
            yield
        finally:
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task

    app = FastAPI(title="satbench recommender", version="1",
                  description="How much concurrency each lane can use, measured per step window.",
                  lifespan=lifespan)
    app.state.store = store
    app.state.settings = settings
    app.add_middleware(CachedDocumentASGI, store=store)

    @app.exception_handler(RecommenderError)
    async def recommender_error(request: Request, exc: RecommenderError) -> JSONResponse:
        return JSONResponse({"detail": str(exc)}, status_code=_status_of(exc))

    error_doc: dict[int | str, dict[str, Any]] = {503: {"description": "nothing computed yet (reason given)"}}

    @app.get("/recommendations", response_model=RecommendationsDocument, responses=error_doc)
    async def recommendations(store: StoreDep) -> Response:
        return Response(content=store.document_bytes(), media_type="application/json")

    @app.get("/recommendations/{lane}", response_model=LaneModel,
             responses={**error_doc, 404: {"description": "no such lane"}})
    async def recommendation_of_lane(lane: str, store: StoreDep) -> dict[str, Any]:
        return store.lane(lane)

    @app.post("/runs", response_model=RunRegistered, status_code=201,
              responses={202: {"model": RunRegistered, "description": "registered; analysis pending"}})
    async def register_run(body: RunManifest, store: StoreDep, response: Response) -> RunRegistered:
        if not body.steps:
            raise HTTPException(status_code=422, detail="the manifest lists no step windows")
        entry = await store.register(body)
        if entry.document is None:
            response.status_code = 202
            return RunRegistered(run_id=entry.manifest.run_id, analyzed=False, reason=entry.reason, lanes={})
        lanes = {k: v["recommended_concurrency"] for k, v in entry.document["lanes"].items()}
        return RunRegistered(run_id=entry.manifest.run_id, analyzed=True, lanes=lanes)

    @app.get("/runs/{run_id}", response_model=RunInfo, responses={404: {"description": "unknown run"}})
    async def run_info(run_id: str, store: StoreDep) -> RunInfo:
        entry = await store.ensure_analyzed(run_id)
        doc = None if entry.document is None else RecommendationsDocument.model_validate(entry.document)
        return RunInfo(run_id=run_id, registered_at=entry.registered_at, analyzed=entry.document is not None,
                       reason=entry.reason, manifest=entry.manifest.to_dict(), recommendations=doc)

    @app.get("/healthz", response_model=HealthModel)
    async def healthz(store: StoreDep, settings: SettingsDep) -> HealthModel:
        return HealthModel(status="ok", runs=store.run_count, document=store.state,  # type: ignore[arg-type]
                           prometheus_url=settings.prometheus_url)

    @app.get("/metrics", response_class=Response)
    async def metrics() -> Response:
        return Response(content=generate_latest(registry), media_type=CONTENT_TYPE_LATEST)

    return app
