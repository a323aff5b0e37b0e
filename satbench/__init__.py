"""satbench's top floor: the session, the evidence folder, the report, dashboards and the console script.

It imports the parts (``simulator``, ``loadgen``, ``exporter``, ``recommender``) and the ground (``core``);
nothing below imports it. The version lives in ``core`` so every floor can stamp it.
"""

from __future__ import annotations

from satbench.core import __version__

__all__ = ["__version__"]
