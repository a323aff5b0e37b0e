"""satbench's load generator: closed-loop users walk a concurrency ladder against each lane in turn.

Layout (pure core first, I/O edges last):

- ``config``: the validated ``LoadgenConfig`` (TOML + dotted overrides); ``example.toml`` shows every knob.
- ``workload``: seeded request specs and prompt text prepared before a step.
- ``ladder``: ``next_step(previous, config)``, plateau stop and refinement.
- ``client``: one streamed request (``rawclient``: kernel-timed plain HTTP; aiohttp for HTTPS).
- ``step``: one rung (warm-up, window, drain) and its records; ``selfcheck``: is the client keeping up.
- ``runner``: ``run_ladder`` / ``LadderRunner`` for the orchestrator and the CLI; ``metrics``: ``loadgen_*``.

From the ground (``core``) it takes the SSE parser, the records, the manifest, the histograms and the one
computation of step figures (``core.step_figures.compute_step_figures``); it imports no other part.
"""

from __future__ import annotations

__all__: list[str] = []
