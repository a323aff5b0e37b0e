"""Commands start without loading what only their work needs: scipy (a second of import on this machine) and
matplotlib (drawn reports) load when first needed, so a typo in ``satbench run --set`` is a one-line error in a
fraction of a second. Checked in a fresh interpreter, by the modules it holds after the import.

But never inside a measurement: the load generator loads scipy before its first window
(``core.statistics.preload`` in ``run_ladder``). Imported on first use instead, the first window's stability
check stalled every user for the import, and a tune's first candidate failed its stability bound (35% against
25%) where it passes with scipy loaded. The recommender loads it before it serves."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

HEAVY = ("scipy", "matplotlib")


@pytest.mark.parametrize("module", [
    "satbench.session.run", "satbench.session.cli", "satbench.recommender.app", "satbench.recommender.cli",
    "satbench.exporter.cli", "satbench.simulator.cli", "satbench.loadgen.runner", "satbench.core.statistics",
    "satbench.answer.analysis", "satbench.report.render",
])
def test_a_command_starts_without_scipy_or_matplotlib(module: str) -> None:
    code = f"import json, sys, {module}; print(json.dumps(sorted({{m.split('.')[0] for m in sys.modules}})))"
    loaded = json.loads(subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True,
                                       timeout=60).stdout)
    assert not [m for m in HEAVY if m in loaded], module


def test_the_statistics_still_load_scipy_when_asked() -> None:
    from satbench.core.statistics import groups_differ, t_quantile

    assert round(t_quantile(0.95, 10), 3) == 2.228
    p = groups_differ([[1.0, 2.0, 3.0], [10.0, 11.0, 12.0]])
    assert p is not None and p < 0.1


@pytest.mark.slow
def test_the_load_generator_loads_scipy_before_its_first_window(tmp_path: Path) -> None:
    code = f"""
import asyncio, sys
from pathlib import Path
import satbench.loadgen.runner as runner
from satbench.loadgen.config import LoadgenConfig
seen = []
async def run(self):
    seen.append('scipy.stats' in sys.modules)
    raise SystemExit(0 if seen == [True] else 3)
runner.LadderRunner.run = run
config = LoadgenConfig.model_validate({{"lanes": [{{"name": "l", "url": "http://127.0.0.1:9"}}],
                                        "metrics_port": None, "progress": False}})
asyncio.run(runner.run_ladder(config, Path({str(tmp_path)!r})))
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
