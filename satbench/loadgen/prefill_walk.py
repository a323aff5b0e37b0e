"""A lane's peak-prefill walk: long prompts, one output token each, at rising concurrency (``[loadgen.prefill]``).

llm-d's router predicts a request's TTFT as the prompt tokens in flight over the lane's peak prefill throughput,
which operators measure today by hand from single requests (``CHUNK_SIZE / median TTFT``): one request leaves the
accelerator idle between its chunks and between requests, so that figure is a floor. Here the lane is asked what
it can do: closed-loop rungs of ``prompt_tokens``-token prompts and ``max_tokens`` 1, so each request is its
prefill and the one token it generates; 1, 2, 4, ... users (``core.prefill_peak.next_prefill_rung``) until
doublings no longer pay (the ladder's rule against ``decide_gain``, 0.10 where unset; from twice the slots where
more than one prompt fits a step of ``-b``, which the session's fingerprint says), or ``max_concurrency``. A
prompt is bounded by a slot's context (``/props``) and sized in the runtime's own tokens: ``/tokenize``
(``loadgen.lane_probe``) says how many tokens its tokenizer makes of a word of the walk's text (a synthetic
vocabulary made three of one; where it does not answer, a word is taken for a token). Each rung is a ``StepRun``
of the ladder's own (warm-up, window, its sequential look against the rung below, records written as each request
ends), with prompts of its own (the ``-prefill`` tag in the request ids and prompt heads: a prompt cache serves
none of another rung's), never published as a rung of the ladder; the manifest keeps each rung's
``core.prefill.PrefillWindow``. A rung the lane could not serve (invalid) ends the walk: a prompt the runtime
refuses is refused at every rung above it too.

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

from satbench.core.figures import StepFigures
from satbench.core.manifest import StepWindow
from satbench.core.prefill import PrefillWalk, PrefillWindow, prefill_window, probe_prompt_tokens
from satbench.core.prefill_peak import PrefillRung, next_prefill_rung, saturating_concurrency
from satbench.core.step_figures import compute_step_figures
from satbench.loadgen.config import LengthDist, LoadgenConfig, PrefillConfig, WorkloadConfig
from satbench.loadgen.step import StepRun
from satbench.loadgen.workload import PromptText

__all__ = ["DEFAULT_GAIN", "MIN_REQUESTS", "PrefillStepper", "prefill_line", "probe_config"]

DEFAULT_GAIN = 0.10  # the ladder's plateau gain where the run sets no decide_gain
STARVED_AFTER_S = 5.0  # the least a rung's drain follows its window's requests (module docstring)
MIN_REQUESTS = 10  # a peak's rung (llm-d's consumer applies a record of at least 10 samples)
HOLD_FOR_REQUESTS_ONLY = 1e9  # the hold's interval bound (loadgen.stop_rule.held), never binding


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
        """The walk's text: enough words for its prompts down to half a token a word."""
        return PromptText(2 * cfg.prompt_tokens + 8, config.workload.seed, nonce=f"{run_id}:prefill")

    def next_rung(self) -> int | None:
        if self.ended is not None:
            return None
        return next_prefill_rung(self.rungs, min_gain_per_doubling=self.gain,
                                 max_concurrency=self.cfg.max_concurrency, saturating=self.saturating)

    def measured(self, step: StepRun, measured: StepWindow) -> PrefillWindow:
        """Takes a finished rung (its records read back once): its window joins the walk; an invalid rung ends it."""
        records = list(step.records())
        figures = compute_step_figures(records, measured, batch_s=self.config.batch_s)
        window = prefill_window(records, figures, measured.start, measured.end)
        self.walk = self.walk.with_window(window)
        self.rungs.append(PrefillRung(window.concurrency, window.prompt_tok_s, window.interval,
                                      window.requests if window.valid else 0))
        if window.valid:
            self.reference = figures
        else:
            self.ended = f"c={window.concurrency} could not be used: {window.reason}"
        return window


def prefill_line(lane: str, window: PrefillWindow) -> str:
    """The line a finished prefill rung leaves."""
    ci = "" if window.interval is None else f" [{window.interval[0]:.0f}, {window.interval[1]:.0f}]"
    ttft = "" if window.median_ttft_s is None else f", TTFT p50 {window.median_ttft_s * 1e3:.0f} ms"
    line = (f"  {lane} prefill c={window.concurrency}: {window.prompt_tok_s:.0f} prompt tok/s{ci}{ttft}, "
            f"{window.requests} requests")
    return line + ("" if window.valid else f" (invalid: {window.reason})")
