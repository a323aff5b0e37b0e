"""One vocabulary per axis: the runtimes (``runtimes.registry.RUNTIMES``), the exporter's flavours
(``exporter.flavours.ADAPTERS``) and the client APIs (``core.api``), each declared once, and every list that
spells one of them read from its table.

The last test plants a runtime (a "vllm" entry and its launcher) and walks it through what the session and
the tune do with a lane's runtime: validated, grouped on a router node, started, tuned, its API checked. That
is what adding one takes: its launcher module, one entry in ``RUNTIMES`` and its launcher in
``session.parts.LAUNCHERS`` (and an adapter in ``ADAPTERS`` where llama.cpp's does not read it).
"""

from __future__ import annotations

import argparse
import contextlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, get_args

import pytest

from satbench.core.api import API_FLAVOURS, ApiFlavour, endpoint_path
from satbench.exporter import cli as exporter_cli
from satbench.exporter.adapter import EndpointFetcher
from satbench.exporter.flavours import ADAPTERS, AUTO, FLAVOURS, resolve
from satbench.exporter.llamacpp import LlamaCppAdapter
from satbench.exporter.server import ExporterConfig, build_adapter
from satbench.runtimes.processes import ProcessSet
from satbench.runtimes.registry import RUNTIMES, RuntimeKind, kind_of
from satbench.session import cli as session_cli
from satbench.session.config import LaneRuntime, SessionConfig, SessionConfigError, load_session_config, nodes_of
from satbench.session.parts import LAUNCHERS, start_runtimes
from satbench.tune.config import TuneConfig, TuneConfigError, _selected_lanes


def _choices(configure: Any, flag: str) -> list[str]:
    parser = argparse.ArgumentParser()
    configure(parser)
    action = next(a for a in parser._actions if flag in a.option_strings)
    return list(action.choices or [])


def _one_line_error(lanes: list[dict[str, Any]]) -> str:
    with pytest.raises(SessionConfigError) as caught:
        load_session_config(None, {"lanes": lanes})
    text = str(caught.value)
    assert "\n" not in text.strip()
    return text


def test_the_runtimes_are_the_three_a_session_knows() -> None:
    assert list(RUNTIMES) == ["simulator", "llamacpp", "external"]  # the order a refusal lists them in
    assert [name for name, kind in RUNTIMES.items() if kind.started] == ["simulator", "llamacpp"]
    assert [kind.server for kind in RUNTIMES.values()] == ["simulator", "llama-server", None]
    assert all(kind.name == name for name, kind in RUNTIMES.items())
    assert [kind.model_setting for kind in RUNTIMES.values()] == ["profile", "model_file", None]
    assert LaneRuntime(name="chat", profile="moe").serves == "moe"
    assert LaneRuntime(name="chat", runtime="llamacpp", model_file="m.gguf").serves == "m.gguf"
    assert LaneRuntime(name="chat", runtime="external", url="http://h:1").serves is None


def test_every_runtime_has_a_launcher_an_exporter_adapter_and_client_apis() -> None:
    assert sorted(LAUNCHERS) == sorted(RUNTIMES)
    for kind in RUNTIMES.values():
        assert kind.exporter_flavour in ADAPTERS, kind.name
        assert kind.apis and set(kind.apis) <= set(API_FLAVOURS), kind.name


def test_the_exporter_flavours_are_its_adapters_and_auto() -> None:
    assert FLAVOURS == ("llamacpp", "auto") and list(ADAPTERS) == ["llamacpp"]
    assert _choices(exporter_cli.configure, "--flavour") == list(FLAVOURS)
    assert resolve("auto") == AUTO == "llamacpp" and resolve("llamacpp") == "llamacpp"
    with pytest.raises(KeyError):
        resolve("vllm")
    with pytest.raises(ValueError, match=r"^--flavour must be one of llamacpp, auto, got 'vllm'$"):
        ExporterConfig(runtime_url="http://127.0.0.1:1", flavour="vllm")
    fetcher = EndpointFetcher("http://127.0.0.1:1")
    try:
        for flavour in FLAVOURS:
            adapter = build_adapter(ExporterConfig(runtime_url="http://127.0.0.1:1", flavour=flavour), fetcher)
            assert isinstance(adapter, LlamaCppAdapter) and adapter.flavour == "llamacpp"
    finally:
        fetcher.close()


def test_the_client_apis_are_one_table() -> None:
    assert API_FLAVOURS == get_args(ApiFlavour) == ("openai-chat", "openai-completions", "llamacpp")
    assert _choices(session_cli.configure, "--api") == ["llamacpp", "openai-chat", "openai-completions"]
    assert [endpoint_path(api) for api in API_FLAVOURS] == ["/v1/chat/completions", "/v1/completions", "/completion"]
    for api in API_FLAVOURS:
        assert LaneRuntime(name="chat", api=api).api == api


def test_a_bad_runtime_or_api_is_one_line_naming_the_setting() -> None:
    runtime = _one_line_error([{"name": "chat", "runtime": "externa"}])
    assert "lanes[chat].runtime" in runtime and "'simulator', 'llamacpp' or 'external'" in runtime
    api = _one_line_error([{"name": "chat", "api": "openai"}])
    assert "lanes[chat].api" in api and "'openai-chat', 'openai-completions' or 'llamacpp'" in api


@dataclass(frozen=True)
class _PlantedRuntime:
    url: str
    pid: int | None = None
    command: Sequence[str] = ()
    props: Mapping[str, Any] = field(default_factory=dict)

    def evidence(self) -> dict[str, Any]:
        return {"runtime": "vllm", "url": self.url}


def test_a_planted_runtime_is_one_entry_and_one_launcher(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    started: list[str] = []

    def launch(lane: LaneRuntime, config: SessionConfig, processes: ProcessSet,
               stack: contextlib.ExitStack) -> _PlantedRuntime:
        started.append(lane.name)
        return _PlantedRuntime(url=f"http://127.0.0.1:1/{lane.name}")

    monkeypatch.setitem(RUNTIMES, "vllm", RuntimeKind("vllm", server="vllm", exporter_flavour="llamacpp",
                                                      apis=("openai-chat", "openai-completions")))
    monkeypatch.setitem(LAUNCHERS, "vllm", launch)

    refused = _one_line_error([{"name": "chat", "runtime": "vlm"}])
    assert "'simulator', 'llamacpp', 'external' or 'vllm'" in refused
    api = _one_line_error([{"name": "chat", "runtime": "vllm"}])  # the lane's default API, llamacpp
    assert "lanes[chat].api" in api and "runtime vllm is not loaded through 'llamacpp'" in api
    with pytest.raises(SessionConfigError, match=r"lanes\[chat\]\.url"):
        load_session_config(None, {"lanes": [{"name": "chat", "runtime": "vllm", "api": "openai-chat",
                                              "url": "http://h:1"}]})

    config = load_session_config(None, {"lanes": [
        {"name": "chat", "runtime": "vllm", "api": "openai-chat"},
        {"name": "a", "runtime": "vllm", "api": "openai-completions", "node": "n1"},
        {"name": "b", "runtime": "vllm", "api": "openai-chat", "node": "n1"},
        {"name": "far", "runtime": "external", "url": "http://h:1"},
    ]})
    assert kind_of(config.lanes[0].runtime).server == "vllm" and config.lanes[0].started
    assert {node: [lane.name for lane in lanes] for node, lanes in nodes_of(config.lanes).items()} == {
        "n1": ["a", "b"]}
    assert [lane.key for lane in _selected_lanes(config, TuneConfig())] == ["chat", "n1/a", "n1/b"]
    with pytest.raises(TuneConfigError, match="lane far is external"):
        _selected_lanes(config, TuneConfig(lanes=["far"]))

    lone = config.model_copy(update={"lanes": config.lanes[:1]})
    said: list[str] = []
    with contextlib.ExitStack() as stack:
        endpoints = start_runtimes(lone, ProcessSet(tmp_path / "logs"), stack, said.append)
    assert started == ["chat"] and [ep.url for ep in endpoints] == ["http://127.0.0.1:1/chat"]
    assert said == ["  lane chat: vllm runtime at http://127.0.0.1:1/chat"]  # it names no model setting

    monkeypatch.setitem(RUNTIMES, "vllm", RuntimeKind("vllm", server="vllm serve", exporter_flavour="llamacpp",
                                                      apis=("openai-chat",), model_setting="model"))
    named = lone.model_copy(update={"lanes": [lone.lanes[0].model_copy(update={"model": "qwen"})]})
    said.clear()
    with contextlib.ExitStack() as stack:
        start_runtimes(named, ProcessSet(tmp_path / "logs"), stack, said.append)
    assert said == ["  lane chat: vllm serve (qwen) at http://127.0.0.1:1/chat"]
