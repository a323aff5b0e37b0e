"""Commands start without loading what only their work needs: scipy (a second of import on this machine) loads
when a statistic is first computed, matplotlib when a report is drawn. A typo in ``satbench run --set`` is then
a one-line error in a fraction of a second, and every process a session starts (recommender, exporter,
simulator) is up sooner. Checked in a fresh interpreter, by the modules it holds after the import."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

HEAVY = ("scipy", "matplotlib")


@pytest.mark.parametrize("module", [
    "satbench.session.run", "satbench.session.cli", "recommender.app", "recommender.cli", "exporter.cli",
    "simulator.cli", "loadgen.runner", "core.statistics", "recommender.analysis", "satbench.report.render",
])
def test_a_command_starts_without_scipy_or_matplotlib(module: str) -> None:
    code = f"import json, sys, {module}; print(json.dumps(sorted({{m.split('.')[0] for m in sys.modules}})))"
    loaded = json.loads(subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True,
                                       timeout=60).stdout)
    assert not [m for m in HEAVY if m in loaded], module


def test_the_statistics_still_load_scipy_when_asked() -> None:
    from core.statistics import groups_differ, t_quantile

    assert round(t_quantile(0.95, 10), 3) == 2.228
    p = groups_differ([[1.0, 2.0, 3.0], [10.0, 11.0, 12.0]])
    assert p is not None and p < 0.1
