"""satbench's load generator: closed-loop users walk a concurrency ladder against each lane in turn.

Layout (pure core first, I/O edges last):

- ``config``: the validated ``LoadgenConfig`` (TOML + dotted overrides); ``example.toml`` shows every knob.
- ``workload``: seeded request specs and prompt text prepared before a step.
- ``sse``: the byte-level stream parser (token arrivals, the server's own counts).
- ``ladder``: ``next_step(previous, config)``, plateau stop and refinement.
- ``buckets``: histogram bounds shared with the exporter's relay mode.
- ``client``: one streamed request over aiohttp (timing, outcomes, the keep-alive retry).
- ``step``: one rung (warm-up, window, drain) and its records; ``selfcheck``: is the client keeping up.
- ``runner``: ``run_ladder`` / ``LadderRunner`` for the orchestrator and the CLI; ``metrics``: ``loadgen_*``.
- ``stream_server``: a minimal paced stream server for wire tests and benchmarks.

Exact step figures are computed by ``core.step_figures.compute_step_figures`` from the records.
"""

from __future__ import annotations

__all__: list[str] = []
