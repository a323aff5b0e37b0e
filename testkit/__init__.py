"""Test support shared by ``tests/`` and ``bench/``: doubles and known-truth generators, never shipped.

A stream server with exact timing, simulator and Prometheus launchers, a fixture-replaying runtime, a
synthetic run with known figures and its OpenMetrics backfill, loopback helpers. The product packages never
import this package (``tests/test_layout.py`` keeps it so); it is not installed by ``pip install``.
"""
