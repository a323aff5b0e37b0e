"""``satbench capabilities [--url URL]``: the per-lane fragment a node reports to capability reporting.

Reads ``GET /recommendations`` of a recommender and prints, per lane, ``max_useful_concurrency`` (the
recommended concurrency), the throughput measured at it, the status, the run that measured it and when.
A lane without an answer reports ``max_useful_concurrency: null`` with its status and reason, so a reader
can tell "not measured" from "measured: 1". Exit status: 0 when every lane has an answer, 1 when some lane
has none, 2 when the recommender cannot be read.

Example::

    $ satbench capabilities --url http://127.0.0.1:9108
    {"lanes": {"dense": {"max_useful_concurrency": 4, "throughput_tok_s": 812.5, "status": "ok",
               "run_id": "20261129T101500Z-3f2a", "measured_at": "2026-11-29T10:19:40Z"}}}
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

__all__ = ["capability_fragment", "configure", "main"]


def capability_fragment(document: dict[str, Any]) -> dict[str, Any]:
    """The capability fragment of a recommendations document (pure)."""
    lanes: dict[str, Any] = {}
    for name, lane in sorted((document.get("lanes") or {}).items()):
        entry = {
            "max_useful_concurrency": lane.get("recommended_concurrency"),
            "throughput_tok_s": lane.get("throughput_at_recommended_tok_s"),
            "binding_constraint": lane.get("binding_constraint"),
            "status": lane.get("status"),
            "run_id": lane.get("run_id", document.get("run_id")),
            "measured_at": lane.get("measured_at"),
        }
        if lane.get("reason"):
            entry["reason"] = lane["reason"]
        lanes[name] = entry
    return {"schema": document.get("schema"), "generated_at": document.get("generated_at"), "lanes": lanes}


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--url", default="http://127.0.0.1:9108", help="recommender base URL")
    parser.add_argument("--timeout", type=float, default=5.0, help="seconds to wait for the recommender")


def main(args: argparse.Namespace) -> int:
    import httpx

    url = f"{args.url.rstrip('/')}/recommendations"
    try:
        resp = httpx.get(url, timeout=args.timeout)
    except httpx.HTTPError as exc:
        print(f"satbench capabilities: cannot reach {url}: {exc}", file=sys.stderr)
        return 2
    if resp.status_code != 200:
        detail = resp.text[:500]
        print(f"satbench capabilities: {url} answered {resp.status_code}: {detail}", file=sys.stderr)
        return 2
    try:
        fragment = capability_fragment(resp.json())
    except (ValueError, AttributeError) as exc:
        print(f"satbench capabilities: {url} sent no recommendations document: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(fragment, indent=2, sort_keys=True))
    missing = any(v["max_useful_concurrency"] is None for v in fragment["lanes"].values())
    return 1 if missing or not fragment["lanes"] else 0
