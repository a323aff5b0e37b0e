"""A lane's peak-prefill walk: long prompts, one output token each, at rising concurrency (``[loadgen.prefill]``).

llm-d's router predicts a request's TTFT as the prompt tokens in flight over the lane's peak prefill
throughput, which operators measure today by hand from single requests (``CHUNK_SIZE / median TTFT``): one
request leaves the accelerator idle between its chunks and between requests, so that figure is a floor. Here
the lane is asked what it can do: closed-loop rungs of ``prompt_tokens``-token prompts and ``max_tokens`` 1, so
each request is its prefill and the one token it generates; 1, 2, 4, ... users
(``core.prefill_peak.next_prefill_rung``) until doublings no longer pay (the ladder's rule against
``decide_gain``, 0.10 where unset; from twice the slots where ``/props`` says them and ``-b`` and more than one
prompt fits a step), or ``max_concurrency``. A prompt is bounded by a slot's context (``/props``)
and sized in the runtime's own tokens: ``/tokenize`` says how many tokens its tokenizer makes of a word of the
walk's text (a synthetic vocabulary made three of one; where it does not answer, a word is taken for a token).
Each rung is a ``StepRun`` of the ladder's own (warm-up, window, its sequential look against the rung below,
records written as each request ends), with prompts of its own (the ``-prefill`` tag in the request ids and
prompt heads: a prompt cache serves none of another rung's), never published as a rung of the ladder; the
manifest keeps each rung's ``core.prefill.PrefillWindow``. A rung the lane could not serve (invalid) ends the
walk: a prompt the runtime refuses is refused at every rung above it too.

``probe_config``: the run's config with the walk's workload; a rung held on (``loadgen.stop_rule.held``, up to
``hold_max_window_s``) until its window has ``MIN_REQUESTS`` requests, the least a peak is read from; and a
drain that follows the window's requests for at most a window's length (at least ``STARVED_AFTER_S``) where
the ladder's follows them to the request timeout: llama-server fills a step's prompt tokens slot by slot, in
slot order, so under a steady stream of long prompts the highest busy slot can wait for as long as the others
keep busy (the simulator's engine does the same, and a real llama-server on the tiny models: at c=4 a request
waited out the drain). The rung's figure is the tokens evaluated, which a starved request does not change; its
own prefill, never begun, has nothing to credit. The rest (windows, objectives) is the run's.
"""

from __future__ import annotations

import contextlib
from typing import Any

import aiohttp

from satbench.core.figures import StepFigures
from satbench.core.prefill import PrefillWalk, PrefillWindow, prefill_window, probe_prompt_tokens
from satbench.core.prefill_peak import PrefillRung, next_prefill_rung, saturating_concurrency
from satbench.core.step_figures import compute_step_figures
from satbench.loadgen.config import LaneConfig, LengthDist, LoadgenConfig, PrefillConfig, WorkloadConfig
from satbench.loadgen.step import StepRun
from satbench.loadgen.workload import PromptText

__all__ = ["DEFAULT_GAIN", "MIN_REQUESTS", "PrefillStepper", "prefill_line", "probe_config", "props_batch",
           "slot_context", "tokens_per_word"]

DEFAULT_GAIN = 0.10  # the ladder's plateau gain where the run sets no decide_gain
STARVED_AFTER_S = 5.0  # the least a rung's drain follows its window's requests (module docstring)
MIN_REQUESTS = 10  # a peak's rung (llm-d's consumer applies a record of at least 10 samples)
HOLD_FOR_REQUESTS_ONLY = 1e9  # the hold's interval bound (loadgen.stop_rule.held), never binding


async def tokens_per_word(lane: LaneConfig, text: PromptText, words: int = 512,
                          timeout_s: float = 10.0) -> float | None:
    """How many tokens the lane's tokenizer makes of one word of the walk's text (``POST /tokenize`` of its first
    ``words`` words); None where the lane does not answer it."""
    body = {"content": text.prompt(words)}
    tokens: Any = None
    with contextlib.suppress(TimeoutError, aiohttp.ClientError, OSError, ValueError):
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=timeout_s)) as session, \
                session.post(lane.url + "/tokenize", json=body) as resp:
            if resp.status == 200:
                answer = await resp.json(content_type=None)
                tokens = answer.get("tokens") if isinstance(answer, dict) else None
    return len(tokens) / min(words, text.max_tokens) if isinstance(tokens, list) and tokens else None


async def slot_context(lane: LaneConfig, timeout_s: float = 3.0) -> int | None:
    """A slot's context in tokens as the runtime says (``/props`` ``default_generation_settings.n_ctx``);
    None where it does not answer or does not say."""
    params = {"model": lane.model, "autoload": "false"} if lane.model else None
    props: Any = None
    with contextlib.suppress(TimeoutError, aiohttp.ClientError, OSError, ValueError):
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=timeout_s)) as session, \
                session.get(lane.url + "/props", params=params) as resp:
            if resp.status == 200:
                props = await resp.json(content_type=None)
    settings = props.get("default_generation_settings") if isinstance(props, dict) else None
    n_ctx = settings.get("n_ctx") if isinstance(settings, dict) else None
    return n_ctx if isinstance(n_ctx, int) and not isinstance(n_ctx, bool) and n_ctx > 0 else None


def props_batch(props: Any) -> int | None:
    """The logical batch (``-b``) where ``/props`` says it (``n_batch``, its generation settings', the
    simulator's), else None."""
    if not isinstance(props, dict):
        return None
    settings = props.get("default_generation_settings")
    sim = props.get("simulator")
    for value in (props.get("n_batch"), settings.get("n_batch") if isinstance(settings, dict) else None,
                  sim.get("batch") if isinstance(sim, dict) else None):
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


def probe_config(config: LoadgenConfig, prompt_tokens: int) -> LoadgenConfig:
    """``config`` sending ``prompt_tokens``-token prompts and one output token (module docstring)."""
    workload = WorkloadConfig(seed=config.workload.seed, temperature=config.workload.temperature,
                              prompt_tokens=LengthDist(kind="fixed", value=prompt_tokens),
                              output_tokens=LengthDist(kind="fixed", value=1), ignore_eos=True)
    drain = config.request_timeout_s if config.drain_timeout_s is None else config.drain_timeout_s
    return config.model_copy(update={
        "workload": workload, "drain_timeout_s": min(drain, max(STARVED_AFTER_S, config.max_window_s)),
        # a rung is held on until it has the requests the peak needs (held for them only: its output-token
        # interval is a count of one-token requests, not the rung's prompt tokens/s)
        "min_requests": max(config.min_requests, MIN_REQUESTS), "usable_ci_rel": HOLD_FOR_REQUESTS_ONLY,
        "hold_max_window_s": config.hold_max_window_s or config.decide_max_window_s})


class PrefillStepper:
    """The walk's state for one lane: the rungs so far and the next one to measure (module docstring)."""

    def __init__(self, config: LoadgenConfig, cfg: PrefillConfig, slot_ctx: int | None,
                 slots: int | None = None, batch: int | None = None, per_word: float | None = None) -> None:
        prompt = probe_prompt_tokens(cfg.prompt_tokens, slot_ctx)
        self.cfg = cfg
        # the workload counts a prompt in words of its text; the runtime, in its tokens
        self.config = probe_config(config, max(1, int(prompt / per_word)) if per_word else prompt)
        self.gain = config.decide_gain if config.decide_gain is not None else DEFAULT_GAIN
        self.walk = PrefillWalk(prompt_tokens=prompt, slot_context=slot_ctx, tokens_per_word=per_word, slots=slots,
                                batch=batch)
        self.saturating = saturating_concurrency(slots, batch, prompt)
        self.rungs: list[PrefillRung] = []
        self.reference: StepFigures | None = None
        self.ended: str | None = None

    @staticmethod
    def text(config: LoadgenConfig, cfg: PrefillConfig, run_id: str) -> PromptText:
        """The walk's text: enough words for its prompts at a token a word or more."""
        return PromptText(cfg.prompt_tokens + 8, config.workload.seed, nonce=f"{run_id}:prefill")

    def next_rung(self) -> int | None:
        if self.ended is not None:
            return None
        return next_prefill_rung(self.rungs, min_gain_per_doubling=self.gain,
                                 max_concurrency=self.cfg.max_concurrency, saturating=self.saturating)

    def measured(self, step: StepRun, figures: StepFigures, start: float, end: float) -> PrefillWindow:
        """Takes a finished rung's figures: its window joins the walk; an invalid rung ends it."""
        window = prefill_window(list(step.records()), figures, start, end)
        self.walk = self.walk.with_window(window)
        self.rungs.append(PrefillRung(window.concurrency, window.prompt_tok_s, window.interval,
                                      window.requests if window.valid else 0))
        if window.valid:
            self.reference = figures
        else:
            self.ended = f"c={window.concurrency} could not be used: {window.reason}"
        return window

    def figures(self, step: StepRun, window: Any) -> StepFigures:
        return compute_step_figures(list(step.records()), window, batch_s=self.config.batch_s)


def prefill_line(lane: str, window: PrefillWindow) -> str:
    """The line a finished prefill rung leaves."""
    ci = "" if window.interval is None else f" [{window.interval[0]:.0f}, {window.interval[1]:.0f}]"
    ttft = "" if window.median_ttft_s is None else f", TTFT p50 {window.median_ttft_s * 1e3:.0f} ms"
    line = (f"  {lane} prefill c={window.concurrency}: {window.prompt_tok_s:.0f} prompt tok/s{ci}{ttft}, "
            f"{window.requests} requests")
    return line + ("" if window.valid else f" (invalid: {window.reason})")
