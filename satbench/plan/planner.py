"""How many nodes of each kind meet a target load within the objectives: the arithmetic of ``satbench plan``.

**Rate** (``R`` requests/s of the measured workload, open loop). A router that spreads arrivals evenly over
``n`` identical nodes gives each ``R / n``; where it picks a node at random for each request, each node's
arrivals are a random thinning of the fleet's, and a thinned Poisson stream is a Poisson stream of rate
``R / n`` (Renyi's theorem; round-robin is smoother still). So each node sees what its rate answer was measured
under, and the fleet meets the target where each node does: ``n = ceil(R / r)``, ``r`` the node's rate answer
read at its conservative end (``satbench.plan.answers``), the most requests/s at which at least the policy's
attainment target of requests met every objective. **Users** (``U`` concurrent users or sessions, closed loop):
each node holds at most ``c`` of them within its checks, ``c`` its concurrency answer read the same way, and
the busiest of ``n`` nodes holds ``ceil(U / n)``: ``n = ceil(U / c)``.

**Margin.** ``headroom`` is how far the conservative figure lies above each node's share (``r n / R - 1``);
``nodes_at_point`` the count the answer itself would give (fewer where the interval is wide: the nodes the
interval costs). One node fewer is read against the answer: where each node's share would lie above the
interval's upper end (or the next concurrency rung measured), the answer says it misses the target
(``one_fewer_fails`` true); where it lies within the interval the measurement cannot rule it out, and the plan
says its margin is the price of the interval (``one_fewer_fails`` null).

**Kinds.** The nodes of a model lane are grouped by kind (what their fingerprint says decides capacity); a kind
measured on several nodes plans from the least of their conservative figures. Each kind gets its own count,
and ``cheapest`` is the kind needing the fewest nodes. Kinds are not mixed in one plan: a router that spreads
evenly over unequal nodes overloads the slower ones first.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import datetime
from itertools import groupby

from pydantic import BaseModel, Field

from satbench.answer.models import RecommendationsDocument
from satbench.plan.answers import NodeAnswer, Target, Unusable, read_answer
from satbench.recommender.capabilities import all_lanes, lane_place_of

__all__ = ["AnswerUsed", "KindPlan", "LanePlan", "NotUsed", "Plan", "lane_names", "nodes_needed", "plan"]

UNITS: dict[Target, str] = {"rate": "requests/s", "users": "users"}


class AnswerUsed(BaseModel):
    key: str
    node: str
    run_id: str
    measured_at: str | None
    age_s: float | None
    validity: str
    status: str
    per_node: float = Field(description="the figure read at its conservative end")
    point: float = Field(description="the answer as the document states it")
    upper: float | None = Field(description="where the answer says the lane fails (null: nothing measured above)")
    basis: str


class NotUsed(BaseModel):
    key: str
    node: str
    why: str


class KindPlan(BaseModel):
    kind: str = Field(description="the fingerprint's capacity fields, hashed")
    said: str
    slots: int | None
    concurrency: int | None = Field(description="the lane's concurrency answer: the in-flight cap per node")
    nodes: int = Field(description="how many nodes of this kind meet the target")
    nodes_in_fleet: int = Field(description="nodes of this kind the document answers for")
    nodes_at_point: int = Field(description="the count the answers' point values would give")
    per_node: float = Field(description="each node's conservative figure (the least of the kind's answers)")
    load_per_node: float = Field(description="each node's share of the target")
    headroom: float = Field(description="per_node / load_per_node - 1")
    one_fewer_fails: bool | None = Field(description="true: one node fewer misses by the answer; null: not ruled "
                                                     "out by its interval")
    one_fewer: str
    answers: list[AnswerUsed]


class LanePlan(BaseModel):
    lane: str
    kinds: list[KindPlan]
    cheapest: str | None = Field(description="the kind needing the fewest nodes; null: none usable")
    not_used: list[NotUsed]


class Plan(BaseModel):
    target: Target
    amount: float
    unit: str
    attainment_target: float
    objectives: dict[str, float | None]
    run_id: str
    generated_at: str
    lanes: list[LanePlan]


def nodes_needed(amount: float, per_node: float) -> int:
    """``ceil(amount / per_node)``, at least 1; a quotient within 1e-9 of a whole number is that number."""
    quotient = amount / per_node
    return max(1, math.ceil(quotient - 1e-9 * max(1.0, quotient)))


def _one_fewer(target: Target, amount: float, nodes: int, lowest: NodeAnswer) -> tuple[bool | None, str]:
    unit = UNITS[target]
    if nodes == 1:
        return None, "one node is the fewest"
    share = amount / (nodes - 1) if target == "rate" else float(math.ceil(amount / (nodes - 1)))
    said = f"{nodes - 1} nodes would carry {share:.4g} {unit} each"
    # a rate above the interval's upper end fails; users at the next rung measured are where the walk stopped
    if lowest.upper is not None and (share > lowest.upper or (target == "users" and share >= lowest.upper)):
        where = "where the answer says the lane fails" if target == "rate" else "where the lane's walk stopped"
        return True, f"{said}, at or above {lowest.upper:.4g} {where}: they miss the target"
    if share > lowest.point:
        between = "within its interval" if target == "rate" else "below the next rung measured"
        return None, f"{said}, above the answer {lowest.point:.4g} but {between}: likely short, not ruled out"
    return None, (f"{said}, within the answer {lowest.point:.4g}: enough if the answer is right; the extra node is "
                  f"the margin its conservative end {lowest.per_node:.4g} asks for")


def _kind_plan(target: Target, amount: float, answers: Sequence[NodeAnswer]) -> KindPlan:
    lowest = min(answers, key=lambda a: (a.per_node, a.key))
    nodes = nodes_needed(amount, lowest.per_node)
    load = amount / nodes if target == "rate" else float(math.ceil(amount / nodes))
    fails, said = _one_fewer(target, amount, nodes, lowest)
    concurrencies = [a.concurrency for a in answers if a.concurrency is not None]
    return KindPlan(
        kind=lowest.kind, said=lowest.kind_said, slots=lowest.slots,
        concurrency=min(concurrencies) if concurrencies else None, nodes=nodes,
        nodes_in_fleet=len({a.node for a in answers}),
        nodes_at_point=nodes_needed(amount, min(a.point for a in answers)), per_node=lowest.per_node,
        load_per_node=load, headroom=lowest.per_node / load - 1, one_fewer_fails=fails, one_fewer=said,
        answers=[AnswerUsed(key=a.key, node=a.node, run_id=a.run_id, measured_at=a.measured_at, age_s=a.age_s,
                            validity=a.validity, status=a.status, per_node=a.per_node, point=a.point,
                            upper=a.upper, basis=a.basis) for a in answers])


def lane_names(document: RecommendationsDocument) -> list[str]:
    """The model lanes (lane names across the nodes) of ``document``, sorted."""
    return sorted({lane_place_of(document, key, lane)[1] for key, lane in all_lanes(document)})


def _lane_plan(target: Target, amount: float, name: str, readings: Sequence[NodeAnswer | Unusable]) -> LanePlan:
    usable = sorted((r for r in readings if isinstance(r, NodeAnswer)), key=lambda a: (a.kind, a.key))
    kinds = [_kind_plan(target, amount, list(group)) for _, group in groupby(usable, key=lambda a: a.kind)]
    kinds.sort(key=lambda k: (k.nodes, k.kind))
    return LanePlan(lane=name, kinds=kinds, cheapest=kinds[0].kind if kinds else None,
                    not_used=[NotUsed(key=r.key, node=r.node, why=r.why) for r in readings
                              if isinstance(r, Unusable)])


def plan(document: RecommendationsDocument, target: Target, amount: float, *, lanes: Sequence[str] | None = None,
         unchecked: bool = False, now: datetime | None = None) -> Plan:
    """The plan for ``amount`` (requests/s or users) over each model lane of ``document`` (every one, or
    ``lanes``), from the answers it may rest on (module docstring). Pure."""
    from satbench.answer.policy import objectives_of

    if not amount > 0 or not math.isfinite(amount):
        raise ValueError(f"the target {amount!r}: a finite number above 0")
    readings: dict[str, list[NodeAnswer | Unusable]] = {}
    for key, lane in all_lanes(document):
        reading = read_answer(document, key, lane, target, unchecked=unchecked, now=now)
        readings.setdefault(reading.lane, []).append(reading)
    chosen = sorted(readings) if lanes is None else list(lanes)
    objectives = objectives_of(document.policy)
    return Plan(target=target, amount=amount, unit=UNITS[target], attainment_target=document.policy.attainment_target,
                objectives={"ttft_s": objectives.ttft_s, "tpot_s": objectives.tpot_s,
                            "pause_excess_s": objectives.pause_excess_s, "e2e_s": objectives.e2e_s},
                run_id=document.run_id, generated_at=document.generated_at,
                lanes=[_lane_plan(target, amount, name, readings.get(name, [])) for name in chosen])
