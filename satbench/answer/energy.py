"""Energy and cost at an answer: the figures of the rung an answer was read at (``core.energy`` defines them).

The concurrency answer's rung and the rate answer's (the highest rate rung at or below the answer that passed)
carry what they drew, per token and per kilowatt, and with a node price (``policy.cost``) what a million output
tokens cost there. A rung with no energy reading says so (``reason``), never a figure from elsewhere.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from satbench.answer.policy import Cost
from satbench.core.energy import cost_per_million_tokens, tokens_per_s_per_kw
from satbench.core.figures import StepFigures

__all__ = ["NONE_READ", "RECORDS_READ", "EnergyModel", "energy_at"]

NONE_READ = ("no energy reading in this rung's window: no GPU energy counter or power reading, and no CPU "
              "package counter (cpu_energy_up 0: not exposed, or readable by root only)")
RECORDS_READ = "judged from the records, which hold no energy: it is read from the exporter's series in Prometheus"


class EnergyModel(BaseModel):
    """Energy and cost at an answer, from the rung it was read at (``core.energy``)."""

    model_config = ConfigDict(extra="forbid")

    concurrency: int = Field(description="the rung's concurrency (its in-flight cap on a rate rung)")
    rate_rps: float | None = Field(None, description="the rung's rate, on a rate rung")
    scope: Literal["gpu", "cpu-package"] | None = Field(
        description="what the energy covers: the lane's GPUs, or the host's CPU package where there is no GPU; "
                    "never the node's wall power")
    source: str | None = Field(description="counter (NVML's total-energy counter), samples (power readings), "
                                           "counter+samples, or rapl (the CPU package)")
    simulated: bool | None = Field(description="true: the simulator's modelled draw, not a reading")
    watts: float | None = Field(description="mean draw over the rung's window, watts")
    joules_per_token: float | None = Field(description="energy per output token, joules")
    tokens_per_joule: float | None = Field(description="output tokens per joule")
    tok_s_per_kw: float | None = Field(description="output tokens per second per kilowatt drawn")
    throughput_tok_s: float = Field(description="the rung's output tokens per second")
    price_per_hour: float | None = Field(description="the node's price per hour (policy.cost)")
    currency: str | None = None
    cost_per_million_tokens: float | None = Field(description="what a million output tokens cost at this rung's "
                                                              "throughput on a node at that price")
    reason: str | None = Field(None, description="why a figure is missing")


def energy_at(step: StepFigures | None, cost: Cost, node: str, unread: str = NONE_READ) -> EnergyModel | None:
    """The energy and cost figures at ``step`` (None: no rung, no answer); ``unread``: why a rung without a
    reading has none."""
    if step is None:
        return None
    e = step.energy
    price = cost.price(node)
    source = e.gpu_source if e.scope == "gpu" else "rapl" if e.scope == "cpu-package" else None
    reason = None if e.scope is not None else unread
    if reason is None and e.joules_per_token is None:
        reason = "no output tokens in this rung's window"
    return EnergyModel(
        concurrency=step.concurrency, rate_rps=step.rate_rps, scope=e.scope, source=source,
        simulated=step.memory_bytes.gpu_simulated if e.scope == "gpu" else None if e.scope is None else False,
        watts=e.watts, joules_per_token=e.joules_per_token, tokens_per_joule=e.tokens_per_joule,
        tok_s_per_kw=tokens_per_s_per_kw(step.throughput_tok_s, e.watts), throughput_tok_s=step.throughput_tok_s,
        price_per_hour=price, currency=None if price is None else cost.currency,
        cost_per_million_tokens=cost_per_million_tokens(price, step.throughput_tok_s), reason=reason)
