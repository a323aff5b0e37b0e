"""The session's ``relay`` lane option (the dashboards' "node vs client" row needs a relaying exporter).

A real relay session is in ``test_panel_data``; these are the config's side: off by default, accepted on
any runtime the session starts an exporter for, refused where the session starts none (``exporter_url``).
"""

from __future__ import annotations

import pytest

from satbench.session.config import LaneRuntime, SessionConfigError, load_session_config


def test_relay_is_off_by_default() -> None:
    assert LaneRuntime(name="dense").relay is False
    assert all(not lane.relay for lane in load_session_config(None).lanes)


def test_relay_is_a_lane_option() -> None:
    config = load_session_config(None, {"lanes": [{"name": "dense", "relay": True}, {"name": "moe", "profile": "moe"}]})
    assert [lane.relay for lane in config.lanes] == [True, False]
    # the load generator's lane carries no relay field: the session gives it the relay's URL instead
    assert "relay" not in config.lanes[0].at("http://127.0.0.1:1").model_dump()


def test_relay_needs_an_exporter_the_session_starts() -> None:
    with pytest.raises(SessionConfigError, match="relay"):
        load_session_config(None, {"lanes": [{"name": "node", "runtime": "external", "url": "http://10.0.0.5:8080",
                                              "exporter_url": "http://10.0.0.5:9101", "relay": True}]})
