"""The answer in the forms routers and gateways read (``satbench capabilities`` prints them: its command line
is ``recommender.capabilities_cli``).

Reads ``GET /recommendations`` of a recommender (``--url``), or a saved document (``--file``, e.g.
``runs/<id>/recommendations.json`` or the run folder itself), and prints it ``--format``:

- ``json`` (default): the capability fragment, per lane ``max_useful_concurrency`` (the recommended
  concurrency), the throughput measured at it, the binding constraint, the status, ``valid`` (True: checked
  against the live runtime and it still holds; False: measured on something else; None: nobody could tell),
  the run that measured it and when, the fingerprint digest and the runtime's URL. It is given twice, flat and
  grouped (``capability_fragment``). Where the run walked open-loop rates the entry adds the rate answer
  (``max_rate_rps``, ``max_rate_rpm``, ``rate_status``, ``goodput_rps``, ``rate_binding_objective``); where
  the lane replayed a recorded trace, the trace answer: ``trace_max_factor`` (this node takes N x the recorded
  traffic), ``trace_status``, ``trace_max_rate_rps`` and ``trace_sha256``, the file it is for; where the lane
  walked agent sessions, the agent answer: ``max_agent_sessions`` (concurrent session trees at the tier),
  ``agents_status``, ``agents_valid`` (its validity stamp) and ``agents_tier`` (the TTFT ceiling and speed floor)::

      {"schema": ..., "generated_at": ...,
       "lanes": {"<key>": {...entry, "node": ..., "lane": ...}},
       "nodes": {"<node>": {"labels": {...}, "lanes": {"<lane>": {...entry}}}}}

  ``lanes`` is keyed by lane key, exactly as the document's ``lanes``: a session without nodes (every v1
  document) keys it by bare lane name, so today's consumers (``fragment["lanes"]["dense"]
  ["max_useful_concurrency"]``, capability reporting, the session tests) read what they always read, and a
  fleet document's ``"gpu1/dense"`` reads the same way the document does. ``nodes`` is the same entries
  grouped per node (lanes naming no node are on ``local``) with the node's labels (gpu class...), which is
  what a fleet router that places per node wants.

  Lanes of one node share its hardware (its GPUs, memory bandwidth, CPU), and each one was measured with the
  others idle: two lanes on one GPU each sent up to its own answer oversubscribe it. So every entry names
  the lanes it shares hardware with (``shares_hardware_with``, lane keys), and a node of several lanes says
  so (``shared_hardware``) with the rule for what they can take together (``capacity_rule``): keep the sum,
  over its lanes, of requests in flight over each lane's ``max_useful_concurrency`` at or below 1 (the GPU's
  time is shared; a lane at its answer has it all). ``max_useful_concurrency_together`` is that budget split
  evenly, each lane's answer over the node's lane count (at least 1): what a router may send every lane of
  the node at once. It is a rule, not a measurement: satbench measures a node's lanes one after another.
- ``prometheus``: the text exposition of the recommender's own ``/metrics`` for this document
  (``recommender.metrics.answer_families``, the one function both use; ``satbench_recommended_concurrency``,
  ``satbench_saturation_concurrency``, ``satbench_recommendation_valid``, ... with ``node`` and ``lane``), for
  a textfile collector or a push to a gateway when no recommender runs.
- ``litellm``: a LiteLLM proxy ``model_list`` with one deployment per (node, lane).

The autoscalers' and routers' records (``keda``, ``kserve``, ``llm-d``, ``epp``, ``wva``) are
``recommender.record_formats``' (``recommender.keda``, ``recommender.consumer_records``).

The LiteLLM fields, as LiteLLM documents them:

- ``model_list[].model_name``: the model group clients ask for; deployments sharing it are load-balanced
  (https://docs.litellm.ai/docs/proxy/configs, https://docs.litellm.ai/docs/routing). Here: the lane's name,
  so the lanes of one name on several nodes form one group; ``--model-name LANE=NAME`` renames a group.
- ``litellm_params.model``: ``openai/<model>``, the documented route for an OpenAI-compatible server
  (https://docs.litellm.ai/docs/providers/openai_compatible; llama-server serves ``/v1/chat/completions``);
  ``<model>`` is the lane's ``model`` (what a router-mode llama-server routes by), else its name (a
  one-model llama-server ignores it). ``--provider`` changes the prefix (``llamafile`` needs no key).
- ``litellm_params.api_base``: the runtime's base URL with ``/v1`` (LiteLLM's openai client appends
  ``/chat/completions``; https://docs.litellm.ai/docs/providers/llamafile shows ``http://localhost:8080/v1``).
  From ``--api-base KEY=URL``, else the lane's ``url`` in the document, else the run folder's
  ``manifest.json`` (``lanes.<key>.url``, ``clients.<key>.url``) when ``--file`` points into one.
- ``litellm_params.api_key``: ``os.environ/<VAR>`` when the run's manifest names the lane's ``api_key_env``
  (``--file`` of a run folder), else ``"none"``: the
  openai route requires a key, and an explicit placeholder keeps LiteLLM from sending the proxy's own
  ``OPENAI_API_KEY`` to a llama-server.
- ``litellm_params.max_parallel_requests``: the recommended concurrency, the per-deployment limit of
  concurrent calls ("Max Parallel Requests (ASYNC)", https://docs.litellm.ai/docs/routing): requests beyond
  it wait in the proxy instead of queueing inside the node, which only adds latency.
- ``litellm_params.weight``: the same number, so the default ``simple-shuffle`` strategy sends each node a
  share of the group's traffic proportional to what it can use (https://docs.litellm.ai/docs/routing).
- ``litellm_params.rpm``: where the run walked open-loop rates (``--arrival``) and the lane has a usable rate
  answer, its ``max_rate_rps`` x 60, rounded down: the deployment's requests per minute within the
  objectives (LiteLLM's per-deployment rate limit, read by its usage-based routing and cooldowns). Left
  unset otherwise; ``tpm`` is always left unset: LiteLLM counts prompt and output tokens together, while the
  rate answer's goodput counts output tokens of requests that met their objectives.
- ``model_info``: ``id`` (``satbench:<node>/<lane>``, unique per deployment) plus ``satbench_node``,
  ``satbench_lane``, ``satbench_status``, ``satbench_validity``, ``satbench_recommended_concurrency``,
  ``satbench_run_id``, ``satbench_measured_at``, ``satbench_fingerprint_digest``, ``satbench_reason``,
  ``satbench_shares_hardware_with`` and ``satbench_concurrency_together`` (extra ``model_info`` keys are kept
  and shown by the proxy's ``/model/info``). ``--node-share together`` publishes each lane's share of its
  node (``max_useful_concurrency_together``) as ``max_parallel_requests``, for a proxy that sends every lane
  of a node traffic at once; the default, ``alone``, publishes the answer as measured.

The output is JSON, which is YAML (YAML 1.2 is a superset of JSON and PyYAML reads it), so it loads as
LiteLLM's ``config.yaml`` or merges into one with no YAML library in satbench's runtime dependencies.

A lane without a usable answer (never measured: no ``recommended_concurrency``; or measured on something
else: ``validity.state == "changed"``) is still published, with ``max_parallel_requests: 1`` and ``weight: 1``:
an operator's router must neither overload an unmeasured node (one request at a time cannot) nor drop it
silently (it stays in the group, its ``model_info`` says why, and a line on stderr names it).
``--unanswered omit`` leaves such lanes out instead. A stale answer served while the recommender's source is
unreachable keeps its number: it was measured on this very runtime, only its age grew. A lane whose runtime
URL is nowhere to be found is left out (a deployment without ``api_base`` would send to the wrong place),
with its line on stderr.

Exit status, the rule of ``satbench run`` too: 0 when every lane has a usable answer; 1 when some lane has
none (never measured, or measured on something else), when the output leaves a lane out, or when no
recommender answers (then no lane has one; the message says how to serve a finished run); 2 for bad input (a
URL that is not one, a ``--file`` that is not a readable JSON document, a malformed ``--model-name`` or
``--api-base``). The default URL is the recommender's default port, where ``satbench serve`` and a session's
recommender listen. The document is printed on stdout in every case where there is one; the per-lane lines go
to stderr.

Example::

    $ satbench serve runs &
    $ satbench capabilities
    {"lanes": {"dense": {"max_useful_concurrency": 4, "throughput_tok_s": 812.5, "status": "ok", "valid": true,
               "run_id": "20261129T101500Z-3f2a", "measured_at": "2026-11-29T10:19:40Z", ...}}, "nodes": ...}
    $ satbench capabilities --file runs/20261129T101500Z-3f2a --format litellm > litellm-models.yaml
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from satbench.answer.document import read_document
from satbench.answer.models import CapabilityLane, LaneModel, RecommendationsDocument
from satbench.core.lanes import split_key
from satbench.recommender.metrics import document_lanes, exposition, lane_identity, validity_state

__all__ = ["FORMATS", "all_lanes", "capability_fragment", "lane_place_of", "litellm_config", "prometheus_text",
           "unusable_lanes", "unusable_why"]

FORMATS = ("json", "prometheus", "litellm")
SERIAL = 1  # max_parallel_requests of a lane without a usable answer
CAPACITY_RULE = ("its lanes share its hardware, and each lane's max_useful_concurrency was measured with the "
                 "others idle: run together, keep the sum over its lanes of requests in flight / "
                 "max_useful_concurrency at or below 1 (max_useful_concurrency_together splits it evenly)")


# -- the document, read ---------------------------------------------------------------------------------------
def all_lanes(document: RecommendationsDocument) -> list[tuple[str, LaneModel | None]]:
    """``(key, lane)`` of every lane, sorted by key: the document's answers plus, as ``None``, each lane the
    ``nodes`` index lists that ``lanes`` does not answer (never dropped)."""
    lanes: dict[str, LaneModel | None] = dict(document_lanes(document))
    for info in document.nodes.values():
        for key in info.lanes:
            lanes.setdefault(key, None)
    return sorted(lanes.items())


def _node_of(document: RecommendationsDocument, key: str) -> str:
    """The node whose index lists ``key`` (a lane without an answer)."""
    return next(node for node, info in sorted(document.nodes.items()) if key in info.lanes)


def _valid(lane: LaneModel) -> bool | None:
    state = validity_state(lane)
    return None if state == "unknown" else state == "valid"


def unusable_why(document: RecommendationsDocument, key: str, lane: LaneModel | None) -> str | None:
    """Why the lane has no usable answer (never measured, or measured on something else), or None; ``lane``
    None is a lane a node lists without an answer."""
    if lane is None:
        return f"no answer (node {_node_of(document, key)} lists it but the document has no answer)"
    if lane.validity is not None and lane.validity.state == "changed":
        changes = ", ".join(f"{c.field} {c.measured} -> {c.live}" for c in lane.validity.changes)
        return "measured on something else: " + (lane.validity.reason or changes or "the runtime changed")
    if lane.recommended_concurrency is None:
        return f"no answer ({lane.reason or 'status ' + str(lane.status)})"
    return None


def lane_place_of(document: RecommendationsDocument, key: str, lane: LaneModel | None) -> tuple[str, str]:
    """``(node, lane name)`` of lane ``key``; one without an answer is on the node whose index lists it."""
    return (_node_of(document, key), split_key(key)[1]) if lane is None else lane_identity(key, lane)


def _entry(node: str, name: str, lane: LaneModel | None) -> dict[str, Any]:
    if lane is None:  # a lane its node lists without an answer
        return {"node": node, "lane": name, "max_useful_concurrency": None, "throughput_tok_s": None,
                "binding_constraint": None, "status": None, "valid": None, "run_id": None, "measured_at": None,
                "fingerprint_digest": None, "url": None,
                "reason": f"node {node} lists it but the document has no answer"}
    entry: dict[str, Any] = {
        "node": node,
        "lane": name,
        "max_useful_concurrency": lane.recommended_concurrency,
        "throughput_tok_s": lane.throughput_at_recommended_tok_s,
        "binding_constraint": lane.binding_constraint,
        "status": lane.status,
        "valid": _valid(lane),
        "run_id": lane.run_id,
        "measured_at": lane.measured_at,
        "fingerprint_digest": None if lane.fingerprint is None else lane.fingerprint.digest,
        "url": lane.url,
    }
    rate = lane.rate
    if rate is not None:  # the rate answer, where the run walked open-loop rates (answer.rate_analysis)
        entry.update(max_rate_rps=rate.max_rate_rps, max_rate_rpm=rate.max_rate_rpm, rate_status=rate.status,
                     goodput_rps=rate.goodput_rps, rate_binding_objective=rate.binding_objective)
    trace = lane.trace
    if trace is not None:  # the trace answer, where the lane replayed a recorded trace (answer.trace_analysis)
        entry.update(trace_max_factor=trace.max_factor, trace_status=trace.status,
                     trace_max_rate_rps=trace.max_rate_rps, trace_sha256=trace.trace.sha256)
    agents = lane.agents
    if agents is not None:  # the agent answer, where the lane walked agent sessions (answer.agent_analysis)
        entry.update(max_agent_sessions=agents.max_sessions, agents_status=agents.status,
                     agents_valid=agents.validity.valid, agents_tier={"ttft_s": agents.ttft_s,
                                                                      "speed_tok_s": agents.speed_tok_s})
    if lane.reason:
        entry["reason"] = lane.reason
    if lane.partial:  # a run that did not finish (recommender.store): a lower bound, said
        entry["partial"] = lane.partial
    return entry


def _capabilities(document: RecommendationsDocument) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    """``(lanes, nodes)`` of the capability fragment: each entry with the lanes it shares its node's hardware
    with and its even share of the node (``max_useful_concurrency_together``, module docstring)."""
    answers = all_lanes(document)
    places = {key: lane_place_of(document, key, lane) for key, lane in answers}
    peers: dict[str, list[str]] = {}
    for key, (node, _) in places.items():
        peers.setdefault(node, []).append(key)
    lanes: dict[str, Any] = {}
    grouped: dict[str, dict[str, Any]] = {node: {} for node in sorted(document.nodes)}  # a node without lanes too
    for key, lane in answers:
        node, name = places[key]
        entry = _entry(node, name, lane)
        answer = None if lane is None else lane.recommended_concurrency
        entry.update(shares_hardware_with=sorted(k for k in peers[node] if k != key),
                     max_useful_concurrency_together=None if answer is None else max(1, answer // len(peers[node])))
        lanes[key] = entry
        grouped.setdefault(node, {})[name] = {k: v for k, v in entry.items() if k not in ("node", "lane")}
    nodes = {node: {"labels": dict(document.nodes[node].labels) if node in document.nodes else {},
                    "lanes": members, "shared_hardware": len(members) > 1,
                    "capacity_rule": CAPACITY_RULE if len(members) > 1 else None}
             for node, members in grouped.items()}
    return lanes, nodes


def capability_fragment(document: RecommendationsDocument | Mapping[str, Any]) -> dict[str, Any]:
    """The capability fragment of a recommendations document (pure; module docstring). As JSON (v1 or v2) it
    is validated here (``answer.document.read_document``)."""
    document = read_document(document)
    lanes, nodes = _capabilities(document)
    return {"schema": document.schema_read, "generated_at": document.generated_at, "lanes": lanes,
            "nodes": nodes}


def prometheus_text(document: RecommendationsDocument | Mapping[str, Any]) -> str:
    """The text exposition the recommender's ``/metrics`` serves for ``document`` (``answer_families``)."""
    return exposition(document)


# -- LiteLLM --------------------------------------------------------------------------------------------------
def _lookup(overrides: Mapping[str, str], *candidates: str) -> str | None:
    """The first override given under one of ``candidates``."""
    return next((overrides[c] for c in candidates if c in overrides), None)


def _from_manifest(manifest: Mapping[str, Any] | None, key: str, field: str) -> Any:
    for part in ("lanes", "clients"):
        value = ((manifest or {}).get(part) or {}).get(key, {}).get(field)
        if value:
            return value
    return None


def _api_base(url: str) -> str:
    base = url.rstrip("/")
    return base if base.endswith("/v1") else f"{base}/v1"


def litellm_config(
    document: RecommendationsDocument | Mapping[str, Any],
    *,
    model_names: Mapping[str, str] | None = None,
    api_bases: Mapping[str, str] | None = None,
    manifest: Mapping[str, Any] | None = None,
    provider: str = "openai",
    unanswered: str = "serial",
    node_share: str = "alone",
) -> tuple[dict[str, Any], list[str]]:
    """``({"model_list": [...]}, notes)``: one LiteLLM deployment per (node, lane) of ``document`` (pure).

    ``model_names`` renames model groups (keyed by lane name or key); ``api_bases`` gives runtime URLs (keyed
    by lane key, ``node/lane`` or a local lane's name); ``manifest`` is the run's ``manifest.json``, read for
    URLs, model names and ``api_key_env`` the document lacks. ``unanswered``: ``serial`` publishes a lane
    without a usable answer with ``max_parallel_requests: 1``, ``omit`` leaves it out. ``node_share``
    ``together`` publishes each lane's share of its node instead of its answer alone. ``notes`` has one line
    per lane that is not published as measured (module docstring)."""
    document = read_document(document)
    model_names, api_bases = model_names or {}, api_bases or {}
    deployments: list[dict[str, Any]] = []
    notes: list[str] = []
    shares, _ = _capabilities(document)
    for key, lane in all_lanes(document):
        share = CapabilityLane.model_validate(shares[key])
        node, name = share.node, share.lane
        why = unusable_why(document, key, lane)
        if why is not None and unanswered == "omit":
            notes.append(f"lane {key}: {why}; left out of model_list (--unanswered omit)")
            continue
        url = (_lookup(api_bases, key, f"{node}/{name}") or (lane.url if lane is not None else None)
               or _from_manifest(manifest, key, "url"))
        if not url:
            notes.append(f"lane {key}: {why + '; ' if why else ''}left out of model_list: no runtime URL (the "
                         f"document's lane has no url; give --api-base {key}=URL)")
            continue
        measured = int(share.max_useful_concurrency or SERIAL) if why is None else SERIAL
        together = share.max_useful_concurrency_together if why is None else SERIAL
        limit = together if node_share == "together" else measured
        if why is not None:
            notes.append(f"lane {key}: {why}; published with max_parallel_requests {SERIAL}")
        served = (lane.model if lane is not None else None) or _from_manifest(manifest, key, "model") or name
        key_env = _from_manifest(manifest, key, "api_key_env")
        deployments.append({
            "model_name": _lookup(model_names, key, f"{node}/{name}", name) or name,
            "litellm_params": {
                "model": f"{provider}/{served}",
                "api_base": _api_base(str(url)),
                "api_key": f"os.environ/{key_env}" if key_env else "none",
                "max_parallel_requests": limit,
                "weight": limit,
                **({"rpm": rpm} if (rpm := _rpm(lane, why)) is not None else {}),
            },
            "model_info": {
                "id": f"satbench:{node}/{name}",
                "satbench_node": node,
                "satbench_lane": name,
                "satbench_status": share.status,
                "satbench_validity": "unknown" if lane is None else validity_state(lane),
                "satbench_recommended_concurrency": share.max_useful_concurrency,
                "satbench_run_id": share.run_id,
                "satbench_measured_at": share.measured_at,
                "satbench_fingerprint_digest": share.fingerprint_digest,
                "satbench_reason": why or (None if lane is None else lane.reason),
                "satbench_shares_hardware_with": share.shares_hardware_with,
                "satbench_concurrency_together": together,
            },
        })
    return {"model_list": deployments}, notes


def _rpm(lane: LaneModel | None, why: str | None) -> int | None:
    """The lane's rate answer in requests per minute, where it has a usable one (module docstring)."""
    rate = None if lane is None else lane.rate
    if why is not None or rate is None or rate.status not in ("settled", "unsaturated") \
            or rate.max_rate_rpm is None:
        return None
    return max(1, rate.max_rate_rpm)


def unusable_lanes(document: RecommendationsDocument) -> dict[str, str]:
    """Each lane of ``document`` whose answer a router may not use, and why (none: every answer usable)."""
    return {key: why for key, lane in all_lanes(document) if (why := unusable_why(document, key, lane)) is not None}
