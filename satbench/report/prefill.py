"""The peak-prefill part of a lane's report: the answer in a sentence and the walk's rungs.

The answer is the document's ``lanes.<key>.prefill`` (``answer.prefill_analysis``): what llm-d's router
reads as ``peakPrefillThroughput``, and what it holds for (the prompt lengths the runtime counted, the chunk
``-b``/``-ub``). The table lists each rung of the walk (``loadgen.prefill_walk``) as the manifest kept it.
"""

from __future__ import annotations

from satbench.answer.models import PrefillModel

__all__ = ["PREFILL_HEADERS", "prefill_fact", "prefill_sentence", "prefill_table"]

PREFILL_HEADERS = ("users", "prompt tok/s", "interval (95 %)", "requests", "TTFT p50 (ms)", "valid")


def prefill_sentence(prefill: PrefillModel) -> str:
    """"peak prefill: N prompt tokens/s [lo, hi] at c=K (status), prompts of P tokens, -b B -ub U"."""
    if prefill.peak_prompt_tok_s is None:
        return f"peak prefill throughput: not read ({prefill.status}: {prefill.reason})"
    bound = "at least " if prefill.status != "settled" else ""
    said = f"peak prefill throughput: {bound}{prefill.peak_prompt_tok_s:,.0f} prompt tokens/s"
    if prefill.interval:
        said += f" [{prefill.interval[0]:,.0f}, {prefill.interval[1]:,.0f}]"
    said += f" at c={prefill.concurrency} ({prefill.status}: {prefill.reason})"
    if prefill.prompt_tokens:
        low, high = prefill.prompt_tokens
        said += f"; prompts of {low} tokens" if low == high else f"; prompts of {low}-{high} tokens"
    if prefill.batch_tokens is not None:
        said += f", -b {prefill.batch_tokens}" + ("" if prefill.ubatch_tokens is None else
                                                  f" -ub {prefill.ubatch_tokens}")
    return said


def prefill_fact(prefill: PrefillModel) -> str:
    """The answer in a few words, for the lane's answer box: "9,394 prompt tok/s at c=2 (settled)"."""
    if prefill.peak_prompt_tok_s is None:
        return f"not read ({prefill.status})"
    bound = "at least " if prefill.status != "settled" else ""
    return f"{bound}{prefill.peak_prompt_tok_s:,.0f} prompt tok/s at c={prefill.concurrency} ({prefill.status})"


def prefill_table(prefill: PrefillModel) -> tuple[tuple[str, ...], list[list[str]]]:
    """The walk's rungs: users, prompt tokens/s and its interval, requests, median TTFT, valid."""
    rows = [[str(r.concurrency), f"{r.prompt_tok_s:,.0f}",
             "" if r.interval is None else f"{r.interval[0]:,.0f} - {r.interval[1]:,.0f}", str(r.requests),
             "" if r.median_ttft_s is None else f"{r.median_ttft_s * 1000:.0f}",
             "yes" if r.valid else f"no: {r.reason}"]
            for r in prefill.rungs]
    return PREFILL_HEADERS, rows
