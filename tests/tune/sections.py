"""The TOML sections the tune's tests share: short windows, and a policy for plumbing rather than accuracy (a
1.5-3 s window on a loaded machine cannot hold throughput to the default interval; the tests that judge a
decision state their own windows and policy: ``test_tune_wire``)."""

from __future__ import annotations

SHORT_WINDOWS = """
[loadgen]
warmup_s = 0.2
min_window_s = 1.5
max_window_s = 3.0
min_requests = 10
drain_timeout_s = 1.0
[loadgen.ladder]
drift_reference = false  # no re-measures for the drift check: two rungs more a candidate, and not tested here
"""

PLUMBING_POLICY = """
[policy]
min_requests_per_step = 4
max_throughput_ci_ratio = 10.0  # plumbing, not accuracy: 1.5 s windows on a loaded machine
"""
