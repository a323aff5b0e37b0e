"""``satbench capabilities``: the command that prints a recommendations document's capability per node and
lane (``recommender.capabilities``, the library: the fragment, the /metrics text, LiteLLM's model_list; the
autoscalers' and routers' records of ``recommender.record_formats``: KEDA, KServe, llm-d, the endpoint picker,
the variant autoscaler) from a running recommender (``--url``) or a saved run (``--file``).

Exit status: 0 when every lane has a usable answer, 1 when one has none (or the service has no answer), 2 for
bad input (a one-line error naming the flag).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from satbench.answer.document import read_document
from satbench.answer.models import CapabilitiesModel, RecommendationsDocument
from satbench.recommender.capabilities import (
    capability_fragment,
    litellm_config,
    prometheus_text,
    unusable_lanes,
)
from satbench.recommender.keda import AutoscalerOptions
from satbench.recommender.record_formats import ALL_FORMATS, RECORD_FORMATS, lane_record, render_record

__all__ = ["configure", "main"]


def configure(parser: argparse.ArgumentParser) -> None:
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--url", default="http://127.0.0.1:9108", help="recommender base URL")
    source.add_argument("--file", type=Path, default=None, metavar="PATH",
                        help="a saved recommendations.json (or the run folder holding it) instead of --url")
    parser.add_argument("--timeout", type=float, default=5.0, help="seconds to wait for the recommender")
    parser.add_argument("--format", choices=ALL_FORMATS, default="json",
                        help="json: the capability fragment per node; prometheus: the /metrics text; "
                             "litellm: a LiteLLM proxy model_list (JSON, which YAML reads); "
                             + "; ".join(f"{name}: {what}" for name, (_, what) in RECORD_FORMATS.items()))
    parser.add_argument("--model-name", action="append", default=[], metavar="LANE=NAME",
                        help="litellm: the model group of a lane (default: the lane's name); repeatable")
    parser.add_argument("--api-base", action="append", default=[], metavar="NODE/LANE=URL",
                        help="litellm: a lane's runtime URL where the document has none; repeatable")
    parser.add_argument("--provider", default="openai",
                        help="litellm: the provider prefix of litellm_params.model (default openai)")
    parser.add_argument("--node-share", choices=("alone", "together"), default="alone",
                        help="litellm: each lane's answer as measured, its node's other lanes idle (alone), or its "
                             "share while every lane of its node runs at once (together)")
    parser.add_argument("--unanswered", choices=("serial", "omit"), default="serial",
                        help="litellm: a lane without a usable answer gets max_parallel_requests 1 (serial) "
                             "or is left out (omit)")
    parser.add_argument("--server-address", default=AutoscalerOptions.server_address, metavar="URL",
                        help="keda, kserve: the Prometheus-compatible store KEDA queries (default: the "
                             "deploy's store gate)")
    parser.add_argument("--namespace", default=None, help="keda, kserve: the objects' namespace")
    parser.add_argument("--min-replicas", type=int, default=AutoscalerOptions.min_replicas,
                        help="keda, kserve: the fewest replicas of a model")
    parser.add_argument("--max-replicas", type=int, default=AutoscalerOptions.max_replicas,
                        help="keda, kserve: the most replicas of a model")
    parser.add_argument("--scale-target", action="append", default=[], metavar="LANE=[KIND/]NAME",
                        help="keda, kserve: the workload a model (lane name) scales (default: a Deployment named "
                             "as the lane); repeatable")
    parser.add_argument("--auth-ref", default=None, metavar="NAME",
                        help="keda, kserve: the TriggerAuthentication holding the store's basic-auth credentials")
    parser.add_argument("--lane", default=None, metavar="KEY",
                        help="llm-d, epp, wva: print only this lane's record (its key: NAME or NODE/NAME), e.g. "
                             "the file llm-d's prefillCalibrationFile names")


def _pairs(values: Sequence[str], flag: str, *, urls: bool = False) -> dict[str, str]:
    """``KEY=VALUE`` options as a dict (``ValueError`` naming the flag for a malformed one)."""
    from satbench.core.config_files import check_http_url

    out: dict[str, str] = {}
    for value in values:
        key, sep, item = value.partition("=")
        if not sep or not key or not item:
            raise ValueError(f"{flag} {value!r}: expected KEY=VALUE")
        try:
            out[key] = check_http_url(item) if urls else item
        except ValueError as exc:
            raise ValueError(f"{flag} {value!r}: the URL {exc}") from exc
    return out


def _read_file(path: Path) -> tuple[RecommendationsDocument, dict[str, Any] | None]:
    """The document at ``path`` (a file, or a run folder's ``recommendations.json``), validated, and the
    run's ``manifest.json`` beside it, when there is a readable one."""
    doc_path = path / "recommendations.json" if path.is_dir() else path
    document = read_document(json.loads(doc_path.read_text(encoding="utf-8")))
    manifest = None
    try:
        loaded = json.loads((doc_path.parent / "manifest.json").read_text(encoding="utf-8"))
        manifest = loaded if isinstance(loaded, dict) else None
    except (OSError, ValueError):
        pass
    return document, manifest


def _fetch(url_arg: str, timeout: float) -> tuple[RecommendationsDocument | None, int]:
    import httpx

    from satbench.core.config_files import check_http_url

    try:
        base = check_http_url(url_arg)
    except ValueError as exc:
        print(f"satbench capabilities: --url {exc}", file=sys.stderr)
        return None, 2
    url = f"{base}/recommendations"
    try:  # v2 whatever the service's default: the fragment is keyed as GET /capabilities keys it
        resp = httpx.get(url, params={"schema": "v2"}, timeout=timeout)
    except httpx.HTTPError as exc:
        print(f"satbench capabilities: no answer: cannot reach {url} ({type(exc).__name__}); a finished run's "
              "answer is served by: satbench serve RUN_DIR", file=sys.stderr)
        return None, 1
    if resp.status_code != 200:
        detail = " ".join(resp.text[:300].split())
        print(f"satbench capabilities: no answer: {url} answered {resp.status_code}: {detail}", file=sys.stderr)
        return None, 1
    try:
        document = read_document(resp.json())
    except ValueError as exc:
        print(f"satbench capabilities: no answer: {url} sent no recommendations document: {exc}",
              file=sys.stderr)
        return None, 1
    return document, 0


def _autoscaler_options(args: argparse.Namespace) -> AutoscalerOptions:
    """The KEDA and KServe options (``ValueError`` naming the flag for a bad one)."""
    from satbench.core.config_files import check_http_url

    low, high = getattr(args, "min_replicas", 1), getattr(args, "max_replicas", 8)
    if low < 1:
        raise ValueError(f"--min-replicas {low}: must be at least 1")
    if high < low:
        raise ValueError(f"--max-replicas {high}: must be at least --min-replicas {low}")
    address = getattr(args, "server_address", AutoscalerOptions.server_address)
    try:
        address = check_http_url(address)
    except ValueError as exc:
        raise ValueError(f"--server-address {exc}") from exc
    return AutoscalerOptions(server_address=address, namespace=getattr(args, "namespace", None),
                             min_replicas=low, max_replicas=high,
                             scale_targets=_pairs(getattr(args, "scale_target", []), "--scale-target"),
                             auth_ref=getattr(args, "auth_ref", None))


def main(args: argparse.Namespace) -> int:
    fmt = getattr(args, "format", "json")
    path: Path | None = getattr(args, "file", None)
    try:
        model_names = _pairs(getattr(args, "model_name", []), "--model-name")
        api_bases = _pairs(getattr(args, "api_base", []), "--api-base", urls=True)
        options = _autoscaler_options(args)
    except ValueError as exc:
        print(f"satbench capabilities: {exc}", file=sys.stderr)
        return 2
    manifest = None
    if path is not None:
        try:
            document, manifest = _read_file(path)
        except (OSError, ValueError) as exc:
            print(f"satbench capabilities: --file {path}: {exc}", file=sys.stderr)
            return 2
    else:
        fetched, code = _fetch(args.url, args.timeout)
        if fetched is None:
            return code
        document = fetched
    fragment = capability_fragment(document)
    entries = CapabilitiesModel.model_validate(fragment).lanes
    unusable = unusable_lanes(document)
    left_out = False
    if fmt == "litellm":
        config, notes = litellm_config(document, model_names=model_names, api_bases=api_bases, manifest=manifest,
                                       provider=getattr(args, "provider", "openai"),
                                       unanswered=getattr(args, "unanswered", "serial"),
                                       node_share=getattr(args, "node_share", "alone"))
        print(json.dumps(config, indent=2))
        left_out = len(config["model_list"]) < len(entries)  # one deployment per (node, lane) at most
    elif fmt in RECORD_FORMATS:
        record = render_record(document, fmt, options)
        lane = getattr(args, "lane", None)
        if lane is not None:
            try:
                record = lane_record(record, fmt, lane)
            except ValueError as exc:
                print(f"satbench capabilities: {exc}", file=sys.stderr)
                return 2
            unusable = {k: why for k, why in unusable.items() if k == lane}
        print(json.dumps(record, indent=2))
        notes = [f"lane {key}: {why}; its record says so" for key, why in unusable.items()]
    else:
        print(prometheus_text(document) if fmt == "prometheus" else json.dumps(fragment, indent=2, sort_keys=True),
              end="" if fmt == "prometheus" else "\n")
        notes = [f"lane {key}: {why}" for key, why in unusable.items()]
    for line in notes:
        print(f"satbench capabilities: {line}", file=sys.stderr)
    return 1 if unusable or left_out or not entries else 0
