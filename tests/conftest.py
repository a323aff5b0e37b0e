"""Fixtures every folder may use, and the one rule for running the suite in parallel.

- ``shared_session``: ONE short real ``satbench run`` (``testkit.session.SHARED_LANES``) for every test that
  inspects a finished session: the session's evidence and its router node (tests/session), every dashboard
  panel's data (tests/grafana/test_panel_data.py) and the fleet-store comparison
  (tests/recommender/test_victoria_metrics.py), which is why the session remote-writes to a VictoriaMetrics
  where one is installed. Each test reads the run,
  none changes it. A test that uses it is marked ``slow``, and its file is one of ``SHARED_SESSION_FILES``
  (a test elsewhere that asks for it is a usage error naming this list).
- Parallel runs (``make test``) come in two phases. First every test but the live ones, five workers
  (``-n 5 --dist loadgroup``: those tests mostly wait on children and servers, so five keep two cores busy);
  then the live ones (``LIVE_FILES``, marked ``live`` here), two workers. A live test walks windows on the wall
  clock and asserts what they measured (a verdict, a knee, a window's length, a scrape's timing): on two cores
  shared with four other workers the client lagged its own reads and the runtime its own steps, rungs were voided
  or mis-measured, and a different handful of them failed each run (seven of 2,719 in one CI run). Two at once
  leave each about a core, and the suite's other tests never run beside them (three at once failed one live test
  in one full run, three in the next: a session's drain, the fleet comparison, a starvation verdict).
  Each test file goes to one worker, whole (its module fixtures start once), and the shared session's files to
  one worker together, so the session starts once (``pytest_xdist_make_scheduler``). The files of
  ``PER_TEST_FILES`` (long, independent tests: each starts its own runtimes) are split, one test per unit. Units
  are handed out longest first, by the seconds ``unit_seconds.json`` recorded (longest-processing-time first: the
  phase ends when its last long unit does, so a long one handed out last sets the wall time; xdist's own order,
  by number of tests, put them last).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings

from testkit.session import PLANTED_KEY_ENV, PLANTED_SECRET, SHARED_LANES, SharedSession, run_session

# the suite is deterministic: property tests draw the same examples on every run (a seed derived from each test),
# and keep no example database between runs (a clean clone and a reused checkout run the same tests)
settings.register_profile("satbench", derandomize=True, database=None)
settings.load_profile("satbench")

FIXTURES = Path(__file__).parent / "fixtures"
SHARED_GROUP = "shared_session"
SHARED_SESSION_FILES = frozenset({
    "tests/session/test_session.py",
    "tests/session/test_session_artefacts.py",
    "tests/session/test_router_node.py",
    "tests/grafana/test_panel_data.py",
    "tests/recommender/test_victoria_metrics.py",
})


@pytest.fixture(scope="session")
def llamacpp_fixtures() -> Path:
    """Recorded payloads of a real llama-server (see tests/fixtures/llamacpp/README.md)."""
    return FIXTURES / "llamacpp"


@pytest.fixture(scope="session")
def shared_session(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SharedSession]:
    from testkit.victoria import VictoriaMetricsProcess, victoria_metrics_binary

    with contextlib.ExitStack() as stack:
        store = stack.enter_context(VictoriaMetricsProcess()) if victoria_metrics_binary() else None
        remote = ["--set", f'prometheus.remote_write=["{store.write_url}"]'] if store is not None else []
        run = run_session(tmp_path_factory.mktemp("shared-session"), "--set", SHARED_LANES,
                          "--set", "loadgen.ladder.drift_reference=true", *remote,
                          env={PLANTED_KEY_ENV: PLANTED_SECRET})
        yield SharedSession(run, store)


# Each parallel unit's seconds as last measured (``make test-durations``; units under a second left out): the
# order units are handed out, longest first. pytest-split keeps its ``.test_durations`` the same way.
UNIT_SECONDS = Path(__file__).parent / "unit_seconds.json"
UNKNOWN_SLOW_S, UNKNOWN_S = 5.0, 0.05

# Files whose tests walk live windows and judge what they measured (the second phase of ``make test``, two
# workers, nothing else beside them); the shared session's files are live too
LIVE_FILES = frozenset({
    "tests/agents/test_agent_walk.py",
    "tests/exporter/test_simulator.py",
    "tests/faults/test_drift_live.py",
    "tests/faults/test_partial_runs.py",
    "tests/faults/test_runtime_faults.py",
    "tests/fleet_shards/test_fleet_acceptance.py",
    "tests/loadgen/test_chunked_wire.py",
    "tests/loadgen/test_open_loop.py",
    "tests/loadgen/test_pacer.py",
    "tests/loadgen/test_prefill_walk.py",
    "tests/loadgen/test_runner_policies.py",
    "tests/loadgen/test_senders.py",
    "tests/loadgen/test_simulator.py",
    "tests/loadgen/test_stream_server.py",
    "tests/loadgen/test_tails_wire.py",
    "tests/loadgen/test_wire.py",
    "tests/plan/test_engine_truth.py",
    "tests/rates/test_session_rates.py",
    "tests/rates/test_truth.py",
    "tests/recommender/test_end_to_end.py",
    "tests/recommender/test_live_verdicts.py",
    "tests/session/test_first_hour.py",
    "tests/session/test_fleet.py",
    "tests/session/test_recorded_traffic.py",
    "tests/traces/test_session_traffic.py",
    "tests/traces/test_trace_answer.py",
    "tests/traces/test_trace_replay.py",
    "tests/traces/test_trace_window.py",
    "tests/tune/test_tune_control.py",
    "tests/tune/test_tune_edges.py",
    "tests/tune/test_tune_wire.py",
})

# Files whose tests are long and share nothing wider than a test (checked at collection): one test per unit
PER_TEST_FILES = frozenset({
    "tests/recommender/test_live_verdicts.py",
    "tests/loadgen/test_prefill_walk.py",
    "tests/tune/test_tune_wire.py",
    "tests/tune/test_tune_control.py",
    "tests/tune/test_tune_edges.py",
    "tests/rates/test_truth.py",
    "tests/traces/test_session_traffic.py",
    "tests/traces/test_trace_answer.py",
})
_SHARED_SCOPES = ("module", "class", "package")


def scope(nodeid: str) -> str:
    """The unit a parallel run gives one worker: the shared session's files together, a test of
    ``PER_TEST_FILES`` alone, else one file."""
    path = nodeid.split("::", 1)[0]
    if path in SHARED_SESSION_FILES:
        return SHARED_GROUP
    return nodeid if path in PER_TEST_FILES else path


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # a test of the shared session is slow (it waits for a whole session), and its file is listed
    for item in items:
        path = item.nodeid.split("::", 1)[0]
        if path in LIVE_FILES or path in SHARED_SESSION_FILES:
            item.add_marker(pytest.mark.live)
        if "shared_session" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.slow)
            if path not in SHARED_SESSION_FILES:
                raise pytest.UsageError(f"{item.nodeid} reads the shared session: add its file to "
                                        "SHARED_SESSION_FILES in tests/conftest.py (they run on one worker)")
        if path in PER_TEST_FILES:
            shared = sorted(name for name, defs in item._fixtureinfo.name2fixturedefs.items()
                            if any(d.scope in _SHARED_SCOPES for d in defs))
            if shared:
                raise pytest.UsageError(f"{item.nodeid} shares fixture(s) {', '.join(shared)} with the tests of its "
                                        "file: remove the file from PER_TEST_FILES in tests/conftest.py")
    if hasattr(config, "workerinput"):  # a parallel run's worker: the longest units first (each worker sorts
        # the same collection the same way; the scheduler keeps this order), so the quick ones fill the end
        cost = unit_estimates(items)
        items.sort(key=lambda item: -cost[scope(item.nodeid)])


def unit_estimates(items: list[pytest.Item]) -> dict[str, float]:
    """Each unit's seconds as ``UNIT_SECONDS`` recorded them, else ``UNKNOWN_SLOW_S`` per slow test and
    ``UNKNOWN_S`` per other (a unit new since the record, or renamed)."""
    recorded = json.loads(UNIT_SECONDS.read_text()) if UNIT_SECONDS.exists() else {}
    guessed: dict[str, float] = {}
    for item in items:
        unit = scope(item.nodeid)
        guessed[unit] = guessed.get(unit, 0.0) + (UNKNOWN_SLOW_S if item.get_closest_marker("slow") else UNKNOWN_S)
    return {unit: float(recorded.get(unit, guess)) for unit, guess in guessed.items()}


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--record-unit-seconds", action="store_true",
                     help=f"write each parallel unit's measured seconds to {UNIT_SECONDS.name} (make test-durations)")


_measured: dict[str, float] = {}


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    # a parallel run's controller sees every worker's reports; setup, call and teardown all count
    unit = scope(report.nodeid)
    _measured[unit] = _measured.get(unit, 0.0) + report.duration


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if session.config.getoption("record_unit_seconds") and not hasattr(session.config, "workerinput"):
        # a run records the units it ran and keeps what an earlier run (the other phase) recorded of the rest
        root = Path(session.config.rootpath)
        earlier = json.loads(UNIT_SECONDS.read_text()) if UNIT_SECONDS.exists() else {}
        merged = {unit: s for unit, s in earlier.items()
                  if unit == SHARED_GROUP or (root / unit.split("::", 1)[0]).is_file()} | _measured
        kept = {unit: round(s, 1) for unit, s in sorted(merged.items(), key=lambda kv: -kv[1]) if s >= 1.0}
        UNIT_SECONDS.write_text(json.dumps(kept, indent=1) + "\n")


@pytest.hookimpl(optionalhook=True)  # a hook of pytest-xdist: a run without the plugin loads this file too
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """``--dist loadgroup``: whole files to a worker, and the files of the shared session to one worker
    together (xdist's ``loadfile``, plus one group; xdist's own ``xdist_group`` suffix does not reach the
    scheduler under pytest 9, whose node ids are no longer the attribute xdist rewrites). Any other ``--dist``
    is xdist's own."""
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class FileOrGroup(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return scope(nodeid)

    config.option.loadscopereorder = False  # the workers' order above, not xdist's by number of tests
    return FileOrGroup(config, log)
