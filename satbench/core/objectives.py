"""Per-request objectives and the goodput they define: how many requests a rung served within every objective.

The serving literature's capacity figure is goodput: the rate of requests that meet every latency objective,
and the highest load at which a target share of them does (DistServe, Zhong et al., OSDI 2024: 90 %). A
request *attains* when it succeeded and

- its TTFT is at most ``ttft_s`` (plus ``ttft_s_per_1k_prompt`` per thousand prompt tokens: a deadline that
  grows with the prompt, as Etalon and Andes argue a user expects of a long document; off by default, since an
  operator's objective is usually one figure; ``Objectives.ttft_deadline_s`` is the one definition of a
  request's TTFT deadline, and every part that judges a first token calls it: goodput here, the load
  generator's looks at requests still waiting, the concurrency verdict's count of requests past their own
  deadline through these figures, and the truth the tests measure against),
- its TPOT (the mean pace of its tokens after the first) is at most ``tpot_s`` (DistServe's per-request
  decode objective),
- its pause excess (how much longer than its decode step another request's prefill held it, ``core.stalls``)
  is at most ``pause_excess_s``,
- its end-to-end latency is at most ``e2e_s``,

each objective unchecked where ``None``. In open loop TTFT and e2e are taken from the request's *intended*
send time, so a client that fell behind its schedule, or a server stall that kept it from sending, cannot
hide the wait (coordinated omission). A failed request attains nothing; one still running when the drain
stopped following it attains only if none of its figures so far already missed (its lower bounds).

``Objectives`` is policy-free data: the recommender builds it from its policy
(``answer.policy.Policy.objectives``), the load generator is handed it by the session, and the step
figures count, per rung, the requests judged, those that attained, and the misses per objective
(``attained_requests``, ``judged_requests``, ``objective_misses``), with the goodput they imply
(``goodput_rps``, ``goodput_tok_s``, ``attainment``).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["OBJECTIVE_NAMES", "Objectives"]

OBJECTIVE_NAMES = ("ttft", "tpot", "pause", "e2e", "error")


@dataclass(frozen=True, slots=True)
class Objectives:
    ttft_s: float | None = None
    ttft_s_per_1k_prompt: float = 0.0
    tpot_s: float | None = None
    pause_excess_s: float | None = None
    e2e_s: float | None = None

    def ttft_deadline_s(self, prompt_tokens: int | None) -> float | None:
        """The request's own TTFT deadline: ``ttft_s`` plus ``ttft_s_per_1k_prompt`` per thousand of its prompt
        tokens (an unknown count adds nothing); ``None`` where TTFT is unchecked."""
        if self.ttft_s is None:
            return None
        return self.ttft_s + self.ttft_s_per_1k_prompt * (prompt_tokens or 0) / 1000.0

    def ttft_overdue(self, waited_s: float, prompt_tokens: int | None) -> bool:
        """Has a request still waiting for its first token after ``waited_s`` already missed its TTFT objective
        (its own deadline passed)? What a look counts of a request in flight."""
        deadline = self.ttft_deadline_s(prompt_tokens)
        return deadline is not None and waited_s > deadline

    def misses(self, *, ok: bool, ttft_s: float | None, tpot_s: float | None, pause_excess_s: float | None,
               e2e_s: float | None, prompt_tokens: int | None, finished: bool = True) -> list[str]:
        """The objectives one request missed (``error`` when it failed), empty when it attained. A request
        that has not finished (``finished=False``) misses what its figures so far already passed, and
        ``error`` otherwise: it was not served within the drain that followed it."""
        out: list[str] = []
        if ttft_s is not None and self.ttft_overdue(ttft_s, prompt_tokens):
            out.append("ttft")
        if self.tpot_s is not None and tpot_s is not None and tpot_s > self.tpot_s:
            out.append("tpot")
        if self.pause_excess_s is not None and pause_excess_s is not None and pause_excess_s > self.pause_excess_s:
            out.append("pause")
        if self.e2e_s is not None and e2e_s is not None and e2e_s > self.e2e_s:
            out.append("e2e")
        if not out and (not ok or not finished):
            out.append("error")
        return out
