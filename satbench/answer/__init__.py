"""Judgement: what a good answer is, on a floor of its own between the ground and the parts.

The policy (``policy``), the checks and their verdicts (``verdicts``), the throughput curve (``curve``), the
lane answer (``analysis``), the rate, trace and prefill answers (``rate_analysis``, ``trace_analysis``,
``prefill_analysis``), and the recommendations document's models and builder (``models``,
``open_loop_models``, ``document``). These are pure: measured figures in, an answer out, no I/O. The parts
may import this floor (the recommender serves its answers, the load generator reads the policy), it imports
only the ground (docs/DESIGN.md, "The tree").
"""
