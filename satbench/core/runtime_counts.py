"""Step figures from the runtime's own per-request counts: what its prompt cache and its draft model saved.

A llama-server reports per request how many prompt tokens its prompt cache served (``cache_n``, or
``usage.prompt_tokens_details.cached_tokens``) and, with a draft model, how many tokens were drafted and how
many of those the target accepted (``draft_n``, ``draft_n_accepted``); the records keep them
(``core.records.RequestRecord``). Over the step's finished requests (successful, ended inside the window:
those ``requests`` counts):

- ``cache_hit_share`` = sum of cached prompt tokens / sum of prompt tokens, over the requests that reported
  both (``cached_prompt_tokens`` over ``cache_reported_prompt_tokens``); ``None`` when none did;
- ``spec_acceptance_rate`` = accepted / drafted tokens (``draft_accepted_tokens`` over ``draft_tokens``),
  over the requests that reported both; ``None`` when nothing was drafted.

The sums weigh each request by its tokens, so a few long prompts that hit the cache count as much as they
saved. Pure: ``core.step_figures`` calls it for the records path, and the load generator publishes the
result with every other client figure (``loadgen_step_figure``), which is what the Prometheus path reads.
"""

from __future__ import annotations

from collections.abc import Iterable

from satbench.core.records import RequestRecord

__all__ = ["runtime_count_figures"]


def runtime_count_figures(finished: Iterable[RequestRecord]) -> dict[str, float | int | None]:
    """``cache_hit_share``, ``spec_acceptance_rate`` and the token sums behind them (module docstring)."""
    cached = prompt = drafted = accepted = 0
    cache_seen = draft_seen = False
    for rec in finished:
        if rec.cached_prompt_tokens is not None and rec.prompt_tokens is not None:
            cache_seen = True
            cached += rec.cached_prompt_tokens
            prompt += rec.prompt_tokens
        if rec.draft_tokens is not None and rec.draft_accepted_tokens is not None:
            draft_seen = True
            drafted += rec.draft_tokens
            accepted += rec.draft_accepted_tokens
    return {
        "cache_hit_share": cached / prompt if cache_seen and prompt > 0 else None,
        "cached_prompt_tokens": cached if cache_seen else None,
        "cache_reported_prompt_tokens": prompt if cache_seen else None,
        "spec_acceptance_rate": accepted / drafted if drafted > 0 else None,
        "draft_tokens": drafted if draft_seen else None,
        "draft_accepted_tokens": accepted if draft_seen else None,
    }
