"""The fleet config: ``[[nodes]]`` and ``[fleet] file_sd`` become lanes keyed by node, and bad input is refused
in one line that names the setting."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from satbench.session.config import SessionConfigError, load_session_config


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "fleet.toml"
    path.write_text(text)
    return path


NODE = """
[[nodes]]
name = "{name}"
labels = {{ gpu = "{gpu}" }}
[[nodes.lanes]]
name = "dense"
runtime = "external"
url = "http://10.0.0.{n}:8080"
[[nodes.lanes]]
name = "moe"
runtime = "external"
url = "http://10.0.0.{n}:8081"
"""


def test_nodes_become_lanes_keyed_by_node_and_lane(tmp_path: Path) -> None:
    text = NODE.format(name="a", gpu="h100", n=1) + NODE.format(name="b", gpu="l40s", n=2)
    config = load_session_config(_write(tmp_path, text))
    assert [lane.key for lane in config.lanes] == ["a/dense", "a/moe", "b/dense", "b/moe"]
    assert config.lane("b/moe").url == "http://10.0.0.2:8081" and config.lane("b/moe").node_name == "b"
    assert config.node_labels("a") == {"gpu": "h100"} and config.node_labels("nowhere") == {}


@pytest.mark.parametrize(("text", "says"), [
    (NODE.format(name="a", gpu="x", n=1) + NODE.format(name="a", gpu="y", n=2), "duplicate node names: a"),
    (NODE.format(name="local", gpu="x", n=1), "'local' is reserved"),
    (NODE.format(name="a", gpu="x", n=1).replace('name = "moe"', 'name = "dense"'), "duplicate lane names: a/dense"),
    (NODE.format(name="a", gpu="x", n=1).replace('labels = { gpu = "x" }', 'labels = { "bad-name" = "x" }'),
     "bad-name"),
    (NODE.format(name="a", gpu="x", n=1).replace('name = "moe"\n', 'name = "moe"\nnode = "b"\n'),
     "lane moe names another node (b)"),
])
def test_bad_fleets_are_refused_in_one_line(tmp_path: Path, text: str, says: str) -> None:
    with pytest.raises(SessionConfigError) as err:
        load_session_config(_write(tmp_path, text))
    message = str(err.value)
    assert says in message and "\n" not in message.strip(), message


def test_file_sd_targets_are_lanes_of_their_nodes(tmp_path: Path) -> None:
    targets = tmp_path / "targets.json"
    targets.write_text(json.dumps([
        {"targets": ["10.0.0.1:9101"], "labels": {"node": "a", "lane": "dense", "url": "http://10.0.0.1:8080",
                                                  "gpu": "h100", "__meta_x": "dropped"}},
        {"targets": ["10.0.0.1:9102"], "labels": {"node": "a", "lane": "moe", "url": "http://10.0.0.1:8081",
                                                  "model": "moe-30b"}},
        {"targets": ["10.0.0.2:9101"], "labels": {"node": "b", "lane": "dense", "url": "http://10.0.0.2:8080"}},
    ]))
    config = load_session_config(_write(tmp_path, f'[fleet]\nfile_sd = ["{targets}"]\n'))
    assert [lane.key for lane in config.lanes] == ["a/dense", "a/moe", "b/dense"]
    moe = config.lane("a/moe")
    assert moe.runtime == "external" and moe.exporter_url == "http://10.0.0.1:9102" and moe.model == "moe-30b"
    assert config.node_labels("a") == {"gpu": "h100"}


def test_a_file_sd_target_without_its_runtime_url_is_refused(tmp_path: Path) -> None:
    targets = tmp_path / "targets.json"
    targets.write_text(json.dumps([{"targets": ["10.0.0.1:9101"], "labels": {"node": "a", "lane": "dense"}}]))
    with pytest.raises(SessionConfigError, match=r"fleet.file_sd: .* labels need url"):
        load_session_config(_write(tmp_path, f'[fleet]\nfile_sd = ["{targets}"]\n'))
