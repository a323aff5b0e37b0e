"""Fixtures every folder may use, and the one rule for running the suite in parallel.

- ``shared_session``: ONE short real ``satbench run`` (``testkit.session.SHARED_LANES``) for every test that
  inspects a finished session: the session's evidence and its router node (tests/session), every dashboard
  panel's data (tests/grafana/test_panel_data.py) and the fleet-store comparison
  (tests/recommender/test_victoria_metrics.py), which is why the session remote-writes to a VictoriaMetrics
  where one is installed. Each test reads the run,
  none changes it. A test that uses it is marked ``slow``, and its file is one of ``SHARED_SESSION_FILES``
  (a test elsewhere that asks for it is a usage error naming this list).
- Parallel runs (``make test``: ``-n 2 --dist loadgroup``) send each test file to one worker, whole (its module
  fixtures start once), and the shared session's files to one worker together, so the session starts once
  (``pytest_xdist_make_scheduler``); the units with a slow test are handed out first.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from testkit.session import PLANTED_KEY_ENV, PLANTED_SECRET, SHARED_LANES, SharedSession, run_session

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
        run = run_session(tmp_path_factory.mktemp("shared-session"), "--set", SHARED_LANES, *remote,
                          env={PLANTED_KEY_ENV: PLANTED_SECRET})
        yield SharedSession(run, store)


def scope(nodeid: str) -> str:
    """The unit a parallel run gives one worker: the shared session's files together, else one file."""
    path = nodeid.split("::", 1)[0]
    return SHARED_GROUP if path in SHARED_SESSION_FILES else path


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # a test of the shared session is slow (it waits for a whole session), and its file is listed
    for item in items:
        if "shared_session" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.slow)
            if item.nodeid.split("::", 1)[0] not in SHARED_SESSION_FILES:
                raise pytest.UsageError(f"{item.nodeid} reads the shared session: add its file to "
                                        "SHARED_SESSION_FILES in tests/conftest.py (they run on one worker)")
    if hasattr(config, "workerinput"):  # a parallel run's worker: the units with a slow test first (each
        # worker sorts the same collection the same way), so the many quick ones fill the end evenly
        slow = {scope(item.nodeid) for item in items if item.get_closest_marker("slow")}
        items.sort(key=lambda item: scope(item.nodeid) not in slow)


@pytest.hookimpl(optionalhook=True)  # a hook of pytest-xdist: a run without the plugin loads this file too
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """``--dist loadgroup``: whole files to a worker, and the files of the shared session to one worker
    together (xdist's ``loadfile``, plus one group; xdist's own ``xdist_group`` suffix does not reach the
    scheduler under pytest 9, whose node ids are no longer the attribute xdist rewrites). Any other
    ``--dist`` is xdist's own."""
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class FileOrGroup(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return scope(nodeid)

    return FileOrGroup(config, log)
