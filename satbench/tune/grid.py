"""The candidates of a tune: server settings (slots, batch, micro-batch, context) and the order they are walked.

A candidate is one way to start a lane's server: ``--parallel`` slots, ``-b`` batch, ``-ub`` micro-batch and
``ctx_per_slot`` tokens of context per slot (``-c`` is ``parallel * ctx_per_slot``). The default grid sets
batch = ubatch: llama-server builds one batch of up to ``-b`` tokens per ``llama_decode`` (a token of every
decoding slot plus prompt chunks) and runs it in micro-batches of ``-ub``; every decoding slot gets its next
token only when the whole batch is done, so the decode pause is set by ``-b``, and a chunked prefill needs
``-b`` small, not only ``-ub``.

Order (``grid``): batches from largest to smallest (then ubatch, largest first), slots ascending within a
batch. The largest batch has the best prefill efficiency, so it is measured first; if it holds every
constraint, the smaller batches are dominated (``satbench.tune.search``).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Candidate", "grid"]


@dataclass(frozen=True, slots=True, order=True)
class Candidate:
    parallel: int
    batch: int
    ubatch: int
    ctx_per_slot: int

    @property
    def ctx_size(self) -> int:
        """llama-server's ``-c``: the whole KV context, shared by the slots."""
        return self.parallel * self.ctx_per_slot

    @property
    def id(self) -> str:
        return f"np{self.parallel}-b{self.batch}-ub{self.ubatch}-c{self.ctx_size}"

    def flags(self, runtime: str) -> str:
        """The server flags of this candidate: llama-server's, or ``satbench sim``'s for a simulator lane."""
        if runtime == "simulator":
            return (f"satbench sim --slots {self.parallel} --batch {self.batch} --ubatch {self.ubatch} "
                    f"-c {self.ctx_size}")
        return f"-np {self.parallel} -b {self.batch} -ub {self.ubatch} -c {self.ctx_size}"

    def settings(self) -> dict[str, int]:
        return {"parallel": self.parallel, "batch": self.batch, "ubatch": self.ubatch,
                "ctx_per_slot": self.ctx_per_slot, "ctx_size": self.ctx_size}


def grid(parallel: list[int], pairs: list[tuple[int, int]], ctx_per_slot: int) -> list[Candidate]:
    """Every candidate, in walk order: (batch, ubatch) largest first, slots ascending within each."""
    ordered = sorted(set(pairs), key=lambda p: (-p[0], -p[1]))
    return [Candidate(p, b, u, ctx_per_slot) for b, u in ordered for p in sorted(set(parallel))]
