"""Whether a started server is the candidate the tune asked for: read back, compared, refused on a mismatch.

A command line is a request, not a fact: a wrapper script may drop ``--parallel``, the environment's
``LLAMA_ARG_*`` fill what the line leaves out, ``--fit`` may move layers off a full GPU, a build may pad or
cap the context. Measuring such a server under the candidate's name would blame its throughput on settings
it does not have. So after each start the tune reads back

- ``GET /props``: ``total_slots`` (the slots) and ``default_generation_settings.n_ctx`` (each slot's
  context: the candidate's share, or the whole pool for a unified KV cache);
- llama-server's own start-up lines (``satbench.runtimes.llamacpp.StartupLog``, where its log has them):
  slots, context per slot and KV layout as the server built them, layers offloaded (``N/M``), and the KV
  bytes it allocated (recorded beside the model's arithmetic, ``satbench.tune.memory``);

and a mismatch marks the candidate ``refused`` with the reason: another slot count, less context per slot
than the candidate's (more is a padding, noted), another KV layout, or fewer layers on the GPU than asked
(every one, unless the lane's ``server_args`` set ``-ngl`` lower). A figure the server does not publish (no
``/props``, a log without those lines) is no mismatch: the candidate is measured and its read-back says
what went unverified (``notes``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from satbench.runtimes.llamacpp import StartupLog
from satbench.tune.grid import Candidate
from satbench.tune.models import Readback

__all__ = ["verify"]


def verify(candidate: Candidate, props: Mapping[str, Any], startup: StartupLog | None,
           gpu_layers: int | None = None) -> tuple[list[str], Readback]:
    """The mismatches between ``candidate`` and what the server reports (empty: it is the candidate), and the
    read-back as ``tune.json`` records it. ``gpu_layers``: the ``-ngl`` the lane asked, None for every layer."""
    problems: list[str] = []
    notes: list[str] = []
    slots = props.get("total_slots")
    n_ctx = (props.get("default_generation_settings") or {}).get("n_ctx")
    want_ctx = candidate.ctx_per_slot  # a unified slot may hold the whole pool, capped at the trained context
    if "error" in props or not isinstance(slots, int) or not isinstance(n_ctx, int):
        said = props.get("error") or "no total_slots or default_generation_settings.n_ctx"
        notes.append(f"the server's /props could not be read back ({said}): its slots and context are unverified")
    else:
        if slots != candidate.parallel:
            problems.append(f"the server runs {slots} slots (/props total_slots), the candidate asked for "
                            f"{candidate.parallel}")
        if n_ctx < want_ctx:
            problems.append(f"each slot holds {n_ctx} tokens (/props n_ctx), the candidate needs {want_ctx}")
        elif n_ctx > want_ctx and not candidate.kv_unified:
            notes.append(f"each slot holds {n_ctx} tokens, more than the candidate's {want_ctx} (padded)")
    log = startup or StartupLog()
    if log.slots is not None and log.slots != candidate.parallel:
        problems.append(f"the server's log says n_slots = {log.slots}, the candidate asked for {candidate.parallel}")
    if log.kv_unified is not None and log.kv_unified != candidate.kv_unified:
        problems.append(f"the server's log says kv_unified = {str(log.kv_unified).lower()}, the candidate asked "
                        f"for a {candidate.layout} KV cache")
    if log.offloaded_layers is not None:
        done, total = log.offloaded_layers
        want = total if gpu_layers is None else min(gpu_layers, total)
        if done < want:
            problems.append(f"the server offloaded {done}/{total} layers to the GPU, {want} asked: the rest run on "
                            "the CPU, and the candidate's throughput would be blamed on its settings")
    record = Readback(total_slots=slots if isinstance(slots, int) else None,
                      n_ctx_slot=n_ctx if isinstance(n_ctx, int) else None,
                      log=None if startup is None else startup.to_json(),
                      kv_unified=log.kv_unified if log.kv_unified is not None else (
                          None if not isinstance(n_ctx, int) else candidate.kv_unified),
                      problems=problems, notes=notes)
    return problems, record
