"""The time one engine step (one ``llama_decode`` call) takes, as a pure function of what is in the batch.

llama-server builds one batch per loop iteration: one token for every slot that is generating, then prompt
tokens of slots that are still in prefill, up to ``batch`` tokens; ``llama_decode`` then runs it in
micro-batches of ``ubatch`` tokens. The model here follows that shape:

    step_ms = step_overhead_ms
            + sum over micro-batches u of  weights_ms + expert_ms * distinct_experts(len(u))
            + n_decode * decode_ms_per_token + n_prompt * prefill_ms_per_token

The per-micro-batch term is the memory-bound part (the weights are streamed once per micro-batch,
whatever its size); the per-token terms are the compute-bound part, so a decode step is flat at small batch
and grows linearly at large batch. For a Mixture-of-Experts model only the experts that at least one token
of the micro-batch routes to are read: with ``E`` experts and ``k`` per token, drawn independently, the
expected number of distinct experts for ``n`` tokens is ``E * (1 - (1 - k/E) ** n)``, which grows with the
batch and saturates at ``E``. Everything is scaled by ``time_scale``.
"""

from __future__ import annotations

from satbench.simulator.profile import CostModel

__all__ = ["distinct_experts", "microbatch_sizes", "step_seconds"]


def distinct_experts(cost: CostModel, n_tokens: int) -> float:
    """Expected number of distinct routed experts that ``n_tokens`` tokens activate (0 for a dense model)."""
    if cost.experts <= 0 or n_tokens <= 0:
        return 0.0
    e, k = cost.experts, cost.experts_per_token
    return e * (1.0 - (1.0 - k / e) ** n_tokens)


def microbatch_sizes(n_tokens: int, ubatch: int) -> list[int]:
    full, rest = divmod(n_tokens, ubatch)
    return [ubatch] * full + ([rest] if rest else [])


def step_seconds(
    cost: CostModel, n_decode: int, n_prompt: int, ubatch: int, time_scale: float = 1.0
) -> float:
    """Model time of one step with ``n_decode`` generating slots and ``n_prompt`` prompt tokens."""
    n = n_decode + n_prompt
    if n <= 0:
        return 0.0
    ms = cost.step_overhead_ms
    for size in microbatch_sizes(n, ubatch):
        ms += cost.weights_ms + cost.expert_ms * distinct_experts(cost, size)
    ms += n_decode * cost.decode_ms_per_token + n_prompt * cost.prefill_ms_per_token
    return ms * time_scale / 1000.0
