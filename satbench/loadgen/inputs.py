"""The files a load generator config names (a recorded trace, a conversation dataset, an agent trajectory corpus),
read and checked once.

A session checks its inputs whole before anything starts (a bad file is bad input, exit 2, with no run folder),
and the ladder walk then replays them: both must see the same bytes, and a file of a few hundred megabytes should
not be read, parsed and hashed twice. The entry point reads them here once and hands the result down
(``LadderRunner(inputs=...)``, ``run_session(inputs=...)``); a walk given none reads its config's files itself.
"""

from __future__ import annotations

from dataclasses import dataclass

from satbench.loadgen.agent_walk import AgentCorpus, load_agent_corpus
from satbench.loadgen.config import LoadgenConfig
from satbench.loadgen.datasets import Dataset, load_dataset
from satbench.loadgen.traces import Trace, load_trace

__all__ = ["Inputs", "load_inputs"]


@dataclass(frozen=True, slots=True)
class Inputs:
    """A config's trace window, its dataset (filtered and sampled) and its agent trajectories, each ``None`` where
    it names none."""

    trace: Trace | None = None
    dataset: Dataset | None = None
    agents: AgentCorpus | None = None


def load_inputs(config: LoadgenConfig) -> Inputs:
    """Reads and checks the config's trace, dataset and trajectory files, each once; ``TraceError`` (or
    ``core.agents.TrajectoryError``) names a bad one in one line."""
    return Inputs(load_trace(config.trace), load_dataset(config.workload.dataset), load_agent_corpus(config.agents))
