"""The recommender: per lane, how much concurrency is useful, from measured step windows and a policy.

``analyze_run(manifest, *, prometheus_url, run_dir, policy)`` is the entry point that needs no service;
``recommender.app.create_app(settings)`` is the HTTP service. Imports are lazy so that ``satbench --help``
does not load scipy or FastAPI.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from satbench.answer.policy import Policy
    from satbench.recommender.run_analysis import analyze_run

__all__ = ["Policy", "analyze_run"]


def __getattr__(name: str) -> Any:
    if name == "analyze_run":
        from satbench.recommender.run_analysis import analyze_run

        return analyze_run
    if name == "Policy":
        from satbench.answer.policy import Policy

        return Policy
    raise AttributeError(f"module 'recommender' has no attribute {name!r}")
