"""``satbench capabilities [--url URL]``: the per-lane fragment a node reports to capability reporting.

Reads ``GET /recommendations`` of a recommender and prints, per lane, ``max_useful_concurrency`` (the
recommended concurrency), the throughput measured at it, the status, the run that measured it and when.
A lane without an answer reports ``max_useful_concurrency: null`` with its status and reason, so a reader
can tell "not measured" from "measured: 1". Exit status, the rule of ``satbench run`` too: 0 when every lane
has an answer, 1 when some lane has none (also when no recommender answers: then no lane has one; the
message says how to serve a finished run), 2 for bad input (a URL that is not one). The default URL is the
recommender's default port, where ``satbench serve`` and a session's recommender listen.

Example::

    $ satbench serve runs &
    $ satbench capabilities
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

    from core.config_files import check_http_url

    try:
        base = check_http_url(args.url)
    except ValueError as exc:
        print(f"satbench capabilities: --url {exc}", file=sys.stderr)
        return 2
    url = f"{base}/recommendations"
    try:
        resp = httpx.get(url, timeout=args.timeout)
    except httpx.HTTPError as exc:
        print(f"satbench capabilities: no answer: cannot reach {url} ({type(exc).__name__}); a finished run's "
              "answer is served by: satbench serve RUN_DIR", file=sys.stderr)
        return 1
    if resp.status_code != 200:
        detail = " ".join(resp.text[:300].split())
        print(f"satbench capabilities: no answer: {url} answered {resp.status_code}: {detail}", file=sys.stderr)
        return 1
    try:
        fragment = capability_fragment(resp.json())
    except (ValueError, AttributeError) as exc:
        print(f"satbench capabilities: no answer: {url} sent no recommendations document: {exc}",
              file=sys.stderr)
        return 1
    print(json.dumps(fragment, indent=2, sort_keys=True))
    missing = [name for name, v in fragment["lanes"].items() if v["max_useful_concurrency"] is None]
    for name in missing:
        why = fragment["lanes"][name].get("reason") or f"status {fragment['lanes'][name].get('status')}"
        print(f"satbench capabilities: lane {name}: no answer ({why})", file=sys.stderr)
    return 1 if missing or not fragment["lanes"] else 0
