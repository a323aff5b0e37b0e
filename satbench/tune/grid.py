"""The candidates of a tune: server settings (slots, batch, micro-batch, context, KV layout) and their orders.

A candidate is one way to start a lane's server: ``--parallel`` slots, ``-b`` batch, ``-ub`` micro-batch,
``ctx_per_slot`` tokens of context per slot and a KV layout. Split (``--no-kv-unified``, llama-server's
default wherever ``-np`` is given) gives each slot its own ``ctx_per_slot`` cells and ``-c`` is
``parallel * ctx_per_slot``; unified (``-kvu``) is one pool of ``ctx_size`` cells every slot draws from, so a
slot may hold up to the whole pool and slots whose requests are shorter than the longest leave room to the
others. The tune adds a unified candidate only where that changes capacity: where the split one cannot fit
the memory budget, a pool that fits and still holds the longest request (``satbench.tune.memory``). The
default grid sets batch = ubatch: llama-server builds one batch of up to ``-b`` tokens per ``llama_decode`` (a
token of every decoding slot plus prompt chunks) and runs it in micro-batches of ``-ub``; every decoding slot
gets its next token only when the whole batch is done, so the decode pause is set by ``-b``, and a chunked
prefill needs ``-b`` small, not only ``-ub``.

Two orders:

- the walk (``grid``): batches from largest to smallest (then ubatch, largest first), slots ascending within
  a batch, split before unified. The largest batch has the best prefill efficiency, so it is measured first;
  if it holds every constraint, the smaller batches are dominated (``satbench.tune.search``).
- the rank (``rank``): slots ascending, then batch and ubatch descending, split before unified: the order the
  answer walks its pairwise comparisons in (``satbench.tune.answer``), cheapest first, so a candidate that
  costs more (slots: KV memory and a longer tail; a smaller batch: prefill efficiency) must earn its place.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Candidate", "grid", "rank"]


@dataclass(frozen=True, slots=True)
class Candidate:
    parallel: int
    batch: int
    ubatch: int
    ctx_per_slot: int
    kv_unified: bool = False
    pool: int | None = None  # a unified candidate's -c, where it is not parallel * ctx_per_slot

    @property
    def ctx_size(self) -> int:
        """llama-server's ``-c``: the whole KV context, shared by the slots."""
        return self.pool if self.pool is not None else self.parallel * self.ctx_per_slot

    @property
    def slot_ctx(self) -> int:
        """The context a slot may hold: its share (split), or the whole pool (unified)."""
        return self.ctx_size if self.kv_unified else self.ctx_per_slot

    @property
    def layout(self) -> str:
        return "unified" if self.kv_unified else "split"

    @property
    def id(self) -> str:
        base = f"np{self.parallel}-b{self.batch}-ub{self.ubatch}-c{self.ctx_size}"
        return base + "-kvu" if self.kv_unified else base

    def flags(self, runtime: str) -> str:
        """The server flags of this candidate: llama-server's, or ``satbench sim``'s for a simulator lane."""
        if runtime == "simulator":
            return (f"satbench sim --slots {self.parallel} --batch {self.batch} --ubatch {self.ubatch} "
                    f"-c {self.ctx_size}")
        return (f"-np {self.parallel} -b {self.batch} -ub {self.ubatch} -c {self.ctx_size}"
                + (" -kvu" if self.kv_unified else ""))

    def layout_args(self) -> list[str]:
        """The KV layout as llama-server's flag, always said: the environment's LLAMA_ARG_KV_UNIFIED applies
        wherever the command line is silent."""
        return ["-kvu"] if self.kv_unified else ["--no-kv-unified"]

    def settings(self) -> dict[str, int]:
        return {"parallel": self.parallel, "batch": self.batch, "ubatch": self.ubatch,
                "ctx_per_slot": self.ctx_per_slot, "ctx_size": self.ctx_size, "kv_unified": int(self.kv_unified)}

    def rank_key(self) -> tuple[int, int, int, int, int]:
        return self.parallel, -self.batch, -self.ubatch, int(self.kv_unified), -self.ctx_size


def grid(parallel: list[int], pairs: list[tuple[int, int]], ctx_per_slot: int) -> list[Candidate]:
    """Every split candidate, in walk order: (batch, ubatch) largest first, slots ascending within each."""
    ordered = sorted(set(pairs), key=lambda p: (-p[0], -p[1]))
    return [Candidate(p, b, u, ctx_per_slot) for b, u in ordered for p in sorted(set(parallel))]


def rank(candidates: list[Candidate]) -> list[Candidate]:
    """The answer's order (module docstring)."""
    return sorted(candidates, key=Candidate.rank_key)
