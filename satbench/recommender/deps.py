"""FastAPI dependencies of the recommender, as ``Annotated`` aliases (routes stay one-liners)."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from satbench.recommender.settings import RecommenderSettings
from satbench.recommender.store import RecommendationStore

__all__ = ["SettingsDep", "StoreDep"]


def get_store(request: Request) -> RecommendationStore:
    store: RecommendationStore = request.app.state.store
    return store


def get_settings(request: Request) -> RecommenderSettings:
    settings: RecommenderSettings = request.app.state.settings
    return settings


StoreDep = Annotated[RecommendationStore, Depends(get_store)]
SettingsDep = Annotated[RecommenderSettings, Depends(get_settings)]
