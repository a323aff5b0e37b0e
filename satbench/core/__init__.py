"""The ground floor: the contracts every part of satbench speaks, and nothing else.

Records, the run manifest and its step windows, the step figures and their one computation from records,
the statistics (quantiles, fairness, intervals, gain per doubling), PromQL building, SSE parsing and the API
flavours, histogram bounds, the TOML config reader and its error format, loopback ports. Every other
package imports from here; this package imports none of them (``tests/test_layout.py`` keeps it so).
"""

from __future__ import annotations

__all__ = ["__version__"]

__version__ = "0.1.0"
