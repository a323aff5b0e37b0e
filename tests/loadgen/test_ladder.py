from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

import pytest

from satbench.core.figures import Quantiles, StepFigures
from satbench.loadgen.config import ConfigError, LadderConfig, load_config
from satbench.loadgen.ladder import extension_stop, next_step


def fig(c: int, tput: float, valid: bool = True, *, ttft_p95: float | None = None, itl_p95: float | None = None,
        errors: int = 0, reason: str | None = None) -> StepFigures:
    return StepFigures(lane="a", concurrency=c, window_s=10, requests=100 - errors, errors=errors,
                       throughput_tok_s=tput, requests_per_s=1.0, ttft_s=Quantiles(p95=ttft_p95),
                       itl_s=Quantiles(p95=itl_p95), valid=valid, reason=reason)


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


# Extension: past the listed rungs, doubling while the newest rung still pays.

EXTEND = LadderConfig(concurrency=[1, 2, 4], extend=True)
GROWING = {c: 100.0 * c for c in (1, 2, 4, 8, 16, 32, 64, 128)}


def walk_figures(ladder: LadderConfig, figures: Mapping[int, StepFigures]) -> tuple[list[int], str | None]:
    """The rungs measured against fixed per-rung figures, and why the extension ended."""
    done: list[StepFigures] = []
    while (c := next_step(done, ladder)) is not None:
        done.append(figures[c])
        assert len(done) < 20
    return [f.concurrency for f in done], extension_stop(done, ladder)


def test_extension_doubles_while_gaining_up_to_the_cap() -> None:
    ladder = EXTEND.model_copy(update={"max_concurrency": 32})
    rungs, why = walk_figures(ladder, {c: fig(c, t) for c, t in GROWING.items()})
    assert rungs == [1, 2, 4, 8, 16, 32]
    assert why == "reached ladder.max_concurrency 32"
    assert ladder.max_rung == 32


def test_extension_stops_below_a_cap_that_is_no_doubling() -> None:
    ladder = EXTEND.model_copy(update={"max_concurrency": 12})
    rungs, why = walk_figures(ladder, {c: fig(c, t) for c, t in GROWING.items()})
    assert rungs == [1, 2, 4, 8]
    assert why == "next doubling c=16 above ladder.max_concurrency 12"
    assert ladder.max_rung == 8


def test_extension_stops_on_a_plateau() -> None:
    curve = {**GROWING, 16: 800.0 * 1.04}  # c=8 -> 16 gains 4 % per doubling
    rungs, why = walk_figures(EXTEND, {c: fig(c, t) for c, t in curve.items()})
    assert rungs == [1, 2, 4, 8, 16]
    assert why == "throughput gained 4% per doubling, less than 10%"


def test_extension_stops_at_once_when_the_listed_top_is_flat() -> None:
    curve = {**GROWING, 4: 200.0}
    rungs, why = walk_figures(EXTEND, {c: fig(c, t) for c, t in curve.items()})
    assert rungs == [1, 2, 4]
    assert why == "throughput gained 0% per doubling, less than 10%"


def test_extension_stops_on_a_broken_ttft_objective() -> None:
    ladder = EXTEND.model_copy(update={"extend_ttft_p95_s": 2.0})
    figures = {c: fig(c, t, ttft_p95=0.1 * c) for c, t in GROWING.items()}
    figures[32] = fig(32, GROWING[32], ttft_p95=2.3)
    rungs, why = walk_figures(ladder, figures)
    assert rungs == [1, 2, 4, 8, 16, 32]
    assert why == "TTFT p95 2.3 s above 2 s"


def test_extension_stops_where_too_many_requests_passed_their_own_ttft_deadline() -> None:
    """Deadlines that grow with the prompt: a TTFT p95 of 9 s is no breach where each request had 10 s; 8 of 100
    past their own deadline is, beyond the 5 % a p95 allows."""
    ladder = EXTEND.model_copy(update={"extend_ttft_late_share": 0.05})
    figures = {c: replace(fig(c, t, ttft_p95=9.0), judged_requests=100, objective_misses={"ttft": 2} if c < 32 else {})
               for c, t in GROWING.items()}
    figures[32] = replace(figures[32], objective_misses={"ttft": 8, "tpot": 3})
    rungs, why = walk_figures(ladder, figures)
    assert rungs == [1, 2, 4, 8, 16, 32]
    assert why == "8 of 100 requests past their own TTFT deadline, more than 5%"
    unjudged = {c: fig(c, t, ttft_p95=9.0) for c, t in GROWING.items()}  # no goodput counts: not a breach
    assert walk_figures(ladder, unjudged)[0][-1] == 64


def test_extension_stops_on_a_broken_itl_objective() -> None:
    ladder = EXTEND.model_copy(update={"extend_itl_p95_s": 0.2})
    figures = {c: fig(c, t, itl_p95=0.05) for c, t in GROWING.items()}
    figures[8] = fig(8, GROWING[8], itl_p95=0.25)
    rungs, why = walk_figures(ladder, figures)
    assert rungs == [1, 2, 4, 8]
    assert why == "ITL p95 0.25 s above 0.2 s"


def test_unchecked_or_unknown_latencies_never_stop_the_extension() -> None:
    slow = {c: fig(c, t, ttft_p95=9.0, itl_p95=9.0) for c, t in GROWING.items()}
    assert walk_figures(EXTEND, slow)[0][-1] == 64  # objectives None: unchecked
    strict = EXTEND.model_copy(update={"extend_ttft_p95_s": 2.0, "extend_itl_p95_s": 0.2})
    unknown = {c: fig(c, t) for c, t in GROWING.items()}  # quantiles None: unknown, not broken
    assert walk_figures(strict, unknown) == ([1, 2, 4, 8, 16, 32, 64], "reached ladder.max_concurrency 64")


def test_extension_stops_on_errors() -> None:
    figures = {c: fig(c, t) for c, t in GROWING.items()}
    figures[16] = fig(16, GROWING[16], errors=3)
    rungs, why = walk_figures(EXTEND, figures)
    assert rungs == [1, 2, 4, 8, 16]
    assert why == "errors 3% above 1%"


def test_extension_stops_on_an_invalid_rung() -> None:
    figures = {c: fig(c, t) for c, t in GROWING.items()}
    figures[16] = fig(16, GROWING[16], valid=False, reason="loop lag p99 31 ms")
    rungs, why = walk_figures(EXTEND, figures)
    assert rungs == [1, 2, 4, 8, 16]
    assert why == "rung c=16 invalid: loop lag p99 31 ms"
    assert extension_stop([fig(1, 100), fig(2, 0, valid=False)], EXTEND) == "rung c=2 invalid"


def test_extension_compares_with_the_valid_rung_below() -> None:
    # c=4 invalid: c=8 is judged against c=2 (gain 100 % per doubling), so the walk goes on.
    done = [fig(1, 100), fig(2, 200), fig(4, 0, valid=False), fig(8, 800)]
    assert extension_stop(done, EXTEND) is None
    assert next_step(done, EXTEND) == 16


def test_without_extend_the_walk_is_the_listed_rungs() -> None:
    assert walk_figures(LadderConfig(concurrency=[1, 2, 4]), {c: fig(c, t) for c, t in GROWING.items()})[0] == [
        1, 2, 4]
    assert LadderConfig().extend is False and LadderConfig().max_rung == 8


def test_plateau_stop_ends_the_walk_before_any_extension() -> None:
    ladder = LadderConfig(concurrency=[1, 2, 4, 8], plateau_stop=True, extend=True)
    assert walk(ladder, CURVE) == [1, 2, 4, 8]  # 4 -> 8 is flat: the walk ends on the listed rungs
    curve = {**CURVE, 8: 600, 16: 605, 32: 700}
    assert walk(ladder, curve) == [1, 2, 4, 8, 16]  # the extension's own plateau ends it too


def test_refinement_follows_the_extension_and_does_not_restart_it() -> None:
    ladder = LadderConfig(concurrency=[1, 2, 4], extend=True, refine=True)
    curve = {1: 100, 2: 200, 4: 400, 8: 800, 16: 810, 12: 600, 32: 1600}
    assert walk(ladder, curve) == [1, 2, 4, 8, 16, 12]


def test_a_listed_rung_above_the_cap_is_refused() -> None:
    with pytest.raises(ValueError, match=r"above max_concurrency"):
        LadderConfig(concurrency=[1, 128])
    with pytest.raises(ConfigError) as err:
        load_config(None, {"ladder.concurrency": [1, 16], "ladder.max_concurrency": 8})
    assert "[16] above max_concurrency (8)" in str(err.value)
    assert LadderConfig(concurrency=[1, 64]).max_concurrency == 64
