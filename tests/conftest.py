"""Fixtures every folder may use, and the one rule for running the suite in parallel.

- ``shared_session``: ONE short real ``satbench run`` (``testkit.session.SHARED_LANES``) for every test that
  inspects a finished session: the session's evidence (tests/session), every dashboard panel's data
  (tests/grafana/test_panel_data.py) and the fleet-store comparison (tests/recommender/test_victoria_metrics.py),
  which is why the session remote-writes to a VictoriaMetrics where one is installed. Each test reads the run,
  none changes it. A test that uses it is marked ``slow`` and put in the ``shared_session`` ``xdist_group``,
  so that with ``pytest -n`` they all run on one worker and the session starts once.
- Parallel runs (``make test``: ``-n 2 --dist loadgroup``) send each test file to one worker, whole (its module
  fixtures start once), and each ``xdist_group`` to one worker (``pytest_xdist_make_scheduler``).
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


@pytest.hookimpl(tryfirst=True)  # before xdist names each test's group in its node id
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # a test of the shared session is slow (it waits for a whole session), and runs on the session's worker
    for item in items:
        if "shared_session" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.slow)
            item.add_marker(pytest.mark.xdist_group(SHARED_GROUP))


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """``--dist loadgroup``: whole files to a worker, and each ``xdist_group`` to one worker (xdist's
    ``loadfile`` and ``loadgroup`` at once: neither alone keeps a module fixture on one worker and a shared
    session on one worker). Any other ``--dist`` is xdist's own."""
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class FileOrGroup(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            if nodeid.rfind("@") > nodeid.rfind("]"):  # xdist's suffix for a test in an xdist_group
                return nodeid.split("@")[-1]
            return nodeid.split("::", 1)[0]

    return FileOrGroup(config, log)
