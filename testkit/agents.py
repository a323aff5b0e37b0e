"""End to start, checked from an agent walk's records alone (``loadgen.agent_walk``): each turn was sent no sooner
than its predecessor's end, and its sub-agents' ends, plus its tool delay."""

from __future__ import annotations

import itertools
from collections import defaultdict

from satbench.core.records import RequestRecord

__all__ = ["check_end_to_start"]

SLACK_S = 2e-3  # the records' times are the client's clock read around the send and the end


def check_end_to_start(records: list[RequestRecord]) -> tuple[int, int]:
    """Asserts end to start on every pair of consecutive turns of an agent; returns how many pairs were checked and
    how many of them waited for sub-agents."""
    by_agent: dict[tuple[int, str], list[RequestRecord]] = defaultdict(list)
    for r in records:
        tags = r.extra["agent"]
        by_agent[(tags["tree"], tags["agent"])].append(r)
    checked = after_children = 0
    for (tree, agent), turns in by_agent.items():
        turns.sort(key=lambda r: r.extra["agent"]["turn"])
        for before, after in itertools.pairwise(turns):
            k = before.extra["agent"]["turn"]
            if not before.ok or before.ended_at is None or after.extra["agent"]["turn"] != k + 1:
                continue
            children = [r for (t, a), rs in by_agent.items() if t == tree and a.startswith(f"{agent}.{k}.")
                        for r in rs]
            assert all(c.sent_at >= before.ended_at - SLACK_S for c in children), "a sub-agent began before its parent"
            ended = max([before.ended_at, *(c.ended_at or 0.0 for c in children)])
            # the records' measured times, not the client's own ready_at: sent no sooner than the ends plus the delay
            assert after.sent_at >= ended + after.extra["agent"]["delay_s"] - SLACK_S, (before, after)
            checked += 1
            after_children += bool(children)
    return checked, after_children
