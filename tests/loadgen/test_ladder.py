from __future__ import annotations

from collections.abc import Mapping

import pytest

from core.figures import StepFigures
from loadgen.config import LadderConfig
from loadgen.ladder import next_step


def fig(c: int, tput: float, valid: bool = True) -> StepFigures:
    return StepFigures(lane="a", concurrency=c, window_s=10, requests=10, errors=0, throughput_tok_s=tput,
                       requests_per_s=1.0, valid=valid)


def walk(ladder: LadderConfig, curve: Mapping[int, float]) -> list[int]:
    done: list[StepFigures] = []
    while (c := next_step(done, ladder)) is not None:
        done.append(fig(c, curve[c]))
        assert len(done) < 20
    return [f.concurrency for f in done]


CURVE = {1: 100, 2: 190, 3: 240, 4: 300, 5: 305, 6: 310, 8: 305, 16: 300}


@pytest.mark.parametrize(("ladder", "expected"), [
    (LadderConfig(), [1, 2, 4, 8]),
    (LadderConfig(concurrency=[8, 1, 4]), [8, 1, 4]),
    (LadderConfig(concurrency=[1, 2, 4, 8, 16], plateau_stop=True), [1, 2, 4, 8]),
    (LadderConfig(concurrency=[1, 2, 4, 8, 16], plateau_stop=True, plateau_patience=2), [1, 2, 4, 8, 16]),
    (LadderConfig(concurrency=[1, 2, 4, 8, 16], plateau_stop=True, plateau_min_gain=0.0), [1, 2, 4, 8, 16]),
    (LadderConfig(concurrency=[1, 2, 4, 8, 16], plateau_stop=True, refine=True), [1, 2, 4, 8, 6]),
    (LadderConfig(concurrency=[1, 2, 4, 8], refine=True), [1, 2, 4, 8, 6]),
    (LadderConfig(concurrency=[1, 2, 4, 8], refine=True, refine_steps=0), [1, 2, 4, 8]),
    (LadderConfig(concurrency=[1, 2, 4, 8], refine=True, refine_steps=3), [1, 2, 4, 8, 6, 5]),
    (LadderConfig(concurrency=[1, 2, 4, 8, 16], refine=True, plateau_min_gain=0.7), [1, 2, 4, 8, 16, 3]),
])
def test_next_step_walks(ladder: LadderConfig, expected: list[int]) -> None:
    assert walk(ladder, CURVE) == expected


def test_invalid_steps_never_make_a_plateau() -> None:
    ladder = LadderConfig(concurrency=[1, 2, 4], plateau_stop=True)
    assert next_step([fig(1, 100), fig(2, 100, valid=False)], ladder) == 4
    assert next_step([fig(1, 100), fig(2, 100)], ladder) is None
