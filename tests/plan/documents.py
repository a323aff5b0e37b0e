"""Recommendations documents for the plan's tests, built as the service states them (every field the schema
requires), one answer per (node, lane): a fleet of nodes whose answers the test chose or measured."""

from __future__ import annotations

from typing import Any

__all__ = ["document", "lane", "rate_block", "validity"]


def validity(state: str) -> dict[str, Any]:
    return {"state": state, "checked_at": None if state == "unknown" else "2026-12-05T10:00:00Z", "changes": [],
            "reason": None if state != "unknown" else "not yet compared with the live fingerprint"}


def rate_block(point: float, interval: list[float] | None, *, status: str = "settled",
               curve: list[dict[str, Any]] | None = None, target: float = 0.9) -> dict[str, Any]:
    """A rate answer of ``point`` requests/s read in ``interval``."""
    return {"status": status, "reason": None, "max_rate_rps": point, "max_rate_rpm": int(point * 60),
            "interval": interval, "goodput_rps": point, "goodput_tok_s": None, "attainment": 0.95,
            "attainment_target": target, "binding_objective": "ttft", "curve": curve or [], "littles_law": None}


def lane(node: str, name: str, concurrency: int | None, *, fingerprint: dict[str, Any] | None, state: str = "valid",
         rate: dict[str, Any] | None = None, status: str | None = None, steps: tuple[int, ...] = (),
         **more: Any) -> dict[str, Any]:
    """One node's answer for lane ``name``: ``concurrency`` and ``rate`` (either may be None); ``steps`` the
    concurrencies its walk measured (only their rung numbers matter to the plan)."""
    return {
        "node": node, "lane": name, "url": f"http://{node}:8080", "fingerprint": fingerprint,
        "validity": validity(state), "status": status or ("ok" if concurrency is not None else "insufficient_data"),
        "reason": None, "recommended_concurrency": concurrency, "saturation_concurrency": concurrency,
        "binding_constraint": None if concurrency is None else "throughput_plateau",
        "throughput_at_recommended_tok_s": None, "fairness": {"ok": True, "jain_min": None},
        "starvation": {"ok": True, "decode_stall_max_ratio": None, "prefill_wait_max_s": None},
        "run_id": f"r-{node}", "measured_at": "2026-12-05T09:00:00Z", "age_s": 3600.0,
        "steps": [_step(c) for c in steps], "rate": rate, **more}


def _step(concurrency: int) -> dict[str, Any]:
    """A rung of the walk, as little of it as the schema requires."""
    return {"concurrency": concurrency, "window_s": 10.0, "requests": 40, "errors": 0,
            "throughput_tok_s": 100.0 * concurrency, "requests_per_s": 4.0, "usable": True, "violations": [],
            "checks": {}}


def document(lanes: dict[str, dict[str, Any]], *, stale: bool = False) -> dict[str, Any]:
    nodes: dict[str, Any] = {}
    for key, answer in sorted(lanes.items()):
        nodes.setdefault(answer["node"], {"labels": {}, "lanes": []})["lanes"].append(key)
    return {"schema": "satbench.recommendations/v2", "generated_at": "2026-12-05T10:00:00Z", "run_id": "r-fleet",
            "source": {"kind": "records"}, "policy": {}, "notes": [], "stale": stale, "age_s": None,
            "nodes": nodes, "lanes": lanes}
